// Sockets for the bootstrap and the transports: addresses and interface
// choice, the MAC, listening, connecting and accepting, exact-length I/O
// with deadlines.  The handshake is in handshake.cc.
#include "rendezvous/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "base/base.h"

namespace flagcx {

std::string SockAddr::str() const {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (u.sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &u.in4.sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(port());
  }
  if (u.sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &u.in6.sin6_addr, buf, sizeof(buf));
    return "[" + std::string(buf) + "]:" + std::to_string(port());
  }
  return "<none>";
}

int SockAddr::port() const {
  if (u.sa.sa_family == AF_INET) return ntohs(u.in4.sin_port);
  if (u.sa.sa_family == AF_INET6) return ntohs(u.in6.sin6_port);
  return 0;
}

void SockAddr::setPort(int p) {
  if (u.sa.sa_family == AF_INET) u.in4.sin_port = htons(static_cast<uint16_t>(p));
  if (u.sa.sa_family == AF_INET6) u.in6.sin6_port = htons(static_cast<uint16_t>(p));
}

std::string peerOf(int fd) {
  sockaddr_storage from{};
  socklen_t fl = sizeof(from);
  if (getpeername(fd, reinterpret_cast<sockaddr *>(&from), &fl) != 0) return "?";
  SockAddr peer;
  memcpy(&peer.u, &from, std::min<size_t>(fl, sizeof(peer.u)));
  peer.len = fl;
  return peer.str();
}

bool strangerLogAllowed(uint64_t *skipped) {
  constexpr double kBurst = 20, kPerSec = 1;
  static std::mutex mu;
  static double tokens = kBurst;
  static Clock::time_point last = Clock::now();
  static uint64_t left = 0;
  std::lock_guard<std::mutex> lk(mu);
  auto now = Clock::now();
  tokens = std::min(kBurst, tokens + kPerSec * std::chrono::duration<double>(now - last).count());
  last = now;
  if (tokens < 1) {
    left++;
    return false;
  }
  tokens -= 1;
  *skipped = left;
  left = 0;
  return true;
}

bool parseHostPort(const std::string &s, SockAddr *out) {
  std::string host, port;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') return false;
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string::npos || colon == 0) return false;
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos) return false;
  long p = strtol(port.c_str(), nullptr, 10);
  if (p < 0 || p > 65535) return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return false;
  *out = SockAddr();
  memcpy(&out->u, res->ai_addr, res->ai_addrlen);
  out->len = res->ai_addrlen;
  out->setPort(static_cast<int>(p));
  freeaddrinfo(res);
  return true;
}

bool ifnameMatches(const std::string &filter, const std::string &name) {
  if (filter.empty()) return true;
  std::string f = filter;
  bool exclude = f[0] == '^';
  if (exclude) f.erase(0, 1);
  bool exact = !f.empty() && f[0] == '=';
  if (exact) f.erase(0, 1);
  bool hit = false;
  size_t pos = 0;
  while (pos <= f.size()) {
    size_t comma = f.find(',', pos);
    if (comma == std::string::npos) comma = f.size();
    std::string tok = f.substr(pos, comma - pos);
    if (!tok.empty()) {
      if (exact ? name == tok : name.compare(0, tok.size(), tok) == 0) hit = true;
    }
    pos = comma + 1;
  }
  return exclude ? !hit : hit;
}

flagcxResult_t findLocalAddress(SockAddr *out, std::string *ifname) {
  const std::string &filter = paramStr(Param::SOCKET_IFNAME);
  const std::string &fam = paramStr(Param::SOCKET_FAMILY);
  int wantFamily = fam == "AF_INET" ? AF_INET : fam == "AF_INET6" ? AF_INET6 : AF_UNSPEC;
  if (!fam.empty() && wantFamily == AF_UNSPEC)
    return argError(flagcxInvalidArgument, kBootstrap,
                    "FLAGCX_SOCKET_FAMILY=%s: expected AF_INET or AF_INET6", fam.c_str());
  ifaddrs *list = nullptr;
  if (getifaddrs(&list) != 0) {
    WARN(kBootstrap, "getifaddrs failed: %s", strerror(errno));
    return flagcxSystemError;
  }
  // Two passes: non-loopback first (unless the filter names lo), then loopback.
  bool found = false;
  for (int pass = 0; pass < 2 && !found; pass++) {
    for (ifaddrs *it = list; it && !found; it = it->ifa_next) {
      if (!it->ifa_addr || !(it->ifa_flags & IFF_UP)) continue;
      int f = it->ifa_addr->sa_family;
      if (f != AF_INET && f != AF_INET6) continue;
      if (wantFamily != AF_UNSPEC && f != wantFamily) continue;
      bool loop = (it->ifa_flags & IFF_LOOPBACK) != 0;
      if ((pass == 0) == loop && filter.empty()) continue;
      if (!ifnameMatches(filter, it->ifa_name)) continue;
      if (f == AF_INET6) {
        auto *a6 = reinterpret_cast<sockaddr_in6 *>(it->ifa_addr);
        if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;  // needs a scope id
      }
      *out = SockAddr();
      size_t len = f == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      memcpy(&out->u, it->ifa_addr, len);
      out->len = static_cast<uint32_t>(len);
      out->setPort(0);
      if (ifname) *ifname = it->ifa_name;
      found = true;
    }
    if (!filter.empty()) break;  // the filter decides; no loopback fallback
  }
  freeifaddrs(list);
  if (!found) {
    // A filter that matches nothing is the user's argument; no interface
    // with an address at all is the system's state.
    if (!filter.empty() || !fam.empty()) {
      WARN(kBootstrap, "FLAGCX_SOCKET_IFNAME=\"%s\" / FLAGCX_SOCKET_FAMILY=\"%s\" match no interface "
           "that is up with an address (see `ip -brief address`)", filter.c_str(), fam.c_str());
      return flagcxInvalidArgument;
    }
    WARN(kBootstrap, "no network interface is up with an address");
    return flagcxSystemError;
  }
  return flagcxSuccess;
}

// SipHash-2-4 (Aumasson & Bernstein), written from the paper's description.
static inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }
uint64_t macOf(const Secret &key, const void *data, size_t len) {
  uint64_t k0, k1;
  memcpy(&k0, key.data(), 8);
  memcpy(&k1, key.data() + 8, 8);
  uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  auto round = [&] {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  };
  const uint8_t *p = static_cast<const uint8_t *>(data);
  size_t full = len / 8 * 8;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m;
    memcpy(&m, p + i, 8);
    v3 ^= m; round(); round(); v0 ^= m;
  }
  uint64_t last = static_cast<uint64_t>(len & 0xff) << 56;
  for (size_t i = 0; i < len - full; i++) last |= static_cast<uint64_t>(p[full + i]) << (8 * i);
  v3 ^= last; round(); round(); v0 ^= last;
  v2 ^= 0xff;
  round(); round(); round(); round();
  return v0 ^ v1 ^ v2 ^ v3;
}

void randomBytes(void *buf, size_t len) {
  uint8_t *p = static_cast<uint8_t *>(buf);
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n <= 0) {
      if (errno == EINTR) continue;
      abort();  // the kernel's RNG is not optional for secrets
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

Clock::time_point deadlineFromTimeout() {
  int64_t t = paramInt(Param::TIMEOUT);
  if (t <= 0) t = 600;
  return Clock::now() + std::chrono::seconds(t);
}

static int msLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1000 ? 1000 : static_cast<int>(left);
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void setNonBlocking(int fd, bool on) {
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

flagcxResult_t listenOn(SockAddr *addr, int *fd) {
  int s = socket(addr->u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    WARN(kBootstrap, "socket() failed: %s", strerror(errno));
    return flagcxSystemError;
  }
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(s, &addr->u.sa, addr->len) != 0 || listen(s, 1024) != 0) {
    WARN(kBootstrap, "cannot listen on %s: %s", addr->str().c_str(), strerror(errno));
    close(s);
    return flagcxSystemError;
  }
  socklen_t len = addr->len;
  getsockname(s, &addr->u.sa, &len);
  setNonBlocking(s, true);
  *fd = s;
  return flagcxSuccess;
}

flagcxResult_t connectTo(const SockAddr &addr, Clock::time_point deadline, int *fd) {
  int delayMs = 1;
  while (true) {
    int s = socket(addr.u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
      WARN(kBootstrap, "socket() failed: %s", strerror(errno));
      return flagcxSystemError;
    }
    setNonBlocking(s, true);
    int rc = connect(s, &addr.u.sa, addr.len);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s, POLLOUT, 0};
      while ((rc = poll(&p, 1, msLeft(deadline))) == 0 && Clock::now() < deadline) {}
      int err = 0;
      socklen_t el = sizeof(err);
      if (rc > 0) getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el);
      rc = (rc > 0 && err == 0) ? 0 : -1;
      if (rc != 0) errno = err ? err : ETIMEDOUT;
    }
    if (rc == 0) {
      setNonBlocking(s, false);
      setNoDelay(s);
      *fd = s;
      return flagcxSuccess;
    }
    int err = errno;
    close(s);
    if (Clock::now() >= deadline) {
      WARN(kBootstrap, "cannot connect to %s within FLAGCX_TIMEOUT: %s", addr.str().c_str(),
           strerror(err));
      return flagcxRemoteError;
    }
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EAGAIN && err != ENETUNREACH &&
        err != EHOSTUNREACH && err != ECONNRESET) {
      WARN(kBootstrap, "connect to %s failed: %s", addr.str().c_str(), strerror(err));
      return flagcxSystemError;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    delayMs = delayMs < 100 ? delayMs * 2 : 100;
  }
}

flagcxResult_t acceptOne(int listenFd, Clock::time_point deadline, int *fd, int wakeFd) {
  *fd = -1;
  while (true) {
    int s = accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
    if (s >= 0) {
      setNonBlocking(s, false);
      setNoDelay(s);
      *fd = s;
      return flagcxSuccess;
    }
    int err = errno;
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
      // The connection stays in the backlog; the next poll sees it again.
      static std::atomic<int64_t> lastWarn{0};
      int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                        Clock::now().time_since_epoch()).count();
      if (lastWarn.exchange(now) != now)
        WARN(kBootstrap, "accept on fd %d: %s; connections wait in the backlog", listenFd,
             strerror(err));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return flagcxSuccess;
    }
    if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR && err != ECONNABORTED &&
        err != EPROTO && err != EPERM) {
      WARN(kBootstrap, "accept failed: %s", strerror(err));
      return flagcxSystemError;
    }
    if (Clock::now() >= deadline) return flagcxSuccess;
    pollfd p[2] = {{listenFd, POLLIN, 0}, {wakeFd, POLLIN, 0}};
    if (poll(p, wakeFd >= 0 ? 2 : 1, msLeft(deadline)) > 0 && (p[1].revents & POLLIN))
      return flagcxSuccess;
  }
}

// Without an eventfd (never seen on Linux >= 2.6.27) fd_ stays -1 and the
// waiters fall back to their slices.
WakeFd::WakeFd() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (fd_ < 0) WARN(kBootstrap, "eventfd failed: %s", strerror(errno));
}

WakeFd::~WakeFd() {
  if (fd_ >= 0) close(fd_);
}

void WakeFd::signal() {
  uint64_t one = 1;
  if (fd_ >= 0) (void)!write(fd_, &one, sizeof one);
}

void WakeFd::drain() {
  uint64_t v;
  if (fd_ >= 0) (void)!read(fd_, &v, sizeof v);
}

flagcxResult_t sendAll(int fd, const void *buf, size_t len, Clock::time_point deadline) {
  const char *p = static_cast<const char *>(buf);
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (Clock::now() >= deadline) {
        WARN(kBootstrap, "send timed out after FLAGCX_TIMEOUT (fd %d)", fd);
        return flagcxRemoteError;
      }
      pollfd pf{fd, POLLOUT, 0};
      poll(&pf, 1, msLeft(deadline));
      continue;
    }
    WARN(kBootstrap, "send failed: %s (peer gone?)", n == 0 ? "closed" : strerror(errno));
    return flagcxRemoteError;
  }
  return flagcxSuccess;
}

flagcxResult_t recvAll(int fd, void *buf, size_t len, Clock::time_point deadline) {
  char *p = static_cast<char *>(buf);
  while (len > 0) {
    ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return flagcxRemoteError;  // orderly close: the caller names the peer
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (Clock::now() >= deadline) return flagcxRemoteError;
      pollfd pf{fd, POLLIN, 0};
      poll(&pf, 1, msLeft(deadline));
      continue;
    }
    return flagcxRemoteError;
  }
  return flagcxSuccess;
}

}  // namespace flagcx
