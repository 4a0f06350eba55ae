#include "core/comm.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include "base/log.h"
#include "base/params.h"
#include "adapters/ccl/ccl.h"
#include "exec/enqueue.h"
#include "net/ibverbs/ib_transport.h"
#include "sched/algo_set.h"

namespace flagcx {

namespace {
std::mutex g_liveMu;
std::set<const flagcxComm *> g_live;

uint64_t fnv1a(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

uint64_t localHostHash(std::string *hostName) {
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  *hostName = host;
  const std::string &over = paramStr(Param::HOSTID);
  if (!over.empty()) return fnv1a("hostid:" + over);
  // Hostname plus the boot id: two containers with equal names on different
  // machines stay apart, and `unshare -u` gives a rank its own host.
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return fnv1a(std::string(host) + "/" + boot);
}
}  // namespace

bool commIsLive(const flagcxComm *comm) {
  std::lock_guard<std::mutex> lk(g_liveMu);
  return g_live.count(comm) != 0 && comm->magic == flagcxComm::kMagic;
}

// Clusters of ranks: by device kind (in order of first appearance), or the
// sizes of FLAGCX_CLUSTER_SPLIT_LIST over consecutive ranks.  The list must
// add up to nranks and be the same on every rank (checked collectively).
static flagcxResult_t assignClusters(flagcxComm *comm) {
  int n = comm->nranks;
  const auto &peers = comm->bs->peers();
  comm->clusterOf.assign(static_cast<size_t>(n), 0);
  const std::string &list = paramStr(Param::CLUSTER_SPLIT_LIST);
  uint64_t mine = 0;  // 0: no list
  std::string bad;
  if (!list.empty()) {
    std::vector<int> sizes;
    size_t pos = 0;
    while (pos <= list.size() && bad.empty()) {
      size_t comma = list.find(',', pos);
      std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      char *end = nullptr;
      long v = strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || v <= 0 || v > n) bad = "'" + item + "' is not a size in 1.." + std::to_string(n);
      else sizes.push_back(static_cast<int>(v));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    int sum = 0;
    for (int v : sizes) sum += v;
    if (bad.empty() && sum != n)
      bad = "the sizes add up to " + std::to_string(sum) + ", not to the " + std::to_string(n) + " ranks";
    int r = 0;
    for (size_t c = 0; bad.empty() && c < sizes.size(); c++)
      for (int k = 0; k < sizes[c]; k++) comm->clusterOf[static_cast<size_t>(r++)] = static_cast<int>(c);
    mine = fnv1a("clusters:" + list);
    if (!bad.empty()) mine = 1;  // never equal to a valid list's hash on another rank
  }
  std::vector<uint64_t> all(static_cast<size_t>(n));
  all[static_cast<size_t>(comm->rank)] = mine;
  FLAGCX_CHECK(comm->bs->allgather(all.data(), sizeof(uint64_t)));
  if (!bad.empty())
    return argError(flagcxInvalidArgument, kInit, "rank %d: FLAGCX_CLUSTER_SPLIT_LIST=%s: %s",
                    comm->rank, list.c_str(), bad.c_str());
  for (int r = 0; r < n; r++)
    if (all[static_cast<size_t>(r)] != mine)
      return argError(flagcxInvalidArgument, kInit, "rank %d: FLAGCX_CLUSTER_SPLIT_LIST differs "
                      "between ranks (rank %d has another value than this rank's '%s')",
                      comm->rank, r, list.c_str());
  if (list.empty()) {
    std::vector<int> kinds;  // device kind of each cluster
    for (int r = 0; r < n; r++) {
      int k = peers[static_cast<size_t>(r)].deviceKind;
      auto it = std::find(kinds.begin(), kinds.end(), k);
      if (it == kinds.end()) it = kinds.insert(kinds.end(), k);
      comm->clusterOf[static_cast<size_t>(r)] = static_cast<int>(it - kinds.begin());
    }
  }
  comm->nclusters = 1 + *std::max_element(comm->clusterOf.begin(), comm->clusterOf.end());
  if (comm->nclusters > 1) comm->homogeneous = false;
  INFO(kInit, "rank %d: %d cluster(s)%s; this rank is in cluster %d", comm->rank, comm->nclusters,
       list.empty() ? " by device kind" : " from FLAGCX_CLUSTER_SPLIT_LIST",
       comm->clusterOf[static_cast<size_t>(comm->rank)]);
  return flagcxSuccess;
}

// Direct mode (device memory read in place by same-host peers) needs every
// rank to agree: each votes, and it is on only when all can and want it.
static flagcxResult_t chooseDirect(flagcxComm *comm) {
  if (comm->ccl) return flagcxSuccess;  // the same on every rank
  bool can = comm->dev->ipcSupported() && comm->nNodes == 1 && paramInt(Param::IPC_DISABLE) == 0;
  for (const PeerInfo &p : comm->bs->peers()) can = can && p.deviceKind == 1;
  std::vector<int32_t> votes(static_cast<size_t>(comm->nranks), 0);
  votes[static_cast<size_t>(comm->rank)] = can ? 1 : 0;
  FLAGCX_CHECK(comm->bs->allgather(votes.data(), sizeof(int32_t)));
  bool all = true;
  for (int32_t v : votes) all = all && v == 1;
  if (!all) return flagcxSuccess;
  // Every rank's outbox, mapped by every peer now (small messages never map
  // anything on the progress thread).
  constexpr size_t kOutbox = 16 << 20;
  DeviceAdapter *dev = comm->dev;
  FLAGCX_CHECK(dev->prepareEngine());
  void *ob = nullptr;
  FLAGCX_CHECK(dev->allocDevice(&ob, kOutbox));
  comm->outbox = static_cast<char *>(ob);
  comm->outboxBytes = kOutbox;
  size_t rb = DeviceAdapter::kIpcRefBytes;
  std::vector<char> refs(rb * static_cast<size_t>(comm->nranks), 0);
  FLAGCX_CHECK(dev->ipcExport(ob, refs.data() + rb * static_cast<size_t>(comm->rank)));
  FLAGCX_CHECK(comm->bs->allgather(refs.data(), rb));
  comm->peerOutbox.assign(static_cast<size_t>(comm->nranks), nullptr);
  for (int p = 0; p < comm->nranks; p++) {
    if (p == comm->rank) continue;
    void *base = nullptr;
    flagcxResult_t r = dev->ipcImportBase(refs.data() + rb * static_cast<size_t>(p), &base);
    if (r != flagcxSuccess) {
      WARN(kInit, "rank %d: mapping the outbox of rank %d (CUDA IPC) failed", comm->rank, p);
      return r;
    }
    comm->peerOutbox[static_cast<size_t>(p)] = static_cast<char *>(base);
  }
  comm->direct = true;
  return flagcxSuccess;
}

flagcxResult_t commInit(flagcxComm **out, int nranks, const flagcxUniqueId &id, int rank) {
  DeviceAdapter *dev = selectedAdapter();
  if (!dev) {
    return argError(flagcxInvalidUsage, kInit, "FLAGCX_DEVICE=%s: that device adapter is not "
                    "available in this build or on this machine", paramStr(Param::DEVICE).c_str());
  }
  auto comm = std::make_unique<flagcxComm>();
  comm->rank = rank;
  comm->nranks = nranks;
  comm->dev = dev;
  comm->staged = strcmp(dev->name(), "host") != 0;
  int64_t nch = paramInt(Param::NCHANNELS);
  comm->nchannels = static_cast<int>(nch < 1 ? 1 : nch > 16 ? 16 : nch);
  logSetRank(rank);
  comm->flight.init(rank, nranks, static_cast<size_t>(std::max<int64_t>(1, paramInt(Param::FLIGHT_RECORDER_SIZE))));

  PeerInfo self;
  std::string hostName;
  self.hostHash = localHostHash(&hostName);
  self.pid = getpid();
  self.deviceKind = strcmp(dev->name(), "host") == 0 ? 0 : 1;
  snprintf(self.host, sizeof(self.host), "%s", hostName.c_str());
  FLAGCX_CHECK(Bootstrap::create(id, rank, nranks, self, &comm->bs));
  const auto &peers = comm->bs->peers();

  // Local rank, ranks per host, number of hosts.
  std::vector<uint64_t> hosts;
  comm->localRank = 0;
  comm->localRanks = 0;
  for (int r = 0; r < nranks; r++) {
    const PeerInfo &p = peers[static_cast<size_t>(r)];
    if (p.hostHash == self.hostHash) {
      if (r < rank) comm->localRank++;
      comm->localRanks++;
    }
    bool seen = false;
    for (auto h : hosts) seen = seen || h == p.hostHash;
    if (!seen) hosts.push_back(p.hostHash);
    if (p.deviceKind != self.deviceKind) comm->homogeneous = false;
  }
  comm->nNodes = static_cast<int>(hosts.size());
  FLAGCX_CHECK(assignClusters(comm.get()));

  // Transports: same host -> shm (unless disabled), otherwise socket.
  bool shmOff = paramInt(Param::SHM_DISABLE) != 0;
  std::vector<int> shmPeers, sockPeers;
  for (int r = 0; r < nranks; r++) {
    if (r == rank) continue;
    bool same = peers[static_cast<size_t>(r)].hostHash == self.hostHash;
    (same && !shmOff ? shmPeers : sockPeers).push_back(r);
  }
  // Network peers over verbs where both ends have an RDMA port (collective).
  std::vector<int> ibPeers;
  std::unique_ptr<Transport> ib;  // its Conns keep what they need alive
  FLAGCX_CHECK(ibSplitPeers(*comm->bs, &shmPeers, &sockPeers, &ibPeers, &ib));
  comm->conns.resize(static_cast<size_t>(nranks * comm->nchannels));
  // Every rank calls connectAll for both transports (possibly with no peers)
  // so that collective set-up steps inside them line up.
  comm->shm = makeShmTransport();
  comm->sock = makeSocketTransport();
  struct Plan {
    Transport *t;
    std::vector<int> *peers;
  } plans[] = {{comm->shm.get(), &shmPeers}, {comm->sock.get(), &sockPeers}, {ib.get(), &ibPeers}};
  for (auto &pl : plans) {
    if (pl.t == nullptr) continue;  // ib: no verbs peers
    std::vector<std::unique_ptr<Conn>> conns;
    flagcxResult_t r = pl.t->connectAll(*comm->bs, *pl.peers, comm->nchannels, &conns);
    if (r != flagcxSuccess) {
      WARN(kInit, "rank %d: setting up the %s transport failed", rank, pl.t->name());
      return r;
    }
    for (size_t i = 0; i < pl.peers->size(); i++)
      for (int c = 0; c < comm->nchannels; c++)
        comm->conns[static_cast<size_t>((*pl.peers)[i] * comm->nchannels + c)] =
            std::move(conns[i * static_cast<size_t>(comm->nchannels) + static_cast<size_t>(c)]);
  }
  // Hierarchical algorithms group ranks by host; with equal clusters from
  // FLAGCX_CLUSTER_SPLIT_LIST they group by cluster instead.
  int groupSize = comm->localRanks;
  if (paramIsSet(Param::CLUSTER_SPLIT_LIST) && comm->nclusters > 1 &&
      nranks % comm->nclusters == 0) {
    bool equal = true;
    for (int r = 0; r < nranks; r++)
      equal = equal && comm->clusterOf[static_cast<size_t>(r)] == r / (nranks / comm->nclusters);
    if (equal) groupSize = nranks / comm->nclusters;
  }
  FLAGCX_CHECK(AlgoSet::create(rank, nranks, groupSize, &comm->algos));
  FLAGCX_CHECK(makeVendorCcl(comm.get(), &comm->ccl));
  FLAGCX_CHECK(chooseDirect(comm.get()));
  FLAGCX_CHECK(comm->bs->barrier());
  INFO(kInit, "rank %d/%d ready: device %s, host %s (local rank %d of %d, %d host(s)), "
       "%zu shm peer(s), %zu socket peer(s), %zu verbs peer(s), %d channel(s)%s", rank, nranks,
       dev->name(), self.host, comm->localRank, comm->localRanks, comm->nNodes, shmPeers.size(),
       sockPeers.size(), ibPeers.size(), comm->nchannels,
       comm->ccl ? ", vendor CCL" : comm->direct ? ", device buffers by CUDA IPC" : "");
  {
    std::lock_guard<std::mutex> lk(g_liveMu);
    g_live.insert(comm.get());
  }
  *out = comm.release();
  return flagcxSuccess;
}

flagcxResult_t commDestroy(flagcxComm *comm, bool abort) {
  {
    std::lock_guard<std::mutex> lk(g_liveMu);
    g_live.erase(comm);
  }
  flagcxResult_t res = flagcxSuccess;
  if (abort) {
    comm->aborting = true;
    if (comm->bs) comm->bs->abort();
  }
  // Let enqueued work finish (or fail fast when aborting) before freeing.
  Backoff wait;
  auto abortDeadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (comm->inFlight.load() > 0) {
    if (abort ? std::chrono::steady_clock::now() > abortDeadline : wait.expired()) {
      WARN(kInit, "rank %d: %d operation(s) still in flight at %s; freeing anyway",
           comm->rank, comm->inFlight.load(), abort ? "abort" : "destroy");
      res = flagcxInternalError;
      // Leak the communicator: a stream task still references it.
      comm->magic = 0;
      return res;
    }
    wait.idle();
  }
  if (comm->ccl) {
    flagcxResult_t r = comm->ccl->destroy(abort);
    if (res == flagcxSuccess) res = r;
    comm->ccl.reset();
  }
  comm->magic = 0;
  freeJobs(comm);
  for (auto &kv : comm->ipcImports) comm->dev->ipcRelease(kv.second);
  for (char *p : comm->peerOutbox)
    if (p) comm->dev->ipcRelease(p);
  if (comm->outbox) comm->dev->freeDevice(comm->outbox);
  for (flagcxComm::DevBuf *b : {&comm->dScratch, &comm->dInPlace, &comm->dInAlt, &comm->dOutAlt,
                                &comm->dStageIn, &comm->dStageOut})
    if (b->p.load()) comm->dev->freeDevice(b->p.load());
  for (void *p : comm->dRetired) comm->dev->freeDevice(p);
  for (flagcxComm::DevBuf *b : {&comm->pStageIn, &comm->pStageOut})
    if (b->p.load()) comm->dev->freePinned(b->p.load());
  for (void *p : comm->pRetired) comm->dev->freePinned(p);
  delete comm;
  return res;
}

flagcxResult_t commWaitTurn(flagcxComm *comm, uint64_t ticket) {
  if (comm->doneTicket.load(std::memory_order_acquire) == ticket) return flagcxSuccess;
  Backoff wait;
  while (comm->doneTicket.load(std::memory_order_acquire) != ticket) {
    if (comm->aborting) return flagcxRemoteError;
    if (wait.expired()) {
      WARN(kColl, "rank %d: operation #%llu waited FLAGCX_TIMEOUT for operation #%llu (on "
           "another stream) to finish", comm->rank, static_cast<unsigned long long>(ticket),
           static_cast<unsigned long long>(comm->doneTicket.load()));
      return flagcxSystemError;
    }
    wait.idle();
  }
  return flagcxSuccess;
}

void commFinishTurn(flagcxComm *comm, uint64_t ticket, flagcxResult_t res) {
  if (res != flagcxSuccess) {
    int expected = flagcxSuccess;
    comm->asyncError.compare_exchange_strong(expected, res);
    std::lock_guard<std::mutex> lk(comm->mu);
    comm->lastError = lastErrorText();
  }
  comm->doneTicket.store(ticket + 1, std::memory_order_release);
}

}  // namespace flagcx
