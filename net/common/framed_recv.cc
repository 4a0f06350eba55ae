// The receive side of FramedConn: frame headers, their checks against the
// posted receives, payloads (streamed, pulled, or moved by a pipe's helper
// thread), and lanes that close.  See framed_conn.h.
#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "base/base.h"
#include "net/common/framed_conn.h"
#include "net/tags.h"

namespace flagcx {

// The peer closed lane li before the stripe being received was complete.
flagcxResult_t FramedConn::closedInPayload(Lane &l, int li) {
  l.closed = true;
  anyLaneClosed_ = true;
  if (li == 0) peerClosed_ = true;
  WARN(kNet, "%s conn rank %d <- peer %d (%s) channel %d lane %d: peer closed the connection during message #%" PRIu64 " (%" PRIu64 " of %" PRIu64 " bytes of its stripe received)%s",
       kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, li, l.rHdr.seq, l.rDone,
       l.rLen, closeCause().c_str());
  return fail(flagcxRemoteError);
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
  l.rFolded = 0;
  l.rPull = pullFrame;
  l.rAny = true;
  l.rLastSeq = h.seq;
  return flagcxSuccess;
}

flagcxResult_t FramedConn::foldUpTo(Lane &l, uint64_t end) {
  const Req &r = reqs_[l.rSlot];
  if (!r.folds || end <= l.rFolded) return flagcxSuccess;
  size_t at = static_cast<size_t>(l.rData - r.buf) + l.rFolded;
  size_t n = static_cast<size_t>(end - l.rFolded);
  flagcxResult_t rc =
      reduce_(r.fold.dst + at, r.fold.base + at, r.buf + at, n / r.fold.elem, r.fold.dt, r.fold.op);
  if (rc != flagcxSuccess) {
    WARN(kNet, "%s conn rank %d <- peer %d: reducing %zu received bytes failed", kind_,
         desc_.self, desc_.peer, n);
    return fail(rc);
  }
  l.rFolded = end;
  return flagcxSuccess;
}

Conn::Status FramedConn::status() const {
  Status st;
  st.peerGaveUpOn = peerGaveUpOn_;
  st.mismatch = mismatch_;
  for (const Lane &l : lanes_)
    if (l.rHdrReady && l.rSlot < 0) {
      st.inboundTag = l.rHdr.tag;
      break;
    }
  return st;
}

// The lane closed before a whole frame header came.  Lanes close one by
// one: a lane at a frame boundary may close while another still carries
// stripes of messages sent before.
flagcxResult_t FramedConn::closedInHeader(Lane &l, int li, bool *moved) {
  l.closed = true;
  anyLaneClosed_ = true;
  if (li == 0) peerClosed_ = true;  // lane 0 heads every message: no more come
  collectPullAcks(moved);  // it may have acknowledged just before leaving
  if (l.rHdrGot > 0) {
    WARN(kNet, "%s conn rank %d <- peer %d (%s) channel %d lane %d: peer closed the connection inside a frame header%s",
         kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, li,
         closeCause().c_str());
    return fail(flagcxRemoteError);
  }
  // progress() calls closedLanesCheck() once every lane had its turn: the
  // other lanes' helpers may have finished sends it has not collected yet.
  return flagcxSuccess;
}

// The peer's error frame on lane 0.  On a Conn of several lanes, other
// lanes may still carry stripes of messages whose headers came before the
// frame: those messages were sent whole and are delivered first (see
// progress()), so the frame waits.
flagcxResult_t FramedConn::takeErrorFrame(Lane &l, bool *moved) {
  if (lanes_.size() == 1) return peerGaveUp(l.rHdr);
  gaveUpHdr_ = l.rHdr;
  gaveUpPending_ = true;
  gaveUpBefore_ = l.rAny ? l.rLastSeq + 1 : 0;
  gaveUpAt_ = Clock::now();
  *moved = true;
  return flagcxSuccess;
}

// The PullNote after a rendezvous frame's header, as far as it has come.
flagcxResult_t FramedConn::readPullNote(Lane &l, int li, bool *moved) {
  while (l.rNoteGot < sizeof(l.rNote)) {
    size_t got = 0;
    bool closed = false;
    flagcxResult_t rc = l.pipe->read(reinterpret_cast<char *>(&l.rNote) + l.rNoteGot,
                                     sizeof(l.rNote) - l.rNoteGot, &got, &closed);
    if (rc != flagcxSuccess) return fail(rc);
    if (got == 0) {
      if (!closed) return flagcxSuccess;
      l.closed = true;
      anyLaneClosed_ = true;
      if (li == 0) peerClosed_ = true;
      WARN(kNet, "%s conn rank %d <- peer %d (%s) channel %d: peer closed the connection inside a frame header",
           kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel);
      return fail(flagcxRemoteError);
    }
    *moved = true;
    l.rNoteGot += got;
  }
  return flagcxSuccess;
}

// Lane l's next frame header, as far as it has come; *ready once a
// message's header (and a rendezvous frame's note) is whole.
flagcxResult_t FramedConn::readHeader(Lane &l, int li, bool *moved, bool *ready) {
  size_t got = 0;
  bool closed = false;
  flagcxResult_t rc = l.pipe->read(reinterpret_cast<char *>(&l.rHdr) + l.rHdrGot,
                                   sizeof(FrameHeader) - l.rHdrGot, &got, &closed);
  if (rc != flagcxSuccess) return fail(rc);
  if (got > 0) *moved = true;
  l.rHdrGot += got;
  if (l.rHdrGot < sizeof(FrameHeader)) return closed ? closedInHeader(l, li, moved) : flagcxSuccess;
  if (l.rHdr.version == kFrameVersionError && l.rHdr.magic == kFrameMagic && li == 0)
    return takeErrorFrame(l, moved);
  if (l.rHdr.version == kFrameVersionPull) {
    FLAGCX_CHECK(readPullNote(l, li, moved));
    if (l.rNoteGot < sizeof(l.rNote)) return flagcxSuccess;
  }
  l.rHdrReady = true;
  l.rSlot = -1;
  *ready = true;
  return flagcxSuccess;
}

// Hand the rest of the lane's stripe to the pipe's helper thread (readBg).
// A fold hands it everything from the last whole element before rDone
// (stripes start on element boundaries: kStripeAlign).
flagcxResult_t FramedConn::startBgRecv(Lane &l, bool *moved) {
  const Req &r = reqs_[l.rSlot];
  BgFold bf;
  if (r.folds) {
    FLAGCX_CHECK(foldUpTo(l, l.rDone - l.rDone % r.fold.elem));
    size_t at = static_cast<size_t>(l.rData - r.buf) + l.rFolded;
    bf.f = r.fold;
    bf.fn = reduce_;
    bf.f.dst += at;
    bf.f.base += at;
    bf.src = r.buf + at;
  }
  size_t pre = 0;
  flagcxResult_t rc =
      l.pipe->readBg(l.rData + l.rDone, l.rLen - l.rDone, &pre, r.folds ? &bf : nullptr);
  if (rc != flagcxSuccess) return fail(rc);
  if (pre > 0) *moved = true;
  l.rDone += pre;
  if (l.rDone < l.rLen) {
    l.rBg = true;
    l.rBgBase = l.rDone;
  }
  return flagcxSuccess;
}

// The payload of the lane's current stripe, as far as it comes now: pulled
// from the sender's memory, moved by the pipe's helper, or read here.
// *whole once every byte of the stripe is in place.
flagcxResult_t FramedConn::readPayload(Lane &l, int li, bool *moved, bool *whole) {
  size_t got = 0;
  bool closed = false;
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
    *whole = true;
    return flagcxSuccess;
  }
  if (!l.rBg && l.rDone < l.rLen && reqs_[l.rSlot].stripes > 1 && l.pipe->offload())
    FLAGCX_CHECK(startBgRecv(l, moved));
  if (l.rBg) {
    bool fin = false;
    flagcxResult_t rc = l.pipe->pollBg(false, &got, &fin, &closed);
    if (rc != flagcxSuccess) return fail(rc);
    if (l.rBgBase + got != l.rDone) *moved = true;
    l.rDone = l.rBgBase + got;
    if (!fin) return flagcxSuccess;
    l.rBg = false;
    if (closed || l.rDone < l.rLen) return closedInPayload(l, li);
    if (reqs_[l.rSlot].folds) l.rFolded = l.rLen;  // the helper folded what it was given
  } else if (l.rDone < l.rLen) {
    flagcxResult_t rc = l.pipe->read(l.rData + l.rDone, l.rLen - l.rDone, &got, &closed);
    if (rc != flagcxSuccess) return fail(rc);
    if (got > 0) *moved = true;
    l.rDone += got;
    if (l.rDone < l.rLen) return closed ? closedInPayload(l, li) : flagcxSuccess;
  }
  *whole = true;
  return flagcxSuccess;
}

flagcxResult_t FramedConn::progressRecv(Lane &l, int li, bool *moved) {
  for (;;) {
    if (l.closed || (li == 0 && gaveUpPending_)) return flagcxSuccess;
    if (!l.rHdrReady) {
      bool ready = false;
      FLAGCX_CHECK(readHeader(l, li, moved, &ready));
      if (!ready) return flagcxSuccess;
    }
    if (l.rSlot < 0) {
      FLAGCX_CHECK(takeHeader(l, li));
      if (l.rSlot < 0) return flagcxSuccess;  // wait for the receive to be posted
    }
    bool whole = false;
    FLAGCX_CHECK(readPayload(l, li, moved, &whole));
    if (!whole) return flagcxSuccess;
    FLAGCX_CHECK(foldUpTo(l, l.rLen));  // the stripe's bytes the engine thread read
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
  // A helper still sending a stripe decides for itself: the peer may have
  // read it all (and left) before the job reported back.  Its job ends soon
  // either way, the socket being closed at the other end.
  for (const Lane &l : lanes_)
    if (l.sBg) return flagcxSuccess;
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
  WARN(kNet, "%s conn rank %d <-> peer %d (%s) channel %d: peer closed the connection with %d request(s) pending (%s #%" PRIu64 ")%s",
       kind_, desc_.self, desc_.peer, desc_.host.c_str(), desc_.channel, pending_, why, seq,
       closeCause().c_str());
  return fail(flagcxRemoteError);
}

}  // namespace flagcx
