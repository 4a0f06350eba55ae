// The communicator's life (comm.h): init (hosts, clusters, transports, the
// executor), destroy, connections on demand, and the calls that route an
// operation to the vendor pass-through or the executor.
#include "core/comm.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include "base/base.h"
#include "adapters/adapters.h"
#include "core/devcomm.h"
#include "sched/sched.h"

namespace flagcx {

namespace {

// Deterministic mode is one value on every rank of a communicator (its
// calls take other paths than default mode's); `modeOf(r)` is rank r's.
template <class ModeOf>
flagcxResult_t sameModeEverywhere(const flagcxComm *comm, const char *what, ModeOf modeOf) {
  for (int r = 0; r < comm->nranks; r++)
    if (modeOf(r) != modeOf(0))
      return argError(flagcxInvalidUsage, kInit, "%s: rank %d: deterministic mode is %s on rank 0 "
                      "but %s on rank %d; every rank must ask for the same", what, comm->rank,
                      modeOf(0) ? "on" : "off", modeOf(r) ? "on" : "off", r);
  return flagcxSuccess;
}

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

// Clusters of ranks: one per device kind, in order of first appearance.
// FLAGCX_CLUSTER_SPLIT_LIST=k0,k1,... (FlagCX's meaning) then splits the c-th
// of those into k_c sub-clusters of its ranks taken in rank order: each of
// size/k_c ranks, the last one taking the remainder (so "2" turns 8 ranks of
// one kind into 2 x 4, and 5 into 2 + 3).  The list needs one entry per
// device-kind cluster, each a whole number from 1 to that cluster's size,
// and must be the same on every rank (checked collectively, so that a bad
// list fails the init everywhere instead of hanging some ranks).
// A shrink's child (`viewOf`) leaves the check out: its parent made it, over
// every member, with the same list.
static flagcxResult_t assignClusters(flagcxComm *comm, bool viewOf) {
  int n = comm->nranks;
  const auto &peers = comm->bs->peers();
  std::vector<int> kinds;  // device kind of each device-kind cluster
  std::vector<int> kindOf(static_cast<size_t>(n));
  for (int r = 0; r < n; r++) {
    int k = peers[static_cast<size_t>(r)].deviceKind;
    auto it = std::find(kinds.begin(), kinds.end(), k);
    if (it == kinds.end()) it = kinds.insert(kinds.end(), k);
    kindOf[static_cast<size_t>(r)] = static_cast<int>(it - kinds.begin());
  }
  std::vector<int> members(kinds.size(), 0);
  for (int r = 0; r < n; r++) members[static_cast<size_t>(kindOf[static_cast<size_t>(r)])]++;

  const std::string &list = paramStr(Param::CLUSTER_SPLIT_LIST);
  std::vector<int> split(kinds.size(), 1);
  std::string bad;
  if (!list.empty()) {
    std::vector<int> items;
    size_t pos = 0;
    while (bad.empty()) {
      size_t comma = list.find(',', pos);
      std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      size_t c = items.size();
      int most = c < members.size() ? members[c] : n;
      char *end = nullptr;
      long v = item.empty() ? 0 : strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0')
        bad = "'" + item + "' is not a number of sub-clusters";
      else if (v < 1)
        bad = "'" + item + "': a cluster splits into at least 1 sub-cluster";
      else if (v > most)
        bad = "'" + item + "' sub-clusters for cluster " + std::to_string(c) + " of " +
              std::to_string(most) + " rank(s): more sub-clusters than ranks";
      else
        items.push_back(static_cast<int>(v));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    if (bad.empty() && items.size() != kinds.size())
      bad = "it has " + std::to_string(items.size()) + " entries, one per device-kind cluster is " +
            "needed and this communicator has " + std::to_string(kinds.size());
    if (bad.empty()) split = items;
  }
  // Every rank's list (hashed; 1 for a list this rank found bad) must agree.
  uint64_t mine = list.empty() ? 0 : bad.empty() ? fnv1a("clusters:" + list) : 1;
  std::vector<uint64_t> all(static_cast<size_t>(n));
  all[static_cast<size_t>(comm->rank)] = mine;
  if (!viewOf) FLAGCX_CHECK(comm->bs->allgather(all.data(), sizeof(uint64_t)));
  else std::fill(all.begin(), all.end(), mine);
  if (!bad.empty())
    return argError(flagcxInvalidArgument, kInit, "rank %d: FLAGCX_CLUSTER_SPLIT_LIST=%s: %s",
                    comm->rank, list.c_str(), bad.c_str());
  for (int r = 0; r < n; r++)
    if (all[static_cast<size_t>(r)] != mine)
      return argError(flagcxInvalidArgument, kInit, "rank %d: FLAGCX_CLUSTER_SPLIT_LIST differs "
                      "between ranks (rank %d has another value than this rank's '%s')",
                      comm->rank, r, list.c_str());

  std::vector<int> first(kinds.size(), 0);  // id of each device-kind cluster's first sub-cluster
  for (size_t c = 1; c < kinds.size(); c++) first[c] = first[c - 1] + split[c - 1];
  std::vector<int> seen(kinds.size(), 0);
  comm->clusterOf.assign(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; r++) {
    size_t c = static_cast<size_t>(kindOf[static_cast<size_t>(r)]);
    int per = members[c] / split[c];
    int sub = std::min(seen[c]++ / per, split[c] - 1);
    comm->clusterOf[static_cast<size_t>(r)] = first[c] + sub;
  }
  comm->nclusters = first.back() + split.back();
  if (comm->nclusters > 1) comm->homogeneous = false;
  INFO(kInit, "rank %d: %d cluster(s) (%zu device kind(s)%s); this rank is in cluster %d",
       comm->rank, comm->nclusters, kinds.size(),
       list.empty() ? "" : ", split by FLAGCX_CLUSTER_SPLIT_LIST",
       comm->clusterOf[static_cast<size_t>(comm->rank)]);
  return flagcxSuccess;
}

flagcxResult_t commConnect(flagcxComm *comm, const std::vector<int> &peers) {
  // Each peer's transport was chosen at init (comm->via).  Set-up is
  // pairwise over the bootstrap: both ranks of a pair call it for each other.
  Transport *kinds[] = {comm->shm.get(), comm->sock.get(), comm->ib.get()};
  const size_t nch = static_cast<size_t>(comm->nchannels);
  for (Transport *t : kinds) {
    if (!t) continue;
    std::vector<int> list;
    for (int r : peers)
      if (r != comm->rank && !comm->conn(r) && comm->via[static_cast<size_t>(r)] == t &&
          (list.empty() || list.back() != r))
        list.push_back(r);
    if (list.empty()) continue;
    std::vector<std::unique_ptr<Conn>> conns;
    flagcxResult_t res = t->connectAll(*comm->bs, list, comm->nchannels, &conns);
    if (res != flagcxSuccess) {
      WARN(kInit, "rank %d: connecting to %zu peer(s) over the %s transport failed", comm->rank,
           list.size(), t->name());
      return res;
    }
    for (size_t i = 0; i < list.size(); i++)
      for (size_t c = 0; c < nch; c++)
        comm->conns[static_cast<size_t>(list[i]) * nch + c] = std::move(conns[i * nch + c]);
    INFO(kInit, "rank %d: connected to %zu peer(s) over %s", comm->rank, list.size(), t->name());
  }
  return flagcxSuccess;
}

// Which transport reaches each peer: same host -> shm (unless disabled),
// otherwise socket; network peers over verbs where both ends have an RDMA
// port (ibSplitPeers is collective: every rank calls it once, here).
static flagcxResult_t chooseTransports(flagcxComm *comm, ChildOf *from) {
  const auto &all = comm->bs->peers();
  const uint64_t me = all[static_cast<size_t>(comm->rank)].hostHash;
  bool shmOff = paramInt(Param::SHM_DISABLE) != 0;
  std::vector<int> shmPeers, sockPeers, ibPeers;
  for (int r = 0; r < comm->nranks; r++) {
    if (r == comm->rank) continue;
    bool same = all[static_cast<size_t>(r)].hostHash == me;
    (same && !shmOff ? shmPeers : sockPeers).push_back(r);
  }
  // A child learns from its members' parents whether the probe can matter.
  if (from) FLAGCX_CHECK(commChildFacts(comm, from));
  if (!from || from->anyVerbs)
    FLAGCX_CHECK(ibSplitPeers(*comm->bs, &shmPeers, &sockPeers, &ibPeers, &comm->ib));
  comm->shm = makeShmTransport();
  comm->sock = makeSocketTransport();
  // What a Conn's receive helpers fold with (Conn::irecvFold), once per transport.
  for (Transport *t : {comm->shm.get(), comm->sock.get(), comm->ib.get()})
    if (t) t->setReduce(&hostReduce);
  comm->via.assign(static_cast<size_t>(comm->nranks), nullptr);
  for (int r : shmPeers) comm->via[static_cast<size_t>(r)] = comm->shm.get();
  for (int r : sockPeers) comm->via[static_cast<size_t>(r)] = comm->sock.get();
  for (int r : ibPeers) comm->via[static_cast<size_t>(r)] = comm->ib.get();
  INFO(kInit, "rank %d: %zu shm peer(s), %zu socket peer(s), %zu verbs peer(s)", comm->rank,
       shmPeers.size(), sockPeers.size(), ibPeers.size());
  return flagcxSuccess;
}

// The executor's collective set-up, even beside a vendor CCL, which leaves
// the engine the calls it cannot do our way (commColl).  Device buffers read
// in place by same-host peers (CUDA IPC), when every rank is a CUDA rank of
// this host and allows it (a collective vote, made on every rank).  A
// shrink's child: its members are processes its parent proved.
static flagcxResult_t setupExecutor(flagcxComm *comm, const ChildOf *from) {
  bool canDirect = comm->nNodes == 1 && paramInt(Param::IPC_DISABLE) == 0;
  for (const PeerInfo &p : comm->bs->peers())
    canDirect = canDirect && p.deviceKind == static_cast<int32_t>(DeviceKind::Cuda);
  std::vector<pid_t> known;
  if (from && from->shrink)
    for (int m : from->members) known.push_back(from->parent->exec->provenPid(m));
  return comm->exec->setup(canDirect, known.empty() ? nullptr : &known);
}

flagcxResult_t commInit(flagcxComm **out, int nranks, const flagcxUniqueId &id, int rank,
                        ChildOf *from) {
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
  self.pidNs = pidNamespaceId();
  self.deviceKind = static_cast<int32_t>(dev->kind());
  self.deterministic = paramInt(Param::DETERMINISTIC) != 0;
  snprintf(self.host, sizeof(self.host), "%s", hostName.c_str());
  if (from && from->shrink) comm->bs = from->parent->bs->view(from->members, from->childNo);
  else FLAGCX_CHECK(Bootstrap::create(id, rank, nranks, self, &comm->bs));
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
  FLAGCX_CHECK(sameModeEverywhere(comm.get(), "FLAGCX_DETERMINISTIC",
                                  [&peers](int r) { return peers[static_cast<size_t>(r)].deterministic != 0; }));
  comm->nNodes = static_cast<int>(hosts.size());
  FLAGCX_CHECK(assignClusters(comm.get(), from && from->shrink));

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
  // Transports: connections to the peers the schedules name now (every
  // op but alltoall/alltoallv, whose schedules name every rank), to the
  // others on first use (the executor asks through env.connect).
  comm->conns.resize(static_cast<size_t>(nranks * comm->nchannels));
  FLAGCX_CHECK(chooseTransports(comm.get(), from));
  if (from) commAdoptConns(comm.get(), *from);
  std::vector<int> first;
  if (paramInt(Param::CONNECT_ALL) != 0) {
    for (int r = 0; r < nranks; r++)
      if (r != rank) first.push_back(r);
  } else {
    first = comm->algos->schedulePeers(
        [](OpKind op) { return op != OpKind::AlltoAll && op != OpKind::AlltoAllv; });
  }
  FLAGCX_CHECK(commConnect(comm.get(), first));
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
  env.sameHostShm = comm->nNodes == 1;
  for (int r = 0; r < nranks; r++)
    if (r != rank && comm->via[static_cast<size_t>(r)] != comm->shm.get()) env.sameHostShm = false;
  flagcxComm *raw = comm.get();
  env.connect = [raw](const std::vector<int> &peers) { return commConnect(raw, peers); };
  comm->exec = std::make_unique<Executor>(env);
  comm->exec->setDeterministic(paramInt(Param::DETERMINISTIC) != 0);
  FLAGCX_CHECK(setupExecutor(comm.get(), from));
  FLAGCX_CHECK(comm->bs->barrier());
  INFO(kInit, "rank %d/%d ready: device %s, host %s (local rank %d of %d, %d host(s)), "
       "%zu peer(s) connected, the others on first use, %d channel(s)%s", rank, nranks,
       dev->name(), self.host, comm->localRank, comm->localRanks, comm->nNodes, first.size(),
       comm->nchannels,
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
  devForget(comm);  // device communicators left: their proxies stop first
  if (comm->ccl) {
    res = comm->ccl->destroy(abort);
    comm->ccl.reset();
  }
  comm->magic = 0;
  delete comm;  // the executor frees its buffers and mappings
  return res;
}

// None for a communicator in deterministic mode: the drop-in's shortcut to
// the vendor library would bypass the routing of commColl.
const VendorDirect *commVendorDirect(flagcxComm_t comm) {
  static const bool on = paramInt(Param::NCCL_DROPIN_DIRECT) != 0;
  return on && comm && comm->ccl && !comm->exec->deterministic() ? comm->ccl->direct() : nullptr;
}

namespace {
// A call a vendor CCL cannot do our way: a deterministic reduction (its
// order is not the rank-ordered fold) or an 8-bit float reduction (it
// accumulates those in half precision; we promise float32).
bool engineOnly(const flagcxComm *comm, const CollArgs &a) {
  return comm->exec->ordered(a) ||
         (opReduces(a.op) && dtypeIsFloat8(a.dtype));
}
}  // namespace

flagcxResult_t commColl(flagcxComm *comm, const CollArgs &args, flagcxStream_t stream) {
  comm->collIssued.store(true, std::memory_order_relaxed);
  // The executor's jobs keep stream order with the vendor's kernels: a job
  // runs after the stream's earlier work and the stream's later work waits
  // for it (DeviceAdapter::enqueue).
  if (comm->ccl && !engineOnly(comm, args)) return comm->ccl->coll(args, stream);
  return comm->exec->enqueueColl(args, stream);
}

flagcxResult_t commSetDeterministic(flagcxComm *comm, bool on) {
  if (comm->collIssued.load(std::memory_order_relaxed))
    return argError(flagcxInvalidUsage, kInit, "flagcxCommSetDeterministic: rank %d: the "
                    "communicator has already issued a collective; set it before the first one "
                    "(on every rank)", comm->rank);
  // Collective: a vendor communicator would otherwise send one rank's call
  // to the vendor library and another's to the executor, and both wait.
  std::vector<uint8_t> all(static_cast<size_t>(comm->nranks));
  all[static_cast<size_t>(comm->rank)] = on;
  FLAGCX_CHECK(comm->bs->allgather(all.data(), 1));
  FLAGCX_CHECK(sameModeEverywhere(comm, "flagcxCommSetDeterministic",
                                  [&all](int r) { return all[static_cast<size_t>(r)] != 0; }));
  comm->exec->setDeterministic(on);
  INFO(kInit, "rank %d: deterministic reductions %s on this communicator", comm->rank,
       on ? "on" : "off");
  return flagcxSuccess;
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

flagcxResult_t commGroupStart() {
  if (groupDepth() == 0) vendorGroupStart();
  return groupStart();
}

flagcxResult_t commGroupEnd() {
  if (groupDepth() == 1) vendorGroupEnd();
  return groupEnd();
}

int commGroupDepth() { return groupDepth(); }

bool commDrain(flagcxComm *comm) { return comm->exec->drain(); }

flagcxResult_t commAsyncError(flagcxComm *comm) { return comm->exec->asyncError(); }

std::string commAsyncErrorText(flagcxComm *comm) { return comm->exec->lastError(); }

}  // namespace flagcx
