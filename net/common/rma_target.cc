// The one-sided engine as a target: what it does with each message a peer
// sends (rma_wire.h checks it first), the pins that keep a withdrawn region
// out of reach, and cutting a peer off (rules at the top of rma_engine_impl.h).
#include <cinttypes>
#include <cstring>

#include "base/base.h"
#include "net/common/rma_engine_impl.h"

namespace flagcx::rma_detail {

using namespace rma;

flagcxResult_t Engine::onHeader(int p) {
  Peer &pe = peers_[static_cast<size_t>(p)];
  const Hdr h = pe.in;
  if (h.op == kAck || h.op == kData) return onAnswer(p, h);
  Verdict v;
  {
    std::lock_guard<std::mutex> g(regMu_);
    v = checkRequest(h, regions_);
    if (v.kind == Verdict::Apply && v.len > 0 && (h.op == kPut || h.op == kGet)) {
      pinned_[h.key]++;  // until the payload has landed / been sent
      pe.pins[h.key]++;
    }
  }
  if (v.kind == Verdict::Refuse) {
    refuse(p, h, v);
    return flagcxSuccess;
  }
  if (v.kind != Verdict::Apply) {
    WARN(kNet, "rank %d: one-sided: rank %d sent a malformed message (kind %u, key %u): %s; "
         "connection cut", rank_, p, h.op, h.key, v.why);
    return flagcxRemoteError;
  }
  switch (h.op) {
    case kPut:
      if (v.len == 0) {
        reply(pe, Hdr{kAck, 0, 0, 0, h.id, 0});
        return flagcxSuccess;
      }
      pe.cur = h;
      pe.inPayload = true;
      return pe.conn->irecv(v.at, v.len, kTagData, &pe.recvReq);
    case kGet:
      reply(pe, Hdr{kData, 0, 0, h.len, h.id, 0}, v.at, v.len > 0, h.key);
      return flagcxSuccess;
    case kValue:
      memcpy(v.at, &h.value, 8);
      std::atomic_thread_fence(std::memory_order_release);
      reply(pe, Hdr{kAck, 0, 0, 0, h.id, 0});
      return flagcxSuccess;
    case kSignal:
      signals_[static_cast<size_t>(p) * stride_].fetch_add(h.value, std::memory_order_release);
      reply(pe, Hdr{kAck, 0, 0, 0, h.id, 0});
      return flagcxSuccess;
    case kBye:
      INFO(kNet, "rank %d: one-sided: rank %d closed its communicator", rank_, p);
      failPeer(p, flagcxRemoteError, false, false);
      return flagcxSuccess;
    default:  // kNop
      return flagcxSuccess;
  }
}

flagcxResult_t Engine::onAnswer(int p, const Hdr &h) {
  Peer &pe = peers_[static_cast<size_t>(p)];
  auto it = pe.waiting.find(h.id);
  const Hdr *sent = it == pe.waiting.end() || it->second.answered ? nullptr : &it->second.hdr;
  Verdict v = checkAnswer(h, sent);
  if (v.kind != Verdict::Apply) {
    WARN(kNet, "rank %d: one-sided: rank %d sent %s for request %" PRIu64 ": %s; connection cut",
         rank_, p, opName(h.op), h.id, v.why);
    return flagcxRemoteError;
  }
  if (h.op == kAck) {
    answer(p, h.id, h.value < flagcxNumResults ? static_cast<int>(h.value) : flagcxRemoteError);
    return flagcxSuccess;
  }
  if (v.len == 0) {
    answer(p, h.id, flagcxSuccess);
    return flagcxSuccess;
  }
  pe.cur = h;
  pe.inPayload = true;
  return pe.conn->irecv(it->second.dst, v.len, kTagData, &pe.recvReq);
}

// A put's payload, or a get's answer, has arrived: exactly as long as its header said.
flagcxResult_t Engine::onPayload(int p, size_t bytes) {
  Peer &pe = peers_[static_cast<size_t>(p)];
  const Hdr h = pe.cur;
  pe.inPayload = false;
  if (bytes != h.len) {
    WARN(kNet, "rank %d: one-sided: rank %d sent %zu payload bytes for a %" PRIu64 "-byte %s; "
         "connection cut", rank_, p, bytes, h.len, opName(h.op));
    return flagcxRemoteError;
  }
  if (h.op == kPut) {
    unpin(pe, h.key);
    reply(pe, Hdr{kAck, 0, 0, 0, h.id, 0});
  } else {
    answer(p, h.id, flagcxSuccess);
  }
  return flagcxSuccess;
}

// A request outside what this rank exposed: the requester checked it
// against what this rank registered, so it is a protocol error, a race with
// deregistration or a hostile peer.  The peer is cut off.
void Engine::refuse(int p, const Hdr &h, const Verdict &v) {
  WARN(kNet, "rank %d: one-sided %s from rank %d refused: key %u, %" PRIu64 " bytes at offset %"
       PRIu64 ": %s (%" PRIu64 " bytes exposed under the key); connection cut", rank_,
       opName(h.op), p, h.key, h.len, h.off, v.why, v.regionSize);
  failPeer(p, flagcxRemoteError, false);
}

void Engine::reply(Peer &pe, Hdr h, const void *payload, bool pinned, uint32_t pinKey) {
  auto o = std::make_unique<Out>();
  o->hdr = h;
  o->payload = payload;
  o->pinned = pinned;
  o->pinKey = pinKey;
  if (h.op == kAck || h.op == kData) pe.owed++;
  pe.replies.push_back(std::move(o));
}

// A request's answer: its operation completes once its own send is done too.
void Engine::answer(int p, uint64_t id, int rc) {
  Peer &pe = peers_[static_cast<size_t>(p)];
  auto it = pe.waiting.find(id);
  if (it == pe.waiting.end()) return;
  if (it->second.inConn) {
    it->second.answered = true;
    it->second.rc = rc;
    return;
  }
  RmaDone *d = it->second.done;
  pe.waiting.erase(it);
  rmaComplete(d, rc);
}

// A message left the Conn (every byte of it handed to the pipe).
void Engine::sendDone(int p, Out &o) {
  Peer &pe = peers_[static_cast<size_t>(p)];
  if (isRequest(o.hdr.op)) {
    auto it = pe.waiting.find(o.hdr.id);
    if (it == pe.waiting.end()) return;
    it->second.inConn = false;
    if (!it->second.answered) return;
    RmaDone *d = it->second.done;
    int rc = it->second.rc;
    pe.waiting.erase(it);
    rmaComplete(d, rc);
  } else if (o.hdr.op == kAck || o.hdr.op == kData) {
    if (pe.owed > 0) pe.owed--;
    if (o.pinned) unpin(pe, o.pinKey);
  }
}

void Engine::unpin(Peer &pe, uint32_t key) {
  auto mine = pe.pins.find(key);
  if (mine != pe.pins.end() && --mine->second <= 0) pe.pins.erase(mine);
  std::lock_guard<std::mutex> g(regMu_);
  auto it = pinned_.find(key);
  if (it == pinned_.end() || --it->second > 0) return;
  pinned_.erase(it);
  if (withdrawing_.count(key)) regCv_.notify_all();
}

void Engine::cutWithdrawn() {
  std::set<uint32_t> keys;
  {
    std::lock_guard<std::mutex> g(regMu_);
    keys = withdrawing_;
  }
  for (size_t p = 0; p < peers_.size(); p++) {
    Peer &pe = peers_[p];
    for (uint32_t k : keys) {
      if (pe.gone || !pe.pins.count(k)) continue;
      WARN(kNet, "rank %d: one-sided: rank %d was still moving bytes of the region exposed under "
           "key %u when this rank withdrew it; connection cut", rank_, static_cast<int>(p), k);
      failPeer(static_cast<int>(p), flagcxRemoteError, false);
    }
  }
}

// The peer is unreachable from now on.  Its Conn is cut first (`cut`, or
// whenever bytes of ours may still be moving: a payload being received or
// sent), so no byte lands or leaves after its operations fail and its pins go.
void Engine::failPeer(int p, int rc, bool quiet, bool cut) {
  Peer &pe = peers_[static_cast<size_t>(p)];
  if (pe.gone) return;
  bool moving = !pe.pins.empty() || pe.inPayload || !pe.sending.empty();
  if (pe.conn && (cut || moving))
    pe.conn->poison(rc == flagcxSuccess ? flagcxRemoteError : static_cast<flagcxResult_t>(rc), 0, 0);
  pe.gone = true;
  pe.err = rc;
  goneFlag_[static_cast<size_t>(p)].store(true);
  if (!quiet && (!pe.waiting.empty() || !pe.outq.empty()))
    WARN(kNet, "rank %d: one-sided: peer %d unreachable (%s); %zu operation(s) to it fail", rank_,
         p, flagcxGetErrorString(static_cast<flagcxResult_t>(rc)),
         pe.waiting.size() + pe.outq.size());
  for (auto &w : pe.waiting) rmaComplete(w.second.done, rc);
  pe.waiting.clear();
  for (auto &w : pe.natWait) rmaComplete(w.second.done, rc);
  pe.natWait.clear();
  for (auto &q : pe.natQ) rmaComplete(q.done, rc);
  pe.natQ.clear();
  for (auto &o : pe.outq) {
    auto it = early_.find(o->hdr.id);
    if (it == early_.end()) continue;
    rmaComplete(it->second.done, rc);
    early_.erase(it);
  }
  pe.outq.clear();
  pe.replies.clear();
  pe.sending.clear();
  pe.owed = 0;
  pe.inPayload = false;
  pe.recvReq = -1;
  std::lock_guard<std::mutex> g(regMu_);
  for (auto &kv : pe.pins) {
    auto it = pinned_.find(kv.first);
    if (it != pinned_.end() && (it->second -= kv.second) <= 0) pinned_.erase(it);
  }
  pe.pins.clear();
  regCv_.notify_all();
}

}  // namespace flagcx::rma_detail
