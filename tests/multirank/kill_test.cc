// Kill tests, as Gloo runs them: real ranks in a loop of large allreduces,
// one of them SIGKILLed (dead peer) or SIGSTOPped (silent peer) at a random
// moment, or killed / absent during flagcxCommInitRank.  Every survivor must
// get an error within FLAGCX_TIMEOUT + 2 s of the event, see it in
// flagcxCommGetAsyncError, and come out of flagcxCommAbort within 2 s.
//
// REL_FULL=1 (the `full` suite) repeats each configuration 20 times;
// REL_ITERS=n overrides the count; REL_SEED=s replays a run; REL_SOCKET_ONLY=1
// runs the socket configurations only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <thread>

#include "tests/common/harness.h"
#include "tests/common/inspect.h"

namespace {

constexpr int kTimeoutSec = 5;     // FLAGCX_TIMEOUT in these tests
constexpr double kErrorBound = kTimeoutSec + 2.0;
constexpr double kAbortBound = 2.0;
constexpr int kMaxRanks = 8;

enum class Phase { Loop, Init, Absent };

struct Shared {
  std::atomic<int> ready;          // ranks past init
  std::atomic<int> finished;       // survivors that returned from their body
  std::atomic<int64_t> eventNs;    // when the victim was signalled (0: not yet)
  std::atomic<int64_t> errNs[kMaxRanks];
  std::atomic<int64_t> abortNs[kMaxRanks];  // abort duration
  std::atomic<int> initFailed[kMaxRanks];
  std::atomic<int64_t> startNs[kMaxRanks];  // init start (the event for Phase::Absent)
};

// Exit codes of a survivor, for the failure messages.
const char *codeName(int c) {
  switch (c) {
    case 0: return "ok";
    case 10: return "init failed though no rank was harmed yet";
    case 11: return "no error within 60 s of allreduces";
    case 12: return "an error before any rank was signalled";
    case 13: return "error came later than FLAGCX_TIMEOUT + 2 s";
    case 14: return "flagcxCommAbort took longer than 2 s";
    case 15: return "flagcxCommGetAsyncError reported no error";
    case 16: return "wrong allreduce result before the kill";
    case 17: return "init succeeded though a rank never arrived";
    case 18: return "the error does not name the missing rank";
    case 128 + SIGKILL: return "killed (SIGKILL)";
    case -1: return "hung: killed by the harness at its deadline";
    default: return "failed";
  }
}

int iterations(int quickDefault) {
  int n = harness::envInt("REL_ITERS", 0);
  if (n > 0) return n;
  return harness::envIs("REL_FULL", "1") ? 20 : quickDefault;
}

struct Figures {
  int runs = 0, survivors = 0, failures = 0;
  double maxErr = 0, sumErr = 0, maxAbort = 0;
  void add(double err, double ab) {
    survivors++;
    maxErr = std::max(maxErr, err);
    sumErr += err;
    maxAbort = std::max(maxAbort, ab);
  }
  void print(const char *what) const {
    printf("RELIABILITY-FIGURES %s: runs=%d survivors=%d failures=%d max_error_s=%.2f "
           "mean_error_s=%.2f max_abort_s=%.3f\n",
           what, runs, survivors, failures, maxErr, survivors ? sumErr / survivors : 0.0, maxAbort);
    fflush(stdout);
  }
};

// One survivor's (or victim's) life: init, then allreduces until an error.
int rankBody(int rank, int nranks, flagcxUniqueId *id, Shared *sh, Phase phase, int victim,
             size_t bytes) {
  if (phase == Phase::Absent && rank == victim) return 0;  // never calls init
  int64_t initStart = harness::nowNs();
  sh->startNs[rank] = initStart;
  flagcxComm_t comm = nullptr;
  flagcxResult_t r = flagcxCommInitRank(&comm, nranks, id, rank);
  if (r != flagcxSuccess) {
    int64_t t = harness::nowNs();
    sh->errNs[rank] = t;
    sh->initFailed[rank] = 1;
    if (phase == Phase::Loop) {
      fprintf(stderr, "rank %d: init failed: %s\n", rank, flagcxGetLastError(nullptr));
      return 10;
    }
    int64_t ev = phase == Phase::Absent ? initStart : sh->eventNs.load();
    if (ev == 0) return 12;
    double secs = static_cast<double>(t - ev) / 1e9;
    if (secs > kErrorBound) {
      fprintf(stderr, "rank %d: init failed %.2f s after the event\n", rank, secs);
      return 13;
    }
    if (phase == Phase::Absent) {
      std::string err = flagcxGetLastError(nullptr);
      if (!harness::hasNumberToken(err, victim)) {
        fprintf(stderr, "rank %d: error does not name rank %d: %s\n", rank, victim, err.c_str());
        return 18;
      }
    }
    return 0;
  }
  if (phase == Phase::Absent) {
    flagcxCommAbort(comm);
    return 17;
  }
  sh->ready++;
  size_t count = bytes / sizeof(float);
  std::vector<float> in(count, static_cast<float>(rank + 1)), out(count, 0.f);
  auto loopStart = std::chrono::steady_clock::now();
  bool first = true;
  while (std::chrono::steady_clock::now() - loopStart < std::chrono::seconds(60)) {
    r = flagcxAllReduce(in.data(), out.data(), count, flagcxFloat, flagcxSum, comm, nullptr);
    if (r != flagcxSuccess) break;
    if (first) {
      float want = static_cast<float>(nranks * (nranks + 1) / 2);
      for (size_t i : {size_t(0), count / 2, count - 1})
        if (out[i] != want) {
          fprintf(stderr, "rank %d: elem %zu = %g, want %g\n", rank, i, out[i], want);
          return 16;
        }
      first = false;
    }
  }
  if (r == flagcxSuccess) {
    flagcxCommAbort(comm);
    return 11;
  }
  int64_t t = harness::nowNs();
  sh->errNs[rank] = t;
  int64_t ev = sh->eventNs.load();
  if (ev == 0) {
    fprintf(stderr, "rank %d: allreduce failed before any kill: %s\n", rank,
            flagcxGetLastError(comm));
    flagcxCommAbort(comm);
    return 12;
  }
  double secs = static_cast<double>(t - ev) / 1e9;
  flagcxResult_t async = flagcxSuccess;
  flagcxResult_t ar = flagcxCommGetAsyncError(comm, &async);
  int64_t a0 = harness::nowNs();
  flagcxResult_t abr = flagcxCommAbort(comm);
  int64_t abortNs = harness::nowNs() - a0;
  sh->abortNs[rank] = abortNs;
  if (secs > kErrorBound) {
    fprintf(stderr, "rank %d: error %.2f s after the signal (%s)\n", rank, secs,
            flagcxGetErrorString(r));
    return 13;
  }
  if (ar != flagcxSuccess || async == flagcxSuccess) return 15;
  if (static_cast<double>(abortNs) / 1e9 > kAbortBound || abr == flagcxInProgress) {
    fprintf(stderr, "rank %d: abort took %.2f s\n", rank, static_cast<double>(abortNs) / 1e9);
    return 14;
  }
  return 0;
}

std::mt19937 &rng() { return harness::relRng(); }

// One run of a configuration; returns a description of what went wrong, or "".
std::string runOnce(int nranks, bool shm, int sig, Phase phase, Figures *fig) {
  int victim = static_cast<int>(rng()() % static_cast<unsigned>(nranks));
  size_t bytes = (size_t(8) << 20) << (harness::envIs("REL_FULL", "1") ? rng()() % 3 : 0);
  if (harness::kThreadSanitizer) bytes /= 8;  // harness.h
  int delayMs = phase == Phase::Init ? static_cast<int>(rng()() % 400)
                                     : static_cast<int>(rng()() % 1000);
  Shared *sh = harness::sharedBlock<Shared>();
  harness::Env env;
  env.vars = {{"FLAGCX_SHM_DISABLE", shm ? "0" : "1"},
              {"FLAGCX_TIMEOUT", std::to_string(kTimeoutSec)}};
  auto res = harness::run(nranks, [&](int rank, int n, flagcxUniqueId *id) {
    int rc = rankBody(rank, n, id, sh, phase, victim, bytes);
    sh->finished++;
    return rc;
  }, env, 90, [&](std::vector<pid_t> &pids) {
    if (phase == Phase::Absent) return;
    if (phase == Phase::Loop) {
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (sh->ready.load() < nranks && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    sh->eventNs = harness::nowNs();
    kill(pids[static_cast<size_t>(victim)], sig);
    if (sig == SIGSTOP) {
      // Wait for every survivor, then make sure nothing stays stopped.
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeoutSec + 40);
      while (sh->finished.load() < nranks - 1 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      kill(pids[static_cast<size_t>(victim)], SIGKILL);
      kill(pids[static_cast<size_t>(victim)], SIGCONT);
    }
  });
  std::string why;
  fig->runs++;
  std::set<int> livePids;
  for (int r = 0; r < nranks; r++) {
    int st = res.status[static_cast<size_t>(r)];
    if (r == victim) {
      int want = phase == Phase::Absent ? 0 : 128 + SIGKILL;
      if (st != want)
        why += "victim rank " + std::to_string(r) + ": status " + std::to_string(st) + "; ";
      continue;
    }
    if (st != 0) {
      why += "rank " + std::to_string(r) + ": " + codeName(st) + " (" + std::to_string(st) + "); ";
      continue;
    }
    int64_t ev = phase == Phase::Absent ? sh->startNs[r].load() : sh->eventNs.load();
    double err = static_cast<double>(sh->errNs[r].load() - ev) / 1e9;
    fig->add(err, static_cast<double>(sh->abortNs[r].load()) / 1e9);
  }
  if (!why.empty()) {
    fig->failures++;
    why = "nranks " + std::to_string(nranks) + (shm ? " shm" : " socket") + " victim " +
          std::to_string(victim) + " delay " + std::to_string(delayMs) + " ms, " +
          std::to_string(bytes >> 20) + " MiB: " + why;
  }
  harness::freeShared(sh);
  return why;
}

// quickHalf: in the quick suite, each nranks runs over one transport only
// (alternating), to keep the suite short; the full suite runs both.
void runMatrix(const char *what, int sig, Phase phase, int quickIters,
               std::vector<bool> transports = {true, false}, bool quickHalf = false) {
  Figures fig;
  // REL_SOCKET_ONLY=1: the socket configurations only (rel-kill-socket-helpers
  // runs them with helper threads forced on).
  if (harness::envIs("REL_SOCKET_ONLY", "1")) transports = {false};
  int iters = iterations(quickIters);
  bool full = harness::envIs("REL_FULL", "1") || harness::envInt("REL_ITERS", 0) > 0;
  int idx = 0;
  for (int nranks : {2, 3, 4, 8}) {
    bool quickShm = idx++ % 2 == 0;
    for (bool shm : transports)
      for (int it = 0; it < iters; it++) {
        if (quickHalf && !full && transports.size() == 2 && shm != quickShm) continue;
        std::string why = runOnce(nranks, shm, sig, phase, &fig);
        EXPECT_TRUE(why.empty()) << what << ": " << why;
      }
  }
  fig.print(what);
}

TEST(Kill, DuringAllreduce) { runMatrix("sigkill-allreduce", SIGKILL, Phase::Loop, 2); }
TEST(Kill, StopDuringAllreduce) {
  runMatrix("sigstop-allreduce", SIGSTOP, Phase::Loop, 1, {true, false}, true);
}
TEST(Kill, DuringInit) { runMatrix("sigkill-init", SIGKILL, Phase::Init, 1); }
// The bootstrap is the same whatever the transport: one pass over nranks.
TEST(Kill, RankNeverArrives) { runMatrix("absent-init", 0, Phase::Absent, 1, {true}); }

// After an abort the process can build a new communicator from a fresh id.
void newCommAfterAbort(bool shm) {
  harness::Env env;
  env.vars = {{"FLAGCX_SHM_DISABLE", shm ? "0" : "1"},
              {"FLAGCX_TIMEOUT", std::to_string(kTimeoutSec)}};
  harness::ScopedEnv scoped(env);  // for the second id's root too
  flagcxUniqueId id2;
  ASSERT_EQ(flagcxGetUniqueId(&id2), flagcxSuccess);
  Shared *sh = harness::sharedBlock<Shared>();
  auto res = harness::run(3, [&](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    sh->ready++;
    std::vector<float> buf(1 << 20, 1.f);
    flagcxResult_t r = flagcxSuccess;
    for (int i = 0; i < 100000 && r == flagcxSuccess; i++)
      r = flagcxAllReduce(buf.data(), buf.data(), buf.size(), flagcxFloat, flagcxSum, comm,
                          nullptr);
    RANK_CHECK(r != flagcxSuccess, "allreduces never failed");
    int64_t a0 = harness::nowNs();
    RANK_OK(flagcxCommAbort(comm));
    RANK_CHECK(harness::secsSince(a0) < kAbortBound, "abort took %.2f s", harness::secsSince(a0));
    // The old handle is dead now.
    int cnt = 0;
    RANK_CHECK(flagcxCommCount(comm, &cnt) == flagcxInvalidArgument, "dead comm accepted");
    // A new communicator of the two survivors, from the fresh id.
    flagcxComm_t comm2 = nullptr;
    RANK_OK(flagcxCommInitRank(&comm2, 2, &id2, rank));
    std::vector<float> in(4099, static_cast<float>(rank + 1)), out(4099, 0.f);
    for (int i = 0; i < 10; i++) {
      RANK_OK(flagcxAllReduce(in.data(), out.data(), in.size(), flagcxFloat, flagcxSum, comm2,
                              nullptr));
      for (float v : out) RANK_CHECK(v == 3.f, "new comm allreduce gave %g", v);
    }
    RANK_OK(flagcxCommDestroy(comm2));
    return 0;
  }, env, 90, [&](std::vector<pid_t> &pids) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (sh->ready.load() < 3 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(pids[2], SIGKILL);
  });
  EXPECT_EQ(res.status[0], 0) << res.describe();
  EXPECT_EQ(res.status[1], 0) << res.describe();
  EXPECT_EQ(res.status[2], 128 + SIGKILL) << res.describe();
  harness::freeShared(sh);
}

TEST(Abort, NewCommAfterAbortShm) { newCommAfterAbort(true); }
TEST(Abort, NewCommAfterAbortSocket) { newCommAfterAbort(false); }

// Abort with nothing wrong (ranks idle, peers alive) is prompt too, and
// destroy after a peer died does not hang.
TEST(Abort, IdleAbortAndDestroyAfterPeerDeath) {
  harness::Env env;
  env.vars = {{"FLAGCX_TIMEOUT", std::to_string(kTimeoutSec)}};
  auto res = harness::run(3, [&](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    std::vector<float> buf(1000, 1.f);
    RANK_OK(flagcxAllReduce(buf.data(), buf.data(), buf.size(), flagcxFloat, flagcxSum, comm,
                            nullptr));
    if (rank == 2) _exit(0);  // leaves without destroying
    int64_t a0 = harness::nowNs();
    if (rank == 0) {
      RANK_OK(flagcxCommAbort(comm));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      flagcxCommDestroy(comm);  // may report the peer's death; must not hang
    }
    double secs = harness::secsSince(a0);
    RANK_CHECK(secs < (rank == 0 ? kAbortBound : kTimeoutSec + 2.0), "took %.2f s", secs);
    return 0;
  }, env, 60);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

}  // namespace
