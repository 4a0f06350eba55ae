// Wrong-secret tests: foreign connections to the bootstrap root's port and to
// every listening port of the rank processes (found through /proc), carrying
// garbage, a made-up hello, or a hello with a proof made from the wrong
// secret.  The job must complete with correct results, the intruders must be
// rejected (and logged), and silent intruders must not delay set-up or abort.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <random>
#include <thread>

#include "tests/common/harness.h"
#include "rendezvous/socket.h"
#include "rendezvous/uniqueid.h"
#include "tests/common/hostile.h"
#include "tests/common/inspect.h"

namespace {

using flagcx::Clock;

void sendBytes(int fd, const void *p, size_t n) {
  // Best effort: the server may close on us half way.
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return;
    p = static_cast<const char *>(p) + k;
    n -= static_cast<size_t>(k);
  }
}

enum class Attack { Garbage, BadMagic, WrongSecret, WrongKind, Truncated };
const char *attackName(Attack a) {
  switch (a) {
    case Attack::Garbage: return "garbage";
    case Attack::BadMagic: return "hello with a bad magic";
    case Attack::WrongSecret: return "hello proven with a wrong secret";
    case Attack::WrongKind: return "hello of the wrong kind";
    case Attack::Truncated: return "half a hello, then close";
  }
  return "?";
}

// One intrusion over an open fd; returns true when the server rejected it
// (closed the connection) rather than accepting it.
bool intrude(int fd, Attack a, uint32_t kind, int claimRank, int nranks, std::mt19937 &g) {
  flagcx::Hello h{flagcx::kHelloMagic, kind, claimRank, 0, nranks};
  switch (a) {
    case Attack::Garbage: {
      std::vector<uint8_t> junk(300 + g() % 3000);
      for (auto &b : junk) b = static_cast<uint8_t>(g());
      sendBytes(fd, junk.data(), junk.size());
      break;
    }
    case Attack::BadMagic:
      h.magic ^= 0x0101;
      sendBytes(fd, &h, sizeof h);
      break;
    case Attack::WrongKind:
      h.kind = kind == 1 ? 3 : 1;
      sendBytes(fd, &h, sizeof h);
      break;
    case Attack::Truncated:
      sendBytes(fd, &h, sizeof h / 2);
      shutdown(fd, SHUT_WR);
      break;
    case Attack::WrongSecret: {
      flagcx::Secret wrong;
      for (auto &b : wrong) b = static_cast<uint8_t>(g());
      auto dl = Clock::now() + std::chrono::seconds(3);
      if (flagcx::clientHandshake(fd, wrong, h, dl) == flagcxSuccess) return false;
      break;
    }
  }
  return hostile::refused(fd, 3000);
}

struct Shared {
  std::atomic<int> ready;
  std::atomic<int> attacksDone;
  std::atomic<int> rejected, attempted;
  std::atomic<int> rootRejected, rootAttempted;
  std::atomic<int64_t> destroyNs[4];
};

// The job: 3 ranks, allreduces checked element by element, until the
// parent says its attacks are over, then 20 more.
int jobBody(int rank, int nranks, flagcxUniqueId *id, Shared *sh, const std::string &logDir) {
  if (!logDir.empty()) {
    std::string p = logDir + "/rank" + std::to_string(rank) + ".log";
    if (!freopen(p.c_str(), "w", stderr)) return 9;
  }
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
  sh->ready++;
  std::vector<float> in(1 << 18), out(1 << 18);
  int after = 0;
  auto start = std::chrono::steady_clock::now();
  for (int it = 0; after < 20; it++) {
    for (size_t i = 0; i < in.size(); i++) in[i] = static_cast<float>((rank + 1) * (i % 13 + it % 5));
    RANK_OK(flagcxAllReduce(in.data(), out.data(), in.size(), flagcxFloat, flagcxSum, comm, nullptr));
    float tri = static_cast<float>(nranks * (nranks + 1) / 2);
    for (size_t i = 0; i < out.size(); i++)
      RANK_CHECK(out[i] == tri * static_cast<float>(i % 13 + it % 5), "iteration %d elem %zu = %g", it,
                 i, out[i]);
    // The ranks must agree on when the attacks ended, or one leaves early.
    int32_t seen = sh->attacksDone.load() ? 1 : 0, all = 0;
    RANK_OK(flagcxAllReduce(&seen, &all, 1, flagcxInt32, flagcxMin, comm, nullptr));
    if (all) after++;
    RANK_CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(90),
               "attacks never ended");
  }
  int64_t t0 = harness::nowNs();
  RANK_OK(flagcxCommDestroy(comm));
  sh->destroyNs[rank] = harness::nowNs() - t0;
  fflush(stderr);
  return 0;
}

// Attacks on every listening port of every rank process.
void attackRanks(const std::vector<pid_t> &pids, Shared *sh, int nranks) {
  std::mt19937 g(std::random_device{}());
  auto own = harness::ownListeners(std::vector<int>(pids.begin(), pids.end()));
  for (size_t i = 0; i < pids.size(); i++) {
    pid_t pid = pids[i];
    for (const auto &l : own[i]) {
      for (Attack a : {Attack::Garbage, Attack::BadMagic, Attack::WrongSecret, Attack::WrongKind,
                       Attack::Truncated}) {
        for (int claim = 0; claim < nranks; claim++) {
          int fd = harness::connectListener(l);
          if (fd < 0) continue;
          sh->attempted++;
          if (intrude(fd, a, 2, claim, nranks, g))
            sh->rejected++;
          else
            fprintf(stderr, "pid %d port %d: %s claiming rank %d was not rejected\n", pid, l.port,
                    attackName(a), claim);
          close(fd);
          if (a == Attack::Garbage) break;  // no rank to claim
        }
      }
    }
  }
}

TEST(WrongSecret, JobSurvivesForeignConnections) {
  char tmpl[] = "/tmp/flagcx-secret-XXXXXX";
  std::string logDir = mkdtemp(tmpl) ? tmpl : "";
  Shared *sh = harness::sharedBlock<Shared>();
  harness::Env env;
  env.vars = {{"FLAGCX_TIMEOUT", "20"}};
  const int n = 3;
  auto res = harness::run(n, [&](int rank, int nranks, flagcxUniqueId *id) {
    if (rank == 0) {
      // Before joining, attack the root (it lives in the test process) from
      // a process of its own, as a stranger holding no secret would.
      flagcx::DecodedId d;
      RANK_OK(flagcx::decodeUniqueId(*id, &d));
      std::mt19937 g(7);
      for (Attack a : {Attack::Garbage, Attack::BadMagic, Attack::WrongSecret, Attack::WrongKind,
                       Attack::Truncated}) {
        int fd = hostile::dial(d.root);
        RANK_CHECK(fd >= 0, "cannot reach the root at %s", d.root.str().c_str());
        sh->rootAttempted++;
        if (intrude(fd, a, 1, 0, nranks, g)) sh->rootRejected++;
        else fprintf(stderr, "root accepted: %s\n", attackName(a));
        close(fd);
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return jobBody(rank, nranks, id, sh, logDir);
  }, env, 150, [&](std::vector<pid_t> &pids) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (sh->ready.load() < n && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    attackRanks(pids, sh, n);
    sh->attacksDone = 1;
  });
  EXPECT_TRUE(res.allOk()) << res.describe();
  EXPECT_EQ(sh->rootAttempted.load(), 5);
  EXPECT_EQ(sh->rootRejected.load(), sh->rootAttempted.load()) << "the root accepted an intruder";
  EXPECT_GT(sh->attempted.load(), 0) << "found no listening port in the rank processes";
  EXPECT_EQ(sh->rejected.load(), sh->attempted.load()) << "a rank accepted an intruder";
  for (int r = 0; r < n; r++)
    EXPECT_LT(static_cast<double>(sh->destroyNs[r].load()) / 1e9, 2.0) << "rank " << r << " destroy";
  // The ranks logged the rejections.
  int logged = 0;
  for (int r = 0; r < n; r++) {
    std::string log = harness::readFile(logDir + "/rank" + std::to_string(r) + ".log");
    size_t pos = 0;
    while ((pos = log.find("rejected", pos)) != std::string::npos) {
      logged++;
      pos++;
    }
  }
  EXPECT_GE(logged, sh->attempted.load() / 2) << "rejections are not logged (" << logged << " of "
                                              << sh->attempted.load() << ")";
  printf("RELIABILITY-FIGURES wrong-secret: root %d/%d rejected, ranks %d/%d rejected, %d logged\n",
         sh->rootRejected.load(), sh->rootAttempted.load(), sh->rejected.load(),
         sh->attempted.load(), logged);
  if (!logDir.empty() && !getenv("REL_KEEP_LOGS")) {
    std::string cmd = "rm -rf '" + logDir + "'";
    if (system(cmd.c_str()) != 0) fprintf(stderr, "cannot remove %s\n", logDir.c_str());
  }
  harness::freeShared(sh);
}

// Connections that say nothing at all.  They must not stall the set-up of
// a communicator (FLAGCX_TIMEOUT=5 here: the root may not spend its budget
// waiting on strangers) nor make flagcxCommAbort exceed 2 s.
TEST(WrongSecret, SilentConnectionsDoNotStallInit) {
  harness::Env env;
  env.vars = {{"FLAGCX_TIMEOUT", "5"}};
  std::vector<int> silent;
  auto res = harness::run(3, [&](int rank, int nranks, flagcxUniqueId *id) {
    if (rank == 0) {
      flagcx::DecodedId d;
      RANK_OK(flagcx::decodeUniqueId(*id, &d));
      // Two strangers connect to the root and hold their connections open.
      for (int i = 0; i < 2; i++) {
        int fd = hostile::dial(d.root);
        RANK_CHECK(fd >= 0, "cannot reach the root");
        silent.push_back(fd);
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    int64_t t0 = harness::nowNs();
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    double secs = harness::secsSince(t0);
    std::vector<float> buf(1024, 1.f);
    RANK_OK(flagcxAllReduce(buf.data(), buf.data(), buf.size(), flagcxFloat, flagcxSum, comm, nullptr));
    RANK_OK(flagcxCommDestroy(comm));
    RANK_CHECK(secs < 3.0, "init took %.2f s with silent strangers at the root", secs);
    return 0;
  }, env, 60);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

TEST(WrongSecret, SilentConnectionsDoNotDelayAbort) {
  harness::Env env;
  env.vars = {{"FLAGCX_TIMEOUT", "20"}};
  Shared *sh = harness::sharedBlock<Shared>();
  std::vector<int> held;
  auto res = harness::run(3, [&](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    std::vector<float> buf(1024, 1.f);
    RANK_OK(flagcxAllReduce(buf.data(), buf.data(), buf.size(), flagcxFloat, flagcxSum, comm, nullptr));
    sh->ready++;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!sh->attacksDone.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    int64_t t0 = harness::nowNs();
    RANK_OK(flagcxCommAbort(comm));
    double secs = harness::secsSince(t0);
    RANK_CHECK(secs < 2.0, "abort took %.2f s with a silent stranger connected", secs);
    return 0;
  }, env, 60, [&](std::vector<pid_t> &pids) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (sh->ready.load() < 3 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (auto &ls : harness::ownListeners(std::vector<int>(pids.begin(), pids.end())))
      for (const auto &l : ls) {
        int fd = harness::connectListener(l);
        if (fd >= 0) held.push_back(fd);
      }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    sh->attacksDone = 1;
  });
  for (int fd : held) close(fd);
  EXPECT_FALSE(held.empty()) << "found no listening port in the rank processes";
  EXPECT_TRUE(res.allOk()) << res.describe();
  harness::freeShared(sh);
}

}  // namespace
