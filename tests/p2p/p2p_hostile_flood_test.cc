// A hostile peer against a real P2P engine, part two (docs/P2P.md,
// "Security"; the victim is hostile_victim.h): stalls after every step of
// the way in, churn, another user at the local door, and how the engine is
// reached -- loopback, "localhost", a refused port.  After each: canaries
// and secret intact, an honest client served.
#include <arpa/inet.h>
#include <fcntl.h>

#include "hostile_victim.h"

using namespace hostile;

namespace {

int localPort(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  return getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0 ? ntohs(a.sin_port) : -1;
}

// Every step of the way in, stopped: none holds up an honest client, the
// engine drops each within its handshake deadline (2 s here), and its log
// names each staller, never the honest client.
TEST_F(Hostile, StallsAtEveryStepHoldUpNobody) {
  const int port = s_.port;
  std::vector<std::unique_ptr<Session>> held;
  auto add = [&](bool door) -> Session & {
    held.push_back(std::make_unique<Session>());
    Session &s = *held.back();
    s.door = door;
    s.to = loopback(port);
    s.ctl = door ? doorTo(port) : tcpTo(s.to);
    EXPECT_GE(s.ctl, 0);
    return s;
  };
  add(false);                                      // silent from the start
  EXPECT_TRUE(sendRaw(add(false).ctl, "FLA", 3));  // part of a hello
  EXPECT_TRUE(tcpHello(add(false).ctl, key_));     // silent once authenticated
  Session &noTable = add(false);                   // an Info promising a table that never comes
  noTable.mine.nregions = 5;
  EXPECT_TRUE(tcpHello(noTable.ctl, key_) && noTable.sendInfo());
  Session &noAnswer = add(false);  // never says whether it uses CMA
  EXPECT_TRUE(tcpHello(noAnswer.ctl, key_) && noAnswer.sendInfo() && noAnswer.recvInfo());
  Session &halfLane = add(false);  // half a lane hello, and a stranger at the lane port
  EXPECT_TRUE(tcpHello(halfLane.ctl, key_) && halfLane.sendInfo() && halfLane.recvInfo() &&
              halfLane.sendCanIn());
  for (int k = 0; k < 2; k++) (k ? halfLane.in : halfLane.out).push_back(tcpTo(halfLane.laneAddr()));
  EXPECT_TRUE(sendRaw(halfLane.out[0], halfLane.theirs.laneToken, 10));
  add(true);                                         // at the door, never answers the greeting
  EXPECT_TRUE(doorIn(add(true).ctl, nullptr));       // let in, then silent
  EXPECT_TRUE(honestServed()) << "while every staller is held";
  for (auto &s : held) EXPECT_TRUE(closedByPeer(s->ctl, 8)) << "a staller was kept";
  std::string log = harness::readFile(log_);
  for (auto &s : held) {
    if (s->door) continue;
    EXPECT_NE(log.find("127.0.0.1:" + std::to_string(localPort(s->ctl))), std::string::npos)
        << "no line names the staller at port " << localPort(s->ctl);
  }
  for (pid_t p : honest_)
    EXPECT_EQ(log.find("local pid " + std::to_string(p)), std::string::npos)
        << "a line blames the honest client " << p << ":\n" << log;
}

// Connections made and dropped in numbers: the victim's fds and threads go
// back to where they were, its memory hardly grows.
TEST_F(Hostile, ChurnReturnsToBaseline) {
  VictimStatus before = status();
  for (int i = 0; i < 200; i++) {
    Session s;
    ASSERT_TRUE(s.connect(s_.port, &key_, false)) << "session " << i;
  }
  for (int i = 0; i < 50; i++) {
    Session s;
    ASSERT_TRUE(s.connect(s_.port, nullptr, true)) << "door session " << i;
  }
  for (int i = 0; i < 100; i++) {
    close(tcpTo(loopback(s_.port)));
    close(doorTo(s_.port));
  }
  VictimStatus now{};
  EXPECT_TRUE(settlesTo(base_, &now)) << "fds " << now.fds << " (at rest " << base_.fds << "), threads "
                                      << now.threads << " (at rest " << base_.threads << ")";
  EXPECT_LT(now.rssKb - before.rssKb, 32 << 10) << "KiB grown";
}

// The door lets in only the engine's user (or root), as the kernel says.
TEST_F(Hostile, AnotherUserIsRefusedAtTheDoor) {
  if (geteuid() != 0) GTEST_SKIP() << "becoming another user needs root";
  pid_t p = fork();
  if (p == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    int fd = doorTo(s_.port);
    char b;
    // Closed at once, before any greeting.
    _exit(fd >= 0 && recvRaw(fd, &b, 1, 5) == false && closedByPeer(fd, 1) ? 0 : 1);
  }
  int st = 0;
  waitpid(p, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  EXPECT_NE(harness::readFile(log_).find("(uid 65534) is not this engine's"), std::string::npos);
}

// Same-host peers reach the engine by loopback or "localhost" without its
// key (the door); a refused port fails within seconds (not FLAGCX_TIMEOUT,
// 600 s), with one line naming the address.
TEST_F(Hostile, LoopbackLocalhostAndARefusedPort) {
  EXPECT_TRUE(honestServed("127.0.0.1:" + std::to_string(s_.port)));
  EXPECT_TRUE(honestServed("localhost:" + std::to_string(s_.port)));
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  SockAddr a = loopback(0);
  ASSERT_EQ(bind(probe, &a.u.sa, a.len), 0);
  int closedPort = localPort(probe);
  close(probe);  // nobody listens there now
  char path[] = "/tmp/p2p-refused-XXXXXX";
  int logFd = mkstemp(path);
  pid_t p = fork();
  if (p == 0) {
    dup2(logFd, 2);
    unsetenv("FLAGCX_TIMEOUT");  // 600 s: the refusal must not wait for it
    setenv("FLAGCX_P2P_HANDSHAKE_TIMEOUT", "1", 1);
    FlagcxP2pEngine *e = flagcxP2pEngineCreate();
    std::string target = std::string(32, '0') + "@127.0.0.1:" + std::to_string(closedPort);
    _exit(e && !flagcxP2pEngineGetConn(e, target.c_str()) ? 0 : 1);
  }
  close(logFd);
  int st = 0;
  for (int i = 0; i < 300 && waitpid(p, &st, WNOHANG) == 0; i++)  // generous: 30 s, not 600
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (waitpid(p, &st, WNOHANG) == 0) {
    kill(p, SIGKILL);
    waitpid(p, &st, 0);
    ADD_FAILURE() << "GetConn to a refused port still waited after 30 s";
  }
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  std::string log = harness::readFile(path);
  unlink(path);
  EXPECT_NE(log.find("cannot connect to 127.0.0.1:" + std::to_string(closedPort)), std::string::npos)
      << log;
}

}  // namespace
