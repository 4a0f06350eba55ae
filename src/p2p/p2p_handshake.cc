// The handshake after authentication, both sides (docs/P2P.md,
// "Connections"), within FLAGCX_P2P_HANDSHAKE_TIMEOUT:
//   1. the connecting side sends its Info (with a fresh challenge) and its
//      region table;
//   2. the accepting side answers with its Info -- over TCP carrying
//      MAC(key, challenge): it holds the key too --, its table and whether
//      it moves the connector's bytes by cross-memory attach (CMA);
//   3. the connecting side says whether it does;
//   4. verbs queue pairs, when both sides want them;
//   5. the connecting side opens 2 x lanes TCP connections to the lane
//      listener, each proving the token; "ready" ends the handshake.
// Who the peer is -- same host, same process, its pid for CMA -- comes from
// the kernel (PeerId: SO_PEERCRED at the local door), never from its Info:
// over TCP there is no CMA and no "same process".
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/base.h"
#include "p2p/p2p_internal.h"

using namespace flagcx;
using namespace flagcx::p2p;

namespace {

constexpr size_t kTableChunk = 1 << 15;  // regions read per step (1 MiB)

uint64_t serverProof(const Secret &key, const uint8_t challenge[16]) {
  struct {
    char label[16];
    uint8_t challenge[16];
  } m{"flagcx-p2p-srv", {}};
  memcpy(m.challenge, challenge, sizeof(m.challenge));
  return macOf(key, &m, sizeof(m));
}

bool sendTable(int fd, const std::vector<WireRegion> &t, Clock::time_point dl) {
  return t.empty() || io1(fd, const_cast<WireRegion *>(t.data()), t.size() * sizeof(WireRegion), true, dl);
}

// Read as it arrives: memory grows with the bytes the peer really sends.
bool recvTable(int fd, uint32_t n, std::vector<WireRegion> *t, Clock::time_point dl) {
  if (n > kMaxRegions) return false;
  for (size_t got = 0; got < n;) {
    size_t k = std::min<size_t>(kTableChunk, n - got);
    t->resize(got + k);
    if (!io1(fd, t->data() + got, k * sizeof(WireRegion), false, dl)) return false;
    got += k;
  }
  std::sort(t->begin(), t->end(), [](const WireRegion &a, const WireRegion &b) { return a.base < b.base; });
  return true;
}

// The peer's Info and table, checked for what this side relies on.
bool recvPeer(int fd, Info *peer, std::vector<WireRegion> *table, Clock::time_point dl) {
  return io1(fd, peer, sizeof(*peer), false, dl) && peer->version == kInfoVersion &&
         peer->lanes >= 1 && peer->lanes <= static_cast<uint32_t>(kFlagcxP2pMaxQpsPerEngine) &&
         recvTable(fd, peer->nregions, table, dl);
}

Info localInfo(FlagcxP2pEngine *e, uint32_t nregions) {
  Info in{};
  in.version = kInfoVersion;
  in.pid = static_cast<int32_t>(getpid());
  in.gpuIdx = e->gpuIdx;
  in.lanes = static_cast<uint32_t>(lanesPerConn());
  in.engineId = e->id;
  in.cookieAddr = cmaCookieAddr();
  in.cookie = cmaCookie();
  in.shmDisable = paramInt(Param::SHM_DISABLE) != 0;
  in.nregions = nregions;
  in.rdmaKind = rdmaKind(e->rdma.get());
  return in;
}

std::shared_ptr<FlagcxP2pConn> newConn(FlagcxP2pEngine *e, const Info &mine, const Info &peer,
                                       std::vector<WireRegion> &&table, const PeerId &who) {
  auto c = std::make_shared<FlagcxP2pConn>();
  c->engine = e;
  c->serial = e->serials.fetch_add(1) + 1;
  c->peerHost = who.name;
  c->peerIp = who.ip;
  c->remoteGpuIdx = peer.gpuIdx;
  c->remotePid = peer.pid;
  c->isLocal = who.local;
  c->sameProcess = who.local && who.pid == getpid();
  c->peerEngineId = c->sameProcess ? peer.engineId : 0;
  c->remoteRegions = std::move(table);
  uint32_t lanes = std::min(mine.lanes, peer.lanes);
  for (uint32_t i = 0; i < lanes; i++) {
    c->out.push_back(std::make_unique<Lane>());
    c->out.back()->initiator = true;
    c->in.push_back(std::make_unique<Lane>());
  }
  return c;
}

// Do both ends set up a queue pair?  The same answer on both sides: peers
// on other hosts with RDMA devices of one kind, or, on one host, when shared
// memory is off at either end (how the tests reach verbs on one machine).
bool verbsWanted(const Info &mine, const Info &peer, const FlagcxP2pConn *c) {
  if (mine.rdmaKind == 0 || mine.rdmaKind != peer.rdmaKind) return false;
  if (!c->isLocal) return true;
  return !c->sameProcess && (mine.shmDisable || peer.shmDisable);
}

// May this side move the peer's bytes by CMA?  Only a peer the kernel named
// (the door's SO_PEERCRED pid, visible in this PID namespace), when shared
// memory is on at both ends and the kernel lets us read it.
uint8_t cmaDecide(FlagcxP2pConn *c, const Info &mine, const Info &peer, const PeerId &who) {
  if (!who.local || who.pid <= 0 || mine.shmDisable || peer.shmDisable) return 0;
  if (!cmaProbe(c, who.pid, peer.cookieAddr, peer.cookie)) return 0;
  c->cmaPid = who.pid;
  return 1;
}

bool tokenEqual(const uint8_t *a, const uint8_t *b) {
  uint8_t diff = 0;
  for (int i = 0; i < 16; i++) diff |= a[i] ^ b[i];
  return diff == 0;
}

struct LaneIn {
  int fd;
  size_t got = 0;
  LaneHello h{};
};

// A lane connection whose hello is whole: into its slot, or closed (logged).
void placeLane(FlagcxP2pConn *c, LaneIn &w, const uint8_t *token, size_t *have) {
  const LaneHello &h = w.h;
  Lane *l = nullptr;
  if (tokenEqual(h.token, token) && h.idx < c->out.size() && h.dir < 2)
    l = h.dir == 0 ? c->in[h.idx].get() : c->out[h.idx].get();  // dir 0: the connector initiates
  if (!l || l->fd >= 0) {
    WARN(kP2P, "P2P: a lane connection for %s did not prove the token (or came twice); closed",
         c->peerHost.c_str());
    close(w.fd);
    return;
  }
  setNoDelay(w.fd);
  l->fd = w.fd;
  (*have)++;
}

// Every lane of c, from lfd, each proving the token; strangers and silent
// connections are dropped without holding up the others.
bool acceptLanes(FlagcxP2pEngine *e, int lfd, FlagcxP2pConn *c, const uint8_t *token,
                 Clock::time_point dl) {
  const size_t want = 2 * c->out.size();
  size_t have = 0;
  std::vector<LaneIn> waiting;
  while (have < want && Clock::now() < dl && !e->stopAccept.load()) {
    std::vector<pollfd> pf{{lfd, POLLIN, 0}};
    for (auto &w : waiting) pf.push_back({w.fd, POLLIN, 0});
    if (poll(pf.data(), pf.size(), 200) <= 0) continue;
    for (size_t k = pf.size(); k-- > 1;) {
      LaneIn &w = waiting[k - 1];
      if (!pf[k].revents) continue;
      ssize_t n = recv(w.fd, reinterpret_cast<char *>(&w.h) + w.got, sizeof(w.h) - w.got, MSG_DONTWAIT);
      if (n > 0) w.got += static_cast<size_t>(n);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) close(w.fd);
      else if (w.got == sizeof(w.h)) placeLane(c, w, token, &have);
      else continue;
      waiting.erase(waiting.begin() + static_cast<long>(k - 1));
    }
    for (int s; pf[0].revents && (s = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) {
      if (waiting.size() >= 2 * want) {  // more strangers than lanes: the oldest goes
        close(waiting.front().fd);
        waiting.erase(waiting.begin());
      }
      waiting.push_back(LaneIn{s});
    }
  }
  for (auto &w : waiting) close(w.fd);
  return have == want;
}

// The connecting side's lanes, to `addr` at the lane port.
bool connectLanes(FlagcxP2pConn *c, SockAddr addr, const Info &their, Clock::time_point dl) {
  addr.setPort(static_cast<int>(their.lanePort));
  for (uint32_t dir = 0; dir < 2; dir++)
    for (uint32_t i = 0; i < c->out.size(); i++) {
      int s = tcpConnect(addr, dl);
      if (s < 0) return false;
      (dir == 0 ? c->out[i] : c->in[i])->fd = s;
      LaneHello lh{};
      memcpy(lh.token, their.laneToken, sizeof(lh.token));
      lh.dir = dir;
      lh.idx = i;
      if (!io1(s, &lh, sizeof(lh), true, dl)) return false;
    }
  return true;
}

// Accepting side, after the peer's Info: the offer, the CMA answers, verbs.
std::shared_ptr<FlagcxP2pConn> offer(FlagcxP2pEngine *e, int fd, const SockAddr &laddr,
                                     Info &mine, const Info &peer, std::vector<WireRegion> &&peerTable,
                                     const PeerId &who, Clock::time_point dl) {
  std::vector<WireRegion> mineTable = regionTable(e);
  mine = localInfo(e, static_cast<uint32_t>(mineTable.size()));
  mine.lanePort = static_cast<uint32_t>(laddr.port());
  randomBytes(mine.laneToken, sizeof(mine.laneToken));
  if (who.local) memcpy(mine.laneAddr, &laddr.u, std::min(sizeof(mine.laneAddr), sizeof(laddr.u)));
  else mine.proof = serverProof(e->secret, peer.challenge);
  auto c = newConn(e, mine, peer, std::move(peerTable), who);
  uint8_t canIn = cmaDecide(c.get(), mine, peer, who), canOut = 0;
  if (!io1(fd, &mine, sizeof(mine), true, dl) || !sendTable(fd, mineTable, dl) ||
      !io1(fd, &canIn, 1, true, dl) || !io1(fd, &canOut, 1, false, dl))
    return nullptr;
  c->cmaIn = canIn;
  c->cmaOut = canOut == 1;
  if (verbsWanted(mine, peer, c.get()) && !verbsHandshake(c.get(), fd, dl)) return nullptr;
  return c;
}

}  // namespace

namespace flagcx::p2p {

Secret keyFromEnv(bool *set) {
  Secret k{};
  const std::string &s = paramStr(Param::P2P_SECRET);
  *set = !s.empty();
  if (s.empty()) return k;
  Secret salt{};
  salt[0] = 1;
  uint64_t a = macOf(Secret{}, s.data(), s.size());
  uint64_t b = macOf(salt, s.data(), s.size());
  memcpy(k.data(), &a, 8);
  memcpy(k.data() + 8, &b, 8);
  return k;
}

std::shared_ptr<FlagcxP2pConn> acceptSide(FlagcxP2pEngine *e, int fd, const PeerId &who,
                                          Clock::time_point dl) {
  Info peer{}, mine{};
  std::vector<WireRegion> peerTable;
  if (!recvPeer(fd, &peer, &peerTable, dl)) {
    WARN(kP2P, "P2P: handshake from %s failed (peer gone, silent, or not a flagcx P2P engine)",
         who.name.c_str());
    return nullptr;
  }
  // The lanes come to a listener of their own: where the control connection
  // came in (TCP), or on loopback (the door).
  SockAddr laddr;
  socklen_t len = sizeof(laddr.u);
  if (who.local) laddr = doorLoopback(e);
  else if (getsockname(fd, &laddr.u.sa, &len) == 0) laddr.len = len;
  laddr.setPort(0);
  int lfd = -1;
  if (laddr.len == 0 || listenOn(&laddr, &lfd) != flagcxSuccess) return nullptr;
  auto c = offer(e, fd, laddr, mine, peer, std::move(peerTable), who, dl);
  bool ok = c && acceptLanes(e, lfd, c.get(), mine.laneToken, dl);
  uint8_t ready = 1;
  ok = ok && io1(fd, &ready, 1, true, dl);
  close(lfd);
  if (!ok) {
    WARN(kP2P, "P2P: connection from %s failed during the handshake (peer gone, silent past "
               "FLAGCX_P2P_HANDSHAKE_TIMEOUT, or its lanes did not come)", who.name.c_str());
    return nullptr;  // its lanes' fds close with it
  }
  INFO(kP2P, "P2P: accepted a connection from %s (pid %d, %s, %zu lanes each way, CMA in %d out %d, "
       "verbs %d)", who.name.c_str(), c->remotePid, c->isLocal ? "same host" : "other host",
       c->out.size(), c->cmaIn ? 1 : 0, c->cmaOut ? 1 : 0, c->verbs ? 1 : 0);
  return c;
}

std::shared_ptr<FlagcxP2pConn> connectSide(FlagcxP2pEngine *e, int fd, const PeerId &who,
                                           const SockAddr &peer, const Secret *key,
                                           Clock::time_point dl) {
  std::vector<WireRegion> mineTable = regionTable(e), theirTable;
  Info mine = localInfo(e, static_cast<uint32_t>(mineTable.size())), their{};
  randomBytes(mine.challenge, sizeof(mine.challenge));
  uint8_t canOut = 0, canIn = 0, ready = 0;
  if (!io1(fd, &mine, sizeof(mine), true, dl) || !sendTable(fd, mineTable, dl) ||
      !recvPeer(fd, &their, &theirTable, dl) || !io1(fd, &canOut, 1, false, dl))
    return nullptr;
  if (!who.local && (!key || their.proof != serverProof(*key, mine.challenge))) {
    WARN(kP2P, "P2P: %s did not prove the key it was asked for: not the engine it claims to be",
         who.name.c_str());
    return nullptr;
  }
  auto c = newConn(e, mine, their, std::move(theirTable), who);
  canIn = cmaDecide(c.get(), mine, their, who);
  c->cmaIn = canIn;
  c->cmaOut = canOut == 1;
  SockAddr laneTo = peer;
  if (who.local) {  // the engine's loopback listener (the door has no TCP address)
    laneTo = SockAddr();
    memcpy(&laneTo.u, their.laneAddr, std::min(sizeof(their.laneAddr), sizeof(laneTo.u)));
    int fam = laneTo.u.sa.sa_family;
    laneTo.len = fam == AF_INET ? sizeof(sockaddr_in) : fam == AF_INET6 ? sizeof(sockaddr_in6) : 0;
  }
  bool ok = laneTo.len != 0 && io1(fd, &canIn, 1, true, dl) &&
            (!verbsWanted(mine, their, c.get()) || verbsHandshake(c.get(), fd, dl)) &&
            connectLanes(c.get(), laneTo, their, dl) && io1(fd, &ready, 1, false, dl) && ready == 1;
  return ok ? c : nullptr;  // a failed one's lane fds close with it
}

}  // namespace flagcx::p2p
