// The software one-sided engine (net/rma.h): one service thread per rank
// that sends submitted requests and applies incoming ones.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cinttypes>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "base/log.h"
#include "base/params.h"
#include "net/ibverbs/ib_rma.h"
#include "net/rma.h"

namespace flagcx {
namespace {

using Clock = std::chrono::steady_clock;

enum RmaOp : uint32_t { kPut = 1, kGet, kValue, kSignal, kAck, kData, kNop, kBye };
struct RmaHdr {
  uint32_t op, key;
  uint64_t off, len, id, value;
};
static_assert(sizeof(RmaHdr) == 40);
constexpr uint64_t kTagHdr = 0x0fe5000000000001ull;
constexpr uint64_t kTagData = 0x0fe5000000000002ull;
constexpr int kMaxSends = 64;  // header+payload pairs in flight per Conn

const char *opName(uint32_t op) {
  switch (op) {
    case kPut: return "put";
    case kGet: return "get";
    case kValue: return "put-value";
    case kSignal: return "signal";
    default: return "request";
  }
}

void complete(RmaDone *d, int rc) { rmaComplete(d, rc); }

}  // namespace

void rmaComplete(RmaDone *d, int rc) {
  if (rc != flagcxSuccess) {
    int ok = flagcxSuccess;
    d->error.compare_exchange_strong(ok, rc);
    if (d->errorSink) {
      ok = flagcxSuccess;
      d->errorSink->compare_exchange_strong(ok, rc);
    }
  }
  // A caller-owned `d` (on the waiter's stack) may be gone the moment `left`
  // reaches 0: its waiter returns.  So what the last decrement needs is read
  // before it, and `d` is touched after it only when the engine owns it.
  // (Reading `owned` after the decrement once freed a stack address:
  // "free(): invalid pointer" in onesided-socket-4.)
  const bool owned = d->owned;
  std::atomic<uint64_t> *const counter = d->counter;
  if (d->left.fetch_sub(1, std::memory_order_acq_rel) != 1 || !owned) return;
  if (counter && d->error.load() == flagcxSuccess) counter->fetch_add(1, std::memory_order_release);
  delete d;
}

namespace {

struct Request {  // submitted by a caller, waiting for an answer
  RmaHdr hdr;
  const void *src = nullptr;  // put payload
  void *dst = nullptr;        // get destination
  RmaDone *done = nullptr;
  Clock::time_point posted;
  bool native = false;        // as RDMA, to `remote`
  RmaRemote remote;
};

struct Out {  // a message to send: header, optional payload
  RmaHdr hdr;
  const void *payload = nullptr;
  int reqHdr = -1, reqPay = -1;
};

struct Peer {
  std::unique_ptr<Conn> conn;
  bool gone = false;
  int err = flagcxSuccess;
  std::deque<std::unique_ptr<Out>> outq, sending;
  std::map<uint64_t, Request> waiting;  // by id: sent, answer not yet here
  int recvReq = -1;
  bool inPayload = false;
  RmaHdr in{}, cur{};
  Clock::time_point lastSend;
  // Native RDMA: queued, and posted (by id) until their completion.
  std::deque<Request> natQ;
  std::map<uint64_t, Request> natWait;
};
constexpr size_t kMaxNative = 64;  // operations posted per queue pair

struct Region {
  char *base;
  uint64_t size;
};

class Engine final : public RmaEngine {
 public:
  Engine(int rank, int nranks, std::vector<std::unique_ptr<Conn>> conns,
         std::atomic<uint64_t> *signals, size_t stride, std::unique_ptr<IbRma> native)
      : rank_(rank), signals_(signals), stride_(stride), peers_(static_cast<size_t>(nranks)),
        native_(std::move(native)) {
    int64_t t = paramInt(Param::TIMEOUT);
    timeout_ = std::chrono::seconds(t > 0 ? t : 600);
    keepalive_ = std::max<Clock::duration>(std::chrono::milliseconds(250), timeout_ / 4);
    auto now = Clock::now();
    for (size_t p = 0; p < conns.size() && p < peers_.size(); p++) {
      peers_[p].conn = std::move(conns[p]);
      peers_[p].lastSend = now;
    }
    thread_ = std::thread([this] { loop(); });
  }
  ~Engine() override {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  flagcxResult_t expose(uint32_t key, void *base, uint64_t size, uint32_t *rkey) override {
    *rkey = 0;
    if (native_) FLAGCX_CHECK(native_->expose(base, size, rkey));
    std::lock_guard<std::mutex> g(regMu_);
    regions_[key] = Region{static_cast<char *>(base), size};
    return flagcxSuccess;
  }
  void withdraw(uint32_t key) override {
    std::lock_guard<std::mutex> g(regMu_);
    auto it = regions_.find(key);
    if (it == regions_.end()) return;
    if (native_) native_->withdraw(it->second.base);
    regions_.erase(it);
  }
  void put(int peer, const void *src, uint64_t len, uint32_t key, uint64_t off,
           RmaDone *done, const RmaRemote *remote) override {
    submit(peer, RmaHdr{kPut, key, off, len, 0, 0}, src, nullptr, done, remote);
  }
  void get(int peer, void *dst, uint64_t len, uint32_t key, uint64_t off,
           RmaDone *done, const RmaRemote *remote) override {
    submit(peer, RmaHdr{kGet, key, off, len, 0, 0}, nullptr, dst, done, remote);
  }
  bool native(int peer) const override { return native_ && native_->serves(peer); }
  void putValue(int peer, uint64_t value, uint32_t key, uint64_t off, RmaDone *done) override {
    submit(peer, RmaHdr{kValue, key, off, 8, 0, value}, nullptr, nullptr, done);
  }
  void signal(int peer, uint64_t add, RmaDone *done, const RmaRemote *remote) override {
    submit(peer, RmaHdr{kSignal, 0, 0, 0, 0, add}, nullptr, nullptr, done, remote);
  }
  bool peerGone(int peer) const override { return goneFlag_[static_cast<size_t>(peer)].load(); }
  bool serves(int peer) const override {
    return peer >= 0 && static_cast<size_t>(peer) < peers_.size() &&
           (peers_[static_cast<size_t>(peer)].conn != nullptr || native(peer));
  }

 private:
  void submit(int peer, RmaHdr h, const void *src, void *dst, RmaDone *done,
              const RmaRemote *remote = nullptr) {
    Request r;
    r.hdr = h;
    r.src = src;
    r.dst = dst;
    r.done = done;
    r.posted = Clock::now();
    if (remote && native(peer)) {
      r.native = true;
      r.remote = *remote;
    }
    {
      std::lock_guard<std::mutex> g(qMu_);
      queue_.push_back({peer, r});
      pendingSubmits_.store(true);
    }
    // A service thread asleep in a long idle wait is woken (a short sleep
    // or a spin sees the request soon enough by itself).
    if (sleeping_.load()) {
      std::lock_guard<std::mutex> g(sleepMu_);
      sleepCv_.notify_one();
    }
  }

  bool lookup(uint32_t key, uint64_t off, uint64_t len, char **at, uint64_t *size) {
    std::lock_guard<std::mutex> g(regMu_);
    auto it = regions_.find(key);
    *size = 0;
    if (it == regions_.end()) return false;
    *size = it->second.size;
    if (off > it->second.size || len > it->second.size - off) return false;
    *at = it->second.base + off;
    return true;
  }

  void failPeer(int p, int rc, bool quiet) {
    Peer &pe = peers_[static_cast<size_t>(p)];
    if (pe.gone) return;
    pe.gone = true;
    pe.err = rc;
    goneFlag_[static_cast<size_t>(p)].store(true);
    if (!quiet && (!pe.waiting.empty() || !pe.outq.empty()))
      WARN(kNet, "rank %d: one-sided: peer %d unreachable (%s); %zu operation(s) to it fail", rank_,
           p, flagcxGetErrorString(static_cast<flagcxResult_t>(rc)),
           pe.waiting.size() + pe.outq.size());
    for (auto &w : pe.waiting) complete(w.second.done, rc);
    pe.waiting.clear();
    for (auto &w : pe.natWait) complete(w.second.done, rc);
    pe.natWait.clear();
    for (auto &q : pe.natQ) complete(q.done, rc);
    pe.natQ.clear();
    for (auto &o : pe.outq)
      if (o->hdr.op != kAck && o->hdr.op != kData && o->hdr.op != kNop && o->hdr.op != kBye) {
        auto it = early_.find(o->hdr.id);
        if (it != early_.end()) {
          complete(it->second.done, rc);
          early_.erase(it);
        }
      }
    pe.outq.clear();
  }

  // A request that is wrong on arrival: the initiator checked it against
  // what this rank registered, so it is a protocol error or a race with
  // deregistration.  The peer is cut off.
  void refuse(int p, const RmaHdr &h, uint64_t size) {
    WARN(kNet, "rank %d: one-sided %s from rank %d refused: key %u, bytes [%" PRIu64 ", %" PRIu64
         ") outside the registered %" PRIu64 " bytes (or not registered)", rank_, opName(h.op), p,
         h.key, h.off, h.off + h.len, size);
    peers_[static_cast<size_t>(p)].conn->poison(flagcxRemoteError, 0, 0);
    failPeer(p, flagcxRemoteError, false);
  }

  void reply(Peer &pe, RmaHdr h, const void *payload = nullptr) {
    auto o = std::make_unique<Out>();
    o->hdr = h;
    o->payload = payload;
    pe.outq.push_back(std::move(o));
  }

  void answer(int p, uint64_t id, int rc) {
    Peer &pe = peers_[static_cast<size_t>(p)];
    auto it = pe.waiting.find(id);
    if (it == pe.waiting.end()) return;
    RmaDone *d = it->second.done;
    pe.waiting.erase(it);
    complete(d, rc);
  }

  // A header arrived from peer p.
  flagcxResult_t onHeader(int p) {
    Peer &pe = peers_[static_cast<size_t>(p)];
    RmaHdr h = pe.in;
    char *at = nullptr;
    uint64_t size = 0;
    switch (h.op) {
      case kPut:
        if (!lookup(h.key, h.off, h.len, &at, &size)) return refuse(p, h, size), flagcxSuccess;
        if (h.len == 0) return reply(pe, RmaHdr{kAck, 0, 0, 0, h.id, 0}), flagcxSuccess;
        pe.cur = h;
        pe.inPayload = true;
        return pe.conn->irecv(at, h.len, kTagData, &pe.recvReq);
      case kGet:
        if (!lookup(h.key, h.off, h.len, &at, &size)) return refuse(p, h, size), flagcxSuccess;
        reply(pe, RmaHdr{kData, 0, 0, h.len, h.id, 0}, at);
        return flagcxSuccess;
      case kValue:
        if (!lookup(h.key, h.off, 8, &at, &size)) return refuse(p, h, size), flagcxSuccess;
        memcpy(at, &h.value, 8);
        std::atomic_thread_fence(std::memory_order_release);
        reply(pe, RmaHdr{kAck, 0, 0, 0, h.id, 0});
        return flagcxSuccess;
      case kSignal:
        signals_[static_cast<size_t>(p) * stride_].fetch_add(h.value, std::memory_order_release);
        reply(pe, RmaHdr{kAck, 0, 0, 0, h.id, 0});
        return flagcxSuccess;
      case kAck:
        answer(p, h.id, h.value < flagcxNumResults ? static_cast<int>(h.value) : flagcxRemoteError);
        return flagcxSuccess;
      case kData: {
        auto it = pe.waiting.find(h.id);
        if (it == pe.waiting.end() || it->second.hdr.len != h.len) {
          WARN(kNet, "rank %d: one-sided: rank %d answered a read this rank did not make", rank_, p);
          return flagcxRemoteError;
        }
        if (h.len == 0) return answer(p, h.id, flagcxSuccess), flagcxSuccess;
        pe.cur = h;
        pe.inPayload = true;
        return pe.conn->irecv(it->second.dst, h.len, kTagData, &pe.recvReq);
      }
      case kNop:
        return flagcxSuccess;
      case kBye:
        INFO(kNet, "rank %d: one-sided: rank %d closed its communicator", rank_, p);
        failPeer(p, flagcxRemoteError, false);
        return flagcxSuccess;
      default:
        WARN(kNet, "rank %d: one-sided: unknown request %u from rank %d", rank_, h.op, p);
        return flagcxRemoteError;
    }
  }

  flagcxResult_t progressPeer(int p, Clock::time_point now, bool *moved) {
    Peer &pe = peers_[static_cast<size_t>(p)];
    // Sends: post what fits, then retire completed ones in order.
    while (!pe.outq.empty() && static_cast<int>(pe.sending.size()) < kMaxSends) {
      std::unique_ptr<Out> o = std::move(pe.outq.front());
      pe.outq.pop_front();
      if (o->hdr.op != kAck && o->hdr.op != kData && o->hdr.op != kNop && o->hdr.op != kBye) {
        auto it = early_.find(o->hdr.id);
        if (it != early_.end()) {
          pe.waiting[o->hdr.id] = it->second;
          early_.erase(it);
        }
      }
      FLAGCX_CHECK(pe.conn->isend(&o->hdr, sizeof(RmaHdr), kTagHdr, &o->reqHdr));
      bool pay = o->hdr.op == kPut || o->hdr.op == kData;
      if (pay && o->hdr.len > 0)
        FLAGCX_CHECK(pe.conn->isend(o->payload, o->hdr.len, kTagData, &o->reqPay));
      pe.sending.push_back(std::move(o));
      pe.lastSend = now;
      *moved = true;
    }
    while (!pe.sending.empty()) {
      Out &o = *pe.sending.front();
      bool done = false;
      if (o.reqHdr >= 0) {
        FLAGCX_CHECK(pe.conn->test(o.reqHdr, &done, nullptr));
        if (!done) break;
        o.reqHdr = -1;
      }
      if (o.reqPay >= 0) {
        FLAGCX_CHECK(pe.conn->test(o.reqPay, &done, nullptr));
        if (!done) break;
        o.reqPay = -1;
      }
      pe.sending.pop_front();
      *moved = true;
    }
    // Receives: one header (or one payload) posted at a time.
    for (int n = 0; n < 16 && !pe.gone; n++) {
      if (pe.recvReq < 0) FLAGCX_CHECK(pe.conn->irecv(&pe.in, sizeof(RmaHdr), kTagHdr, &pe.recvReq));
      bool done = false;
      size_t bytes = 0;
      FLAGCX_CHECK(pe.conn->test(pe.recvReq, &done, &bytes));
      if (!done) break;
      pe.recvReq = -1;
      *moved = true;
      if (pe.inPayload) {
        pe.inPayload = false;
        if (pe.cur.op == kPut) reply(pe, RmaHdr{kAck, 0, 0, 0, pe.cur.id, 0});
        else answer(p, pe.cur.id, flagcxSuccess);
        continue;
      }
      if (bytes != sizeof(RmaHdr)) {
        WARN(kNet, "rank %d: one-sided: a %zu-byte header from rank %d", rank_, bytes, p);
        return flagcxRemoteError;
      }
      FLAGCX_CHECK(onHeader(p));
    }
    if (pe.gone) return flagcxSuccess;
    // Keep an idle Conn moving; fail requests that waited too long.
    if (pe.outq.empty() && pe.sending.empty() && now - pe.lastSend > keepalive_)
      reply(pe, RmaHdr{kNop, 0, 0, 0, 0, 0});
    if (!pe.waiting.empty() && now - pe.waiting.begin()->second.posted > timeout_) {
      WARN(kNet, "rank %d: one-sided: no answer from rank %d for FLAGCX_TIMEOUT (%" PRId64
           " s) to a %s", rank_, p,
           static_cast<int64_t>(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()),
           opName(pe.waiting.begin()->second.hdr.op));
      return flagcxRemoteError;
    }
    return flagcxSuccess;
  }

  // Native RDMA to peer p: post what fits, collect completions.  Polling
  // also serves the peer's requests on the software device.
  flagcxResult_t progressNative(int p, Clock::time_point now, bool *moved) {
    Peer &pe = peers_[static_cast<size_t>(p)];
    while (!pe.natQ.empty() && pe.natWait.size() < kMaxNative) {
      Request r = pe.natQ.front();
      pe.natQ.pop_front();
      uint64_t id = r.hdr.id;
      flagcxResult_t rc =
          r.hdr.op == kPut      ? native_->write(p, r.src, r.hdr.len, r.remote.addr, r.remote.rkey, id)
          : r.hdr.op == kGet    ? native_->read(p, r.dst, r.hdr.len, r.remote.addr, r.remote.rkey, id)
                                : native_->fetchAdd(p, r.remote.addr, r.remote.rkey, r.hdr.value, id);
      pe.natWait[id] = r;
      if (rc != flagcxSuccess) return rc;
      *moved = true;
    }
    IbRma::Done d[16];
    int n = native_->poll(p, d, 16);
    if (n < 0) {
      WARN(kNet, "rank %d: one-sided: the verbs queue pair to rank %d failed", rank_, p);
      return flagcxRemoteError;
    }
    for (int i = 0; i < n; i++) {
      auto it = pe.natWait.find(d[i].id);
      if (it == pe.natWait.end()) continue;
      RmaDone *done = it->second.done;
      pe.natWait.erase(it);
      complete(done, d[i].rc);
      *moved = true;
    }
    if (!pe.natWait.empty() && now - pe.natWait.begin()->second.posted > timeout_) {
      WARN(kNet, "rank %d: one-sided: a verbs %s to rank %d did not complete within "
           "FLAGCX_TIMEOUT", rank_, opName(pe.natWait.begin()->second.hdr.op), p);
      return flagcxRemoteError;
    }
    return flagcxSuccess;
  }

  void takeSubmits() {
    if (!pendingSubmits_.load(std::memory_order_acquire)) return;
    std::vector<std::pair<int, Request>> q;
    {
      std::lock_guard<std::mutex> g(qMu_);
      q.swap(queue_);
      pendingSubmits_.store(false, std::memory_order_relaxed);
    }
    for (auto &e : q) {
      Peer &pe = peers_[static_cast<size_t>(e.first)];
      if (pe.gone || (!pe.conn && !e.second.native)) {
        complete(e.second.done, pe.gone ? pe.err : flagcxInternalError);
        continue;
      }
      if (e.second.native) {
        e.second.hdr.id = nextId_++;
        pe.natQ.push_back(e.second);
        continue;
      }
      e.second.hdr.id = nextId_++;
      auto o = std::make_unique<Out>();
      o->hdr = e.second.hdr;
      o->payload = e.second.src;
      early_[o->hdr.id] = e.second;  // moves to `waiting` once posted
      pe.outq.push_back(std::move(o));
    }
  }

  void loop() {
    logSetRank(rank_);
    int spins = 0;
    auto lastMove = Clock::now();
    while (!stop_.load(std::memory_order_acquire)) {
      takeSubmits();
      auto now = Clock::now();
      bool moved = false;
      for (size_t p = 0; p < peers_.size(); p++) {
        Peer &pe = peers_[p];
        if (pe.gone) continue;
        flagcxResult_t rc = flagcxSuccess;
        if (native(static_cast<int>(p))) rc = progressNative(static_cast<int>(p), now, &moved);
        if (rc == flagcxSuccess && pe.conn) rc = progressPeer(static_cast<int>(p), now, &moved);
        if (rc != flagcxSuccess) {
          // Given up (no answer within FLAGCX_TIMEOUT, a broken Conn, a bad
          // message): cut the Conn first, so that nothing still on its way
          // (a helper thread's receive into a read's destination) lands in
          // memory whose operation is about to be failed back to its caller.
          if (pe.conn) pe.conn->poison(rc, 0, 0);
          failPeer(static_cast<int>(p), rc, false);
        }
      }
      if (moved) {
        spins = 0;
        lastMove = now;
      } else if (++spins < 32) {
        __builtin_ia32_pause();
      } else if (spins < 256) {
        std::this_thread::yield();
      } else {
        // Idle: poll less often the longer nothing moves.
        bool longIdle = now - lastMove > std::chrono::milliseconds(50);
        if (!longIdle) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        } else {
          std::unique_lock<std::mutex> lk(sleepMu_);
          sleeping_.store(true);
          if (!pendingSubmits_.load())  // seq_cst with submit(): no lost wake-up
            sleepCv_.wait_for(lk, std::chrono::microseconds(500));
          sleeping_.store(false, std::memory_order_relaxed);
        }
      }
    }
    shutdown();
  }

  // Say goodbye to every reachable peer (bounded), fail what is left.
  void shutdown() {
    takeSubmits();
    auto now = Clock::now();
    for (size_t p = 0; p < peers_.size(); p++) {
      Peer &pe = peers_[p];
      for (auto &w : pe.natWait) complete(w.second.done, flagcxInvalidUsage);
      pe.natWait.clear();
      for (auto &q : pe.natQ) complete(q.done, flagcxInvalidUsage);
      pe.natQ.clear();
      if (!pe.conn || pe.gone) continue;
      for (auto &w : pe.waiting) complete(w.second.done, flagcxInvalidUsage);
      pe.waiting.clear();
      pe.outq.clear();
      reply(pe, RmaHdr{kBye, 0, 0, 0, 0, 0});
    }
    for (auto &e : early_) complete(e.second.done, flagcxInvalidUsage);
    early_.clear();
    auto until = now + std::chrono::seconds(1);
    bool busy = true;
    while (busy && Clock::now() < until) {
      busy = false;
      for (size_t p = 0; p < peers_.size(); p++) {
        Peer &pe = peers_[p];
        if (!pe.conn || pe.gone) continue;
        bool moved = false;
        if (progressPeer(static_cast<int>(p), Clock::now(), &moved) != flagcxSuccess) {
          pe.gone = true;
          continue;
        }
        for (auto &w : pe.waiting) complete(w.second.done, flagcxInvalidUsage);
        pe.waiting.clear();
        busy = busy || !pe.outq.empty() || !pe.sending.empty();
      }
      if (busy) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  int rank_;
  std::atomic<uint64_t> *signals_;
  size_t stride_;
  std::vector<Peer> peers_;
  std::unique_ptr<IbRma> native_;
  std::unique_ptr<std::atomic<bool>[]> goneFlag_{new std::atomic<bool>[peers_.size()]()};
  std::map<uint64_t, Request> early_;  // ids queued, not posted yet
  uint64_t nextId_ = 1;
  Clock::duration timeout_, keepalive_;
  std::mutex qMu_;
  std::vector<std::pair<int, Request>> queue_;
  std::atomic<bool> pendingSubmits_{false};
  std::mutex regMu_;
  std::map<uint32_t, Region> regions_;
  std::mutex sleepMu_;
  std::condition_variable sleepCv_;
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

std::unique_ptr<RmaEngine> RmaEngine::create(int rank, int nranks,
                                             std::vector<std::unique_ptr<Conn>> conns,
                                             std::atomic<uint64_t> *signals, size_t signalStride,
                                             std::unique_ptr<IbRma> native) {
  return std::make_unique<Engine>(rank, nranks, std::move(conns), signals, signalStride,
                                  std::move(native));
}

}  // namespace flagcx
