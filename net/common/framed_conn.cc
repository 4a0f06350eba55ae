#include "net/common/framed_conn.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "base/log.h"
#include "base/params.h"
#include "net/tags.h"

namespace flagcx {

namespace {
// A stripe smaller than this is not worth a lane of its own.
constexpr uint64_t kMinStripe = 256 * 1024;
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
  if (nlanes <= 1 || length < 2 * kMinStripe) return 1;
  uint64_t n = length / kMinStripe;
  return static_cast<int>(std::min<uint64_t>(n, static_cast<uint64_t>(nlanes)));
}

void stripeOf(uint64_t length, int nstripes, int lane, uint64_t *offset, uint64_t *size) {
  uint64_t base = length / static_cast<uint64_t>(nstripes);
  if (nstripes > 1) base &= ~(kStripeAlign - 1);
  *offset = base * static_cast<uint64_t>(lane);
  *size = (lane == nstripes - 1) ? length - *offset : base;
}

FramedConn::FramedConn(const char *kind, PeerDesc desc, std::vector<std::unique_ptr<Pipe>> pipes)
    : kind_(kind), desc_(std::move(desc)) {
  lanes_.resize(pipes.size());
  for (size_t i = 0; i < pipes.size(); i++) lanes_[i].pipe = std::move(pipes[i]);
  for (int i = 0; i < kMaxPosted; i++) freeSlots_[i] = kMaxPosted - 1 - i;
  nfree_ = kMaxPosted;
  timeoutSec_ = paramInt(Param::TIMEOUT);
  if (timeoutSec_ <= 0) timeoutSec_ = 600;
  canPull_ = lanes_.size() == 1 && lanes_[0].pipe->canPull();
}

FramedConn::~FramedConn() = default;

flagcxResult_t FramedConn::fail(flagcxResult_t code) {
  if (error_ == flagcxSuccess) error_ = code;
  return error_;
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
    WARN(kNet, "%s conn rank %d -> peer %d (%s) channel %d: %s posted after the peer closed the connection",
         kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, dirName(kind));
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
      if (closed) {
        WARN(kNet, "%s conn rank %d -> peer %d (%s) channel %d lane %d: peer closed the connection during send #%" PRIu64 " (%" PRIu64 " of %" PRIu64 " bytes of its stripe sent)",
             kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, li, l.sHdr.seq,
             l.sDone, l.sLen);
        return fail(flagcxRemoteError);
      }
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

flagcxResult_t FramedConn::takeHeader(Lane &l, int li) {
  const FrameHeader &h = l.rHdr;
  bool pullFrame = h.version == kFrameVersionPull && lanes_.size() == 1;
  if (h.magic != kFrameMagic || (h.version != kFrameVersion && !pullFrame) || h.lane != li) {
    WARN(kNet, "%s conn rank %d <- peer %d (%s) channel %d lane %d: malformed frame header (magic 0x%x version %u lane %u)",
         kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, li, h.magic, h.version,
         h.lane);
    return fail(flagcxRemoteError);
  }
  // Lane 0 carries every message in order; other lanes skip small ones.
  bool seqOk = li == 0 ? h.seq == (l.rAny ? l.rLastSeq + 1 : 0) : (!l.rAny || h.seq > l.rLastSeq);
  if (!seqOk || h.seq < recvQ_.frontSeq) {
    WARN(kNet, "%s conn rank %d <- peer %d (%s) channel %d lane %d: frame sequence %" PRIu64 " out of order (last %" PRIu64 ")",
         kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, li, h.seq, l.rLastSeq);
    return fail(flagcxRemoteError);
  }
  if (h.seq >= recvQ_.nextSeq) return flagcxSuccess;  // its receive is not posted yet
  int slot = recvQ_.at(h.seq);
  Req &r = reqs_[slot];
  if (h.tag != r.tag) {
    WARN(kNet, "mismatched calls: rank %d (%s) sent %s (message #%" PRIu64 ", %" PRIu64 " bytes) but rank %d posted %s (up to %" PRIu64 " bytes) [%s channel %d]",
         desc_.peer, desc_.host.c_str(), tagText(h.tag).c_str(), h.seq, h.length, desc_.self,
         tagText(r.tag).c_str(), r.size, kind_, desc_.channel);
    mismatch_ = Mismatch{r.tag, h.tag};
    return fail(flagcxInvalidUsage);
  }
  if (h.length > r.size) {
    WARN(kNet, "%s conn rank %d <- peer %d (%s) channel %d: message #%" PRIu64 " (tag 0x%" PRIx64 ") is %" PRIu64 " bytes, longer than the %" PRIu64 "-byte receive posted for it",
         kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, h.seq, h.tag, h.length,
         r.size);
    return fail(flagcxInvalidUsage);
  }
  int n = stripeCount(h.length, static_cast<int>(lanes_.size()));
  if (li >= n || (r.stripes != 0 && r.length != h.length)) {
    WARN(kNet, "%s conn rank %d <- peer %d (%s) channel %d lane %d: inconsistent stripe header for message #%" PRIu64 " (%" PRIu64 " bytes)",
         kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, li, h.seq, h.length);
    return fail(flagcxRemoteError);
  }
  if (r.stripes == 0) {
    r.stripes = n;
    r.stripesLeft = n;
    r.length = h.length;
  }
  uint64_t off, len;
  stripeOf(h.length, n, li, &off, &len);
  l.rSlot = slot;
  l.rData = r.buf + off;
  l.rLen = len;
  l.rDone = 0;
  l.rPull = pullFrame;
  l.rAny = true;
  l.rLastSeq = h.seq;
  return flagcxSuccess;
}

uint64_t FramedConn::inboundTag() const {
  for (const Lane &l : lanes_)
    if (l.rHdrReady && l.rSlot < 0) return l.rHdr.tag;
  return 0;
}

flagcxResult_t FramedConn::progressRecv(Lane &l, int li, bool *moved) {
  for (;;) {
    if (l.closed || (li == 0 && gaveUpPending_)) return flagcxSuccess;
    size_t got = 0;
    bool closed = false;
    if (!l.rHdrReady) {
      flagcxResult_t rc = l.pipe->read(reinterpret_cast<char *>(&l.rHdr) + l.rHdrGot,
                                       sizeof(FrameHeader) - l.rHdrGot, &got, &closed);
      if (rc != flagcxSuccess) return fail(rc);
      if (got > 0) *moved = true;
      l.rHdrGot += got;
      if (l.rHdrGot < sizeof(FrameHeader)) {
        if (closed) {
          // Lanes close one by one: a lane at a frame boundary may close
          // while another still carries stripes of messages sent before.
          l.closed = true;
          anyLaneClosed_ = true;
          if (li == 0) peerClosed_ = true;  // lane 0 heads every message: no more come
          collectPullAcks(moved);  // it may have acknowledged just before leaving
          if (l.rHdrGot > 0) {
            WARN(kNet, "%s conn rank %d <- peer %d (%s) channel %d lane %d: peer closed the connection inside a frame header",
                 kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, li);
            return fail(flagcxRemoteError);
          }
          FLAGCX_CHECK(closedLanesCheck());
        }
        return flagcxSuccess;
      }
      if (l.rHdr.version == kFrameVersionError && l.rHdr.magic == kFrameMagic && li == 0) {
        if (lanes_.size() == 1) return peerGaveUp(l.rHdr);
        // Other lanes may still carry stripes of messages whose headers came
        // before the frame: those messages were sent whole and are delivered
        // first (see progress()).
        gaveUpHdr_ = l.rHdr;
        gaveUpPending_ = true;
        gaveUpBefore_ = l.rAny ? l.rLastSeq + 1 : 0;
        gaveUpAt_ = Clock::now();
        *moved = true;
        return flagcxSuccess;
      }
      if (l.rHdr.version == kFrameVersionPull) {
        while (l.rNoteGot < sizeof(l.rNote)) {
          flagcxResult_t rc2 = l.pipe->read(reinterpret_cast<char *>(&l.rNote) + l.rNoteGot,
                                            sizeof(l.rNote) - l.rNoteGot, &got, &closed);
          if (rc2 != flagcxSuccess) return fail(rc2);
          if (got == 0) {
            if (closed) {
              l.closed = true;
              anyLaneClosed_ = true;
              if (li == 0) peerClosed_ = true;
              WARN(kNet, "%s conn rank %d <- peer %d (%s) channel %d: peer closed the connection inside a frame header",
                   kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel);
              return fail(flagcxRemoteError);
            }
            return flagcxSuccess;
          }
          *moved = true;
          l.rNoteGot += got;
        }
      }
      l.rHdrReady = true;
      l.rSlot = -1;
    }
    if (l.rSlot < 0) {
      FLAGCX_CHECK(takeHeader(l, li));
      if (l.rSlot < 0) return flagcxSuccess;  // wait for the receive to be posted
    }
    if (l.rPull) {
      // Pull in pieces so that one call never stays away for long.
      constexpr uint64_t kPiece = 2u << 20;
      if (l.rDone < l.rLen) {
        uint64_t n = std::min(kPiece, l.rLen - l.rDone);
        flagcxResult_t rc = l.pipe->pull(l.rData + l.rDone, l.rNote, l.rDone, n);
        if (rc != flagcxSuccess) return fail(rc);
        l.rDone += n;
        *moved = true;
        if (l.rDone < l.rLen) return flagcxSuccess;  // one piece per call
      }
      l.pipe->ackPull();
    } else if (l.rDone < l.rLen) {
      flagcxResult_t rc = l.pipe->read(l.rData + l.rDone, l.rLen - l.rDone, &got, &closed);
      if (rc != flagcxSuccess) return fail(rc);
      if (got > 0) *moved = true;
      l.rDone += got;
      if (l.rDone < l.rLen) {
        if (closed) {
          l.closed = true;
          anyLaneClosed_ = true;
          if (li == 0) peerClosed_ = true;
          WARN(kNet, "%s conn rank %d <- peer %d (%s) channel %d lane %d: peer closed the connection during message #%" PRIu64 " (%" PRIu64 " of %" PRIu64 " bytes of its stripe received)",
               kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, li, l.rHdr.seq,
               l.rDone, l.rLen);
          return fail(flagcxRemoteError);
        }
        return flagcxSuccess;
      }
    }
    Req &r = reqs_[l.rSlot];
    if (--r.stripesLeft == 0) {
      r.done = true;
      pending_--;
      popDone(recvQ_);
    }
    l.rHdrReady = false;
    l.rHdrGot = 0;
    l.rNoteGot = 0;
    l.rPull = false;
    l.rSlot = -1;
  }
}

// A lane closed at a frame boundary: fail if pending work needs it.  Sends
// cannot complete once the peer closes; a receive can if every lane that
// carries a stripe of it delivered that stripe before closing.
flagcxResult_t FramedConn::closedLanesCheck() {
  const char *why = nullptr;
  uint64_t seq = 0;
  for (int k = 0; k < sendQ_.count && !why; k++) {
    const Req &r = reqs_[sendQ_.nth(k)];
    if (!r.done) why = "send", seq = r.seq;
  }
  for (int k = 0; k < recvQ_.count && !why; k++) {
    const Req &r = reqs_[recvQ_.nth(k)];
    if (r.done) continue;
    int need = r.stripes == 0 ? 1 : r.stripes;  // no header yet: lane 0 must bring it
    for (int li = 0; li < need && !why; li++) {
      const Lane &l = lanes_[static_cast<size_t>(li)];
      bool delivered = l.rAny && l.rLastSeq >= r.seq && l.rSlot < 0;
      if (l.closed && !delivered) why = "receive", seq = r.seq;
    }
  }
  if (!why) return flagcxSuccess;
  WARN(kNet, "%s conn rank %d <-> peer %d (%s) channel %d: peer closed the connection with %d request(s) pending (%s #%" PRIu64 ")",
       kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, pending_, why, seq);
  return fail(flagcxRemoteError);
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
  if (lanes_.empty() || lanes_[0].closed || poisoned_) return;
  Lane &l = lanes_[0];
  // Only between frames: a half-written frame cannot be interrupted.
  if (l.sActive && (l.sHdrDone > 0 || l.sDone > 0)) return;
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
  fail(code == flagcxSuccess ? flagcxRemoteError : code);
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
