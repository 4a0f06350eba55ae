// flagcxCommSplit, flagcxCommRevoke and the elastic calls' argument checks,
// in real ranks: split by colour and key at 1 to 4 ranks (8 with
// ELASTIC_FULL=1) with NOCOLOR ranks and singleton groups, each child
// checked for its size, its order (an allgather of parent ranks) and an
// allreduce; two children of one parent running allreduces at the same time
// on two threads; a revoke on one rank failing its peers' waiting call and
// the revoked rank's later calls; bad arguments, each one log line.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/harness.h"
#include "tests/common/inspect.h"

namespace {

constexpr int kTimeoutSec = 30;  // generous: 2 cores shared with other work

harness::Env env() { return {{{"FLAGCX_TIMEOUT", std::to_string(kTimeoutSec)}}}; }

// The split pattern at n ranks: rank n-1 opts out (n >= 3), rank 1 alone
// (n >= 4), the others by parity; keys with ties.
int colorOf(int r, int n) {
  if (n >= 3 && r == n - 1) return FLAGCX_SPLIT_NOCOLOR;
  if (n >= 4 && r == 1) return 5;
  return r % 2;
}
int keyOf(int r, int n) { return (n - r) % 3; }

// Parent ranks of rank's group in the child's order.
std::vector<int> groupOf(int rank, int n) {
  std::vector<int> g;
  for (int r = 0; r < n; r++)
    if (colorOf(r, n) == colorOf(rank, n)) g.push_back(r);
  std::stable_sort(g.begin(), g.end(), [n](int a, int b) { return keyOf(a, n) < keyOf(b, n); });
  return g;
}

// Size, rank, order and one allreduce of a child whose parent ranks are `g`.
int checkChild(int rank, flagcxComm_t child, const std::vector<int> &g) {
  int cn = 0, cr = -1;
  RANK_OK(flagcxCommCount(child, &cn));
  RANK_OK(flagcxCommUserRank(child, &cr));
  int want = static_cast<int>(std::find(g.begin(), g.end(), rank) - g.begin());
  RANK_CHECK(cn == static_cast<int>(g.size()) && cr == want, "child rank %d of %d, want %d of %zu",
             cr, cn, want, g.size());
  std::vector<int> order(g.size(), -1);
  order[static_cast<size_t>(cr)] = rank;
  RANK_OK(flagcxAllGather(&order[static_cast<size_t>(cr)], order.data(), 1, flagcxInt, child,
                          nullptr));
  RANK_CHECK(order == g, "the child's ranks are not in (key, parent rank) order");
  std::vector<float> in(3001, static_cast<float>(rank + 1)), out(in.size(), 0.f);
  RANK_OK(flagcxAllReduce(in.data(), out.data(), in.size(), flagcxFloat, flagcxSum, child, nullptr));
  float sum = 0;
  for (int r : g) sum += static_cast<float>(r + 1);
  for (float v : out) RANK_CHECK(v == sum, "child allreduce gave %g, want %g", v, sum);
  return 0;
}

int splitBody(int rank, int n, flagcxUniqueId *id) {
  flagcxComm_t comm = nullptr, child = nullptr;
  RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
  RANK_OK(flagcxCommSplit(comm, colorOf(rank, n), keyOf(rank, n), &child));
  if (colorOf(rank, n) == FLAGCX_SPLIT_NOCOLOR) {
    RANK_CHECK(child == nullptr, "NOCOLOR gave a communicator");
  } else {
    int rc = checkChild(rank, child, groupOf(rank, n));
    if (rc) return rc;
    RANK_OK(flagcxCommDestroy(child));
  }
  // The parent goes on after its child is gone.
  float v = 1.f;
  RANK_OK(flagcxAllReduce(&v, &v, 1, flagcxFloat, flagcxSum, comm, nullptr));
  RANK_CHECK(v == static_cast<float>(n), "parent allreduce after the split gave %g", v);
  RANK_OK(flagcxCommDestroy(comm));
  return 0;
}

TEST(Split, ByColorAndKey) {
  std::vector<int> sizes = {1, 2, 3, 4};
  if (harness::envIs("ELASTIC_FULL", "1")) sizes = {1, 2, 3, 4, 5, 6, 7, 8};
  for (int n : sizes) {
    auto res = harness::run(n, splitBody, env(), 120);
    EXPECT_TRUE(res.allOk()) << n << " ranks: " << res.failures();
  }
}

// Two children of one parent (by parity and by halves) run allreduces at
// the same time, one thread each.
TEST(Split, TwoChildrenConcurrently) {
  auto res = harness::run(4, [](int rank, int n, flagcxUniqueId *id) {
    flagcxComm_t comm = nullptr, a = nullptr, b = nullptr;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    RANK_OK(flagcxCommSplit(comm, rank % 2, rank, &a));
    RANK_OK(flagcxCommSplit(comm, rank / 2, rank, &b));
    int bad[2] = {0, 0};
    auto loop = [rank](flagcxComm_t c, float want, int *failed) {
      std::vector<float> in(70000, static_cast<float>(rank + 1)), out(in.size());
      for (int i = 0; i < 30 && !*failed; i++) {
        if (flagcxAllReduce(in.data(), out.data(), in.size(), flagcxFloat, flagcxSum, c,
                            nullptr) != flagcxSuccess)
          *failed = 1;
        for (float v : out) *failed |= v != want ? 2 : 0;
      }
    };
    float wantA = rank % 2 ? 2.f + 4.f : 1.f + 3.f, wantB = rank / 2 ? 3.f + 4.f : 1.f + 2.f;
    std::thread ta(loop, a, wantA, &bad[0]), tb(loop, b, wantB, &bad[1]);
    ta.join();
    tb.join();
    RANK_CHECK(!bad[0] && !bad[1], "concurrent children failed (%d, %d)", bad[0], bad[1]);
    RANK_OK(flagcxCommDestroy(a));
    RANK_OK(flagcxCommDestroy(b));
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, env(), 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

// Rank 0 revokes while ranks 1 and 2 wait for it in an allreduce: they fail
// long before FLAGCX_TIMEOUT; rank 0's later calls and its split are refused;
// all three shrink the revoked communicator (excluding nobody) and go on.
TEST(Revoke, ReachesWaitingPeers) {
  auto res = harness::run(3, [](int rank, int n, flagcxUniqueId *id) {
    flagcxComm_t comm = nullptr, child = nullptr;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    float v = 1.f;
    RANK_OK(flagcxAllReduce(&v, &v, 1, flagcxFloat, flagcxSum, comm, nullptr));
    std::vector<float> big(1 << 18, 1.f);
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      RANK_OK(flagcxCommRevoke(comm, 0));
      RANK_CHECK(flagcxAllReduce(&v, &v, 1, flagcxFloat, flagcxSum, comm, nullptr) ==
                 flagcxInvalidUsage, "an allreduce on a revoked communicator was accepted");
      RANK_CHECK(flagcxCommSplit(comm, 0, 0, &child) == flagcxInvalidUsage,
                 "a split of a revoked communicator was accepted");
    } else {
      int64_t t0 = harness::nowNs();
      flagcxResult_t r = flagcxAllReduce(big.data(), big.data(), big.size(), flagcxFloat,
                                         flagcxSum, comm, nullptr);
      RANK_CHECK(r != flagcxSuccess, "the allreduce waiting for the revoked rank succeeded");
      RANK_CHECK(harness::secsSince(t0) < kTimeoutSec - 5, "the revoke took %.1f s to arrive",
                 harness::secsSince(t0));
      RANK_OK(flagcxCommRevoke(comm, 0));
    }
    RANK_OK(flagcxCommShrink(comm, nullptr, 0, &child, FLAGCX_SHRINK_DEFAULT));
    std::fill(big.begin(), big.end(), 1.f);
    RANK_OK(flagcxAllReduce(big.data(), big.data(), big.size(), flagcxFloat, flagcxSum, child,
                            nullptr));
    for (float x : big) RANK_CHECK(x == 3.f, "allreduce after the shrink gave %g", x);
    RANK_OK(flagcxCommDestroy(comm));
    RANK_OK(flagcxCommDestroy(child));
    return 0;
  }, env(), 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

// One bad call: its result, and one log line that names `word`.
int expectRefused(int rank, flagcxResult_t got, flagcxResult_t want, const char *word,
                  const char *what) {
  std::string err = flagcxGetLastError(nullptr);
  RANK_CHECK(got == want, "%s: %s, want %s", what, flagcxGetErrorString(got),
             flagcxGetErrorString(want));
  RANK_CHECK(err.find(word) != std::string::npos, "%s: the error '%s' does not name %s", what,
             err.c_str(), word);
  (void)rank;
  return 0;
}

#define REFUSED(call, want, word) \
  if (int rc_ = expectRefused(rank, (call), (want), (word), #call)) return rc_

TEST(ElasticArgs, BadInputRefused) {
  auto res = harness::run(3, [](int rank, int n, flagcxUniqueId *id) {
    flagcxComm_t comm = nullptr, c = nullptr;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    int other = (rank + 1) % n;
    int dup[2] = {other, other}, range[1] = {n}, neg[1] = {-1}, all[3] = {0, 1, 2},
        self[1] = {rank};
    const flagcxResult_t arg = flagcxInvalidArgument, usage = flagcxInvalidUsage;
    REFUSED(flagcxCommShrink(comm, dup, 2, &c, 0), arg, "twice");
    REFUSED(flagcxCommShrink(comm, range, 1, &c, 0), arg, "out of range");
    REFUSED(flagcxCommShrink(comm, neg, 1, &c, 0), arg, "out of range");
    REFUSED(flagcxCommShrink(comm, all, 3, &c, 0), arg, "every");
    REFUSED(flagcxCommShrink(comm, self, 1, &c, 0), usage, "excludeRanksList");
    REFUSED(flagcxCommShrink(comm, nullptr, 1, &c, 0), arg, "excludeRanksList");
    REFUSED(flagcxCommShrink(comm, nullptr, 0, &c, 7), arg, "shrinkFlags");
    REFUSED(flagcxCommSplit(comm, -2, 0, &c), arg, "color");
    REFUSED(flagcxCommSplit(comm, 0, 0, nullptr), arg, "newcomm");
    REFUSED(flagcxCommRevoke(comm, 1), arg, "revokeFlags");
    flagcxUniqueId gid;
    RANK_OK(flagcxCommGetUniqueId(comm, &gid));
    REFUSED(flagcxCommGrow(comm, n, &gid, -1, &c), arg, "nranks");
    REFUSED(flagcxCommGrow(comm, n + 2, &gid, 0, &c), arg, "rank");
    REFUSED(flagcxCommGrow(nullptr, n + 2, &gid, n - 1, &c), arg, "rank");
    REFUSED(flagcxCommGrow(nullptr, n + 2, &gid, n + 2, &c), arg, "rank");
    REFUSED(flagcxCommGrow(nullptr, n + 2, nullptr, n, &c), arg, "uniqueId");
    REFUSED(flagcxCommGrow(nullptr, n + 2, id, n, &c), arg, "uniqueId");
    RANK_CHECK(c == nullptr, "a refused call left a communicator");
    // Nothing above touched the communicator.
    float v = 1.f;
    RANK_OK(flagcxAllReduce(&v, &v, 1, flagcxFloat, flagcxSum, comm, nullptr));
    RANK_CHECK(v == static_cast<float>(n), "allreduce after the refused calls gave %g", v);
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, env(), 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

}  // namespace
