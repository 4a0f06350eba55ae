// Mixed communicators on CPU: the odd ranks run as staged device ranks
// (FLAGCX_HOST_COPY_ENGINE_NS: their buffers go through host staging, their
// copies made late and in order by the host adapter's emulated copy engine),
// the even ranks as host ranks -- the shape of a host + CUDA communicator.
// Every op (out of place; allreduce, allgather, reducescatter and broadcast
// also in place; reduce, gather, scatter, alltoall, send/recv), real processes,
// 2-4 ranks, over shm and over sockets, fixed and automatic slices; each
// call twice with different inputs through the same staging buffers; the
// values are small integers, so every result is checked bit for bit.
// Buffers from the heap or from flagcxMemAlloc (shareable); over shm the
// mixed communicator keeps the one-host paths a host-only one takes: the
// shared block for one-element calls and, on shareable buffers, the direct
// path for the larger ones (counted), also in deterministic mode.  There a
// staged rank's input is published slice by slice: with its copy engine
// held after the first slices, its host peer still finishes its first piece
// (counted on the staged rank while the rest of its input is held back).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "adapters/device/host/host_copy_engine.h"
#include "base/params.h"
#include "core/comm.h"
#include "tests/common/harness.h"

namespace {

// Whether this process's test buffers come from flagcxMemAlloc (set before
// the first one is made).
bool g_shared = false;

template <class T>
struct TestAlloc {
  using value_type = T;
  TestAlloc() = default;
  template <class U>
  TestAlloc(const TestAlloc<U> &) {}
  T *allocate(size_t n) {
    void *p = nullptr;
    if (g_shared ? flagcxMemAlloc(&p, n * sizeof(T)) != flagcxSuccess : !(p = malloc(n * sizeof(T))))
      throw std::bad_alloc();
    return static_cast<T *>(p);
  }
  void deallocate(T *p, size_t) { g_shared ? (void)flagcxMemFree(p) : free(p); }
  bool operator==(const TestAlloc &) const { return true; }
  bool operator!=(const TestAlloc &) const { return false; }
};
using Vec = std::vector<float, TestAlloc<float>>;

float val(int call, int r, size_t i) {
  return static_cast<float>((call * 7 + r * 3 + static_cast<int>(i % 13)) % 50);
}

int same(const Vec &got, const Vec &want, const char *op, size_t count,
         int call) {
  RANK_CHECK(got.size() >= want.size(), "%s: short buffer", op);
  for (size_t i = 0; i < want.size(); i++)
    RANK_CHECK(memcmp(&got[i], &want[i], sizeof(float)) == 0,
               "%s count %zu call %d: element %zu is %g, want %g", op, count, call, i, got[i], want[i]);
  return 0;
}

#define HS_CHECK(x)                  \
  do {                               \
    if (int rc_ = (x)) return rc_;   \
  } while (0)

// Allgather, reducescatter and broadcast in place (the input inside the
// output, the output inside the input, the same buffer).
int inPlaceOps(flagcxComm_t comm, int rank, int n, size_t count, int call) {
  const size_t all = count * static_cast<size_t>(n);
  Vec buf(all, -1.f), want(all);
  for (size_t i = 0; i < count; i++) buf[rank * count + i] = val(call, rank, i);
  RANK_OK(flagcxAllGather(buf.data() + rank * count, buf.data(), count, flagcxFloat32, comm, nullptr));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++) want[q * count + i] = val(call, q, i);
  HS_CHECK(same(buf, want, "allgather in place", count, call));
  for (size_t i = 0; i < all; i++) buf[i] = val(call, rank, i);
  RANK_OK(flagcxReduceScatter(buf.data(), buf.data() + rank * count, count, flagcxFloat32, flagcxSum,
                              comm, nullptr));
  Vec mine(buf.begin() + rank * count, buf.begin() + (rank + 1) * count);
  for (size_t i = 0; i < count; i++) {
    want[i] = 0;
    for (int q = 0; q < n; q++) want[i] += val(call, q, rank * count + i);
  }
  HS_CHECK(same(mine, {want.begin(), want.begin() + count}, "reducescatter in place", count, call));
  for (size_t i = 0; i < count; i++) buf[i] = val(call + 1, rank, i);
  RANK_OK(flagcxBroadcast(buf.data(), buf.data(), count, flagcxFloat32, 0, comm, nullptr));
  for (size_t i = 0; i < count; i++) want[i] = val(call + 1, 0, i);
  HS_CHECK(same({buf.begin(), buf.begin() + count}, {want.begin(), want.begin() + count},
                "broadcast in place", count, call));
  for (size_t i = 0; i < all; i++) buf[i] = val(call + 2, rank, i);
  RANK_OK(flagcxAlltoAll(buf.data(), buf.data(), count, flagcxFloat32, comm, nullptr));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++) want[q * count + i] = val(call + 2, q, rank * count + i);
  HS_CHECK(same(buf, want, "alltoall in place", count, call));
  return 0;
}

// One size, one call number: every op, checked.
int everyOp(flagcxComm_t comm, int rank, int n, size_t count, int call) {
  const size_t all = count * static_cast<size_t>(n);
  Vec in(all), out(all), sum(all), want(all);
  for (size_t i = 0; i < all; i++) {
    in[i] = val(call, rank, i);
    sum[i] = 0;
    for (int q = 0; q < n; q++) sum[i] += val(call, q, i);
  }
  const int root = n - 1;
  auto reset = [&] { std::fill(out.begin(), out.end(), -1.f); };
  reset();
  RANK_OK(flagcxAllReduce(in.data(), out.data(), count, flagcxFloat32, flagcxSum, comm, nullptr));
  HS_CHECK(same(out, {sum.begin(), sum.begin() + count}, "allreduce", count, call));
  Vec inPlace(in.begin(), in.begin() + count);
  RANK_OK(flagcxAllReduce(inPlace.data(), inPlace.data(), count, flagcxFloat32, flagcxMax, comm, nullptr));
  for (size_t i = 0; i < count; i++) {
    want[i] = 0;
    for (int q = 0; q < n; q++) want[i] = std::max(want[i], val(call, q, i));
  }
  HS_CHECK(same(inPlace, {want.begin(), want.begin() + count}, "allreduce in place max", count, call));
  HS_CHECK(inPlaceOps(comm, rank, n, count, call));
  reset();
  RANK_OK(flagcxAllGather(in.data(), out.data(), count, flagcxFloat32, comm, nullptr));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++) want[q * count + i] = val(call, q, i);
  HS_CHECK(same(out, want, "allgather", count, call));
  if (rank == root) {
    reset();
    RANK_OK(flagcxGather(in.data(), out.data(), count, flagcxFloat32, root, comm, nullptr));
    HS_CHECK(same(out, want, "gather", count, call));
  } else {
    RANK_OK(flagcxGather(in.data(), out.data(), count, flagcxFloat32, root, comm, nullptr));
  }
  reset();
  RANK_OK(flagcxReduceScatter(in.data(), out.data(), count, flagcxFloat32, flagcxSum, comm, nullptr));
  HS_CHECK(same(out, {sum.begin() + rank * count, sum.begin() + (rank + 1) * count}, "reducescatter",
                count, call));
  reset();
  RANK_OK(flagcxReduce(in.data(), out.data(), count, flagcxFloat32, flagcxSum, root, comm, nullptr));
  if (rank == root) HS_CHECK(same(out, {sum.begin(), sum.begin() + count}, "reduce", count, call));
  reset();
  RANK_OK(flagcxBroadcast(in.data(), out.data(), count, flagcxFloat32, root, comm, nullptr));
  for (size_t i = 0; i < count; i++) want[i] = val(call, root, i);
  HS_CHECK(same(out, {want.begin(), want.begin() + count}, "broadcast", count, call));
  reset();
  RANK_OK(flagcxScatter(in.data(), out.data(), count, flagcxFloat32, root, comm, nullptr));
  for (size_t i = 0; i < count; i++) want[i] = val(call, root, rank * count + i);
  HS_CHECK(same(out, {want.begin(), want.begin() + count}, "scatter", count, call));
  reset();
  RANK_OK(flagcxAlltoAll(in.data(), out.data(), count, flagcxFloat32, comm, nullptr));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++) want[q * count + i] = val(call, q, rank * count + i);
  HS_CHECK(same(out, want, "alltoall", count, call));
  // A ring of send/recv: to the next rank, from the previous.
  reset();
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  RANK_OK(flagcxGroupStart(comm));
  RANK_OK(flagcxSend(in.data(), count, flagcxFloat32, next, comm, nullptr));
  RANK_OK(flagcxRecv(out.data(), count, flagcxFloat32, prev, comm, nullptr));
  RANK_OK(flagcxGroupEnd(comm));
  for (size_t i = 0; i < count; i++) want[i] = val(call, prev, i);
  HS_CHECK(same(out, {want.begin(), want.begin() + count}, "sendrecv", count, call));
  return 0;
}

// Collectives per everyOp call (send/recv is not one).
constexpr uint64_t kCollsPerRound = 13;

int runRank(int rank, int n, flagcxUniqueId *id) {
  g_shared = getenv("HS_SHARED") != nullptr;
  if (rank % 2 == 1) {  // this rank stages its buffers behind a slow copy engine
    setenv("FLAGCX_HOST_COPY_ENGINE_NS", "200", 1);
    flagcx::paramsReload();
  }
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
  const flagcx::ExecMode want = rank % 2 ? flagcx::ExecMode::Staged : flagcx::ExecMode::Host;
  RANK_CHECK(comm->exec->mode() == want, "rank %d runs in mode %d", rank, static_cast<int>(comm->exec->mode()));
  for (size_t count : {size_t(1), size_t(5000), size_t(300001)})
    for (int call = 0; call < 2; call++) HS_CHECK(everyOp(comm, rank, n, count, call));
  // Over shm the one-element calls took the block; the larger ones went
  // direct on shareable buffers, else took the rings (so did all over
  // sockets).
  const bool shm = !getenv("FLAGCX_SHM_DISABLE");
  const uint64_t small = shm ? 2 * kCollsPerRound : 0, direct = shm && g_shared ? 4 * kCollsPerRound : 0;
  RANK_CHECK(comm->exec->smallCalls() == small && comm->exec->shmDirectCalls() == direct,
             "one-host paths took %llu small calls (want %llu), %llu direct (want %llu)",
             static_cast<unsigned long long>(comm->exec->smallCalls()), static_cast<unsigned long long>(small),
             static_cast<unsigned long long>(comm->exec->shmDirectCalls()), static_cast<unsigned long long>(direct));
  RANK_OK(flagcxCommDestroy(comm));
  return 0;
}

// Rank 1 (staged) holds its copy engine after the first 16 slices of its
// input (4 KiB slices, 1 MiB in all): rank 0 (host) reduces its first piece
// (64 KiB: those slices) and publishes it, which rank 1 sees while the rest
// is held; only then is the engine let go.  Were the peers to wait for the
// whole input, nothing would move until the 60 s bound let it go, and the
// count would stay 0.
int overlapRank(int rank, int n, flagcxUniqueId *id) {
  g_shared = true;
  if (rank == 1) {
    setenv("FLAGCX_HOST_COPY_ENGINE_NS", "200", 1);
    flagcx::paramsReload();
  }
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
  const size_t count = 256 * 1024;
  for (int call = 0; call < 2; call++) {
    Vec in(count), out(count, -1.f), want(count);
    for (size_t i = 0; i < count; i++) {
      in[i] = val(call, rank, i);
      want[i] = val(call, 0, i) + val(call, 1, i);
    }
    std::thread helper;
    flagcx::host::CopyEngine *ce = rank == 1 ? flagcx::host::emulatedCopyEngine() : nullptr;
    const uint64_t before = comm->exec->shmDirectOverlaps();
    if (ce) {
      ce->flush();
      ce->holdAfter(ce->mark() + 16);
      helper = std::thread([&] {
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (comm->exec->shmDirectOverlaps() == before && std::chrono::steady_clock::now() < end)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ce->release();
      });
    }
    flagcxResult_t r = flagcxAllReduce(in.data(), out.data(), count, flagcxFloat32, flagcxSum, comm, nullptr);
    if (helper.joinable()) helper.join();
    RANK_OK(r);
    HS_CHECK(same(out, want, "allreduce (held engine)", count, call));
    RANK_CHECK(!ce || comm->exec->shmDirectOverlaps() > before,
               "call %d: rank 0 made no progress while rank 1's input was held after 16 of 256 slices", call);
  }
  RANK_CHECK(comm->exec->shmDirectCalls() == 2, "%llu direct calls, want 2",
             static_cast<unsigned long long>(comm->exec->shmDirectCalls()));
  RANK_OK(flagcxCommDestroy(comm));
  return 0;
}

TEST(HeteroStaged, PeersStartBeforeTheInputIsDown) {
  harness::Env env{{{"FLAGCX_STAGE_SLICE_SIZE", "4096"}, {"FLAGCX_TIMEOUT", "120"}}};
  auto res = harness::run(2, overlapRank, env, 300);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

struct Case {
  int nranks;
  bool sockets;
  const char *slice;  // FLAGCX_STAGE_SLICE_SIZE
  bool shared = false;         // buffers from flagcxMemAlloc
  bool deterministic = false;  // FLAGCX_DETERMINISTIC=1
};

void runCase(const Case &c) {
  harness::Env env{{{"FLAGCX_STAGE_SLICE_SIZE", c.slice}, {"FLAGCX_TIMEOUT", "120"}}};
  if (c.sockets) env.vars.push_back({"FLAGCX_SHM_DISABLE", "1"});
  if (c.shared) env.vars.push_back({"HS_SHARED", "1"});
  if (c.deterministic) env.vars.push_back({"FLAGCX_DETERMINISTIC", "1"});
  auto res = harness::run(c.nranks, runRank, env, 300);
  EXPECT_TRUE(res.allOk()) << c.nranks << " ranks, " << (c.sockets ? "sockets" : "shm")
                           << ", slice " << c.slice << (c.shared ? ", shared buffers" : "")
                           << (c.deterministic ? ", deterministic" : "") << ": " << res.failures();
}

TEST(HeteroStaged, TwoRanksShmAutoSlices) { runCase({2, false, "-2"}); }
TEST(HeteroStaged, ThreeRanksSocketsSmallSlices) { runCase({3, true, "4096"}); }
TEST(HeteroStaged, FourRanksShmSmallSlices) { runCase({4, false, "4096"}); }
TEST(HeteroStaged, FourRanksSocketsAutoSlices) { runCase({4, true, "-2"}); }
TEST(HeteroStaged, TwoRanksShmSharedBuffers) { runCase({2, false, "-2", true}); }
TEST(HeteroStaged, ThreeRanksShmSharedDeterministic) { runCase({3, false, "4096", true, true}); }
TEST(HeteroStaged, FourRanksShmSharedBuffers) { runCase({4, false, "4096", true}); }

}  // namespace
