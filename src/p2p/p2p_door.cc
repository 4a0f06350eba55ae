// The accepting side's way in (docs/P2P.md, "Security"): the engine's
// listeners -- its address, the same port on loopback (127.0.0.1, ::1) and
// the local door, an abstract Unix socket named after the port -- and the
// connections on their way through the handshake.
//
// Before authentication nothing blocks and nothing gets a thread: at most
// kMaxPending connections wait, each moved as far as its socket allows (the
// TCP hello of rendezvous/socket, proving the engine's key; at the door, the
// kernel's SO_PEERCRED and, with FLAGCX_P2P_SECRET, a proof of it), each
// dropped with one line naming it once FLAGCX_P2P_HANDSHAKE_TIMEOUT has
// passed.  After authentication the rest (Info, tables, lanes) runs on a
// thread of its own, at most kMaxThreads at once and each within the same
// deadline; others wait in line, within their deadline too.  One silent
// client, before or after its hello, holds up nobody.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>

#include "base/base.h"
#include "p2p/p2p_internal.h"

using namespace flagcx;
using namespace flagcx::p2p;

namespace flagcx::p2p {

namespace {

constexpr size_t kMaxPending = 64;  // before authentication (the oldest goes first)
constexpr size_t kMaxThreads = 8;   // handshakes after authentication, at once
constexpr size_t kMaxQueued = 64;   // authenticated, waiting for a thread
constexpr size_t kMaxConns = 1024;  // live connections of an engine: more are refused
constexpr int kPortTries = 32;      // port 0: ports tried until loopback and the door are free too
constexpr auto kSlice = std::chrono::milliseconds(200);

struct Pending {
  int fd = -1;
  PeerId who;
  Clock::time_point since;
  std::unique_ptr<ServerHandshake> tcp;  // TCP: the hello; the door: a DoorProof
  DoorGreeting greeting{};
  DoorProof proof{};
  size_t got = 0;
};

struct Handshaking {
  std::thread th;
  std::atomic<bool> over{false};
  int fd = -1;  // under Door::mu: shut down to cut it short at the engine's end
};

}  // namespace

struct Door {
  std::vector<int> tcp;  // the main address first, then loopback
  int unixFd = -1;
  SockAddr loop;  // the lanes of door connections listen here
  std::vector<std::unique_ptr<Pending>> pending;
  std::deque<std::unique_ptr<Pending>> queued;
  std::mutex mu;
  std::list<std::unique_ptr<Handshaking>> threads;
};

std::string doorName(int port) { return "flagcx-p2p." + std::to_string(port); }

namespace {

Clock::time_point deadlineOf(const Pending &p) {
  return p.since + std::chrono::seconds(handshakeSeconds());
}

// A quiet listen (a port taken on loopback is tried again, not logged);
// -1 with *err set when it fails.
int listenTcp(SockAddr *a, int *err) {
  int s = socket(a->u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  if (s >= 0) setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (s >= 0 && bind(s, &a->u.sa, a->len) == 0 && listen(s, 1024) == 0) {
    socklen_t len = sizeof(a->u);
    getsockname(s, &a->u.sa, &len);
    return s;
  }
  *err = errno;
  if (s >= 0) close(s);
  return -1;
}

int listenDoor(int port) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::string name = doorName(port);
  memcpy(a.sun_path + 1, name.data(), name.size());  // abstract: sun_path[0] = 0
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s >= 0 && bind(s, reinterpret_cast<sockaddr *>(&a), len) == 0 && listen(s, 1024) == 0) return s;
  if (s >= 0) close(s);
  return -1;
}

SockAddr loopbackOf(int family, int port) {
  SockAddr a;
  SockAddr parsed;
  if (parseHostPort(family == AF_INET ? "127.0.0.1:0" : "[::1]:0", &parsed)) a = parsed;
  a.setPort(port);
  return a;
}

void closeAll(Door *d) {
  for (int fd : d->tcp) close(fd);
  d->tcp.clear();
  if (d->unixFd >= 0) close(d->unixFd);
  d->unixFd = -1;
}

// The main address at `port` (0: any), then loopback and the door at the
// same port.  true when all of them listen; the caller tries another port
// (port 0) when one of them was taken.
bool listenAll(FlagcxP2pEngine *e, Door *d, int port) {
  SockAddr main = e->addr;
  main.setPort(port);
  int err = 0;
  int fd = listenTcp(&main, &err);
  if (fd < 0) {
    errno = err;
    return false;
  }
  d->tcp.push_back(fd);
  e->addr = main;
  port = main.port();
  bool all = true, loop = false;
  for (int fam : {AF_INET, AF_INET6}) {
    SockAddr l = loopbackOf(fam, port);
    if (l.len == 0) continue;
    bool same = l.u.sa.sa_family == main.u.sa.sa_family && l.str() == main.str();
    int lfd = same ? -1 : listenTcp(&l, &err);
    if (lfd >= 0) d->tcp.push_back(lfd);
    if ((same || lfd >= 0) && !loop) {
      d->loop = l;
      loop = true;
    }
    if (!same && lfd < 0 && err == EADDRINUSE) all = false;  // elsewhere: no such loopback
  }
  d->unixFd = listenDoor(port);
  return all && d->unixFd >= 0;
}

void logDrop(const Pending &p, const char *why) {
  WARN(kP2P, "P2P: dropped a connection from %s: %s", p.who.name.c_str(), why);
}

// A new connection at the door: only this engine's user (or root), as the
// kernel says, is greeted.
std::unique_ptr<Pending> greetAtDoor(FlagcxP2pEngine *e, Door *d, int fd) {
  auto p = std::make_unique<Pending>();
  p->fd = fd;
  p->since = Clock::now();
  ucred cr{};
  socklen_t len = sizeof(cr);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) cr.uid = static_cast<uid_t>(-1);
  p->who = PeerId{true, cr.pid, cr.uid, "local pid " + std::to_string(cr.pid), ipOf(doorLoopback(e))};
  if (cr.uid != geteuid() && cr.uid != 0) {
    WARN(kP2P, "P2P: refused a connection from %s: its user (uid %u) is not this engine's (uid %u)",
         p->who.name.c_str(), static_cast<unsigned>(cr.uid), static_cast<unsigned>(geteuid()));
    close(fd);
    return nullptr;
  }
  DoorGreeting &g = p->greeting;
  g.magic = kDoorMagic;
  g.needProof = e->keyMade ? 0 : 1;
  g.port = static_cast<uint32_t>(e->addr.port());
  g.loopback = d->loop.len != 0;
  memcpy(g.mainAddr, &e->addr.u, std::min(sizeof(g.mainAddr), sizeof(e->addr.u)));
  randomBytes(g.nonce, sizeof(g.nonce));
  // A fresh socket's buffer holds the greeting whole.
  if (send(fd, &g, sizeof(g), MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(g))) {
    close(fd);
    return nullptr;
  }
  return p;
}

// flagcxInProgress, flagcxSuccess (in) or an error (logged, to be dropped).
flagcxResult_t stepDoor(FlagcxP2pEngine *e, Pending *p) {
  auto *buf = reinterpret_cast<char *>(&p->proof);
  while (p->got < sizeof(p->proof)) {
    ssize_t n = recv(p->fd, buf + p->got, sizeof(p->proof) - p->got, MSG_DONTWAIT);
    if (n > 0) {
      p->got += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return flagcxInProgress;
    logDrop(*p, "it closed the connection before it answered the greeting");
    return flagcxRemoteError;
  }
  bool ok = p->proof.magic == kDoorMagic &&
            (!p->greeting.needProof ||
             p->proof.mac == macOf(e->secret, p->greeting.nonce, sizeof(p->greeting.nonce)));
  uint8_t answer = ok ? 1 : 0;
  (void)send(p->fd, &answer, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (!ok)
    WARN(kP2P, "P2P: rejected a connection from %s: it did not prove FLAGCX_P2P_SECRET",
         p->who.name.c_str());
  return ok ? flagcxSuccess : flagcxRemoteError;
}

void acceptOn(FlagcxP2pEngine *e, Door *d, int lfd, bool door) {
  for (;;) {
    int s = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (s < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        WARN(kP2P, "P2P: cannot accept a connection: %s", strerror(errno));
        std::this_thread::sleep_for(kSlice);  // not a busy loop while fds are short
      }
      return;
    }
    std::unique_ptr<Pending> p;
    if (door) {
      p = greetAtDoor(e, d, s);
    } else {
      setNoDelay(s);  // the handshake's small messages go at once
      p = std::make_unique<Pending>();
      p->fd = s;
      p->since = Clock::now();
      SockAddr a;
      socklen_t len = sizeof(a.u);
      if (getpeername(s, &a.u.sa, &len) == 0) a.len = len;
      p->who = PeerId{false, 0, 0, a.len ? a.str() : "?", a.len ? ipOf(a) : "?"};
      p->tcp = std::make_unique<ServerHandshake>(s, e->secret, kHelloKindP2p, "FLAGCX_P2P_SECRET");
    }
    if (!p) continue;
    if (d->pending.size() >= kMaxPending) {
      logDrop(*d->pending.front(), "too many connections are on their way in");
      close(d->pending.front()->fd);
      d->pending.erase(d->pending.begin());
    }
    d->pending.push_back(std::move(p));
  }
}

void runHandshake(FlagcxP2pEngine *e, Door *d, Handshaking *h, std::unique_ptr<Pending> p) {
  auto c = acceptSide(e, p->fd, p->who, deadlineOf(*p));
  {
    std::lock_guard<std::mutex> lk(d->mu);
    h->fd = -1;
  }
  close(p->fd);
  if (c) adopt(e, c, true);
  h->over.store(true);
  e->acceptWake.signal();  // the accept loop returns the connection
  pokeJanitor(e);          // joins this thread
}

size_t liveConns(FlagcxP2pEngine *e) {
  std::lock_guard<std::mutex> lk(e->connMu);
  return e->conns.size();
}

// Authenticated connections get their thread, at most kMaxThreads at once.
void startQueued(FlagcxP2pEngine *e, Door *d) {
  std::lock_guard<std::mutex> lk(d->mu);
  size_t running = 0;
  for (auto &h : d->threads) running += !h->over.load();
  while (!d->queued.empty() && running < kMaxThreads) {
    auto h = std::make_unique<Handshaking>();
    std::unique_ptr<Pending> p = std::move(d->queued.front());
    d->queued.pop_front();
    if (liveConns(e) + running >= kMaxConns) {
      logDrop(*p, "the engine already holds 1024 connections");
      close(p->fd);
      continue;
    }
    h->fd = p->fd;
    Handshaking *hp = h.get();
    h->th = std::thread(runHandshake, e, d, hp, std::move(p));
    d->threads.push_back(std::move(h));
    running++;
  }
}

void expire(Door *d) {
  auto now = Clock::now();
  for (size_t i = 0; i < d->pending.size();) {
    Pending &p = *d->pending[i];
    if (now < deadlineOf(p)) {
      i++;
      continue;
    }
    if (p.tcp) p.tcp->giveUp();  // names the peer and how far it got
    else logDrop(p, "it did not answer the greeting within FLAGCX_P2P_HANDSHAKE_TIMEOUT");
    close(p.fd);
    d->pending.erase(d->pending.begin() + static_cast<long>(i));
  }
  while (!d->queued.empty() && now >= deadlineOf(*d->queued.front())) {
    logDrop(*d->queued.front(), "no handshake thread was free within FLAGCX_P2P_HANDSHAKE_TIMEOUT");
    close(d->queued.front()->fd);
    d->queued.pop_front();
  }
}

// One poll over the listeners, the wake fd and the pending handshakes.
void pollOnce(FlagcxP2pEngine *e, Door *d, Clock::time_point until) {
  std::vector<pollfd> pf;
  for (int fd : d->tcp) pf.push_back({fd, POLLIN, 0});
  pf.push_back({d->unixFd, POLLIN, 0});
  pf.push_back({e->acceptWake.fd(), POLLIN, 0});
  const size_t first = pf.size();
  for (auto &p : d->pending) pf.push_back({p->fd, p->tcp ? p->tcp->events() : short(POLLIN), 0});
  auto now = Clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::min(until, now + kSlice) - now);
  if (poll(pf.data(), pf.size(), static_cast<int>(std::max<long long>(ms.count(), 0))) <= 0) return;
  if (pf[first - 1].revents) e->acceptWake.drain();
  for (size_t k = pf.size(); k-- > first;) {  // from the back: erasing shifts the later ones
    if (!pf[k].revents) continue;
    size_t i = k - first;
    Pending *p = d->pending[i].get();
    flagcxResult_t rc = p->tcp ? p->tcp->step() : stepDoor(e, p);
    if (rc == flagcxInProgress) continue;
    if (rc == flagcxSuccess && d->queued.size() < kMaxQueued) {
      d->queued.push_back(std::move(d->pending[i]));
    } else {
      if (rc == flagcxSuccess) logDrop(*p, "too many authenticated connections wait for a thread");
      close(p->fd);  // rejected: logged by the handshake
    }
    d->pending.erase(d->pending.begin() + static_cast<long>(i));
  }
  for (size_t i = 0; i + 2 < first; i++)
    if (pf[i].revents) acceptOn(e, d, pf[i].fd, false);
  if (pf[first - 2].revents) acceptOn(e, d, d->unixFd, true);
}

}  // namespace

bool doorOpen(FlagcxP2pEngine *e) {
  auto *d = new Door;
  const int fixed = static_cast<int>(paramInt(Param::P2P_PORT));
  bool all = false;
  for (int t = 0; t < kPortTries && !all; t++) {
    closeAll(d);
    d->loop = SockAddr();
    all = listenAll(e, d, fixed);
    if (d->tcp.empty()) break;  // the main address itself failed
    if (fixed) break;
  }
  if (d->tcp.empty()) {
    WARN(kP2P, "P2P: cannot listen on %s: %s", e->addr.str().c_str(), strerror(errno));
    delete d;
    return false;
  }
  if (!all)
    WARN(kP2P, "P2P: port %d is taken on loopback or by another engine's local door: same-host "
               "peers reach this engine through %s only (with its key)", e->addr.port(),
         e->addr.str().c_str());
  e->door = d;
  return true;
}

std::shared_ptr<FlagcxP2pConn> acceptNext(FlagcxP2pEngine *e, Clock::time_point until,
                                          bool forUser) {
  std::lock_guard<std::mutex> lk(e->acceptMu);
  Door *d = e->door;
  for (;;) {
    if (e->stopAccept.load() || !d) return nullptr;
    {
      std::lock_guard<std::mutex> ck(e->connMu);
      if (!e->ready.empty()) {
        auto c = std::move(e->ready.front());
        e->ready.pop_front();
        c->ready = false;
        c->userOwned = forUser;  // under connMu: the janitor never frees one handed out
        if (!forUser) {
          std::lock_guard<std::mutex> rk(c->recvMu);
          c->orphan.store(true);
          for (auto &m : c->recvQ) c->recvBytes -= m.bytes.size();
          c->recvQ.clear();
        }
        return c;
      }
    }
    if (Clock::now() >= until) return nullptr;
    startQueued(e, d);
    expire(d);
    pollOnce(e, d, until);
  }
}

void doorReap(FlagcxP2pEngine *e) {
  Door *d = e->door;
  if (!d) return;
  std::list<std::unique_ptr<Handshaking>> over;
  {
    std::lock_guard<std::mutex> lk(d->mu);
    for (auto it = d->threads.begin(); it != d->threads.end();) {
      if ((*it)->over.load()) {
        over.push_back(std::move(*it));
        it = d->threads.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto &h : over) h->th.join();
}

void doorClose(FlagcxP2pEngine *e) {
  Door *d = e->door;
  if (!d) return;
  {
    std::lock_guard<std::mutex> lk(d->mu);
    for (auto &h : d->threads)
      if (h->fd >= 0) shutdown(h->fd, SHUT_RDWR);  // the handshake fails at once
  }
  for (auto &h : d->threads) h->th.join();
  d->threads.clear();
  for (auto &p : d->pending) close(p->fd);
  for (auto &p : d->queued) close(p->fd);
  closeAll(d);
  e->door = nullptr;
  delete d;
}

SockAddr doorLoopback(const FlagcxP2pEngine *e) {
  return e->door && e->door->loop.len ? e->door->loop : e->addr;
}

}  // namespace flagcx::p2p
