// Deterministic mode through whole communicators of real processes:
// allreduce, reduce and reducescatter with Sum, Prod and Avg on every
// floating type, in and out of place, heap buffers (the one-host block, the
// schedules) and flagcxMemAlloc buffers (one-host direct), over shm and over
// sockets, FLAGCX_ALGO forcing the rings; every output compared bit for bit
// with the rank-ordered left fold the test computes (tests/exec/det_ref.h).
// Also the switch's rules, and a rank in the mode beside one that is not.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

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

int oneCall(flagcxComm_t comm, int rank, int n, Coll coll, flagcxDataType_t dt, flagcxRedOp_t red,
            size_t count, bool inPlace, bool share) {
  const size_t ts = detref::sizeOf(dt);
  const size_t elems = coll == Coll::ReduceScatter ? count * static_cast<size_t>(n) : count;
  const int root = n - 1;
  Buf in(elems * ts, share), out(count * ts, share);
  for (size_t i = 0; i < elems; i++) detref::put(dt, in.p, i, detref::inputOf(dt, red, rank, i));
  char *recv = inPlace ? in.p + (coll == Coll::ReduceScatter ? static_cast<size_t>(rank) * count * ts : 0)
                       : out.p;
  flagcxResult_t r = coll == Coll::AllReduce ? flagcxAllReduce(in.p, recv, count, dt, red, comm, nullptr)
                     : coll == Coll::Reduce  ? flagcxReduce(in.p, recv, count, dt, red, root, comm, nullptr)
                                             : flagcxReduceScatter(in.p, recv, count, dt, red, comm, nullptr);
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
               inPlace ? " in place" : "", share ? " (shared buffers)" : "", i,
               detref::get(dt, recv, i), detref::get(dt, want.data(), 0));
  }
  return 0;
}

// Every call of the lists; `light`: float32 and bfloat16, Sum and Avg (many ranks).
int runCalls(int rank, int n, flagcxUniqueId *id, bool light) {
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
  if (!std::getenv("FLAGCX_DETERMINISTIC")) RANK_OK(flagcxCommSetDeterministic(comm, 1));
  for (Coll coll : {Coll::AllReduce, Coll::Reduce, Coll::ReduceScatter})
    for (flagcxDataType_t dt : kTypes)
      for (flagcxRedOp_t red : kOps)
        for (size_t count : {size_t{1}, size_t{257}, size_t{3000}, size_t{70001}})
          for (bool inPlace : {false, true})
            for (bool share : {false, true}) {
              if (share && count * detref::sizeOf(dt) < 8192) continue;  // only direct needs them
              if (light && ((dt != flagcxFloat32 && dt != flagcxBfloat16) || red == flagcxProd))
                continue;
              if (int rc = oneCall(comm, rank, n, coll, dt, red, count, inPlace, share)) return rc;
            }
  // Fixed once a collective ran.
  RANK_CHECK(flagcxCommSetDeterministic(comm, 0) == flagcxInvalidUsage, "switch after a call");
  RANK_OK(flagcxCommDestroy(comm));
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

// Rank 0 in the mode, rank 1 not: both fail the call (a mismatch), none hangs.
TEST(DetSwitch, MixedRanksFailAsMismatch) {
  for (size_t count : {size_t{16}, size_t{100000}})
    for (const char *shmOff : {"0", "1"}) {
      auto res = harness::run(2, [count](int rank, int n, flagcxUniqueId *id) {
        flagcxComm_t comm;
        RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
        RANK_OK(flagcxCommSetDeterministic(comm, rank == 0));
        std::vector<float> in(count, 1.f), out(count);
        flagcxResult_t r = flagcxAllReduce(in.data(), out.data(), count, flagcxFloat32, flagcxSum,
                                           comm, nullptr);
        RANK_CHECK(r != flagcxSuccess, "count %zu: the mixed call succeeded", count);
        flagcxCommAbort(comm);
        return 0;
      }, {{{"FLAGCX_SHM_DISABLE", shmOff}}}, 120);
      EXPECT_TRUE(res.allOk()) << "count " << count << " shm off " << shmOff << ": " << res.failures();
    }
}

}  // namespace
