// The software one-sided engine (net/rma.h): registration, submission, and
// the service thread that sends this rank's requests and polls its Conns
// (what it does with the peers' messages is in rma_target.cc; the rules and
// bounds at the top of rma_engine_impl.h).
#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "base/base.h"
#include "net/common/rma_engine_impl.h"

namespace flagcx {

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

namespace rma_detail {

using namespace rma;

Engine::Engine(int rank, int nranks, std::vector<std::unique_ptr<Conn>> conns,
               std::atomic<uint64_t> *signals, size_t stride, std::unique_ptr<IbRma> native)
    : rank_(rank), signals_(signals), stride_(stride), peers_(static_cast<size_t>(nranks)),
      native_(std::move(native)) {
  int64_t t = paramInt(Param::TIMEOUT);
  timeout_ = std::chrono::seconds(t > 0 ? t : 600);
  keepalive_ = std::max<Clock::duration>(std::chrono::milliseconds(250), timeout_ / 4);
  auto now = Clock::now();
  for (size_t p = 0; p < conns.size() && p < peers_.size(); p++) {
    peers_[p].conn = std::move(conns[p]);
    peers_[p].served = peers_[p].conn != nullptr;
    peers_[p].lastSend = now;
  }
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

flagcxResult_t Engine::expose(uint32_t key, void *base, uint64_t size, uint32_t *rkey) {
  *rkey = 0;
  if (native_) FLAGCX_CHECK(native_->expose(base, size, rkey));
  std::lock_guard<std::mutex> g(regMu_);
  regions_[key] = Region{static_cast<char *>(base), size};
  return flagcxSuccess;
}

// No request reaches the region once it is out of the table; operations
// already moving its bytes (a put's payload arriving, a get's answer being
// sent) are waited for, and the service thread cuts their peers at once:
// a correct program has none left (deregistration follows a barrier).
void Engine::withdraw(uint32_t key) {
  std::unique_lock<std::mutex> g(regMu_);
  auto it = regions_.find(key);
  if (it == regions_.end()) return;
  if (native_) native_->withdraw(it->second.base);
  regions_.erase(it);
  if (pinned_.count(key) == 0 || serviceDone_) return;
  withdrawing_.insert(key);
  withdrawAsked_.store(true);
  {
    std::lock_guard<std::mutex> s(sleepMu_);
    sleepCv_.notify_one();
  }
  regCv_.wait(g, [&] { return pinned_.count(key) == 0 || serviceDone_; });
  withdrawing_.erase(key);
}

void Engine::submit(int peer, Hdr h, const void *src, void *dst, RmaDone *done,
                    const RmaRemote *remote) {
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

// Post what fits: answers first (they never wait on the peer), then this
// rank's requests while fewer than kMaxOutstanding wait for an answer.
flagcxResult_t Engine::postSends(int p, Clock::time_point now, bool *moved) {
  Peer &pe = peers_[static_cast<size_t>(p)];
  while (static_cast<int>(pe.sending.size()) < kMaxSends) {
    bool answerNext = !pe.replies.empty();
    if (!answerNext && (pe.outq.empty() || pe.waiting.size() >= kMaxOutstanding)) break;
    auto &q = answerNext ? pe.replies : pe.outq;
    std::unique_ptr<Out> o = std::move(q.front());
    q.pop_front();
    if (!answerNext) {
      auto it = early_.find(o->hdr.id);
      if (it != early_.end()) {
        Request &w = pe.waiting[o->hdr.id] = it->second;
        w.inConn = true;
        early_.erase(it);
      }
    }
    Out &sent = *o;
    pe.sending.push_back(std::move(o));  // failPeer finds it there if a post fails
    FLAGCX_CHECK(pe.conn->isend(&sent.hdr, sizeof(Hdr), kTagHdr, &sent.reqHdr));
    bool pay = sent.hdr.op == kPut || sent.hdr.op == kData;
    if (pay && sent.hdr.len > 0)
      FLAGCX_CHECK(pe.conn->isend(sent.payload, sent.hdr.len, kTagData, &sent.reqPay));
    pe.lastSend = now;
    *moved = true;
  }
  return flagcxSuccess;
}

// Retire completed sends in order.
flagcxResult_t Engine::retireSends(int p, bool *moved) {
  Peer &pe = peers_[static_cast<size_t>(p)];
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
    std::unique_ptr<Out> keep = std::move(pe.sending.front());
    pe.sending.pop_front();
    sendDone(p, *keep);
    *moved = true;
  }
  return flagcxSuccess;
}

flagcxResult_t Engine::progressPeer(int p, Clock::time_point now, bool *moved) {
  Peer &pe = peers_[static_cast<size_t>(p)];
  FLAGCX_CHECK(postSends(p, now, moved));
  FLAGCX_CHECK(retireSends(p, moved));
  // Receives: one header (or one payload) posted at a time.  No new header
  // while the peer leaves too many answers unread (see the top).
  for (int n = 0; n < 16 && !pe.gone; n++) {
    if (pe.recvReq < 0) {
      if (pe.owed > kMaxOutstanding) break;
      FLAGCX_CHECK(pe.conn->irecv(&pe.in, sizeof(Hdr), kTagHdr, &pe.recvReq));
    }
    bool done = false;
    size_t bytes = 0;
    FLAGCX_CHECK(pe.conn->test(pe.recvReq, &done, &bytes));
    if (!done) break;
    pe.recvReq = -1;
    *moved = true;
    if (pe.inPayload) {
      FLAGCX_CHECK(onPayload(p, bytes));
      continue;
    }
    if (bytes != sizeof(Hdr)) {
      WARN(kNet, "rank %d: one-sided: a %zu-byte header from rank %d", rank_, bytes, p);
      return flagcxRemoteError;
    }
    FLAGCX_CHECK(onHeader(p));
  }
  if (pe.gone) return flagcxSuccess;
  // Keep an idle Conn moving; fail requests that waited too long.
  if (pe.outq.empty() && pe.replies.empty() && pe.sending.empty() &&
      now - pe.lastSend > keepalive_)
    reply(pe, Hdr{kNop, 0, 0, 0, 0, 0});
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
flagcxResult_t Engine::progressNative(int p, Clock::time_point now, bool *moved) {
  Peer &pe = peers_[static_cast<size_t>(p)];
  while (!pe.natQ.empty() && pe.natWait.size() < kMaxNative) {
    Request r = pe.natQ.front();
    pe.natQ.pop_front();
    uint64_t id = r.hdr.id;
    flagcxResult_t rc =
        r.hdr.op == kPut   ? native_->write(p, r.src, r.hdr.len, r.remote.addr, r.remote.rkey, id)
        : r.hdr.op == kGet ? native_->read(p, r.dst, r.hdr.len, r.remote.addr, r.remote.rkey, id)
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
    rmaComplete(done, d[i].rc);
    *moved = true;
  }
  if (!pe.natWait.empty() && now - pe.natWait.begin()->second.posted > timeout_) {
    WARN(kNet, "rank %d: one-sided: a verbs %s to rank %d did not complete within "
         "FLAGCX_TIMEOUT", rank_, opName(pe.natWait.begin()->second.hdr.op), p);
    return flagcxRemoteError;
  }
  return flagcxSuccess;
}

void Engine::takeSubmits() {
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
      rmaComplete(e.second.done, pe.gone ? pe.err : flagcxInternalError);
      continue;
    }
    e.second.hdr.id = nextId_++;
    if (e.second.native) {
      pe.natQ.push_back(e.second);
      continue;
    }
    auto o = std::make_unique<Out>();
    o->hdr = e.second.hdr;
    o->payload = e.second.src;
    early_[o->hdr.id] = e.second;  // moves to `waiting` once posted
    pe.outq.push_back(std::move(o));
  }
}

void Engine::loop() {
  logSetRank(rank_);
  int spins = 0;
  auto lastMove = Clock::now();
  while (!stop_.load(std::memory_order_acquire)) {
    takeSubmits();
    if (withdrawAsked_.exchange(false)) cutWithdrawn();
    auto now = Clock::now();
    bool moved = false;
    for (size_t p = 0; p < peers_.size(); p++) {
      Peer &pe = peers_[p];
      if (pe.gone) {
        pe.conn.reset();  // its fds and helper threads go now
        continue;
      }
      flagcxResult_t rc = flagcxSuccess;
      if (native(static_cast<int>(p))) rc = progressNative(static_cast<int>(p), now, &moved);
      if (rc == flagcxSuccess && pe.conn) rc = progressPeer(static_cast<int>(p), now, &moved);
      // Given up (no answer within FLAGCX_TIMEOUT, a broken Conn, a bad
      // message): failPeer cuts the Conn first, so that nothing still on
      // its way lands in memory whose operation is failed back to its caller.
      if (rc != flagcxSuccess) failPeer(static_cast<int>(p), rc, false);
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
        if (!pendingSubmits_.load() && !withdrawAsked_.load())  // seq_cst with submit()
          sleepCv_.wait_for(lk, std::chrono::microseconds(500));
        sleeping_.store(false, std::memory_order_relaxed);
      }
    }
  }
  shutdown();
}

// Say goodbye to every reachable peer (bounded), fail what is left.
void Engine::shutdown() {
  takeSubmits();
  auto now = Clock::now();
  for (size_t p = 0; p < peers_.size(); p++) {
    Peer &pe = peers_[p];
    for (auto &w : pe.natWait) rmaComplete(w.second.done, flagcxInvalidUsage);
    pe.natWait.clear();
    for (auto &q : pe.natQ) rmaComplete(q.done, flagcxInvalidUsage);
    pe.natQ.clear();
    if (!pe.conn || pe.gone) continue;
    pe.outq.clear();
    reply(pe, Hdr{kBye, 0, 0, 0, 0, 0});
  }
  for (auto &e : early_) rmaComplete(e.second.done, flagcxInvalidUsage);
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
        failPeer(static_cast<int>(p), flagcxInvalidUsage, true, false);  // the Conn failed already
        continue;
      }
      busy = busy || !pe.replies.empty() || !pe.sending.empty();
    }
    if (busy) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // What is left fails; a Conn still moving bytes is cut first (failPeer),
  // the others are just closed (no error frame: the goodbye said it all).
  for (size_t p = 0; p < peers_.size(); p++)
    failPeer(static_cast<int>(p), flagcxInvalidUsage, true, false);
  std::lock_guard<std::mutex> g(regMu_);
  serviceDone_ = true;
  regCv_.notify_all();
}

}  // namespace rma_detail

std::unique_ptr<RmaEngine> RmaEngine::create(int rank, int nranks,
                                             std::vector<std::unique_ptr<Conn>> conns,
                                             std::atomic<uint64_t> *signals, size_t signalStride,
                                             std::unique_ptr<IbRma> native) {
  return std::make_unique<rma_detail::Engine>(rank, nranks, std::move(conns), signals,
                                              signalStride, std::move(native));
}

}  // namespace flagcx
