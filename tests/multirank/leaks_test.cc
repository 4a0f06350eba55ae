// Leaks: two ranks create, use and destroy 100 communicators in one process
// each (a fresh unique id every time, passed from rank 0 to rank 1 over a
// pipe).  Afterwards the open file descriptors, threads, /dev/shm entries and
// resident memory must be back within a fixed bound of where they started.
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "tests/common/harness.h"
#include "tests/common/inspect.h"

namespace {

constexpr int kComms = 100;
constexpr long kRssSlackKb = 32 * 1024;  // allocator caches, lazily loaded scripts


// A rank 0 that died before writing the id (both ends of the pipe stay open
// in the parent) fails rank 1 after a minute rather than at the harness's
// deadline.
constexpr int kIdWaitMs = 60 * 1000;

int oneComm(int rank, int pfd[2], bool abortInstead) {
  flagcxUniqueId id;
  if (rank == 0) {
    RANK_OK(flagcxGetUniqueId(&id));
    RANK_CHECK(write(pfd[1], &id, sizeof id) == static_cast<ssize_t>(sizeof id), "pipe write");
  } else {
    RANK_CHECK(harness::readAll(pfd[0], &id, sizeof id, kIdWaitMs),
               "no unique id from rank 0 on the pipe within %d s", kIdWaitMs / 1000);
  }
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, 2, &id, rank));
  std::vector<float> in(70000, static_cast<float>(rank + 1)), out(70000);
  RANK_OK(flagcxAllReduce(in.data(), out.data(), in.size(), flagcxFloat, flagcxSum, comm, nullptr));
  RANK_CHECK(out[69999] == 3.f, "allreduce gave %g", out[69999]);
  if (abortInstead) {
    RANK_OK(flagcxCommAbort(comm));
  } else {
    RANK_OK(flagcxCommDestroy(comm));
  }
  return 0;
}

void leakTest(bool shm) {
  int pfd[2];
  ASSERT_EQ(pipe(pfd), 0);
  harness::Env env;
  env.vars = {{"FLAGCX_SHM_DISABLE", shm ? "0" : "1"}, {"FLAGCX_TIMEOUT", "10"}};
  auto res = harness::run(2, [&](int rank, int, flagcxUniqueId *) {
    if (rank == 0) close(pfd[0]);
    else close(pfd[1]);
    // Warm up: the first communicator loads scripts and starts the stream
    // thread; those stay for the life of the process by design.
    for (int i = 0; i < 2; i++)
      if (int rc = oneComm(rank, pfd, false)) {
        fprintf(stderr, "rank %d: warm-up communicator %d failed\n", rank, i);
        return rc;
      }
    int fds0 = harness::openFds();
    int thr0 = harness::settledThreads(1 << 20);
    long rss0 = harness::rssKb();
    for (int i = 0; i < kComms; i++)
      if (int rc = oneComm(rank, pfd, i % 10 == 9)) {  // every tenth aborted
        fprintf(stderr, "rank %d: communicator %d failed\n", rank, i);
        return rc;
      }
    int thr1 = harness::settledThreads(thr0);
    int fds1 = harness::openFds();
    long rss1 = harness::rssKb();
    std::set<int> me = {getpid()};
    auto shmLeft = harness::flagcxShmEntries(&me);
    printf("RELIABILITY-FIGURES leaks %s rank %d: %d comms, fds %d->%d, threads %d->%d, "
           "rss %ld->%ld KiB, /dev/shm entries left %zu\n", shm ? "shm" : "socket", rank, kComms,
           fds0, fds1, thr0, thr1, rss0, rss1, shmLeft.size());
    fflush(stdout);
    RANK_CHECK(fds1 <= fds0, "file descriptors grew from %d to %d", fds0, fds1);
    RANK_CHECK(thr1 <= thr0, "threads grew from %d to %d", thr0, thr1);
    RANK_CHECK(shmLeft.empty(), "%zu /dev/shm entries left, e.g. %s", shmLeft.size(),
               shmLeft.empty() ? "" : shmLeft[0].c_str());
    RANK_CHECK(!harness::kRssShowsLeaks || rss1 - rss0 <= kRssSlackKb, "RSS grew by %ld KiB",
               rss1 - rss0);
    return 0;
  }, env, 300);
  close(pfd[0]);
  close(pfd[1]);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

TEST(Leaks, HundredCommsShm) { leakTest(true); }
TEST(Leaks, HundredCommsSocket) { leakTest(false); }

}  // namespace
