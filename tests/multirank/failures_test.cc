// A peer that dies, a rank that never arrives: errors within FLAGCX_TIMEOUT, never a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "tests/common/harness.h"

namespace {

// Rank 1 streams 1 GiB messages to rank 0 until it is killed (1.5 s in: a
// fixed number of messages could all be through by then over shm); rank 0
// must fail fast.
void killDuringSend(bool shm) {
  harness::Env env;
  env.vars = {{"FLAGCX_SHM_DISABLE", shm ? "0" : "1"}, {"FLAGCX_TIMEOUT", "5"}};
  auto res = harness::run(2, [](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    const size_t sz = size_t(1) << 30;
    std::vector<char> buf(sz, 1);
    if (rank == 1) {
      // Tell the parent we're sending, then send until killed.
      fprintf(stderr, "rank 1 sending\n");
      for (int i = 0; i < 1000; i++) flagcxSend(buf.data(), sz, flagcxUint8, 0, comm, nullptr);
      return 3;  // should have been killed
    }
    auto t0 = std::chrono::steady_clock::now();
    flagcxResult_t r = flagcxSuccess;
    for (int i = 0; i < 1000 && r == flagcxSuccess; i++)
      r = flagcxRecv(buf.data(), sz, flagcxUint8, 1, comm, nullptr);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RANK_CHECK(r != flagcxSuccess, "receive from a killed peer succeeded");
    RANK_CHECK(secs < 5 + 2, "took %.1f s to notice", secs);
    flagcxResult_t async = flagcxSuccess;
    RANK_OK(flagcxCommGetAsyncError(comm, &async));
    RANK_CHECK(async != flagcxSuccess, "no async error recorded");
    RANK_OK(flagcxCommAbort(comm));
    return 0;
  }, env, 60, [](std::vector<pid_t> &pids) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    kill(pids[1], SIGKILL);
  });
  EXPECT_EQ(res.status[0], 0) << res.describe();
  EXPECT_EQ(res.status[1], 128 + SIGKILL) << res.describe();
}

TEST(Failures, KillDuringSendShm) { killDuringSend(true); }
TEST(Failures, KillDuringSendSocket) { killDuringSend(false); }

// Rank 2 of 3 never calls flagcxCommInitRank: the others fail, naming it.
TEST(Failures, RankNeverArrives) {
  harness::Env env;
  env.vars = {{"FLAGCX_TIMEOUT", "3"}};
  auto res = harness::run(3, [](int rank, int nranks, flagcxUniqueId *id) {
    if (rank == 2) return 0;
    flagcxComm_t comm = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    flagcxResult_t r = flagcxCommInitRank(&comm, nranks, id, rank);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RANK_CHECK(r != flagcxSuccess, "init without rank 2 succeeded");
    RANK_CHECK(secs < 3 + 5, "took %.1f s", secs);
    std::string err = flagcxGetLastError(nullptr);
    // The bootstrap root's words, naming exactly the missing rank.
    RANK_CHECK(err.find("rank(s) 2 never arrived") != std::string::npos,
               "error does not name rank 2 as the missing one: %s", err.c_str());
    return 0;
  }, env, 60);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

}  // namespace
