// Native one-sided operations over verbs: one RC queue pair per peer for
// RDMA WRITE, READ and FETCH_ADD on memory the peer registered for remote
// access.  Used by the one-sided engine (net/rma.h), whose service thread is
// the only caller of the posting and polling functions (queue pairs are not
// thread-safe); expose/withdraw may come from any thread.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "net/ibverbs/rdma_device.h"
#include "net/net.h"

namespace flagcx {

class Bootstrap;

class IbRma {
 public:
  // Collective among `peers` (each lists this rank): a queue pair per peer.
  static flagcxResult_t create(std::shared_ptr<rdma::Device> dev, Bootstrap &bs,
                               const std::vector<int> &peers, std::unique_ptr<IbRma> *out);
  ~IbRma();

  // How device memory is named for the NIC, set by the layer that knows the
  // device (src/core/onesided.cc): a dma-buf fd covering [p, p+len) with p's
  // offset in it; -1 for device memory without one (then ibv_reg_mr, i.e.
  // peer memory); -2 for host memory.  Unset: everything is host memory.
  std::function<int(const void *p, size_t len, uint64_t *offset)> dmabuf;

  bool serves(int peer) const;
  // Register [base, base+size) for remote write, read and atomics.
  flagcxResult_t expose(void *base, uint64_t size, uint32_t *rkey);
  void withdraw(void *base);

  // Service thread only.  `id` comes back from poll().
  flagcxResult_t write(int peer, const void *src, uint64_t len, uint64_t raddr, uint32_t rkey,
                       uint64_t id);
  flagcxResult_t read(int peer, void *dst, uint64_t len, uint64_t raddr, uint32_t rkey,
                      uint64_t id);
  flagcxResult_t fetchAdd(int peer, uint64_t raddr, uint32_t rkey, uint64_t add, uint64_t id);
  struct Done {
    uint64_t id;
    int rc;
  };
  // Completions of this peer's queue pair (it also serves the peer's
  // requests on the software device); -1 when the queue pair failed.
  int poll(int peer, Done *out, int max);

 private:
  IbRma() = default;
  flagcxResult_t post(int peer, rdma::SendWr wr, const void *local, uint64_t len, bool remoteIn);
  flagcxResult_t registerAny(void *addr, size_t len, uint32_t access, std::unique_ptr<rdma::Mr> *out);
  flagcxResult_t transfer(rdma::Opcode op, int peer, const void *local, uint64_t len,
                          uint64_t raddr, uint32_t rkey, uint64_t id);

  std::shared_ptr<rdma::Device> dev_;
  std::vector<std::unique_ptr<rdma::Qp>> qps_;  // [rank]
  std::mutex mu_;
  std::map<uintptr_t, std::unique_ptr<rdma::Mr>> exposed_;  // by base
  std::map<uint64_t, std::unique_ptr<rdma::Mr>> local_;     // per operation, by id
  uint64_t *scratch_ = nullptr;                             // fetch-add results
  std::unique_ptr<rdma::Mr> scratchMr_;
  uint64_t nextScratch_ = 0;
};

}  // namespace flagcx
