// flagcxCommGetUniqueId + flagcxCommGrow, in real ranks: 4 ranks grow to 6
// with two processes that are not in the parent (the id passed out of band,
// through memory the test shares with them), allreduce, allgather,
// broadcast, reduce, reducescatter, alltoall and a send/recv ring run on
// the grown communicator (not gather, scatter, alltoallv), the 4 shrink back
// (FLAGCX_SHRINK_DEFAULT) while the 2 destroy theirs; 20 alternations after
// two warm-up rounds, with each process's open fds, threads, /dev/shm
// entries and resident memory back within a fixed bound afterwards.  A grow
// id used twice is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "tests/common/harness.h"
#include "tests/common/inspect.h"

namespace {

constexpr int kOld = 4, kNew = 6;
constexpr int kWarmUp = 2, kRounds = 20;
constexpr long kRssSlackKb = 32 * 1024;  // allocator caches, as in rel-leaks

struct Shared {
  std::atomic<int> gen;  // rounds whose id is published
  flagcxUniqueId id;     // this round's grow id (written before gen)
};

// Every collective kind and a send/recv ring on `c` (n ranks, this is r).
int work(flagcxComm_t c, int r, int n) {
  int cn = 0, cr = -1;
  RANK_OK(flagcxCommCount(c, &cn));
  RANK_OK(flagcxCommUserRank(c, &cr));
  RANK_CHECK(cn == n && cr == r, "rank %d of %d, want %d of %d", cr, cn, r, n);
  const size_t k = 70001;
  std::vector<float> in(k, static_cast<float>(r + 1)), out(k * n, 0.f);
  RANK_OK(flagcxAllReduce(in.data(), out.data(), k, flagcxFloat, flagcxSum, c, nullptr));
  RANK_CHECK(out[k - 1] == static_cast<float>(n * (n + 1) / 2), "allreduce gave %g", out[k - 1]);
  RANK_OK(flagcxAllGather(in.data(), out.data(), k, flagcxFloat, c, nullptr));
  for (int p = 0; p < n; p++)
    RANK_CHECK(out[p * k] == static_cast<float>(p + 1), "allgather block %d is %g", p, out[p * k]);
  RANK_OK(flagcxBroadcast(in.data(), out.data(), k, flagcxFloat, n - 1, c, nullptr));
  RANK_CHECK(out[k / 2] == static_cast<float>(n), "broadcast gave %g", out[k / 2]);
  RANK_OK(flagcxReduce(in.data(), out.data(), k, flagcxFloat, flagcxMax, 0, c, nullptr));
  RANK_CHECK(r != 0 || out[0] == static_cast<float>(n), "reduce gave %g", out[0]);
  // Block p of rank r's input holds r * n + p: reducescatter sums column p,
  // alltoall hands block p to rank p.
  std::vector<float> blocks(k * n);
  for (int p = 0; p < n; p++)
    std::fill(blocks.begin() + p * k, blocks.begin() + (p + 1) * k, static_cast<float>(r * n + p));
  RANK_OK(flagcxReduceScatter(blocks.data(), out.data(), k, flagcxFloat, flagcxSum, c, nullptr));
  RANK_CHECK(out[k - 1] == static_cast<float>(n * (n - 1) / 2 * n + n * r), "reducescatter "
             "gave %g", out[k - 1]);
  RANK_OK(flagcxAlltoAll(blocks.data(), out.data(), k, flagcxFloat, c, nullptr));
  for (int p = 0; p < n; p++)
    RANK_CHECK(out[p * k] == static_cast<float>(p * n + r), "alltoall block %d is %g", p,
               out[p * k]);
  RANK_OK(flagcxGroupStart(c));
  RANK_OK(flagcxSend(in.data(), k, flagcxFloat, (r + 1) % n, c, nullptr));
  RANK_OK(flagcxRecv(out.data(), k, flagcxFloat, (r + n - 1) % n, c, nullptr));
  RANK_OK(flagcxGroupEnd(c));
  RANK_CHECK(out[k - 1] == static_cast<float>((r + n - 1) % n + 1), "recv gave %g", out[k - 1]);
  return 0;
}

// One round of a parent rank: grow, work, shrink back; *comm is replaced.
int oldRound(int r, int round, flagcxComm_t *comm, Shared *sh) {
  flagcxUniqueId gid;
  if (r == 0) {
    RANK_OK(flagcxCommGetUniqueId(*comm, &gid));
    memcpy(&sh->id, &gid, sizeof gid);
    sh->gen.store(round + 1);
  }
  flagcxComm_t grown = nullptr, back = nullptr;
  RANK_OK(flagcxCommGrow(*comm, kNew, r == 0 ? &gid : nullptr, -1, &grown));
  if (r == 0 && round == 0) {  // an id makes one communicator
    flagcxComm_t again = nullptr;
    RANK_CHECK(flagcxCommGrow(*comm, kNew, &gid, -1, &again) == flagcxInvalidUsage,
               "a used grow id was accepted");
  }
  if (int rc = work(grown, r, kNew)) return rc;
  int gone[2] = {4, 5};
  RANK_OK(flagcxCommShrink(grown, gone, 2, &back, FLAGCX_SHRINK_DEFAULT));
  RANK_OK(flagcxCommDestroy(grown));
  RANK_OK(flagcxCommDestroy(*comm));
  *comm = back;
  return work(back, r, kOld);
}

int newRound(int r, int round, Shared *sh) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (sh->gen.load() < round + 1 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  RANK_CHECK(sh->gen.load() >= round + 1, "no grow id for round %d", round);
  flagcxUniqueId id;
  memcpy(&id, &sh->id, sizeof id);
  flagcxComm_t grown = nullptr;
  RANK_OK(flagcxCommGrow(nullptr, kNew, &id, r, &grown));
  if (int rc = work(grown, r, kNew)) return rc;
  RANK_OK(flagcxCommDestroy(grown));
  return 0;
}

int rankBody(int r, flagcxUniqueId *id, Shared *sh) {
  flagcxComm_t comm = nullptr;
  if (r < kOld) RANK_OK(flagcxCommInitRank(&comm, kOld, id, r));
  int fds0 = 0, thr0 = 0;
  long rss0 = 0;
  for (int round = 0; round < kWarmUp + kRounds; round++) {
    if (round == kWarmUp) {
      fds0 = harness::openFds();
      thr0 = harness::settledThreads(1 << 20);
      rss0 = harness::rssKb();
    }
    int rc = r < kOld ? oldRound(r, round, &comm, sh) : newRound(r, round, sh);
    if (rc) {
      fprintf(stderr, "rank %d: round %d failed\n", r, round);
      return rc;
    }
  }
  // Counted as at the start: the parent ranks hold one 4-rank communicator.
  int thr1 = harness::settledThreads(thr0), fds1 = harness::openFds();
  long rss1 = harness::rssKb();
  if (comm) RANK_OK(flagcxCommDestroy(comm));
  std::set<int> me = {getpid()};  // after the last communicator is gone
  auto shmLeft = harness::flagcxShmEntries(&me);
  printf("ELASTIC-FIGURES grow rank %d: %d rounds, fds %d->%d, threads %d->%d, rss %ld->%ld KiB, "
         "/dev/shm entries left %zu\n", r, kRounds, fds0, fds1, thr0, thr1, rss0, rss1,
         shmLeft.size());
  fflush(stdout);
  RANK_CHECK(fds1 <= fds0, "file descriptors grew from %d to %d", fds0, fds1);
  RANK_CHECK(thr1 <= thr0, "threads grew from %d to %d", thr0, thr1);
  RANK_CHECK(shmLeft.empty(), "%zu /dev/shm entries left", shmLeft.size());
  RANK_CHECK(!harness::kRssShowsLeaks || rss1 - rss0 <= kRssSlackKb, "RSS grew by %ld KiB",
             rss1 - rss0);
  return 0;
}

TEST(Grow, FourToSixAndBack) {
  Shared *sh = harness::sharedBlock<Shared>();
  harness::Env env;
  env.vars = {{"FLAGCX_TIMEOUT", "30"}};
  auto res = harness::run(kNew, [&](int r, int, flagcxUniqueId *id) { return rankBody(r, id, sh); },
                          env, 600);
  harness::freeShared(sh);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

}  // namespace
