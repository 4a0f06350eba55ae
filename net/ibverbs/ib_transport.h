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

// ibSplitPeers, which makes the transport for a communicator, is declared
// in net/net.h.

}  // namespace flagcx
