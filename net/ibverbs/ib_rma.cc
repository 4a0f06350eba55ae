// Native one-sided operations over verbs (ib_rma.h).
#include "net/ibverbs/ib_rma.h"
#include "net/ibverbs/ib_transport.h"

#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "base/base.h"
#include "rendezvous/rendezvous.h"

namespace flagcx {
namespace {
constexpr uint32_t kTagAddr = 0x69627201;  // bootstrap tags "ibr" 1, 2
constexpr uint32_t kTagAck = 0x69627202;
constexpr uint64_t kChunk = uint64_t{1} << 30;  // a work request's length is 32 bits
constexpr size_t kScratch = 4096;               // fetch-add result slots

}  // namespace

flagcxResult_t IbRma::create(std::shared_ptr<rdma::Device> dev, Bootstrap &bs,
                             const std::vector<int> &peers, std::unique_ptr<IbRma> *out) {
  std::unique_ptr<IbRma> r(new IbRma());
  r->dev_ = std::move(dev);
  r->qps_.resize(static_cast<size_t>(bs.nranks()));
  r->scratch_ = static_cast<uint64_t *>(aligned_alloc(64, kScratch * sizeof(uint64_t)));
  if (!r->scratch_) return flagcxSystemError;
  FLAGCX_CHECK(r->dev_->regMr(r->scratch_, kScratch * sizeof(uint64_t), rdma::kLocalWrite,
                              &r->scratchMr_));
  for (int p : peers) {
    FLAGCX_CHECK(r->dev_->createQp(&r->qps_[static_cast<size_t>(p)]));
    rdma::QpAddr a;
    FLAGCX_CHECK(r->qps_[static_cast<size_t>(p)]->localAddr(&a));
    FLAGCX_CHECK(bs.send(p, kTagAddr, &a, sizeof a));
  }
  flagcxResult_t status = flagcxSuccess;
  for (int p : peers) {
    rdma::QpAddr a;
    FLAGCX_CHECK(bs.recv(p, kTagAddr, &a, sizeof a));
    flagcxResult_t rc = r->qps_[static_cast<size_t>(p)]->connect(a);
    if (rc != flagcxSuccess) status = rc;
    int32_t ack = rc == flagcxSuccess ? 1 : 0;
    FLAGCX_CHECK(bs.send(p, kTagAck, &ack, sizeof ack));
  }
  for (int p : peers) {
    int32_t ack = 0;
    FLAGCX_CHECK(bs.recv(p, kTagAck, &ack, sizeof ack));
    r->qps_[static_cast<size_t>(p)]->connected();
    if (ack != 1 && status == flagcxSuccess) status = flagcxRemoteError;
  }
  if (status != flagcxSuccess) {
    WARN(kNet, "rank %d: one-sided verbs queue pairs could not be connected", bs.rank());
    return status;
  }
  *out = std::move(r);
  return flagcxSuccess;
}

IbRma::~IbRma() {
  qps_.clear();
  local_.clear();
  exposed_.clear();
  scratchMr_.reset();
  free(scratch_);
}

// Device memory goes to the NIC as a dma-buf where the GPU driver and
// rdma-core both allow it; otherwise ibv_reg_mr on the device pointer, which
// works where a peer-memory module (nvidia-peermem) is loaded and fails
// cleanly where none is.  Never run with a GPU and an RDMA NIC together
// (docs/RDMA.md).
flagcxResult_t IbRma::registerAny(void *addr, size_t len, uint32_t access,
                                  std::unique_ptr<rdma::Mr> *out) {
  uint64_t offset = 0;
  int fd = dmabuf ? dmabuf(addr, len, &offset) : -2;
  if (fd >= 0) {
    flagcxResult_t r = dev_->regDmabuf(fd, offset, addr, len, access, out);
    close(fd);
    if (r == flagcxSuccess) return r;
  }
  if (fd != -2)
    INFO(kNet, "ib: %zu bytes of device memory at %p: no dma-buf registration, trying ibv_reg_mr "
         "(peer memory)", len, addr);
  return dev_->regMr(addr, len, access, out);
}

bool IbRma::serves(int peer) const {
  return peer >= 0 && static_cast<size_t>(peer) < qps_.size() &&
         qps_[static_cast<size_t>(peer)] != nullptr;
}

flagcxResult_t IbRma::expose(void *base, uint64_t size, uint32_t *rkey) {
  std::unique_ptr<rdma::Mr> mr;
  FLAGCX_CHECK(registerAny(base, size,
                           rdma::kLocalWrite | rdma::kRemoteWrite | rdma::kRemoteRead |
                               rdma::kRemoteAtomic,
                           &mr));
  *rkey = mr->rkey;
  std::lock_guard<std::mutex> g(mu_);
  exposed_[reinterpret_cast<uintptr_t>(base)] = std::move(mr);
  return flagcxSuccess;
}

void IbRma::withdraw(void *base) {
  std::lock_guard<std::mutex> g(mu_);
  exposed_.erase(reinterpret_cast<uintptr_t>(base));
}

// Register the local side for this operation, then post it in pieces of at
// most kChunk bytes; only the last one is signaled.
flagcxResult_t IbRma::post(int peer, rdma::SendWr wr, const void *local, uint64_t len,
                           bool remoteIn) {
  std::unique_ptr<rdma::Mr> mr;
  const uint32_t access = remoteIn ? static_cast<uint32_t>(rdma::kLocalWrite) : 0u;
  FLAGCX_CHECK(registerAny(const_cast<void *>(local), len, access, &mr));
  rdma::Qp &qp = *qps_[static_cast<size_t>(peer)];
  uint64_t done = 0;
  const uint64_t remote = wr.remote;
  while (done < len) {
    uint64_t n = len - done < kChunk ? len - done : kChunk;
    wr.local = static_cast<char *>(const_cast<void *>(local)) + done;
    wr.lkey = mr->lkey;
    wr.length = static_cast<uint32_t>(n);
    wr.remote = remote + done;
    wr.signaled = done + n == len;
    FLAGCX_CHECK(qp.postSend(wr));
    done += n;
  }
  local_[wr.wrId] = std::move(mr);
  return flagcxSuccess;
}

flagcxResult_t IbRma::transfer(rdma::Opcode op, int peer, const void *local, uint64_t len,
                               uint64_t raddr, uint32_t rkey, uint64_t id) {
  rdma::SendWr wr;
  wr.op = op;
  wr.wrId = id;
  wr.remote = raddr;
  wr.rkey = rkey;
  return post(peer, wr, local, len, op == rdma::Opcode::Read);
}

flagcxResult_t IbRma::write(int peer, const void *src, uint64_t len, uint64_t raddr,
                            uint32_t rkey, uint64_t id) {
  return transfer(rdma::Opcode::Write, peer, src, len, raddr, rkey, id);
}

flagcxResult_t IbRma::read(int peer, void *dst, uint64_t len, uint64_t raddr, uint32_t rkey,
                           uint64_t id) {
  return transfer(rdma::Opcode::Read, peer, dst, len, raddr, rkey, id);
}

flagcxResult_t IbRma::fetchAdd(int peer, uint64_t raddr, uint32_t rkey, uint64_t add,
                               uint64_t id) {
  rdma::SendWr wr;
  wr.op = rdma::Opcode::FetchAdd;
  wr.wrId = id;
  wr.local = &scratch_[nextScratch_++ % kScratch];
  wr.lkey = scratchMr_->lkey;
  wr.length = 8;
  wr.remote = raddr;
  wr.rkey = rkey;
  wr.compareAdd = add;
  return qps_[static_cast<size_t>(peer)]->postSend(wr);
}

int IbRma::poll(int peer, Done *out, int max) {
  rdma::Qp &qp = *qps_[static_cast<size_t>(peer)];
  rdma::Completion wc[16];
  int n = qp.poll(wc, max < 16 ? max : 16);
  for (int i = 0; i < n; i++) {
    out[i].id = wc[i].wrId;
    out[i].rc = wc[i].status == rdma::WcStatus::Success ? flagcxSuccess : flagcxRemoteError;
    if (wc[i].status != rdma::WcStatus::Success)
      WARN(kNet, "one-sided verbs: %s to rank %d completed with %s", rdma::opcodeName(wc[i].op),
           peer, rdma::wcStatusName(wc[i].status));
    local_.erase(wc[i].wrId);
  }
  if (n == 0 && qp.state() == rdma::QpState::Error) return -1;
  return n;
}

flagcxResult_t makeRmaEngine(int rank, int nranks, std::vector<std::unique_ptr<Conn>> conns,
                             std::atomic<uint64_t> *signals, size_t signalStride, Transport *ib,
                             Bootstrap &bs, const std::vector<int> &ibPeers, RmaDmabuf dmabuf,
                             std::unique_ptr<RmaEngine> *out) {
  std::unique_ptr<IbRma> native;
  std::shared_ptr<rdma::Device> dev = ib ? ibTransportDevice(ib) : nullptr;
  if (dev && !ibPeers.empty()) {
    FLAGCX_CHECK(IbRma::create(dev, bs, ibPeers, &native));
    if (native && dmabuf) native->dmabuf = std::move(dmabuf);
  }
  *out = RmaEngine::create(rank, nranks, std::move(conns), signals, signalStride,
                           std::move(native));
  return flagcxSuccess;
}

}  // namespace flagcx
