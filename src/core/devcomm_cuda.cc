// Device communicators of CUDA ranks, host side: the signal/barrier block,
// the private slots (signal bases, shadows, counters, barrier epochs) and
// the error word; the block registered as a one-sided window; and device
// copies of the views and of the arrays they point to, which kernels read
// (include/flagcx_device_cuda.h).  Two layouts, chosen the same on every
// rank by devCommCreate:
//  - every pair of ranks mapped by CUDA IPC (one host, all CUDA, IPC on):
//    everything in device memory, peers' blocks and DevMems mapped, kernels
//    store and load directly (with a per-peer flag: on this GPU or not,
//    from the GPU UUIDs devCommCreate exchanges, which decides the scope
//    kernels fence with);
//  - otherwise (another host, a host rank, FLAGCX_IPC_DISABLE=1), "via the
//    proxy": the block, the counters and the descriptor ring are host memory
//    the GPU maps (cudaHostAlloc mapped, same address on both sides), so the
//    one-sided engine lands remote signals where kernels poll, and the proxy
//    thread drains what kernels queue and bumps the counters; kernels see no
//    peer mapped, and DevMems must be host memory the GPU maps too (the
//    engine reaches no device memory beyond CUDA IPC).
#include <algorithm>
#include <cstring>

#include "base/base.h"
#include "core/comm.h"
#include "core/devcomm.h"

namespace flagcx {

namespace {

// A zeroed device allocation of `bytes`, kept in c->allocs.
flagcxResult_t devZero(DeviceAdapter *dev, flagcxDevCopies *c, size_t bytes, void **out) {
  FLAGCX_CHECK(dev->allocDevice(out, bytes));
  c->allocs.push_back(*out);
  std::vector<char> zero(bytes, 0);
  return dev->copy(*out, zero.data(), bytes, nullptr);
}

// A device copy of n host elements, kept in c->allocs.
template <typename T>
flagcxResult_t devCopy(DeviceAdapter *dev, flagcxDevCopies *c, const T *host, size_t n, T **out) {
  void *p = nullptr;
  size_t bytes = n ? n * sizeof(T) : sizeof(T);
  FLAGCX_CHECK(dev->allocDevice(&p, bytes));
  c->allocs.push_back(p);
  *out = static_cast<T *>(p);
  return n ? dev->copy(p, host, n * sizeof(T), nullptr) : flagcxSuccess;
}

// Every peer's part mapped here as device memory (CUDA IPC); self: its own.
bool everyPeerMapped(const RegInfo &reg, int self) {
  for (size_t r = 0; r < reg.peer.size(); r++)
    if (!reg.peer[r].mapped || (static_cast<int>(r) != self && !reg.peer[r].deviceBase))
      return false;
  return true;
}

// Zeroed host memory the GPU maps (its address is the same in kernels).
flagcxResult_t hostMapped(flagcxComm *comm, flagcxDevCopies *c, size_t bytes, void **out) {
  FLAGCX_CHECK(comm->dev->handle()->deviceMalloc(out, bytes, flagcxMemHost, nullptr));
  c->hostAllocs.push_back(*out);
  memset(*out, 0, bytes);
  return flagcxSuccess;
}

}  // namespace

flagcxResult_t cudaLayout(flagcxDevCommInternal *dc) {
  DeviceAdapter *dev = dc->comm->dev;
  flagcxDevCommView &v = dc->view;
  if (dc->viaProxy) FLAGCX_CHECK(hostMapped(dc->comm, &dc->dev, dc->blockBytes, &dc->block));
  else FLAGCX_CHECK(devZero(dev, &dc->dev, dc->blockBytes, &dc->block));
  v.words = static_cast<uint64_t *>(dc->block);
  size_t nLocal = dc->local.size();
  void *local = nullptr, *err = nullptr;
  FLAGCX_CHECK(devZero(dev, &dc->dev, nLocal * sizeof(uint64_t), &local));
  FLAGCX_CHECK(devZero(dev, &dc->dev, sizeof(int32_t), &err));
  uint64_t *base = static_cast<uint64_t *>(local);
  size_t ns = static_cast<size_t>(v.nSignals), nc = static_cast<size_t>(v.nCounters);
  v.signalBase = base;
  v.shadow = base + ns;
  v.counters = base + 2 * ns;
  v.epoch = base + 2 * ns + nc;
  v.tickets = base + nLocal - 1;  // the slot after the epochs
  v.error = static_cast<int32_t *>(err);
  v.queue = nullptr;
  if (!dc->viaProxy) return flagcxSuccess;
  // The proxy bumps the counters; the kernels queue into the ring.
  void *ctr = nullptr;
  FLAGCX_CHECK(hostMapped(dc->comm, &dc->dev, std::max<size_t>(nc, 1) * sizeof(uint64_t), &ctr));
  v.counters = static_cast<uint64_t *>(ctr);
  FLAGCX_CHECK(hostMapped(dc->comm, &dc->dev, devQueueBytes(), &dc->queueMem));
  v.queue = devQueueInit(dc->queueMem);
  return flagcxSuccess;
}

flagcxResult_t cudaPublish(flagcxDevCommInternal *dc) {
  if (!dc->viaProxy && !everyPeerMapped(dc->blockWin->reg, dc->comm->rank))
    return argError(flagcxNotSupported, kInit, "flagcxDevCommCreate: rank %d: a peer's block "
                    "could not be mapped through CUDA IPC (FLAGCX_IPC_DISABLE=1 takes the proxy)",
                    dc->comm->rank);
  DeviceAdapter *dev = dc->comm->dev;
  flagcxDevCommView d = dc->view;  // the kernels' copy: every pointer a device address
  for (int k = 0; k < 3; k++) {
    int32_t *t = nullptr;
    FLAGCX_CHECK(devCopy(dev, &dc->dev, dc->team[k].data(), dc->team[k].size(), &t));
    d.teamWorld[k] = t;
  }
  // Via the proxy kernels map no peer: only the proxy uses dc->peerWords.
  std::vector<uint64_t *> words = dc->peerWords;
  if (dc->viaProxy) std::fill(words.begin(), words.end(), nullptr);
  uint64_t **pw = nullptr;
  FLAGCX_CHECK(devCopy(dev, &dc->dev, words.data(), words.size(), &pw));
  d.peerWords = pw;
  // Narrow scopes apply to peers whose memory (and waiters) are on this GPU.
  d.sameDevice = nullptr;
  if (!dc->viaProxy) {
    uint8_t *same = nullptr;
    FLAGCX_CHECK(devCopy(dev, &dc->dev, dc->sameGpu.data(), dc->sameGpu.size(), &same));
    d.sameDevice = same;
  }
  flagcxDevCommView *dv = nullptr;
  FLAGCX_CHECK(devCopy(dev, &dc->dev, &d, 1, &dv));
  dc->dev.view = dv;
  dc->view.magic = 0;  // host calls refuse it: its words are device memory
  return flagcxSuccess;
}

flagcxResult_t cudaMemPublish(flagcxDevMemInternal *dm) {
  // Device memory: every peer maps it (CUDA IPC).  Host memory: for device
  // communicators via the proxy; kernels reach only their own part.
  bool host = !dm->reg.device;
  if (!host && !everyPeerMapped(dm->reg, dm->comm->rank))
    return argError(flagcxNotSupported, kInit, "flagcxDevMemCreate: rank %d: a CUDA rank's "
                    "device memory handle needs device memory that every peer maps through "
                    "CUDA IPC, or host memory the GPU maps (device communicators via the proxy)",
                    dm->comm->rank);
  DeviceAdapter *dev = dm->comm->dev;
  flagcxDevMemView d = dm->view;
  std::vector<char *> bases = dm->peerBase;
  if (host) std::fill(bases.begin(), bases.end(), nullptr);
  char **pb = nullptr;
  uint64_t *ps = nullptr;
  FLAGCX_CHECK(devCopy(dev, &dm->dev, bases.data(), bases.size(), &pb));
  FLAGCX_CHECK(devCopy(dev, &dm->dev, dm->peerSize.data(), dm->peerSize.size(), &ps));
  d.peerBase = pb;
  d.peerSize = ps;
  flagcxDevMemView *dv = nullptr;
  FLAGCX_CHECK(devCopy(dev, &dm->dev, &d, 1, &dv));
  dm->dev.view = dv;
  return flagcxSuccess;
}

int32_t cudaError(flagcxDevCommInternal *dc) {
  int32_t e = flagcxSuccess;
  if (dc->comm->dev->copy(&e, dc->view.error, sizeof(e), nullptr) != flagcxSuccess)
    return flagcxUnhandledDeviceError;
  return e;
}

void cudaRelease(flagcxComm *comm, flagcxDevCopies *c) {
  for (void *p : c->allocs) comm->dev->freeDevice(p);
  for (void *p : c->hostAllocs) comm->dev->handle()->deviceFree(p, flagcxMemHost, nullptr);
  c->allocs.clear();
  c->hostAllocs.clear();
  c->view = nullptr;
}

}  // namespace flagcx
