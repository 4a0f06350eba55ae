// Large collectives between ranks of one host, straight between the ranks'
// buffers (direct mode, for host memory and for device memory).
//
// Over the rings every byte of an allreduce is copied into a ring, out of it
// and reduced: about 4.5 S of memory traffic per rank at 2 ranks for S bytes,
// where reading the inputs and writing the outputs needs 2 S.  When the
// buffers a peer must touch are shareable (the host adapter's deviceMalloc
// and flagcxMemAlloc memory are memfd mappings, host_memory.h), each rank
// maps its peers' buffers once (cached per allocation) and works on them in
// place: an allreduce rank reduces its 1/n of every input and writes the
// result into every rank's output (S read and S written per rank, the
// bound); a reduce writes each rank's piece into the root's output; the
// copies (broadcast, allgather, gather, scatter, alltoall) are one copy per
// byte.
//
// A call meets in the shared block first (small.cc's slots and checks: tags,
// mismatches, dead peers, poison), each rank publishing a DirectDesc of its
// buffers.  Every rank then decides the same from the same descriptors: when
// some buffer a peer in another process must touch is not shareable (plain
// malloc memory), all take the rings.  Otherwise each maps what it needs and
// says so in line B (`mapped`); if any rank could not, all take the rings and
// the communicator stops trying.  Then the work, and line B's `done`: no
// rank returns while a peer may still read or write its buffers.  No rank
// reads what another writes within a call (each piece of an output has one
// writer, who has read every input of that piece before), so one meeting
// before and one after suffice — except an in-place alltoall, whose blocks
// are read by one peer and overwritten by their owner: it reads its blocks
// aside, meets a third time, then writes.
//
// Device memory (direct mode: every rank a CUDA rank of one host) works the
// same way: the descriptor carries CUDA IPC references of the buffers, the
// mappings are direct.cc's, the reductions and copies are queued on the
// adapter's stream as whole pieces and flushed before `done`.  The ring
// path's fixed cost there is its GPU hand-overs between the processes (a
// synchronize per step, docs/GPU.md); this path has one.
//
// A staged rank (a CUDA rank without IPC, in a communicator of host and
// device ranks) takes part on host memory: its adapter copies its input into
// shareable host copies (stageIn / stageOut, kept, grown at enqueue and
// page-locked, so its peers' mappings stay cached), the call works on those
// as on a host rank's buffers.  The copies run with the call
// (shm_stage.cc): the peers read each slice of its input as soon as it is
// on the host, and its output goes back piece by piece as each is final.
//
// Reductions put the rank that owns the destination first (in place its
// input is read before it is overwritten), then the others in rank order;
// a deterministic call (CollItem::ordered) folds every rank's input in rank
// order in one pass instead (hostFold / foldAsync: it reads every source
// before it writes, so in place is safe too).  Each piece of the output is
// computed by one rank and copied to the others, so every rank gets the same
// bits.  Mappings of a peer's
// allocation stay until the peer reports a free (host::memFreeCount moved)
// and this call does not use them, or the communicator ends.
#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "base/base.h"
#include "exec/shm_stage.h"
#include "exec/small_internal.h"
#include "net/net.h"
#include "rendezvous/rendezvous.h"

namespace flagcx {

namespace {

constexpr size_t kPiece = 64 << 10;  // reduced at a time: the output piece stays in cache
constexpr size_t kMaxMaps = 64;      // per peer, before unused mappings are dropped
constexpr size_t kStreamMin = 16 << 20;  // allreduce: streaming stores into peers from here (measured)
// Calls that go straight to the rings after one fell back for an unshareable
// buffer: a program on heap buffers (torch's CPU tensors) meets once per
// this many calls instead of every call; one that moves to shareable
// buffers waits at most this many calls for direct mode.
constexpr uint64_t kQuietCalls = 64;

const char *directWhat(OpKind op) {
  static const auto names = [] {
    std::array<std::string, static_cast<size_t>(OpKind::Count)> v;
    for (size_t i = 0; i < v.size(); i++)
      v[i] = std::string(opName(static_cast<OpKind>(i))) + " (shared memory, direct)";
    return v;
  }();
  return names[static_cast<size_t>(op)].c_str();
}

// Whether other ranks read rank q's send buffer, or read or write its
// receive buffer, in a direct call of this op.
bool peersTouchSend(const CollArgs &a, int q) {
  switch (a.op) {
    case OpKind::Broadcast:
    case OpKind::Scatter: return q == a.root;
    case OpKind::Gather: return false;
    default: return true;  // allreduce, reduce, reducescatter, allgather, alltoall
  }
}
bool peersTouchRecv(const CollArgs &a, int q) {
  switch (a.op) {
    case OpKind::AllReduce: return true;
    case OpKind::Reduce:
    case OpKind::Gather: return q == a.root;
    default: return false;
  }
}

// Rank q's buffer, of which this call touches `need` bytes, as this process
// reaches it: its address (q proven a thread of this process), or a
// (cached) mapping of the allocation the descriptor names, opened in q's
// proven process and checked to hold the bytes.
flagcxResult_t peerBuffer(ExecState *s, int q, const DirectDesc &d, bool recv, uint64_t need,
                          uint64_t word, char **out) {
  uint64_t addr = recv ? d.recvAddr : d.sendAddr;
  if (s->sameProcess(q)) {
    *out = reinterpret_cast<char *>(addr);
    return flagcxSuccess;
  }
  if (s->mode == ExecMode::Direct) {  // device memory: CUDA IPC, cached by direct.cc
    if (directImport(s, recv ? d.recvIpc : d.sendIpc, q, need, out) == flagcxSuccess)
      return flagcxSuccess;
    INFO(kShm, "rank %d: cannot map device memory of rank %d; this call takes the rings", s->rank, q);
    return flagcxSystemError;
  }
  host::ShareRef ref = recv ? d.recv : d.send;
  ref.pid = s->provenPid[static_cast<size_t>(q)];
  if (ref.pid <= 0 || ref.offset > ref.mapLen || need > ref.mapLen - ref.offset) {
    INFO(kShm, "rank %d: rank %d's buffer is not reachable (process not proven, or %llu bytes "
         "at offset %llu of a %llu-byte allocation); this call takes the rings", s->rank, q,
         static_cast<unsigned long long>(need), static_cast<unsigned long long>(ref.offset),
         static_cast<unsigned long long>(ref.mapLen));
    return flagcxSystemError;
  }
  char *base = s->block->shm->maps[static_cast<size_t>(q)].get(ref, word);
  if (!base) {
    INFO(kShm, "rank %d: cannot map a buffer of rank %d (%s); this call takes the rings",
         s->rank, q, lastErrorText());
    return flagcxSystemError;
  }
  *out = base + ref.offset;
  return flagcxSuccess;
}

// Waits until every peer's line-B counter `field` reaches `want`.
template <class Field>
flagcxResult_t waitPhase(ExecState *s, const char *what, uint64_t want, Field field) {
  SmallShm *sm = s->block->shm.get();
  FLAGCX_CHECK(waitUntil(s, what, [&] {
    for (int q = 0; q < s->nranks; q++)
      if (q != s->rank && field(sm->lineB(q)).load(std::memory_order_acquire) < want)
        return flagcxInProgress;
    return flagcxSuccess;
  }));
  for (int q = 0; q < s->nranks; q++)
    if (q != s->rank) sm->acquired(&field(sm->lineB(q)));
  return flagcxSuccess;
}

// This call over the rings after all (every rank decides the same).
// `unshareable`: because of a buffer, so the next calls skip the meeting.
flagcxResult_t fallBack(ExecState *s, CollItem &ci, bool unshareable = false) {
  s->block->ringsUsed = true;
  if (unshareable) s->block->shm->directQuietUntil = ci.seq + kQuietCalls;
  return s->sched->run(ci);
}

}  // namespace

bool ShmDirectPath::fits(const CollItem &ci) const {
  const ExecState *s = s_;
  const SmallShm *sm = s->block->shm.get();
  if (!sm->directMin || !blockCarries(s, ci.a)) return false;
  size_t ts = dtypeSize(ci.a.dtype);
  size_t most = std::max(elemsIn(ci, s->nranks), elemsOut(ci, s->nranks));
  return most <= SIZE_MAX / ts && most * ts >= sm->directMin && ci.seq >= sm->directQuietUntil;
}

uint64_t shmDirectCalls(const ExecState *s) { return s->block ? s->block->shm->directCalls : 0; }

namespace {

// One direct call: every rank's buffers as this rank reaches them, and how
// it reduces and copies (host memory in cache-sized pieces on this thread;
// device memory in one piece each, queued on the adapter's stream and
// flushed before `done`).
struct DirectCall {
  const CollArgs *a;
  int n, me;
  size_t ts, bytes;  // bytes: one rank's share
  bool onDevice;
  bool ordered;      // fold in rank order (deterministic mode)
  DeviceAdapter *dev;
  flagcxRedOp_t op;  // Avg reduces as Sum, then divides (not when ordered: the fold divides)
  size_t piece;
  char *send[kMaxRanks] = {}, *recv[kMaxRanks] = {};
  DirectStage *st = nullptr;  // a staged rank in the call (shm_stage.h); null: none

  flagcxResult_t reduce2(char *dst, const char *x, const char *y, size_t c) const {
    return onDevice ? dev->reduceAsync(dst, x, y, c, a->dtype, op) : hostReduce(dst, x, y, c, a->dtype, op);
  }
  flagcxResult_t copy(char *dst, const char *src, size_t len, bool stream = false) const {
    if (dst == src || !len) return flagcxSuccess;
    if (onDevice) return dev->copyAsync(dst, src, len);
    if (stream) copyBytesStreaming(dst, src, len);
    else copyBytes(dst, src, len);
    return flagcxSuccess;
  }
  // `len` bytes from rank q's input at `off` to dst, a slice at a time when
  // an input arrives behind marks (each waited for, each written piece of a
  // staged rank's own output sent back).
  flagcxResult_t copyIn(char *dst, int q, size_t off, size_t len) const {
    if (!st) return copy(dst, send[q] + off, len);
    for (size_t o = 0; o < len; o += st->chunk) {
      const size_t c = std::min(st->chunk, len - o);
      FLAGCX_CHECK(stageNeed(*st, q, off + o, c));
      if (dst + o == send[q] + off + o) continue;
      FLAGCX_CHECK(copy(dst + o, send[q] + off + o, c));
      FLAGCX_CHECK(stageWrote(*st, dst + o, c));
    }
    return flagcxSuccess;
  }
  // dst[0, count) = the reduction of every rank's input from byte `from`
  // over count elements, `first` first.  Ordered: the fold in rank order.
  flagcxResult_t reduceInto(char *dst, int first, size_t from, size_t count) const {
    const size_t pe = std::min(piece, std::max<size_t>(count, 1));
    const int second = first == 0 ? 1 : 0;
    for (size_t off = 0; off < count; off += pe) {
      const size_t c = std::min(pe, count - off), bo = off * ts;
      if (st)
        for (int q = 0; q < n; q++) FLAGCX_CHECK(stageNeed(*st, q, from + bo, c * ts));
      FLAGCX_CHECK(reducePiece(dst + bo, first, second, from + bo, c));
      if (st) FLAGCX_CHECK(stageWrote(*st, dst + bo, c * ts));
    }
    return flagcxSuccess;
  }
  flagcxResult_t reducePiece(char *dst, int first, int second, size_t from, size_t c) const {
    if (ordered) {
      const void *srcs[kMaxRanks];
      for (int q = 0; q < n; q++) srcs[q] = send[q] + from;
      return onDevice ? dev->foldAsync(dst, srcs, n, c, a->dtype, a->redop)
                      : hostFold(dst, srcs, n, c, a->dtype, a->redop);
    }
    FLAGCX_CHECK(reduce2(dst, send[first] + from, send[second] + from, c));
    for (int q = 0; q < n; q++)
      if (q != first && q != second) FLAGCX_CHECK(reduce2(dst, dst, send[q] + from, c));
    if (a->redop != flagcxAvg) return flagcxSuccess;
    return onDevice ? dev->divide(dst, dst, c, a->dtype, static_cast<uint64_t>(n), nullptr)
                    : hostDivide(dst, dst, c, a->dtype, static_cast<uint64_t>(n));
  }
  // Rank q's piece [lo, hi) of a reduction spread over the ranks: whole lines each.
  size_t per() const {
    const size_t align = std::max<size_t>(kLine / ts, 1);
    return ((a->count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n) + align - 1) / align * align;
  }
  size_t lo(int q) const { return std::min(static_cast<size_t>(q) * per(), a->count); }
  size_t hi(int q) const { return std::min(lo(q) + per(), a->count); }
};

// This rank's descriptor of its buffers for the meeting: addresses, and
// the shareable references of those its peers touch.
DirectDesc describeBuffers(ExecState *s, const CollItem &ci, bool oneProcess) {
  const CollArgs &a = ci.a;
  const int n = s->nranks, me = s->rank;
  const size_t ts = dtypeSize(a.dtype);
  DeviceAdapter *dev = s->dev;
  DirectDesc d{};
  d.frees = host::memFreeCount();
  d.sendAddr = reinterpret_cast<uintptr_t>(a.send);
  d.recvAddr = reinterpret_cast<uintptr_t>(a.recv);
  d.usable = true;
  if (s->mode != ExecMode::Direct) {
    d.inSlice = stageFeedSlice(s);
    if (peersTouchSend(a, me) && a.send)
      d.sendOk = host::memShareRef(a.send, elemsIn(ci, n) * ts, &d.send);
    if (peersTouchRecv(a, me) && a.recv)
      d.recvOk = host::memShareRef(a.recv, elemsOut(ci, n) * ts, &d.recv);
    return d;
  }
  // The kernels address every buffer this rank uses: device memory only.
  const bool usesSend = !((a.op == OpKind::Broadcast || a.op == OpKind::Scatter) && me != a.root);
  const bool usesRecv = !((a.op == OpKind::Reduce || a.op == OpKind::Gather) && me != a.root);
  d.usable = (!usesSend || dev->isDeviceMemory(a.send)) && (!usesRecv || dev->isDeviceMemory(a.recv));
  // (Ranks all in this process reach the buffers by address.)
  if (d.usable && !oneProcess && peersTouchSend(a, me))
    d.sendOk = dev->ipcExport(a.send, d.sendIpc) == flagcxSuccess;
  if (d.usable && !oneProcess && peersTouchRecv(a, me))
    d.recvOk = dev->ipcExport(a.recv, d.recvIpc) == flagcxSuccess;
  return d;
}

// Step 5: map what this rank touches of its peers' buffers into dc.
bool mapPeers(ExecState *s, const CollItem &ci, uint64_t word, DirectCall &dc) {
  SmallShm *sm = s->block->shm.get();
  const CollArgs &a = ci.a;
  const int p = static_cast<int>(ci.seq & 1);
  bool mapped = true;
  if (dc.onDevice) directImportReserve(s, 2 * static_cast<size_t>(dc.n));
  for (int q = 0; q < dc.n; q++) {
    if (q == dc.me) {
      dc.send[q] = static_cast<char *>(const_cast<void *>(a.send));
      dc.recv[q] = static_cast<char *>(a.recv);
      continue;
    }
    const DirectDesc &dq = *reinterpret_cast<const DirectDesc *>(sm->data(q, p));
    if (mapped && peersTouchSend(a, q))
      mapped = peerBuffer(s, q, dq, false, elemsIn(ci, dc.n) * dc.ts, word, &dc.send[q]) == flagcxSuccess;
    if (mapped && peersTouchRecv(a, q))
      mapped = peerBuffer(s, q, dq, true, elemsOut(ci, dc.n) * dc.ts, word, &dc.recv[q]) == flagcxSuccess;
    sm->maps[static_cast<size_t>(q)].dropStale(dq.frees, word, kMaxMaps);
  }
  return mapped;
}

// Step 6 for the reducing ops.  Reductions put the rank that owns the
// destination first, then the others in rank order.
flagcxResult_t directReduce(const DirectCall &dc) {
  const CollArgs &a = *dc.a;
  const int me = dc.me, n = dc.n;
  const size_t ts = dc.ts;
  switch (a.op) {
    case OpKind::AllReduce: {
      // Piece by piece: reduce into this rank's output, then write the
      // result into every peer's output while it is still in cache.
      // Streaming stores there when the message is too large to stay in the
      // caches anyway (no read of lines the peer's core holds).
      // (Two floats are added and multiplied commutatively, so this is the
      // rank-ordered fold too, except for Avg and for the narrow floats,
      // whose fold rounds once.)
      const bool foldOk = !dc.ordered || a.dtype == flagcxFloat32 || a.dtype == flagcxFloat64;
      if (dc.onDevice && n == 2 && a.redop != flagcxAvg && foldOk) {
        // One kernel reads both inputs once and writes both outputs.
        const size_t o = dc.lo(me) * ts;
        return dc.dev->reduce2Async(dc.recv[me] + o, dc.recv[1 - me] + o, dc.send[me] + o,
                                    dc.send[1 - me] + o, dc.hi(me) - dc.lo(me), a.dtype, dc.op);
      }
      const bool stream = dc.bytes >= kStreamMin;
      const size_t pe = std::min(dc.piece, std::max<size_t>(dc.hi(me) - dc.lo(me), 1));
      for (size_t off = dc.lo(me); off < dc.hi(me); off += pe) {
        const size_t c = std::min(pe, dc.hi(me) - off), bo = off * ts;
        FLAGCX_CHECK(dc.reduceInto(dc.recv[me] + bo, me, bo, c));
        for (int k = 1; k < n; k++)
          FLAGCX_CHECK(dc.copy(dc.recv[(me + k) % n] + bo, dc.recv[me] + bo, c * ts, stream));
        // With a staged rank: how far this rank's piece of every output is final.
        if (dc.st) FLAGCX_CHECK(stageProgress(*dc.st, (off + c - dc.lo(me)) * ts));
      }
      return flagcxSuccess;
    }
    case OpKind::Reduce: {
      const size_t o = dc.lo(me) * ts;
      return dc.reduceInto(dc.recv[a.root] + o, a.root, o, dc.hi(me) - dc.lo(me));
    }
    case OpKind::ReduceScatter: {
      const size_t mine0 = static_cast<size_t>(me) * dc.bytes;
      return dc.reduceInto(dc.recv[me], me, mine0, a.count);
    }
    default: return flagcxInternalError;
  }
}

// Step 6 for an in-place alltoall: block q of this rank's buffer is what
// peer q still reads until it is done: read every peer's block for this
// rank aside, meet (line B's `read`), then write them (two copies per byte).
flagcxResult_t directAlltoallInPlace(ExecState *s, const DirectCall &dc, uint64_t word,
                                     const char *what) {
  const int me = dc.me, n = dc.n;
  const size_t bytes = dc.bytes, mine0 = static_cast<size_t>(me) * bytes;
  const size_t aside = static_cast<size_t>(n - 1) * bytes;
  char *tmp = dc.onDevice ? s->sched->direct.scratch.grow(aside) : growHeap(s->sched->host.scratch, aside);
  if (!tmp) return flagcxSystemError;
  for (int k = 1; k < n; k++)
    FLAGCX_CHECK(dc.copyIn(tmp + static_cast<size_t>(k - 1) * bytes, (me + k) % n, mine0, bytes));
  if (dc.onDevice) FLAGCX_CHECK(dc.dev->flush());
  // The peers may wait for this rank's input below: all of it published first.
  if (dc.st) FLAGCX_CHECK(stageNeed(*dc.st, me, 0, static_cast<size_t>(n) * bytes));
  Phase *ph = s->block->shm->lineB(me);
  s->block->shm->released(&ph->read);
  ph->read.store(word, std::memory_order_release);
  FLAGCX_CHECK(waitPhase(s, what, word, [](Phase *x) -> auto & { return x->read; }));
  for (int k = 1; k < n; k++) {
    char *dst = dc.recv[me] + static_cast<size_t>((me + k) % n) * bytes;
    FLAGCX_CHECK(dc.copy(dst, tmp + static_cast<size_t>(k - 1) * bytes, bytes));
    if (dc.st) FLAGCX_CHECK(stageWrote(*dc.st, dst, bytes));
  }
  return flagcxSuccess;
}

// Step 6 for the copying ops: one copy per byte.
flagcxResult_t directCopy(ExecState *s, const DirectCall &dc, uint64_t word, const char *what) {
  const CollArgs &a = *dc.a;
  const int me = dc.me, n = dc.n;
  const size_t bytes = dc.bytes, mine0 = static_cast<size_t>(me) * bytes;
  switch (a.op) {
    case OpKind::AllGather:
      for (int k = 0; k < n; k++) {
        int q = (me + k) % n;
        FLAGCX_CHECK(dc.copyIn(dc.recv[me] + static_cast<size_t>(q) * bytes, q, 0, bytes));
      }
      return flagcxSuccess;
    case OpKind::Gather: return dc.copyIn(dc.recv[a.root] + mine0, me, 0, bytes);
    case OpKind::Broadcast: return dc.copyIn(dc.recv[me], a.root, 0, bytes);
    case OpKind::Scatter: return dc.copyIn(dc.recv[me], a.root, mine0, bytes);
    case OpKind::AlltoAll:
      if (a.send == a.recv && n > 1) return directAlltoallInPlace(s, dc, word, what);
      for (int k = 0; k < n; k++) {
        int q = (me + k) % n;
        FLAGCX_CHECK(dc.copyIn(dc.recv[me] + static_cast<size_t>(q) * bytes, q, mine0, bytes));
      }
      return flagcxSuccess;
    default: return directReduce(dc);
  }
}

// Whether a call has a staged rank in it: this one, or a peer whose input
// arrives in slices.
bool hasStagedRank(const ExecState *s, const CollItem &ci) {
  const SmallShm *sm = s->block->shm.get();
  const int p = static_cast<int>(ci.seq & 1);
  bool any = s->mode == ExecMode::Staged;
  for (int q = 0; q < s->nranks && !any; q++)
    any = reinterpret_cast<const DirectDesc *>(sm->data(q, p))->inSlice != 0;
  return any;
}

// The pipeline of a call with a staged rank (shm_stage.h), on every rank
// of it: whose inputs arrive in slices and, on a staged rank, how its
// output goes back.
void setUpStage(ExecState *s, const CollItem &ci, const CollItem &h, const DirectCall &dc,
                uint64_t word, const char *what, DirectStage *st) {
  SmallShm *sm = s->block->shm.get();
  const int p = static_cast<int>(ci.seq & 1);
  const bool staged = s->mode == ExecMode::Staged;
  for (int q = 0; q < dc.n; q++) {
    st->slice[q] = reinterpret_cast<const DirectDesc *>(sm->data(q, p))->inSlice;
    st->chunk = std::max(st->chunk, st->slice[q]);
  }
  st->s = s;
  st->sm = sm;
  st->what = what;
  st->word = word;
  st->n = dc.n;
  st->me = dc.me;
  st->ts = dc.ts;
  const size_t outB = elemsOut(ci, dc.n) * dc.ts;
  if (staged && h.a.recv && ci.a.recv && outB) {
    st->outHost = static_cast<char *>(h.a.recv);
    st->outDev = static_cast<char *>(ci.a.recv);
    st->outBytes = outB;
    st->chunk = std::max(st->chunk, stageSlice(s, outB));
    switch (ci.a.op) {
      case OpKind::AllReduce:
        st->sink = DirectStage::Sink::Writers;
        for (int q = 0; q < dc.n; q++) {
          st->regionLo[q] = dc.lo(q) * dc.ts;
          st->regionHi[q] = dc.hi(q) * dc.ts;
        }
        break;
      case OpKind::Reduce:
      case OpKind::Gather: st->sink = DirectStage::Sink::End; break;
      default: st->sink = DirectStage::Sink::Own;
    }
  }
  st->chunk = std::max<size_t>(st->chunk, kPiece);
}

// One direct call.  `h` is `ci` with the buffers the call works on (a
// staged rank's shareable host copies; `usable` false when it could not
// have them); fallbacks run `ci`.  *took: the call went direct.
flagcxResult_t directCall(ExecState *s, CollItem &ci, CollItem &h, bool usable, bool *took) {
  SmallShm *sm = s->block->shm.get();
  const CollArgs &a = h.a;
  const int n = s->nranks, me = s->rank;
  const int p = static_cast<int>(ci.seq & 1);
  const uint64_t word = ci.seq + 1;
  const size_t ts = dtypeSize(a.dtype);
  const char *what = directWhat(a.op);
  // The rings' tag for this call: a rank that falls back to them below
  // sends frames with it, which its peers must not take for a mismatch.
  s->curTag = collTag(ci.seq, a.op, a.dtype, opIsRooted(a.op) ? a.root : 0, a.count, ci.ordered);
  ci.flight = s->flight.begin(ci.seq, opName(a.op), "shm-direct", a.count * ts, a.dtype,
                              opIsRooted(a.op) ? a.root : -1);
  DirectDesc d = describeBuffers(s, h, sm->oneProcess);
  if (!usable) d.usable = false;
  stageResetProgress(s);  // before the descriptor goes out (shm_stage.cc)
  // This rank's own descriptor may already settle it: a buffer its peers
  // must touch is not shareable (heap memory: torch's CPU tensors), so every
  // rank will decide for the rings from it (step 4).  Then publish it and go
  // without waiting for the peers' (a meeting costs 1-5 us at 16-64 KiB).
  // `reachable` is step 4's test of every rank's descriptor, so the two agree.
  auto reachable = [&](const DirectDesc &dq, int q) {
    return dq.usable && (sm->oneProcess || ((!peersTouchSend(a, q) || dq.sendOk) &&
                                            (!peersTouchRecv(a, q) || dq.recvOk)));
  };
  const bool ringsAnyway = !reachable(d, me);
  if (flagcxResult_t r = blockMeet(s, ci, blockShape(a, true), &d, sizeof d, what, !ringsAnyway);
      r != flagcxSuccess)
    return r;
  if (ringsAnyway) return fallBack(s, ci, true);

  // 4. The same decision on every rank: can every rank reach what it must?
  bool ok = true;
  for (int q = 0; q < n && ok; q++) ok = reachable(*reinterpret_cast<const DirectDesc *>(sm->data(q, p)), q);
  if (!ok) return fallBack(s, ci, true);

  // 5. Map what this rank touches; tell the others whether it could.
  DirectCall dc{&a, n, me, ts, a.count * ts, s->mode == ExecMode::Direct, ci.ordered, s->dev,
                a.redop == flagcxAvg ? flagcxSum : a.redop, 0};
  dc.piece = dc.onDevice ? SIZE_MAX : std::max<size_t>(kPiece / ts, 1);
  bool mapped = mapPeers(s, h, word, dc);
  Phase *ph = sm->lineB(me);
  sm->released(&ph->mapped);
  ph->mapped.store(word * 2 + (mapped ? 1 : 0), std::memory_order_release);
  FLAGCX_CHECK(waitPhase(s, what, word * 2, [](Phase *x) -> auto & { return x->mapped; }));
  for (int q = 0; q < n; q++)
    if (q != me && !(sm->lineB(q)->mapped.load(std::memory_order_acquire) & 1)) mapped = false;
  if (!mapped) {
    // The same on every rank: stop trying on this communicator.
    if (me == 0) INFO(kShm, "direct collectives off on this communicator: a rank could not map its peers' buffers");
    sm->directMin = 0;
    return fallBack(s, ci);
  }

  sm->directCalls++;
  *took = true;
  std::optional<DirectStage> st;  // (made only with a staged rank in the call)
  if (hasStagedRank(s, ci)) {
    setUpStage(s, ci, h, dc, word, what, &st.emplace());
    dc.st = &*st;
  }
  // 6. The work.
  FLAGCX_CHECK(directCopy(s, dc, word, what));
  if (dc.onDevice) FLAGCX_CHECK(s->dev->flush());
  // 7. No peer touches this rank's buffers any more once every rank is done
  // (a staged rank sends its output back meanwhile).
  if (dc.st && s->mode == ExecMode::Staged) return stageFinish(*st);
  sm->released(&ph->done);
  ph->done.store(word, std::memory_order_release);
  return waitPhase(s, what, word, [](Phase *x) -> auto & { return x->done; });
}

}  // namespace

// Host and direct ranks work on the caller's buffers; a staged rank on
// shareable host copies of them, its input and output moved in slices with
// the call (shm_stage.cc; a fallback to the rings stages on its own).
flagcxResult_t ShmDirectPath::run(CollItem &ci) {
  ExecState *s = s_;
  bool took = false;
  if (s->mode != ExecMode::Staged || ci.hostBufs) return directCall(s, ci, ci, true, &took);
  CollItem h = ci;
  bool ok = false;
  FLAGCX_CHECK(stageDirect(s, ci, &h, &ok));
  flagcxResult_t r = directCall(s, ci, h, ok, &took);
  // Taken, the output went back as it became final (stageFinish); not
  // taken, the rings staged on their own.  Either way no slice is pending.
  stageFeedEnd(s);
  return r;
}

}  // namespace flagcx
