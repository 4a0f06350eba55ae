// Small collectives through the shared block (src/exec/small.cc,
// FLAGCX_SHM_SMALL_BYTES): when it is used, and that it stays right when its
// calls are interleaved with ring calls that do not synchronize the ranks (a
// broadcast's root may run ahead), so that slots are reused only once every
// peer has read them.

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <initializer_list>
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

TEST(SmallShm, UsedOnOneHostOverShm) { expectBlock({}, 3, 4096); }
TEST(SmallShm, SizeFromTheVariable) { expectBlock({{{"FLAGCX_SHM_SMALL_BYTES", "1000"}}}, 2, 1000); }
TEST(SmallShm, OffWhenZero) { expectBlock({{{"FLAGCX_SHM_SMALL_BYTES", "0"}}}, 2, 0); }
TEST(SmallShm, OffOverSockets) { expectBlock({{{"FLAGCX_SHM_DISABLE", "1"}}}, 2, 0); }

// Runs `body` for each rank count twice: on the NULL stream (each call done
// when it returns) and on a host stream, where `sync` waits for the stream
// before results are read.  body returns the rank's exit code.
using Sync = std::function<int()>;
using Body = std::function<int(int rank, int n, flagcxComm_t comm, flagcxStream_t st, const Sync &sync)>;
void onBothStreams(std::initializer_list<int> sizes, const Body &body) {
  for (int nranks : sizes) {
    for (bool onStream : {false, true}) {
      auto res = harness::run(nranks, [&](int rank, int n, flagcxUniqueId *id) {
        flagcxComm_t comm;
        RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
        flagcxDeviceHandle_t h = nullptr;
        flagcxStream_t st = nullptr;
        if (onStream) {
          RANK_OK(flagcxDeviceHandleInit(&h));
          RANK_OK(h->streamCreate(&st));
        }
        auto sync = [&]() -> int {
          if (st) RANK_OK(h->streamSynchronize(st));
          return 0;
        };
        int rc = body(rank, n, comm, st, sync);
        if (st) {
          RANK_OK(h->streamDestroy(st));
          RANK_OK(flagcxDeviceHandleFree(h));
        }
        RANK_OK(flagcxCommDestroy(comm));
        return rc;
      }, {}, 120);
      EXPECT_TRUE(res.allOk()) << nranks << " ranks" << (onStream ? " on a host stream" : "") << ": "
                               << res.failures();
    }
  }
}

// 300 rounds of: an allreduce of 1..1200 int32 (the block up to 1024, the
// rings above), a broadcast from a rotating root over the rings, a barrier, a
// small allreduce in place, and now and then an allreduce over the rings.
// Every result is checked on every rank.  Twice: on the NULL stream (each
// call done when it returns), and on a host stream synchronized only before
// the checks, so that block calls run inline on the caller (an idle stream)
// or queue behind ring calls still pending on the stream's worker.
TEST(SmallShm, InterleavedWithRingCallsStaysRight) {
  onBothStreams({2, 3, 5}, [](int rank, int n, flagcxComm_t comm, flagcxStream_t st, const Sync &sync) {
    int failures = 0;
    RANK_EXPECT(comm->exec->smallBytes() == 4096, "no shared block");
    std::mt19937 rng(1234);  // the same sequence of shapes on every rank
    std::vector<int32_t> in(16384), out(16384), out2(64), bc(2048), big(16384);
    for (int round = 0; round < 300 && failures == 0; round++) {
      size_t count = 1 + rng() % 1200;  // mostly up to 4 KiB (the block), some over it
      for (size_t i = 0; i < count; i++) in[i] = static_cast<int32_t>(rank * 1000 + i + round);
      RANK_OK(flagcxAllReduce(in.data(), out.data(), count, flagcxInt32, flagcxSum, comm, st));
      int root = round % n;
      for (size_t i = 0; i < bc.size(); i++)
        bc[i] = rank == root ? static_cast<int32_t>(round * 7 + i) : -1;
      RANK_OK(flagcxBroadcast(bc.data(), bc.data(), bc.size(), flagcxInt32, root, comm, st));
      RANK_OK(flagcxBarrier(comm, st));
      size_t c2 = 1 + rng() % 64;
      for (size_t i = 0; i < c2; i++) out2[i] = rank + 1;
      RANK_OK(flagcxAllReduce(out2.data(), out2.data(), c2, flagcxInt32, flagcxMax, comm, st));
      if (round % 10 == 0) {
        std::fill(big.begin(), big.end(), rank);
        RANK_OK(flagcxAllReduce(big.data(), big.data(), big.size(), flagcxInt32, flagcxSum, comm, st));
      }
      if (sync()) return 1;
      for (size_t i = 0; i < count && failures < 5; i++) {
        int32_t want = static_cast<int32_t>(1000 * n * (n - 1) / 2 + n * (i + round));
        RANK_EXPECT(out[i] == want, "round %d allreduce [%zu] = %d, want %d", round, i, out[i], want);
      }
      for (size_t i = 0; i < bc.size() && failures < 5; i++)
        RANK_EXPECT(bc[i] == static_cast<int32_t>(round * 7 + i), "round %d broadcast [%zu]", round, i);
      for (size_t i = 0; i < c2 && failures < 5; i++)
        RANK_EXPECT(out2[i] == n, "round %d in-place max [%zu] = %d", round, i, out2[i]);
      if (round % 10 == 0) RANK_EXPECT(big[100] == n * (n - 1) / 2, "round %d ring allreduce", round);
    }
    return failures ? 1 : 0;
  });
}

// Every collective the block carries, at 2, 3 and 4 ranks, on the NULL
// stream and on a host stream, each checked in closed form, with ring calls
// in between; the block's call counter proves each op went through it.
TEST(SmallShm, EveryOpThroughTheBlock) {
  onBothStreams({2, 3, 4}, [](int rank, int n, flagcxComm_t comm, flagcxStream_t st, const Sync &sync) {
    int failures = 0;
    const size_t c = 37;  // elements per rank's share (n * c * 4 <= 4096)
    std::vector<int32_t> in(c * n), out(c * n), big(4096);
    auto val = [](int r, size_t i) { return static_cast<int32_t>(r * 100 + i); };
    for (int round = 0; round < 20 && failures == 0; round++) {
      int root = round % n;
      uint64_t before = comm->exec->smallCalls();
      for (size_t i = 0; i < in.size(); i++) in[i] = val(rank, i) + round;
      auto w = [&](int r, size_t i) { return val(r, i) + round; };
      // reduce (sum) to root
      std::fill(out.begin(), out.end(), -7);
      RANK_OK(flagcxReduce(in.data(), out.data(), c, flagcxInt32, flagcxSum, root, comm, st));
      if (sync()) return 1;
      for (size_t i = 0; i < c && failures < 5; i++) {
        int32_t want = 0;
        for (int r = 0; r < n; r++) want += w(r, i);
        RANK_EXPECT(out[i] == (rank == root ? want : -7), "round %d reduce [%zu] = %d", round, i, out[i]);
      }
      // broadcast from root, in place
      std::vector<int32_t> bc(c);
      for (size_t i = 0; i < c; i++) bc[i] = rank == root ? w(root, i) : -1;
      RANK_OK(flagcxBroadcast(bc.data(), bc.data(), c, flagcxInt32, root, comm, st));
      // a ring call in between (4096 int32: over the block)
      std::fill(big.begin(), big.end(), rank);
      RANK_OK(flagcxAllReduce(big.data(), big.data(), big.size(), flagcxInt32, flagcxSum, comm, st));
      if (sync()) return 1;
      for (size_t i = 0; i < c && failures < 5; i++)
        RANK_EXPECT(bc[i] == w(root, i), "round %d broadcast [%zu] = %d", round, i, bc[i]);
      RANK_EXPECT(big[7] == n * (n - 1) / 2, "round %d ring allreduce", round);
      // allgather
      RANK_OK(flagcxAllGather(in.data(), out.data(), c, flagcxInt32, comm, st));
      if (sync()) return 1;
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < c && failures < 5; i++)
          RANK_EXPECT(out[r * c + i] == w(r, i), "round %d allgather [%d][%zu]", round, r, i);
      // gather to root
      std::fill(out.begin(), out.end(), -7);
      RANK_OK(flagcxGather(in.data(), out.data(), c, flagcxInt32, root, comm, st));
      if (sync()) return 1;
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < c && failures < 5; i++)
          RANK_EXPECT(out[r * c + i] == (rank == root ? w(r, i) : -7), "round %d gather [%d][%zu]",
                      round, r, i);
      // reducescatter (max): block `rank` of everyone's n*c input
      RANK_OK(flagcxReduceScatter(in.data(), out.data(), c, flagcxInt32, flagcxMax, comm, st));
      if (sync()) return 1;
      for (size_t i = 0; i < c && failures < 5; i++)
        RANK_EXPECT(out[i] == w(n - 1, rank * c + i), "round %d reducescatter [%zu] = %d", round, i,
                    out[i]);
      // scatter from root: block `rank` of root's input
      RANK_OK(flagcxScatter(in.data(), out.data(), c, flagcxInt32, root, comm, st));
      if (sync()) return 1;
      for (size_t i = 0; i < c && failures < 5; i++)
        RANK_EXPECT(out[i] == w(root, rank * c + i), "round %d scatter [%zu]", round, i);
      // alltoall: block r of mine is block `rank` of r's input
      RANK_OK(flagcxAlltoAll(in.data(), out.data(), c, flagcxInt32, comm, st));
      if (sync()) return 1;
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < c && failures < 5; i++)
          RANK_EXPECT(out[r * c + i] == w(r, rank * c + i), "round %d alltoall [%d][%zu]", round, r, i);
      // allreduce (avg) and a barrier
      RANK_OK(flagcxAllReduce(in.data(), out.data(), c, flagcxInt32, flagcxAvg, comm, st));
      RANK_OK(flagcxBarrier(comm, st));
      if (sync()) return 1;
      for (size_t i = 0; i < c && failures < 5; i++) {
        int32_t sum = 0;
        for (int r = 0; r < n; r++) sum += w(r, i);
        RANK_EXPECT(out[i] == sum / n, "round %d allreduce avg [%zu] = %d", round, i, out[i]);
      }
      uint64_t took = comm->exec->smallCalls() - before;
      RANK_EXPECT(took == 9, "round %d: %llu calls took the block, want 9 (all but the ring allreduce)",
                  round, static_cast<unsigned long long>(took));
    }
    return failures ? 1 : 0;
  });
}

// A broadcast whose root differs between ranks: every rank fails with an
// error naming the mismatch (the root is in the call's tag), none hangs.
TEST(SmallShm, MismatchedRootIsCaught) {
  auto res = harness::run(3, [&](int rank, int n, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    std::vector<int32_t> v(8, rank);
    // A rank still in this allreduce when the others have found the mismatch
    // fails here already (their poison flag): also an error, not a hang.
    if (flagcxAllReduce(v.data(), v.data(), v.size(), flagcxInt32, flagcxSum, comm, nullptr) !=
        flagcxSuccess) {
      flagcxCommAbort(comm);
      return 0;
    }
    flagcxResult_t r = flagcxBroadcast(v.data(), v.data(), v.size(), flagcxInt32, rank == 2 ? 1 : 0,
                                       comm, nullptr);
    RANK_CHECK(r != flagcxSuccess, "a broadcast with mismatched roots succeeded");
    flagcxCommAbort(comm);
    return 0;
  }, {{{"FLAGCX_TIMEOUT", "30"}}}, 60);
  EXPECT_TRUE(res.allOk()) << res.failures();
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
