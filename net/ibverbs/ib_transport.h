// The verbs transport: two-sided messages over RDMA (see ib_transport.cc and
// docs/RDMA.md), on libibverbs or, in tests, on the software device.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "net/ibverbs/rdma_device.h"
#include "net/net.h"

namespace flagcx {

// A transport on `dev` (shared by its Conns, which keep it alive).
std::unique_ptr<Transport> makeIbTransport(std::shared_ptr<rdma::Device> dev);

// The device under a transport made by makeIbTransport (null for any other).
std::shared_ptr<rdma::Device> ibTransportDevice(Transport *t);

// Collective over the bootstrap (every rank calls it once, in commInit):
// decides which peers this rank reaches over verbs.  `netPeers` are the
// peers that would otherwise use sockets; with FLAGCX_IB_SOFTWARE_DEVICE=2,
// `shmPeers` join them.  A pair uses verbs when both ends have a usable
// device and FLAGCX_NET allows it; those peers move to *ibPeers and *ib is
// the transport for them (null when there are none).  FLAGCX_NET=IB makes a
// missing device an error.  Logs the choice and the reason at INFO.
flagcxResult_t ibSplitPeers(Bootstrap &bs, std::vector<int> *shmPeers, std::vector<int> *netPeers,
                            std::vector<int> *ibPeers, std::unique_ptr<Transport> *ib);

}  // namespace flagcx
