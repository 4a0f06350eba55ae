// Transfers of the P2P engine (flagcx_p2p.h): one-sided reads and writes,
// two-sided messages, notifications, transfer status, the remote region
// table (MakeDesc) and the global configuration.
//
// A transfer is cut into slices of at most FLAGCX_P2P_SLICE_SIZE bytes (and,
// when large, into about one share per lane), dealt round-robin over the
// connection's lanes, one request per lane; it is done when every request
// has been answered.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/base.h"
#include "p2p/p2p_internal.h"

using namespace flagcx;
using namespace flagcx::p2p;

namespace {

constexpr uint64_t kSpreadMin = 1 << 20;  // below 2x this, one lane carries a transfer
// Notifications waiting for GetNotifs, at most (512 bytes each: 32 MiB); a
// peer's notification past it is refused, its SendNotif fails.
constexpr size_t kMaxNotifs = 1 << 16;

std::atomic<uint64_t> g_nextXfer{1};
std::mutex g_notifMu;
std::vector<FlagcxP2pNotifyMsg> g_notifs;

void dumpConfig(const FlagcxP2pGlobalConfig &c);

bool usable(FlagcxP2pConn *c, const char *fn) {
  if (!c) {
    WARN(kP2P, "%s: conn is NULL", fn);
    return false;
  }
  if (c->dead.load()) {
    std::lock_guard<std::mutex> lk(c->xferMu);
    WARN(kP2P, "%s: the connection to %s has failed (%s)", fn, c->peerHost.c_str(),
         c->deadWhy.c_str());
    return false;
  }
  return true;
}

// Are the local pieces inside this engine's registered regions?  *device:
// some of them are device memory.
bool localOk(FlagcxP2pConn *c, const std::vector<Seg> &segs, const char *fn, bool *device) {
  FlagcxP2pEngine *e = c->engine;
  std::shared_lock<std::shared_mutex> lk(e->mrMu);
  *device = false;
  for (auto &s : segs) {
    const Region *r = findRegion(e, s.local, s.len, 0);
    if (!r) {
      WARN(kP2P, "%s: local [0x%lx, +%lu) is not inside a region registered with this engine",
           fn, static_cast<unsigned long>(s.local), static_cast<unsigned long>(s.len));
      return false;
    }
    *device |= r->device;
  }
  return true;
}

// Over verbs when the connection has it, else dealt over the lanes; *id
// names the transfer.
int submit(FlagcxP2pConn *c, Op op, const std::vector<Seg> &segs, uint64_t *id, const char *fn) {
  bool device = false;
  if (!usable(c, fn) || !localOk(c, segs, fn, &device)) return -1;
  if (!device && verbsSubmit(c, op, segs, id)) return 0;
  auto x = track(c, 1);
  x->localDevice = device;
  *id = x->id;
  postOnLanes(c, op, segs, x);
  return 0;
}

// Wait for a transfer to end (each request ends within FLAGCX_TIMEOUT) and
// forget it; true when every byte moved.
bool waitAndForget(FlagcxP2pConn *c, uint64_t id) {
  std::shared_ptr<Xfer> x;
  {
    std::lock_guard<std::mutex> lk(c->xferMu);
    auto it = c->xfers.find(id);
    if (it == c->xfers.end()) return false;
    x = it->second;
  }
  {
    std::unique_lock<std::mutex> lk(c->doneMu);
    c->doneCv.wait(lk, [&] { return x->task.isAllDone(); });
  }
  std::lock_guard<std::mutex> lk(c->xferMu);
  c->xfers.erase(id);
  return !x->task.hasErrors();
}

// A job on lane 0 (ordered: messages, notifications, the table), waited for.
bool control(FlagcxP2pConn *c, Op op, std::vector<char> data) {
  auto x = track(c, 1);
  postJob(c, c->out[0].get(), Job{x, op, {}, std::move(data)});
  return waitAndForget(c, x->id);
}

std::vector<Seg> vectorSegs(const std::vector<void *> &local, const std::vector<size_t> &sizes,
                            const std::vector<FlagcxP2pRdmaDesc> &descs, size_t n) {
  std::vector<Seg> segs;
  segs.reserve(n);
  for (size_t i = 0; i < n; i++)
    segs.push_back(Seg{reinterpret_cast<uint64_t>(local[i]), descs[i].addr, sizes[i], descs[i].rkey});
  return segs;
}

bool vectorArgs(FlagcxP2pConn *c, size_t n, size_t a, size_t b, size_t d, uint64_t *id,
                const char *fn) {
  if (!c || !id || n == 0 || a < n || b < n || d < n) {
    WARN(kP2P, "%s: %s", fn, !c ? "conn is NULL" : !id ? "transferId is NULL"
                             : n == 0 ? "numIovs must be positive"
                                      : "a vector is shorter than numIovs");
    return false;
  }
  return true;
}

// Same-host device memory named by IPC infos: copied now, on this thread.
int ipcVector(FlagcxP2pConn *c, const std::vector<void *> &local, const std::vector<size_t> &sizes,
              const std::vector<char *> &ipcBufs, size_t n, bool write, uint64_t *id) {
  using clk = std::chrono::steady_clock;
  const bool timed = logEnabled(LogLevel::Trace, kP2P);
  clk::time_point t0 = timed ? clk::now() : clk::time_point{};
  bool ok = ipcBufs.size() >= n;
  // Local pieces in device regions of this engine go with the remote ones
  // into batched device copies; anything else (host memory) one by one.
  // With FLAGCX_P2P_IPC_BATCH_BYTES set, a batch is issued once it holds
  // `due` bytes, that many first, then twice as much each time, so that the
  // device copies while this thread resolves the next pieces; by default
  // (0) the whole transfer is one batch, which measured faster on the H200
  // (docs/P2P.md, "Where it stands").
  std::vector<DeviceAdapter::CopyPiece> kernel, other;
  kernel.reserve(n);
  size_t batched = 0, batches = 0, pending = 0;
  size_t due = static_cast<size_t>(paramInt(Param::P2P_IPC_BATCH_BYTES));
  if (!due) due = SIZE_MAX;
  auto issue = [&] {
    bool done = ipcCopyBatch(kernel, other) == 0;
    batched += kernel.size();
    batches++;
    kernel.clear();
    other.clear();
    pending = 0;
    return done;
  };
  {
    IpcLast lastIpc;
    const Region *lastRegion = nullptr;
    std::shared_lock<std::shared_mutex> lk(c->engine->mrMu);
    for (size_t i = 0; ok && i < n; i++) {
      if (pending >= due) {
        due = std::max(due, std::min(due * 2, size_t{256} << 20));
        if (!(ok = issue())) break;
      }
      char *remote = nullptr;
      ok = ipcBufs[i] && ipcRemote(ipcBufs[i], sizes[i], &remote, &lastIpc) == 0;
      if (!ok) break;
      auto a = reinterpret_cast<uint64_t>(local[i]);
      const Region *r = lastRegion;
      if (!r || a < r->base || a - r->base > r->size || sizes[i] > r->size - (a - r->base))
        r = lastRegion = findRegion(c->engine, a, sizes[i], 0);
      DeviceAdapter::CopyPiece p = write ? DeviceAdapter::CopyPiece{remote, local[i], sizes[i]}
                                         : DeviceAdapter::CopyPiece{local[i], remote, sizes[i]};
      (r && r->device ? kernel : other).push_back(p);
      pending += sizes[i];
    }
  }
  clk::time_point t1 = timed ? clk::now() : clk::time_point{};
  ok = ok && issue();
  clk::time_point t2 = timed ? clk::now() : clk::time_point{};
  ok = ipcFlush() == 0 && ok;
  if (timed) {
    auto us = [](clk::time_point a, clk::time_point b) {
      return std::chrono::duration<double, std::micro>(b - a).count();
    };
    TRACE(kP2P, "P2P IPC %s: %zu pieces (%zu batched, %zu batches): lookups and earlier batches "
          "%.1f us, last batch %.1f us, wait %.1f us", write ? "write" : "read", n, batched,
          batches, us(t0, t1), us(t1, t2), us(t2, clk::now()));
  }
  if (!ok) WARN(kP2P, "P2P: IPC %s to %s failed", write ? "write" : "read", c->peerHost.c_str());
  auto x = track(c, 1);
  if (!ok) {
    x->logged.store(true);
    x->task.failedCount.store(1);
  }
  x->task.doneSliceCount.store(1, std::memory_order_release);
  *id = x->id;
  return ok ? 0 : -1;
}

// ReadVector or WriteVector: same-host device memory through IPC when
// ipcBufs are given, else the lanes.
int vector(FlagcxP2pConn *c, Op op, const std::vector<void *> &local,
           const std::vector<size_t> &sizes, const std::vector<FlagcxP2pRdmaDesc> &descs,
           int numIovs, uint64_t *id, const std::vector<char *> &ipcBufs, const char *fn) {
  size_t n = numIovs > 0 ? static_cast<size_t>(numIovs) : 0;
  if (!vectorArgs(c, n, local.size(), sizes.size(), descs.size(), id, fn)) return -1;
  if (!ipcBufs.empty() && c->isLocal)
    return ipcVector(c, local, sizes, ipcBufs, n, op == Op::Write, id);
  return submit(c, op, vectorSegs(local, sizes, descs, n), id, fn);
}

// Read or Write of one buffer.
int single(FlagcxP2pConn *c, Op op, const void *data, size_t size, const FlagcxP2pRdmaDesc &d,
           uint64_t *id, const char *fn) {
  if (!c || !data || !id) {
    WARN(kP2P, "%s: %s is NULL", fn, !c ? "conn" : !data ? "data" : "transferId");
    return -1;
  }
  return submit(c, op, {Seg{reinterpret_cast<uint64_t>(data), d.addr, size, d.rkey}}, id, fn);
}

}  // namespace

namespace flagcx::p2p {

std::shared_ptr<Xfer> track(FlagcxP2pConn *c, uint64_t jobs) {
  auto x = std::make_shared<Xfer>();
  x->id = g_nextXfer.fetch_add(1);
  x->task.sliceCount.store(jobs, std::memory_order_release);
  std::lock_guard<std::mutex> lk(c->xferMu);
  c->xfers[x->id] = x;
  return x;
}

void postOnLanes(FlagcxP2pConn *c, Op op, const std::vector<Seg> &segs, const std::shared_ptr<Xfer> &x) {
  size_t lanes = c->out.size();
  uint64_t total = 0;
  for (auto &s : segs) total += s.len;
  uint64_t cut = flagcxP2pGlobalConfig().sliceSize;
  bool spread = lanes > 1 && total >= 2 * kSpreadMin;
  if (spread) cut = std::min<uint64_t>(cut, std::max<uint64_t>(kSpreadMin, (total + lanes - 1) / lanes));
  std::vector<std::vector<Seg>> per(lanes);
  size_t first = c->rr.fetch_add(1) % lanes, k = 0;
  for (auto &s : segs) {
    for (uint64_t off = 0; off < s.len;) {
      uint64_t n = std::min(cut, s.len - off);
      per[spread ? (first + k++) % lanes : first].push_back(
          Seg{s.local + off, s.remote + off, n, s.rkey});
      off += n;
    }
  }
  uint64_t jobs = 0;
  for (auto &v : per) jobs += !v.empty();
  if (!jobs) {
    x->task.doneSliceCount.store(x->task.sliceCount.load(), std::memory_order_release);  // nothing to move
    return;
  }
  x->task.sliceCount.store(jobs, std::memory_order_release);
  for (size_t i = 0; i < lanes; i++)
    if (!per[i].empty()) postJob(c, c->out[i].get(), Job{x, op, std::move(per[i]), {}, {}});
}

void pushNotif(const FlagcxP2pNotifyMsg &m) {
  std::lock_guard<std::mutex> lk(g_notifMu);
  g_notifs.push_back(m);
}

bool notifRoom() {
  std::lock_guard<std::mutex> lk(g_notifMu);
  return g_notifs.size() < kMaxNotifs;
}

}  // namespace flagcx::p2p

int flagcxP2pEngineMakeDesc(FlagcxP2pConn *conn, uint64_t remoteVa, uint32_t size,
                            FlagcxP2pRdmaDesc *desc) {
  if (!conn || !desc) {
    WARN(kP2P, "flagcxP2pEngineMakeDesc: %s is NULL", conn ? "desc" : "conn");
    return -1;
  }
  for (int pass = 0; pass < 2; pass++) {
    {
      std::lock_guard<std::mutex> lk(conn->regionMu);
      if (const WireRegion *r = findRemoteRegion(conn, remoteVa, size)) {
        *desc = FlagcxP2pRdmaDesc{};
        desc->addr = remoteVa;
        desc->size = size;
        desc->rkey = r->rkey;
        return 0;
      }
    }
    // Not in the table of the handshake: ask the peer for its table now
    // (it may have registered since).
    if (pass == 0 && (conn->dead.load() || !control(conn, Op::Table, {}))) break;
  }
  WARN(kP2P, "flagcxP2pEngineMakeDesc: [0x%lx, +%u) is not inside a region %s registered",
       static_cast<unsigned long>(remoteVa), size, conn->peerHost.c_str());
  return -1;
}

int flagcxP2pEngineRead(FlagcxP2pConn *conn, FlagcxP2pMr, const void *data, size_t size,
                        FlagcxP2pRdmaDesc desc, uint64_t *transferId) {
  return single(conn, Op::Read, data, size, desc, transferId, "flagcxP2pEngineRead");
}

int flagcxP2pEngineWrite(FlagcxP2pConn *conn, FlagcxP2pMr, const void *data, size_t size,
                         FlagcxP2pRdmaDesc desc, uint64_t *transferId) {
  return single(conn, Op::Write, data, size, desc, transferId, "flagcxP2pEngineWrite");
}

int flagcxP2pEngineReadVector(FlagcxP2pConn *conn, std::vector<FlagcxP2pMr>,
                              std::vector<void *> dstVec, std::vector<size_t> sizeVec,
                              std::vector<FlagcxP2pRdmaDesc> descs, int numIovs,
                              uint64_t *transferId, std::vector<char *> ipcBufs) {
  return vector(conn, Op::Read, dstVec, sizeVec, descs, numIovs, transferId, ipcBufs,
                "flagcxP2pEngineReadVector");
}

int flagcxP2pEngineWriteVector(FlagcxP2pConn *conn, const std::vector<FlagcxP2pMr> &,
                               const std::vector<void *> &dstVec,
                               const std::vector<size_t> &sizeVec,
                               const std::vector<FlagcxP2pRdmaDesc> &descs, int numIovs,
                               uint64_t *transferId, const std::vector<char *> &ipcBufs) {
  return vector(conn, Op::Write, dstVec, sizeVec, descs, numIovs, transferId, ipcBufs,
                "flagcxP2pEngineWriteVector");
}

int flagcxP2pEngineWriteVectorSync(FlagcxP2pConn *conn, const std::vector<FlagcxP2pMr> &mrIds,
                                   const std::vector<void *> &srcVec,
                                   const std::vector<size_t> &sizeVec,
                                   const std::vector<FlagcxP2pRdmaDesc> &descs) {
  if (srcVec.empty()) return conn ? 0 : -1;
  uint64_t id = 0;
  if (flagcxP2pEngineWriteVector(conn, mrIds, srcVec, sizeVec, descs,
                                 static_cast<int>(srcVec.size()), &id) != 0)
    return -1;
  return waitAndForget(conn, id) ? 0 : -1;
}

int flagcxP2pEngineSendVector(FlagcxP2pConn *conn, std::vector<FlagcxP2pMr>,
                              std::vector<const void *> srcVec, std::vector<size_t> sizeVec,
                              int numIovs, uint64_t *transferId) {
  size_t n = numIovs > 0 ? static_cast<size_t>(numIovs) : 0;
  if (!conn || !transferId || n == 0 || srcVec.size() < n || sizeVec.size() < n) {
    WARN(kP2P, "flagcxP2pEngineSendVector: %s", !conn ? "conn is NULL"
                                                : !transferId ? "transferId is NULL"
                                                              : "numIovs or the vectors are wrong");
    return -1;
  }
  std::vector<Seg> segs;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    segs.push_back(Seg{reinterpret_cast<uint64_t>(srcVec[i]), 0, sizeVec[i], 0});
    total += sizeVec[i];
  }
  bool device = false;
  if (!usable(conn, "flagcxP2pEngineSendVector") ||
      !localOk(conn, segs, "flagcxP2pEngineSendVector", &device))
    return -1;
  if (device) {
    WARN(kP2P, "flagcxP2pEngineSendVector: device memory is not supported by Send (use Write)");
    return -1;
  }
  std::vector<char> msg(total);
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    memcpy(msg.data() + off, srcVec[i], sizeVec[i]);
    off += sizeVec[i];
  }
  auto x = track(conn, 1);
  *transferId = x->id;
  postJob(conn, conn->out[0].get(), Job{x, Op::Send, {}, std::move(msg)});
  return 0;
}

int flagcxP2pEngineSend(FlagcxP2pConn *conn, FlagcxP2pMr mr, const void *data, size_t size,
                        uint64_t *transferId) {
  return flagcxP2pEngineSendVector(conn, {mr}, {data}, {size}, 1, transferId);
}

int flagcxP2pEngineRecv(FlagcxP2pConn *conn, FlagcxP2pMr, void *data, size_t maxSize) {
  if (!conn || !data) {
    WARN(kP2P, "flagcxP2pEngineRecv: %s is NULL", conn ? "data" : "conn");
    return -1;
  }
  bool device = false;
  if (!localOk(conn, {Seg{reinterpret_cast<uint64_t>(data), 0, maxSize, 0}},
               "flagcxP2pEngineRecv", &device))
    return -1;
  RecvMsg m;
  {
    std::unique_lock<std::mutex> lk(conn->recvMu);
    bool got = conn->recvCv.wait_until(lk, deadlineFromTimeout(), [&] {
      return !conn->recvQ.empty() || conn->dead.load();
    });
    if (!got || conn->recvQ.empty()) {
      WARN(kP2P, "flagcxP2pEngineRecv: no message from %s %s", conn->peerHost.c_str(),
           got ? "(the connection failed)" : "within FLAGCX_TIMEOUT");
      return -1;
    }
    m = std::move(conn->recvQ.front());
    conn->recvQ.pop_front();
    conn->recvBytes -= m.bytes.size();
  }
  if (m.bytes.size() > maxSize) {
    WARN(kP2P, "flagcxP2pEngineRecv: the message has %zu bytes, more than maxSize %zu "
               "(dropped)", m.bytes.size(), maxSize);
    return -1;
  }
  memcpy(data, m.bytes.data(), m.bytes.size());
  return 0;
}

int flagcxP2pEngineXferState(FlagcxP2pConn *conn, uint64_t transferId) {
  if (!conn) {
    WARN(kP2P, "flagcxP2pEngineXferState: conn is NULL");
    return -1;
  }
  std::lock_guard<std::mutex> lk(conn->xferMu);
  auto it = conn->xfers.find(transferId);
  if (it == conn->xfers.end()) {
    WARN(kP2P, "P2P: %lu is not a transfer in flight on this connection (unknown, or already "
               "reported)", static_cast<unsigned long>(transferId));
    return -1;
  }
  if (!it->second->task.isAllDone()) return 0;
  // Over: reported once.  A failed transfer has had its log line.
  bool ok = !it->second->task.hasErrors();
  conn->xfers.erase(it);
  return ok ? 1 : -1;
}

bool flagcxP2pEngineXferStatus(FlagcxP2pConn *conn, uint64_t transferId) {
  return flagcxP2pEngineXferState(conn, transferId) == 1;
}

std::vector<FlagcxP2pNotifyMsg> flagcxP2pEngineGetNotifs() {
  std::lock_guard<std::mutex> lk(g_notifMu);
  std::vector<FlagcxP2pNotifyMsg> out;
  out.swap(g_notifs);
  return out;
}

int flagcxP2pEngineSendNotif(FlagcxP2pConn *conn, FlagcxP2pNotifyMsg *notifyMsg) {
  if (!conn || !notifyMsg) {
    WARN(kP2P, "flagcxP2pEngineSendNotif: %s is NULL", conn ? "notifyMsg" : "conn");
    return -1;
  }
  if (!usable(conn, "flagcxP2pEngineSendNotif")) return -1;
  std::vector<char> b(sizeof(*notifyMsg));
  memcpy(b.data(), notifyMsg, b.size());
  return control(conn, Op::Notif, std::move(b)) ? static_cast<int>(sizeof(*notifyMsg)) : -1;
}

const FlagcxP2pGlobalConfig &flagcxP2pGlobalConfig() {
  static const FlagcxP2pGlobalConfig cfg = [] {
    FlagcxP2pGlobalConfig c;
    c.qpsPerConn = static_cast<int>(paramInt(Param::P2P_QPS_PER_CONN));
    c.workersPerPool = static_cast<int>(paramInt(Param::P2P_WORKERS_PER_POOL));
    c.shardCount = static_cast<int>(paramInt(Param::P2P_SHARD_COUNT));
    c.sharedCqDepth = static_cast<size_t>(paramInt(Param::P2P_CQ_DEPTH));
    c.maxWrPerPost = static_cast<size_t>(paramInt(Param::P2P_MAX_WR_PER_POST));
    c.maxRequests = static_cast<size_t>(paramInt(Param::P2P_MAX_REQUESTS));
    c.batchPollSize = static_cast<size_t>(paramInt(Param::P2P_BATCH_POLL_SIZE));
    c.sliceSize = static_cast<size_t>(paramInt(Param::P2P_SLICE_SIZE));
    c.fragmentLimit = static_cast<size_t>(paramInt(Param::P2P_FRAGMENT_LIMIT));
    c.maxSge = static_cast<size_t>(paramInt(Param::P2P_MAX_SGE));
    c.maxInline = static_cast<size_t>(paramInt(Param::P2P_MAX_INLINE));
    c.ibPort = static_cast<uint8_t>(paramInt(Param::P2P_IB_PORT));
    c.gidIndex = static_cast<int>(paramInt(Param::P2P_GID_INDEX));
    c.mtuLength = static_cast<int>(paramInt(Param::P2P_MTU));
    c.ibTrafficClass = static_cast<int>(paramInt(Param::P2P_IB_TC));
    c.retryCnt = static_cast<int>(paramInt(Param::P2P_RETRY_CNT));
    c.notifMaxPeers = static_cast<int>(paramInt(Param::P2P_NOTIF_MAX_PEERS));
    c.enableDestDeviceAffinity = paramInt(Param::P2P_DEST_DEV_AFFINITY) != 0;
    return c;
  }();
  static std::once_flag dumped;
  std::call_once(dumped, [] { dumpConfig(cfg); });
  return cfg;
}

void flagcxP2pDumpGlobalConfig() { dumpConfig(flagcxP2pGlobalConfig()); }

namespace {
void dumpConfig(const FlagcxP2pGlobalConfig &c) {
  INFO(kP2P, "P2P config: qpsPerConn %d (lanes each way), workersPerPool %d, shardCount %d, "
       "cqDepth %zu, maxWrPerPost %zu, maxRequests %zu, batchPollSize %zu, sliceSize %zu, "
       "fragmentLimit %zu, maxSge %zu, maxInline %zu, ibPort %u, gidIndex %d, mtu %d, ibTc %d, "
       "retryCnt %d, notifMaxPeers %d, destDevAffinity %d", c.qpsPerConn, c.workersPerPool,
       c.shardCount, c.sharedCqDepth, c.maxWrPerPost, c.maxRequests, c.batchPollSize,
       c.sliceSize, c.fragmentLimit, c.maxSge, c.maxInline, static_cast<unsigned>(c.ibPort),
       c.gidIndex, c.mtuLength, c.ibTrafficClass, c.retryCnt, c.notifMaxPeers,
       c.enableDestDeviceAffinity ? 1 : 0);
}
}  // namespace
