// Receive-and-reduce on the socket helpers (Conn::irecvFold,
// FLAGCX_SOCKET_RECV_REDUCE): the helper thread that receives a stripe of a
// collective's slice reduces it into the destination piece by piece as it
// arrives, instead of the engine thread reducing the whole slice after.
// Forced on here (the helpers' auto needs 4 cores per rank), 4 lanes, every
// element of every result checked for the reducing ops and several element
// sizes, and the helpers' fold counter proving which way the bytes went.
// Also the copies runColl leaves out for a receive-and-reduce to absorb
// (FLAGCX_FUSE_COPIES): over sockets with and without folds, and over shm.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "exec/state.h"
#include "net/net.h"
#include "tests/common/harness.h"

namespace {

harness::Env env(const char *fold, const char *fuse = "1") {
  return {{{"FLAGCX_SHM_DISABLE", "1"}, {"FLAGCX_SOCKET_HELPERS", "1"},
           {"FLAGCX_SOCKET_NTHREADS", "4"}, {"FLAGCX_SOCKET_RECV_REDUCE", fold},
           {"FLAGCX_FUSE_COPIES", fuse}, {"FLAGCX_TIMEOUT", "60"}}};
}
// Same-host shared memory (no helpers, no folds): the fused copies alone.
harness::Env shmEnv(const char *fuse) {
  return {{{"FLAGCX_SHM_DISABLE", "0"}, {"FLAGCX_FUSE_COPIES", fuse}, {"FLAGCX_TIMEOUT", "60"}}};
}

// Rank r's element i (small, so that sums and products of a few ranks are exact).
template <class T>
T val(int r, size_t i) {
  return static_cast<T>((r + 1) * 3 + static_cast<int>(i % 29));
}
template <class T>
T fold(flagcxRedOp_t op, T a, T b) {
  switch (op) {
    case flagcxProd: return static_cast<T>(a * b);
    case flagcxMax: return a > b ? a : b;
    case flagcxMin: return a < b ? a : b;
    default: return static_cast<T>(a + b);
  }
}

// Allreduce, reducescatter (block `count`) and reduce to the last rank of
// `count` elements of T; 0 or the number of wrong results.
template <class T>
int checkOps(flagcxComm_t comm, int rank, int n, size_t count, flagcxDataType_t dt,
             flagcxRedOp_t op) {
  int failures = 0;
  size_t total = count * static_cast<size_t>(n);
  std::vector<T> in(total), out(total);
  for (size_t i = 0; i < total; i++) in[i] = val<T>(rank, i);
  auto want = [&](size_t i) {
    T w = val<T>(0, i);
    for (int r = 1; r < n; r++) w = fold(op, w, val<T>(r, i));
    return w;
  };
  RANK_OK(flagcxAllReduce(in.data(), out.data(), count, dt, op, comm, nullptr));
  for (size_t i = 0; i < count && failures < 5; i++)
    RANK_EXPECT(out[i] == want(i), "allreduce dtype %d op %d [%zu] = %g, want %g", dt, op, i,
                static_cast<double>(out[i]), static_cast<double>(want(i)));
  RANK_OK(flagcxReduceScatter(in.data(), out.data(), count, dt, op, comm, nullptr));
  for (size_t i = 0; i < count && failures < 5; i++) {
    size_t g = static_cast<size_t>(rank) * count + i;
    RANK_EXPECT(out[i] == want(g), "reducescatter dtype %d op %d [%zu] = %g, want %g", dt, op, i,
                static_cast<double>(out[i]), static_cast<double>(want(g)));
  }
  RANK_OK(flagcxReduce(in.data(), out.data(), count, dt, op, n - 1, comm, nullptr));
  for (size_t i = 0; rank == n - 1 && i < count && failures < 5; i++)
    RANK_EXPECT(out[i] == want(i), "reduce dtype %d op %d [%zu] = %g, want %g", dt, op, i,
                static_cast<double>(out[i]), static_cast<double>(want(i)));
  return failures;
}

// `bytes` per call (not a whole number of slices, stripes or 4 KiB pages);
// `wantFolds`: whether the helpers must have folded bytes; `wantFused`:
// whether runColl must have left copies out (fuseCopies, FLAGCX_FUSE_COPIES).
void run(int nranks, size_t bytes, const harness::Env &e, bool wantFolds, bool wantFused) {
  auto res = harness::run(nranks, [&](int rank, int n, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    int failures = 0;
    uint64_t before = flagcx::socketFoldedBytes(), fusedBefore = flagcx::fusedCopies();
    failures += checkOps<float>(comm, rank, n, bytes / 4, flagcxFloat32, flagcxSum);
    failures += checkOps<int8_t>(comm, rank, n, bytes + 3, flagcxInt8, flagcxMax);
    failures += checkOps<double>(comm, rank, n, bytes / 8 + 1, flagcxFloat64, flagcxMin);
    failures += checkOps<uint64_t>(comm, rank, n, bytes / 8 + 3, flagcxUint64, flagcxProd);
    uint64_t folded = flagcx::socketFoldedBytes() - before;
    RANK_EXPECT((folded > 0) == wantFolds, "%llu byte(s) folded by the helpers",
                static_cast<unsigned long long>(folded));
    uint64_t fused = flagcx::fusedCopies() - fusedBefore;
    RANK_EXPECT((fused > 0) == wantFused, "%llu copies fused", static_cast<unsigned long long>(fused));
    RANK_OK(flagcxCommDestroy(comm));
    return failures ? 1 : 0;
  }, e, 240);
  EXPECT_TRUE(res.allOk()) << nranks << " ranks: " << res.failures();
}

// Slices of 2 MiB (FLAGCX_NET_CHUNK_SIZE auto) and a remainder; folds start
// at messages that are split over the lanes, 512 KiB (FramedConn::foldsOnReceive).
constexpr size_t kLarge = (9u << 20) + 20;

TEST(RecvFold, HelpersReduceWhatTheyReceive) {
  run(2, kLarge, env("1"), true, true);
  run(3, kLarge, env("1"), true, true);
}
// Messages below 512 KiB (one stripe each) stay with the engine thread: at 2
// ranks and 256 KiB the ring's are 128 KiB and a reduce's 256 KiB.
TEST(RecvFold, SmallMessagesAreReducedByTheEngine) {
  run(2, 64u << 10, env("1"), false, true);
  run(2, (256u << 10) + 20, env("1"), false, true);
}
// One slice, split over the lanes: a 2-rank reduce's 1 MiB message is folded.
TEST(RecvFold, SplitMessagesBelowASliceAreFolded) { run(2, (1u << 20) + 20, env("1"), true, true); }
TEST(RecvFold, OffWhenZero) { run(2, kLarge, env("0"), false, true); }
TEST(RecvFold, HelpersFoldWithoutFusedCopies) { run(2, kLarge, env("1", "0"), true, false); }
TEST(FusedCopies, OverSharedMemory) {
  run(2, (3u << 20) + 20, shmEnv("1"), false, true);
  run(3, (3u << 20) + 20, shmEnv("1"), false, true);
  run(2, (3u << 20) + 20, shmEnv("0"), false, false);
}

}  // namespace
