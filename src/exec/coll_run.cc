// One collective through its compiled schedule: the schedule's abstract
// chunks are bound to byte ranges of this call's buffers, then the steps run
// stage by stage — a stage's local copies and reductions that its messages
// need first, then all its messages at once (sliced by FLAGCX_NET_CHUNK_SIZE
// outside direct mode), the stage's other local steps on the host while those
// move (firstLateLocal).
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
  const size_t *vcounts = nullptr, *vdispls = nullptr;  // alltoallv
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
      if (isLocal(x)) continue;
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

flagcxResult_t runColl(ExecState *s, CollItem &ci) {
  const CollArgs &a = ci.a;
  int n = s->nranks;
  size_t ts = dtypeSize(a.dtype);
  if (a.count == 0 && a.op != OpKind::Barrier && a.op != OpKind::AlltoAllv) return flagcxSuccess;
  const size_t *sc = nullptr, *sd = nullptr, *rc = nullptr, *rd = nullptr;
  if (a.op == OpKind::AlltoAllv) {
    sc = ci.v.data();
    sd = sc + n;
    rc = sd + n;
    rd = rc + n;
    // A rank with nothing to send or receive still runs the schedule: the
    // others exchange (empty) messages with it, and that rank's view alone
    // cannot tell that nobody needs it.
  }
  size_t selectBytes = a.count * ts;
  const Schedule *sch = s->env.algos->select(a.op, selectBytes, a.dtype, a.root);
  if (!sch) {
    WARN(kColl, "rank %d: no schedule for %s (%zu bytes, root %d)", s->rank, opName(a.op),
         selectBytes, a.root);
    return flagcxInternalError;
  }
  const RankSchedule &rs = sch->ranks[0];
  if (!s->allConnected) {
    // Peers this schedule names that have no connection yet (alltoall's,
    // or any op's with FLAGCX_CONNECT_ALL=0 and a peer no other schedule
    // names): every rank of the call connects to its own at this point.
    std::vector<int> &peers = s->stepPeers;  // kept for its capacity
    peers.clear();
    for (const Step &st : rs.steps)
      if (st.peer >= 0) peers.push_back(st.peer);
    FLAGCX_CHECK(connectFor(s, peers));
  }
  int N = sch->chunks;
  // (An entry already begun is this call's, by a path that fell back here.)
  FlightEntry *fe = ci.flight ? s->flight.retag(ci.flight, sch->algo.c_str())
                              : s->flight.begin(ci.seq, opName(a.op), sch->algo.c_str(), selectBytes,
                                                a.dtype, opIsRooted(a.op) ? a.root : -1);
  ci.flight = fe;
  bool rooted = opIsRooted(a.op);
  bool isRoot = !rooted || s->rank == a.root;
  size_t full = (a.op == OpKind::AllReduce || a.op == OpKind::Reduce ||
                 a.op == OpKind::Broadcast) ? a.count : a.count * static_cast<size_t>(n);

  Bound in, out, scr;
  in.ts = out.ts = scr.ts = ts;
  in.nchunks = bufChunks(a.op, BufKind::Input, N, n);
  out.nchunks = bufChunks(a.op, BufKind::Output, N, n);
  scr.nchunks = N;
  in.total = opInputIsBlock(a.op) ? a.count : full;
  out.total = opOutputIsBlock(a.op) ? a.count : full;
  scr.total = full;
  if (a.op == OpKind::AlltoAllv) {
    in.vcounts = sc, in.vdispls = sd;
    out.vcounts = rc, out.vdispls = rd;
    // Scratch mirrors the send layout, packed.
    scr.vcounts = sc;
    std::vector<size_t> &packed = s->scratchDispls;
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
  size_t inBytes = in.total * ts, outBytes = out.total * ts;
  in.base = const_cast<char *>(static_cast<const char *>(a.send));
  out.base = static_cast<char *>(a.recv);
  bool direct = s->direct();
  bool outOfMemory = false;
  auto work = [&](std::vector<char> &h, GrowBuf &d, size_t bytes) -> char * {
    char *p = workBuf(s, h, d, bytes);
    outOfMemory = outOfMemory || (direct && !p);  // the heap's data() is null when empty
    return p;
  };
  // Buffers a non-root rank need not pass get a private stand-in.
  if (!isRoot && (a.op == OpKind::Reduce || a.op == OpKind::Gather))
    out.base = work(s->bufOutAlt, s->dOutAlt, outBytes);
  if (!isRoot && (a.op == OpKind::Broadcast || a.op == OpKind::Scatter))
    in.base = work(s->bufInAlt, s->dInAlt, inBytes);
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
  bool noCopy = !direct && !in.vcounts && in.base && out.base &&
                ((rs.inPlaceNoCopy && blockOf(in, inBytes, out, outBytes, 1)) ||
                 (rs.inPlaceBlockNoCopy && (blockOf(in, inBytes, out, outBytes, n) ||
                                            blockOf(out, outBytes, in, inBytes, n))));
  if (!noCopy && in.base && out.base && overlaps(in.base, inBytes, out.base, outBytes)) {
    char *copy = work(s->bufInPlace, s->dInPlace, inBytes);
    FLAGCX_CHECK(gateWait(s, in.base, inBytes));
    if (copy) FLAGCX_CHECK(localCopy(s, copy, in.base, inBytes));
    in.base = copy;
  }
  scr.base = work(s->bufScratch, s->dScratch, scr.total * ts);
  if (outOfMemory) {
    WARN(kColl, "rank %d: out of %s memory for the working buffers of %s", s->rank,
         direct ? "device" : "host", opName(a.op));
    return flagcxSystemError;
  }

  auto bufOf = [&](BufKind b) -> const Bound & {
    return b == BufKind::Input ? in : b == BufKind::Output ? out : scr;
  };
  // Host calls of the reducing ops whose input is all there (no staging
  // gate): skip the copies a receive-and-reduce can absorb.
  std::vector<char> &skip = s->scratchFuseSkip;
  std::vector<const char *> &fuseBase = s->scratchFuseBase;
  const bool fuse =
      !direct && !s->gate.base && opReduces(a.op) && paramInt(Param::FUSE_COPIES) != 0;
  if (fuse)
    g_fused.fetch_add(fuseCopies(rs.steps, bufOf, &skip, &fuseBase), std::memory_order_relaxed);
  // FLAGCX_NET_CHUNK_SIZE, or (auto) what the peer's Conn moves best.
  const int64_t chunkParam = paramInt(Param::NET_CHUNK_SIZE);
  auto sliceTo = [&](int peer) {
    size_t sl = chunkParam > 0 ? static_cast<size_t>(chunkParam) : s->conn(peer)->sliceHint();
    if (sl == 0) sl = size_t{512} << 10;
    sl = std::max<size_t>(sl, 4096);
    return sl - sl % ts;
  };
  uint64_t tag = collTag(ci.seq, a.op, a.dtype, rooted ? a.root : 0,
                         a.op == OpKind::AlltoAllv ? 0 : a.count);
  s->curTag = tag;
  char what[96];
  snprintf(what, sizeof(what), "%s/%s #%llu", opName(a.op), sch->algo.c_str(),
           static_cast<unsigned long long>(ci.seq));
  std::vector<Xfer> &xs = s->scratchXfers;
  // Staged output: each output chunk goes back to the device after the
  // stage that writes it last (an Avg divides the whole output at the end,
  // and alltoallv chunks may overlap: those copy back at once, after).
  StageSink &sink = s->sink;
  bool sinking = !direct && sink.host && out.base == sink.host && a.op != OpKind::AlltoAllv &&
                 !(a.redop == flagcxAvg && opReduces(a.op));
  std::vector<int> &lastWrite = s->scratchLastWrite;
  if (sinking) {
    lastWrite.assign(static_cast<size_t>(out.nchunks), -1);
    for (const Step &st : rs.steps)
      if (st.kind != StepKind::Send && st.dst.buf == BufKind::Output && st.dst.chunk >= 0 &&
          st.dst.chunk < out.nchunks)
        lastWrite[static_cast<size_t>(st.dst.chunk)] =
            std::max(lastWrite[static_cast<size_t>(st.dst.chunk)], st.stage);
  }
  auto sinkChunks = [&](int stage) -> flagcxResult_t {
    for (int c = 0; c < out.nchunks; c++) {
      if (lastWrite[static_cast<size_t>(c)] != stage) continue;
      char *p;
      size_t b;
      out.range(c, &p, &b);
      if (b) FLAGCX_CHECK(s->dev->copyAsync(sink.dev + (p - sink.host), p, b));
    }
    return flagcxSuccess;
  };
  size_t i = 0;
  while (i < rs.steps.size()) {
    int stage = rs.steps[i].stage;
    s->flight.stage(fe, stage);
    size_t end = i;
    while (end < rs.steps.size() && rs.steps[end].stage == stage) end++;
    // Local steps from `cut` on run while the stage's messages move (on the
    // host); the ones before it run first.
    size_t cut = direct ? end : firstLateLocal(rs.steps, i, end, bufOf);
    LocalWork &late = s->scratchLocal;
    late.start(a.dtype, a.redop);
    for (size_t k = i; k < end; k++) {
      const Step &st = rs.steps[k];
      if (!isLocal(st) || (fuse && skip[k])) continue;
      char *sp, *dp;
      size_t sb, db;
      bufOf(st.src.buf).range(st.src.chunk, &sp, &sb);
      bufOf(st.dst.buf).range(st.dst.chunk, &dp, &db);
      if (sb != db) {
        WARN(kColl, "rank %d: %s: %s moves %zu bytes into %zu", s->rank, what,
             stepText(st).c_str(), sb, db);
        return flagcxInternalError;
      }
      if (k >= cut) {
        late.items.push_back({st.kind == StepKind::Reduce, dp, sp, sb});
        continue;
      }
      if (!direct) FLAGCX_CHECK(gateWait(s, sp, sb));
      FLAGCX_CHECK(st.kind == StepKind::Copy ? localCopy(s, dp, sp, sb)
                                             : localReduce(s, dp, sp, sb / ts, a.dtype, a.redop));
    }
    if (direct) FLAGCX_CHECK(s->dev->flush());
    xs.clear();
    size_t landing = 0;
    for (size_t k = i; k < end; k++) {
      const Step &st = rs.steps[k];
      if (st.kind == StepKind::RecvReduce) {
        char *p; size_t b;
        bufOf(st.dst.buf).range(st.dst.chunk, &p, &b);
        landing += b;
      }
    }
    // Received bytes to be reduced land here first (direct mode reduces
    // straight from the sender's memory).
    char *land = direct ? nullptr : growHeap(s->bufLanding, landing);
    size_t landOff = 0;
    for (size_t k = i; k < end; k++) {
      const Step &st = rs.steps[k];
      if (st.kind == StepKind::Copy || st.kind == StepKind::Reduce) continue;
      char *p;
      size_t b;
      bool isSend = st.kind == StepKind::Send;
      const ChunkRef &ref = isSend ? st.src : st.dst;
      bufOf(ref.buf).range(ref.chunk, &p, &b);
      char *target = st.kind == StepKind::RecvReduce ? (direct ? nullptr : land + landOff) : p;
      // Direct mode moves a step in one piece (the GPU copies it at once).
      size_t slice = direct ? b : sliceTo(st.peer);
      size_t nslices = b == 0 || direct ? 1 : (b + slice - 1) / slice;
      for (size_t sl = 0; sl < nslices; sl++) {
        size_t off = sl * slice, len = direct ? b : std::min(slice, b - std::min(b, off));
        Xfer x{};
        x.ch = static_cast<int>(sl % static_cast<size_t>(s->nchannels));
        x.conn = s->conn(st.peer, x.ch);
        x.isSend = isSend;
        x.buf = target ? target + off : nullptr;
        x.bytes = len;
        x.tag = tag;
        x.peer = st.peer;
        if (st.kind == StepKind::RecvReduce) {
          x.reduceDst = p + off;
          if (fuse && fuseBase[k]) x.reduceBase = fuseBase[k] + off;
        }
        xs.push_back(x);
      }
      if (st.kind == StepKind::RecvReduce) landOff += b;
    }
    FLAGCX_CHECK(direct ? runDirectXfers(s, xs, a.dtype, a.redop, what)
                        : runXfers(s, xs, a.dtype, a.redop, what, &late));
    if (sinking) FLAGCX_CHECK(sinkChunks(stage));
    i = end;
  }
  if (sinking) {
    FLAGCX_CHECK(sinkChunks(-1));  // chunks no step wrote go back as they are
    sink.used = true;
  }
  if (a.redop == flagcxAvg && opReduces(a.op) && isRoot) {
    // Every reducing op's output holds `count` elements (reducescatter: its block).
    if (direct)
      FLAGCX_CHECK(s->dev->divide(a.recv, a.recv, a.count, a.dtype, static_cast<uint64_t>(n), nullptr));
    else
      FLAGCX_CHECK(hostDivide(a.recv, a.recv, a.count, a.dtype, static_cast<uint64_t>(n)));
  }
  return flagcxSuccess;
}

}  // namespace flagcx
