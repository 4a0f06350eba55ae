// Which peers go over verbs: FLAGCX_NET, FLAGCX_IB_SOFTWARE_DEVICE, and
// whether every pair of ends has a usable RDMA port (agreed over the
// bootstrap, so both ends of a pair always choose the same transport).
#include <strings.h>

#include <algorithm>
#include <cinttypes>

#include "base/base.h"
#include "net/ibverbs/ib_transport.h"
#include "rendezvous/rendezvous.h"

namespace flagcx {

flagcxResult_t ibSplitPeers(Bootstrap &bs, std::vector<int> *shmPeers, std::vector<int> *netPeers,
                            std::vector<int> *ibPeers, std::unique_ptr<Transport> *ib) {
  ibPeers->clear();
  ib->reset();
  const std::string &net = paramStr(Param::NET);
  bool forceIb = strcasecmp(net.c_str(), "IB") == 0;
  bool forceSock = strcasecmp(net.c_str(), "Socket") == 0;
  if (!net.empty() && !forceIb && !forceSock) {
    WARN(kInit, "FLAGCX_NET='%s': expected IB or Socket", net.c_str());
    return flagcxInvalidArgument;
  }
  int64_t soft = paramInt(Param::IB_SOFTWARE_DEVICE);
  if (soft < 0 || soft > 2) {
    WARN(kInit, "FLAGCX_IB_SOFTWARE_DEVICE=%" PRId64 ": expected 0, 1 or 2", soft);
    return flagcxInvalidArgument;
  }
  const int me = bs.rank();
  std::unique_ptr<rdma::Device> dev;
  std::string why;
  if (forceSock) {
    why = "FLAGCX_NET=Socket";
  } else if (soft != 0) {
    FLAGCX_CHECK(rdma::openSoftDevice(&dev));
    why = "FLAGCX_IB_SOFTWARE_DEVICE=" + std::to_string(soft) + " (tests only)";
  } else {
    FLAGCX_CHECK(rdma::openVerbsDevice(&dev, &why));
    if (dev) why = "FLAGCX_NET=" + (net.empty() ? std::string("(unset)") : net) + ", active port";
  }
  // 0: no device; 1: verbs; 2: the software device (the two cannot talk).
  std::vector<int32_t> have(static_cast<size_t>(bs.nranks()), 0);
  have[static_cast<size_t>(me)] = !dev ? 0 : soft != 0 ? 2 : 1;
  FLAGCX_CHECK(bs.allgather(have.data(), sizeof(int32_t)));
  const int32_t mine = have[static_cast<size_t>(me)];
  auto take = [&](std::vector<int> *from) {
    std::vector<int> keep;
    const auto &info = bs.peers();
    for (int r : *from) {
      // The software device reaches only processes of this host.
      bool reach = mine != 0 && have[static_cast<size_t>(r)] == mine &&
                   (mine != 2 || info[static_cast<size_t>(r)].hostHash == info[static_cast<size_t>(me)].hostHash);
      (reach ? *ibPeers : keep).push_back(r);
    }
    *from = std::move(keep);
  };
  take(netPeers);
  if (soft == 2) take(shmPeers);
  std::sort(ibPeers->begin(), ibPeers->end());
  if (forceIb && !netPeers->empty()) {
    WARN(kInit, "rank %d: FLAGCX_NET=IB but rank %d %s (this rank: %s)", me, netPeers->front(),
         mine == 0 ? "cannot use verbs here" : "has no matching RDMA device",
         mine == 0 ? why.c_str() : "device ready");
    return flagcxSystemError;
  }
  if (!ibPeers->empty()) {
    std::shared_ptr<rdma::Device> shared(std::move(dev));
    INFO(kInit, "rank %d: %zu peer(s) over verbs on %s port %d (%s device; %s)%s", me,
         ibPeers->size(), shared->port().device.c_str(), shared->port().port, shared->kind(),
         why.c_str(), netPeers->empty() ? "" : ", the others over sockets (no usable device at their end)");
    *ib = makeIbTransport(std::move(shared));
  } else if (!netPeers->empty()) {
    INFO(kInit, "rank %d: %zu network peer(s) over sockets: %s", me, netPeers->size(),
         mine == 0 ? why.c_str() : "the peers have no usable RDMA device");
  }
  return flagcxSuccess;
}

}  // namespace flagcx
