// Hostile peers against the rendezvous layer, over real sockets, against
// real ranks (forked processes): the init root, each rank's bootstrap
// listener, and the socket transport's listener during connectAll.  The
// strangers churn (connect and close), stay silent, or stop after each
// step of the handshake; a forged rank holds only what a FLAGCX_COMM_ID
// job's address gives.  Each test asserts that the process under attack
// keeps its thread count (no thread per connection), holds no more fds
// than the handshake queue's 64 slots allow and returns to its baseline
// once the strangers leave, that VmSize stays within a small bound, and
// that the real ranks are served within a few seconds all the while.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <cstdio>
#include <random>
#include <thread>

#include "net/net.h"
#include "net/socket/socket_transport.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/bootstrap_root.h"
#include "rendezvous/uniqueid.h"
#include "tests/common/bootstrap.h"
#include "tests/common/harness.h"
#include "tests/common/hostile.h"

namespace {

using hostile::Counts;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kChurn = 300;        // connections opened and closed at once
constexpr int kSilent = 100;       // connections held without a word
constexpr int kQueueSlots = 64;    // HandshakeQueue's bound on waiting handshakes
#if defined(FLAGCX_TSAN) || defined(FLAGCX_ASAN)
constexpr bool kSanitized = true;  // slower, and its allocator reserves address space in bulk
#else
constexpr bool kSanitized = false;
#endif
// VmSize may grow this much: a thread per connection cost 8 MiB of stack
// each (100 silent connections: 800 MiB).
constexpr long kVmGrowthKb = (kSanitized ? 512 : 64) << 10;
// "Within a few seconds": a hang is the failure, not a slow second.
constexpr double kServedSecs = kSanitized ? 20 : 5;

struct Shared {
  std::atomic<int> phase;  // set by the parent
  std::atomic<int> ready;  // counted up by the ranks
  std::atomic<int> done;
  flagcxUniqueId id;       // rank 0's copy, for the parent's stalls with the real secret
  flagcx::SockAddr listen; // the socket test's accepting rank
};

bool waitUntil(const std::function<bool()> &pred, int maxMs) {
  auto end = std::chrono::steady_clock::now() + milliseconds(maxMs);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// Each rank's stderr in a file of its own, removed at the end.
struct LogDir {
  std::string dir;
  LogDir() {
    char t[] = "/tmp/flagcx-hostile-XXXXXX";
    dir = mkdtemp(t) ? t : "/tmp";
  }
  ~LogDir() {
    if (dir != "/tmp" && !getenv("REL_KEEP_LOGS")) (void)!system(("rm -rf '" + dir + "'").c_str());
  }
  std::string path(int rank) const { return dir + "/rank" + std::to_string(rank) + ".log"; }
  bool redirect(int rank) const { return freopen(path(rank).c_str(), "w", stderr) != nullptr; }
  std::string read(int rank) const { return harness::readFile(path(rank)); }
};

int countOf(const std::string &text, const std::string &what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) n++;
  return n;
}

flagcx::Secret secretOf(const flagcxUniqueId &id) {
  flagcx::DecodedId d;
  EXPECT_EQ(flagcx::decodeUniqueId(id, &d), flagcxSuccess);
  return d.secret;
}

// While the strangers hold their connections: no thread more, no more fds
// than the queue's slots (plus the stalls that got through and wait).
void expectBounded(pid_t pid, const Counts &base, const char *what) {
  Counts now = hostile::settle(pid, [&](const Counts &c) { return c.fds <= base.fds + kQueueSlots + 2; });
  printf("HOSTILE-FIGURES %s pid %d: before %s; under attack %s\n", what, pid, base.str().c_str(),
         now.str().c_str());
  EXPECT_EQ(now.threads, base.threads) << what << ": threads under attack (" << now.str()
                                       << "; before: " << base.str() << ")";
  EXPECT_LE(now.fds, base.fds + kQueueSlots + 2) << what << ": fds under attack";
  EXPECT_LE(now.vmKb, base.vmKb + kVmGrowthKb) << what << ": VmSize under attack";
}

// Once the strangers left: back to the counts before them.
void expectBaseline(pid_t pid, const Counts &base, const char *what) {
  Counts now = hostile::settle(pid, [&](const Counts &c) {
    return c.fds == base.fds && c.threads == base.threads;
  });
  EXPECT_EQ(now.threads, base.threads) << what << ": threads after the attack";
  EXPECT_EQ(now.fds, base.fds) << what << ": fds after the attack";
  EXPECT_LE(now.vmKb, base.vmKb + kVmGrowthKb) << what << ": VmSize after the attack";
}

std::string randomHex(int n) {
  std::random_device rd;
  std::string s;
  for (int i = 0; i < n; i++) s += "0123456789abcdef"[rd() % 16];
  return s;
}

int freeLoopbackPort() {
  flagcx::SockAddr a;
  flagcx::parseHostPort("127.0.0.1:0", &a);
  int fd = -1;
  if (flagcx::listenOn(&a, &fd) != flagcxSuccess) return 0;
  close(fd);
  return a.port();
}

// ------------------------------------------------------------- the init root

// The parent's side of HostileRoot.StrangersAndForgedRankDuringInit:
// strangers and a forged rank at the root in rank 0's process while rank 1
// has not arrived; then, with fresh strangers held, rank 1 is let in.  Returns the forged client's address.
std::string attackRoot(pid_t pid0, const flagcx::SockAddr &root, Shared *sh) {
  EXPECT_TRUE(waitUntil([&] {
    for (auto &l : harness::listeningPorts(pid0))
      if (l.port == root.port()) return true;
    return false;
  }, 20000)) << "rank 0 never started the root";
  Counts base = hostile::steady(pid0);
  // The forged rank knows the address; without FLAGCX_COMM_SECRET that is
  // all the key is made of.
  flagcxUniqueId real, forged;
  EXPECT_EQ(flagcxGetUniqueId(&real), flagcxSuccess);
  {
    harness::ScopedEnv noSecret(harness::Env{{{"FLAGCX_COMM_SECRET", ""}}});
    EXPECT_EQ(flagcxGetUniqueId(&forged), flagcxSuccess);
  }
  int fd = hostile::dial(root);
  EXPECT_GE(fd, 0);
  sockaddr_storage me{};
  socklen_t len = sizeof me;
  getsockname(fd, reinterpret_cast<sockaddr *>(&me), &len);
  flagcx::SockAddr mine;
  memcpy(&mine.u, &me, std::min<size_t>(len, sizeof mine.u));
  mine.len = len;
  flagcx::Hello h{flagcx::kHelloMagic, flagcx::kHelloKindRoot, 1, 0, 2};
  EXPECT_NE(flagcx::clientHandshake(fd, secretOf(forged), h, flagcx::Clock::now() + seconds(5)), flagcxSuccess)
      << "the root took a rank keyed by the address alone";
  close(fd);

  EXPECT_EQ(hostile::churn(root, kChurn), kChurn);
  std::vector<int> held = hostile::holdSilent(root, kSilent);
  for (int f : hostile::stallEachStep(root, flagcx::kHelloKindRoot, secretOf(real), 1, 2,
                                      sizeof(flagcx::PeerInfo)))
    held.push_back(f);
  expectBounded(pid0, base, "root");
  hostile::closeAll(&held);
  expectBaseline(pid0, base, "root");

  held = hostile::holdSilent(root, kSilent);
  for (int f : hostile::stallEachStep(root, flagcx::kHelloKindRoot, secretOf(real), 1, 2,
                                      sizeof(flagcx::PeerInfo)))
    held.push_back(f);
  sh->phase = 1;  // rank 1 may come now
  EXPECT_TRUE(waitUntil([&] { return sh->done.load() == 2; }, 30000)) << "the ranks never got through";
  hostile::closeAll(&held);
  return mine.str();
}

// A FLAGCX_COMM_ID job with FLAGCX_COMM_SECRET: its root, in rank 0's
// process, refuses a rank keyed by the address alone, survives churn,
// silence and stalls at every step with bounded threads and fds, and lets
// the real rank 1 in while strangers still hold 100 connections.
TEST(HostileRoot, StrangersAndForgedRankDuringInit) {
  LogDir logs;
  Shared *sh = harness::sharedBlock<Shared>();
  std::string commId = "127.0.0.1:" + std::to_string(freeLoopbackPort());
  flagcx::SockAddr root;
  ASSERT_TRUE(flagcx::parseHostPort(commId, &root));
  harness::Env env{{{"FLAGCX_COMM_ID", commId}, {"FLAGCX_COMM_SECRET", randomHex(32)},
                    {"FLAGCX_TIMEOUT", "30"}}};
  std::string forger;
  auto res = harness::run(2, [&](int rank, int nranks, flagcxUniqueId *id) {
    RANK_CHECK(logs.redirect(rank), "log file");
    if (rank == 1) RANK_CHECK(waitUntil([&] { return sh->phase.load() >= 1; }, 60000), "never let in");
    int64_t t0 = harness::nowNs();
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    if (rank == 1) RANK_CHECK(harness::secsSince(t0) < kServedSecs, "init took %.1f s", harness::secsSince(t0));
    std::vector<float> v(4096, static_cast<float>(rank + 1));
    RANK_OK(flagcxAllReduce(v.data(), v.data(), v.size(), flagcxFloat, flagcxSum, comm, nullptr));
    RANK_CHECK(v[0] == 3.f && v.back() == 3.f, "allreduce gave %g", v[0]);
    sh->done++;
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, env, 90, [&](std::vector<pid_t> &pids) { forger = attackRoot(pids[0], root, sh); });
  EXPECT_TRUE(res.allOk()) << res.describe();
  std::string log0 = logs.read(0);
  EXPECT_NE(log0.find("rejected a connection from " + forger + ": it did not prove"), std::string::npos)
      << "the forged rank's rejection does not name it (" << forger << "):\n" << log0.substr(0, 2000);
  EXPECT_EQ(countOf(log0, "without FLAGCX_COMM_SECRET"), 0);
  harness::freeShared(sh);
}

// Without FLAGCX_COMM_SECRET a FLAGCX_COMM_ID job still runs, and rank 0
// (only it) says once what that means.
// A member holding the secret claims a communicator of INT_MAX ranks: the
// root waits for the others until FLAGCX_TIMEOUT as usual, then answers with
// a short list of the missing ranks.  Its work and memory for that answer
// must not grow with the claimed size (listing two billion ranks took
// minutes and gigabytes: no answer within the wait below).
TEST(HostileRoot, HugeClaimedSizeAnsweredBriefly) {
  harness::ScopedEnv env(harness::Env{{{"FLAGCX_TIMEOUT", "2"}}});
  flagcxUniqueId id;
  ASSERT_EQ(flagcxGetUniqueId(&id), flagcxSuccess);
  flagcx::DecodedId d;
  ASSERT_EQ(flagcx::decodeUniqueId(id, &d), flagcxSuccess);
  int fd = hostile::dial(d.root);
  ASSERT_GE(fd, 0);
  auto deadline = flagcx::Clock::now() + seconds(5);
  flagcx::Hello h{flagcx::kHelloMagic, flagcx::kHelloKindRoot, 0, 0, INT32_MAX};
  ASSERT_EQ(flagcx::clientHandshake(fd, d.secret, h, deadline), flagcxSuccess);
  flagcx::PeerInfo self{};
  ASSERT_EQ(flagcx::sendAll(fd, &self, sizeof self, deadline), flagcxSuccess);
  flagcx::RootReply reply{};
  ASSERT_EQ(flagcx::recvAll(fd, &reply, sizeof reply, flagcx::Clock::now() + seconds(30)), flagcxSuccess)
      << "no answer from the root";
  close(fd);
  reply.text[sizeof reply.text - 1] = 0;
  EXPECT_EQ(reply.status, 1u);
  EXPECT_NE(strstr(reply.text, "1,2,3"), nullptr) << reply.text;
  EXPECT_NE(strstr(reply.text, "more never arrived"), nullptr) << reply.text;
}

TEST(CommSecret, JobWithoutSecretWarnsOnce) {
  LogDir logs;
  std::string commId = "127.0.0.1:" + std::to_string(freeLoopbackPort());
  harness::Env env{{{"FLAGCX_COMM_ID", commId}, {"FLAGCX_TIMEOUT", "20"}}};
  auto res = harness::run(2, [&](int rank, int nranks, flagcxUniqueId *id) {
    RANK_CHECK(logs.redirect(rank), "log file");
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, env, 60);
  EXPECT_TRUE(res.allOk()) << res.describe();
  EXPECT_EQ(countOf(logs.read(0), "without FLAGCX_COMM_SECRET: this job's key comes from the address alone, so anyone who can reach"), 1)
      << logs.read(0);
  EXPECT_EQ(countOf(logs.read(1), "without FLAGCX_COMM_SECRET"), 0);
}

// The variables' values: refused clearly when unsafe; the file form gives
// the same key as the value.
TEST(CommSecret, ValuesAndFiles) {
  LogDir tmp;
  auto idWith = [](const harness::Env &env, flagcxUniqueId *id) {
    harness::ScopedEnv scoped(env);
    return flagcxGetUniqueId(id);
  };
  auto file = [&](const char *name, const std::string &text, mode_t mode) {
    std::string p = tmp.dir + "/" + name;
    FILE *f = fopen(p.c_str(), "w");
    fputs(text.c_str(), f);
    fclose(f);
    chmod(p.c_str(), mode);
    return p;
  };
  const std::string id = "127.0.0.1:29999", good = "0123456789abcdef0123";
  flagcxUniqueId a, b, c;
  ASSERT_EQ(idWith({{{"FLAGCX_COMM_ID", id}, {"FLAGCX_COMM_SECRET", good}}}, &a), flagcxSuccess);
  ASSERT_EQ(idWith({{{"FLAGCX_COMM_ID", id}, {"FLAGCX_COMM_SECRET_FILE", file("ok", good + "\n", 0600)}}}, &b),
            flagcxSuccess);
  ASSERT_EQ(idWith({{{"FLAGCX_COMM_ID", id}, {"FLAGCX_COMM_SECRET", ""}}}, &c), flagcxSuccess);
  EXPECT_EQ(secretOf(a), secretOf(b));
  EXPECT_NE(secretOf(a), secretOf(c));
  struct Bad {
    harness::Env env;
    const char *says;
  } bad[] = {
      {{{{"FLAGCX_COMM_SECRET", "short"}}}, "at least 16"},
      {{{{"FLAGCX_COMM_SECRET", good}, {"FLAGCX_COMM_SECRET_FILE", file("both", good, 0600)}}}, "both set"},
      {{{{"FLAGCX_COMM_SECRET_FILE", file("open", good, 0644)}}}, "chmod 600"},
      {{{{"FLAGCX_COMM_SECRET_FILE", tmp.dir}}}, "not a regular file"},
      {{{{"FLAGCX_COMM_SECRET_FILE", file("big", std::string(5000, 'x'), 0600)}}}, "larger than 4 KiB"},
      {{{{"FLAGCX_COMM_SECRET_FILE", tmp.dir + "/absent"}}}, "cannot open"},
      {{{{"FLAGCX_COMM_SECRET_FILE", file("blank", "   \n", 0600)}}}, "at least 16"},
  };
  for (auto &t : bad) {
    t.env.vars.push_back({"FLAGCX_COMM_ID", id});
    flagcxUniqueId x;
    EXPECT_EQ(idWith(t.env, &x), flagcxInvalidArgument) << t.says;
    EXPECT_NE(std::string(flagcxGetLastError(nullptr)).find(t.says), std::string::npos)
        << flagcxGetLastError(nullptr);
  }
}

// ------------------------------------------------------- a live rank's listener

// Strangers at every listener of the ranks of a running communicator (the
// bootstrap's): churn, silence, stalls at every step (the last with the
// real secret, claiming a rank that is connected already).
std::vector<int> attackListeners(const std::vector<pid_t> &pids, const flagcx::Secret &secret,
                                 int nranks) {
  std::vector<int> held;
  auto own = harness::ownListeners(std::vector<int>(pids.begin(), pids.end()));
  for (size_t r = 0; r < own.size(); r++) {
    EXPECT_FALSE(own[r].empty()) << "rank " << r << " has no listener";
    for (auto &l : own[r]) {
      flagcx::SockAddr a = hostile::addrOf(l);
      EXPECT_EQ(hostile::churn(a, kChurn), kChurn);
      for (int f : hostile::holdSilent(a, kSilent)) held.push_back(f);
      int other = static_cast<int>(r + 1) % nranks;
      for (int f : hostile::stallEachStep(a, 2, secret, other, nranks, 0)) held.push_back(f);
    }
  }
  return held;
}

// The issue this guards: a rank gave each accepted connection a thread
// until the communicator ended, so churn grew it without bound and its
// peers' collectives failed when it died.
TEST(HostileRank, StrangersAgainstLiveRanks) {
  Shared *sh = harness::sharedBlock<Shared>();
  const int n = 2;
  auto res = harness::run(n, [&](int rank, int nranks, flagcxUniqueId *id) {
    if (rank == 0) sh->id = *id;
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    std::vector<float> v(1 << 16);
    for (int round = 1; round <= 3; round++) {
      std::fill(v.begin(), v.end(), static_cast<float>(rank + round));
      int64_t t0 = harness::nowNs();
      RANK_OK(flagcxAllReduce(v.data(), v.data(), v.size(), flagcxFloat, flagcxSum, comm, nullptr));
      RANK_CHECK(harness::secsSince(t0) < kServedSecs, "allreduce took %.1f s", harness::secsSince(t0));
      RANK_CHECK(v.back() == static_cast<float>(1 + 2 * round), "round %d: %g", round, v.back());
      sh->ready++;
      RANK_CHECK(waitUntil([&] { return sh->phase.load() >= round || round == 3; }, 60000), "parent");
    }
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, {{{"FLAGCX_TIMEOUT", "30"}}}, 90, [&](std::vector<pid_t> &pids) {
    if (!waitUntil([&] { return sh->ready.load() == n; }, 30000)) return;
    std::vector<Counts> base;
    for (pid_t p : pids) base.push_back(hostile::steady(p));
    std::vector<int> held = attackListeners(pids, secretOf(sh->id), n);
    for (int r = 0; r < n; r++) expectBounded(pids[r], base[r], "live rank");
    sh->phase = 1;  // an allreduce while the strangers hold on
    EXPECT_TRUE(waitUntil([&] { return sh->ready.load() == 2 * n; }, 30000));
    hostile::closeAll(&held);
    for (int r = 0; r < n; r++) expectBaseline(pids[r], base[r], "live rank");
    sh->phase = 2;
  });
  EXPECT_TRUE(res.allOk()) << res.describe();
  harness::freeShared(sh);
}

// A bootstrap message header as bootstrap.cc writes it.
struct WireMsgHeader {
  uint32_t tag;
  uint32_t pad;
  uint64_t size;
};

long ownVmKb() { return hostile::countsOf(getpid()).vmKb; }

// Rank 0's side of HostileRank.BootstrapFloodsAndBounds: what its peers sent
// must fail at once, without room made for it.
int boundsVictim(flagcx::Bootstrap &bs) {
  long vm0 = ownVmKb();
  char buf[8];
  flagcxResult_t rc = bs.recv(1, 0x99, buf, sizeof buf);
  RANK_CHECK(rc == flagcxRemoteError, "a 1 GiB early message from rank 1: %d", rc);
  rc = bs.recv(2, 0x99, buf, sizeof buf);
  RANK_CHECK(rc == flagcxRemoteError, "5000 early messages from rank 2: %d", rc);
  RANK_CHECK(ownVmKb() < vm0 + kVmGrowthKb, "VmSize grew from %ld to %ld kB", vm0, ownVmKb());
  return 0;
}

// Bare bootstraps of 3 ranks.  First their peers connect (allgather, bcast,
// barrier) while strangers hold 100 connections and stalls at each rank's
// listener.  Then two ranks turn hostile (they hold the secret): rank 1
// announces a message of 1 GiB - 1 that rank 0 does not wait for, rank 2
// floods it with 5000 small ones; rank 0's receives fail at once.
TEST(HostileRank, BootstrapFloodsAndBounds) {
  Shared *sh = harness::sharedBlock<Shared>();
  const int n = 3;
  auto res = harness::run(n, [&](int rank, int nranks, flagcxUniqueId *id) {
    if (rank == 0) sh->id = *id;
    auto bs = harness::makeBootstrap(rank, nranks, *id);
    RANK_CHECK(bs != nullptr, "bootstrap");
    sh->ready++;
    RANK_CHECK(waitUntil([&] { return sh->phase.load() >= 1; }, 60000), "parent");
    int64_t t0 = harness::nowNs();
    std::vector<int> slots(static_cast<size_t>(nranks));
    slots[static_cast<size_t>(rank)] = rank * 7;
    RANK_OK(bs->allgather(slots.data(), sizeof(int)));
    int word = rank == 0 ? 42 : 0;
    RANK_OK(bs->bcast(&word, sizeof word, 0));
    RANK_OK(bs->barrier());
    RANK_CHECK(harness::secsSince(t0) < kServedSecs, "took %.1f s", harness::secsSince(t0));
    RANK_CHECK(slots[2] == 14 && word == 42, "allgather %d, bcast %d", slots[2], word);
    sh->ready++;
    RANK_CHECK(waitUntil([&] { return sh->phase.load() >= 2; }, 60000), "parent");
    if (rank == 0) return boundsVictim(*bs);
    if (rank == 2) {
      char b = 0;
      for (int i = 0; i < 5000 && bs->send(0, 0x55, &b, 1) == flagcxSuccess; i++) {}
      return 0;
    }
    int fd = -1;
    auto dl = flagcx::Clock::now() + seconds(5);
    RANK_OK(flagcx::connectTo(bs->peers()[0].bootAddr, dl, &fd));
    RANK_OK(flagcx::clientHandshake(fd, bs->secret(), flagcx::Hello{flagcx::kHelloMagic, 2, 1, 0, nranks}, dl));
    WireMsgHeader mh{0x66, 0, (1ull << 30) - 1};
    RANK_OK(flagcx::sendAll(fd, &mh, sizeof mh, dl));
    RANK_CHECK(hostile::refused(fd, 10000), "rank 0 kept reading");
    close(fd);
    return 0;
  }, {{{"FLAGCX_TIMEOUT", "30"}}}, 90, [&](std::vector<pid_t> &pids) {
    if (!waitUntil([&] { return sh->ready.load() == n; }, 30000)) return;
    std::vector<Counts> base;
    for (pid_t p : pids) base.push_back(hostile::steady(p));
    std::vector<int> held;
    auto own = harness::ownListeners(std::vector<int>(pids.begin(), pids.end()));
    for (size_t r = 0; r < own.size(); r++)
      for (auto &l : own[r])  // the stall with the secret claims the rank itself: refused
        for (int f : hostile::stallEachStep(hostile::addrOf(l), 2, secretOf(sh->id), static_cast<int>(r), n, 0))
          held.push_back(f);
    for (size_t r = 0; r < own.size(); r++)
      for (auto &l : own[r])
        for (int f : hostile::holdSilent(hostile::addrOf(l), kSilent)) held.push_back(f);
    for (int r = 0; r < n; r++) expectBounded(pids[r], base[r], "bootstrap");
    sh->phase = 1;
    EXPECT_TRUE(waitUntil([&] { return sh->ready.load() == 2 * n; }, 30000));
    hostile::closeAll(&held);
    sh->phase = 2;
  });
  EXPECT_TRUE(res.allOk()) << res.describe();
  harness::freeShared(sh);
}

// ------------------------------------------- the socket transport's listener

// The accepting rank's listener, open during connectAll only: strangers
// churn, hold 100 connections and stall at each step (the last with the
// real secret, claiming the accepting rank itself) before the connecting
// rank may start.  Set-up completes while they hold on, and afterwards
// each rank's fds and threads are what they were before connectAll.
TEST(HostileSocket, StrangersDuringConnectAll) {
  Shared *sh = harness::sharedBlock<Shared>();
  harness::Env env{{{"FLAGCX_TIMEOUT", "30"}, {"FLAGCX_SOCKET_HELPERS", "0"}, {"FLAGCX_NSOCKS_PERTHREAD", "2"}}};
  auto res = harness::run(2, [&](int rank, int nranks, flagcxUniqueId *id) {
    if (rank == 0) sh->id = *id;
    auto bs = harness::makeBootstrap(rank, nranks, *id);
    RANK_CHECK(bs != nullptr, "bootstrap");
    RANK_OK(bs->barrier());  // the bootstrap's own connections exist before the counts
    int fds0 = harness::openFds(), threads0 = harness::threadCount();
    int64_t t0 = 0;
    flagcx::socketTransportSetListenHook([&](const flagcx::SockAddr &a) {
      if (rank == 1) {
        sh->listen = a;
        sh->ready = 1;
      } else {
        waitUntil([&] { return sh->phase.load() >= 1; }, 60000);
      }
      t0 = harness::nowNs();
    });
    auto tr = flagcx::makeSocketTransport();
    std::vector<std::unique_ptr<flagcx::Conn>> conns;
    RANK_OK(tr->connectAll(*bs, {1 - rank}, 1, &conns));
    RANK_CHECK(harness::secsSince(t0) < kServedSecs, "connectAll took %.1f s", harness::secsSince(t0));
    RANK_CHECK(sh->phase.load() >= 1, "set-up did not wait for the attack");
    RANK_OK(bs->barrier());
    conns.clear();
    tr.reset();
    RANK_CHECK(harness::openFds() == fds0, "fds %d, %d before connectAll", harness::openFds(), fds0);
    RANK_CHECK(harness::threadCount() == threads0, "threads %d, %d before", harness::threadCount(), threads0);
    sh->done++;
    RANK_CHECK(waitUntil([&] { return sh->phase.load() >= 2; }, 60000), "parent");
    return 0;
  }, env, 90, [&](std::vector<pid_t> &pids) {
    if (!waitUntil([&] { return sh->ready.load() == 1; }, 30000)) return;
    Counts base = hostile::steady(pids[1]);
    flagcx::SockAddr a = sh->listen;
    EXPECT_EQ(hostile::churn(a, kChurn), kChurn);
    std::vector<int> held = hostile::holdSilent(a, kSilent);
    for (int f : hostile::stallEachStep(a, 3, secretOf(sh->id), 1, 2, 0)) held.push_back(f);
    expectBounded(pids[1], base, "socket listener");
    sh->phase = 1;
    EXPECT_TRUE(waitUntil([&] { return sh->done.load() == 2; }, 30000));  // checked with these held
    hostile::closeAll(&held);
    sh->phase = 2;
  });
  EXPECT_TRUE(res.allOk()) << res.describe();
  harness::freeShared(sh);
}

}  // namespace
