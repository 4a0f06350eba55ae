// One collective through its compiled schedule: the schedule's abstract
// chunks are bound to byte ranges of this call's buffers, then the steps run
// stage by stage — a stage's folds, and the local copies and reductions that
// its messages need, first, then all its messages at once (sliced by
// FLAGCX_NET_CHUNK_SIZE outside direct mode), the stage's other local steps on
// the host while those move (firstLateLocal).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "adapters/adapters.h"
#include "base/base.h"
#include "exec/state.h"
#include "net/net.h"
#include "sched/sched.h"

namespace flagcx {

namespace {

// Local steps: on the device in direct mode (issued, then flushed by the
// caller), else on the CPU now.
flagcxResult_t localCopy(ExecState *s, void *dst, const void *src, size_t bytes) {
  if (!bytes || dst == src) return flagcxSuccess;
  if (s->direct()) return s->dev->copyAsync(dst, src, bytes);
  copyBytes(dst, src, bytes);
  return flagcxSuccess;
}

// Where chunk k of one buffer lives, for this call.
struct Bound {
  char *base = nullptr;
  size_t total = 0;   // elements
  int nchunks = 1;
  const size_t *vcounts = nullptr, *vdispls = nullptr;  // alltoallv, packed scratch
  size_t ts = 1;
  void range(int k, char **p, size_t *bytes) const {
    if (vcounts) {
      *p = base + vdispls[k] * ts;
      *bytes = vcounts[k] * ts;
      return;
    }
    unsigned __int128 t = total;
    size_t s = static_cast<size_t>(t * static_cast<unsigned>(k) / static_cast<unsigned>(nchunks));
    size_t e = static_cast<size_t>(t * static_cast<unsigned>(k + 1) / static_cast<unsigned>(nchunks));
    *p = base + s * ts;
    *bytes = (e - s) * ts;
  }
};

flagcxResult_t localReduce(ExecState *s, void *dst, const void *src, size_t count,
                           flagcxDataType_t dt, flagcxRedOp_t op) {
  if (!count) return flagcxSuccess;
  if (s->direct()) return s->dev->reduceAsync(dst, dst, src, count, dt, op);
  return hostReduce(dst, dst, src, count, dt, op);
}

// A working buffer: device memory in direct mode, else the heap.
char *workBuf(ExecState *s, std::vector<char> &heap, GrowBuf &dev, size_t bytes) {
  return s->direct() ? dev.grow(std::max<size_t>(bytes, 1)) : growHeap(heap, bytes);
}

bool isLocal(const Step &st) { return st.kind == StepKind::Copy || st.kind == StepKind::Reduce; }
bool isMessage(const Step &st) {
  return st.kind == StepKind::Send || st.kind == StepKind::Recv || st.kind == StepKind::RecvReduce;
}

// Where the local steps of steps[i, end) (one stage) that may wait for the
// stage's messages begin: every local step from the returned index on writes
// nothing a message of the stage reads or writes and reads nothing a receive
// writes, so it can run while they move; local steps keep their order (the
// ones before the index run first).  bufOf(kind) gives the call's Bound.
// The verifier already rejects a schedule whose steps of one stage depend on
// each other (they are concurrent by definition), so for shipped and user
// scripts this returns i; the byte check is for what the verifier cannot
// see: a copy onto itself in place, a user's overlapping alltoallv blocks.
template <class BufOf>
size_t firstLateLocal(const std::vector<Step> &steps, size_t i, size_t end, BufOf bufOf) {
  size_t cut = i;
  for (size_t k = i; k < end; k++) {
    const Step &l = steps[k];
    if (!isLocal(l)) continue;
    char *sp, *dp;
    size_t sb, db;
    bufOf(l.src.buf).range(l.src.chunk, &sp, &sb);
    bufOf(l.dst.buf).range(l.dst.chunk, &dp, &db);
    for (size_t m = i; m < end; m++) {
      const Step &x = steps[m];
      if (!isMessage(x)) continue;
      bool send = x.kind == StepKind::Send;
      const ChunkRef &ref = send ? x.src : x.dst;
      char *p;
      size_t b;
      bufOf(ref.buf).range(ref.chunk, &p, &b);
      if (overlaps(dp, db, p, b) || (!send && overlaps(sp, sb, p, b))) {
        cut = k + 1;
        break;
      }
    }
  }
  return cut;
}

// Receive-and-reduce steps whose destination a copy filled in an earlier
// stage from a source still intact then: the copy is skipped and the
// received bytes are reduced with the copy's source straight into the
// destination (dst = src op received: one pass over the data instead of a
// copy, then a reduction; the ring reducescatter's and allreduce's own
// chunks, a reduce's accumulator).  skip[k]: step k (a copy) is not run;
// base[k]: step k (a receive-and-reduce) reduces with these bytes.  Between
// the copy and the receive nothing may touch the destination or write the
// source; the steps after the receive in its stage may not write the source.
// Returns how many copies it left out.
template <class BufOf>
size_t fuseCopies(const std::vector<Step> &steps, BufOf bufOf, std::vector<char> *skip,
                  std::vector<const char *> *base) {
  size_t fused = 0;
  skip->assign(steps.size(), 0);
  base->assign(steps.size(), nullptr);
  constexpr size_t kLookAhead = 64;  // steps scanned past a copy
  auto rangeOf = [&](const ChunkRef &c, char **p, size_t *b) { bufOf(c.buf).range(c.chunk, p, b); };
  for (size_t c = 0; c < steps.size(); c++) {
    const Step &cp = steps[c];
    if (cp.kind != StepKind::Copy) continue;
    char *sp, *dp;
    size_t sb, db;
    rangeOf(cp.src, &sp, &sb);
    rangeOf(cp.dst, &dp, &db);
    if (sb != db || db == 0 || overlaps(sp, sb, dp, db)) continue;
    size_t found = steps.size();
    bool ok = true;
    for (size_t t = c + 1; t < steps.size() && t <= c + kLookAhead && ok; t++) {
      const Step &st = steps[t];
      if (found < steps.size() && st.stage != steps[found].stage) break;  // past R's stage
      char *p = nullptr, *q = nullptr;
      size_t pb = 0, qb = 0;
      bool reads = st.kind == StepKind::Send || st.kind == StepKind::Copy || st.kind == StepKind::Reduce;
      bool writes = st.kind != StepKind::Send;
      if (reads) rangeOf(st.src, &p, &pb);
      if (writes) rangeOf(st.dst, &q, &qb);
      if (found == steps.size() && st.kind == StepKind::RecvReduce && st.stage > cp.stage &&
          q == dp && qb == db) {
        found = t;
        continue;
      }
      if (overlaps(p, pb, dp, db) || overlaps(q, qb, dp, db) || overlaps(q, qb, sp, sb)) ok = false;
    }
    if (!ok || found == steps.size() || (*base)[found]) continue;
    (*skip)[c] = 1;
    (*base)[found] = sp;
    fused++;
  }
  return fused;
}

std::atomic<uint64_t> g_fused{0};

}  // namespace

uint64_t fusedCopies() { return g_fused.load(std::memory_order_relaxed); }

flagcxResult_t localWorkPiece(ExecState *s, LocalWork &w, bool wait, bool *did) {
  // Pieces small enough that the messages are looked at often.
  constexpr size_t kPiece = 128 * 1024;
  *did = false;
  const LocalWork::Item &it = w.items[w.next];
  size_t ts = dtypeSize(w.dt);
  size_t n = std::min(kPiece - kPiece % ts, it.bytes - w.done);
  char *d = it.dst + w.done;
  const char *p = it.src + w.done;
  if (wait) {
    FLAGCX_CHECK(gateWait(s, p, n));
  } else {
    bool ready = false;
    FLAGCX_CHECK(gateReady(s, p, n, &ready));
    if (!ready) return flagcxSuccess;
  }
  FLAGCX_CHECK(it.reduce ? localReduce(s, d, p, n / ts, w.dt, w.op) : localCopy(s, d, p, n));
  *did = true;
  w.done += n;
  if (w.done == it.bytes) {
    w.next++;
    w.done = 0;
  }
  return flagcxSuccess;
}

namespace {

// One collective bound to this call's buffers: what its stages read.
struct CollCall {
  const CollArgs *a = nullptr;
  const Schedule *sch = nullptr;
  const RankSchedule *rs = nullptr;
  FlightEntry *fe = nullptr;
  Bound in, out, scr;
  int n = 0;
  size_t ts = 1;
  bool direct = false, isRoot = true, fuse = false, sinking = false;
  // Avg on a fold_order schedule: each output chunk is one Fold of all N
  // contributions (verified), which divides before its one rounding; no
  // divide at the end.  Other schedules' Folds of an Avg sum, and the end
  // divides.
  bool foldAvg = false;
  int64_t chunkParam = 0;  // FLAGCX_NET_CHUNK_SIZE
  uint64_t tag = 0;
  char what[96] = {};
  const Bound &buf(BufKind b) const { return b == BufKind::Input ? in : b == BufKind::Output ? out : scr; }
};

// Bind, part 1: the schedule for this call, its peers connected, its
// flight entry, tag and name.
flagcxResult_t selectSchedule(ExecState *s, CollItem &ci, CollCall *c) {
  const CollArgs &a = ci.a;
  size_t selectBytes = a.count * c->ts;
  // A deterministic call takes the ordered schedule, whose fold_order the
  // verifier proved, whatever FLAGCX_ALGO or the tuning would pick.
  c->sch = ci.ordered ? s->env.algos->selectOrdered(a.op, a.root)
                      : s->env.algos->select(a.op, selectBytes, a.dtype, a.root);
  if (c->sch && ci.ordered && !c->sch->foldOrder) {
    WARN(kColl, "rank %d: %s: the schedule %s has no proven fold_order", s->rank, opName(a.op),
         c->sch->algo.c_str());
    return flagcxInternalError;
  }
  if (c->sch) c->foldAvg = a.redop == flagcxAvg && c->sch->foldOrder;
  if (!c->sch) {
    WARN(kColl, "rank %d: no schedule for %s (%zu bytes, root %d)", s->rank, opName(a.op),
         selectBytes, a.root);
    return flagcxInternalError;
  }
  c->rs = &c->sch->ranks[0];
  if (!s->allConnected) {
    // Peers this schedule names that have no connection yet (alltoall's,
    // or any op's with FLAGCX_CONNECT_ALL=0 and a peer no other schedule
    // names): every rank of the call connects to its own at this point.
    std::vector<int> &peers = s->sched->stepPeers;  // kept for its capacity
    peers.clear();
    for (const Step &st : c->rs->steps)
      if (st.peer >= 0) peers.push_back(st.peer);
    FLAGCX_CHECK(connectFor(s, peers));
  }
  bool rooted = opIsRooted(a.op);
  // (An entry already begun is this call's, by a path that fell back here.)
  c->fe = ci.flight ? s->flight.retag(ci.flight, c->sch->algo.c_str())
                    : s->flight.begin(ci.seq, opName(a.op), c->sch->algo.c_str(), selectBytes,
                                      a.dtype, rooted ? a.root : -1);
  ci.flight = c->fe;
  c->isRoot = !rooted || s->rank == a.root;
  c->tag = collTag(ci.seq, a.op, a.dtype, rooted ? a.root : 0,
                   a.op == OpKind::AlltoAllv ? 0 : a.count, ci.ordered);
  s->curTag = c->tag;
  snprintf(c->what, sizeof(c->what), "%s/%s #%llu", opName(a.op), c->sch->algo.c_str(),
           static_cast<unsigned long long>(ci.seq));
  return flagcxSuccess;
}

// A packed scratch (sched's packScratch): chunk p has the size of data-space
// chunk scratchData[p] of `full` elements in N chunks, laid end to end.
void packScratchChunks(ExecState *s, const RankSchedule &rs, size_t full, int N, Bound *scr) {
  const size_t P = rs.scratchData.size();
  std::vector<size_t> &at = s->sched->scratchDispls;  // P offsets, then P counts
  at.resize(2 * P + 1);  // never empty: vcounts is set even when P = 0
  unsigned __int128 t = full;
  size_t end = 0;
  for (size_t p = 0; p < P; p++) {
    unsigned d = static_cast<unsigned>(rs.scratchData[p]);
    size_t lo = static_cast<size_t>(t * d / static_cast<unsigned>(N));
    size_t hi = static_cast<size_t>(t * (d + 1) / static_cast<unsigned>(N));
    at[p] = end;
    at[P + p] = hi - lo;
    end += hi - lo;
  }
  scr->nchunks = static_cast<int>(P);
  scr->total = end;
  scr->vdispls = at.data();
  scr->vcounts = at.data() + P;
}

// Bind, part 2: how many chunks each buffer has and how many elements.
void bindChunks(ExecState *s, const CollItem &ci, CollCall *c) {
  const CollArgs &a = ci.a;
  const int n = c->n, N = c->sch->chunks;
  size_t full = (a.op == OpKind::AllReduce || a.op == OpKind::Reduce ||
                 a.op == OpKind::Broadcast) ? a.count : a.count * static_cast<size_t>(n);
  Bound &in = c->in, &out = c->out, &scr = c->scr;
  in.ts = out.ts = scr.ts = c->ts;
  in.nchunks = bufChunks(a.op, BufKind::Input, N, n);
  out.nchunks = bufChunks(a.op, BufKind::Output, N, n);
  scr.nchunks = N * c->sch->scratchCopies;  // copies of the data space (sched/ir.h)
  in.total = opInputIsBlock(a.op) ? a.count : full;
  out.total = opOutputIsBlock(a.op) ? a.count : full;
  scr.total = full * static_cast<size_t>(c->sch->scratchCopies);
  if (a.op == OpKind::AlltoAllv) {
    // A rank with nothing to send or receive still runs the schedule: the
    // others exchange (empty) messages with it, and that rank's view alone
    // cannot tell that nobody needs it.
    const size_t *sc = ci.v.data(), *sd = sc + n, *rc = sd + n, *rd = rc + n;
    in.vcounts = sc, in.vdispls = sd;
    out.vcounts = rc, out.vdispls = rd;
    // Scratch mirrors the send layout, packed.
    scr.vcounts = sc;
    std::vector<size_t> &packed = s->sched->scratchDispls;
    packed.assign(static_cast<size_t>(n), 0);
    for (int p = 1; p < n; p++) packed[static_cast<size_t>(p)] = packed[static_cast<size_t>(p - 1)] + sc[p - 1];
    scr.vdispls = packed.data();
    size_t maxEnd = 0;
    for (int p = 0; p < n; p++) maxEnd = std::max(maxEnd, sd[p] + sc[p]);
    in.total = maxEnd;
    maxEnd = 0;
    for (int p = 0; p < n; p++) maxEnd = std::max(maxEnd, rd[p] + rc[p]);
    out.total = maxEnd;
    scr.total = packed[static_cast<size_t>(n - 1)] + sc[n - 1];
  }
  if (c->rs->scratchPacked) packScratchChunks(s, *c->rs, full, N, &scr);
  in.base = const_cast<char *>(static_cast<const char *>(a.send));
  out.base = static_cast<char *>(a.recv);
}

// Bind, part 3: the working buffers -- stand-ins for buffers a non-root
// rank need not pass, a snapshot of an input the output overlaps, scratch.
flagcxResult_t placeBuffers(ExecState *s, CollCall *c) {
  const CollArgs &a = *c->a;
  Bound &in = c->in, &out = c->out;
  const size_t ts = c->ts, inBytes = in.total * ts, outBytes = out.total * ts;
  const bool direct = c->direct;
  bool outOfMemory = false;
  auto work = [&](std::vector<char> &h, GrowBuf &d, size_t bytes) -> char * {
    char *p = workBuf(s, h, d, bytes);
    outOfMemory = outOfMemory || (direct && !p);  // the heap's data() is null when empty
    return p;
  };
  if (!c->isRoot && (a.op == OpKind::Reduce || a.op == OpKind::Gather))
    out.base = work(s->sched->host.outAlt, s->sched->direct.outAlt, outBytes);
  if (!c->isRoot && (a.op == OpKind::Broadcast || a.op == OpKind::Scatter))
    in.base = work(s->sched->host.inAlt, s->sched->direct.inAlt, inBytes);
  // Schedules assume distinct input and output: snapshot an overlapping
  // input -- unless the call is in place chunk for chunk and this rank's
  // steps never read an input chunk once its output chunk may have changed
  // (rs.inPlaceNoCopy, found when the schedule was compiled): then the
  // input is intact whenever it is read.
  // torch's broadcast and allreduce are in place.
  // Host buffers only: device steps are queued, and this was not run on a GPU.
  // nccl's in-place allgather/gather (input = my block of the output) and
  // reducescatter/scatter (output = my block of the input) likewise
  // (rs.inPlaceBlockNoCopy).
  // Whether `part` is this rank's block of `whole` (k = 1: the same bytes).
  auto blockOf = [&](const Bound &part, size_t partBytes, const Bound &whole, size_t wholeBytes,
                     int k) {
    return partBytes * static_cast<size_t>(k) == wholeBytes && part.nchunks * k == whole.nchunks &&
           part.base == whole.base + (k == 1 ? 0 : static_cast<size_t>(s->rank) * partBytes);
  };
  const RankSchedule &rs = *c->rs;
  bool noCopy = !direct && !in.vcounts && in.base && out.base &&
                ((rs.inPlaceNoCopy && blockOf(in, inBytes, out, outBytes, 1)) ||
                 (rs.inPlaceBlockNoCopy && (blockOf(in, inBytes, out, outBytes, c->n) ||
                                            blockOf(out, outBytes, in, inBytes, c->n))));
  if (!noCopy && in.base && out.base && overlaps(in.base, inBytes, out.base, outBytes)) {
    char *copy = work(s->sched->host.inPlace, s->sched->direct.inPlace, inBytes);
    FLAGCX_CHECK(gateWait(s, in.base, inBytes));
    if (copy) FLAGCX_CHECK(localCopy(s, copy, in.base, inBytes));
    in.base = copy;
  }
  c->scr.base = work(s->sched->host.scratch, s->sched->direct.scratch, c->scr.total * ts);
  if (outOfMemory) {
    WARN(kColl, "rank %d: out of %s memory for the working buffers of %s", s->rank,
         direct ? "device" : "host", opName(a.op));
    return flagcxSystemError;
  }
  return flagcxSuccess;
}

// Bind, part 4: copies a receive-and-reduce absorbs (host calls of the
// reducing ops whose input is all there: no staging gate), and, for staged
// output, the stage after which each output chunk goes back to the device
// (an Avg divides the whole output at the end, and alltoallv chunks may
// overlap: those copy back at once, after).
void planCopies(ExecState *s, CollCall *c) {
  const CollArgs &a = *c->a;
  const RankSchedule &rs = *c->rs;
  auto bufOf = [c](BufKind b) -> const Bound & { return c->buf(b); };
  // (fuseCopies does not follow a Fold's sources: not with Fold steps.)
  c->fuse = !c->direct && !s->sched->staged.gate.base && opReduces(a.op) && rs.folds.empty() &&
            paramInt(Param::FUSE_COPIES) != 0;
  if (c->fuse)
    g_fused.fetch_add(fuseCopies(rs.steps, bufOf, &s->sched->scratchFuseSkip, &s->sched->scratchFuseBase),
                      std::memory_order_relaxed);
  c->chunkParam = paramInt(Param::NET_CHUNK_SIZE);
  const StageSink &sink = s->sched->staged.sink;
  c->sinking = !c->direct && sink.host && c->out.base == sink.host && a.op != OpKind::AlltoAllv &&
               !(a.redop == flagcxAvg && opReduces(a.op) && !c->foldAvg);
  if (!c->sinking) return;
  std::vector<int> &lastWrite = s->sched->scratchLastWrite;
  lastWrite.assign(static_cast<size_t>(c->out.nchunks), -1);
  for (const Step &st : rs.steps)
    if (st.kind != StepKind::Send && st.dst.buf == BufKind::Output && st.dst.chunk >= 0 &&
        st.dst.chunk < c->out.nchunks)
      lastWrite[static_cast<size_t>(st.dst.chunk)] =
          std::max(lastWrite[static_cast<size_t>(st.dst.chunk)], st.stage);
}

// Staged output: the output chunks whose last write was `stage` go back to
// the device (-1: those no step writes).
flagcxResult_t sinkChunks(ExecState *s, const CollCall &c, int stage) {
  const std::vector<int> &lastWrite = s->sched->scratchLastWrite;
  for (int k = 0; k < c.out.nchunks; k++) {
    if (lastWrite[static_cast<size_t>(k)] != stage) continue;
    char *p;
    size_t b;
    c.out.range(k, &p, &b);
    if (b) FLAGCX_CHECK(s->dev->copyAsync(s->sched->staged.sink.dev + (p - s->sched->staged.sink.host), p, b));
  }
  return flagcxSuccess;
}

// A Fold step: dst = the left fold of its sources in the listed order (the
// adapter's kernel on device memory in direct mode, else hostFold on the
// host copies).  Its sources arrived by plain receives in earlier stages.
flagcxResult_t runFold(ExecState *s, const CollCall &c, const Step &st) {
  const RankSchedule &rs = *c.rs;
  const size_t f = static_cast<size_t>(st.fold);
  if (st.fold < 0 || f >= rs.folds.size() || rs.folds[f].empty()) {
    WARN(kColl, "rank %d: %s: %s names no sources", s->rank, c.what, stepText(st, &rs).c_str());
    return flagcxInternalError;
  }
  const std::vector<ChunkRef> &from = rs.folds[f];
  char *dp;
  size_t db;
  c.buf(st.dst.buf).range(st.dst.chunk, &dp, &db);
  std::vector<const void *> &srcs = s->sched->scratchFoldSrcs;
  srcs.clear();
  for (const ChunkRef &ref : from) {
    char *sp;
    size_t sb;
    c.buf(ref.buf).range(ref.chunk, &sp, &sb);
    if (sb != db) {
      WARN(kColl, "rank %d: %s: %s folds %zu bytes into %zu", s->rank, c.what,
           stepText(st, &rs).c_str(), sb, db);
      return flagcxInternalError;
    }
    if (!c.direct) FLAGCX_CHECK(gateWait(s, sp, sb));
    srcs.push_back(sp);
  }
  if (!db) return flagcxSuccess;
  const int n = static_cast<int>(srcs.size());
  const CollArgs &a = *c.a;
  const flagcxRedOp_t op = a.redop == flagcxAvg && !c.foldAvg ? flagcxSum : a.redop;
  return c.direct ? s->dev->foldAsync(dp, srcs.data(), n, db / c.ts, a.dtype, op)
                  : hostFold(dp, srcs.data(), n, db / c.ts, a.dtype, op);
}

// Plan a stage, part 1: its local steps.  Those from firstLateLocal's cut
// on go into `late` (run while the stage's messages move, on the host);
// the ones before it run now.
flagcxResult_t stageLocals(ExecState *s, const CollCall &c, size_t i, size_t end,
                           LocalWork &late) {
  const CollArgs &a = *c.a;
  const std::vector<Step> &steps = c.rs->steps;
  auto bufOf = [&c](BufKind b) -> const Bound & { return c.buf(b); };
  size_t cut = c.direct ? end : firstLateLocal(steps, i, end, bufOf);
  late.start(a.dtype, a.redop);
  for (size_t k = i; k < end; k++) {
    const Step &st = steps[k];
    // (A Fold depends on no message of its stage, and none on it: the
    // verifier's stage rule; it runs now.)
    if (st.kind == StepKind::Fold) FLAGCX_CHECK(runFold(s, c, st));
    if (!isLocal(st) || (c.fuse && s->sched->scratchFuseSkip[k])) continue;
    char *sp, *dp;
    size_t sb, db;
    c.buf(st.src.buf).range(st.src.chunk, &sp, &sb);
    c.buf(st.dst.buf).range(st.dst.chunk, &dp, &db);
    if (sb != db) {
      WARN(kColl, "rank %d: %s: %s moves %zu bytes into %zu", s->rank, c.what,
           stepText(st).c_str(), sb, db);
      return flagcxInternalError;
    }
    if (k >= cut) {
      late.items.push_back({st.kind == StepKind::Reduce, dp, sp, sb});
      continue;
    }
    if (!c.direct) FLAGCX_CHECK(gateWait(s, sp, sb));
    FLAGCX_CHECK(st.kind == StepKind::Copy ? localCopy(s, dp, sp, sb)
                                           : localReduce(s, dp, sp, sb / c.ts, a.dtype, a.redop));
  }
  if (c.direct) FLAGCX_CHECK(s->dev->flush());
  return flagcxSuccess;
}

// Plan a stage, part 2: its messages, sliced by FLAGCX_NET_CHUNK_SIZE (or
// what the peer's Conn moves best) outside direct mode, slices spread over
// the channels.  Received bytes to be reduced land in a heap buffer first
// (direct mode reduces straight from the sender's memory).
void stageXfers(ExecState *s, const CollCall &c, size_t i, size_t end, std::vector<Xfer> &xs) {
  const std::vector<Step> &steps = c.rs->steps;
  auto sliceTo = [&](int peer) {
    size_t sl = c.chunkParam > 0 ? static_cast<size_t>(c.chunkParam) : s->conn(peer)->sliceHint();
    if (sl == 0) sl = size_t{512} << 10;
    sl = std::max<size_t>(sl, 4096);
    return sl - sl % c.ts;
  };
  xs.clear();
  size_t landing = 0;
  for (size_t k = i; k < end; k++)
    if (steps[k].kind == StepKind::RecvReduce) {
      char *p;
      size_t b;
      c.buf(steps[k].dst.buf).range(steps[k].dst.chunk, &p, &b);
      landing += b;
    }
  char *land = c.direct ? nullptr : growHeap(s->sched->host.landing, landing);
  size_t landOff = 0;
  for (size_t k = i; k < end; k++) {
    const Step &st = steps[k];
    if (!isMessage(st)) continue;
    char *p;
    size_t b;
    bool isSend = st.kind == StepKind::Send;
    const ChunkRef &ref = isSend ? st.src : st.dst;
    c.buf(ref.buf).range(ref.chunk, &p, &b);
    char *target = st.kind == StepKind::RecvReduce ? (c.direct ? nullptr : land + landOff) : p;
    // Direct mode moves a step in one piece (the GPU copies it at once).
    size_t slice = c.direct ? b : sliceTo(st.peer);
    size_t nslices = b == 0 || c.direct ? 1 : (b + slice - 1) / slice;
    for (size_t sl = 0; sl < nslices; sl++) {
      size_t off = sl * slice, len = c.direct ? b : std::min(slice, b - std::min(b, off));
      Xfer x{};
      x.ch = static_cast<int>(sl % static_cast<size_t>(s->nchannels));
      x.conn = s->conn(st.peer, x.ch);
      x.isSend = isSend;
      x.buf = target ? target + off : nullptr;
      x.bytes = len;
      x.tag = c.tag;
      x.peer = st.peer;
      if (st.kind == StepKind::RecvReduce) {
        x.reduceDst = p + off;
        if (c.fuse && s->sched->scratchFuseBase[k]) x.reduceBase = s->sched->scratchFuseBase[k] + off;
      }
      xs.push_back(x);
    }
    if (st.kind == StepKind::RecvReduce) landOff += b;
  }
}

}  // namespace

flagcxResult_t runColl(ExecState *s, CollItem &ci) {
  const CollArgs &a = ci.a;
  if (a.count == 0 && a.op != OpKind::Barrier && a.op != OpKind::AlltoAllv) return flagcxSuccess;
  // Bind: schedule, peers, buffers.
  CollCall c;
  c.a = &a;
  c.n = s->nranks;
  c.ts = dtypeSize(a.dtype);
  c.direct = s->direct();
  FLAGCX_CHECK(selectSchedule(s, ci, &c));
  bindChunks(s, ci, &c);
  FLAGCX_CHECK(placeBuffers(s, &c));
  planCopies(s, &c);
  // Stage by stage: plan (local steps, messages), then run.
  const std::vector<Step> &steps = c.rs->steps;
  std::vector<Xfer> &xs = s->sched->scratchXfers;
  LocalWork &late = s->sched->scratchLocal;
  for (size_t i = 0, end; i < steps.size(); i = end) {
    int stage = steps[i].stage;
    s->flight.stage(c.fe, stage);
    for (end = i; end < steps.size() && steps[end].stage == stage;) end++;
    FLAGCX_CHECK(stageLocals(s, c, i, end, late));
    stageXfers(s, c, i, end, xs);
    FLAGCX_CHECK(c.direct ? runDirectXfers(s, xs, a.dtype, a.redop, c.what)
                          : runXfers(s, xs, a.dtype, a.redop, c.what, &late));
    if (c.sinking) FLAGCX_CHECK(sinkChunks(s, c, stage));
  }
  if (c.sinking) {
    FLAGCX_CHECK(sinkChunks(s, c, -1));  // chunks no step wrote go back as they are
    s->sched->staged.sink.used = true;
  }
  if (a.redop == flagcxAvg && opReduces(a.op) && c.isRoot && !c.foldAvg) {
    // Every reducing op's output holds `count` elements (reducescatter: its block).
    if (c.direct)
      FLAGCX_CHECK(s->dev->divide(a.recv, a.recv, a.count, a.dtype, static_cast<uint64_t>(c.n), nullptr));
    else
      FLAGCX_CHECK(hostDivide(a.recv, a.recv, a.count, a.dtype, static_cast<uint64_t>(c.n)));
  }
  return flagcxSuccess;
}

}  // namespace flagcx
