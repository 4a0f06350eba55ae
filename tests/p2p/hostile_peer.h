// A hostile P2P peer for the security tests: it speaks the engine's real
// wire format (src/p2p/p2p_wire.h) over real sockets -- the TCP hello, the
// local door, Info and tables, lane hellos, requests -- and lets a test stop
// after any step, lie in any field or ask for any address.
#pragma once
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "p2p/p2p_wire.h"
#include "rendezvous/socket.h"

namespace hostile {

using namespace flagcx;
using namespace flagcx::p2p;

inline Clock::time_point soon(int s = 5) { return Clock::now() + std::chrono::seconds(s); }

inline bool sendRaw(int fd, const void *p, size_t n) {
  return sendAll(fd, p, n, soon()) == flagcxSuccess;
}
inline bool recvRaw(int fd, void *p, size_t n, int s = 5) {
  return recvAll(fd, p, n, soon(s)) == flagcxSuccess;
}

// Did the engine close fd within s seconds (whatever it sent before)?
inline bool closedByPeer(int fd, int s = 5) {
  for (auto until = soon(s); Clock::now() < until;) {
    pollfd p{fd, POLLIN, 0};
    char b[256];
    if (poll(&p, 1, 100) != 1) continue;
    ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
  return false;
}

inline int tcpTo(const SockAddr &a) {
  int fd = -1;
  return connectTo(a, soon(), &fd) == flagcxSuccess ? fd : -1;
}
inline SockAddr loopback(int port) {
  SockAddr a;
  parseHostPort("127.0.0.1:" + std::to_string(port), &a);
  return a;
}

inline int doorTo(int port) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::string name = "flagcx-p2p." + std::to_string(port);
  memcpy(a.sun_path + 1, name.data(), name.size());
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (s >= 0 && connect(s, reinterpret_cast<sockaddr *>(&a), len) != 0) {
    close(s);
    s = -1;
  }
  return s;
}

inline bool tcpHello(int fd, const Secret &key) {
  Hello h{kHelloMagic, kHelloKindP2p, 0, -1, 0};
  return clientHandshake(fd, key, h, soon()) == flagcxSuccess;
}

// The door: greeting in, proof (or 0) out; true when let in.
inline bool doorIn(int fd, const Secret *key) {
  DoorGreeting g{};
  if (!recvRaw(fd, &g, sizeof(g)) || g.magic != kDoorMagic) return false;
  DoorProof p{kDoorMagic, key ? macOf(*key, g.nonce, sizeof(g.nonce)) : 0};
  uint8_t answer = 0;
  return sendRaw(fd, &p, sizeof(p)) && recvRaw(fd, &answer, 1) && answer == 1;
}

struct Session {
  int ctl = -1;
  bool door = false;
  SockAddr to;  // TCP: where the control connection went
  Info mine{}, theirs{};
  std::vector<WireRegion> table;
  uint8_t canOut = 0;
  std::vector<int> out, in;  // lanes this side initiates on / the engine does
  Session() {
    mine.version = kInfoVersion;
    mine.pid = static_cast<int32_t>(getpid());
    mine.gpuIdx = -1;
    mine.lanes = 1;
  }
  ~Session() { closeAll(); }
  void closeAll() {
    for (auto *v : {&out, &in})
      for (int fd : *v) close(fd);
    out.clear();
    in.clear();
    if (ctl >= 0) close(ctl);
    ctl = -1;
  }
  bool sendInfo() { return sendRaw(ctl, &mine, sizeof(mine)); }  // and an empty table
  bool recvInfo() {
    if (!recvRaw(ctl, &theirs, sizeof(theirs)) || theirs.version != kInfoVersion) return false;
    table.resize(theirs.nregions);
    return (table.empty() || recvRaw(ctl, table.data(), table.size() * sizeof(WireRegion))) &&
           recvRaw(ctl, &canOut, 1);
  }
  bool sendCanIn(uint8_t v = 0) { return sendRaw(ctl, &v, 1); }
  SockAddr laneAddr() const {
    SockAddr a = to;
    if (door) {
      memcpy(&a.u, theirs.laneAddr, sizeof(a.u) < sizeof(theirs.laneAddr) ? sizeof(a.u) : sizeof(theirs.laneAddr));
      a.len = a.u.sa.sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    }
    a.setPort(static_cast<int>(theirs.lanePort));
    return a;
  }
  bool laneOne(uint32_t dir, uint32_t idx) {
    int s = tcpTo(laneAddr());
    if (s < 0) return false;
    (dir == 0 ? out : in).push_back(s);
    LaneHello lh{};
    memcpy(lh.token, theirs.laneToken, sizeof(lh.token));
    lh.dir = dir;
    lh.idx = idx;
    return sendRaw(s, &lh, sizeof(lh));
  }
  bool lanesAndReady() {
    uint32_t n = std::min(mine.lanes, theirs.lanes);
    for (uint32_t dir = 0; dir < 2; dir++)
      for (uint32_t i = 0; i < n; i++)
        if (!laneOne(dir, i)) return false;
    uint8_t ready = 0;
    return recvRaw(ctl, &ready, 1) && ready == 1;
  }
  // Through the TCP hello (key) or the door, up to "ready".
  bool connect(int port, const Secret *key, bool viaDoor) {
    door = viaDoor;
    to = loopback(port);
    ctl = viaDoor ? doorTo(port) : tcpTo(to);
    if (ctl < 0) return false;
    bool in = viaDoor ? doorIn(ctl, nullptr) : key && tcpHello(ctl, *key);
    return in && sendInfo() && recvInfo() && sendCanIn() && lanesAndReady();
  }
};

struct Answer {
  bool lost = true;  // the engine closed the lane (or never answered)
  int32_t status = -1;
  std::vector<char> payload;
};

// One request on a lane this side initiates on; `bytes` is the header's
// (normally the segments' sum), `payload` follows the segments.
inline Answer request(int fd, Op op, uint8_t cma, const std::vector<WireSeg> &segs, uint64_t bytes,
                      const void *payload = nullptr, size_t n = 0) {
  ReqHdr h{kReqMagic, static_cast<uint8_t>(op), cma, 0, static_cast<uint32_t>(segs.size()), 0, bytes};
  Answer a;
  if (!sendRaw(fd, &h, sizeof(h)) ||
      (!segs.empty() && !sendRaw(fd, segs.data(), segs.size() * sizeof(WireSeg))) ||
      (n && !sendRaw(fd, payload, n)))
    return a;
  RespHdr r{};
  if (!recvRaw(fd, &r, sizeof(r)) || r.magic != kRespMagic) return a;
  a.payload.resize(r.bytes < (64u << 20) ? r.bytes : 0);
  if (!a.payload.empty() && !recvRaw(fd, a.payload.data(), a.payload.size())) return a;
  a.lost = false;
  a.status = r.status;
  return a;
}

inline uint64_t sum(const std::vector<WireSeg> &s) {
  uint64_t t = 0;
  for (auto &x : s) t += x.len;
  return t;
}

}  // namespace hostile
