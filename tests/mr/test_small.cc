// Small allreduces and barriers through the shared block (src/exec/small.cc,
// FLAGCX_SHM_SMALL_BYTES): when it is used, and that it stays right when its
// calls are interleaved with ring calls that do not synchronize the ranks (a
// broadcast's root may run ahead), so that slots are reused only once every
// peer has read them.

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/comm.h"
#include "tests/common/harness.h"
#include "tests/common/inspect.h"

namespace {

struct Seen {
  std::atomic<size_t> small[8];
};

// The block is set up for a one-host communicator over shm, and not when
// FLAGCX_SHM_SMALL_BYTES=0 or the ranks talk over sockets.
void expectBlock(const harness::Env &env, int nranks, size_t want) {
  Seen *sh = harness::sharedBlock<Seen>();
  auto res = harness::run(nranks, [&](int rank, int n, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    sh->small[rank] = comm->exec->smallBytes();
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, env, 60);
  EXPECT_TRUE(res.allOk()) << res.failures();
  for (int r = 0; r < nranks; r++) EXPECT_EQ(sh->small[r].load(), want) << "rank " << r;
  harness::freeShared(sh);
}

TEST(SmallShm, UsedOnOneHostOverShm) { expectBlock({}, 3, 1024); }
TEST(SmallShm, SizeFromTheVariable) { expectBlock({{{"FLAGCX_SHM_SMALL_BYTES", "1000"}}}, 2, 1000); }
TEST(SmallShm, OffWhenZero) { expectBlock({{{"FLAGCX_SHM_SMALL_BYTES", "0"}}}, 2, 0); }
TEST(SmallShm, OffOverSockets) { expectBlock({{{"FLAGCX_SHM_DISABLE", "1"}}}, 2, 0); }

// 300 rounds of: an allreduce of 1..320 int32 (the block up to 256, the
// rings above), a broadcast from a rotating root over the rings, a barrier, a
// small allreduce in place, and now and then an allreduce over the rings.
// Every result is checked on every rank.
TEST(SmallShm, InterleavedWithRingCallsStaysRight) {
  for (int nranks : {2, 3, 5}) {
    auto res = harness::run(nranks, [&](int rank, int n, flagcxUniqueId *id) {
      int failures = 0;
      flagcxComm_t comm;
      RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
      RANK_EXPECT(comm->exec->smallBytes() == 1024, "no shared block");
      std::mt19937 rng(1234);  // the same sequence of shapes on every rank
      std::vector<int32_t> in(16384), out(16384), bc(2048);
      for (int round = 0; round < 300 && failures == 0; round++) {
        size_t count = 1 + rng() % 320;  // mostly up to 1 KiB (the block), some over it
        for (size_t i = 0; i < count; i++) in[i] = static_cast<int32_t>(rank * 1000 + i + round);
        RANK_OK(flagcxAllReduce(in.data(), out.data(), count, flagcxInt32, flagcxSum, comm, nullptr));
        for (size_t i = 0; i < count && failures < 5; i++) {
          int32_t want = static_cast<int32_t>(1000 * n * (n - 1) / 2 + n * (i + round));
          RANK_EXPECT(out[i] == want, "round %d allreduce [%zu] = %d, want %d", round, i, out[i], want);
        }
        int root = round % n;
        for (size_t i = 0; i < bc.size(); i++)
          bc[i] = rank == root ? static_cast<int32_t>(round * 7 + i) : -1;
        RANK_OK(flagcxBroadcast(bc.data(), bc.data(), bc.size(), flagcxInt32, root, comm, nullptr));
        for (size_t i = 0; i < bc.size() && failures < 5; i++)
          RANK_EXPECT(bc[i] == static_cast<int32_t>(round * 7 + i), "round %d broadcast [%zu]", round, i);
        RANK_OK(flagcxBarrier(comm, nullptr));
        size_t c2 = 1 + rng() % 64;
        for (size_t i = 0; i < c2; i++) out[i] = rank + 1;
        RANK_OK(flagcxAllReduce(out.data(), out.data(), c2, flagcxInt32, flagcxMax, comm, nullptr));
        for (size_t i = 0; i < c2 && failures < 5; i++)
          RANK_EXPECT(out[i] == n, "round %d in-place max [%zu] = %d", round, i, out[i]);
        if (round % 10 == 0) {
          std::vector<int32_t> big(16384, rank);
          RANK_OK(flagcxAllReduce(big.data(), big.data(), big.size(), flagcxInt32, flagcxSum, comm, nullptr));
          RANK_EXPECT(big[100] == n * (n - 1) / 2, "round %d ring allreduce", round);
        }
      }
      RANK_OK(flagcxCommDestroy(comm));
      return failures ? 1 : 0;
    }, {}, 120);
    EXPECT_TRUE(res.allOk()) << nranks << " ranks: " << res.failures();
  }
}

// A peer that dies (killed: no destructor, no error frame) while this rank
// waits in a small allreduce: an error long before FLAGCX_TIMEOUT (30 s).
TEST(SmallShm, DeadPeerFailsTheWaitPromptly) {
  struct Times {
    std::atomic<int64_t> ns;
    std::atomic<int> rc;
  };
  Times *sh = harness::sharedBlock<Times>();
  sh->ns = -1;
  sh->rc = -1;
  auto res = harness::run(2, [&](int rank, int n, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    std::vector<float> in(16, 1.0f), out(16);
    for (int i = 0; i < 10; i++)
      RANK_OK(flagcxAllReduce(in.data(), out.data(), in.size(), flagcxFloat, flagcxSum, comm, nullptr));
    if (rank == 1) _exit(0);  // gone, as if killed
    int64_t t0 = harness::nowNs();
    flagcxResult_t r = flagcxAllReduce(in.data(), out.data(), in.size(), flagcxFloat, flagcxSum, comm, nullptr);
    sh->ns = harness::nowNs() - t0;
    sh->rc = r;
    flagcxCommAbort(comm);
    return 0;
  }, {{{"FLAGCX_TIMEOUT", "30"}}}, 60);
  EXPECT_TRUE(res.ok(0)) << res.failures();
  EXPECT_NE(sh->rc.load(), static_cast<int>(flagcxSuccess));
  EXPECT_GE(sh->ns.load(), 0);
  EXPECT_LT(static_cast<double>(sh->ns.load()) / 1e9, 10.0) << "the dead peer was noticed only at the timeout";
  harness::freeShared(sh);
}

}  // namespace
