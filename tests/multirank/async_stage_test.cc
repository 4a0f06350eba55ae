// The stream-ordered small-call path of a staged rank on CPU: odd ranks run
// as staged device ranks (FLAGCX_HOST_COPY_ENGINE_NS), even ranks as host
// ranks, every call on a host stream.  A staged rank's calls up to
// FLAGCX_STREAM_ASYNC_BYTES return at once (counted) and run in stream
// order: a chain of in-place allreduces longer than the ring of slots (each
// call's input is the previous call's output) with larger, ordinary calls
// between them; every fixed-size op back to back into separate outputs,
// checked after one synchronize; the calls return while the stream is
// still held shut by a task queued before them; a failed call (counts that
// differ between ranks) releases the stream with an error instead of
// hanging it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "adapters/device/adapter.h"
#include "base/params.h"
#include "core/comm.h"
#include "tests/common/harness.h"

namespace {

struct Rank {
  flagcxComm_t comm = nullptr;
  flagcxDeviceHandle_t h = nullptr;
  flagcxStream_t st = nullptr;
  bool staged = false;
};

int open(Rank &r, int rank, int n, flagcxUniqueId *id) {
  r.staged = rank % 2 == 1;
  if (r.staged) {
    setenv("FLAGCX_HOST_COPY_ENGINE_NS", "200", 1);
    flagcx::paramsReload();
  }
  RANK_OK(flagcxCommInitRank(&r.comm, n, id, rank));
  RANK_OK(flagcxDeviceHandleInit(&r.h));
  RANK_OK(r.h->streamCreate(&r.st));
  return 0;
}

int close(Rank &r) {
  RANK_OK(r.h->streamDestroy(r.st));
  RANK_OK(flagcxDeviceHandleFree(r.h));
  RANK_OK(flagcxCommDestroy(r.comm));
  return 0;
}

// x <- allreduce(x) in place, kChain times on one stream; every 10th step a
// larger allreduce (over the slots' size) on its own buffer joins the chain.
constexpr int kChain = 40;
int chain(Rank &r, int rank, int n) {
  std::vector<uint64_t> x = {static_cast<uint64_t>(rank) + 1, 2 * static_cast<uint64_t>(rank) + 1};
  const size_t bigCount = 40000;  // 320 KB: the ordinary staged path
  std::vector<uint64_t> big(bigCount, 1);
  int bigCalls = 0;
  for (int k = 0; k < kChain; k++) {
    RANK_OK(flagcxAllReduce(x.data(), x.data(), 2, flagcxUint64, flagcxSum, r.comm, r.st));
    if (k % 10 == 9) {
      RANK_OK(flagcxAllReduce(big.data(), big.data(), bigCount, flagcxUint64, flagcxSum, r.comm, r.st));
      bigCalls++;
    }
  }
  RANK_OK(r.h->streamSynchronize(r.st));
  uint64_t s0 = 0, s1 = 0, scale = 1, bigWant = 1;
  for (uint64_t q = 0; q < static_cast<uint64_t>(n); q++) s0 += q + 1, s1 += 2 * q + 1;
  for (int k = 1; k < kChain; k++) scale *= static_cast<uint64_t>(n);  // wraps, as the sums do
  for (int k = 0; k < bigCalls; k++) bigWant *= static_cast<uint64_t>(n);
  RANK_CHECK(x[0] == s0 * scale && x[1] == s1 * scale, "chain: got %llu %llu, want %llu %llu",
             static_cast<unsigned long long>(x[0]), static_cast<unsigned long long>(x[1]),
             static_cast<unsigned long long>(s0 * scale), static_cast<unsigned long long>(s1 * scale));
  RANK_CHECK(big[bigCount - 1] == bigWant, "chain: the large call gave %llu, want %llu",
             static_cast<unsigned long long>(big[bigCount - 1]), static_cast<unsigned long long>(bigWant));
  uint64_t took = r.comm->exec->asyncCalls();
  RANK_CHECK(took == (r.staged ? static_cast<uint64_t>(kChain) : 0u),
             "chain: %llu calls took the stream-ordered path", static_cast<unsigned long long>(took));
  return 0;
}

float v(int call, int r, size_t i) { return static_cast<float>((call * 5 + r * 3 + static_cast<int>(i % 7)) % 40); }

// Every fixed-size op, kRounds times, each into its own output; one synchronize.
constexpr int kRounds = 3;
constexpr int kOps = 8;
int everyOp(Rank &r, int rank, int n, size_t count) {
  const size_t all = count * static_cast<size_t>(n);
  const int root = n - 1;
  std::vector<std::vector<float>> in(kRounds), out(kRounds * kOps);
  for (int c = 0; c < kRounds; c++) {
    in[static_cast<size_t>(c)].resize(all);
    for (size_t i = 0; i < all; i++) in[static_cast<size_t>(c)][i] = v(c, rank, i);
    for (int o = 0; o < kOps; o++) out[static_cast<size_t>(c * kOps + o)].assign(all, -1.f);
  }
  for (int c = 0; c < kRounds; c++) {
    const float *i = in[static_cast<size_t>(c)].data();
    auto o = [&](int k) { return out[static_cast<size_t>(c * kOps + k)].data(); };
    RANK_OK(flagcxAllReduce(i, o(0), count, flagcxFloat32, flagcxSum, r.comm, r.st));
    RANK_OK(flagcxAllGather(i, o(1), count, flagcxFloat32, r.comm, r.st));
    RANK_OK(flagcxReduceScatter(i, o(2), count, flagcxFloat32, flagcxSum, r.comm, r.st));
    RANK_OK(flagcxBroadcast(i, o(3), count, flagcxFloat32, root, r.comm, r.st));
    RANK_OK(flagcxReduce(i, o(4), count, flagcxFloat32, flagcxMax, root, r.comm, r.st));
    RANK_OK(flagcxAlltoAll(i, o(5), count, flagcxFloat32, r.comm, r.st));
    RANK_OK(flagcxGather(i, o(6), count, flagcxFloat32, root, r.comm, r.st));
    RANK_OK(flagcxScatter(i, o(7), count, flagcxFloat32, root, r.comm, r.st));
  }
  RANK_OK(r.h->streamSynchronize(r.st));
  for (int c = 0; c < kRounds; c++)
    for (size_t i = 0; i < count; i++) {
      auto got = [&](int k, size_t at) { return out[static_cast<size_t>(c * kOps + k)][at]; };
      float sum = 0, mx = 0, rs = 0;
      for (int q = 0; q < n; q++) sum += v(c, q, i), mx = std::max(mx, v(c, q, i)), rs += v(c, q, rank * count + i);
      RANK_CHECK(got(0, i) == sum, "allreduce round %d count %zu [%zu]: %g want %g", c, count, i, got(0, i), sum);
      for (int q = 0; q < n; q++) {
        RANK_CHECK(got(1, q * count + i) == v(c, q, i), "allgather round %d count %zu", c, count);
        RANK_CHECK(got(5, q * count + i) == v(c, q, rank * count + i), "alltoall round %d count %zu", c, count);
        if (rank == root) RANK_CHECK(got(6, q * count + i) == v(c, q, i), "gather round %d count %zu", c, count);
      }
      RANK_CHECK(got(2, i) == rs, "reducescatter round %d count %zu [%zu]: %g want %g", c, count, i, got(2, i), rs);
      RANK_CHECK(got(3, i) == v(c, root, i), "broadcast round %d count %zu", c, count);
      if (rank == root) RANK_CHECK(got(4, i) == mx, "reduce round %d count %zu", c, count);
      RANK_CHECK(got(7, i) == v(c, root, rank * count + i), "scatter round %d count %zu", c, count);
    }
  return 0;
}

int runRank(int rank, int n, flagcxUniqueId *id) {
  Rank r;
  if (int rc = open(r, rank, n, id)) return rc;
  if (int rc = chain(r, rank, n)) return rc;
  uint64_t before = r.comm->exec->asyncCalls();
  for (size_t count : {size_t(1), size_t(1000), size_t(20000)})
    if (int rc = everyOp(r, rank, n, count)) return rc;
  // count 1 and 1000 fit a slot (32 KiB) for every op at these sizes; 20000 (80 KB) none.
  uint64_t want = r.staged ? 2u * kRounds * kOps : 0u;
  RANK_CHECK(r.comm->exec->asyncCalls() - before == want, "every op: %llu calls took the path, want %llu",
             static_cast<unsigned long long>(r.comm->exec->asyncCalls() - before),
             static_cast<unsigned long long>(want));
  return close(r);
}

// The staged rank's stream is held shut by a task queued first: its calls
// (as many as the path has slots) still return, nothing is written yet;
// once the task lets go, every result is there.  The test waits until the
// stream's own worker runs the task: a host stream's query or synchronize
// runs pending entries inline on the caller's thread (host_stream.cc), so a
// query made before would run the gate here and wait for itself.
constexpr int kSlots = 32;  // async_small.cc's ring
struct Gate {
  std::atomic<bool> entered{false}, open{false};
};
flagcxResult_t gate(void *arg) {
  auto *g = static_cast<Gate *>(arg);
  g->entered = true;
  while (!g->open.load()) std::this_thread::yield();
  return flagcxSuccess;
}
int heldStream(int rank, int n, flagcxUniqueId *id) {
  Rank r;
  if (int rc = open(r, rank, n, id)) return rc;
  Gate g;
  if (r.staged) {
    RANK_OK(flagcx::hostAdapter()->enqueue(r.st, flagcx::StreamTask{gate, &g, nullptr, false}));
    while (!g.entered.load()) std::this_thread::yield();
  }
  std::vector<std::vector<float>> out(kSlots, std::vector<float>(2, -1.f));
  std::vector<float> in = {static_cast<float>(rank), 1.f};
  for (int k = 0; k < kSlots; k++)
    RANK_OK(flagcxAllReduce(in.data(), out[static_cast<size_t>(k)].data(), 2, flagcxFloat32, flagcxSum,
                            r.comm, r.st));
  if (r.staged) {
    RANK_CHECK(r.h->streamQuery(r.st) == flagcxInProgress, "the held stream is done");
    for (auto &o : out) RANK_CHECK(o[0] == -1.f, "an output was written while the stream was held");
    g.open = true;
  }
  RANK_OK(r.h->streamSynchronize(r.st));
  for (auto &o : out)
    RANK_CHECK(o[0] == static_cast<float>(n * (n - 1) / 2) && o[1] == static_cast<float>(n),
               "held stream: got %g %g", o[0], o[1]);
  return close(r);
}

// Counts that differ between the ranks: the staged rank's call returns, and
// its stream finishes with the error (the hold released, not hung).
int failedCall(int rank, int n, flagcxUniqueId *id) {
  Rank r;
  if (int rc = open(r, rank, n, id)) return rc;
  std::vector<float> buf(8, 1.f);
  RANK_OK(flagcxAllReduce(buf.data(), buf.data(), r.staged ? 3 : 2, flagcxFloat32, flagcxSum, r.comm, r.st));
  flagcxResult_t got = r.h->streamSynchronize(r.st);
  RANK_CHECK(got != flagcxSuccess, "a mismatched call left the stream without an error");
  RANK_CHECK(!r.staged || r.comm->exec->asyncCalls() == 1, "the call did not take the path");
  flagcxCommAbort(r.comm);
  RANK_OK(r.h->streamDestroy(r.st));
  RANK_OK(flagcxDeviceHandleFree(r.h));
  return 0;
}

void runCase(int nranks, bool sockets) {
  harness::Env env{{{"FLAGCX_TIMEOUT", "120"}, {"FLAGCX_STREAM_ASYNC_BYTES", "32768"}}};
  if (sockets) env.vars.push_back({"FLAGCX_SHM_DISABLE", "1"});
  auto res = harness::run(nranks, runRank, env, 300);
  EXPECT_TRUE(res.allOk()) << nranks << " ranks, " << (sockets ? "sockets" : "shm") << ": " << res.failures();
}

TEST(StreamOrdered, TwoRanksShm) { runCase(2, false); }
TEST(StreamOrdered, TwoRanksSockets) { runCase(2, true); }
TEST(StreamOrdered, FourRanksShm) { runCase(4, false); }

TEST(StreamOrdered, CallsReturnWhileTheStreamIsHeld) {
  harness::Env env{{{"FLAGCX_TIMEOUT", "60"}, {"FLAGCX_STREAM_ASYNC_BYTES", "32768"}}};
  auto res = harness::run(2, heldStream, env, 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

TEST(StreamOrdered, FailedCallReleasesTheStream) {
  harness::Env env{{{"FLAGCX_TIMEOUT", "20"}, {"FLAGCX_STREAM_ASYNC_BYTES", "32768"}}};
  auto res = harness::run(2, failedCall, env, 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

}  // namespace
