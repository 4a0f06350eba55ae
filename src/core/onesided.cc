// One-sided state of a communicator: set-up, registration tables and the
// mapping of same-host peers' memory (operations are in onesided_ops.cc).
#include "core/onesided.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "base/base.h"
#include "core/comm.h"
#include "net/net.h"

namespace flagcx {

namespace {
constexpr size_t kIpcBytes = 64;
constexpr uint32_t kWindowKey = 0x80000000u;
constexpr uint32_t kSignalKey = 0xffffffffu;

// What each rank publishes about one registration.
struct RegRecord {
  uint64_t size;
  uint64_t addr;       // for native (verbs) peers
  uint32_t rkey;
  uint32_t pad;
  uint32_t shareable;  // ipc holds a host IPC handle, or (device) the adapter's reference
  uint32_t device;     // device memory (CUDA): same-host peers only
  uint8_t ipc[DeviceAdapter::kIpcRefBytes];
};

// The host IPC handle naming [buf, buf+size) as bytes; false when it cannot.
bool exportHost(const void *buf, size_t size, uint8_t *out) {
  if (!host::memShareable(buf, size)) return false;
  flagcxIpcMemHandle_t h = nullptr;
  size_t hs = 0;
  if (host::ipcCreate(&h, &hs) != flagcxSuccess) return false;
  bool ok = hs <= kIpcBytes && host::ipcGet(h, const_cast<void *>(buf)) == flagcxSuccess;
  if (ok) memcpy(out, h, hs);
  host::ipcFree(h);
  return ok;
}

// A peer's host IPC handle opened in its process as the kernel knows it
// (`pid`, never the one the handle names), when the mapping holds at least
// `need` bytes from the pointer; nullptr otherwise (one log line).
void *importHost(const uint8_t *bytes, pid_t pid, uint64_t need, int self, size_t rank) {
  if (pid <= 0) return nullptr;
  flagcxIpcMemHandle_t h = nullptr;
  size_t hs = 0;
  if (host::ipcCreate(&h, &hs) != flagcxSuccess) return nullptr;
  memcpy(h, bytes, hs);
  void *p = nullptr;
  size_t have = 0;
  if (host::ipcOpenFrom(h, pid, &p, &have) != flagcxSuccess) p = nullptr;
  host::ipcFree(h);
  if (p && have < need) {
    WARN(kInit, "rank %d: one-sided: rank %zu registered %llu bytes but the buffer it shared "
         "holds %zu; not mapped (its operations go through the service thread)", self, rank,
         static_cast<unsigned long long>(need), have);
    host::ipcClose(p);
    p = nullptr;
  }
  return p;
}
}  // namespace

OneSided::OneSided(flagcxComm *comm) : comm_(comm), rank_(comm->rank), nranks_(comm->nranks) {}

flagcxResult_t OneSided::ensure(flagcxComm *comm) {
  if (comm->os) return flagcxSuccess;
  if (comm->ccl) {
    WARN(kInit, "rank %d: one-sided operations on a communicator run by the vendor library are "
         "not supported (set FLAGCX_USE_HETERO_COMM=1)", comm->rank);
    return flagcxNotSupported;
  }
  // Nothing of the executor may be setting up connections meanwhile.
  if (!comm->exec->drain()) {
    WARN(kInit, "rank %d: one-sided registration: operations still in flight", comm->rank);
    return flagcxInvalidUsage;
  }
  auto os = std::make_unique<OneSided>(comm);
  FLAGCX_CHECK(os->setup());
  comm->os = std::move(os);
  return flagcxSuccess;
}

flagcxResult_t OneSided::setup() {
  size_t n = static_cast<size_t>(nranks_);
  local_.assign(n, false);
  live_.reset(new Liveness[n]);
  for (size_t r = 0; r < n; r++) {
    // (via[rank] is null: no transport reaches a rank itself.)
    local_[r] = static_cast<int>(r) == rank_ || (comm_->shm && comm_->via[r] == comm_->shm.get());
  }
  consumed_.assign(n, 0);
  peerSig_.assign(n, nullptr);
  peerSigMap_.assign(n, nullptr);
  provenPid_.assign(n, 0);
  // The signal block: one 64-byte slot per source rank, shareable.
  FLAGCX_CHECK(host::memAlloc(&sigBlock_, n * kStride * sizeof(uint64_t), flagcxMemDevice));
  memset(sigBlock_, 0, n * kStride * sizeof(uint64_t));
  sig_ = reinterpret_cast<std::atomic<uint64_t> *>(sigBlock_);
  // A Conn to every peer for the software path, over the peer's transport.
  // Its peerPid() is the only pid under which a peer's memory is mapped.
  std::vector<std::unique_ptr<Conn>> conns(n);
  Transport *kinds[] = {comm_->shm.get(), comm_->sock.get(), comm_->ib.get()};
  for (Transport *t : kinds) {
    if (!t) continue;
    std::vector<int> list;
    for (int r = 0; r < nranks_; r++)
      if (r != rank_ && comm_->via[static_cast<size_t>(r)] == t) list.push_back(r);
    if (list.empty()) continue;
    std::vector<std::unique_ptr<Conn>> got;
    flagcxResult_t rc = t->connectAll(*comm_->bs, list, 1, &got);
    if (rc != flagcxSuccess) {
      WARN(kInit, "rank %d: one-sided: connecting to %zu peer(s) over %s failed", rank_,
           list.size(), t->name());
      return rc;
    }
    for (size_t i = 0; i < list.size(); i++) {
      provenPid_[static_cast<size_t>(list[i])] = got[i]->peerPid();
      conns[static_cast<size_t>(list[i])] = std::move(got[i]);
    }
  }
  // Same-host liveness by pid only where the kernel named the process.
  pid_ = provenPid_;
  // Verbs peers: native RDMA queue pairs beside the Conns.
  std::vector<int> ibPeers;
  for (int r = 0; comm_->ib && r < nranks_; r++)
    if (r != rank_ && comm_->via[static_cast<size_t>(r)] == comm_->ib.get()) ibPeers.push_back(r);
  RmaDmabuf dmabuf;
  if (comm_->dev && comm_->dev->kind() == DeviceKind::Cuda) {
    DeviceAdapter *dev = comm_->dev;
    dmabuf = [dev](const void *p, size_t len, uint64_t *offset) {
      return dev->isDeviceMemory(p) ? dev->exportDmabuf(p, len, offset) : -2;
    };
  }
  FLAGCX_CHECK(makeRmaEngine(rank_, nranks_, std::move(conns), sig_, kStride, comm_->ib.get(),
                             *comm_->bs, ibPeers, std::move(dmabuf), &eng_));
  RegRecord mine{};
  mine.size = n * kStride * sizeof(uint64_t);
  mine.shareable = exportHost(sigBlock_, mine.size, mine.ipc);
  mine.addr = reinterpret_cast<uintptr_t>(sigBlock_);
  FLAGCX_CHECK(eng_->expose(kSignalKey, sigBlock_, mine.size, &mine.rkey));
  std::vector<RegRecord> all(n);
  all[static_cast<size_t>(rank_)] = mine;
  FLAGCX_CHECK(comm_->bs->allgather(all.data(), sizeof(RegRecord)));
  peerSigRemote_.assign(n, {});
  for (size_t r = 0; r < n; r++) {
    peerSigRemote_[r].addr = all[r].addr + static_cast<uint64_t>(rank_) * kStride * sizeof(uint64_t);
    peerSigRemote_[r].rkey = all[r].rkey;
    if (static_cast<int>(r) == rank_) {
      peerSig_[r] = &sig_[r * kStride];
    } else if (local_[r] && all[r].shareable) {
      peerSigMap_[r] = importHost(all[r].ipc, provenPid_[r],
                                  (static_cast<uint64_t>(rank_) + 1) * kStride * sizeof(uint64_t),
                                  rank_, r);
      if (peerSigMap_[r])
        peerSig_[r] = static_cast<std::atomic<uint64_t> *>(peerSigMap_[r]) +
                      static_cast<size_t>(rank_) * kStride;
    }
  }
  int mapped = 0;
  for (size_t r = 0; r < n; r++) mapped += peerSigMap_[r] != nullptr;
  int natives = 0;
  for (int r = 0; r < nranks_; r++) natives += eng_->native(r) ? 1 : 0;
  INFO(kInit, "rank %d: one-sided ready: %d peer(s) through shared memory, %d by native RDMA, "
       "the others through the service thread", rank_, mapped, natives);
  return flagcxSuccess;
}

OneSided::~OneSided() {
  // Stream tasks still queued reference this object: waits give up now,
  // operations in the engine fail when it stops.
  closing_.store(true);
  auto settle = [this](int ms) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (tasks_.load() > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  settle(2000);
  eng_.reset();  // says goodbye to the peers, stops the service thread
  settle(2000);
  if (tasks_.load() > 0)
    WARN(kInit, "rank %d: %d one-sided stream operation(s) still queued at destroy", rank_,
         tasks_.load());
  comm_->dev->releaseLane(this);
  for (auto &w : windows_) release(&w->reg);
  for (auto &r : regions_) release(&r);
  for (void *p : peerSigMap_)
    if (p) host::ipcClose(p);
  if (sigBlock_) host::memFree(sigBlock_);
}

flagcxResult_t OneSided::exchange(void *buf, size_t size, uint32_t key, RegInfo *out) {
  size_t n = static_cast<size_t>(nranks_);
  RegRecord mine{};
  mine.size = size;
  mine.device = comm_->dev->isDeviceMemory(buf) ? 1 : 0;
  if (!mine.device) mine.shareable = exportHost(buf, size, mine.ipc);
  else mine.shareable = comm_->dev->ipcSupported() && comm_->dev->ipcExport(buf, mine.ipc) == flagcxSuccess;
  std::vector<RegRecord> all(n);
  all[static_cast<size_t>(rank_)] = mine;
  // Ready for requests before any peer learns of the memory: a peer may
  // leave the allgather and write before this rank does.
  all[static_cast<size_t>(rank_)].addr = reinterpret_cast<uintptr_t>(buf);
  FLAGCX_CHECK(eng_->expose(key, buf, size, &all[static_cast<size_t>(rank_)].rkey));
  flagcxResult_t rc = comm_->bs->allgather(all.data(), sizeof(RegRecord));
  // Device memory: every rank must reach every other through a mapping
  // (CUDA IPC, one host); the same verdict on every rank.
  bool anyDevice = false;
  for (size_t r = 0; r < n; r++) anyDevice = anyDevice || all[r].device;
  // The refusal is the complement of the mapping below: a peer is mapped
  // only when local_ (itself, or reached over shm).
  for (size_t r = 0; r < n && rc == flagcxSuccess && anyDevice; r++) {
    if (comm_->nNodes > 1 || !local_[r] || (all[r].device && !all[r].shareable)) {
      WARN(kInit, "rank %d: one-sided registration: device memory is supported between ranks of "
           "one host with CUDA IPC only (rank %zu: %s)", rank_, r,
           comm_->nNodes > 1 ? "several hosts" : all[r].device && !all[r].shareable
                                                    ? "its buffer cannot be exported"
                                                    : "not reached over shared memory");
      rc = flagcxNotSupported;
    }
  }
  if (rc != flagcxSuccess) {
    eng_->withdraw(key);
    return rc;
  }
  out->key = key;
  out->base = static_cast<char *>(buf);
  out->size = size;
  out->peer.assign(n, {});
  for (size_t r = 0; r < n; r++) {
    RegInfo::Remote &rm = out->peer[r];
    rm.size = all[r].size;
    rm.addr = all[r].addr;
    rm.rkey = all[r].rkey;
    if (static_cast<int>(r) == rank_) {
      rm.mapped = out->base;
    } else if (local_[r] && all[r].shareable && all[r].device) {
      void *base = nullptr;
      if (comm_->dev->ipcImportBase(all[r].ipc, &base) != flagcxSuccess) {
        WARN(kInit, "rank %d: one-sided registration: cannot map rank %zu's device buffer", rank_, r);
        release(out);
        eng_->withdraw(key);
        return flagcxSystemError;
      }
      rm.deviceBase = base;
      uint64_t off = comm_->dev->ipcOffset(all[r].ipc), have = comm_->dev->ipcMappedBytes(base);
      if (off > have || rm.size > have - off) {
        WARN(kInit, "rank %d: one-sided registration: rank %zu's device buffer (offset %llu, %llu "
             "bytes) lies outside the %llu-byte allocation it shared", rank_, r,
             static_cast<unsigned long long>(off), static_cast<unsigned long long>(rm.size),
             static_cast<unsigned long long>(have));
        release(out);
        eng_->withdraw(key);
        return flagcxRemoteError;
      }
      rm.mapped = static_cast<char *>(base) + off;
    } else if (local_[r] && all[r].shareable) {
      rm.mapped = static_cast<char *>(importHost(all[r].ipc, provenPid_[r], rm.size, rank_, r));
      rm.ownsMap = rm.mapped != nullptr;
    }
  }
  out->device = anyDevice;
  return flagcxSuccess;
}

void OneSided::release(RegInfo *reg) {
  if (eng_) eng_->withdraw(reg->key);
  for (auto &rm : reg->peer) {
    if (rm.ownsMap) host::ipcClose(rm.mapped);
    if (rm.deviceBase) comm_->dev->ipcRelease(rm.deviceBase);
  }
  reg->peer.clear();
}

flagcxResult_t OneSided::windowRegister(void *buf, size_t size, int flags, flagcxWindow **out) {
  // Symmetric windows: every rank must give the same size (checked by all).
  uint64_t sizes[2] = {size, static_cast<uint64_t>(flags)};
  std::vector<uint64_t> all(static_cast<size_t>(nranks_) * 2);
  memcpy(&all[static_cast<size_t>(rank_) * 2], sizes, sizeof(sizes));
  FLAGCX_CHECK(comm_->bs->allgather(all.data(), sizeof(sizes)));
  for (int r = 0; r < nranks_; r++) {
    uint64_t rs = all[static_cast<size_t>(r) * 2], rf = all[static_cast<size_t>(r) * 2 + 1];
    if (rf != static_cast<uint64_t>(flags))
      return argError(flagcxInvalidArgument, kInit, "flagcxCommWindowRegister: rank %d passed "
                      "winFlags %llu, this rank %d", r, static_cast<unsigned long long>(rf), flags);
    if ((flags & FLAGCX_WIN_COLL_SYMMETRIC) && rs != size)
      return argError(flagcxInvalidArgument, kInit, "flagcxCommWindowRegister: "
                      "FLAGCX_WIN_COLL_SYMMETRIC needs one size on every rank: rank %d registered "
                      "%llu bytes, this rank %zu", r, static_cast<unsigned long long>(rs), size);
  }
  auto w = std::make_unique<flagcxWindow>();
  w->owner = this;
  uint32_t id;
  {
    std::lock_guard<std::mutex> g(mu_);
    id = nextWindow_++;
  }
  FLAGCX_CHECK(exchange(buf, size, kWindowKey | id, &w->reg));
  signalsReady_ = true;
  std::lock_guard<std::mutex> g(mu_);
  *out = w.get();
  windows_.push_back(std::move(w));
  return flagcxSuccess;
}

bool OneSided::isWindow(const flagcxWindow *w) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto &x : windows_)
    if (x.get() == w) return true;
  return false;
}

bool OneSided::findReg(const void *buf, size_t size, const flagcxWindow *win, RegInfo *out) const {
  auto holds = [&](const RegInfo &r) {
    const char *p = static_cast<const char *>(buf);
    return r.base && p >= r.base && size <= r.size && static_cast<uint64_t>(p - r.base) <= r.size - size;
  };
  std::lock_guard<std::mutex> g(mu_);
  for (auto &w : windows_)
    if ((!win || w.get() == win) && holds(w->reg)) return *out = w->reg, true;
  for (auto &r : regions_)
    if (!win && holds(r)) return *out = r, true;
  return false;
}

flagcxResult_t OneSided::windowDeregister(flagcxWindow *win) {
  // Operations on it finish first, here and (barrier) everywhere.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (win->inflight.load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  if (win->inflight.load() > 0) {
    WARN(kInit, "rank %d: flagcxCommWindowDeregister: %d operation(s) on the window still "
         "enqueued (synchronize their streams first)", rank_, win->inflight.load());
    return flagcxInvalidUsage;
  }
  FLAGCX_CHECK(comm_->bs->barrier());
  std::unique_ptr<flagcxWindow> keep;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = windows_.begin(); it != windows_.end(); ++it)
      if (it->get() == win) {
        keep = std::move(*it);
        windows_.erase(it);
        break;
      }
  }
  release(&keep->reg);
  keep->magic = 0;
  return flagcxSuccess;
}

flagcxResult_t OneSided::regionRegister(void *buf, size_t size) {
  RegInfo reg;
  uint32_t idx;
  {
    std::lock_guard<std::mutex> g(mu_);
    idx = static_cast<uint32_t>(regions_.size());
  }
  FLAGCX_CHECK(exchange(buf, size, idx, &reg));
  std::lock_guard<std::mutex> g(mu_);
  regions_.push_back(std::move(reg));
  return flagcxSuccess;
}

int OneSided::regions() const {
  std::lock_guard<std::mutex> g(mu_);
  return static_cast<int>(regions_.size());
}

uint64_t OneSided::regionSize(int idx, int rank) const {
  std::lock_guard<std::mutex> g(mu_);
  return regions_[static_cast<size_t>(idx)].peer[static_cast<size_t>(rank)].size;
}

flagcxResult_t OneSided::signalRegister(void *buf, size_t size, int ptrType) {
  if (sigUser_ && sigUser_ != buf)
    return argError(flagcxInvalidUsage, kInit, "flagcxOneSideSignalRegister: a signal buffer "
                    "(%p) is registered already", sigUser_);
  (void)size;
  (void)ptrType;
  sigUser_ = buf;
  signalsReady_ = true;
  return comm_->bs->barrier();
}

flagcxResult_t OneSided::stagingRegister(void *buf, size_t size) {
  staging_ = buf;
  stagingSize_ = size;
  return comm_->bs->barrier();
}

flagcxResult_t OneSided::stagingDeregister() {
  staging_ = nullptr;
  stagingSize_ = 0;
  return flagcxSuccess;
}

}  // namespace flagcx
