// Connections only where the schedules lead: after init a rank
// holds Conns to exactly the peers its compiled schedules name (every op but
// alltoall/alltoallv), and to the others once an operation first needs them;
// every collective is still right.  CONNECT_NRANKS sets the size (default 8;
// the quick suite runs 64 ranks over sockets: about 5 s here).

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/comm.h"
#include "sched/algo_set.h"
#include "tests/common/harness.h"

namespace {

int nranksWanted() {
  const char *v = getenv("CONNECT_NRANKS");
  return v && atoi(v) > 0 ? atoi(v) : 8;
}

std::vector<int> connected(flagcxComm *comm) {
  std::vector<int> out;
  for (int p = 0; p < comm->nranks; p++)
    if (p != comm->rank && comm->conn(p)) out.push_back(p);
  return out;
}

std::string list(const std::vector<int> &v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// Every rank's value at element i: distinct per rank and element.
float val(int rank, size_t i) { return static_cast<float>(rank * 1000 + static_cast<int>(i % 97)); }

int body(int rank, int n, flagcxUniqueId *id) {
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
  std::vector<int> want = comm->algos->schedulePeers(
      [](flagcx::OpKind op) { return op != flagcx::OpKind::AlltoAll && op != flagcx::OpKind::AlltoAllv; });
  std::vector<int> have = connected(comm);
  RANK_CHECK(have == want, "after init: connected to {%s}, schedules name {%s}", list(have).c_str(),
             list(want).c_str());
  // Root 0 of the linear gather/scatter names everyone; another rank must not.
  if (n >= 16 && rank == n / 2)
    RANK_CHECK(static_cast<int>(have.size()) < n - 1, "a full mesh at init (%zu peers)", have.size());

  const size_t c = 33;
  std::vector<float> in(c * static_cast<size_t>(n)), out(c * static_cast<size_t>(n));
  // Send/recv with a peer at distance n/2 + 1 (no schedule's neighbour at 64).
  int d = n / 2 + 1 < n ? n / 2 + 1 : 1;
  int to = (rank + d) % n, from = (rank + n - d) % n;
  for (size_t i = 0; i < c; i++) in[i] = val(rank, i);
  if (n > 1) {
    RANK_OK(flagcxGroupStart(comm));
    RANK_OK(flagcxSend(in.data(), c, flagcxFloat, to, comm, nullptr));
    RANK_OK(flagcxRecv(out.data(), c, flagcxFloat, from, comm, nullptr));
    RANK_OK(flagcxGroupEnd(comm));
    for (size_t i = 0; i < c; i++)
      RANK_CHECK(out[i] == val(from, i), "sendrecv elem %zu = %g", i, out[i]);
    RANK_CHECK(comm->conn(to) && comm->conn(from), "send/recv peers not connected afterwards");
  }
  // Alltoall (pairwise: it names every peer): connected to all after it.
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < c; i++) in[static_cast<size_t>(p) * c + i] = val(rank, static_cast<size_t>(p) * c + i);
  RANK_OK(flagcxAlltoAll(in.data(), out.data(), c, flagcxFloat, comm, nullptr));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < c; i++) {
      float w = val(p, static_cast<size_t>(rank) * c + i);
      RANK_CHECK(out[static_cast<size_t>(p) * c + i] == w, "alltoall from %d elem %zu", p, i);
    }
  RANK_CHECK(static_cast<int>(connected(comm).size()) == n - 1, "after alltoall: %zu peers",
             connected(comm).size());
  // The rest still right.
  for (size_t i = 0; i < c; i++) in[i] = val(rank, i);
  RANK_OK(flagcxAllReduce(in.data(), out.data(), c, flagcxFloat, flagcxSum, comm, nullptr));
  for (size_t i = 0; i < c; i++) {
    double w = 0;
    for (int r = 0; r < n; r++) w += val(r, i);
    RANK_CHECK(out[i] == static_cast<float>(w), "allreduce elem %zu = %g, want %g", i, out[i], w);
  }
  RANK_OK(flagcxAllGather(in.data(), out.data(), c, flagcxFloat, comm, nullptr));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c; i++)
      RANK_CHECK(out[static_cast<size_t>(r) * c + i] == val(r, i), "allgather block %d elem %zu", r, i);
  int root = n - 1;
  std::vector<float> b(c);
  for (size_t i = 0; i < c; i++) b[i] = rank == root ? val(root, i) : -1.0f;
  RANK_OK(flagcxBroadcast(b.data(), b.data(), c, flagcxFloat, root, comm, nullptr));
  for (size_t i = 0; i < c; i++) RANK_CHECK(b[i] == val(root, i), "broadcast elem %zu", i);
  RANK_OK(flagcxBarrier(comm, nullptr));
  RANK_OK(flagcxCommDestroy(comm));
  return 0;
}

TEST(Connect, OnlyWhereSchedulesLeadThenOnFirstUse) {
  int n = nranksWanted();
  harness::Env env;
  env.vars = {{"FLAGCX_SHM_DISABLE", "1"}, {"FLAGCX_TIMEOUT", "120"}, {"FLAGCX_CONNECT_ALL", "0"},
              {"FLAGCX_ALGO", "alltoall:pairwise"}};  // names every peer
  auto res = harness::run(n, body, env, 900);
  EXPECT_TRUE(res.allOk()) << n << " ranks: " << res.describe();
}

}  // namespace
