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
  int64_t nch = paramInt(Param::NCHANNELS);
  comm->nchannels = static_cast<int>(nch < 1 ? 1 : nch > 16 ? 16 : nch);
  logSetRank(rank);

  PeerInfo self;
  std::string hostName;
  self.hostHash = localHostHash(&hostName);
  self.pid = getpid();
  self.deviceKind = static_cast<int32_t>(dev->kind());
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
  comm->conns.resize(static_cast<size_t>(nranks * comm->nchannels));
  // Every rank calls connectAll for both transports (possibly with no peers)
  // so that collective set-up steps inside them line up.
  comm->shm = makeShmTransport();
  comm->sock = makeSocketTransport();
  struct Plan {
    Transport *t;
    std::vector<int> *peers;
  } plans[] = {{comm->shm.get(), &shmPeers}, {comm->sock.get(), &sockPeers}};
  for (auto &pl : plans) {
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
  CclContext cctx;
  cctx.rank = rank;
  cctx.nranks = nranks;
  cctx.bs = comm->bs.get();
  cctx.dev = dev;
  cctx.homogeneous = comm->homogeneous;
  FLAGCX_CHECK(makeVendorCcl(cctx, &comm->ccl));
  ExecEnv env;
  env.rank = rank;
  env.nranks = nranks;
  env.nchannels = comm->nchannels;
  env.dev = dev;
  env.bs = comm->bs.get();
  env.conns = &comm->conns;
  env.algos = comm->algos.get();
  comm->exec = std::make_unique<Executor>(env);
  if (!comm->ccl) {
    // Device buffers read in place by same-host peers (CUDA IPC), when every
    // rank is a CUDA rank of this host and allows it (a collective vote; the
    // vendor decision above is the same on every rank).
    bool canDirect = comm->nNodes == 1 && paramInt(Param::IPC_DISABLE) == 0;
    for (const PeerInfo &p : comm->bs->peers())
      canDirect = canDirect && p.deviceKind == static_cast<int32_t>(DeviceKind::Cuda);
    FLAGCX_CHECK(comm->exec->setup(canDirect));
  }
  FLAGCX_CHECK(comm->bs->barrier());
  INFO(kInit, "rank %d/%d ready: device %s, host %s (local rank %d of %d, %d host(s)), "
       "%zu shm peer(s), %zu socket peer(s), %d channel(s)%s", rank, nranks, dev->name(),
       self.host, comm->localRank, comm->localRanks, comm->nNodes, shmPeers.size(),
       sockPeers.size(), comm->nchannels,
       comm->ccl ? ", vendor CCL"
       : comm->exec->mode() == ExecMode::Direct ? ", device buffers by CUDA IPC" : "");
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
    comm->exec->abort();
    if (comm->bs) comm->bs->abort();
  }
  // Let enqueued work finish (or fail fast when aborting) before freeing.
  if (!comm->exec->drain()) {
    WARN(kInit, "rank %d: %d operation(s) still in flight at %s; freeing anyway", comm->rank,
         comm->exec->inFlight(), abort ? "abort" : "destroy");
    // Leak the communicator: a stream task still references it.
    comm->magic = 0;
    return flagcxInternalError;
  }
  if (comm->ccl) {
    res = comm->ccl->destroy(abort);
    comm->ccl.reset();
  }
  comm->magic = 0;
  delete comm;  // the executor frees its buffers and mappings
  return res;
}

flagcxResult_t commColl(flagcxComm *comm, const CollArgs &args, flagcxStream_t stream) {
  return comm->ccl ? comm->ccl->coll(args, stream) : comm->exec->enqueueColl(args, stream);
}

flagcxResult_t commP2P(flagcxComm *comm, bool isSend, void *buf, size_t bytes, int peer,
                       flagcxStream_t stream) {
  if (comm->ccl) {
    // The vendor library moves bytes; the dtype was only needed for the size.
    return isSend ? comm->ccl->send(buf, bytes, flagcxUint8, peer, stream)
                  : comm->ccl->recv(buf, bytes, flagcxUint8, peer, stream);
  }
  return comm->exec->enqueueP2P(isSend, buf, bytes, peer, stream);
}

}  // namespace flagcx
