// A staged rank on the one-host direct path (shm_stage.h): its page-locked
// shareable copies grown at enqueue, its input published slice by slice as
// the copies complete, and its output sent back as it becomes final.
//
// The slices are the staged pipeline's (stageSlice: FLAGCX_STAGE_SLICE_SIZE,
// or chooseStageSlice from the copy rate and per-slice cost measured at
// setup): the trade is the same -- each slice costs a mark and a look at it,
// and the first slice down and the last piece up are not overlapped.
//
// Progress lives in line B of the block, written by its owner only:
// `inReady` (a staged rank's input slices on the host) and `wrote` (an
// allreduce rank's piece of every output final so far).  Both are zeroed
// before the rank publishes its descriptor for the call and read by the
// peers only after they have seen it, so a peer never sees the previous
// call's values; a rank passes to its next call only after every rank is
// done with this one, so no peer sees the next call's either (a value read
// after its owner moved on is 0 or a `done` already says everything is
// final).
#include "exec/shm_stage.h"

#include <algorithm>

#include "base/base.h"

namespace flagcx {

void reserveShmStage(Job *j) {
  ExecState *s = j->ex;
  if (!s->shmDirect) return;
  SmallShm *sm = s->block->shm.get();
  size_t in = 0, out = 0;
  for (size_t k = 0; k < j->ncolls; k++) {
    const CollItem &ci = j->colls[k];
    const size_t ts = dtypeSize(ci.a.dtype);
    const size_t inB = elemsIn(ci, s->nranks) * ts, outB = elemsOut(ci, s->nranks) * ts;
    if (std::max(inB, outB) <= sm->maxBytes) continue;  // the block's, or the rings'
    in = std::max(in, inB);
    out = std::max(out, outB);
  }
  if ((in && !sm->stageIn.grow(in)) || (out && !sm->stageOut.grow(out)))
    INFO(kColl, "rank %d: no shareable staging memory (%zu/%zu bytes); such calls take the rings",
         s->rank, in, out);
}

void stageResetProgress(ExecState *s) {
  Phase *ph = s->block->shm->lineB(s->rank);
  ph->inReady.store(0, std::memory_order_relaxed);
  ph->wrote.store(0, std::memory_order_relaxed);
}

flagcxResult_t stageFeed(ExecState *s, char *dst, const char *src, size_t bytes) {
  SmallShm::Feed &f = s->block->shm->feed;
  f.slice = std::min<size_t>(stageSlice(s, bytes), size_t(1) << 30);
  f.bytes = bytes;
  f.ready = 0;
  f.marks.clear();
  for (size_t off = 0; off < bytes; off += f.slice) {
    uint64_t m = 0;
    FLAGCX_CHECK(s->dev->copyAsync(dst + off, src + off, std::min(f.slice, bytes - off)));
    FLAGCX_CHECK(s->dev->mark(&m));
    f.marks.push_back(m);
  }
  return flagcxSuccess;
}

uint32_t stageFeedSlice(const ExecState *s) { return static_cast<uint32_t>(s->block->shm->feed.slice); }

void stageFeedEnd(ExecState *s) { s->block->shm->feed.slice = 0; }

namespace {

// Publishes the slices of this rank's input whose copies are complete.
flagcxResult_t feedPump(ExecState *s) {
  SmallShm *sm = s->block->shm.get();
  SmallShm::Feed &f = sm->feed;
  size_t k = f.ready;
  while (k < f.marks.size()) {
    bool done = false;
    FLAGCX_CHECK(s->dev->reached(f.marks[k], &done));
    if (!done) break;
    k++;
  }
  if (k != f.ready) {
    f.ready = k;
    Phase *ph = sm->lineB(s->rank);
    sm->released(&ph->inReady);
    ph->inReady.store(k, std::memory_order_release);
  }
  return flagcxSuccess;
}

bool feedComplete(const SmallShm *sm) { return sm->feed.ready >= sm->feed.marks.size(); }

// Sends back [from, to) of the staged rank's host output.
flagcxResult_t sendBack(DirectStage &st, size_t from, size_t to) {
  if (to <= from) return flagcxSuccess;
  return st.s->dev->copyAsync(st.outDev + from, st.outHost + from, to - from);
}

// Writers: sends back the pieces of this rank's output that their writers
// have finished (all of a rank's once it is done), in pieces of at least a
// chunk.
flagcxResult_t sinkPump(DirectStage &st) {
  SmallShm *sm = st.sm;
  if (st.sink != DirectStage::Sink::Writers) return flagcxSuccess;
  for (int q = 0; q < st.n; q++) {
    const size_t lo = st.regionLo[q], hi = st.regionHi[q];
    if (st.sent[q] >= hi - lo) continue;
    Phase *ph = sm->lineB(q);
    // `done` first: a `wrote` read after it moved on may be the next call's 0.
    size_t fin = hi - lo;
    if (ph->done.load(std::memory_order_acquire) < st.word) {
      fin = std::min<size_t>(ph->wrote.load(std::memory_order_acquire), hi - lo);
      if (q != st.me && fin && !feedComplete(sm)) sm->overlaps.fetch_add(1, std::memory_order_relaxed);
    }
    sm->acquired(&ph->wrote);
    sm->acquired(&ph->done);
    if (fin < hi - lo && fin - std::min(fin, st.sent[q]) < st.chunk) continue;
    FLAGCX_CHECK(sendBack(st, lo + st.sent[q], lo + std::max(fin, st.sent[q])));
    st.sent[q] = std::max(fin, st.sent[q]);
  }
  return flagcxSuccess;
}

}  // namespace

flagcxResult_t stageNeed(DirectStage &st, int q, size_t off, size_t len) {
  const size_t sl = st.slice[q];
  if (!sl || !len) return flagcxSuccess;
  const size_t last = (off + len - 1) / sl;
  if (last < st.seen[q]) return flagcxSuccess;
  ExecState *s = st.s;
  SmallShm *sm = st.sm;
  Phase *ph = sm->lineB(q);
  FLAGCX_CHECK(waitUntil(s, st.what, [&] {
    if (sm->feed.slice) {
      if (flagcxResult_t r = feedPump(s); r != flagcxSuccess) return r;
      if (flagcxResult_t r = sinkPump(st); r != flagcxSuccess) return r;
    }
    st.seen[q] = ph->inReady.load(std::memory_order_acquire);
    return last < st.seen[q] ? flagcxSuccess : flagcxInProgress;
  }));
  sm->acquired(&ph->inReady);
  return flagcxSuccess;
}

flagcxResult_t stageWrote(DirectStage &st, const char *p, size_t len) {
  if (st.sink != DirectStage::Sink::Own || p < st.outHost || p >= st.outHost + st.outBytes)
    return flagcxSuccess;
  const size_t from = static_cast<size_t>(p - st.outHost), to = std::min(from + len, st.outBytes);
  if (from != st.pendTo) {  // not next to what waits: that goes first
    FLAGCX_CHECK(sendBack(st, st.pendFrom, st.pendTo));
    st.pendFrom = from;
  }
  st.pendTo = to;
  if (st.pendTo - st.pendFrom < st.chunk) return flagcxSuccess;
  FLAGCX_CHECK(sendBack(st, st.pendFrom, st.pendTo));
  st.pendFrom = st.pendTo;
  return flagcxSuccess;
}

flagcxResult_t stageProgress(DirectStage &st, size_t bytes) {
  SmallShm *sm = st.sm;
  Phase *ph = sm->lineB(st.me);
  sm->released(&ph->wrote);
  ph->wrote.store(bytes, std::memory_order_release);
  if (!sm->feed.slice && st.sink == DirectStage::Sink::None) return flagcxSuccess;
  FLAGCX_CHECK(feedPump(st.s));
  return sinkPump(st);
}

flagcxResult_t stageFinish(DirectStage &st) {
  ExecState *s = st.s;
  SmallShm *sm = st.sm;
  Phase *me = sm->lineB(st.me);
  sm->released(&me->done);
  me->done.store(st.word, std::memory_order_release);
  FLAGCX_CHECK(waitUntil(s, st.what, [&] {
    if (flagcxResult_t r = feedPump(s); r != flagcxSuccess) return r;
    if (flagcxResult_t r = sinkPump(st); r != flagcxSuccess) return r;
    for (int q = 0; q < st.n; q++)
      if (q != st.me && sm->lineB(q)->done.load(std::memory_order_acquire) < st.word)
        return flagcxInProgress;
    return flagcxSuccess;
  }));
  for (int q = 0; q < st.n; q++)
    if (q != st.me) sm->acquired(&sm->lineB(q)->done);
  FLAGCX_CHECK(sinkPump(st));  // every writer is done: the rest of each piece
  FLAGCX_CHECK(sendBack(st, st.pendFrom, st.pendTo));
  if (st.sink == DirectStage::Sink::End) FLAGCX_CHECK(sendBack(st, 0, st.outBytes));
  stageFeedEnd(s);
  return s->dev->flush();
}

// A staged rank's buffers for a direct call: shareable host copies its
// peers can map (stageIn, stageOut), laid out as the caller's (an input
// inside the output stays inside it), the input copied in from the device.
// Only the input's bytes are copied: every other byte of an output is
// written by the call.  *ok false without memory.
flagcxResult_t stageDirect(ExecState *s, const CollItem &ci, CollItem *h, bool *ok) {
  const CollArgs &a = ci.a;
  SmallShm *sm = s->block->shm.get();
  const size_t ts = dtypeSize(a.dtype);
  const size_t inB = elemsIn(ci, s->nranks) * ts, outB = elemsOut(ci, s->nranks) * ts;
  const bool nonRoot = opIsRooted(a.op) && s->rank != a.root;
  const bool usesSend = !(nonRoot && (a.op == OpKind::Broadcast || a.op == OpKind::Scatter));
  const bool usesRecv = !(nonRoot && (a.op == OpKind::Reduce || a.op == OpKind::Gather));
  const char *send = static_cast<const char *>(a.send);
  char *recv = static_cast<char *>(a.recv);
  const bool both = usesSend && usesRecv;
  const bool sendInRecv = both && send >= recv && send + inB <= recv + outB;
  const bool recvInSend = both && !sendInRecv && recv >= send && recv + outB <= send + inB;
  h->a.send = nullptr;
  h->a.recv = nullptr;
  *ok = false;
  if (usesRecv && !recvInSend && !(h->a.recv = sm->stageOut.ifFits(outB))) return flagcxSuccess;
  char *in = nullptr;
  if (sendInRecv) in = static_cast<char *>(h->a.recv) + (send - recv);
  else if (usesSend && !(in = sm->stageIn.ifFits(inB))) return flagcxSuccess;
  if (usesSend) {
    // In slices, each published as it lands (shm_stage.cc); nothing waits here.
    FLAGCX_CHECK(stageFeed(s, in, send, inB));
    h->a.send = in;
  }
  if (recvInSend) h->a.recv = in + (recv - send);
  *ok = true;
  return flagcxSuccess;
}

uint64_t stageOverlaps(const ExecState *s) {
  return s->block ? s->block->shm->overlaps.load(std::memory_order_relaxed) : 0;
}

}  // namespace flagcx
