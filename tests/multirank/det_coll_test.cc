// Deterministic mode through whole communicators of real processes:
// allreduce, reduce and reducescatter with Sum, Prod and Avg on every
// floating type, in and out of place, heap buffers (the one-host block, the
// schedules) and flagcxMemAlloc buffers (one-host direct), over shm and over
// sockets, FLAGCX_ALGO forcing the rings; every output compared bit for bit
// with the rank-ordered left fold the test computes (tests/exec/det_ref.h).
// Also the switch's rules: one value on every rank, refused otherwise.
//
// MR_DEVICE=cuda: every call runs on device copies of its buffers (in place
// stays in place), the results are copied back and compared as above.  On a
// CUDA rank flagcxMemAlloc is the adapter's deviceMalloc, the memory the
// copies already live in, so the flagcxMemAlloc variant adds nothing there and
// is left out; device memory is what the one-host direct path shares in
// direct mode.  MixedHostAndCuda (MR_DEVICE only): even ranks on the host
// adapter with host buffers, odd ranks on CUDA with device buffers.  The
// environment picks the path (B = a build with -Dcuda=enabled):
//   direct (CUDA IPC):  MR_DEVICE=cuda FLAGCX_DEVICE=cuda FLAGCX_USE_HETERO_COMM=1
//                       $B/tests/multirank/det_coll_test --gtest_filter='DetCollectives.*'
//   staged (via host):  the same with FLAGCX_IPC_DISABLE=1 FLAGCX_STAGE_SLICE_SIZE=4096
//   NCCL communicator:  MR_DEVICE=cuda FLAGCX_DEVICE=cuda (no FLAGCX_USE_HETERO_COMM):
//                       deterministic calls must leave the pass-through
// MixedHostAndCuda runs under each of the first two.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/params.h"
#include "tests/common/device_mirror.h"
#include "tests/common/harness.h"
#include "tests/exec/det_ref.h"

namespace {

const flagcxDataType_t kTypes[] = {flagcxFloat32, flagcxFloat64,    flagcxFloat16,
                                   flagcxBfloat16, flagcxFloat8e4m3, flagcxFloat8e5m2};
const flagcxRedOp_t kOps[] = {flagcxSum, flagcxProd, flagcxAvg};
enum class Coll { AllReduce, Reduce, ReduceScatter };

// A buffer from the heap or from flagcxMemAlloc (shareable: one-host direct).
struct Buf {
  char *p = nullptr;
  bool shared = false;
  std::vector<char> heap;
  Buf(size_t bytes, bool share) : shared(share) {
    if (share && flagcxMemAlloc(reinterpret_cast<void **>(&p), bytes) == flagcxSuccess) return;
    shared = false;
    heap.resize(bytes);
    p = heap.data();
  }
  ~Buf() {
    if (shared) flagcxMemFree(p);
  }
};

// Rank k's element i as stored (rounded to the type), widened.
double storedInput(flagcxDataType_t dt, flagcxRedOp_t red, int k, size_t i) {
  char b[8];
  detref::put(dt, b, 0, detref::inputOf(dt, red, k, i));
  return detref::get(dt, b, 0);
}

// One call; `dev` (a CUDA rank under MR_DEVICE): on device copies of the
// buffers, results copied back before the check.
int oneCall(flagcxComm_t comm, int rank, int n, Coll coll, flagcxDataType_t dt, flagcxRedOp_t red,
            size_t count, bool inPlace, bool share, flagcxDeviceHandle_t dev) {
  const size_t ts = detref::sizeOf(dt);
  const size_t elems = coll == Coll::ReduceScatter ? count * static_cast<size_t>(n) : count;
  const int root = n - 1;
  Buf in(elems * ts, share && !dev), out(count * ts, share && !dev);
  for (size_t i = 0; i < elems; i++) detref::put(dt, in.p, i, detref::inputOf(dt, red, rank, i));
  char *recv = inPlace ? in.p + (coll == Coll::ReduceScatter ? static_cast<size_t>(rank) * count * ts : 0)
                       : out.p;
  testdev::DeviceMirror mirror;
  if (dev) RANK_CHECK(mirror.init(dev, in.heap, out.heap) == 0, "device buffers");
  char *send = dev ? mirror.map(in.p) : in.p, *dst = dev ? mirror.map(recv) : recv;
  flagcxResult_t r = coll == Coll::AllReduce ? flagcxAllReduce(send, dst, count, dt, red, comm, nullptr)
                     : coll == Coll::Reduce  ? flagcxReduce(send, dst, count, dt, red, root, comm, nullptr)
                                             : flagcxReduceScatter(send, dst, count, dt, red, comm, nullptr);
  if (dev) RANK_CHECK(mirror.back() == 0, "copying device results back");
  RANK_CHECK(r == flagcxSuccess, "call %d dtype %d op %d count %zu: %s", static_cast<int>(coll),
             static_cast<int>(dt), static_cast<int>(red), count, flagcxGetErrorString(r));
  if (coll == Coll::Reduce && rank != root) return 0;
  const size_t base = coll == Coll::ReduceScatter ? static_cast<size_t>(rank) * count : 0;
  std::vector<char> want(ts);
  for (size_t i = 0; i < count; i++) {
    detref::foldInto(dt, red, n, [&](int k) { return storedInput(dt, red, k, base + i); },
                     want.data(), 0);
    RANK_CHECK(std::memcmp(recv + i * ts, want.data(), ts) == 0,
               "call %d dtype %d op %d count %zu%s%s: element %zu is %.9g, the fold gives %.9g",
               static_cast<int>(coll), static_cast<int>(dt), static_cast<int>(red), count,
               inPlace ? " in place" : "", dev ? " (device buffers)" : share ? " (shared buffers)" : "", i,
               detref::get(dt, recv, i), detref::get(dt, want.data(), 0));
  }
  return 0;
}

// This rank's device under MR_DEVICE, else nullptr; `mixed`: even ranks take
// the host adapter (nullptr), odd ranks CUDA, whatever FLAGCX_DEVICE says.
int openDevice(int rank, bool mixed, flagcxDeviceHandle_t *dev) {
  *dev = nullptr;
  if (!testdev::deviceRun()) return 0;
  if (mixed) {
    setenv("FLAGCX_DEVICE", rank % 2 ? "cuda" : "host", 1);
    flagcx::paramsReload();
    if (rank % 2 == 0) return 0;
  }
  RANK_OK(flagcxDeviceHandleInit(dev));
  char vendor[128] = {};
  RANK_OK((*dev)->getVendor(vendor));
  RANK_CHECK(std::strcmp(vendor, "host") != 0, "MR_DEVICE set but the device adapter is %s", vendor);
  return 0;
}

// Every call of the lists; `light`: float32 and bfloat16, Sum and Avg (many
// ranks); `mixed`: host and CUDA ranks (openDevice).
int runCalls(int rank, int n, flagcxUniqueId *id, bool light, bool mixed = false) {
  flagcxDeviceHandle_t dev = nullptr;
  if (int rc = openDevice(rank, mixed, &dev)) return rc;
  // Every rank makes the same calls: shared buffers are left out only when
  // all ranks are CUDA ranks (flagcxMemAlloc is their device memory anyway).
  const bool allCuda = testdev::deviceRun() && !mixed;
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
  if (!std::getenv("FLAGCX_DETERMINISTIC")) RANK_OK(flagcxCommSetDeterministic(comm, 1));
  for (Coll coll : {Coll::AllReduce, Coll::Reduce, Coll::ReduceScatter})
    for (flagcxDataType_t dt : kTypes)
      for (flagcxRedOp_t red : kOps)
        for (size_t count : {size_t{1}, size_t{257}, size_t{3000}, size_t{70001}})
          for (bool inPlace : {false, true})
            for (bool share : {false, true}) {
              if (share && (allCuda || count * detref::sizeOf(dt) < 8192)) continue;  // only direct needs them
              if (light && ((dt != flagcxFloat32 && dt != flagcxBfloat16) || red == flagcxProd))
                continue;
              if (int rc = oneCall(comm, rank, n, coll, dt, red, count, inPlace, share, dev)) return rc;
            }
  // Fixed once a collective ran.
  RANK_CHECK(flagcxCommSetDeterministic(comm, 0) == flagcxInvalidUsage, "switch after a call");
  RANK_OK(flagcxCommDestroy(comm));
  if (dev) RANK_OK(flagcxDeviceHandleFree(dev));
  return 0;
}

int runRank(int rank, int n, flagcxUniqueId *id) { return runCalls(rank, n, id, false); }

TEST(DetCollectives, OverShm) {
  for (int n : {2, 3, 4}) {
    auto res = harness::run(n, runRank, {}, 280);
    EXPECT_TRUE(res.allOk()) << n << " ranks: " << res.failures();
  }
}

TEST(DetCollectives, EightRanks) {
  auto res = harness::run(8, [](int rank, int n, flagcxUniqueId *id) { return runCalls(rank, n, id, true); },
                          {}, 280);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

TEST(DetCollectives, OverSocketsWithTheEnvironment) {
  auto res = harness::run(3, runRank, {{{"FLAGCX_SHM_DISABLE", "1"}, {"FLAGCX_DETERMINISTIC", "1"}}}, 280);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

TEST(DetCollectives, AlgoRingIsOverridden) {
  auto res = harness::run(3, runRank, {{{"FLAGCX_ALGO", "allreduce:ring,reducescatter:ring,reduce:chain"}}}, 280);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

// MR_DEVICE only: ranks 0, 2 on the host adapter with host buffers, ranks 1, 3
// on CUDA with device buffers, in one communicator.
TEST(DetCollectives, MixedHostAndCuda) {
  if (!testdev::deviceRun()) GTEST_SKIP() << "MR_DEVICE is not set";
  for (int n : {3, 4}) {
    auto res = harness::run(n, [](int rank, int nranks, flagcxUniqueId *id) {
      return runCalls(rank, nranks, id, false, true);
    }, {}, 280);
    EXPECT_TRUE(res.allOk()) << n << " ranks: " << res.failures();
  }
}

TEST(DetSwitch, Arguments) {
  EXPECT_EQ(flagcxCommSetDeterministic(nullptr, 1), flagcxInvalidArgument);
  auto res = harness::run(2, [](int rank, int n, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    RANK_CHECK(flagcxCommSetDeterministic(comm, 2) == flagcxInvalidArgument, "on = 2");
    RANK_CHECK(flagcxCommSetDeterministic(comm, -1) == flagcxInvalidArgument, "on = -1");
    RANK_OK(flagcxCommSetDeterministic(comm, 1));
    RANK_OK(flagcxCommSetDeterministic(comm, 0));
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, {}, 60);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

// Rank 0 asks for the mode, rank 1 does not: flagcxCommSetDeterministic is
// collective and fails on both (flagcxInvalidUsage), the mode stays off and
// the allreduce then succeeds; over shm and over sockets.  (A mismatch
// that reaches a call anyway fails as mismatched calls: the executor's
// DeterministicMismatch test.)
TEST(DetSwitch, MixedRanksAreRefused) {
  for (const char *shmOff : {"0", "1"}) {
    auto res = harness::run(2, [](int rank, int n, flagcxUniqueId *id) {
      flagcxComm_t comm;
      RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
      RANK_CHECK(flagcxCommSetDeterministic(comm, rank == 0) == flagcxInvalidUsage,
                 "a mixed flagcxCommSetDeterministic was not refused");
      std::vector<float> in(1000, 1.f), out(1000);
      RANK_OK(flagcxAllReduce(in.data(), out.data(), in.size(), flagcxFloat32, flagcxSum, comm, nullptr));
      RANK_CHECK(out[999] == 2.f, "the allreduce after the refusal gave %g", out[999]);
      RANK_OK(flagcxCommDestroy(comm));
      return 0;
    }, {{{"FLAGCX_SHM_DISABLE", shmOff}}}, 120);
    EXPECT_TRUE(res.allOk()) << "shm off " << shmOff << ": " << res.failures();
  }
}

// FLAGCX_DETERMINISTIC on rank 1 only: init fails on every rank, naming it.
TEST(DetSwitch, MixedEnvironmentFailsInit) {
  auto res = harness::run(2, [](int rank, int n, flagcxUniqueId *id) {
    if (rank == 1) {
      setenv("FLAGCX_DETERMINISTIC", "1", 1);
      flagcx::paramsReload();
    }
    flagcxComm_t comm = nullptr;
    flagcxResult_t r = flagcxCommInitRank(&comm, n, id, rank);
    RANK_CHECK(r == flagcxInvalidUsage, "init gave %d", static_cast<int>(r));
    return 0;
  }, {}, 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

}  // namespace
