// The verbs transport's protocol engine, written against the RDMA-device
// interface (rdma_device.h).
//
// A Conn is the shared framing engine (net/common/framed_conn) over one lane
// per queue pair (FLAGCX_IB_QPS_PER_CONNECTION); a large message is striped
// over the lanes.  Each lane is a byte pipe built from one RC queue pair:
//
//   * Every side owns a receive ring (kRingBytes) that it registered for
//     remote writes and advertised to the peer at set-up, with a credit word
//     the peer writes into.
//   * The sender copies bytes into a registered staging ring at the offset
//     they will have in the peer's ring and posts an RDMA write with
//     immediate data of at most kChunk bytes; the immediate carries the byte
//     count.  RC order makes the receive completions arrive in ring order,
//     and a completion means its bytes (and all before) are in memory.
//   * Credits: the sender may have at most kRingBytes unconsumed in the
//     peer's ring.  The receiver returns credit by an RDMA write of its
//     consumed-byte counter into the sender's credit word every quarter ring.
//   * Headers, tags, lengths and error frames are the framing engine's, so
//     tag checks, mismatch reports, poison/peerGaveUpOn behave as on shm and
//     sockets.
//   * A failed queue pair (error completion, or the device reporting the
//     peer gone) closes the pipe after every byte that arrived was read; a
//     silent peer is caught by the engine's FLAGCX_TIMEOUT stall check, and
//     while waiting the pipe posts a zero-byte write every second so that a
//     dead peer on hardware shows as a retry-exceeded completion.
//
// Set-up runs over the bootstrap: queue-pair addresses, ring addresses and
// keys are exchanged per peer, the queue pairs connected, receives posted,
// then an acknowledgement round.
#include "net/ibverbs/ib_transport.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdlib>
#include <cstring>

#include "base/base.h"
#include "net/common/framed_conn.h"
#include "net/ibverbs/reg_cache.h"
#include "rendezvous/rendezvous.h"

namespace flagcx {

namespace {

using rdma::Completion;
using rdma::Opcode;
using rdma::QpState;
using rdma::SendWr;
using rdma::WcStatus;

constexpr uint64_t kRingBytes = 1u << 20;
constexpr uint32_t kChunk = 128 * 1024;
constexpr int kRecvDepth = 128;
constexpr int kMaxInflight = 64;
constexpr size_t kCtlBytes = 4096;
constexpr uint64_t kWrData = 1, kWrCredit = 2, kWrProbe = 3, kWrRecv = 4;
constexpr uint32_t kTagHello = 0x69627601;  // bootstrap tags "ibv" 1..3
constexpr uint32_t kTagWire = 0x69627602;
constexpr uint32_t kTagAck = 0x69627603;
constexpr uint64_t kHelloMagic = 0x464c414749425631ull;

// What a lane's peer needs: its queue pair, where to write, the key.
struct PipeWire {
  rdma::QpAddr qp;
  uint64_t ring;
  uint64_t credit;
  uint32_t rkey;
  uint32_t pad;
};

struct Hello {
  uint64_t magic;
  uint64_t ringBytes;
  int32_t nchannels;
  int32_t nlanes;
  char device[32];
};

class IbPipe final : public Pipe {
 public:
  IbPipe(PeerDesc d, std::shared_ptr<rdma::Device> dev, std::shared_ptr<rdma::RegCache> cache)
      : desc_(std::move(d)), dev_(std::move(dev)), cache_(std::move(cache)) {}
  ~IbPipe() override {
    // Let the last writes (an error frame, say) leave before the queue pair
    // goes; bounded, since the peer may be gone.
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
    while (qp_ && inflight_ > 0 && !broken() && std::chrono::steady_clock::now() < until)
      if (pump() != flagcxSuccess) break;
    qp_.reset();  // no more writes into our memory after this
    if (mr_) cache_->put(mr_);
    if (block_) {
      cache_->invalidate(block_, blockBytes());
      free(block_);
    }
  }

  flagcxResult_t init() {
    FLAGCX_CHECK(dev_->createQp(&qp_));
    if (posix_memalign(&block_, 4096, blockBytes()) != 0) {
      block_ = nullptr;
      WARN(kNet, "ib rank %d: cannot allocate %zu bytes of rings", desc_.self, blockBytes());
      return flagcxSystemError;
    }
    memset(block_, 0, blockBytes());
    rx_ = static_cast<char *>(block_);
    tx_ = rx_ + kRingBytes;
    creditIn_ = reinterpret_cast<uint64_t *>(tx_ + kRingBytes);
    creditOut_ = creditIn_ + 8;  // its own cache line
    return cache_->get(block_, blockBytes(), rdma::kLocalWrite | rdma::kRemoteWrite, &mr_);
  }
  flagcxResult_t wire(PipeWire *w) {
    *w = PipeWire{};
    FLAGCX_CHECK(qp_->localAddr(&w->qp));
    w->ring = reinterpret_cast<uint64_t>(rx_);
    w->credit = reinterpret_cast<uint64_t>(creditIn_);
    w->rkey = mr_->rkey;
    return flagcxSuccess;
  }
  flagcxResult_t connect(const PipeWire &peer) {
    peer_ = peer;
    FLAGCX_CHECK(qp_->connect(peer.qp));
    for (int i = 0; i < kRecvDepth; i++) FLAGCX_CHECK(qp_->postRecv(kWrRecv));
    return flagcxSuccess;
  }
  void connected() { qp_->connected(); }

  flagcxResult_t write(const iovec *iov, int iovcnt, size_t *moved, bool *closed) override {
    *moved = 0;
    *closed = false;
    FLAGCX_CHECK(pump());
    if (broken()) {
      *closed = true;
      return flagcxSuccess;
    }
    uint64_t head = std::atomic_ref<uint64_t>(*creditIn_).load(std::memory_order_acquire);
    if (head < peerHead_ || head > txTail_) {
      WARN(kNet, "ib rank %d <- peer %d channel %d: credit counter %" PRIu64 " out of range (%" PRIu64 "..%" PRIu64 ")",
           desc_.self, desc_.peer, desc_.channel, head, peerHead_, txTail_);
      return flagcxRemoteError;
    }
    peerHead_ = head;
    int i = 0;
    size_t off = 0;  // into iov[i]
    while (i < iovcnt && inflight_ < kMaxInflight) {
      uint64_t space = kRingBytes - (txTail_ - peerHead_);
      uint64_t pos = txTail_ % kRingBytes;
      uint64_t room = std::min<uint64_t>({space, kRingBytes - pos, kChunk});
      if (room == 0) break;
      uint64_t n = 0;
      while (n < room && i < iovcnt) {  // gather
        uint64_t k = std::min<uint64_t>(room - n, iov[i].iov_len - off);
        memcpy(tx_ + pos + n, static_cast<const char *>(iov[i].iov_base) + off, k);
        n += k;
        off += k;
        if (off == iov[i].iov_len) i++, off = 0;
      }
      if (n == 0) break;
      SendWr wr;
      wr.op = Opcode::WriteImm;
      wr.wrId = kWrData;
      wr.local = tx_ + pos;
      wr.lkey = mr_->lkey;
      wr.length = static_cast<uint32_t>(n);
      wr.remote = peer_.ring + pos;
      wr.rkey = peer_.rkey;
      wr.imm = static_cast<uint32_t>(n);
      FLAGCX_CHECK(qp_->postSend(wr));
      inflight_++;
      txTail_ += n;
      *moved += n;
    }
    return flagcxSuccess;
  }

  flagcxResult_t read(void *dst, size_t want, size_t *moved, bool *closed) override {
    *moved = 0;
    *closed = false;
    FLAGCX_CHECK(pump());
    uint64_t avail = rxTail_ - rxHead_;
    if (avail == 0) {
      *closed = broken();
      return flagcxSuccess;
    }
    uint64_t n = std::min<uint64_t>(want, avail);
    uint64_t pos = rxHead_ % kRingBytes, first = std::min(n, kRingBytes - pos);
    memcpy(dst, rx_ + pos, first);
    if (n > first) memcpy(static_cast<char *>(dst) + first, rx_, n - first);
    rxHead_ += n;
    *moved = n;
    if (rxHead_ - creditSent_ >= kRingBytes / 4) FLAGCX_CHECK(returnCredit());
    return flagcxSuccess;
  }

  flagcxResult_t idleCheck() override {
    qp_->checkPeer();
    FLAGCX_CHECK(pump());
    if (broken()) {
      WARN(kNet, "ib rank %d <-> peer %d (%s) channel %d: queue pair failed (%s)", desc_.self,
           desc_.peer, desc_.host.c_str(), desc_.channel,
           failed_ ? rdma::wcStatusName(failStatus_) : "peer gone");
      return flagcxRemoteError;
    }
    // A probe write: on hardware a dead peer answers it with nothing, and the
    // queue pair reports retry-exceeded.
    auto now = std::chrono::steady_clock::now();
    if (inflight_ == 0 && now - lastProbe_ > std::chrono::seconds(1)) {
      lastProbe_ = now;
      SendWr wr;
      wr.op = Opcode::Write;
      wr.wrId = kWrProbe;
      wr.remote = peer_.ring;
      wr.rkey = peer_.rkey;
      FLAGCX_CHECK(qp_->postSend(wr));
      inflight_++;
    }
    return flagcxSuccess;
  }

 private:
  static size_t blockBytes() { return 2 * kRingBytes + kCtlBytes; }
  bool broken() const { return failed_ || qp_->state() == QpState::Error; }

  flagcxResult_t returnCredit() {
    if (broken() || inflight_ >= qp_->maxSendWr() - kRecvDepth) return flagcxSuccess;
    std::atomic_ref<uint64_t>(*creditOut_).store(rxHead_, std::memory_order_release);
    SendWr wr;
    wr.op = Opcode::Write;
    wr.wrId = kWrCredit;
    wr.local = creditOut_;
    wr.lkey = mr_->lkey;
    wr.length = 8;
    wr.remote = peer_.credit;
    wr.rkey = peer_.rkey;
    FLAGCX_CHECK(qp_->postSend(wr));
    inflight_++;
    creditSent_ = rxHead_;
    return flagcxSuccess;
  }

  flagcxResult_t pump() {
    Completion wc[32];
    for (;;) {
      int n = qp_->poll(wc, 32);
      for (int i = 0; i < n; i++) {
        const Completion &c = wc[i];
        if (c.status != WcStatus::Success) {
          if (!failed_ && c.status != WcStatus::Flushed)
            WARN(kNet, "ib rank %d <-> peer %d (%s) channel %d: %s failed: %s", desc_.self,
                 desc_.peer, desc_.host.c_str(), desc_.channel, rdma::opcodeName(c.op),
                 rdma::wcStatusName(c.status));
          if (!failed_) failStatus_ = c.status;
          failed_ = true;
          continue;
        }
        if (c.op != Opcode::Recv) {
          inflight_--;
          continue;
        }
        if (c.imm != c.length || c.length > kChunk || rxTail_ + c.length - rxHead_ > kRingBytes) {
          WARN(kNet, "ib rank %d <- peer %d channel %d: a write of %u bytes (immediate %u) overruns the ring",
               desc_.self, desc_.peer, desc_.channel, c.length, c.imm);
          return flagcxRemoteError;
        }
        rxTail_ += c.length;
        if (!broken()) FLAGCX_CHECK(qp_->postRecv(kWrRecv));
      }
      if (n < 32) return flagcxSuccess;
    }
  }

  PeerDesc desc_;
  std::shared_ptr<rdma::Device> dev_;
  std::shared_ptr<rdma::RegCache> cache_;
  std::unique_ptr<rdma::Qp> qp_;
  void *block_ = nullptr;
  const rdma::Mr *mr_ = nullptr;
  char *rx_ = nullptr, *tx_ = nullptr;
  uint64_t *creditIn_ = nullptr, *creditOut_ = nullptr;
  PipeWire peer_{};
  uint64_t txTail_ = 0, peerHead_ = 0;                  // sending
  uint64_t rxTail_ = 0, rxHead_ = 0, creditSent_ = 0;   // receiving
  int inflight_ = 0;
  bool failed_ = false;
  WcStatus failStatus_ = WcStatus::Success;
  std::chrono::steady_clock::time_point lastProbe_{};
};

class IbTransport final : public Transport {
 public:
  explicit IbTransport(std::shared_ptr<rdma::Device> dev)
      : dev_(std::move(dev)), cache_(std::make_shared<rdma::RegCache>(dev_.get(), 64)) {}
  const char *name() const override { return "ib"; }
  std::shared_ptr<rdma::Device> device() const { return dev_; }

  flagcxResult_t connectAll(Bootstrap &bs, const std::vector<int> &peers, int nchannels,
                            std::vector<std::unique_ptr<Conn>> *out) override {
    out->clear();
    int64_t lanes = paramInt(Param::IB_QPS_PER_CONNECTION);
    if (nchannels < 1 || nchannels > 64 || lanes < 1 || lanes > 16) {
      WARN(kNet, "ib connectAll: %d channel(s) x %" PRId64 " queue pair(s) (FLAGCX_IB_QPS_PER_CONNECTION) requested; 1..64 x 1..16 supported",
           nchannels, lanes);
      return flagcxInvalidArgument;
    }
    const int me = bs.rank();
    const size_t per = static_cast<size_t>(nchannels) * static_cast<size_t>(lanes);
    Hello hi{};
    hi.magic = kHelloMagic;
    hi.ringBytes = kRingBytes;
    hi.nchannels = nchannels;
    hi.nlanes = static_cast<int32_t>(lanes);
    snprintf(hi.device, sizeof hi.device, "%s", dev_->kind());
    struct Peer {
      int rank;
      std::vector<std::unique_ptr<IbPipe>> pipes;
      std::vector<PipeWire> mine, theirs;
    };
    std::vector<Peer> ps(peers.size());
    for (size_t i = 0; i < peers.size(); i++) {
      Peer &p = ps[i];
      p.rank = peers[i];
      if (p.rank < 0 || p.rank >= bs.nranks() || p.rank == me) {
        WARN(kNet, "ib connectAll: rank %d cannot connect to peer %d (nranks %d)", me, p.rank, bs.nranks());
        return flagcxInvalidArgument;
      }
      p.mine.resize(per);
      for (size_t k = 0; k < per; k++) {
        auto pipe = std::make_unique<IbPipe>(desc(bs, p.rank, static_cast<int>(k / lanes)), dev_, cache_);
        FLAGCX_CHECK(pipe->init());
        FLAGCX_CHECK(pipe->wire(&p.mine[k]));
        p.pipes.push_back(std::move(pipe));
      }
      FLAGCX_CHECK(bs.send(p.rank, kTagHello, &hi, sizeof hi));
    }
    flagcxResult_t status = flagcxSuccess;
    for (Peer &p : ps) {
      Hello th{};
      FLAGCX_CHECK(bs.recv(p.rank, kTagHello, &th, sizeof th));
      th.device[sizeof th.device - 1] = 0;
      if (th.magic != kHelloMagic || th.nchannels != nchannels || th.nlanes != hi.nlanes ||
          th.ringBytes != kRingBytes || strcmp(th.device, hi.device) != 0) {
        WARN(kNet, "ib connectAll: rank %d and peer %d disagree (channels %d/%d, queue pairs %d/%d, device %s/%s); set FLAGCX_IB_QPS_PER_CONNECTION and FLAGCX_IB_SOFTWARE_DEVICE alike on every rank",
             me, p.rank, nchannels, th.nchannels, hi.nlanes, th.nlanes, hi.device, th.device);
        status = flagcxInvalidUsage;
        p.rank = -1 - p.rank;  // no wire exchange with this one
        continue;
      }
      FLAGCX_CHECK(bs.send(p.rank, kTagWire, p.mine.data(), per * sizeof(PipeWire)));
    }
    for (Peer &p : ps) {
      if (p.rank < 0) continue;
      p.theirs.resize(per);
      FLAGCX_CHECK(bs.recv(p.rank, kTagWire, p.theirs.data(), per * sizeof(PipeWire)));
      flagcxResult_t rc = flagcxSuccess;
      for (size_t k = 0; k < per && rc == flagcxSuccess; k++) rc = p.pipes[k]->connect(p.theirs[k]);
      if (rc != flagcxSuccess && status == flagcxSuccess) status = rc;
      int32_t ack = rc == flagcxSuccess ? 1 : 0;
      FLAGCX_CHECK(bs.send(p.rank, kTagAck, &ack, sizeof ack));
    }
    for (Peer &p : ps) {
      if (p.rank < 0) continue;
      int32_t ack = 0;
      FLAGCX_CHECK(bs.recv(p.rank, kTagAck, &ack, sizeof ack));
      for (auto &pipe : p.pipes) pipe->connected();
      if (ack != 1) {
        WARN(kNet, "ib connectAll: rank %d: peer %d could not connect its queue pairs", me, p.rank);
        if (status == flagcxSuccess) status = flagcxRemoteError;
      }
    }
    if (status != flagcxSuccess) return status;
    for (Peer &p : ps) {
      for (int c = 0; c < nchannels; c++) {
        std::vector<std::unique_ptr<Pipe>> ls;
        for (int64_t l = 0; l < lanes; l++)
          ls.push_back(std::move(p.pipes[static_cast<size_t>(c * lanes + l)]));
        out->push_back(
            std::make_unique<FramedConn>("ib", desc(bs, p.rank, c), std::move(ls), reduce_));
      }
    }
    INFO(kNet, "ib: rank %d connected to %zu peer(s) on %s port %d (%s device), %d channel(s) x %" PRId64 " queue pair(s)",
         me, ps.size(), dev_->port().device.c_str(), dev_->port().port, dev_->kind(), nchannels, lanes);
    return flagcxSuccess;
  }

 private:
  static PeerDesc desc(Bootstrap &bs, int peer, int channel) {
    PeerDesc d;
    d.self = bs.rank();
    d.peer = peer;
    d.channel = channel;
    d.host = bs.peers().size() > static_cast<size_t>(peer) ? bs.peers()[peer].host : "?";
    return d;
  }
  std::shared_ptr<rdma::Device> dev_;
  std::shared_ptr<rdma::RegCache> cache_;
};

}  // namespace

std::shared_ptr<rdma::Device> ibTransportDevice(Transport *t) {
  auto *ib = dynamic_cast<IbTransport *>(t);
  return ib ? ib->device() : nullptr;
}

std::unique_ptr<Transport> makeIbTransport(std::shared_ptr<rdma::Device> dev) {
  return std::make_unique<IbTransport>(std::move(dev));
}

}  // namespace flagcx
