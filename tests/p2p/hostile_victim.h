// The victim of the hostile-peer tests (p2p_hostile*_test.cc, docs/P2P.md,
// "Security"): a real P2P engine in a process of its own, serving its RPC
// port, with two registered regions between canary pages and a secret
// string outside every region; on request it reports its canaries, its
// secret, its fds, threads and memory.  The fixture also runs the honest
// client: another process, through the public API, that writes a block
// into a region and reads it back.
#pragma once
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "../common/inspect.h"
#include "flagcx_p2p.h"
#include "hostile_peer.h"

namespace hostile {

constexpr size_t kRegion = 64 << 10, kGuard = 4096;
constexpr uint8_t kCanary = 0xc5;
constexpr char kSecretText[] = "SECRET-NOT-REGISTERED-0123456789";
// Outside every region; at the same address in every process forked here.
inline char g_secret[64] = "SECRET-NOT-REGISTERED-0123456789";

struct VictimSetup {
  char meta[256];
  uint64_t a, b, secret;
  uint32_t rkeyA, rkeyB;
  int32_t pid, port;
};
struct VictimStatus {
  int32_t canaries, secret, fds, threads;
  int64_t rssKb;
};

// ---- the victim ------------------------------------------------------------

inline uint32_t rkeyOf(FlagcxP2pEngine *e, FlagcxP2pMr mr, char *at) {
  char d[FLAGCX_P2P_DESC_SIZE];
  FlagcxP2pRdmaDesc desc{};
  if (flagcxP2pEnginePrepareDesc(e, mr, at, 64, d) != 0) return 0;
  flagcxP2pDeserializeRdmaDesc(d, &desc);
  return desc.rkey;
}

inline int victim(int ctl) {
  setenv("FLAGCX_P2P_HANDSHAKE_TIMEOUT", "2", 1);
  setenv("FLAGCX_P2P_RECV_QUEUE_BYTES", "1048576", 1);
  setenv("FLAGCX_P2P_QPS_PER_CONN", "2", 1);
  size_t total = 2 * kRegion + 3 * kGuard;
  auto *arena = static_cast<char *>(mmap(nullptr, total, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  memset(arena, kCanary, total);
  char *a = arena + kGuard, *b = a + kRegion + kGuard;
  memset(a, 0, kRegion);
  memset(b, 0, kRegion);
  FlagcxP2pEngine *e = flagcxP2pEngineCreate();
  FlagcxP2pMr ma = 0, mb = 0;
  char *meta = nullptr;
  if (!e || flagcxP2pEngineReg(e, uintptr_t(a), kRegion, ma) != 0 ||
      flagcxP2pEngineReg(e, uintptr_t(b), kRegion, mb) != 0 || flagcxP2pEngineStartRpcServer(e) != 0 ||
      flagcxP2pEngineGetMetadata(e, &meta) != 0)
    return 1;
  VictimSetup s{};
  snprintf(s.meta, sizeof(s.meta), "%s", meta);
  delete[] meta;
  s.a = uintptr_t(a), s.b = uintptr_t(b), s.secret = uintptr_t(g_secret);
  s.rkeyA = rkeyOf(e, ma, a), s.rkeyB = rkeyOf(e, mb, b);
  s.pid = getpid(), s.port = flagcxP2pEngineGetRpcPort(e);
  if (write(ctl, &s, sizeof(s)) != sizeof(s)) return 1;
  for (char cmd; read(ctl, &cmd, 1) == 1 && cmd == 'S';) {
    VictimStatus st{1, strcmp(g_secret, kSecretText) == 0, harness::openFds(), harness::threadCount(),
              harness::rssKb()};
    for (char *p : {arena, a + kRegion, b + kRegion})
      for (size_t i = 0; i < kGuard; i++) st.canaries &= p[i] == static_cast<char>(kCanary);
    if (write(ctl, &st, sizeof(st)) != sizeof(st)) break;
  }
  flagcxP2pEngineDestroy(e);
  return 0;
}

// ---- this side ------------------------------------------------------------

class Hostile : public ::testing::Test {
 protected:
  inline static int ctl_ = -1;
  inline static pid_t victim_ = 0;
  inline static VictimSetup s_{};
  inline static Secret key_{};
  inline static std::string log_;  // the victim's stderr
  inline static std::vector<pid_t> honest_;  // pids of the honest clients
  inline static VictimStatus base_{};

  static void SetUpTestSuite() {
    char path[] = "/tmp/p2p-hostile-XXXXXX";
    int logFd = mkstemp(path);
    log_ = path;
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    victim_ = fork();
    if (victim_ == 0) {
      close(sv[0]);
      dup2(logFd, 2);
      _exit(victim(sv[1]));
    }
    close(sv[1]);
    close(logFd);
    ctl_ = sv[0];
    ASSERT_TRUE(recvRaw(ctl_, &s_, sizeof(s_), 20)) << "the victim did not start";
    base_ = status();  // at rest: no connection yet
    std::string m = s_.meta;
    ASSERT_NE(m.find('@'), std::string::npos) << "no key in the metadata: " << m;
    for (size_t i = 0; i < key_.size(); i++) key_[i] = uint8_t(std::stoul(m.substr(2 * i, 2), nullptr, 16));
  }
  static void TearDownTestSuite() {
    char x = 'X';
    (void)!write(ctl_, &x, 1);
    int st = 0;
    waitpid(victim_, &st, 0);
    close(ctl_);
    std::printf("---- the victim's log\n%s", harness::readFile(log_).c_str());
    unlink(log_.c_str());
  }
  void TearDown() override { expectIntact(); }

  static VictimStatus status() {
    VictimStatus st{};
    char c = 'S';
    EXPECT_TRUE(sendRaw(ctl_, &c, 1) && recvRaw(ctl_, &st, sizeof(st)));
    return st;
  }
  static void expectIntact() {
    VictimStatus st = status();
    EXPECT_EQ(st.canaries, 1) << "bytes around a region changed";
    EXPECT_EQ(st.secret, 1) << "the secret outside every region changed";
    EXPECT_TRUE(honestServed()) << "an honest client was not served";
  }
  static std::string session() { return std::string(s_.meta).substr(0, std::string(s_.meta).find('?')); }

  // Another process, through the public API: write a block into region A
  // and read it back.  Bounded: a hang is the failure.
  static bool honestServed(const std::string &target = session()) {
    pid_t p = fork();
    if (p == 0) {
      FlagcxP2pEngine *e = flagcxP2pEngineCreate();
      static char buf[4096], back[4096];
      for (size_t i = 0; i < sizeof(buf); i++) buf[i] = char(i * 7 + getpid());
      FlagcxP2pMr mr = 0, mr2 = 0;
      FlagcxP2pRdmaDesc d{};
      FlagcxP2pConn *c = e ? flagcxP2pEngineGetConn(e, target.c_str()) : nullptr;
      bool ok = c && flagcxP2pEngineReg(e, uintptr_t(buf), sizeof(buf), mr) == 0 &&
                flagcxP2pEngineReg(e, uintptr_t(back), sizeof(back), mr2) == 0 &&
                flagcxP2pEngineMakeDesc(c, s_.a + 1024, sizeof(buf), &d) == 0 &&
                flagcxP2pEngineWriteVectorSync(c, {mr}, {buf}, {sizeof(buf)}, {d}) == 0;
      uint64_t id = 0;
      ok = ok && flagcxP2pEngineRead(c, mr2, back, sizeof(back), d, &id) == 0;
      int st = 0;
      while (ok && (st = flagcxP2pEngineXferState(c, id)) == 0) std::this_thread::yield();
      ok = ok && st == 1 && memcmp(buf, back, sizeof(buf)) == 0;
      flagcxP2pEngineDestroy(e);
      _exit(ok ? 0 : 1);
    }
    honest_.push_back(p);
    int st = 0;
    for (int i = 0; i < 1500 && waitpid(p, &st, WNOHANG) == 0; i++)  // 15 s at most
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (waitpid(p, &st, WNOHANG) == 0) {
      kill(p, SIGKILL);
      waitpid(p, &st, 0);
      return false;
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  // The victim's fds and threads back to `base` (released connections go
  // within a moment; bounded wait).
  static bool settlesTo(const VictimStatus &base, VictimStatus *now) {
    for (int i = 0; i < 150; i++) {
      *now = status();
      if (now->fds <= base.fds && now->threads <= base.threads) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  static WireSeg seg(uint64_t remote, uint64_t len, uint32_t rkey, uint64_t local = 0) {
    return WireSeg{local, remote, len, rkey, 0};
  }
  static std::unique_ptr<Session> tcpSession() {
    auto s = std::make_unique<Session>();
    EXPECT_TRUE(s->connect(s_.port, &key_, false)) << "a plain TCP session with the key";
    return s;
  }
};

}  // namespace hostile
