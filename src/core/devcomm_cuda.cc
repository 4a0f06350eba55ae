// Device communicators of CUDA ranks, host side: the signal/barrier block,
// the private slots (signal bases, shadows, counters, barrier epochs) and
// the error word in device memory; the block registered as a one-sided
// window, which maps every same-host peer's block by CUDA IPC; and device
// copies of the views and of the arrays they point to, which kernels read
// (include/flagcx_device_cuda.h).  Every peer must be mapped: there is no
// proxy path from CUDA kernels, so a peer on another host, or a DevMem that
// some peer cannot map, is refused with flagcxNotSupported.
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

}  // namespace

flagcxResult_t cudaLayout(flagcxDevCommInternal *dc) {
  DeviceAdapter *dev = dc->comm->dev;
  flagcxDevCommView &v = dc->view;
  FLAGCX_CHECK(devZero(dev, &dc->dev, dc->blockBytes, &dc->block));
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
  v.error = static_cast<int32_t *>(err);
  v.queue = nullptr;
  return flagcxSuccess;
}

flagcxResult_t cudaPublish(flagcxDevCommInternal *dc) {
  if (!everyPeerMapped(dc->blockWin->reg, dc->comm->rank))
    return argError(flagcxNotSupported, kInit, "flagcxDevCommCreate: rank %d: a CUDA device "
                    "communicator needs every peer mapped through CUDA IPC (one host); the proxy "
                    "path from CUDA kernels is not built", dc->comm->rank);
  DeviceAdapter *dev = dc->comm->dev;
  flagcxDevCommView d = dc->view;  // the kernels' copy: every pointer a device address
  for (int k = 0; k < 3; k++) {
    int32_t *t = nullptr;
    FLAGCX_CHECK(devCopy(dev, &dc->dev, dc->team[k].data(), dc->team[k].size(), &t));
    d.teamWorld[k] = t;
  }
  uint64_t **pw = nullptr;
  FLAGCX_CHECK(devCopy(dev, &dc->dev, dc->peerWords.data(), dc->peerWords.size(), &pw));
  d.peerWords = pw;
  flagcxDevCommView *dv = nullptr;
  FLAGCX_CHECK(devCopy(dev, &dc->dev, &d, 1, &dv));
  dc->dev.view = dv;
  dc->view.magic = 0;  // host calls refuse it: its words are device memory
  return flagcxSuccess;
}

flagcxResult_t cudaMemPublish(flagcxDevMemInternal *dm) {
  if (!dm->reg.device || !everyPeerMapped(dm->reg, dm->comm->rank))
    return argError(flagcxNotSupported, kInit, "flagcxDevMemCreate: rank %d: a CUDA rank's "
                    "device memory handle needs device memory that every peer maps through "
                    "CUDA IPC", dm->comm->rank);
  DeviceAdapter *dev = dm->comm->dev;
  flagcxDevMemView d = dm->view;
  char **pb = nullptr;
  uint64_t *ps = nullptr;
  FLAGCX_CHECK(devCopy(dev, &dm->dev, dm->peerBase.data(), dm->peerBase.size(), &pb));
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
  c->allocs.clear();
  c->view = nullptr;
}

}  // namespace flagcx
