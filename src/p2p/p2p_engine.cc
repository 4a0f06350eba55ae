// The P2P engine of flagcx_p2p.h: engines, the listener and its RPC server,
// connections and their handshake (docs/P2P.md, "Connections").
//
// Handshake, on a connection to the engine's listening port:
//   1. the authenticated hello of rendezvous/socket (kind 4; the key comes
//      from FLAGCX_P2P_SECRET, so engines with different secrets refuse
//      each other);
//   2. each side sends its Info and its region table; the accepting side
//      adds a port and a token for the lanes;
//   3. each side tries a CMA read of the other's cookie and says whether it
//      can move bytes that way;
//   4. the connecting side opens 2 x lanes TCP connections to that port,
//      each proving the token; then the control connection closes.
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "base/log.h"
#include "base/params.h"
#include "base/proc_ns.h"
#include "p2p/p2p_internal.h"

using namespace flagcx;
using namespace flagcx::p2p;

namespace {

constexpr uint32_t kHelloKindP2p = 4;
constexpr uint32_t kInfoVersion = 3;  // 3: pidNs

struct Info {
  uint32_t version;
  int32_t pid;
  int32_t gpuIdx;
  uint32_t lanes;
  uint64_t hostId;
  uint64_t cookieAddr;
  uint64_t cookie;
  uint32_t sameProcess;  // the connector asked for it
  uint32_t shmDisable;
  uint32_t nregions;
  uint32_t lanePort;  // accepting side only
  uint8_t laneToken[16];
  uint32_t rdmaKind;  // rdmaKind(engine's device)
  uint32_t pidNs;     // pidNamespaceId(): `pid` means something only in the same one
};

struct LaneHello {
  uint8_t token[16];
  uint32_t dir;  // 0: the connecting side initiates on it
  uint32_t idx;
};

uint64_t hostId() {
  static const uint64_t id = [] {
    const std::string &over = paramStr(Param::HOSTID);
    std::string s;
    if (!over.empty()) {
      s = "hostid=" + over;
    } else {
      char host[256] = "";
      gethostname(host, sizeof(host) - 1);
      std::string boot;
      std::ifstream f("/proc/sys/kernel/random/boot_id");
      std::getline(f, boot);
      s = std::string("host=") + host + ";boot=" + boot;
    }
    return macOf(Secret{}, s.data(), s.size());
  }();
  return id;
}

Secret secretFromEnv() {
  Secret k{};
  const std::string &s = paramStr(Param::P2P_SECRET);
  if (s.empty()) return k;
  Secret salt{};
  salt[0] = 1;
  uint64_t a = macOf(Secret{}, s.data(), s.size());
  uint64_t b = macOf(salt, s.data(), s.size());
  memcpy(k.data(), &a, 8);
  memcpy(k.data() + 8, &b, 8);
  return k;
}

std::string numericHost(const SockAddr &a) {
  std::string s = a.str();
  size_t colon = s.rfind(':');
  if (colon != std::string::npos) s.resize(colon);
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  return s;
}

SockAddr peerOf(int fd) {
  SockAddr a;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getpeername(fd, reinterpret_cast<sockaddr *>(&ss), &len);
  memcpy(&a.u, &ss, std::min<size_t>(len, sizeof(a.u)));
  a.len = len;
  return a;
}

bool sendTable(int fd, const std::vector<WireRegion> &t, Clock::time_point dl) {
  return t.empty() ||
         sendAll(fd, t.data(), t.size() * sizeof(WireRegion), dl) == flagcxSuccess;
}

bool recvTable(int fd, uint32_t n, std::vector<WireRegion> *t, Clock::time_point dl) {
  if (n > kMaxRegions) return false;
  t->resize(n);
  return n == 0 || recvAll(fd, t->data(), n * sizeof(WireRegion), dl) == flagcxSuccess;
}

Info localInfo(FlagcxP2pEngine *e, uint32_t nregions) {
  Info in{};
  in.version = kInfoVersion;
  in.pid = static_cast<int32_t>(getpid());
  in.pidNs = pidNamespaceId();
  in.gpuIdx = e->gpuIdx;
  in.lanes = static_cast<uint32_t>(lanesPerConn());
  in.hostId = hostId();
  in.cookieAddr = cmaCookieAddr();
  in.cookie = cmaCookie();
  in.shmDisable = paramInt(Param::SHM_DISABLE) != 0;
  in.nregions = nregions;
  in.rdmaKind = rdmaKind(e->rdma.get());
  return in;
}

// One process: one host, one PID namespace, one pid.
bool samePid(const Info &a, const Info &b) {
  return a.hostId == b.hostId && a.pidNs == b.pidNs && a.pid == b.pid;
}

// Do both ends set up a queue pair?  The same answer on both sides: peers
// on other hosts with RDMA devices of one kind, or, on one host, when shared
// memory is off at either end (how the tests reach verbs on one machine).
bool verbsWanted(const Info &mine, const Info &peer) {
  if (mine.rdmaKind == 0 || mine.rdmaKind != peer.rdmaKind) return false;
  if (peer.hostId != mine.hostId) return true;
  return !samePid(mine, peer) && (mine.shmDisable || peer.shmDisable);
}

// May this process move the peer's bytes by CMA?  Only where its pid names
// it here: one host and one PID namespace (base/proc_ns.h).
bool cmaUsable(const Info &mine, const Info &peer) {
  if (peer.hostId != mine.hostId || peer.pidNs != mine.pidNs || mine.shmDisable || peer.shmDisable)
    return false;
  return cmaProbe(peer.pid, peer.cookieAddr, peer.cookie);
}

FlagcxP2pConn *newConn(FlagcxP2pEngine *e, const Info &mine, const Info &peer,
                       const std::vector<WireRegion> &table, const std::string &host) {
  auto *c = new FlagcxP2pConn;
  c->engine = e;
  c->peerHost = host;
  c->remoteGpuIdx = peer.gpuIdx;
  c->remotePid = peer.pid;
  c->isLocal = peer.hostId == mine.hostId;
  c->sameProcess = samePid(mine, peer);
  c->remoteRegions = table;
  uint32_t lanes = std::min(mine.lanes, peer.lanes);
  for (uint32_t i = 0; i < lanes; i++) {
    c->out.push_back(std::make_unique<Lane>());
    c->out.back()->initiator = true;
    c->in.push_back(std::make_unique<Lane>());
  }
  return c;
}

void closeLaneFds(FlagcxP2pConn *c) {
  for (auto *v : {&c->out, &c->in})
    for (auto &l : *v)
      if (l->fd >= 0) {
        close(l->fd);
        l->fd = -1;
      }
}

void adopt(FlagcxP2pEngine *e, FlagcxP2pConn *c) {
  verbsStart(c);
  for (auto &l : c->out) startLane(c, l.get());
  for (auto &l : c->in) startLane(c, l.get());
  std::lock_guard<std::mutex> lk(e->connMu);
  e->conns.push_back(c);
}

// The accepting side of one connection, on an authenticated control fd.
FlagcxP2pConn *acceptOn(FlagcxP2pEngine *e, int fd, Clock::time_point dl) {
  Info peer{};
  std::vector<WireRegion> peerTable;
  std::string host = numericHost(peerOf(fd));
  if (recvAll(fd, &peer, sizeof(peer), dl) != flagcxSuccess || peer.version != kInfoVersion ||
      !recvTable(fd, peer.nregions, &peerTable, dl)) {
    WARN(kP2P, "P2P accept: handshake from %s failed (peer gone or not a flagcx P2P engine)",
         host.c_str());
    return nullptr;
  }
  // Lanes come to a listener of their own, on the same interface.
  SockAddr laddr = e->addr;
  laddr.setPort(0);
  int lfd = -1;
  if (listenOn(&laddr, &lfd) != flagcxSuccess) return nullptr;
  std::vector<WireRegion> mineTable = regionTable(e);
  Info mine = localInfo(e, static_cast<uint32_t>(mineTable.size()));
  mine.lanePort = static_cast<uint32_t>(laddr.port());
  randomBytes(mine.laneToken, sizeof(mine.laneToken));
  uint8_t canIn = cmaUsable(mine, peer), canOut = 0;
  FlagcxP2pConn *c = nullptr;
  bool ok = sendAll(fd, &mine, sizeof(mine), dl) == flagcxSuccess && sendTable(fd, mineTable, dl) &&
            sendAll(fd, &canIn, 1, dl) == flagcxSuccess &&
            recvAll(fd, &canOut, 1, dl) == flagcxSuccess;
  if (ok) {
    c = newConn(e, mine, peer, peerTable, host);
    c->cmaIn = canIn;
    c->cmaOut = canOut;
    ok = !verbsWanted(mine, peer) || verbsHandshake(c, fd, dl);
  }
  if (ok) {
    size_t want = c->out.size() + c->in.size(), got = 0;
    while (ok && got < want) {
      int s = -1;
      if (acceptOne(lfd, dl, &s) != flagcxSuccess || s < 0) {
        ok = false;
        break;
      }
      LaneHello lh{};
      if (recvAll(s, &lh, sizeof(lh), dl) != flagcxSuccess ||
          memcmp(lh.token, mine.laneToken, sizeof(lh.token)) != 0 || lh.idx >= c->out.size()) {
        WARN(kP2P, "P2P accept: a lane connection from %s did not prove the token; closed",
             numericHost(peerOf(s)).c_str());
        close(s);
        continue;
      }
      // The connector initiates on dir 0: those are our incoming lanes.
      Lane *l = lh.dir == 0 ? c->in[lh.idx].get() : c->out[lh.idx].get();
      if (l->fd >= 0) {
        close(s);
        continue;
      }
      l->fd = s;
      got++;
    }
    uint8_t ready = 1;
    ok = ok && sendAll(fd, &ready, 1, dl) == flagcxSuccess;
  }
  close(lfd);
  if (!ok) {
    WARN(kP2P, "P2P accept: connection from %s failed during the handshake", host.c_str());
    if (c) {
      closeLaneFds(c);
      delete c;
    }
    return nullptr;
  }
  adopt(e, c);
  INFO(kP2P, "P2P: accepted a connection from %s (pid %d, %s, %zu lanes each way, CMA in %d out %d, "
       "verbs %d)", host.c_str(), c->remotePid, c->isLocal ? "same host" : "other host",
       c->out.size(), c->cmaIn ? 1 : 0, c->cmaOut ? 1 : 0, c->verbs ? 1 : 0);
  return c;
}

// One accept on the engine's listener, until a connection, StopAccept or
// the deadline.
FlagcxP2pConn *acceptNext(FlagcxP2pEngine *e, Clock::time_point until) {
  std::lock_guard<std::mutex> lk(e->acceptMu);
  for (;;) {
    if (e->stopAccept.load() || !e->handshakes) return nullptr;
    Hello h{};
    int fd = -1;
    // Returns early (fd -1) when StopAccept signals acceptWake.
    if (e->handshakes->next(until, &fd, &h, e->acceptWake.fd()) != flagcxSuccess) return nullptr;
    if (fd < 0) {
      if (Clock::now() >= until) return nullptr;
      continue;
    }
    FlagcxP2pConn *c = acceptOn(e, fd, deadlineFromTimeout());
    close(fd);
    if (c) return c;
  }
}

}  // namespace

namespace flagcx::p2p {

int lanesPerConn() { return flagcxP2pGlobalConfig().qpsPerConn; }

void connMarkDead(FlagcxP2pConn *c, const std::string &why, bool quiet) {
  std::lock_guard<std::mutex> lk(c->xferMu);
  if (c->dead.exchange(true)) return;
  c->deadWhy = why;
  if (!c->closing.load() && !quiet)
    WARN(kP2P, "P2P: connection to %s (pid %d) failed: %s", c->peerHost.c_str(), c->remotePid,
         why.c_str());
  std::lock_guard<std::mutex> rk(c->recvMu);
  c->recvCv.notify_all();
}

}  // namespace flagcx::p2p

FlagcxP2pEngine *flagcxP2pEngineCreate() {
  (void)flagcxP2pGlobalConfig();
  auto *e = new FlagcxP2pEngine;
  e->secret = secretFromEnv();
  e->gpuIdx = deviceAdapter() ? 0 : -1;
  if (findLocalAddress(&e->addr, &e->ifname) != flagcxSuccess) {
    delete e;
    return nullptr;
  }
  e->addr.setPort(static_cast<int>(paramInt(Param::P2P_PORT)));
  if (listenOn(&e->addr, &e->listenFd) != flagcxSuccess) {
    delete e;
    return nullptr;
  }
  e->handshakes = std::make_unique<HandshakeQueue>(e->listenFd, e->secret, kHelloKindP2p,
                                                   "FLAGCX_P2P_SECRET");
  INFO(kP2P, "P2P: engine listening on %s (interface %s)", e->addr.str().c_str(),
       e->ifname.c_str());
  openRdma(e);
  return e;
}

void flagcxP2pEngineStopAccept(FlagcxP2pEngine *engine) {
  if (!engine) return;
  engine->stopAccept.store(true);
  engine->acceptWake.signal();
  if (engine->rpcThread.joinable()) engine->rpcThread.join();
}

void flagcxP2pEngineDestroy(FlagcxP2pEngine *engine) {
  if (!engine) return;
  flagcxP2pEngineStopAccept(engine);
  {
    std::lock_guard<std::mutex> lk(engine->acceptMu);
    engine->handshakes.reset();
  }
  std::vector<FlagcxP2pConn *> conns;
  {
    std::lock_guard<std::mutex> lk(engine->connMu);
    conns.swap(engine->conns);
    engine->sessions.clear();
  }
  for (FlagcxP2pConn *c : conns) {
    c->closing.store(true);
    verbsStop(c);
    sayBye(c);
    for (auto &l : c->out) stopLane(l.get());
    for (auto &l : c->in) stopLane(l.get());
    delete c;
  }
  if (engine->listenFd >= 0) close(engine->listenFd);
  delete engine;
}

FlagcxP2pConn *flagcxP2pEngineConnect(FlagcxP2pEngine *engine, const char *ipAddr,
                                      int remoteGpuIdx, int remotePort, bool sameProcess) {
  if (!engine || !ipAddr || remotePort <= 0 || remotePort > 65535) {
    WARN(kP2P, "flagcxP2pEngineConnect: %s", !engine   ? "engine is NULL"
                                             : !ipAddr ? "ipAddr is NULL"
                                                       : "remotePort is out of range");
    return nullptr;
  }
  bool v6 = strchr(ipAddr, ':') && ipAddr[0] != '[';  // a bare IPv6 address
  char buf[320];
  snprintf(buf, sizeof(buf), v6 ? "[%s]:%d" : "%s:%d", ipAddr, remotePort);
  std::string hp = buf;
  SockAddr peer;
  if (!parseHostPort(hp, &peer)) {
    WARN(kP2P, "flagcxP2pEngineConnect: cannot parse address %s", hp.c_str());
    return nullptr;
  }
  auto dl = deadlineFromTimeout();
  int fd = -1;
  if (connectTo(peer, dl, &fd) != flagcxSuccess) return nullptr;
  Hello h{kHelloMagic, kHelloKindP2p, 0, -1, 0};
  std::vector<WireRegion> mineTable = regionTable(engine);
  Info mine = localInfo(engine, static_cast<uint32_t>(mineTable.size()));
  mine.sameProcess = sameProcess;
  Info their{};
  std::vector<WireRegion> theirTable;
  uint8_t canOut = 0, canIn = 0, ready = 0;
  FlagcxP2pConn *c = nullptr;
  bool ok = clientHandshake(fd, engine->secret, h, dl) == flagcxSuccess &&
            sendAll(fd, &mine, sizeof(mine), dl) == flagcxSuccess &&
            sendTable(fd, mineTable, dl) &&
            recvAll(fd, &their, sizeof(their), dl) == flagcxSuccess &&
            their.version == kInfoVersion && recvTable(fd, their.nregions, &theirTable, dl) &&
            recvAll(fd, &canOut, 1, dl) == flagcxSuccess;
  if (ok) {
    canIn = cmaUsable(mine, their);
    ok = sendAll(fd, &canIn, 1, dl) == flagcxSuccess;
  }
  if (ok) {
    c = newConn(engine, mine, their, theirTable, numericHost(peer));
    c->cmaIn = canIn;
    c->cmaOut = canOut;
    ok = !verbsWanted(mine, their) || verbsHandshake(c, fd, dl);
  }
  if (ok) {
    SockAddr laddr = peer;
    laddr.setPort(static_cast<int>(their.lanePort));
    for (uint32_t dir = 0; dir < 2 && ok; dir++)
      for (uint32_t i = 0; i < c->out.size() && ok; i++) {
        int s = -1;
        LaneHello lh{};
        memcpy(lh.token, their.laneToken, sizeof(lh.token));
        lh.dir = dir;
        lh.idx = i;
        ok = connectTo(laddr, dl, &s) == flagcxSuccess &&
             sendAll(s, &lh, sizeof(lh), dl) == flagcxSuccess;
        if (s >= 0) (dir == 0 ? c->out[i] : c->in[i])->fd = s;
      }
    ok = ok && recvAll(fd, &ready, 1, dl) == flagcxSuccess && ready == 1;
  }
  close(fd);
  if (!ok) {
    WARN(kP2P, "flagcxP2pEngineConnect: handshake with %s failed (peer gone, not a P2P engine, "
               "or FLAGCX_P2P_SECRET differs)", hp.c_str());
    if (c) {
      closeLaneFds(c);
      delete c;
    }
    return nullptr;
  }
  if (remoteGpuIdx >= 0 && c->remoteGpuIdx < 0) c->remoteGpuIdx = remoteGpuIdx;
  if (sameProcess && !c->sameProcess)
    INFO(kP2P, "flagcxP2pEngineConnect: sameProcess asked but %s is pid %d", hp.c_str(),
         c->remotePid);
  adopt(engine, c);
  INFO(kP2P, "P2P: connected to %s (pid %d, %s, %zu lanes each way, CMA out %d in %d, verbs %d)",
       hp.c_str(), c->remotePid, c->isLocal ? "same host" : "other host", c->out.size(),
       c->cmaOut ? 1 : 0, c->cmaIn ? 1 : 0, c->verbs ? 1 : 0);
  return c;
}

int flagcxP2pEngineStartListener(FlagcxP2pConn *conn) {
  // Every lane's service thread starts with the connection.
  return conn ? 0 : -1;
}

FlagcxP2pConn *flagcxP2pEngineAccept(FlagcxP2pEngine *engine, char *ipAddrBuf,
                                     size_t ipAddrBufLen, int *remoteGpuIdx) {
  if (!engine || !ipAddrBuf || ipAddrBufLen == 0 || !remoteGpuIdx) {
    WARN(kP2P, "flagcxP2pEngineAccept: %s", !engine ? "engine is NULL"
                                            : !remoteGpuIdx ? "remoteGpuIdx is NULL"
                                                            : "ipAddrBuf is NULL or empty");
    return nullptr;
  }
  FlagcxP2pConn *c = acceptNext(engine, deadlineFromTimeout());
  if (!c) {
    if (!engine->stopAccept.load())
      WARN(kP2P, "flagcxP2pEngineAccept: no connection within FLAGCX_TIMEOUT");
    return nullptr;
  }
  snprintf(ipAddrBuf, ipAddrBufLen, "%s", c->peerHost.c_str());
  *remoteGpuIdx = c->remoteGpuIdx;
  return c;
}

void flagcxP2pEngineConnDestroy(FlagcxP2pConn *conn) {
  if (!conn) return;
  FlagcxP2pEngine *e = conn->engine;
  {
    std::lock_guard<std::mutex> lk(e->connMu);
    auto it = std::find(e->conns.begin(), e->conns.end(), conn);
    if (it == e->conns.end()) {
      WARN(kP2P, "flagcxP2pEngineConnDestroy: not a live connection of its engine");
      return;
    }
    e->conns.erase(it);
    for (auto s = e->sessions.begin(); s != e->sessions.end();)
      s = s->second == conn ? e->sessions.erase(s) : std::next(s);
  }
  conn->closing.store(true);
  verbsStop(conn);
  sayBye(conn);
  for (auto &l : conn->out) stopLane(l.get());
  for (auto &l : conn->in) stopLane(l.get());
  delete conn;
}

bool flagcxP2pEngineConnIsLocal(FlagcxP2pConn *conn) { return conn && conn->isLocal; }

int flagcxP2pEngineGetRpcPort(FlagcxP2pEngine *engine) {
  if (!engine) {
    WARN(kP2P, "flagcxP2pEngineGetRpcPort: engine is NULL");
    return -1;
  }
  return engine->addr.port();
}

int flagcxP2pEngineStartRpcServer(FlagcxP2pEngine *engine) {
  if (!engine) {
    WARN(kP2P, "flagcxP2pEngineStartRpcServer: engine is NULL");
    return -1;
  }
  if (engine->rpcActive.exchange(true)) return 0;
  engine->rpcThread = std::thread([engine] {
    while (!engine->stopAccept.load())
      (void)acceptNext(engine, Clock::now() + std::chrono::seconds(1));
  });
  INFO(kP2P, "P2P: RPC server accepting on %s", engine->addr.str().c_str());
  return 0;
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
  SockAddr a;
  if (!parseHostPort(key, &a)) {
    WARN(kP2P, "flagcxP2pEngineGetConn: session \"%s\" is not host:port", session);
    return nullptr;
  }
  FlagcxP2pConn *c = flagcxP2pEngineConnect(engine, numericHost(a).c_str(), -1, a.port(), false);
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

int flagcxP2pEngineGetMetadata(FlagcxP2pEngine *engine, char **metadataStr) {
  if (!engine || !metadataStr) {
    WARN(kP2P, "flagcxP2pEngineGetMetadata: %s is NULL", engine ? "metadataStr" : "engine");
    if (metadataStr) *metadataStr = nullptr;
    return -1;
  }
  // "ip:port?gpu?notif_port": notifications travel on the connection's
  // lanes, so the notification port is the listening port.
  std::string s = engine->addr.str() + "?" + std::to_string(engine->gpuIdx) + "?" +
                  std::to_string(engine->addr.port());
  *metadataStr = new char[s.size() + 1];
  memcpy(*metadataStr, s.c_str(), s.size() + 1);
  return 0;
}
