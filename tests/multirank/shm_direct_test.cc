// Large collectives of a one-host communicator straight between the ranks'
// buffers (src/exec/shm_direct.cc, FLAGCX_SHM_DIRECT_BYTES): every op at 2, 3
// and 4 ranks, in place and not, checked in closed form, with the path's call
// counter proving which way each call went; the fallbacks to the rings (plain
// heap buffers on one rank, the variable at 0); buffers freed and allocated
// again between calls; mismatched calls and a peer that never arrives.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "net/net.h"
#include "tests/common/harness.h"

namespace {

// Shareable host memory (the host adapter's deviceMalloc: a memfd mapping),
// or the heap.
struct Buf {
  flagcxDeviceHandle_t h = nullptr;
  int32_t *p = nullptr;
  bool heap = false;
  Buf(flagcxDeviceHandle_t dev, size_t count, bool onHeap) : h(dev), heap(onHeap) {
    void *v = nullptr;
    if (heap) v = malloc(count * sizeof(int32_t));
    else if (h->deviceMalloc(&v, count * sizeof(int32_t), flagcxMemDevice, nullptr) != flagcxSuccess) v = nullptr;
    p = static_cast<int32_t *>(v);
  }
  ~Buf() {
    if (heap) free(p);
    else if (p) h->deviceFree(p, flagcxMemDevice, nullptr);
  }
  Buf(const Buf &) = delete;
  Buf &operator=(const Buf &) = delete;
};

int32_t val(int r, size_t i, int round) { return static_cast<int32_t>(r * 1000 + i % 977 + round); }

// One round of every op on count-element shares.  With `expectDirect` every
// call must take the direct path, except where a peer would touch the
// buffers of `heapRank` (heap memory: not shareable); without, none may.
int everyOp(int rank, int n, flagcxComm_t comm, flagcxDeviceHandle_t h, size_t c, int round,
            int heapRank, bool expectDirect) {
  const bool heapHere = rank == heapRank;
  int failures = 0;
  const int root = round % n;
  Buf in(h, c * n, heapHere), out(h, c * n, heapHere);
  RANK_CHECK(in.p && out.p, "allocation failed");
  auto w = [&](int r, size_t i) { return val(r, i, round); };
  auto fill = [&] {
    for (size_t i = 0; i < c * n; i++) in.p[i] = w(rank, i);
    for (size_t i = 0; i < c * n; i++) out.p[i] = -7;
  };
  uint64_t before = comm->exec->shmDirectCalls();
  int calls = 0;

  fill();  // allreduce sum, out of place
  RANK_OK(flagcxAllReduce(in.p, out.p, c, flagcxInt32, flagcxSum, comm, nullptr));
  calls++;
  for (size_t i = 0; i < c && failures < 5; i++) {
    int32_t want = 0;
    for (int r = 0; r < n; r++) want += w(r, i);
    RANK_EXPECT(out.p[i] == want, "allreduce [%zu] = %d, want %d", i, out.p[i], want);
  }
  fill();  // allreduce max, in place
  RANK_OK(flagcxAllReduce(in.p, in.p, c, flagcxInt32, flagcxMax, comm, nullptr));
  calls++;
  for (size_t i = 0; i < c && failures < 5; i++)
    RANK_EXPECT(in.p[i] == w(n - 1, i), "allreduce in place [%zu] = %d", i, in.p[i]);
  fill();  // allreduce avg
  RANK_OK(flagcxAllReduce(in.p, out.p, c, flagcxInt32, flagcxAvg, comm, nullptr));
  calls++;
  for (size_t i = 0; i < c && failures < 5; i++) {
    int32_t sum = 0;
    for (int r = 0; r < n; r++) sum += w(r, i);
    RANK_EXPECT(out.p[i] == sum / n, "allreduce avg [%zu] = %d", i, out.p[i]);
  }
  fill();  // reduce to root, in place at every rank
  RANK_OK(flagcxReduce(in.p, in.p, c, flagcxInt32, flagcxSum, root, comm, nullptr));
  calls++;
  for (size_t i = 0; i < c && failures < 5; i++) {
    int32_t want = 0;
    for (int r = 0; r < n; r++) want += w(r, i);
    RANK_EXPECT(in.p[i] == (rank == root ? want : w(rank, i)), "reduce [%zu] = %d", i, in.p[i]);
  }
  fill();  // reducescatter max
  RANK_OK(flagcxReduceScatter(in.p, out.p, c, flagcxInt32, flagcxMax, comm, nullptr));
  calls++;
  for (size_t i = 0; i < c && failures < 5; i++)
    RANK_EXPECT(out.p[i] == w(n - 1, rank * c + i), "reducescatter [%zu] = %d", i, out.p[i]);
  fill();  // reducescatter in place (the output is this rank's block of the input)
  RANK_OK(flagcxReduceScatter(in.p, in.p + rank * c, c, flagcxInt32, flagcxSum, comm, nullptr));
  calls++;
  for (size_t i = 0; i < c && failures < 5; i++) {
    int32_t want = 0;
    for (int r = 0; r < n; r++) want += w(r, rank * c + i);
    RANK_EXPECT(in.p[rank * c + i] == want, "reducescatter in place [%zu]", i);
  }
  fill();  // allgather, in place (this rank's share already in its block)
  for (size_t i = 0; i < c; i++) out.p[rank * c + i] = w(rank, i);
  RANK_OK(flagcxAllGather(out.p + rank * c, out.p, c, flagcxInt32, comm, nullptr));
  calls++;
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c && failures < 5; i++)
      RANK_EXPECT(out.p[r * c + i] == w(r, i), "allgather [%d][%zu] = %d", r, i, out.p[r * c + i]);
  fill();  // gather to root
  RANK_OK(flagcxGather(in.p, out.p, c, flagcxInt32, root, comm, nullptr));
  calls++;
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c && failures < 5; i++)
      RANK_EXPECT(out.p[r * c + i] == (rank == root ? w(r, i) : -7), "gather [%d][%zu]", r, i);
  fill();  // broadcast from root, in place
  RANK_OK(flagcxBroadcast(in.p, in.p, c, flagcxInt32, root, comm, nullptr));
  calls++;
  for (size_t i = 0; i < c && failures < 5; i++)
    RANK_EXPECT(in.p[i] == w(root, i), "broadcast [%zu] = %d", i, in.p[i]);
  fill();  // scatter from root
  RANK_OK(flagcxScatter(in.p, out.p, c, flagcxInt32, root, comm, nullptr));
  calls++;
  for (size_t i = 0; i < c && failures < 5; i++)
    RANK_EXPECT(out.p[i] == w(root, rank * c + i), "scatter [%zu] = %d", i, out.p[i]);
  fill();  // alltoall
  RANK_OK(flagcxAlltoAll(in.p, out.p, c, flagcxInt32, comm, nullptr));
  calls++;
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c && failures < 5; i++)
      RANK_EXPECT(out.p[r * c + i] == w(r, rank * c + i), "alltoall [%d][%zu]", r, i);
  fill();  // alltoall in place: each block is read by one peer and overwritten by its owner
  RANK_OK(flagcxAlltoAll(in.p, in.p, c, flagcxInt32, comm, nullptr));
  calls++;
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c && failures < 5; i++)
      RANK_EXPECT(in.p[r * c + i] == w(r, rank * c + i), "alltoall in place [%d][%zu] = %d", r, i,
                  in.p[r * c + i]);

  // With heap buffers on any rank the first call (an allreduce: it touches
  // every rank's buffers) falls back, and the next kQuietCalls (64) calls
  // go straight to the rings: every call of the rounds (12 each, 3 rounds).
  int want = !expectDirect || heapRank >= 0 ? 0 : calls;
  uint64_t direct = comm->exec->shmDirectCalls() - before;
  RANK_EXPECT(direct == static_cast<uint64_t>(want), "%llu of %d calls took the direct path, want %d",
              static_cast<unsigned long long>(direct), calls, want);
  return failures;
}

// `heapRank`: that rank's buffers come from the heap (-1: none).
void run(std::initializer_list<int> sizes, size_t count, int rounds, int heapRank, bool expectDirect,
         const harness::Env &env = {}) {
  for (int nranks : sizes) {
    auto res = harness::run(nranks, [&](int rank, int n, flagcxUniqueId *id) {
      flagcxComm_t comm;
      RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
      flagcxDeviceHandle_t h = nullptr;
      RANK_OK(flagcxDeviceHandleInit(&h));
      int failures = 0;
      // Every round allocates and frees its buffers: a peer's mappings of
      // freed memory must never be taken for the new buffers.
      for (int round = 0; round < rounds && failures == 0; round++)
        failures += everyOp(rank, n, comm, h, count + static_cast<size_t>(round % 3) * 16, round,
                            heapRank, expectDirect);
      RANK_OK(flagcxDeviceHandleFree(h));
      RANK_OK(flagcxCommDestroy(comm));
      return failures ? 1 : 0;
    }, env, 240);
    EXPECT_TRUE(res.allOk()) << nranks << " ranks: " << res.failures();
  }
}

// 16411 int32 (64 KiB + 44 bytes, not a multiple of any rank count's lines).
TEST(ShmDirect, EveryOpStraightBetweenBuffers) { run({2, 3, 4}, 16411, 6, -1, true); }
// Larger than the L2 pieces the reductions work in.
TEST(ShmDirect, SeveralMegabytes) { run({2, 3}, (3 << 20) / 4 + 5, 2, -1, true); }
// Large enough for the allreduce's streaming stores into the peers (16 MiB).
TEST(ShmDirect, StreamingSizes) { run({2, 3}, (16 << 20) / 4 + 1027, 1, -1, true); }
// A rank with heap buffers: the calls take the rings (the same decision
// everywhere), and the following ones without meeting first.
TEST(ShmDirect, HeapBuffersOnOneRankTakeTheRings) { run({2, 3}, 16411, 3, 1, true); }

// A call on heap buffers fell back; 64 calls later direct mode is tried
// again.  Rank 1's heap buffer for an allreduce (every rank's buffers are
// touched), then allreduces on shareable buffers: the first 63 take the
// rings, the next go direct, every result right.  A broadcast whose root
// holds a heap buffer falls back again on every rank, even on ranks whose
// own buffers are shareable (the root publishes its descriptor and goes).
TEST(ShmDirect, DirectAgainAfterTheQuietCalls) {
  auto res = harness::run(3, [](int rank, int n, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    flagcxDeviceHandle_t h = nullptr;
    RANK_OK(flagcxDeviceHandleInit(&h));
    const size_t c = 16411;
    int failures = 0;
    {
      Buf in(h, c, false), out(h, c, false);
      RANK_CHECK(in.p && out.p, "allocation failed");
      for (int call = 0; call < 80 && failures == 0; call++) {
        if (call == 0 || call == 70) {  // heap on rank 1 (call 70: the broadcast's root)
          Buf hin(h, c, true), hout(h, c, true);
          Buf &src = rank == 1 ? hin : in;
          Buf &dst = rank == 1 ? hout : out;
          for (size_t i = 0; i < c; i++) src.p[i] = val(rank, i, call);
          uint64_t before = comm->exec->shmDirectCalls();
          if (call == 0) {
            RANK_OK(flagcxAllReduce(src.p, dst.p, c, flagcxInt32, flagcxSum, comm, nullptr));
          } else {
            RANK_OK(flagcxBroadcast(src.p, dst.p, c, flagcxInt32, 1, comm, nullptr));
          }
          RANK_EXPECT(comm->exec->shmDirectCalls() == before, "call %d went direct", call);
          for (size_t i = 0; i < c && failures < 5; i++) {
            int32_t want = call == 0 ? val(0, i, call) + val(1, i, call) + val(2, i, call) : val(1, i, call);
            RANK_EXPECT(dst.p[i] == want, "call %d [%zu] = %d, want %d", call, i, dst.p[i], want);
          }
          continue;
        }
        for (size_t i = 0; i < c; i++) in.p[i] = val(rank, i, call);
        uint64_t before = comm->exec->shmDirectCalls();
        RANK_OK(flagcxAllReduce(in.p, out.p, c, flagcxInt32, flagcxSum, comm, nullptr));
        bool direct = comm->exec->shmDirectCalls() > before;
        const bool want = call >= 64 && call < 70;  // quiet again after call 70
        RANK_EXPECT(direct == want, "call %d %s the direct path", call, direct ? "took" : "did not take");
        for (size_t i = 0; i < c && failures < 5; i++) {
          int32_t want = val(0, i, call) + val(1, i, call) + val(2, i, call);
          RANK_EXPECT(out.p[i] == want, "call %d [%zu] = %d, want %d", call, i, out.p[i], want);
        }
      }
    }
    RANK_OK(flagcxDeviceHandleFree(h));
    RANK_OK(flagcxCommDestroy(comm));
    return failures ? 1 : 0;
  }, {}, 240);
  EXPECT_TRUE(res.allOk()) << res.failures();
}
TEST(ShmDirect, OffWhenZero) { run({2}, 16411, 1, -1, false, {{{"FLAGCX_SHM_DIRECT_BYTES", "0"}}}); }
// Below the threshold: the rings.
TEST(ShmDirect, BelowTheThresholdTakesTheRings) {
  run({2}, 16411, 1, -1, false, {{{"FLAGCX_SHM_DIRECT_BYTES", "1048576"}}});
}

// Mismatched direct-sized calls: both ranks fail with flagcxInvalidUsage,
// naming the mismatch, well before FLAGCX_TIMEOUT.
void expectCaught(const std::function<flagcxResult_t(int rank, flagcxComm_t, int32_t *)> &call) {
  harness::Env env;
  env.vars = {{"FLAGCX_TIMEOUT", "20"}};
  auto res = harness::run(2, [&](int rank, int n, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    flagcxDeviceHandle_t h = nullptr;
    RANK_OK(flagcxDeviceHandleInit(&h));
    {
      Buf b(h, (size_t(1) << 20) + 2048, false);
      auto t0 = std::chrono::steady_clock::now();
      flagcxResult_t r = call(rank, comm, b.p);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      RANK_CHECK(r == flagcxInvalidUsage, "mismatched call returned %d", static_cast<int>(r));
      RANK_CHECK(secs < 10, "took %.1f s", secs);
      std::string err = flagcxGetLastError(comm);
      RANK_CHECK(err.find("mismatch") != std::string::npos, "error does not name a mismatch: %s", err.c_str());
    }
    RANK_OK(flagcxDeviceHandleFree(h));
    flagcxCommAbort(comm);
    return 0;
  }, env, 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}
// Rank 1 asks for more elements than rank 0.
TEST(ShmDirect, MismatchedCountsAreCaught) {
  expectCaught([](int rank, flagcxComm_t comm, int32_t *p) {
    return flagcxAllReduce(p, p, rank == 0 ? 30000 : 30016, flagcxInt32, flagcxSum, comm, nullptr);
  });
}
// The block's tag keeps 20 bits of the count: counts that differ by 2^20
// elements, a direct call against a small-block call of the same tag (a
// broadcast of 2^20 + 16 bytes against one of 16), and reductions that
// differ must still be caught.
TEST(ShmDirect, CountsThatDifferBy2To20AreCaught) {
  expectCaught([](int rank, flagcxComm_t comm, int32_t *p) {
    return flagcxAllReduce(p, p, rank == 0 ? (size_t(1) << 20) + 2048 : 2048, flagcxInt32, flagcxSum,
                           comm, nullptr);
  });
}
TEST(ShmDirect, DirectAgainstSmallBlockCallIsCaught) {
  expectCaught([](int rank, flagcxComm_t comm, int32_t *p) {
    return flagcxBroadcast(p, p, rank == 0 ? (size_t(1) << 20) + 16 : 16, flagcxInt8, 0, comm, nullptr);
  });
}
TEST(ShmDirect, ReductionsThatDifferAreCaught) {
  expectCaught([](int rank, flagcxComm_t comm, int32_t *p) {
    return flagcxAllReduce(p, p, 40000, flagcxInt32, rank == 0 ? flagcxSum : flagcxMax, comm, nullptr);
  });
}

// Rank 1 leaves without calling: rank 0's direct-sized allreduce fails within
// FLAGCX_TIMEOUT (the peer's process is gone, or it never arrives).
TEST(ShmDirect, PeerThatNeverArrives) {
  harness::Env env;
  env.vars = {{"FLAGCX_TIMEOUT", "3"}};
  auto res = harness::run(2, [](int rank, int n, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    if (rank == 1) _exit(0);
    flagcxDeviceHandle_t h = nullptr;
    RANK_OK(flagcxDeviceHandleInit(&h));
    {
      Buf in(h, 40000, false), out(h, 40000, false);
      auto t0 = std::chrono::steady_clock::now();
      flagcxResult_t r = flagcxAllReduce(in.p, out.p, 40000, flagcxInt32, flagcxSum, comm, nullptr);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      RANK_CHECK(r != flagcxSuccess, "allreduce without rank 1 succeeded");
      RANK_CHECK(secs < 3 + 5, "took %.1f s", secs);
    }
    RANK_OK(flagcxDeviceHandleFree(h));
    flagcxCommAbort(comm);
    return 0;
  }, env, 60);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

// Point-to-point messages from shareable buffers (64 KiB and up: announced,
// then pulled by the receiver) are copied out of a mapping of the sender's
// allocation, not read with process_vm_readv; from heap buffers they are
// not.  A ring of sends at 2 and 3 ranks, each round on newly allocated
// buffers (a mapping of a freed allocation must not serve the new one), the
// message starting 12 bytes into its allocation, sizes across the 2 MiB
// pieces a pull is cut into; rank 1 sends from the heap in odd rounds.
TEST(ShmDirect, PointToPointReadsTheSendersMapping) {
  for (int nranks : {2, 3}) {
    auto res = harness::run(nranks, [](int rank, int n, flagcxUniqueId *id) {
      flagcxComm_t comm;
      RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
      flagcxDeviceHandle_t h = nullptr;
      RANK_OK(flagcxDeviceHandleInit(&h));
      const int right = (rank + 1) % n, left = (rank + n - 1) % n;
      const size_t counts[] = {16411, (1u << 20) / 4 + 5, (5u << 20) / 4 + 1};
      int failures = 0;
      for (int round = 0; round < 6 && failures == 0; round++) {
        const size_t c = counts[round % 3];
        auto heapSender = [&](int r) { return r == 1 && round % 2 == 1; };
        Buf in(h, c + 3, heapSender(rank)), out(h, c, false);
        RANK_CHECK(in.p && out.p, "allocation failed");
        for (size_t i = 0; i < c; i++) in.p[3 + i] = val(rank, i, round);
        uint64_t before = flagcx::shmMappedPulls();
        RANK_OK(flagcxGroupStart(comm));
        RANK_OK(flagcxSend(in.p + 3, c, flagcxInt32, right, comm, nullptr));
        RANK_OK(flagcxRecv(out.p, c, flagcxInt32, left, comm, nullptr));
        RANK_OK(flagcxGroupEnd(comm));
        uint64_t mapped = flagcx::shmMappedPulls() - before;
        RANK_EXPECT(mapped == (heapSender(left) ? 0u : 1u), "round %d: %llu message(s) from a mapping",
                    round, static_cast<unsigned long long>(mapped));
        for (size_t i = 0; i < c && failures < 5; i++)
          RANK_EXPECT(out.p[i] == val(left, i, round), "round %d [%zu] = %d, want %d", round, i,
                      out.p[i], val(left, i, round));
      }
      RANK_OK(flagcxDeviceHandleFree(h));
      RANK_OK(flagcxCommDestroy(comm));
      return failures ? 1 : 0;
    }, {}, 120);
    EXPECT_TRUE(res.allOk()) << nranks << " ranks: " << res.failures();
  }
}

}  // namespace

namespace {

// Ranks that are threads of one process reach each other's buffers by
// address: heap buffers take the direct path too (nothing to map).
TEST(ShmDirect, RanksOfOneProcessUseHeapBuffers) {
  constexpr int n = 3;
  flagcxUniqueId id;
  ASSERT_EQ(flagcxGetUniqueId(&id), flagcxSuccess);
  std::vector<std::string> errors(n);
  std::vector<std::thread> th;
  for (int rank = 0; rank < n; rank++)
    th.emplace_back([&, rank] {
      auto fail = [&](const char *what) { errors[rank] = what; };
      flagcxComm_t comm = nullptr;
      if (flagcxCommInitRank(&comm, n, &id, rank) != flagcxSuccess) return fail("init");
      const size_t c = 20011;
      std::vector<int32_t> in(c), out(c, -1);
      for (int round = 0; round < 5 && errors[rank].empty(); round++) {
        for (size_t i = 0; i < c; i++) in[i] = static_cast<int32_t>(rank * 7 + i % 13 + round);
        if (flagcxAllReduce(in.data(), out.data(), c, flagcxInt32, flagcxSum, comm, nullptr) != flagcxSuccess)
          fail("allreduce");
        for (size_t i = 0; i < c && errors[rank].empty(); i++)
          if (out[i] != static_cast<int32_t>(7 * (n * (n - 1) / 2) + n * (i % 13 + round))) fail("wrong result");
      }
      if (errors[rank].empty() && comm->exec->shmDirectCalls() != 5) fail("not on the direct path");
      if (flagcxCommDestroy(comm) != flagcxSuccess && errors[rank].empty()) fail("destroy");
    });
  for (auto &t : th) t.join();
  for (int r = 0; r < n; r++) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
