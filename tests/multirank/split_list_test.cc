// FLAGCX_CLUSTER_SPLIT_LIST with FlagCX's meaning: per device-kind cluster,
// into how many sub-clusters to split it.  "=2" on host ranks gives two
// sub-clusters of consecutive ranks, a heterogeneous communicator, and
// correct results for every collective on the engine's path (allreduce
// through the hierarchical script, grouped by sub-cluster); bad lists fail
// the init on every rank with a message naming the variable.
// SPLIT_NRANKS picks the rank count (4 in the quick suite, 8 in the full).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/params.h"
#include "core/comm.h"
#include "tests/common/harness.h"

namespace {

int nranksUnderTest() {
  const char *n = getenv("SPLIT_NRANKS");
  return n ? atoi(n) : 4;
}

// Element i of rank r's input: small integers, exact in float sums.
float in(int r, size_t i) { return static_cast<float>((r + 1) * (1 + i % 5)); }

int everyCollective(int rank, int n, flagcxComm_t comm) {
  const size_t c = 1031;  // per rank; odd, so slices do not line up
  std::vector<float> send(c * n), recv(c * n), want(c * n);
  auto fill = [&] {
    for (size_t i = 0; i < send.size(); i++) send[i] = in(rank, i);
    std::fill(recv.begin(), recv.end(), -1.0f);
  };
  auto expect = [&](const char *op, size_t len) {
    for (size_t i = 0; i < len; i++)
      if (recv[i] != want[i]) {
        fprintf(stderr, "rank %d: %s: recv[%zu] = %g, want %g\n", rank, op, i, recv[i], want[i]);
        return 1;
      }
    return 0;
  };
  float ranksSum = static_cast<float>(n * (n + 1) / 2);
  const int root = n - 1;

  fill();
  RANK_OK(flagcxAllReduce(send.data(), recv.data(), c, flagcxFloat, flagcxSum, comm, nullptr));
  for (size_t i = 0; i < c; i++) want[i] = ranksSum * static_cast<float>(1 + i % 5);
  if (expect("allreduce", c)) return 1;

  fill();
  RANK_OK(flagcxReduceScatter(send.data(), recv.data(), c, flagcxFloat, flagcxSum, comm, nullptr));
  for (size_t i = 0; i < c; i++) want[i] = ranksSum * static_cast<float>(1 + (rank * c + i) % 5);
  if (expect("reducescatter", c)) return 1;

  fill();
  RANK_OK(flagcxAllGather(send.data(), recv.data(), c, flagcxFloat, comm, nullptr));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c; i++) want[r * c + i] = in(r, i);
  if (expect("allgather", c * n)) return 1;

  fill();
  RANK_OK(flagcxBroadcast(send.data(), recv.data(), c, flagcxFloat, root, comm, nullptr));
  for (size_t i = 0; i < c; i++) want[i] = in(root, i);
  if (expect("broadcast", c)) return 1;

  fill();
  RANK_OK(flagcxReduce(send.data(), recv.data(), c, flagcxFloat, flagcxSum, root, comm, nullptr));
  if (rank == root) {
    for (size_t i = 0; i < c; i++) want[i] = ranksSum * static_cast<float>(1 + i % 5);
    if (expect("reduce", c)) return 1;
  }

  fill();
  RANK_OK(flagcxGather(send.data(), recv.data(), c, flagcxFloat, root, comm, nullptr));
  if (rank == root) {
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < c; i++) want[r * c + i] = in(r, i);
    if (expect("gather", c * n)) return 1;
  }

  fill();
  RANK_OK(flagcxScatter(send.data(), recv.data(), c, flagcxFloat, root, comm, nullptr));
  for (size_t i = 0; i < c; i++) want[i] = in(root, rank * c + i);
  if (expect("scatter", c)) return 1;

  fill();
  RANK_OK(flagcxAlltoAll(send.data(), recv.data(), c, flagcxFloat, comm, nullptr));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c; i++) want[r * c + i] = in(r, rank * c + i);
  if (expect("alltoall", c * n)) return 1;

  // Alltoallv: c - p elements to peer p... all from equal blocks.
  fill();
  std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
  for (int p = 0; p < n; p++) {
    sc[p] = c - static_cast<size_t>(p);
    sd[p] = static_cast<size_t>(p) * c;
    rc[p] = c - static_cast<size_t>(rank);
    rd[p] = static_cast<size_t>(p) * c;
  }
  RANK_OK(flagcxAlltoAllv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                          flagcxFloat, comm, nullptr));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c; i++)
      want[r * c + i] = i < c - static_cast<size_t>(rank) ? in(r, rank * c + i) : -1.0f;
  if (expect("alltoallv", c * n)) return 1;

  // Send/recv around the ring, across the sub-cluster boundary.
  fill();
  RANK_OK(flagcxGroupStart(comm));
  RANK_OK(flagcxSend(send.data(), c, flagcxFloat, (rank + 1) % n, comm, nullptr));
  RANK_OK(flagcxRecv(recv.data(), c, flagcxFloat, (rank + n - 1) % n, comm, nullptr));
  RANK_OK(flagcxGroupEnd(comm));
  for (size_t i = 0; i < c; i++) want[i] = in((rank + n - 1) % n, i);
  if (expect("sendrecv", c)) return 1;

  RANK_OK(flagcxBarrier(comm, nullptr));
  return 0;
}

TEST(SplitList, TwoSubClustersOfHostRanks) {
  int n = nranksUnderTest();
  harness::Env env;
  env.vars = {{"FLAGCX_CLUSTER_SPLIT_LIST", "2"}, {"FLAGCX_ALGO", "allreduce:hierarchical"},
              {"FLAGCX_DEVICE", "host"}, {"FLAGCX_TIMEOUT", "60"}};
  auto res = harness::run(n, [](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    RANK_CHECK(comm->nclusters == 2, "%d clusters, want 2", comm->nclusters);
    for (int r = 0; r < nranks; r++)
      RANK_CHECK(comm->clusterOf[static_cast<size_t>(r)] == r / (nranks / 2),
                 "rank %d in cluster %d", r, comm->clusterOf[static_cast<size_t>(r)]);
    int homo = -1;
    RANK_OK(flagcxIsHomoComm(comm, &homo));
    RANK_CHECK(homo == 0, "flagcxIsHomoComm says %d for 2 sub-clusters", homo);
    if (everyCollective(rank, nranks, comm)) return 1;
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, env, 300);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

// An uneven split: the last sub-cluster takes the remainder (FlagCX's rule).
TEST(SplitList, RemainderGoesToTheLastSubCluster) {
  harness::Env env;
  env.vars = {{"FLAGCX_CLUSTER_SPLIT_LIST", "2"}, {"FLAGCX_DEVICE", "host"},
              {"FLAGCX_TIMEOUT", "60"}};
  auto res = harness::run(3, [](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    const int want[3] = {0, 1, 1};
    for (int r = 0; r < nranks; r++)
      RANK_CHECK(comm->clusterOf[static_cast<size_t>(r)] == want[r], "rank %d in cluster %d", r,
                 comm->clusterOf[static_cast<size_t>(r)]);
    std::vector<float> a(100, static_cast<float>(rank + 1)), b(100);
    RANK_OK(flagcxAllReduce(a.data(), b.data(), 100, flagcxFloat, flagcxSum, comm, nullptr));
    RANK_CHECK(b[99] == 6.0f, "allreduce gave %g", b[99]);
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, env, 120);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

// "=1" keeps one cluster (flagcxIsHomoComm still says 0 on host ranks: no
// vendor CCL serves them; the communicator itself stays homogeneous).
TEST(SplitList, OneKeepsTheClusterWhole) {
  harness::Env env;
  env.vars = {{"FLAGCX_CLUSTER_SPLIT_LIST", "1"}, {"FLAGCX_DEVICE", "host"},
              {"FLAGCX_TIMEOUT", "60"}};
  auto res = harness::run(2, [](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    RANK_CHECK(comm->homogeneous && comm->nclusters == 1, "homogeneous %d, %d clusters",
               comm->homogeneous ? 1 : 0, comm->nclusters);
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, env, 120);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

// Bad lists fail the init on every rank (no hang), naming the variable.
TEST(SplitList, BadListsFailInitEverywhere) {
  struct Case {
    const char *value;      // every rank's, unless rank 1 differs
    const char *rank1;      // nullptr: same as the others
    const char *mentions;   // a word the error must carry
  } cases[] = {{"two", nullptr, "not a number"},
               {"2x", nullptr, "not a number"},
               {"", nullptr, nullptr},  // empty means unset: not a failure (skipped below)
               {"0", nullptr, "at least 1"},
               {"-1", nullptr, "at least 1"},
               {"5", nullptr, "more sub-clusters than ranks"},
               {"2,2", nullptr, "entries"},
               {"2", "1", "differs"}};
  for (const Case &c : cases) {
    if (!*c.value) continue;
    harness::Env env;
    env.vars = {{"FLAGCX_CLUSTER_SPLIT_LIST", c.value}, {"FLAGCX_DEVICE", "host"},
                {"FLAGCX_TIMEOUT", "30"}};
    auto res = harness::run(4, [&c](int rank, int nranks, flagcxUniqueId *id) {
      if (c.rank1 && rank == 1) {
        setenv("FLAGCX_CLUSTER_SPLIT_LIST", c.rank1, 1);
        flagcx::paramsReload();
      }
      flagcxComm_t comm = nullptr;
      flagcxResult_t r = flagcxCommInitRank(&comm, nranks, id, rank);
      RANK_CHECK(r == flagcxInvalidArgument, "init returned %s", flagcxGetErrorString(r));
      std::string err = flagcxGetLastError(nullptr);
      RANK_CHECK(err.find("FLAGCX_CLUSTER_SPLIT_LIST") != std::string::npos, "error: %s",
                 err.c_str());
      RANK_CHECK(err.find(c.mentions) != std::string::npos, "error: %s", err.c_str());
      return 0;
    }, env, 60);
    EXPECT_TRUE(res.allOk()) << "FLAGCX_CLUSTER_SPLIT_LIST=" << c.value << ": " << res.describe();
  }
}

}  // namespace
