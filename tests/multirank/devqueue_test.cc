// The device proxy's descriptor ring as CUDA kernels use it, played on CPU:
// host threads of each forked rank write descriptors straight into the ring
// (flagcxDevQueue of flagcx_device_unified.h) with the kernels' protocol -
// take a ticket, wait until the slot's seq equals it, write the 64 bytes
// before seq, release, store seq = ticket + 1 - and the proxy thread carries
// them out.  Checked over shm (peers mapped: the proxy copies and adds) and
// sockets (the one-sided engine) at 2-3 ranks, with more descriptors than
// the ring has slots: every round's data is in place once its signal says
// so (data before signal, per producer and source), values, plain signals,
// counters (one per completed put), a get completed by a flush, a last
// value carried out before flagcxDevMemDestroy lets its handle go; and a
// descriptor naming no live DevMem: failed, flagged, returned at destroy.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "flagcx_device_unified.h"
#include "flagcx_kernel.h"
#include "tests/common/dev_ring.h"
#include "tests/common/harness.h"

namespace {

constexpr int kMaxRanks = 3;
constexpr int kProducers = 4;   // threads per rank playing kernel threads
constexpr int kRounds = 128;    // puts per producer and peer
constexpr size_t kSlot = 2048;  // bytes per put
constexpr uint32_t kValueSig = kMaxRanks * kProducers, kPlainSig = kValueSig + 1;
constexpr size_t kRegion = static_cast<size_t>(kMaxRanks) * kProducers * kRounds * kSlot;
constexpr size_t kSrc = kRegion;  // this rank's sources: [producer][round]
constexpr size_t kValues = kSrc + static_cast<size_t>(kProducers) * kRounds * kSlot;
constexpr size_t kGot = kValues + 4096;
constexpr size_t kWin = kGot + kSlot;

#define CHECK_OR(cond, code)                                                         \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "rank %d: %s:%d: %s\n", rank, __FILE__, __LINE__, #cond);     \
      return code;                                                                  \
    }                                                                               \
  } while (0)

size_t slotOf(int src, int k, int r) {
  return ((static_cast<size_t>(src) * kProducers + k) * kRounds + r) * kSlot;
}
char byteOf(int src, int k, int r, size_t i) {
  return static_cast<char>(src * 31 + k * 7 + r + static_cast<int>(i % 13));
}

using devring::desc;
using devring::enqueue;

// Producer k: kRounds puts to every rank (signal rank*kProducers+k, counter
// 0), then a value with a signal and a plain signal to every rank.
void produce(flagcxDevQueue *q, char *buf, uint32_t mem, int rank, int n, int k) {
  for (int r = 0; r < kRounds; r++) {
    size_t src = kSrc + (static_cast<size_t>(k) * kRounds + r) * kSlot;
    for (size_t i = 0; i < kSlot; i++) buf[src + i] = byteOf(rank, k, r, i);
    for (int p = 0; p < n; p++) {
      flagcxDevDesc d = desc(flagcxDevOpPut, p);
      d.dstMem = d.srcMem = mem;
      d.dstOff = slotOf(rank, k, r), d.srcOff = src, d.bytes = kSlot;
      d.signal = static_cast<uint32_t>(rank * kProducers + k), d.add = 1, d.counter = 0;
      enqueue(q, d);
    }
  }
  for (int p = 0; p < n; p++) {
    flagcxDevDesc v = desc(flagcxDevOpValue, p);
    v.dstMem = mem, v.dstOff = kValues + static_cast<size_t>(rank * kProducers + k) * 8;
    v.value = 1000u * static_cast<uint64_t>(rank) + static_cast<uint64_t>(k);
    v.signal = kValueSig, v.add = 1;
    enqueue(q, v);
    flagcxDevDesc s = desc(flagcxDevOpSignal, p);
    s.signal = kPlainSig, s.add = 100;
    enqueue(q, s);
  }
}

// Every round of every source's producers, each checked once its signal is in.
int checkRounds(const void *c, const char *buf, int rank, int n) {
  std::vector<char> want(kSlot);
  for (int r = 0; r < kRounds; r++)
    for (int src = 0; src < n; src++)
      for (int k = 0; k < kProducers; k++) {
        flagcxDevWaitSignal(c, static_cast<uint32_t>(src * kProducers + k), r + 1, 64, 0,
                            FLAGCX_COOP_THREAD, FLAGCX_MEMORY_ORDER_ACQUIRE);
        for (size_t i = 0; i < kSlot; i++) want[i] = byteOf(src, k, r, i);
        CHECK_OR(memcmp(buf + slotOf(src, k, r), want.data(), kSlot) == 0, 20);
      }
  return 0;
}

int body(int rank, int n, flagcxUniqueId *id, bool shm) {
  harness::CommOnStream cs;
  CHECK_OR(cs.open(rank, n, id) == flagcxSuccess, 2);
  void *mem = nullptr;
  if (shm) CHECK_OR(flagcxMemAlloc(&mem, kWin, flagcxMemCCL) == flagcxSuccess, 3);
  else mem = malloc(kWin);
  char *buf = static_cast<char *>(mem);
  memset(buf, 0, kWin);
  flagcxWindow_t win;
  CHECK_OR(flagcxCommWindowRegister(cs.comm, buf, kWin, &win, FLAGCX_WIN_COLL_SYMMETRIC,
                                    flagcxMemCCL) == flagcxSuccess, 4);
  flagcxDevCommRequirements req = FLAGCX_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.interSignalCount = static_cast<int>(kPlainSig) + 1;
  req.interCounterCount = 1;
  req.barrierCount = 1;
  flagcxDevComm_t dc;
  flagcxDevMem_t dm;
  CHECK_OR(flagcxDevCommCreate(cs.comm, &req, &dc) == flagcxSuccess, 5);
  CHECK_OR(flagcxDevMemCreate(cs.comm, buf, kWin, win, &dm) == flagcxSuccess, 6);
  const flagcxDevCommView *v = reinterpret_cast<const flagcxDevCommView *>(dc);
  uint32_t memId = reinterpret_cast<const flagcxDevMemView *>(dm)->id;
  int hostMem = 0;
  CHECK_OR(flagcxDevCommUsesHostMemory(dc, &hostMem) == flagcxSuccess && hostMem && v->queue, 7);
  std::vector<std::thread> producers;
  for (int k = 0; k < kProducers; k++)
    producers.emplace_back(produce, v->queue, buf, memId, rank, n, k);
  int rc = checkRounds(dc, buf, rank, n);
  for (auto &t : producers) t.join();
  if (rc) return rc;
  const auto thr = FLAGCX_COOP_THREAD;
  const auto acq = FLAGCX_MEMORY_ORDER_ACQUIRE;
  flagcxDevWaitSignal(dc, kValueSig, static_cast<uint64_t>(n) * kProducers, 64, 0, thr, acq);
  for (int s = 0; s < n; s++)
    for (int k = 0; k < kProducers; k++) {
      uint64_t x;
      memcpy(&x, buf + kValues + static_cast<size_t>(s * kProducers + k) * 8, 8);
      CHECK_OR(x == 1000u * static_cast<uint64_t>(s) + static_cast<uint64_t>(k), 21);
    }
  flagcxDevWaitSignal(dc, kPlainSig, 100u * n * kProducers, 64, 0, thr, acq);
  uint64_t puts = static_cast<uint64_t>(n) * kProducers * kRounds;
  flagcxDevWaitCounter(dc, 0, puts, 64, 0, thr, acq);
  CHECK_OR(flagcxDevReadCounter(dc, 0, 64, 0, acq) == puts, 22);
  // A get of the next rank's copy of this rank's last round, then a flush.
  int next = (rank + 1) % n;
  flagcxDevDesc g = desc(flagcxDevOpGet, next);
  g.dstMem = g.srcMem = memId, g.dstOff = kGot, g.srcOff = slotOf(rank, 0, kRounds - 1);
  g.bytes = kSlot;
  enqueue(v->queue, g);
  flagcxDevFlush(dc, 0, thr, acq);
  for (size_t i = 0; i < kSlot; i++) CHECK_OR(buf[kGot + i] == byteOf(rank, 0, kRounds - 1, i), 23);
  flagcxDevBarrierSync(dc, FLAGCX_TEAM_WORLD, 0, 0, thr, FLAGCX_MEMORY_ORDER_ACQ_REL,
                       FLAGCX_MEMORY_SCOPE_SYSTEM);
  // A last value to itself, not flushed: flagcxDevMemDestroy lets the
  // proxy carry it out before the handle goes.
  flagcxDevDesc last = desc(flagcxDevOpValue, rank);
  last.dstMem = memId, last.dstOff = kGot, last.value = 0x5eed;
  enqueue(v->queue, last);
  CHECK_OR(flagcxDevMemDestroy(cs.comm, dm) == flagcxSuccess, 30);
  uint64_t x;
  memcpy(&x, buf + kGot, 8);
  CHECK_OR(x == 0x5eed, 34);
  CHECK_OR(flagcxDevCommDestroy(cs.comm, dc) == flagcxSuccess, 31);
  CHECK_OR(flagcxCommWindowDeregister(cs.comm, win) == flagcxSuccess, 32);
  CHECK_OR(cs.close() == flagcxSuccess, 33);
  if (shm) flagcxMemFree(mem, flagcxMemCCL);
  else free(mem);
  return 0;
}

// A descriptor naming no live DevMem (what a kernel still running at
// flagcxDevMemDestroy queues): the proxy fails it, flags the ring (where
// kernels' waits give up), goes on with the next one, and
// flagcxDevCommDestroy returns the error.
int failedOp(int rank, int n, flagcxUniqueId *id) {
  harness::CommOnStream cs;
  CHECK_OR(cs.open(rank, n, id) == flagcxSuccess, 2);
  std::vector<char> buf(kSlot * 2, 0);
  flagcxWindow_t win;
  CHECK_OR(flagcxCommWindowRegister(cs.comm, buf.data(), buf.size(), &win,
                                    FLAGCX_WIN_COLL_SYMMETRIC, flagcxMemCCL) == flagcxSuccess, 3);
  flagcxDevCommRequirements req = FLAGCX_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.interSignalCount = 1;
  flagcxDevComm_t dc;
  flagcxDevMem_t dm;
  CHECK_OR(flagcxDevCommCreate(cs.comm, &req, &dc) == flagcxSuccess, 4);
  CHECK_OR(flagcxDevMemCreate(cs.comm, buf.data(), buf.size(), win, &dm) == flagcxSuccess, 5);
  const flagcxDevCommView *v = reinterpret_cast<const flagcxDevCommView *>(dc);
  uint32_t memId = reinterpret_cast<const flagcxDevMemView *>(dm)->id;
  flagcxDevDesc bad = desc(flagcxDevOpValue, (rank + 1) % n);
  bad.dstMem = memId + 1000, bad.value = 7;
  enqueue(v->queue, bad);
  flagcxDevDesc good = desc(flagcxDevOpValue, rank);
  good.dstMem = memId, good.value = 9;
  enqueue(v->queue, good);
  // Host ranks' flush gives up at the first error: wait for both here.
  while (__atomic_load_n(&v->queue->done, __ATOMIC_ACQUIRE) < 2) std::this_thread::yield();
  CHECK_OR(__atomic_load_n(&v->queue->failed, __ATOMIC_ACQUIRE) == 1, 7);
  uint64_t got;
  memcpy(&got, buf.data(), 8);
  CHECK_OR(got == 9, 8);
  CHECK_OR(flagcxDevMemDestroy(cs.comm, dm) == flagcxSuccess, 9);
  CHECK_OR(flagcxDevCommDestroy(cs.comm, dc) == flagcxInvalidUsage, 10);
  CHECK_OR(flagcxCommWindowDeregister(cs.comm, win) == flagcxSuccess, 11);
  CHECK_OR(cs.close() == flagcxSuccess, 12);
  return 0;
}

TEST(DevQueue, FailedOperationFlaggedAndReturned) {
  harness::Env env{{{"FLAGCX_DEVICE", "host"}, {"FLAGCX_TIMEOUT", "60"}}};
  auto res = harness::run(2, failedOp, env, 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

struct Param {
  int nranks;
  bool shm;
};

class DevQueue : public ::testing::TestWithParam<Param> {};

TEST_P(DevQueue, KernelRoleThreadsThroughTheProxy) {
  Param p = GetParam();
  harness::Env env{{{"FLAGCX_DEVICE", "host"}, {"FLAGCX_TIMEOUT", "60"},
                    {"FLAGCX_SHM_DISABLE", p.shm ? "0" : "1"}}};
  auto res = harness::run(
      p.nranks, [&](int r, int n, flagcxUniqueId *id) { return body(r, n, id, p.shm); }, env, 240);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

std::string name(const ::testing::TestParamInfo<Param> &i) {
  return std::string(i.param.shm ? "shm_" : "socket_") + std::to_string(i.param.nranks);
}

INSTANTIATE_TEST_SUITE_P(Host, DevQueue,
                         ::testing::Values(Param{2, true}, Param{3, true}, Param{2, false},
                                           Param{3, false}),
                         name);

}  // namespace
