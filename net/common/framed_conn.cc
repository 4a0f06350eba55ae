// FramedConn (framed_conn.h): posting requests, the send side (frames,
// stripes over lanes), progress, liveness, error frames and failure; the
// receive side is framed_recv.cc.
#include "net/common/framed_conn.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "base/base.h"
#include "net/tags.h"

namespace flagcx {

namespace {
// The smallest stripe: a message is split over the lanes only when each part
// gets at least this much.  64 KiB, from a sweep with helper threads on
// 16 cores (docs/DECISIONS.md, "Sockets"): against 128 and 256 KiB it was
// as fast or faster at 1-64 MiB and its worst round at >= 1 MiB was the best
// (1.56x MPICH).
constexpr uint64_t kMinStripe = 64 * 1024;
// The smallest message that is split at all; smaller ones go whole on lane 0
// with the engine thread.  512 KiB (the smallest FLAGCX_NET_CHUNK_SIZE auto
// picks, so large collectives' slices are still split), from runs on 16 cores
// (docs/DECISIONS.md, "Sockets"): split 128-256 KiB messages cost whether helper
// threads or the engine moved the stripes (MPICH/flagcx at 256 KiB, medians:
// allreduce 1.22 split vs 1.65 whole, sendrecv 1.02 with helpers and 1.14
// without vs 1.41 on one lane).
constexpr uint64_t kMinSplit = 512 * 1024;
constexpr uint64_t kStripeAlign = 4096;
constexpr auto kLiveCheckEvery = std::chrono::milliseconds(50);
// A gap this long between two progress calls means the caller was not
// waiting; the stall clock restarts instead of counting it.
constexpr auto kCallerGap = std::chrono::seconds(1);
// After a peer's error frame on a Conn of several lanes: how long the other
// lanes may bring nothing before the frame takes effect.
constexpr auto kGaveUpGrace = std::chrono::milliseconds(100);
}  // namespace

int stripeCount(uint64_t length, int nlanes) {
  if (nlanes <= 1 || length < kMinSplit) return 1;
  uint64_t n = length / kMinStripe;
  return static_cast<int>(std::min<uint64_t>(n, static_cast<uint64_t>(nlanes)));
}

void stripeOf(uint64_t length, int nstripes, int lane, uint64_t *offset, uint64_t *size) {
  uint64_t base = length / static_cast<uint64_t>(nstripes);
  if (nstripes > 1) base &= ~(kStripeAlign - 1);
  *offset = base * static_cast<uint64_t>(lane);
  *size = (lane == nstripes - 1) ? length - *offset : base;
}

FramedConn::FramedConn(const char *kind, PeerDesc desc, std::vector<std::unique_ptr<Pipe>> pipes,
                       RecvFold::Fn reduce)
    : kind_(kind), desc_(std::move(desc)), reduce_(reduce) {
  lanes_.resize(pipes.size());
  for (size_t i = 0; i < pipes.size(); i++) lanes_[i].pipe = std::move(pipes[i]);
  for (int i = 0; i < kMaxPosted; i++) freeSlots_[i] = kMaxPosted - 1 - i;
  nfree_ = kMaxPosted;
  timeoutSec_ = paramInt(Param::TIMEOUT);
  if (timeoutSec_ <= 0) timeoutSec_ = 600;
  canPull_ = lanes_.size() == 1 && lanes_[0].pipe->canPull();
  caps_.kind = kind;
  caps_.peer = desc_.peer;
  caps_.peerPid = lanes_.empty() ? 0 : lanes_[0].pipe->peerPid();
  // With helper threads each 512 KiB slice costs every lane a hand-off
  // through the engine thread per 128 KiB stripe; 2 MiB slices (512 KiB
  // stripes) measured 1.1-1.3x faster allreduces at 4-16 MiB on a 16-core
  // host (docs/DECISIONS.md, "Sockets").
  if (lanes_.size() > 1 && lanes_[0].pipe->hasHelpers()) {
    caps_.sliceHint = 2u << 20;
    // The engine thread reduced each landed 2 MiB slice by itself at 5 GB/s,
    // more than the exchange took; the lanes' helpers fold their stripes in
    // parallel as they arrive (docs/DECISIONS.md, "Sockets").  Every message
    // split over the lanes (kMinSplit, 512 KiB) folds: measured on 16 cores
    // with 4 lanes once the copies were fused into the reductions, folding
    // from 512 KiB made reduce 1 MiB 2.5x faster and allreduce /
    // reducescatter 2 MiB 1.6-1.7x against folding from 2 MiB; below 512 KiB
    // a message is one stripe the engine reads itself.
    if (reduce_ && paramInt(Param::SOCKET_RECV_REDUCE) != 0) caps_.foldFrom = kMinSplit;
  }
}

FramedConn::~FramedConn() = default;

flagcxResult_t FramedConn::fail(flagcxResult_t code) {
  if (error_ == flagcxSuccess) error_ = code;
  // The failed call returns to its caller, who may free its buffers: no
  // helper thread may still be reading or filling them.
  cancelBg();
  return error_;
}

bool FramedConn::cancelBg() {
  bool any = false;
  for (Lane &l : lanes_) {
    if (!l.sBg && !l.rBg) continue;
    l.pipe->cancelBg();
    l.sBg = l.rBg = false;
    l.closed = true;  // shut down: nothing more comes or goes on it
    anyLaneClosed_ = true;
    any = true;
  }
  return any;
}

void FramedConn::freeSlot(int slot) {
  Req &r = reqs_[slot];
  r.kind = Kind::Free;
  r.buf = nullptr;
  freeSlots_[nfree_++] = slot;
}

flagcxResult_t FramedConn::post(Kind kind, void *buf, size_t bytes, uint64_t tag, int *req) {
  if (req == nullptr) {
    WARN(kNet, "%s conn rank %d -> peer %d: %s posted with a null request pointer", kind_,
         desc_.self, desc_.peer, dirName(kind));
    return flagcxInvalidArgument;
  }
  *req = -1;
  if (error_ != flagcxSuccess) return error_;
  if (buf == nullptr && bytes > 0) {
    WARN(kNet, "%s conn rank %d -> peer %d: %s of %zu bytes from a null buffer", kind_, desc_.self,
         desc_.peer, dirName(kind), bytes);
    return flagcxInvalidArgument;
  }
  if (peerClosed_) {
    WARN(kNet, "%s conn rank %d -> peer %d (%s) channel %d: %s posted after the peer closed the connection%s",
         kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, dirName(kind),
         closeCause().c_str());
    return fail(flagcxRemoteError);
  }
  if (nfree_ == 0) {
    WARN(kNet, "%s conn rank %d -> peer %d: more than %d requests outstanding (%s of %zu bytes refused)",
         kind_, desc_.self, desc_.peer, kMaxPosted, dirName(kind), bytes);
    return flagcxInternalError;
  }
  int slot = freeSlots_[--nfree_];
  Req &r = reqs_[slot];
  r.kind = kind;
  r.done = false;
  r.queued = true;
  r.released = false;
  r.gen = (r.gen + 1) & 0x7fffff;
  if (r.gen == 0) r.gen = 1;
  r.buf = static_cast<char *>(buf);
  r.size = bytes;
  r.tag = tag;
  Queue &q = kind == Kind::Send ? sendQ_ : recvQ_;
  r.seq = q.nextSeq++;
  r.pull = false;
  r.folds = false;
  if (kind == Kind::Send) {
    r.length = bytes;
    r.stripes = stripeCount(bytes, static_cast<int>(lanes_.size()));
    r.stripesLeft = r.stripes;
    if (canPull_ && bytes >= kPullThreshold) {
      r.pull = true;
      r.note = PullNote{};
      r.note.addr = reinterpret_cast<uint64_t>(buf);
      lanes_[0].pipe->describePull(buf, bytes, r.note.pipe);
    }
  } else {
    r.length = 0;
    r.stripes = 0;
    r.stripesLeft = 0;
  }
  q.slots[(q.head + q.count) % kMaxPosted] = slot;
  q.count++;
  if (pending_++ == 0) moveStamped_ = false;  // the stall clock starts now
  *req = static_cast<int>((r.gen << 8) | static_cast<uint32_t>(slot));
  return flagcxSuccess;
}

flagcxResult_t FramedConn::isend(const void *buf, size_t bytes, uint64_t tag, int *req) {
  FLAGCX_CHECK(post(Kind::Send, const_cast<void *>(buf), bytes, tag, req));
  return progress();
}

flagcxResult_t FramedConn::irecv(void *buf, size_t bytes, uint64_t tag, int *req) {
  return post(Kind::Recv, buf, bytes, tag, req);
}

flagcxResult_t FramedConn::irecvFold(void *buf, size_t bytes, uint64_t tag, const RecvFold &f,
                                     int *req) {
  if (!reduce_ || f.elem == 0 || bytes % f.elem != 0 || (bytes > 0 && !f.dst)) {
    WARN(kNet, "%s conn rank %d <- peer %d: receive-and-reduce of %zu bytes with a bad fold "
         "(dst %p, %zu-byte elements)", kind_, desc_.self, desc_.peer, bytes,
         static_cast<void *>(f.dst), f.elem);
    return flagcxInvalidArgument;
  }
  FLAGCX_CHECK(post(Kind::Recv, buf, bytes, tag, req));
  Req &r = reqs_[*req & 0xff];
  r.folds = true;
  r.fold = f;
  if (!r.fold.base) r.fold.base = r.fold.dst;
  return flagcxSuccess;
}

void FramedConn::popDone(Queue &q) {
  while (q.count > 0) {
    int slot = q.slots[q.head];
    Req &r = reqs_[slot];
    if (!r.done) break;
    r.queued = false;
    if (r.released) freeSlot(slot);
    q.head = (q.head + 1) % kMaxPosted;
    q.count--;
    q.frontSeq++;
  }
}

// The peer closed lane li before the stripe being sent was out.
flagcxResult_t FramedConn::closedInSend(Lane &l, int li) {
  WARN(kNet, "%s conn rank %d -> peer %d (%s) channel %d lane %d: peer closed the connection during send #%" PRIu64 " (%" PRIu64 " of %" PRIu64 " bytes of its stripe sent)%s",
       kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, li, l.sHdr.seq, l.sDone,
       l.sLen, closeCause().c_str());
  return fail(flagcxRemoteError);
}

std::string FramedConn::closeCause() const {
  // Any lane's pipe: one that saw the loss knows it (closedInSend's lane is
  // not marked closed).
  for (const Lane &l : lanes_)
    if (const char *c = l.pipe->closeCause()) return std::string(": ") + c;
  return "";
}

flagcxResult_t FramedConn::progressSend(Lane &l, int li, bool *moved) {
  for (;;) {
    if (!l.sActive) {
      // Find the next message that has a stripe on this lane.
      if (l.sSeq < sendQ_.frontSeq) l.sSeq = sendQ_.frontSeq;  // done without us
      int slot = -1;
      while (l.sSeq < sendQ_.nextSeq) {
        int s = sendQ_.at(l.sSeq);
        if (reqs_[s].stripes > li) {
          slot = s;
          break;
        }
        l.sSeq++;
      }
      if (slot < 0) return flagcxSuccess;
      Req &r = reqs_[slot];
      uint64_t off, len;
      stripeOf(r.length, r.stripes, li, &off, &len);
      l.sHdr = FrameHeader{kFrameMagic, r.pull ? kFrameVersionPull : kFrameVersion,
                           static_cast<uint16_t>(li), r.seq, r.tag, r.length};
      l.sHdrDone = 0;
      l.sData = r.pull ? reinterpret_cast<const char *>(&r.note) : r.buf + off;
      l.sLen = r.pull ? sizeof(r.note) : len;
      l.sDone = 0;
      l.sSlot = slot;
      l.sActive = true;
      if (!r.pull && r.stripes > 1 && l.pipe->offload()) {
        iovec v[2] = {{&l.sHdr, sizeof(FrameHeader)}, {const_cast<char *>(l.sData), l.sLen}};
        flagcxResult_t rc = l.pipe->writeBg(v, l.sLen ? 2 : 1);
        if (rc != flagcxSuccess) return fail(rc);
        l.sBg = true;
      }
    }
    if (l.sBg) {  // the helper's count covers the header, then the stripe
      size_t got = 0;
      bool fin = false, closed = false;
      flagcxResult_t rc = l.pipe->pollBg(true, &got, &fin, &closed);
      if (rc != flagcxSuccess) return fail(rc);
      if (got != l.sHdrDone + l.sDone) *moved = true;
      l.sHdrDone = std::min(got, sizeof(FrameHeader));
      l.sDone = got - l.sHdrDone;
      if (!fin) return flagcxSuccess;
      l.sBg = false;
      if (closed || l.sDone < l.sLen) return closedInSend(l, li);
    }
    iovec iov[2];
    int n = 0;
    if (l.sHdrDone < sizeof(FrameHeader)) {
      iov[n].iov_base = reinterpret_cast<char *>(&l.sHdr) + l.sHdrDone;
      iov[n].iov_len = sizeof(FrameHeader) - l.sHdrDone;
      n++;
    }
    if (l.sDone < l.sLen) {
      iov[n].iov_base = const_cast<char *>(l.sData + l.sDone);
      iov[n].iov_len = l.sLen - l.sDone;
      n++;
    }
    size_t got = 0;
    bool closed = false;
    if (n > 0) {
      flagcxResult_t rc = l.pipe->write(iov, n, &got, &closed);
      if (rc != flagcxSuccess) return fail(rc);
      if (closed) return closedInSend(l, li);
      if (got == 0) return flagcxSuccess;
      *moved = true;
      size_t h = std::min(got, sizeof(FrameHeader) - l.sHdrDone);
      l.sHdrDone += h;
      l.sDone += got - h;
    }
    if (l.sHdrDone == sizeof(FrameHeader) && l.sDone == l.sLen) {
      Req &r = reqs_[l.sSlot];
      if (--r.stripesLeft == 0) {
        if (r.pull) {  // done when the peer has pulled it
          pullSlots_[(pullHead_ + pullCount_++) % kMaxPosted] = l.sSlot;
        } else {
          r.done = true;
          pending_--;
          popDone(sendQ_);
        }
      }
      l.sActive = false;
      l.sSeq++;
    }
  }
}

flagcxResult_t FramedConn::lanesAlive() {
  for (auto &l : lanes_) {
    flagcxResult_t rc = l.pipe->idleCheck();
    if (rc != flagcxSuccess) {
      WARN(kNet, "%s conn rank %d <-> peer %d (%s) channel %d: peer lost with %d request(s) pending",
           kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, pending_);
      return fail(rc);
    }
  }
  return flagcxSuccess;
}

int FramedConn::waitFds(struct pollfd *fds, int max) {
  if (error_ != flagcxSuccess || pending_ == 0) return 0;
  // Only while a helper thread has a job: the engine then sleeps so the
  // helpers get the cores.  Without one, sleeping in poll() measured slower
  // than spinning (1 MiB allreduce 374-386 us against 304-308 on 2 cores).
  bool bg = false;
  for (const Lane &l : lanes_) bg |= l.sBg || l.rBg;
  if (!bg) return -1;
  int n = 0;
  for (const Lane &l : lanes_) {
    int fd = l.pipe->pollFd();
    if (fd < 0) return -1;
    short ev = 0;
    if (l.sActive && !l.sBg) ev |= POLLOUT;
    // A header waiting for its receive to be posted wants nothing more.
    if (recvQ_.count > 0 && !l.rBg && !l.closed && !(l.rHdrReady && l.rSlot < 0)) ev |= POLLIN;
    if (ev) {
      if (n == max) return -1;
      fds[n++] = pollfd{fd, ev, 0};
    }
    if (l.sBg || l.rBg) {
      l.pipe->bgDrain();
      if ((l.sBg && !l.pipe->bgBusy(true)) || (l.rBg && !l.pipe->bgBusy(false))) return -1;
      if (n == max) return -1;
      fds[n++] = pollfd{l.pipe->bgFd(), POLLIN, 0};
    }
  }
  return n;
}

flagcxResult_t FramedConn::checkAlive() {
  if (peerClosed_) return fail(flagcxRemoteError);
  return lanesAlive();
}

flagcxResult_t FramedConn::idle() {
  auto now = Clock::now();
  if (!moveStamped_ || now - lastIdleCall_ > kCallerGap) {
    lastMove_ = now;
    moveStamped_ = true;
  }
  lastIdleCall_ = now;
  if (now - lastLiveCheck_ >= kLiveCheckEvery) {
    lastLiveCheck_ = now;
    FLAGCX_CHECK(lanesAlive());
  }
  if (now - lastMove_ > std::chrono::seconds(timeoutSec_)) {
    WARN(kNet, "%s conn rank %d <-> peer %d (%s) channel %d: no progress for FLAGCX_TIMEOUT=%" PRId64 "s with %d request(s) pending (next send #%" PRIu64 ", next receive #%" PRIu64 ")",
         kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, timeoutSec_, pending_,
         sendQ_.frontSeq, recvQ_.frontSeq);
    return fail(flagcxRemoteError);
  }
  return flagcxSuccess;
}

void FramedConn::collectPullAcks(bool *moved) {
  if (pullCount_ == 0) return;
  uint64_t acked = lanes_[0].pipe->pullsAcked();
  while (pullCount_ > 0 && pullsDone_ < acked) {
    Req &r = reqs_[pullSlots_[pullHead_]];
    pullHead_ = (pullHead_ + 1) % kMaxPosted;
    pullCount_--;
    pullsDone_++;
    r.done = true;
    pending_--;
    *moved = true;
  }
  popDone(sendQ_);
}

flagcxResult_t FramedConn::peerGaveUp(const FrameHeader &h) {
  // The code comes from the peer: range-check it as a number first.
  flagcxResult_t code = h.length > flagcxSuccess && h.length < flagcxNumResults
                            ? static_cast<flagcxResult_t>(h.length)
                            : flagcxRemoteError;
  // What this rank was doing with the peer: its oldest pending request.
  uint64_t mine = 0;
  if (recvQ_.count > 0) mine = reqs_[recvQ_.slots[recvQ_.head]].tag;
  else if (sendQ_.count > 0) mine = reqs_[sendQ_.slots[sendQ_.head]].tag;
  std::string theirs = h.tag ? " after receiving " + tagText(h.tag) : std::string();
  WARN(kNet, "rank %d (%s) gave up on its %s%s (%s); rank %d stops %s [%s channel %d]",
       desc_.peer, desc_.host.c_str(), tagText(h.seq).c_str(), theirs.c_str(),
       flagcxGetErrorString(code), desc_.self,
       mine ? ("its " + tagText(mine)).c_str() : "too", kind_, desc_.channel);
  peerGaveUpOn_ = h.seq;
  return fail(code);
}

void FramedConn::poison(flagcxResult_t code, uint64_t mine, uint64_t theirs) {
  // The call gave up and its buffers go back to the caller: end the helper
  // jobs first.  Lanes they shut down carry nothing more, so the Conn fails.
  const flagcxResult_t why = code == flagcxSuccess ? flagcxRemoteError : code;
  if (cancelBg()) fail(why);
  if (lanes_.empty() || lanes_[0].closed || poisoned_) return;
  Lane &l = lanes_[0];
  if (l.sActive && (l.sBg || l.sHdrDone > 0 || l.sDone > 0)) {
    // A half-written frame cannot be interrupted by another: end the
    // connection instead, so that the peer fails now, reading the end in
    // the middle of the frame, not at FLAGCX_TIMEOUT.  A transport that
    // cannot cut leaves the peer to its timeout.
    bool cutAny = false;
    for (Lane &x : lanes_) {
      if (x.closed || !x.pipe->cut()) continue;
      x.closed = true;
      anyLaneClosed_ = true;
      cutAny = true;
    }
    if (!cutAny) return;
    poisoned_ = true;
    fail(why);
    return;
  }
  poisoned_ = true;
  FrameHeader h{kFrameMagic, kFrameVersionError, 0, mine, theirs, static_cast<uint64_t>(code)};
  size_t done = 0;
  auto until = Clock::now() + std::chrono::milliseconds(100);
  while (done < sizeof(h) && Clock::now() < until) {
    iovec iov{reinterpret_cast<char *>(&h) + done, sizeof(h) - done};
    size_t got = 0;
    bool closed = false;
    if (l.pipe->write(&iov, 1, &got, &closed) != flagcxSuccess || closed) break;
    done += got;
  }
  l.sActive = false;
  fail(why);
}

flagcxResult_t FramedConn::progress() {
  if (error_ != flagcxSuccess) return error_;
  bool moved = false;
  // Acknowledgements first: a peer that pulled our last message and left is
  // not an error for that message.
  collectPullAcks(&moved);
  for (size_t i = 0; i < lanes_.size(); i++) {
    FLAGCX_CHECK(progressSend(lanes_[i], static_cast<int>(i), &moved));
    FLAGCX_CHECK(progressRecv(lanes_[i], static_cast<int>(i), &moved));
  }
  collectPullAcks(&moved);
  if (anyLaneClosed_) FLAGCX_CHECK(closedLanesCheck());
  if (gaveUpPending_) {
    // The peer's error frame waits until the messages headed before it are
    // in (or the other lanes bring nothing for a moment: the peer gave up
    // before sending all their stripes).
    bool before = false;
    for (int k = 0; k < recvQ_.count && !before; k++) {
      const Req &r = reqs_[recvQ_.nth(k)];
      before = !r.done && r.seq < gaveUpBefore_;
    }
    if (moved) gaveUpAt_ = Clock::now();
    if (!before || Clock::now() - gaveUpAt_ > kGaveUpGrace) return peerGaveUp(gaveUpHdr_);
  }
  if (pending_ == 0) return flagcxSuccess;
  if (moved) {
    moveStamped_ = false;  // restamped lazily on the next idle call
    return flagcxSuccess;
  }
  return idle();
}

flagcxResult_t FramedConn::test(int req, bool *done, size_t *bytes) {
  if (done) *done = false;
  int slot = req & 0xff;
  uint32_t gen = static_cast<uint32_t>(req) >> 8;
  if (req < 0 || reqs_[slot].kind == Kind::Free || reqs_[slot].released ||
      reqs_[slot].gen != gen) {
    WARN(kNet, "%s conn rank %d -> peer %d: test() of unknown or released request %d", kind_,
         desc_.self, desc_.peer, req);
    return flagcxInvalidUsage;
  }
  flagcxResult_t rc = progress();
  Req &r = reqs_[slot];
  // A request that completed is reported as such even when the Conn failed
  // afterwards: the bytes before a peer's error frame are good (a peer that
  // gave up on its next call sent this one's message first).
  if (!r.done) return rc;
  if (done) *done = true;
  if (bytes) *bytes = r.length;
  r.released = true;
  if (!r.queued) freeSlot(slot);
  return flagcxSuccess;
}

}  // namespace flagcx
