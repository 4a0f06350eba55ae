// The connecting side's way in (docs/P2P.md, "Security"), and the calls
// that use it: flagcxP2pEngineConnect and flagcxP2pEngineGetConn.
//
// A target on this host (a loopback address, or an address of this host's
// interfaces in this network namespace) is tried first at its engine's
// local door, an abstract Unix socket named after the port, where the
// kernel names both ends (SO_PEERCRED): the engine must run as this user
// (or root), and no key is needed unless FLAGCX_P2P_SECRET is set.  Else
// TCP, proving the engine's key -- the one the target carries
// ("KEY@host:port", from the engine's GetMetadata), else FLAGCX_P2P_SECRET's
// -- and checking the engine proves it back.  Everything ends within
// FLAGCX_P2P_HANDSHAKE_TIMEOUT, a refused connection included.  Keys never
// appear in log lines.
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "base/base.h"
#include "p2p/p2p_internal.h"

using namespace flagcx;
using namespace flagcx::p2p;

namespace {

struct Target {
  SockAddr addr;
  bool hasKey = false;
  Secret key{};
};

std::string withoutKey(const std::string &s) {
  size_t at = s.find('@');
  return at == std::string::npos ? s : "KEY@" + s.substr(at + 1);
}

bool parseKey(const std::string &hex, Secret *key) {
  if (hex.size() != 2 * key->size()) return false;
  for (size_t i = 0; i < key->size(); i++) {
    unsigned v = 0;
    if (sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1 || !isxdigit(hex[2 * i]) || !isxdigit(hex[2 * i + 1]))
      return false;
    (*key)[i] = static_cast<uint8_t>(v);
  }
  return true;
}

bool parseTarget(const std::string &s, Target *t) {
  size_t at = s.find('@');
  if (at != std::string::npos) {
    if (!parseKey(s.substr(0, at), &t->key)) return false;
    t->hasKey = true;
  }
  return parseHostPort(at == std::string::npos ? s : s.substr(at + 1), &t->addr) &&
         t->addr.port() > 0;
}

bool sameIp(const sockaddr *a, const sockaddr *b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET)
    return reinterpret_cast<const sockaddr_in *>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in *>(b)->sin_addr.s_addr;
  return a->sa_family == AF_INET6 &&
         memcmp(&reinterpret_cast<const sockaddr_in6 *>(a)->sin6_addr,
                &reinterpret_cast<const sockaddr_in6 *>(b)->sin6_addr, sizeof(in6_addr)) == 0;
}

bool isLoopback(const SockAddr &a) {
  if (a.u.sa.sa_family == AF_INET) return (ntohl(a.u.in4.sin_addr.s_addr) >> 24) == 127;
  return a.u.sa.sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&a.u.in6.sin6_addr);
}

// Loopback, or an address of one of this host's interfaces.
bool isLocalAddr(const SockAddr &a) {
  if (isLoopback(a)) return true;
  ifaddrs *list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool hit = false;
  for (ifaddrs *it = list; it && !hit; it = it->ifa_next)
    hit = it->ifa_addr && sameIp(it->ifa_addr, &a.u.sa);
  freeifaddrs(list);
  return hit;
}

int connectDoor(int port, ucred *cr) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::string name = doorName(port);
  memcpy(a.sun_path + 1, name.data(), name.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  socklen_t cl = sizeof(*cr);
  if (s >= 0 && connect(s, reinterpret_cast<sockaddr *>(&a), len) == 0 &&
      getsockopt(s, SOL_SOCKET, SO_PEERCRED, cr, &cl) == 0)
    return s;
  if (s >= 0) close(s);
  return -1;
}

// The local door of the engine at t: its fd (*who from the kernel), or -1
// (*refused: the engine refused us, no point in TCP).
int dialDoor(FlagcxP2pEngine *e, const Target &t, Clock::time_point dl, PeerId *who, bool *refused) {
  ucred cr{};
  int fd = connectDoor(t.addr.port(), &cr);
  if (fd < 0) return -1;  // no door: another host, or no engine at this port
  DoorGreeting g{};
  SockAddr main;
  bool ok = (cr.uid == geteuid() || cr.uid == 0) && io1(fd, &g, sizeof(g), false, dl) &&
            g.magic == kDoorMagic && g.port == static_cast<uint32_t>(t.addr.port());
  if (ok) {  // the engine listening at t, not another one at that port
    memcpy(&main.u, g.mainAddr, std::min(sizeof(g.mainAddr), sizeof(main.u)));
    ok = isLoopback(t.addr) ? g.loopback != 0 : sameIp(&main.u.sa, &t.addr.u.sa);
  }
  const Secret *key = t.hasKey ? &t.key : !e->keyMade ? &e->secret : nullptr;
  DoorProof p{kDoorMagic, g.needProof && key ? macOf(*key, g.nonce, sizeof(g.nonce)) : 0};
  uint8_t answer = 0;
  ok = ok && io1(fd, &p, sizeof(p), true, dl) && io1(fd, &answer, 1, false, dl);
  if (!ok || answer != 1) {
    *refused = ok;  // it answered: no
    if (!ok)
      INFO(kP2P, "P2P: the local door for port %d is not the engine at %s (its user is uid %u); "
                 "trying TCP", t.addr.port(), t.addr.str().c_str(), static_cast<unsigned>(cr.uid));
    close(fd);
    return -1;
  }
  *who = PeerId{true, cr.pid, cr.uid, "local pid " + std::to_string(cr.pid), ipOf(t.addr)};
  return fd;
}

// The client's side of rendezvous/socket's hello (ServerHandshake there):
// hello, the engine's nonce, MAC(key, nonce || hello), its answer.  Here
// rather than clientHandshake so that a refusal draws one line, ours.
bool helloWithKey(int fd, const Secret &key, Clock::time_point dl) {
  struct {
    uint8_t nonce[16];
    Hello hello;
  } proof{{}, Hello{kHelloMagic, kHelloKindP2p, 0, -1, 0}};
  uint64_t mac = 0;
  uint8_t ok = 0;
  if (!io1(fd, &proof.hello, sizeof(proof.hello), true, dl) ||
      !io1(fd, proof.nonce, sizeof(proof.nonce), false, dl))
    return false;
  mac = macOf(key, &proof, sizeof(proof));
  return io1(fd, &mac, sizeof(mac), true, dl) && io1(fd, &ok, 1, false, dl) && ok == 1;
}

std::shared_ptr<FlagcxP2pConn> dialTcp(FlagcxP2pEngine *e, const Target &t, const Secret &key,
                                       Clock::time_point dl) {
  int fd = tcpConnect(t.addr, dl);
  if (fd < 0) return nullptr;  // logged
  PeerId who{false, 0, 0, t.addr.str(), ipOf(t.addr)};
  std::shared_ptr<FlagcxP2pConn> c;
  if (!helloWithKey(fd, key, dl))
    WARN(kP2P, "P2P: %s refused this engine's hello (not a flagcx P2P engine, or the key "
               "differs)", who.name.c_str());
  else if (!(c = connectSide(e, fd, who, t.addr, &key, dl)))
    WARN(kP2P, "P2P: handshake with %s failed (peer gone, or silent past "
               "FLAGCX_P2P_HANDSHAKE_TIMEOUT)", who.name.c_str());
  close(fd);
  return c;
}

// Connect and keep: the engine's connection, returned to the caller.
FlagcxP2pConn *connectAndKeep(FlagcxP2pEngine *e, const std::string &target) {
  auto c = dial(e, target);
  if (!c) return nullptr;  // dial logged why
  adopt(e, c, false);
  {
    std::lock_guard<std::mutex> lk(e->connMu);
    c->userOwned = true;
  }
  INFO(kP2P, "P2P: connected to %s (pid %d, %s, %zu lanes each way, CMA out %d in %d, verbs %d)",
       withoutKey(target).c_str(), c->remotePid, c->isLocal ? "same host" : "other host",
       c->out.size(), c->cmaOut ? 1 : 0, c->cmaIn ? 1 : 0, c->verbs ? 1 : 0);
  return c.get();
}

}  // namespace

namespace flagcx::p2p {

std::string ipOf(const SockAddr &a) {
  std::string s = a.str();
  s.resize(s.rfind(':') == std::string::npos ? s.size() : s.rfind(':'));
  return s.size() >= 2 && s.front() == '[' ? s.substr(1, s.size() - 2) : s;
}

std::string keyHex(const Secret &key) {
  char buf[2 * sizeof(Secret) + 1];
  for (size_t i = 0; i < key.size(); i++) snprintf(buf + 2 * i, 3, "%02x", key[i]);
  return buf;
}

namespace {
// One non-blocking connect, waited for until dl: 0 or the error.
int connectOnce(const SockAddr &a, Clock::time_point dl, int *fd) {
  *fd = socket(a.u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (*fd < 0) return errno;
  if (connect(*fd, &a.u.sa, a.len) == 0) return 0;
  int err = errno;
  if (err != EINPROGRESS) return err;
  pollfd p{*fd, POLLOUT, 0};
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(dl - Clock::now()).count();
  if (poll(&p, 1, static_cast<int>(std::max<long long>(ms, 0))) <= 0) return ETIMEDOUT;
  socklen_t el = sizeof(err);
  return getsockopt(*fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 ? err : errno;
}
}  // namespace

int tcpConnect(const SockAddr &a, Clock::time_point dl) {
  for (int delayMs = 1;; delayMs = std::min(delayMs * 2, 100)) {
    int s = -1, err = connectOnce(a, dl, &s);
    if (err == 0) {
      setNoDelay(s);
      return s;
    }
    if (s >= 0) close(s);
    bool again = err == ECONNREFUSED || err == EAGAIN || err == ENETUNREACH || err == EHOSTUNREACH;
    if (!again || Clock::now() + std::chrono::milliseconds(delayMs) >= dl) {
      WARN(kP2P, "P2P: cannot connect to %s: %s (tried for up to FLAGCX_P2P_HANDSHAKE_TIMEOUT, %ld s)",
           a.str().c_str(), strerror(err), static_cast<long>(handshakeSeconds()));
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
  }
}

std::shared_ptr<FlagcxP2pConn> dial(FlagcxP2pEngine *e, const std::string &target) {
  Target t;
  if (!parseTarget(target, &t)) {
    WARN(kP2P, "P2P: \"%s\" is not [KEY@]host:port (KEY: 32 hex digits)", withoutKey(target).c_str());
    return nullptr;
  }
  auto dl = Clock::now() + std::chrono::seconds(handshakeSeconds());
  if (isLocalAddr(t.addr)) {
    PeerId who;
    bool refused = false;
    int fd = dialDoor(e, t, dl, &who, &refused);
    if (refused) {
      WARN(kP2P, "P2P: the engine at %s refused this one at its local door: FLAGCX_P2P_SECRET "
                 "differs", t.addr.str().c_str());
      return nullptr;
    }
    if (fd >= 0) {
      auto c = connectSide(e, fd, who, t.addr, nullptr, dl);
      close(fd);
      if (!c)
        WARN(kP2P, "P2P: handshake with %s (%s) failed (peer gone, or silent past "
                   "FLAGCX_P2P_HANDSHAKE_TIMEOUT)", t.addr.str().c_str(), who.name.c_str());
      return c;
    }
  }
  const Secret *key = t.hasKey ? &t.key : !e->keyMade ? &e->secret : nullptr;
  if (!key) {
    WARN(kP2P, "P2P: %s has no local door on this host and carries no key: connect with the "
               "session its engine's GetMetadata gives (KEY@host:port), or set FLAGCX_P2P_SECRET "
               "alike at both ends", t.addr.str().c_str());
    return nullptr;
  }
  return dialTcp(e, t, *key, dl);
}

}  // namespace flagcx::p2p

FlagcxP2pConn *flagcxP2pEngineConnect(FlagcxP2pEngine *engine, const char *ipAddr,
                                      int remoteGpuIdx, int remotePort, bool sameProcess) {
  if (!engine || !ipAddr || remotePort <= 0 || remotePort > 65535) {
    WARN(kP2P, "flagcxP2pEngineConnect: %s", !engine   ? "engine is NULL"
                                             : !ipAddr ? "ipAddr is NULL"
                                                       : "remotePort is out of range");
    return nullptr;
  }
  // ipAddr may carry the engine's key ("KEY@addr", as GetMetadata gives it).
  std::string ip = ipAddr, keyPart;
  size_t at = ip.find('@');
  if (at != std::string::npos) {
    keyPart = ip.substr(0, at + 1);
    ip = ip.substr(at + 1);
  }
  bool v6 = ip.find(':') != std::string::npos && ip[0] != '[';  // a bare IPv6 address
  std::string target = keyPart + (v6 ? "[" + ip + "]" : ip) + ":" + std::to_string(remotePort);
  FlagcxP2pConn *c = connectAndKeep(engine, target);
  if (!c) return nullptr;
  if (remoteGpuIdx >= 0 && c->remoteGpuIdx < 0) c->remoteGpuIdx = remoteGpuIdx;
  if (sameProcess && !c->sameProcess)
    INFO(kP2P, "flagcxP2pEngineConnect: sameProcess asked, but the kernel says %s is another "
               "process", c->peerHost.c_str());
  return c;
}

FlagcxP2pConn *flagcxP2pEngineGetConn(FlagcxP2pEngine *engine, const char *session) {
  if (!engine || !session) {
    WARN(kP2P, "flagcxP2pEngineGetConn: %s is NULL", engine ? "session" : "engine");
    return nullptr;
  }
  const std::string key(session);
  {
    std::lock_guard<std::mutex> lk(engine->connMu);
    auto it = engine->sessions.find(key);
    if (it != engine->sessions.end() && !it->second->dead.load()) return it->second;
  }
  FlagcxP2pConn *c = connectAndKeep(engine, key);
  if (!c) return nullptr;
  FlagcxP2pConn *stale = nullptr;
  {
    std::lock_guard<std::mutex> lk(engine->connMu);
    auto it = engine->sessions.find(key);
    if (it != engine->sessions.end()) stale = it->second;  // dead: replaced
    engine->sessions[key] = c;
  }
  if (stale) flagcxP2pEngineConnDestroy(stale);
  return c;
}
