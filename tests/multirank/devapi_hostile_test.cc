// The device API against bytes it must not trust, between real forked
// ranks over shared memory (peers' buffers mapped):
//  - descriptors in the proxy's ring (what CUDA kernels write into host
//    memory the GPU maps) naming a rank, signal row, counter or range
//    outside what the device communicator and its memory handles hold: the
//    proxy fails each (flagged, returned at destroy), touches nothing, and
//    goes on with the next; the bytes around the window are unchanged;
//  - a member that lies in flagcxDevMemCreate's exchange (its part past the
//    bytes it registered) or registers a signal block smaller than the
//    requirements make it: the honest rank's call fails instead of
//    accepting peer sizes that would reach past the peer's mapping.
// The liar plays its side of the exchange on the bootstrap itself, with
// the records devcomm.cc allgathers.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>

#include "core/comm.h"
#include "core/onesided.h"
#include "flagcx_device_unified.h"
#include "flagcx_kernel.h"
#include "tests/common/dev_ring.h"
#include "tests/common/harness.h"

namespace {

constexpr size_t kWin = 64 << 10;  // the window; as much canary after it
constexpr unsigned char kCanary = 0xab;

// A descriptor of `op` to `peer` within DevMem `mem` (source and destination).
flagcxDevDesc desc(uint32_t op, int peer, uint32_t mem) {
  flagcxDevDesc d = devring::desc(op, peer);
  d.dstMem = d.srcMem = mem;
  return d;
}

// Descriptors a corrupt kernel could write, each a step outside.
std::vector<flagcxDevDesc> hostileDescs(int peer, int n, uint32_t mem) {
  std::vector<flagcxDevDesc> v;
  flagcxDevDesc d = desc(flagcxDevOpPut, peer, mem);
  d.dstOff = kWin - 8, d.bytes = 64;  // the peer's window's end, into what follows
  v.push_back(d);
  d = desc(flagcxDevOpPut, peer, mem);
  d.srcOff = kWin, d.bytes = 64;  // this rank's bytes after its window, sent away
  v.push_back(d);
  d = desc(flagcxDevOpValue, peer, mem);
  d.dstOff = kWin;
  d.value = 0x0bad0bad0bad0badull;
  v.push_back(d);
  d = desc(flagcxDevOpGet, peer, mem);
  d.srcOff = uint64_t{1} << 40, d.bytes = 64;
  v.push_back(d);
  d = desc(flagcxDevOpGet, peer, mem);
  d.dstOff = kWin, d.bytes = 64;  // into this rank's bytes after its window
  v.push_back(d);
  d = desc(flagcxDevOpPut, n + 1000, mem);  // no such rank
  d.bytes = 8;
  v.push_back(d);
  d = desc(flagcxDevOpSignal, -1, mem);
  d.signal = 0, d.add = 1;
  v.push_back(d);
  d = desc(flagcxDevOpSignal, peer, mem);
  d.signal = 1u << 30, d.add = 1;  // far past the block's rows
  v.push_back(d);
  d = desc(flagcxDevOpSignal, peer, mem);
  d.signal = 1, d.add = 1;  // the first row past the signals and barriers
  v.push_back(d);
  d = desc(flagcxDevOpSignal, peer, mem);
  d.signal = 0, d.add = 1, d.counter = 1u << 30;
  v.push_back(d);
  d = desc(77, peer, mem);  // no such operation
  v.push_back(d);
  return v;
}

bool canaryIntact(const char *buf) {
  for (size_t i = kWin; i < 2 * kWin; i++)
    if (static_cast<unsigned char>(buf[i]) != kCanary) return false;
  return true;
}

// A rank's communicator and a kWin-byte window at the start of `bytes` of
// flagcxMemAlloc memory, as every case here sets them up; close() undoes
// both.  (RANK_CHECK returns 1 from these on a failure.)
struct RankWin {
  harness::CommOnStream cs;
  void *mem = nullptr;
  flagcxWindow_t win = nullptr;
  int open(int rank, int n, flagcxUniqueId *id, size_t bytes) {
    RANK_CHECK(cs.open(rank, n, id) == flagcxSuccess, "rank %d", rank);
    RANK_CHECK(flagcxMemAlloc(&mem, bytes, flagcxMemCCL) == flagcxSuccess, "rank %d", rank);
    RANK_CHECK(flagcxCommWindowRegister(cs.comm, mem, kWin, &win, FLAGCX_WIN_COLL_SYMMETRIC,
                                        flagcxMemCCL) == flagcxSuccess, "rank %d", rank);
    return 0;
  }
  int close(int rank) {
    RANK_CHECK(flagcxCommWindowDeregister(cs.comm, win) == flagcxSuccess, "rank %d", rank);
    RANK_CHECK(cs.close() == flagcxSuccess, "rank %d", rank);
    flagcxMemFree(mem, flagcxMemCCL);
    return 0;
  }
};

int hostileRing(int rank, int n, flagcxUniqueId *id) {
  RankWin w;
  if (int rc = w.open(rank, n, id, 2 * kWin)) return rc;
  harness::CommOnStream &cs = w.cs;
  char *buf = static_cast<char *>(w.mem);
  memset(buf, 0, kWin);
  memset(buf + kWin, kCanary, kWin);
  flagcxDevCommRequirements req = FLAGCX_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.interSignalCount = 1;
  req.interCounterCount = 1;
  flagcxDevComm_t dc;
  flagcxDevMem_t dm;
  RANK_CHECK(flagcxDevCommCreate(cs.comm, &req, &dc) == flagcxSuccess, "rank %d", rank);
  RANK_CHECK(flagcxDevMemCreate(cs.comm, buf, kWin, w.win, &dm) == flagcxSuccess, "rank %d", rank);
  const flagcxDevCommView *v = reinterpret_cast<const flagcxDevCommView *>(dc);
  uint32_t memId = reinterpret_cast<const flagcxDevMemView *>(dm)->id;
  const int peer = (rank + 1) % n;
  std::vector<flagcxDevDesc> bad = hostileDescs(peer, n, memId);
  for (const flagcxDevDesc &d : bad) devring::enqueue(v->queue, d);
  flagcxDevDesc good = desc(flagcxDevOpValue, rank, memId);
  good.value = 9;
  devring::enqueue(v->queue, good);
  // (Host ranks' flush gives up at the first error: wait for the ring here.)
  while (__atomic_load_n(&v->queue->done, __ATOMIC_ACQUIRE) < bad.size() + 1)
    std::this_thread::yield();
  RANK_CHECK(__atomic_load_n(&v->queue->failed, __ATOMIC_ACQUIRE) == 1, "rank %d", rank);
  uint64_t got;
  memcpy(&got, buf, 8);
  RANK_CHECK(got == 9, "rank %d", rank);
  // Every rank's proxy is done: nothing landed around anyone's window.
  int one = 1;
  RANK_CHECK(flagcxAllReduce(&one, &one, 1, flagcxInt32, flagcxSum, cs.comm, cs.stream) ==
                     flagcxSuccess && cs.sync() == flagcxSuccess, "rank %d", rank);
  RANK_CHECK(canaryIntact(buf), "rank %d", rank);
  for (size_t i = 8; i < kWin; i++) RANK_CHECK(buf[i] == 0, "rank %d: byte %zu", rank, i);
  RANK_CHECK(flagcxDevMemDestroy(cs.comm, dm) == flagcxSuccess, "rank %d", rank);
  RANK_CHECK(flagcxDevCommDestroy(cs.comm, dc) == flagcxInvalidArgument, "rank %d", rank);
  return w.close(rank);
}

TEST(DevApiHostile, ProxyRefusesDescriptorsOutsideItsHandles) {
  harness::Env env{{{"FLAGCX_DEVICE", "host"}, {"FLAGCX_TIMEOUT", "60"}}};
  auto res = harness::run(2, hostileRing, env, 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

// flagcxDevMemCreate's exchange (devcomm.cc): each rank's registration key
// and where its part lies in it.
struct MemRec {
  uint64_t key, off, size;
};

// Rank 1 claims a part 16 times its registration; rank 0's call must fail.
int lyingMemPart(int rank, int n, flagcxUniqueId *id) {
  RankWin w;
  if (int rc = w.open(rank, n, id, kWin)) return rc;
  harness::CommOnStream &cs = w.cs;
  if (rank == 1) {
    std::vector<MemRec> all(static_cast<size_t>(n));
    all[1] = {w.win->reg.key, kWin / 2, 16 * kWin};
    RANK_CHECK(cs.comm->bs->allgather(all.data(), sizeof(MemRec)) == flagcxSuccess, "rank %d",
               rank);
  } else {
    flagcxDevMem_t dm = nullptr;
    RANK_CHECK(flagcxDevMemCreate(cs.comm, w.mem, kWin, w.win, &dm) != flagcxSuccess, "rank %d", rank);
    RANK_CHECK(dm == nullptr, "rank %d", rank);
  }
  return w.close(rank);
}

TEST(DevApiHostile, DevMemPartOutsideRegistrationRefused) {
  harness::Env env{{{"FLAGCX_DEVICE", "host"}, {"FLAGCX_TIMEOUT", "20"}}};
  auto res = harness::run(2, lyingMemPart, env, 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

// flagcxDevCommCreate's first exchange (devcomm.cc).
struct CommRec {
  flagcxDevCommRequirements reqs;
  int32_t kind, ipc, hasGpu;
  unsigned char gpu[16];
};

// Rank 1 registers a 64-byte signal block where the requirements make it
// 16 KiB; rank 0 would add signals up to 16 KiB into its mapping of it.
int shortBlock(int rank, int n, flagcxUniqueId *id) {
  RankWin w;  // (the one-sided state exists before the device communicator)
  if (int rc = w.open(rank, n, id, kWin)) return rc;
  harness::CommOnStream &cs = w.cs;
  flagcxDevCommRequirements req = FLAGCX_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.interSignalCount = 1024;
  if (rank == 1) {
    std::vector<CommRec> all(static_cast<size_t>(n));
    all[1].reqs = req;
    RANK_CHECK(cs.comm->bs->allgather(all.data(), sizeof(CommRec)) == flagcxSuccess, "rank %d",
               rank);
    void *block = nullptr;
    RANK_CHECK(flagcxMemAlloc(&block, 64, flagcxMemCCL) == flagcxSuccess, "rank %d", rank);
    flagcxWindow_t bw;
    RANK_CHECK(flagcxCommWindowRegister(cs.comm, block, 64, &bw, 0, flagcxMemCCL) ==
                   flagcxSuccess, "rank %d", rank);
    RANK_CHECK(flagcxCommWindowDeregister(cs.comm, bw) == flagcxSuccess, "rank %d", rank);
    flagcxMemFree(block, flagcxMemCCL);
  } else {
    flagcxDevComm_t dc = nullptr;
    RANK_CHECK(flagcxDevCommCreate(cs.comm, &req, &dc) != flagcxSuccess, "rank %d", rank);
    RANK_CHECK(dc == nullptr, "rank %d", rank);
  }
  return w.close(rank);
}

TEST(DevApiHostile, ShortSignalBlockRefused) {
  harness::Env env{{{"FLAGCX_DEVICE", "host"}, {"FLAGCX_TIMEOUT", "20"}}};
  auto res = harness::run(2, shortBlock, env, 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

}  // namespace
