// The software RDMA device: TEST INFRASTRUCTURE, never chosen in production
// (only FLAGCX_IB_SOFTWARE_DEVICE selects it).  It gives the verbs transport's
// protocol engine real processes to talk to on machines without an RDMA NIC.
//
// Each queue pair owns an inbound byte ring in POSIX shared memory; its peer
// produces into it, it consumes.  Everything one side's "NIC" does is a
// message in the peer's ring: requests (write pieces with their payload,
// read, atomics) and responses (acknowledgements, read data, an atomic's old
// value, a NAK).  A side's NIC runs inside poll(): it applies the peer's
// requests to local memory after checking the rkey, range and access of the
// target region, answers them, and completes its own requests from the
// answers.  One ring per direction keeps RC order: requests execute in
// posting order and a WriteImm's receive completion follows its data.
//
// Failures as on hardware: a bad lkey/range completes the request with
// LocalProtection; a bad rkey/range/access makes the target answer with a
// NAK (RemoteAccess at the initiator); a peer that died or destroyed its
// queue pair (checked every 50 ms while requests are outstanding, and by
// checkPeer()) makes the first outstanding request RetryExceeded.  Each
// moves the queue pair to Error and flushes everything else posted, after
// the bytes the peer sent before it failed were delivered.
//
// Memory regions are plain process memory: the target copies into its own
// address space, so any buffer can be registered (as on hardware).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "base/base.h"
#include "net/ibverbs/rdma_device.h"
#include "net/ibverbs/soft_mr.h"
#include "rendezvous/rendezvous.h"

namespace flagcx::rdma {

namespace {

constexpr uint64_t kMagic = 0x4942535752494e47ull;  // "IBSWRING"
constexpr size_t kCtlBytes = 4096;
constexpr uint64_t kRingBytes = 1u << 20;
constexpr uint32_t kMaxPiece = 256 * 1024;
constexpr int kMaxSendWr = 512;
constexpr auto kPeerCheckEvery = std::chrono::milliseconds(50);

struct RingCtl {
  alignas(64) std::atomic<uint64_t> tail;  // bytes produced (the peer)
  alignas(64) std::atomic<uint64_t> head;  // bytes consumed (the owner)
  alignas(64) uint64_t magic;
  uint64_t size;
  std::atomic<int32_t> ownerPid;
  std::atomic<uint32_t> ownerClosed;
};
static_assert(sizeof(RingCtl) <= kCtlBytes);

enum class Kind : uint8_t { Request = 1, Ack, ReadData, AtomicOld, Nak };

// One message in a ring; `length` payload bytes follow, padded to 8.
struct Msg {
  Kind kind;
  Opcode op;
  uint8_t last;    // the final piece of a request or of read data
  WcStatus status; // Nak
  uint32_t length;
  uint64_t remote; // Request: target address of this piece
  uint32_t rkey;
  uint32_t imm;
  uint64_t a, b;   // atomics: add/compare, swap; AtomicOld: a = old value
};
static_assert(sizeof(Msg) == 40);

uint64_t pad8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

struct AddrBlob {
  uint64_t magic;
  int32_t pid;
  int32_t pad;
  uint64_t ringBytes;
  char name[64];
};
static_assert(sizeof(AddrBlob) <= sizeof(QpAddr::bytes));

// A mapped ring; the creator unlinks the name once the peer has opened it.
struct Ring {
  RingCtl *ctl = nullptr;
  char *data = nullptr;
  uint64_t size = 0;
  size_t bytes = 0;
  std::string name;
  bool owner = false;
  ~Ring() {
    if (ctl != nullptr) munmap(ctl, bytes);
    unlinkName();
  }
  void unlinkName() {
    if (owner && !name.empty()) shm_unlink(name.c_str());
    owner = false;
  }
  flagcxResult_t map(int fd, size_t n) {
    void *p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      WARN(kNet, "ib software device: mmap of %s failed: %s", name.c_str(), strerror(errno));
      return flagcxSystemError;
    }
    ctl = static_cast<RingCtl *>(p);
    data = static_cast<char *>(p) + kCtlBytes;
    bytes = n;
    return flagcxSuccess;
  }
};

class SoftQp final : public Qp {
 public:
  explicit SoftQp(std::shared_ptr<MrTable> t) : mrs_(std::move(t)) {}
  ~SoftQp() override {
    if (in_.ctl != nullptr) in_.ctl->ownerClosed.store(1, std::memory_order_release);
  }

  flagcxResult_t create() {
    static std::atomic<uint32_t> counter{0};
    uint32_t rnd;
    randomBytes(&rnd, sizeof rnd);
    char name[64];
    // The shm transport's form (pid, PID namespace, then ours): its orphan
    // sweep and the tests' leak checks cover these names too.
    snprintf(name, sizeof name, "/flagcx-shm-%d-%x-ibsw-%u-%08x", static_cast<int>(getpid()),
             pidNamespaceId(), counter.fetch_add(1), rnd);
    in_.name = name;
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      WARN(kNet, "ib software device: shm_open(%s) failed: %s", name, strerror(errno));
      return flagcxSystemError;
    }
    in_.owner = true;
    size_t n = kCtlBytes + kRingBytes;
    int rc = posix_fallocate(fd, 0, static_cast<off_t>(n));
    if (rc != 0) {
      WARN(kNet, "ib software device: cannot reserve %zu bytes in /dev/shm: %s", n, strerror(rc));
      close(fd);
      return flagcxSystemError;
    }
    FLAGCX_CHECK(in_.map(fd, n));
    in_.size = kRingBytes;
    in_.ctl->magic = kMagic;
    in_.ctl->size = kRingBytes;
    in_.ctl->ownerPid.store(getpid(), std::memory_order_relaxed);
    in_.ctl->ownerClosed.store(0, std::memory_order_relaxed);
    in_.ctl->head.store(0, std::memory_order_relaxed);
    in_.ctl->tail.store(0, std::memory_order_release);
    return flagcxSuccess;
  }

  flagcxResult_t localAddr(QpAddr *out) override {
    AddrBlob b{};
    b.magic = kMagic;
    b.pid = getpid();
    b.ringBytes = kRingBytes;
    snprintf(b.name, sizeof b.name, "%s", in_.name.c_str());
    *out = QpAddr{};
    memcpy(out->bytes, &b, sizeof b);
    return flagcxSuccess;
  }

  flagcxResult_t connect(const QpAddr &peer) override {
    AddrBlob b;
    memcpy(&b, peer.bytes, sizeof b);
    b.name[sizeof b.name - 1] = 0;
    if (b.magic != kMagic || b.ringBytes != kRingBytes || strncmp(b.name, "/flagcx-shm-", 12) != 0) {
      WARN(kNet, "ib software device: the peer's queue pair address is not a software device's");
      return flagcxRemoteError;
    }
    out_.name = b.name;
    int fd = shm_open(b.name, O_RDWR, 0600);
    if (fd < 0) {
      WARN(kNet, "ib software device: opening the peer's ring %s failed: %s", b.name, strerror(errno));
      return flagcxRemoteError;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != kCtlBytes + kRingBytes) {
      close(fd);
      WARN(kNet, "ib software device: the peer's ring %s has the wrong size", b.name);
      return flagcxRemoteError;
    }
    FLAGCX_CHECK(out_.map(fd, kCtlBytes + kRingBytes));
    if (out_.ctl->magic != kMagic || out_.ctl->size != kRingBytes) {
      WARN(kNet, "ib software device: %s is not a ring", b.name);
      return flagcxRemoteError;
    }
    out_.size = kRingBytes;
    peerPid_ = b.pid;
    outTail_ = out_.ctl->tail.load(std::memory_order_acquire);
    state_ = QpState::Ready;
    lastHeard_ = Clock::now();
    return flagcxSuccess;
  }

  void connected() override { in_.unlinkName(); }

  flagcxResult_t postSend(const SendWr &wr) override {
    if (static_cast<int>(sq_.size()) >= kMaxSendWr) {
      WARN(kNet, "ib software device: send queue full (%d requests)", kMaxSendWr);
      return flagcxInternalError;
    }
    sq_.push_back(Pending{wr, 0, false});
    Pending &p = sq_.back();
    if (state_ != QpState::Ready) {
      p.sent = true;  // flushed on the next poll
      if (state_ == QpState::Init) state_ = QpState::Error;
      return flagcxSuccess;
    }
    bool atomic = wr.op == Opcode::FetchAdd || wr.op == Opcode::CompSwap;
    uint32_t need = wr.op == Opcode::Read || atomic ? uint32_t{kLocalWrite} : 0u;
    uint64_t len = atomic ? 8 : wr.length;
    if (len > 0 || atomic) {
      char *at = mrs_->resolve(wr.lkey, reinterpret_cast<uint64_t>(wr.local), len, need);
      if (!at) {
        WARN(kNet, "ib software device: %s of %" PRIu64 " bytes at %p: lkey 0x%x does not cover it",
             opcodeName(wr.op), len, wr.local, wr.lkey);
        fail(WcStatus::LocalProtection);
        return flagcxSuccess;
      }
      p.wr.local = at;  // the device's view (differs for a region registered by fd)
    }
    pushPending();  // the doorbell: the request starts now if the ring has room
    return flagcxSuccess;
  }

  flagcxResult_t postRecv(uint64_t wrId) override {
    rq_.push_back(wrId);
    if (state_ == QpState::Error) flushAll(WcStatus::Flushed);
    return flagcxSuccess;
  }

  int poll(Completion *out, int max) override {
    if (state_ == QpState::Ready) {
      pushPending();
      drainInbound();
      pushPending();
      if (!sq_.empty() && Clock::now() - lastHeard_ > kPeerCheckEvery) checkPeer();
    } else if (state_ == QpState::Error) {
      flushAll(WcStatus::Flushed);
    }
    int n = 0;
    while (n < max && !cq_.empty()) {
      out[n++] = cq_.front();
      cq_.pop_front();
    }
    return n;
  }

  QpState state() const override { return state_; }
  void abort() override { if (state_ != QpState::Error) fail(WcStatus::Flushed); }
  int maxSendWr() const override { return kMaxSendWr; }

  void checkPeer() override {
    if (state_ != QpState::Ready) return;
    lastHeard_ = Clock::now();
    bool closed = out_.ctl->ownerClosed.load(std::memory_order_acquire) != 0;
    if (!closed && !processGone(peerPid_)) return;
    drainInbound();  // what the peer sent before it went is delivered
    if (state_ != QpState::Ready) return;
    WARN(kNet, "ib software device: the peer (pid %d) %s; queue pair to the error state",
         static_cast<int>(peerPid_), closed ? "destroyed its queue pair" : "has died");
    fail(WcStatus::RetryExceeded);
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    SendWr wr;
    uint64_t sentBytes;  // request pieces pushed so far
    bool sent;           // every piece is in the peer's ring
    uint64_t gotBytes = 0;  // read data received
  };
  // A response this side owes the peer (read data is sent in pieces).
  struct Owed {
    Msg m;
    const char *src = nullptr;
    uint64_t done = 0;
  };

  // Append one message to the peer's ring if it fits whole.
  bool push(const Msg &m, const void *payload) {
    uint64_t need = sizeof(Msg) + pad8(m.length);
    uint64_t head = out_.ctl->head.load(std::memory_order_acquire);
    if (outTail_ - head + need > out_.size) return false;
    copyIn(outTail_, &m, sizeof m);
    if (m.length > 0 && payload != nullptr) copyIn(outTail_ + sizeof m, payload, m.length);
    outTail_ += need;
    out_.ctl->tail.store(outTail_, std::memory_order_release);
    return true;
  }
  void copyIn(uint64_t at, const void *src, uint64_t n) {
    uint64_t pos = at % out_.size, first = std::min(n, out_.size - pos);
    memcpy(out_.data + pos, src, first);
    if (n > first) memcpy(out_.data, static_cast<const char *>(src) + first, n - first);
  }
  void copyOut(uint64_t at, void *dst, uint64_t n) {
    uint64_t pos = at % in_.size, first = std::min(n, in_.size - pos);
    memcpy(dst, in_.data + pos, first);
    if (n > first) memcpy(static_cast<char *>(dst) + first, in_.data, n - first);
  }

  // Owed responses first (they unblock the peer), then our requests in order.
  void pushPending() {
    while (!owed_.empty()) {
      Owed &o = owed_.front();
      Msg m = o.m;
      if (m.kind == Kind::ReadData) {
        m.length = static_cast<uint32_t>(std::min<uint64_t>(kMaxPiece, o.m.length - o.done));
        m.last = o.done + m.length == o.m.length;
        if (!push(m, o.src + o.done)) return;
        o.done += m.length;
        if (!m.last) continue;
      } else if (!push(m, nullptr)) {
        return;
      }
      owed_.pop_front();
    }
    for (Pending &p : sq_) {
      if (p.sent) continue;
      const SendWr &wr = p.wr;
      Msg m{};
      m.kind = Kind::Request;
      m.op = wr.op;
      m.rkey = wr.rkey;
      m.imm = wr.imm;
      m.a = wr.compareAdd;
      m.b = wr.swap;
      bool carries = wr.op == Opcode::Write || wr.op == Opcode::WriteImm;
      for (;;) {
        uint64_t piece = carries ? std::min<uint64_t>(kMaxPiece, wr.length - p.sentBytes) : 0;
        m.length = static_cast<uint32_t>(piece);
        m.remote = wr.remote + p.sentBytes;
        m.last = !carries || p.sentBytes + piece == wr.length;
        if (!carries) m.b = wr.op == Opcode::Read ? wr.length : wr.swap;
        if (!push(m, static_cast<const char *>(wr.local) + p.sentBytes)) return;
        p.sentBytes += piece;
        if (m.last) break;
      }
      p.sent = true;
    }
  }

  void drainInbound() {
    uint64_t tail = in_.ctl->tail.load(std::memory_order_acquire);
    while (state_ == QpState::Ready && inHead_ < tail) {
      if (tail - inHead_ > in_.size) {
        WARN(kNet, "ib software device: inbound ring corrupt (head %" PRIu64 ", tail %" PRIu64 ")",
             inHead_, tail);
        fail(WcStatus::Fatal);
        return;
      }
      Msg m;
      copyOut(inHead_, &m, sizeof m);
      const uint64_t body = inHead_ + sizeof m;
      if (m.kind == Kind::Request) {
        if (!serve(m, body)) return;  // a WriteImm waits for a receive
      } else if (!complete(m, body)) {
        return;
      }
      inHead_ += sizeof m + pad8(m.length);
      in_.ctl->head.store(inHead_, std::memory_order_release);
      lastHeard_ = Clock::now();
    }
  }

  // The target side of one request piece.  False: cannot take it yet.
  bool serve(const Msg &m, uint64_t body) {
    if (m.op == Opcode::WriteImm && m.last && rq_.empty() && !discard_) return false;  // RNR
    Msg r{};
    if (m.op == Opcode::Write || m.op == Opcode::WriteImm) {
      char *at = discard_ ? nullptr : mrs_->resolve(m.rkey, m.remote, m.length, kRemoteWrite);
      if (!discard_ && !at) {
        WARN(kNet, "ib software device: the peer's %s of %u bytes to 0x%" PRIx64 " refused (rkey 0x%x)",
             opcodeName(m.op), m.length, m.remote, m.rkey);
        discard_ = true;
      }
      if (!discard_) copyOut(body, at, m.length);
      inLen_ += m.length;
      if (!m.last) return true;
      uint64_t len = inLen_;
      inLen_ = 0;
      if (discard_) return discard_ = false, refuse();
      if (m.op == Opcode::WriteImm) {
        cq_.push_back(Completion{rq_.front(), Opcode::Recv, WcStatus::Success, m.imm,
                                 static_cast<uint32_t>(len)});
        rq_.pop_front();
      }
      r.kind = Kind::Ack;
      owed_.push_back(Owed{r});
      return true;
    }
    if (m.op == Opcode::Read) {
      const char *at = mrs_->resolve(m.rkey, m.remote, m.b, kRemoteRead);
      if (!at) {
        WARN(kNet, "ib software device: the peer's read of %" PRIu64 " bytes at 0x%" PRIx64 " refused (rkey 0x%x)",
             m.b, m.remote, m.rkey);
        return refuse();
      }
      r.kind = Kind::ReadData;
      r.length = static_cast<uint32_t>(m.b);
      owed_.push_back(Owed{r, at, 0});
      if (m.b == 0) owed_.back().m.last = 1;
      return true;
    }
    // Atomics: 8 aligned bytes of a region that allows them.
    char *at = m.remote % 8 != 0 ? nullptr : mrs_->resolve(m.rkey, m.remote, 8, kRemoteAtomic);
    if (!at) {
      WARN(kNet, "ib software device: the peer's %s at 0x%" PRIx64 " refused (rkey 0x%x)",
           opcodeName(m.op), m.remote, m.rkey);
      return refuse();
    }
    std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t *>(at));
    uint64_t old;
    if (m.op == Opcode::FetchAdd) {
      old = word.fetch_add(m.a);
    } else {
      old = m.a;
      word.compare_exchange_strong(old, m.b);
    }
    r.kind = Kind::AtomicOld;
    r.a = old;
    owed_.push_back(Owed{r});
    return true;
  }

  // Answer a request with a NAK; this side's queue pair fails too.
  bool refuse() {
    Msg r{};
    r.kind = Kind::Nak;
    r.status = WcStatus::RemoteAccess;
    owed_.push_back(Owed{r});
    pushPending();
    fail(WcStatus::Flushed);
    return true;
  }

  // The initiator side: an answer to our oldest outstanding request.
  bool complete(const Msg &m, uint64_t body) {
    if (sq_.empty() || !sq_.front().sent) {
      WARN(kNet, "ib software device: an answer arrived with no request outstanding");
      fail(WcStatus::Fatal);
      return false;
    }
    Pending &p = sq_.front();
    if (m.kind == Kind::Nak) {
      WARN(kNet, "ib software device: the peer refused our %s (remote access error)",
           opcodeName(p.wr.op));
      fail(WcStatus::RemoteAccess);
      return false;
    }
    if (m.kind == Kind::ReadData) {
      copyOut(body, static_cast<char *>(p.wr.local) + p.gotBytes, m.length);
      p.gotBytes += m.length;
      if (!m.last) return true;
    } else if (m.kind == Kind::AtomicOld) {
      memcpy(p.wr.local, &m.a, 8);
    }
    if (p.wr.signaled) cq_.push_back(Completion{p.wr.wrId, p.wr.op, WcStatus::Success, 0, p.wr.length});
    sq_.pop_front();
    return true;
  }

  // To the error state: the oldest request gets `first`, the rest flush.
  void fail(WcStatus first) {
    state_ = QpState::Error;
    if (!sq_.empty() && first != WcStatus::Flushed) {
      const SendWr &wr = sq_.front().wr;
      cq_.push_back(Completion{wr.wrId, wr.op, first, 0, 0});
      sq_.pop_front();
    }
    flushAll(WcStatus::Flushed);
  }
  void flushAll(WcStatus s) {
    for (Pending &p : sq_) cq_.push_back(Completion{p.wr.wrId, p.wr.op, s, 0, 0});
    sq_.clear();
    for (uint64_t id : rq_) cq_.push_back(Completion{id, Opcode::Recv, s, 0, 0});
    rq_.clear();
  }

  std::shared_ptr<MrTable> mrs_;
  Ring in_, out_;
  uint64_t inHead_ = 0, outTail_ = 0;
  pid_t peerPid_ = 0;
  QpState state_ = QpState::Init;
  std::deque<Pending> sq_;
  std::deque<uint64_t> rq_;
  std::deque<Completion> cq_;
  std::deque<Owed> owed_;
  bool discard_ = false;  // the current incoming write was refused
  uint64_t inLen_ = 0;    // bytes of the current incoming write so far
  Clock::time_point lastHeard_{};
};

class SoftDevice final : public Device {
 public:
  SoftDevice() : mrs_(std::make_shared<MrTable>()) {
    port_.device = "soft0";
    port_.port = 1;
    port_.active = true;
  }
  const char *kind() const override { return "software"; }
  const PortInfo &port() const override { return port_; }

  flagcxResult_t regMr(void *addr, size_t length, uint32_t access,
                       std::unique_ptr<Mr> *out) override {
    if (addr == nullptr || length == 0) {
      WARN(kNet, "ib software device: cannot register %zu bytes at %p", length, addr);
      return flagcxInvalidArgument;
    }
    return add(std::make_unique<SoftMr>(mrs_), addr, length, access, out);
  }

  // A region named by a file descriptor (in tests a memfd standing in for a
  // GPU's dma-buf): the device maps it, and reaches the bytes through that
  // mapping, never through `addr`.
  flagcxResult_t regDmabuf(int fd, uint64_t offset, void *addr, size_t length, uint32_t access,
                           std::unique_ptr<Mr> *out) override {
    if (fd < 0 || addr == nullptr || length == 0) {
      WARN(kNet, "ib software device: cannot register %zu bytes of fd %d at %p", length, fd, addr);
      return flagcxInvalidArgument;
    }
    auto mr = std::make_unique<SoftMr>(mrs_);
    if (!mr->map(fd, offset, length)) {
      WARN(kNet, "ib software device: mapping %zu bytes of fd %d at offset %" PRIu64 " failed: %s",
           length, fd, offset, strerror(errno));
      return flagcxSystemError;
    }
    return add(std::move(mr), addr, length, access, out);
  }

  flagcxResult_t createQp(std::unique_ptr<Qp> *out) override {
    auto qp = std::make_unique<SoftQp>(mrs_);
    FLAGCX_CHECK(qp->create());
    *out = std::move(qp);
    return flagcxSuccess;
  }

 private:
  // Give `mr` its key and enter it in the table.
  flagcxResult_t add(std::unique_ptr<SoftMr> mr, void *addr, size_t length, uint32_t access,
                     std::unique_ptr<Mr> *out) {
    mr->addr = addr;
    mr->length = length;
    mr->access = access | kLocalWrite;
    std::lock_guard<std::mutex> lk(mrs_->mu);
    mr->lkey = mr->rkey = mrs_->nextKey++;
    mrs_->byKey[mr->lkey] = mr.get();
    *out = std::move(mr);
    return flagcxSuccess;
  }
  std::shared_ptr<MrTable> mrs_;
  PortInfo port_;
};

}  // namespace

const char *opcodeName(Opcode op) {
  switch (op) {
    case Opcode::Write: return "RDMA write";
    case Opcode::WriteImm: return "RDMA write with immediate";
    case Opcode::Read: return "RDMA read";
    case Opcode::FetchAdd: return "fetch-and-add";
    case Opcode::CompSwap: return "compare-and-swap";
    case Opcode::Recv: return "receive";
  }
  return "?";
}

const char *wcStatusName(WcStatus s) {
  switch (s) {
    case WcStatus::Success: return "success";
    case WcStatus::LocalProtection: return "local protection error";
    case WcStatus::RemoteAccess: return "remote access error";
    case WcStatus::RetryExceeded: return "transport retry counter exceeded";
    case WcStatus::Flushed: return "flushed (queue pair in error)";
    case WcStatus::Fatal: return "fatal error";
  }
  return "?";
}

flagcxResult_t openSoftDevice(std::unique_ptr<Device> *out) {
  *out = std::make_unique<SoftDevice>();
  return flagcxSuccess;
}

}  // namespace flagcx::rdma
