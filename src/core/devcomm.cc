// Device communicators and device memory handles (flagcx_kernel.h), host
// side: requirements checked the same on every rank, teams from the ranks'
// hosts, each rank's signal/barrier block registered as a one-sided window,
// DevMem over a registered window or region, and the table the proxy finds
// DevMems in.
#include "core/devcomm.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "base/base.h"
#include "core/comm.h"

namespace flagcx {

namespace {

constexpr uint64_t kQueueSlots = 1024;
constexpr int kMaxSlots = 1 << 16;  // signals, counters, barriers of one kind

struct Handles {
  std::vector<flagcxDevCommInternal *> comms;
  std::vector<flagcxDevMemInternal *> mems;  // [id]; null once destroyed
};
std::mutex g_mu;
std::map<const flagcxComm *, Handles> g_handles;

flagcxResult_t checkReqs(const flagcxDevCommRequirements &r) {
  const char *fn = "flagcxDevCommCreate";
  if (r.intraMulticast)
    return argError(flagcxNotSupported, kInit, "%s: intraMulticast: no multicast memory here", fn);
  if (r.intraLLA2ABlockCount != 0 || r.intraLLA2ASlotCount != 0)
    return argError(flagcxNotSupported, kInit, "%s: intraLLA2ABlockCount/intraLLA2ASlotCount: the "
                    "low-latency all-to-all buffers are not provided (ask for 0)", fn);
  int counts[] = {r.barrierCount, r.intraBarrierCount, r.interBarrierCount, r.interSignalCount,
                  r.interCounterCount, r.interContextCount};
  const char *names[] = {"barrierCount", "intraBarrierCount", "interBarrierCount",
                         "interSignalCount", "interCounterCount", "interContextCount"};
  for (int i = 0; i < 6; i++)
    if (counts[i] < 0 || counts[i] > kMaxSlots)
      return argError(flagcxInvalidArgument, kInit, "%s: %s is %d, not in [0, %d]", fn, names[i],
                      counts[i], kMaxSlots);
  return flagcxSuccess;
}

// Teams: INTRA = the ranks of this host in rank order; INTER = per host (in
// the order hosts first appear), the rank with this rank's index in its host.
void makeTeams(flagcxComm *comm, flagcxDevCommInternal *dc) {
  const auto &peers = comm->bs->peers();
  int n = comm->nranks;
  std::vector<uint64_t> hosts;
  std::vector<std::vector<int32_t>> byHost;
  for (int r = 0; r < n; r++) {
    uint64_t h = peers[static_cast<size_t>(r)].hostHash;
    size_t i = static_cast<size_t>(std::find(hosts.begin(), hosts.end(), h) - hosts.begin());
    if (i == hosts.size()) hosts.push_back(h), byHost.emplace_back();
    byHost[i].push_back(r);
  }
  uint64_t me = peers[static_cast<size_t>(comm->rank)].hostHash;
  size_t myHost = static_cast<size_t>(std::find(hosts.begin(), hosts.end(), me) - hosts.begin());
  dc->team[FLAGCX_TEAM_INTRA] = byHost[myHost];
  size_t myIdx = static_cast<size_t>(
      std::find(byHost[myHost].begin(), byHost[myHost].end(), comm->rank) - byHost[myHost].begin());
  for (auto &h : byHost)
    if (myIdx < h.size()) dc->team[FLAGCX_TEAM_INTER].push_back(h[myIdx]);
  for (int r = 0; r < n; r++) dc->team[FLAGCX_TEAM_WORLD].push_back(r);
  for (int k = 0; k < 3; k++) {
    auto &t = dc->team[k];
    dc->view.teamWorld[k] = t.data();
    dc->view.teamSize[k] = static_cast<int32_t>(t.size());
    dc->view.teamRank[k] =
        static_cast<int32_t>(std::find(t.begin(), t.end(), comm->rank) - t.begin());
  }
}

// Rows, private words, the queue; the view's pointers to them.
flagcxResult_t layout(flagcxComm *comm, flagcxDevCommInternal *dc) {
  const flagcxDevCommRequirements &r = dc->reqs;
  flagcxDevCommView &v = dc->view;
  v.magic = FLAGCX_DEV_COMM_MAGIC;
  v.commId = reinterpret_cast<uintptr_t>(comm);
  v.rank = comm->rank;
  v.nRanks = comm->nranks;
  v.timeoutNs = static_cast<uint64_t>(paramInt(Param::TIMEOUT)) * 1000000000ull;
  v.nSignals = r.interSignalCount;
  v.nCounters = r.interCounterCount;
  v.nBarriers[FLAGCX_TEAM_INTRA] = r.intraBarrierCount;
  v.nBarriers[FLAGCX_TEAM_INTER] = r.interBarrierCount;
  v.nBarriers[FLAGCX_TEAM_WORLD] = r.barrierCount;
  int rows = v.nSignals;
  for (int k = 0; k < 3; k++) v.barrierRow[k] = rows, rows += v.nBarriers[k];
  size_t n = static_cast<size_t>(comm->nranks), nr = static_cast<size_t>(rows);
  dc->blockBytes = std::max<size_t>(nr * n * sizeof(uint64_t), 64);
  size_t ns = static_cast<size_t>(v.nSignals), nc = static_cast<size_t>(v.nCounters);
  dc->local.assign(2 * ns + nc + nr + 1, 0);
  dc->sent.assign(nr * n, 0);
  if (dc->cuda) return cudaLayout(dc);
  FLAGCX_CHECK(host::memAlloc(&dc->block, dc->blockBytes, flagcxMemDevice));
  memset(dc->block, 0, dc->blockBytes);
  v.words = static_cast<uint64_t *>(dc->block);
  v.signalBase = dc->local.data();
  v.shadow = v.signalBase + ns;
  v.counters = v.shadow + ns;
  v.epoch = v.counters + nc;
  FLAGCX_CHECK(host::memAlloc(&dc->queueMem, devQueueBytes(), flagcxMemHost));
  memset(dc->queueMem, 0, devQueueBytes());
  v.queue = devQueueInit(dc->queueMem);
  v.error = &dc->errorWord;
  return flagcxSuccess;
}

void freeMemory(flagcxDevCommInternal *dc) {
  if (dc->cuda) {
    cudaRelease(dc->comm, &dc->dev);  // the block and queue among them
    dc->block = dc->queueMem = nullptr;
    return;
  }
  if (dc->block) host::memFree(dc->block);
  if (dc->queueMem) host::memFree(dc->queueMem);
  dc->block = dc->queueMem = nullptr;
}

}  // namespace

size_t devQueueBytes() {
  return sizeof(flagcxDevQueue) + (kQueueSlots - 1) * sizeof(flagcxDevDesc);
}

flagcxDevQueue *devQueueInit(void *mem) {
  flagcxDevQueue *q = static_cast<flagcxDevQueue *>(mem);
  q->capacity = kQueueSlots;
  for (uint64_t i = 0; i < kQueueSlots; i++) q->slot[i].seq = i;
  return q;
}

namespace {

flagcxResult_t oneSided(flagcxComm *comm, bool create, OneSided **os) {
  std::lock_guard<std::mutex> g(comm->osMu);
  if (!comm->os && create) FLAGCX_CHECK(OneSided::ensure(comm));
  *os = comm->os.get();
  return flagcxSuccess;
}

}  // namespace

flagcxResult_t devCommCreate(flagcxComm *comm, const flagcxDevCommRequirements &reqs,
                             flagcxDevCommInternal **out) {
  // The same verdict everywhere: the requirements and device kinds travel
  // first, and whether CUDA kernels may map every peer (one host, every
  // rank CUDA, IPC on) or go through the proxy.
  struct Rec {
    flagcxDevCommRequirements reqs;
    int32_t kind;
    int32_t ipc;  // a CUDA rank whose device memory same-host peers may map
    int32_t hasGpu;
    unsigned char gpu[16];  // its GPU's UUID (kernels' scopes, devcomm_cuda.cc)
  };
  std::vector<Rec> all(static_cast<size_t>(comm->nranks));
  Rec mine{};
  memcpy(&mine.reqs, &reqs, sizeof(reqs));
  mine.kind = static_cast<int32_t>(comm->dev->kind());
  mine.ipc = comm->dev->ipcSupported() && paramInt(Param::IPC_DISABLE) == 0;
  mine.hasGpu = comm->dev->deviceUuid(mine.gpu);
  all[static_cast<size_t>(comm->rank)] = mine;
  FLAGCX_CHECK(comm->bs->allgather(all.data(), sizeof(Rec)));
  bool anyCuda = false, mixed = false, noIpc = false;
  for (int r = 0; r < comm->nranks; r++) {
    const Rec &x = all[static_cast<size_t>(r)];
    if (memcmp(&x.reqs, &reqs, sizeof(reqs)) != 0)
      return argError(flagcxInvalidArgument, kInit, "flagcxDevCommCreate: rank %d passed other "
                      "requirements than this rank %d (they must be equal)", r, comm->rank);
    anyCuda = anyCuda || x.kind == static_cast<int32_t>(DeviceKind::Cuda);
    mixed = mixed || x.kind != all[0].kind;
    noIpc = noIpc || !x.ipc;
  }
  FLAGCX_CHECK(checkReqs(reqs));
  OneSided *os = nullptr;
  FLAGCX_CHECK(oneSided(comm, true, &os));
  auto dc = std::make_unique<flagcxDevCommInternal>();
  dc->comm = comm;
  dc->reqs = reqs;
  dc->cuda = comm->dev->kind() == DeviceKind::Cuda;
  // CUDA kernels go direct only when every pair of ranks is mapped by CUDA
  // IPC; otherwise every call of theirs goes through the proxy.
  dc->viaProxy = dc->cuda && (mixed || noIpc || comm->nNodes > 1);
  for (const Rec &x : all)
    dc->sameGpu.push_back(mine.hasGpu && x.hasGpu && memcmp(x.gpu, mine.gpu, sizeof(x.gpu)) == 0);
  makeTeams(comm, dc.get());
  flagcxResult_t rc = layout(comm, dc.get());
  if (rc == flagcxSuccess) rc = os->windowRegister(dc->block, dc->blockBytes, 0, &dc->blockWin);
  if (rc != flagcxSuccess) {
    freeMemory(dc.get());
    return rc;
  }
  // Every rank's block has this rank's size (the same requirements):
  // signals go to words up to it, in a mapping that holds only what the
  // peer registered.  The same verdict on every rank.
  for (size_t r = 0; r < dc->blockWin->reg.peer.size() && rc == flagcxSuccess; r++)
    if (dc->blockWin->reg.peer[r].size != dc->blockBytes)
      rc = argError(flagcxRemoteError, kInit, "flagcxDevCommCreate: rank %zu registered a "
                    "%llu-byte signal block, this rank %d %zu bytes", r,
                    static_cast<unsigned long long>(dc->blockWin->reg.peer[r].size), comm->rank,
                    dc->blockBytes);
  if (rc != flagcxSuccess) {
    os->windowDeregister(dc->blockWin);
    freeMemory(dc.get());
    return rc;
  }
  for (auto &p : dc->blockWin->reg.peer)
    dc->peerWords.push_back(reinterpret_cast<uint64_t *>(p.mapped));
  dc->view.peerWords = dc->peerWords.data();
  if (dc->cuda && (rc = cudaPublish(dc.get())) != flagcxSuccess) {
    os->windowDeregister(dc->blockWin);
    freeMemory(dc.get());
    return rc;
  }
  if (!dc->cuda || dc->viaProxy) proxyStart(dc.get());
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_handles[comm].comms.push_back(dc.get());
  }
  int mapped = 0;
  for (auto *p : dc->peerWords) mapped += p != nullptr;
  INFO(kInit, "rank %d: device communicator: %d signal(s), %d counter(s), barriers %d/%d/%d "
       "(intra/inter/world), %d of %d ranks' words mapped, the others through the proxy%s",
       comm->rank, dc->view.nSignals, dc->view.nCounters, reqs.intraBarrierCount,
       reqs.interBarrierCount, reqs.barrierCount, mapped, comm->nranks,
       dc->viaProxy ? " (CUDA kernels: every call through the proxy)" : "");
  *out = dc.release();
  return flagcxSuccess;
}

flagcxResult_t devCommDestroy(flagcxDevCommInternal *dc) {
  flagcxComm *comm = dc->comm;
  {
    std::lock_guard<std::mutex> g(g_mu);
    auto &v = g_handles[comm].comms;
    v.erase(std::remove(v.begin(), v.end(), dc), v.end());
  }
  proxyStop(dc);
  OneSided *os = nullptr;
  FLAGCX_CHECK(oneSided(comm, false, &os));
  flagcxResult_t rc = os ? os->windowDeregister(dc->blockWin) : flagcxSuccess;
  int32_t err = dc->cuda ? cudaError(dc) : flagcxSuccess;
  if (err == flagcxSuccess) err = dc->errorWord;  // the proxy's (and host ranks' calls')
  freeMemory(dc);
  if (rc == flagcxSuccess && err != flagcxSuccess) rc = static_cast<flagcxResult_t>(err);
  dc->view.magic = 0;
  delete dc;
  return rc;
}

flagcxResult_t devMemCreate(flagcxComm *comm, void *buf, size_t size, flagcxWindow *win,
                            flagcxDevMemInternal **out) {
  const char *fn = "flagcxDevMemCreate";
  OneSided *os = nullptr;
  FLAGCX_CHECK(oneSided(comm, false, &os));
  if (!os)
    return argError(flagcxInvalidArgument, kInit, "%s: nothing is registered on this communicator "
                    "(flagcxCommWindowRegister or flagcxCommRegister first)", fn);
  if (win && !os->isWindow(win))
    return argError(flagcxInvalidArgument, kInit, "%s: win is not a window of this communicator%s",
                    fn, win->magic == flagcxWindow::kMagic ? " (it belongs to another one)" : "");
  auto dm = std::make_unique<flagcxDevMemInternal>();
  if (!os->findReg(buf, size, win, &dm->reg))
    return argError(flagcxInvalidArgument, kInit, "%s: [%p, +%zu) lies in no %s registered on this "
                    "communicator%s", fn, buf, size, win ? "part of the window" : "window or region",
                    win ? " (offset past the window)" : "");
  // Where every rank's part lies in its registration (collective).
  struct Rec { uint64_t key, off, size; };
  std::vector<Rec> all(static_cast<size_t>(comm->nranks));
  uint64_t off = static_cast<uint64_t>(static_cast<char *>(buf) - dm->reg.base);
  all[static_cast<size_t>(comm->rank)] = {dm->reg.key, off, size};
  FLAGCX_CHECK(comm->bs->allgather(all.data(), sizeof(Rec)));
  for (int r = 0; r < comm->nranks; r++) {
    const Rec &x = all[static_cast<size_t>(r)];
    if (x.key != dm->reg.key)
      return argError(flagcxInvalidArgument, kInit, "%s: rank %d named another registration than "
                      "this rank %d", fn, r, comm->rank);
    // Puts, gets and kernels reach rank r's part in its registration (a
    // mapping holds only what r registered): inside it, the same verdict
    // on every rank.
    const uint64_t regSize = dm->reg.peer[static_cast<size_t>(r)].size;
    if (x.off > regSize || x.size > regSize - x.off)
      return argError(flagcxRemoteError, kInit, "%s: rank %d's part [%llu, +%llu) lies "
                      "outside the %llu bytes it registered", fn, r,
                      static_cast<unsigned long long>(x.off),
                      static_cast<unsigned long long>(x.size),
                      static_cast<unsigned long long>(regSize));
  }
  dm->comm = comm;
  for (size_t r = 0; r < all.size(); r++) {
    const RegInfo::Remote &rm = dm->reg.peer[r];
    dm->peerRegOff.push_back(all[r].off);
    dm->peerSize.push_back(all[r].size);
    dm->peerBase.push_back(rm.mapped ? rm.mapped + all[r].off : nullptr);
  }
  flagcxDevMemView &v = dm->view;
  v.magic = FLAGCX_DEV_MEM_MAGIC;
  v.commId = reinterpret_cast<uintptr_t>(comm);
  v.base = static_cast<char *>(buf);
  v.size = size;
  v.peerBase = dm->peerBase.data();
  v.peerSize = dm->peerSize.data();
  if (comm->dev->kind() == DeviceKind::Cuda) FLAGCX_CHECK(cudaMemPublish(dm.get()));
  std::lock_guard<std::mutex> g(g_mu);
  auto &mems = g_handles[comm].mems;
  v.id = static_cast<uint32_t>(mems.size());
  mems.push_back(dm.get());
  *out = dm.release();
  return flagcxSuccess;
}

namespace {
// Whether dc's proxy has carried out every descriptor written to its ring:
// the slot of the next ticket is neither written (seq = t + 1) nor taken
// and running (seq = t + capacity).
bool ringDrained(const flagcxDevCommInternal *dc) {
  flagcxDevQueue *q = dc->view.queue;
  uint64_t t = __atomic_load_n(&q->done, __ATOMIC_ACQUIRE);
  return __atomic_load_n(&q->slot[t & (kQueueSlots - 1)].seq, __ATOMIC_ACQUIRE) == t;
}

// Before a DevMem goes: the proxies of comm finish what finished calls and
// kernels queued (a kernel's last puts need no flush to land), within
// FLAGCX_TIMEOUT.
void drainProxies(flagcxComm *comm) {
  std::vector<flagcxDevCommInternal *> comms;
  {
    std::lock_guard<std::mutex> g(g_mu);  // not held while waiting: the proxies take it
    comms = g_handles[comm].comms;
  }
  for (auto *dc : comms) {
    if (!dc->proxy.joinable()) continue;
    Backoff bo;
    while (!ringDrained(dc) && !bo.expired()) bo.idle();
    if (!ringDrained(dc))
      WARN(kP2P, "rank %d: flagcxDevMemDestroy: the device proxy did not finish its queue within "
           "FLAGCX_TIMEOUT", comm->rank);
  }
}
}  // namespace

flagcxResult_t devMemDestroy(flagcxComm *comm, flagcxDevMemInternal *dm) {
  drainProxies(comm);
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_handles[comm].mems[dm->view.id] = nullptr;
  }
  cudaRelease(comm, &dm->dev);
  dm->view.magic = 0;
  delete dm;
  return flagcxSuccess;
}

namespace {
// Whether h is in one of the registry's lists (`list` picks comms or mems).
template <typename T, typename List>
bool registered(const T *h, List list) {
  std::lock_guard<std::mutex> g(g_mu);
  for (auto &e : g_handles)
    for (auto *x : list(e.second))
      if (x == h) return true;
  return false;
}

// A live handle of comm, else one log line naming `what` and false.
template <typename T>
bool handleOf(flagcxComm *comm, T *h, bool live, const char *fn, const char *what) {
  if (!live)
    return argError(flagcxInvalidArgument, kInit, "%s: %s is not a live handle", fn, what), false;
  if (h->comm != comm)
    return argError(flagcxInvalidArgument, kInit, "%s: %s belongs to another communicator", fn,
                    what), false;
  return true;
}
}  // namespace

bool devCommLive(const flagcxDevCommInternal *h) {
  return registered(h, [](const Handles &x) -> const auto & { return x.comms; });
}

bool devMemLive(const flagcxDevMemInternal *h) {
  return registered(h, [](const Handles &x) -> const auto & { return x.mems; });
}

bool devCommOf(flagcxComm *comm, flagcxDevCommInternal *h, const char *fn) {
  return handleOf(comm, h, devCommLive(h), fn, "devComm");
}

bool devMemOf(flagcxComm *comm, flagcxDevMemInternal *h, const char *fn) {
  return handleOf(comm, h, devMemLive(h), fn, "devMem");
}

flagcxDevMemInternal *devMemById(flagcxComm *comm, uint32_t id) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_handles.find(comm);
  if (it == g_handles.end() || id >= it->second.mems.size()) return nullptr;
  return it->second.mems[id];
}

flagcxResult_t devCleanup(flagcxComm *comm) {
  Handles h;
  {
    std::lock_guard<std::mutex> g(g_mu);
    auto it = g_handles.find(comm);
    if (it == g_handles.end()) return flagcxSuccess;
    h = it->second;
  }
  flagcxResult_t rc = flagcxSuccess;
  for (auto *dc : h.comms) {
    flagcxResult_t r = devCommDestroy(dc);
    if (rc == flagcxSuccess) rc = r;
  }
  for (auto *dm : h.mems)
    if (dm) devMemDestroy(comm, dm);
  std::lock_guard<std::mutex> g(g_mu);
  g_handles.erase(comm);
  return rc;
}

void devForget(flagcxComm *comm) {
  Handles h;
  {
    std::lock_guard<std::mutex> g(g_mu);
    auto it = g_handles.find(comm);
    if (it == g_handles.end()) return;
    h = it->second;
    g_handles.erase(it);
  }
  for (auto *dc : h.comms) {
    dc->abandon.store(true);
    proxyStop(dc);
  }
  // The engine and the mappings go before the memory peers may still write.
  comm->os.reset();
  for (auto *dc : h.comms) {
    freeMemory(dc);
    dc->view.magic = 0;
    delete dc;
  }
  for (auto *dm : h.mems)
    if (dm) cudaRelease(comm, &dm->dev), delete dm;
}

}  // namespace flagcx
