// A stranger's toolkit for the hostile-peer tests: connections to a real
// listener that churn, stay silent, or stop after each step of the real
// handshake (src/rendezvous/socket.h), and the /proc counts (threads, fds,
// VmSize) of the process under attack.  Loopback addresses only, bounded
// counts; every connection made here is closed by the caller (closeAll).
#pragma once
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/socket.h"
#include "tests/common/inspect.h"

namespace hostile {

struct Counts {
  int threads = -1;
  int fds = -1;
  long vmKb = -1;
  std::string str() const {
    return std::to_string(threads) + " threads, " + std::to_string(fds) + " fds, VmSize " +
           std::to_string(vmKb / 1024) + " MiB";
  }
};

inline Counts countsOf(pid_t pid) {
  std::string proc = "/proc/" + std::to_string(pid);
  Counts c;
  c.threads = harness::countDir(proc + "/task");
  c.fds = harness::countDir(proc + "/fd");
  std::ifstream f(proc + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmSize:", 0) == 0) c.vmKb = atol(line.c_str() + 7);
  return c;
}

// Polls pid's counts until ok() holds or maxMs passed; the last counts.
inline Counts settle(pid_t pid, const std::function<bool(const Counts &)> &ok, int maxMs = 5000) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(maxMs);
  Counts c = countsOf(pid);
  while (!ok(c) && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    c = countsOf(pid);
  }
  return c;
}

// Counts of an idle process: two samples 100 ms apart that agree.
inline Counts steady(pid_t pid) {
  Counts a = countsOf(pid), b;
  for (int i = 0; i < 30; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    b = countsOf(pid);
    if (b.threads == a.threads && b.fds == a.fds) return b;
    a = b;
  }
  return b;
}

inline int dial(const flagcx::SockAddr &a) {
  int fd = socket(a.u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, &a.u.sa, a.len) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

inline void closeAll(std::vector<int> *fds) {
  for (int fd : *fds)
    if (fd >= 0) close(fd);
  fds->clear();
}

// n connections opened and closed at once; how many connected.
inline int churn(const flagcx::SockAddr &a, int n) {
  int ok = 0;
  for (int i = 0; i < n; i++) {
    int fd = dial(a);
    if (fd >= 0) ok++, close(fd);
  }
  return ok;
}

// n connections that say nothing, held open.
inline std::vector<int> holdSilent(const flagcx::SockAddr &a, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; i++) fds.push_back(dial(a));
  return fds;
}

inline void sendSome(int fd, const void *p, size_t n) {
  if (fd >= 0) (void)!send(fd, p, n, MSG_NOSIGNAL);
}

// Did the other side close fd (EOF or reset) within ms, without sending
// the handshake's "ok" byte?  Bytes it sends before (a nonce) are read.
inline bool refused(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[64];
  for (;;) {
    ssize_t k = recv(fd, buf, sizeof buf, 0);
    if (k == 0) return true;
    if (k < 0) return errno == ECONNRESET || errno == EPIPE;
  }
}

// One connection stopped after each step of the handshake, held open:
// silent; half a hello; a whole hello and nothing read; the nonce read and
// no proof; and, with the real secret, a whole handshake followed by half
// of the trailerBytes the listener expects next (nothing when 0).
inline std::vector<int> stallEachStep(const flagcx::SockAddr &a, uint32_t kind,
                                      const flagcx::Secret &secret, int claimRank, int nranks,
                                      size_t trailerBytes) {
  flagcx::Hello h{flagcx::kHelloMagic, kind, claimRank, 0, nranks};
  std::vector<int> fds;
  fds.push_back(dial(a));
  fds.push_back(dial(a));
  sendSome(fds.back(), &h, sizeof h / 2);
  fds.push_back(dial(a));
  sendSome(fds.back(), &h, sizeof h);
  fds.push_back(dial(a));
  sendSome(fds.back(), &h, sizeof h);
  uint8_t nonce[16];
  if (fds.back() >= 0) {
    timeval tv{5, 0};  // a listener that never answers must not hold the test
    setsockopt(fds.back(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)!recv(fds.back(), nonce, sizeof nonce, MSG_WAITALL);
  }
  fds.push_back(dial(a));
  auto dl = flagcx::Clock::now() + std::chrono::seconds(5);
  if (fds.back() >= 0 && flagcx::clientHandshake(fds.back(), secret, h, dl) == flagcxSuccess) {
    std::vector<char> half(trailerBytes / 2, 0);
    if (!half.empty()) sendSome(fds.back(), half.data(), half.size());
  }
  return fds;
}

// The address of a listener found in /proc (inspect.h).
inline flagcx::SockAddr addrOf(const harness::Listener &l) {
  flagcx::SockAddr a;
  int fd = harness::connectListener(l);  // resolves "any" to loopback, as it connects
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (fd >= 0 && getpeername(fd, reinterpret_cast<sockaddr *>(&ss), &len) == 0) {
    memcpy(&a.u, &ss, std::min<size_t>(len, sizeof a.u));
    a.len = len;
  }
  if (fd >= 0) close(fd);
  return a;
}

}  // namespace hostile
