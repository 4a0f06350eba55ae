// The P2P engine of flagcx_p2p.h: engines, their key, the accepting calls
// (Accept, the RPC server), connections' life and the janitor that releases
// failed ones at once (docs/P2P.md, "Connections", "Security").
//
// Key: FLAGCX_P2P_SECRET's, or 16 random bytes made at creation, which then
// travel in GetMetadata's session ("KEY@ip:port") -- the capability to
// reach the engine's registered regions.  Listeners and the accepting
// side's handshakes are p2p_door.cc; the connecting side is p2p_dial.cc.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/base.h"
#include "p2p/p2p_internal.h"

using namespace flagcx;
using namespace flagcx::p2p;

namespace {

// Engines of this process by id: a same-process peer's addresses are
// checked against its own engine's regions.
std::mutex g_engineMu;
std::unordered_map<uint64_t, FlagcxP2pEngine *> g_engines;

void reapDead(FlagcxP2pEngine *e) {
  std::vector<std::shared_ptr<FlagcxP2pConn>> dead;
  {
    std::lock_guard<std::mutex> lk(e->connMu);
    for (auto it = e->conns.begin(); it != e->conns.end();) {
      if (!(*it)->dead.load()) {
        ++it;
        continue;
      }
      dead.push_back(*it);
      // Nobody holds a pointer to one the RPC server took: it goes whole.
      if (!(*it)->userOwned && !(*it)->ready) it = e->conns.erase(it);
      else ++it;
    }
  }
  for (auto &c : dead) releaseConn(c.get(), false);
}

void janitorLoop(FlagcxP2pEngine *e) {
  std::unique_lock<std::mutex> lk(e->janMu);
  for (;;) {
    e->janCv.wait(lk, [&] { return e->janStop || e->janWork; });
    if (e->janStop) return;
    e->janWork = false;
    lk.unlock();
    doorReap(e);
    reapDead(e);
    lk.lock();
  }
}

}  // namespace

namespace flagcx::p2p {

int lanesPerConn() { return flagcxP2pGlobalConfig().qpsPerConn; }
int64_t handshakeSeconds() { return paramInt(Param::P2P_HANDSHAKE_TIMEOUT); }
uint64_t recvQueueCap() { return static_cast<uint64_t>(paramInt(Param::P2P_RECV_QUEUE_BYTES)); }

void pokeJanitor(FlagcxP2pEngine *e) {
  std::lock_guard<std::mutex> lk(e->janMu);
  e->janWork = true;
  e->janCv.notify_one();
}

void connMarkDead(FlagcxP2pConn *c, const std::string &why, bool quiet) {
  {
    std::lock_guard<std::mutex> lk(c->xferMu);
    if (c->dead.exchange(true)) return;
    c->deadWhy = why;
    if (!c->closing.load() && !quiet)
      WARN(kP2P, "P2P: connection to %s (pid %d) failed: %s", c->peerHost.c_str(), c->remotePid,
           why.c_str());
    std::lock_guard<std::mutex> rk(c->recvMu);
    c->recvCv.notify_all();
  }
  pokeJanitor(c->engine);
}

void releaseConn(FlagcxP2pConn *c, bool bye) {
  std::lock_guard<std::mutex> lk(c->releaseMu);
  if (c->released) return;
  c->released = true;
  c->closing.store(true);
  verbsStop(c);
  if (bye) sayBye(c);
  for (auto &l : c->out) stopLane(l.get());
  for (auto &l : c->in) stopLane(l.get());
  if (c->cmaPidFd >= 0) close(c->cmaPidFd);  // no lane serves any more
  c->cmaPidFd = -1;
}

void adopt(FlagcxP2pEngine *e, const std::shared_ptr<FlagcxP2pConn> &c, bool toReady) {
  verbsStart(c.get());
  for (auto &l : c->out) startLane(c.get(), l.get());
  for (auto &l : c->in) startLane(c.get(), l.get());
  std::lock_guard<std::mutex> lk(e->connMu);
  e->conns.push_back(c);
  if (toReady) {
    c->ready = true;
    e->ready.push_back(c);
  }
}

bool inEngineRegion(const FlagcxP2pEngine *self, uint64_t id, uint64_t addr, uint64_t len) {
  // Held throughout: an engine leaves g_engines (under it) before it goes.
  std::lock_guard<std::mutex> lk(g_engineMu);
  auto it = g_engines.find(id);
  if (it == g_engines.end()) return false;
  FlagcxP2pEngine *p = it->second;
  if (p == self) return findRegion(p, addr, len, 0) != nullptr;  // the caller holds its lock
  // Two shared locks of two engines: glibc's rwlocks prefer readers, so
  // readers taking them in either order cannot wait on each other.
  std::shared_lock<std::shared_mutex> rk(p->mrMu);
  return findRegion(p, addr, len, 0) != nullptr;
}

}  // namespace flagcx::p2p

FlagcxP2pEngine *flagcxP2pEngineCreate() {
  (void)flagcxP2pGlobalConfig();
  auto *e = new FlagcxP2pEngine;
  bool set = false;
  e->secret = keyFromEnv(&set);
  if (!set) randomBytes(e->secret.data(), e->secret.size());
  e->keyMade = !set;
  while (e->id == 0) randomBytes(&e->id, sizeof(e->id));
  e->gpuIdx = deviceAdapter() ? 0 : -1;
  if (findLocalAddress(&e->addr, &e->ifname) != flagcxSuccess || !doorOpen(e)) {
    delete e;
    return nullptr;
  }
  {
    std::lock_guard<std::mutex> lk(g_engineMu);
    g_engines[e->id] = e;
  }
  e->janitor = std::thread(janitorLoop, e);
  INFO(kP2P, "P2P: engine listening on %s (interface %s), on loopback and at its local door; key "
       "from %s", e->addr.str().c_str(), e->ifname.c_str(),
       e->keyMade ? "GetMetadata's session" : "FLAGCX_P2P_SECRET");
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
  {  // first: the janitor also joins handshake threads
    std::lock_guard<std::mutex> lk(engine->janMu);
    engine->janStop = true;
    engine->janCv.notify_one();
  }
  engine->janitor.join();
  {
    std::lock_guard<std::mutex> lk(engine->acceptMu);
    doorClose(engine);  // handshake threads end (their connections are adopted first)
  }
  {
    std::lock_guard<std::mutex> lk(g_engineMu);
    g_engines.erase(engine->id);
  }
  std::vector<std::shared_ptr<FlagcxP2pConn>> conns;
  {
    std::lock_guard<std::mutex> lk(engine->connMu);
    conns.swap(engine->conns);
    engine->ready.clear();
    engine->sessions.clear();
  }
  for (auto &c : conns) releaseConn(c.get(), !c->dead.load());
  conns.clear();
  delete engine;
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
  auto c = acceptNext(engine, deadlineFromTimeout(), true);
  if (!c) {
    if (!engine->stopAccept.load())
      WARN(kP2P, "flagcxP2pEngineAccept: no connection within FLAGCX_TIMEOUT");
    return nullptr;
  }
  snprintf(ipAddrBuf, ipAddrBufLen, "%s", c->peerIp.c_str());
  *remoteGpuIdx = c->remoteGpuIdx;
  return c.get();
}

void flagcxP2pEngineConnDestroy(FlagcxP2pConn *conn) {
  if (!conn) return;
  FlagcxP2pEngine *e = conn->engine;
  std::shared_ptr<FlagcxP2pConn> keep;
  {
    std::lock_guard<std::mutex> lk(e->connMu);
    auto it = std::find_if(e->conns.begin(), e->conns.end(),
                           [&](const std::shared_ptr<FlagcxP2pConn> &c) { return c.get() == conn; });
    if (it == e->conns.end()) {
      WARN(kP2P, "flagcxP2pEngineConnDestroy: not a live connection of its engine");
      return;
    }
    keep = *it;
    e->conns.erase(it);
    e->ready.erase(std::remove(e->ready.begin(), e->ready.end(), keep), e->ready.end());
    for (auto s = e->sessions.begin(); s != e->sessions.end();)
      s = s->second == conn ? e->sessions.erase(s) : std::next(s);
  }
  releaseConn(conn, !conn->dead.load());
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
      (void)acceptNext(engine, Clock::now() + std::chrono::seconds(1), false);
  });
  INFO(kP2P, "P2P: RPC server accepting on %s", engine->addr.str().c_str());
  return 0;
}

int flagcxP2pEngineGetMetadata(FlagcxP2pEngine *engine, char **metadataStr) {
  if (!engine || !metadataStr) {
    WARN(kP2P, "flagcxP2pEngineGetMetadata: %s is NULL", engine ? "metadataStr" : "engine");
    if (metadataStr) *metadataStr = nullptr;
    return -1;
  }
  // "[KEY@]ip:port?gpu?notif_port": the key made at creation travels with
  // the address (without FLAGCX_P2P_SECRET); notifications travel on the
  // connection's lanes, so the notification port is the listening port.
  std::string s = (engine->keyMade ? keyHex(engine->secret) + "@" : std::string()) +
                  engine->addr.str() + "?" + std::to_string(engine->gpuIdx) + "?" +
                  std::to_string(engine->addr.port());
  *metadataStr = new char[s.size() + 1];
  memcpy(*metadataStr, s.c_str(), s.size() + 1);
  return 0;
}
