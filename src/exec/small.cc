// Small collectives between ranks of one host: one shared block per
// communicator instead of the rings (the small-message path).
//
// A collective of a few KiB over the rings costs a frame per peer and
// direction, tag checks, a schedule and its stage loop: about twice what
// MPICH takes over shared memory for 8 bytes.  Here each rank copies its
// input into its own slot of a block every rank maps, publishes the call's
// sequence number, waits until every peer has published the same number and
// builds its output from the peers' slots: reduced in rank order (so every
// rank computes the same bits) for allreduce, reduce and reducescatter;
// copied for broadcast, allgather, gather, scatter and alltoall; nothing for
// a barrier.  Every rank publishes in every call, even one with nothing to
// give (a broadcast's non-roots), which is what makes slot reuse safe below.
// No allocation, no lock, no message: per peer one cache line carries the
// flag, the call's tag and the first 48 bytes.
//
// Layout: one line {poisoned} for the communicator, then per rank
// (rankStride bytes each):
//   line A  {word, tag}   published by a call that takes the ordinary path
//   line B  {mapped, done}   phases of a direct call (shm_direct.cc)
//   slot 0  {word, tag, shape, data...}   calls with an even sequence number
//   slot 1  {word, tag, shape, data...}   odd
// word = sequence number + 1 (0: never used); tag = collTag() of the call,
// which names op, dtype, root and count, so a peer that called something
// else is caught at once (the same check the transports make on frames);
// shape = what the tag leaves out (the count's high bits, the reduction,
// whether the call is a small or a direct one: blockShape).
//
// Reuse: a rank may overwrite slot p only when every peer has read what it
// put there last time.  A peer has done so once it has published any later
// call (it publishes when a call starts, after the previous one finished),
// so the writer waits until every peer's newest word is past the slot's
// last use.  With calls back to back this holds already (the previous call
// waited for everyone), so the check costs nothing then.
//
// Mismatches across paths: a peer whose call takes the ordinary path (a
// larger count, another op) publishes its word and tag in line A; a rank
// waiting here sees that word reach its own sequence number and fails with
// both tags named; its error frames then release the peer.
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "base/base.h"
#include "exec/small_internal.h"
#include "net/net.h"
#include "rendezvous/rendezvous.h"

namespace flagcx {

namespace {

// The collectives the block carries (AlltoAllv does not: per-peer counts).
constexpr OpKind kBlockOps[] = {OpKind::AllReduce, OpKind::Reduce,        OpKind::Broadcast,
                                OpKind::AllGather, OpKind::Gather,        OpKind::ReduceScatter,
                                OpKind::Scatter,   OpKind::AlltoAll,      OpKind::Barrier};

// Whether FLAGCX_ALGO's list ("allreduce:ring,alltoall:bruck") forces `op`
// ("reduce:" inside "allreduce:" does not count).
bool namesOp(const std::string &list, const char *op) {
  std::string key = std::string(op) + ":";
  for (size_t at = list.find(key); at != std::string::npos; at = list.find(key, at + 1))
    if (at == 0 || !isalpha(static_cast<unsigned char>(list[at - 1]))) return true;
  return false;
}

// "<op> (shared block)" for log lines, made once (not per call: the block's
// calls take well under a microsecond).
const char *blockWhat(OpKind op) {
  static const auto names = [] {
    std::array<std::string, static_cast<size_t>(OpKind::Count)> v;
    for (size_t i = 0; i < v.size(); i++) v[i] = std::string(opName(static_cast<OpKind>(i))) + " (shared block)";
    return v;
  }();
  return names[static_cast<size_t>(op)].c_str();
}

// Bytes the largest contribution to a call puts in a slot (the same on
// every rank, so that every rank takes the same path).
size_t slotNeed(const CollArgs &a, int n) {
  size_t b = a.count * dtypeSize(a.dtype);
  switch (a.op) {
    case OpKind::ReduceScatter:
    case OpKind::Scatter:
    case OpKind::AlltoAll: return b * static_cast<size_t>(n);
    case OpKind::Barrier: return 0;
    default: return b;
  }
}

}  // namespace

void SmallShmDeleter::operator()(SmallShm *p) const {
  if (p->pinnedBy) p->pinnedBy->hostUnregister(p->base);  // before the segment is unmapped
  delete p;
}

flagcxResult_t setupSmall(ExecState *s, bool sameHostShm) {
  // Whether to use a block at all depends only on what every rank shares
  // (the transports' choice is collective); its shape is rank 0's settings,
  // sent with the block's name, so that ranks started with different
  // FLAGCX_SHM_SMALL_BYTES or FLAGCX_ALGO still agree on the layout and on
  // which calls take it.
  // Only facts every rank shares decide whether the ranks meet below; a
  // rank's own mode does not (a communicator of CUDA and host ranks has
  // both: it once left the host ranks waiting at initialisation for a
  // broadcast that the CUDA ranks never joined).  Ranks in host or staged
  // mode (a mixed communicator) use the block for small calls and for direct
  // calls on shareable host memory -- a staged rank's input copied into its
  // slot or its shareable staging copies by its adapter (stageIn,
  // shm_direct.cc) -- ranks all in direct (CUDA IPC) mode only for direct
  // calls on device memory.
  if (!sameHostShm || s->nranks < 2 || s->nranks > kMaxRanks) return flagcxSuccess;
  const int kind = s->mode == ExecMode::Direct ? 2 : 1;
  struct Shape {
    char name[64];
    int64_t maxBytes;
    int64_t directMin;
    uint32_t ops;
  } shape{};
  Bootstrap *bs = s->env.bs;
  auto sm = std::unique_ptr<SmallShm, SmallShmDeleter>(new SmallShm(s->dev));
  if (s->rank == 0) {
    shape.maxBytes = paramInt(Param::SHM_SMALL_BYTES);
    // Direct calls publish their buffers' descriptions in a slot.
    if (shape.maxBytes >= static_cast<int64_t>(sizeof(DirectDesc)))
      shape.directMin = paramInt(Param::SHM_DIRECT_BYTES);
    // An algorithm forced by FLAGCX_ALGO ("allreduce:ring") is what the
    // user asked for: those calls keep their schedule.
    const std::string &forced = paramStr(Param::ALGO);
    for (OpKind op : kBlockOps)
      if (!namesOp(forced, opName(op))) shape.ops |= 1u << static_cast<unsigned>(op);
    if (shape.maxBytes > 0 && kind) {
      sm->layout(static_cast<size_t>(shape.maxBytes), s->nranks);
      std::random_device rd;
      snprintf(shape.name, sizeof(shape.name), "/flagcx-small-%d-%08x", static_cast<int>(getpid()), rd());
      if (Segment::create(shape.name, sm->bytes, &sm->seg) != flagcxSuccess) shape.name[0] = 0;
    }
  }
  FLAGCX_CHECK(bs->bcast(&shape, sizeof(shape), 0));
  if (!shape.name[0]) return flagcxSuccess;  // off (FLAGCX_SHM_SMALL_BYTES=0 at rank 0) or failed
  sm->layout(static_cast<size_t>(shape.maxBytes), s->nranks);
  sm->ops = shape.ops;
  sm->directMin = static_cast<size_t>(shape.directMin);
  if (s->rank != 0 && kind) (void)Segment::open(shape.name, sm->bytes, &sm->seg);  // failure: ok = 0 below
  int ok = sm->seg ? kind : 0;
  if (ok) sm->base = sm->seg->base();
  std::vector<int> oks(static_cast<size_t>(s->nranks));
  oks[static_cast<size_t>(s->rank)] = ok;
  FLAGCX_CHECK(bs->allgather(oks.data(), sizeof(int)));
  if (s->rank == 0) sm->seg->unlink();  // every rank has mapped it (or failed)
  for (int q = 0; q < s->nranks; q++) sm->oneProcess = sm->oneProcess && s->sameProcess(q);
  for (int v : oks)
    if (!v || v != oks[0]) {
      INFO(kShm, "rank %d: a rank could not map the block for small collectives, or the ranks "
           "do not all run in host or staged mode (or all in direct mode): they take the rings",
           s->rank);
      return flagcxSuccess;
    }
  if (kind == 2 && !sm->directMin) return flagcxSuccess;  // nothing would use it
  INFO(kShm, "rank %d: collectives up to %zu bytes per rank's share through one shared block "
       "(FLAGCX_SHM_SMALL_BYTES); from %zu bytes straight between the ranks' buffers where they "
       "are shareable (FLAGCX_SHM_DIRECT_BYTES, 0: never)", s->rank, sm->maxBytes, sm->directMin);
  // A staged rank's adapter copies into and out of the block: page-locked
  // once, so those copies run at the pinned rate (unlocked: slower, still right).
  if (s->mode == ExecMode::Staged && s->dev->hostRegister(sm->base, sm->bytes) == flagcxSuccess)
    sm->pinnedBy = s->dev;
  s->block = std::make_unique<BlockPath>(s, std::move(sm));
  // Only paths that can take a call here are offered calls; a staged
  // rank's block calls copy from and to its device, so they are not quick.
  if (s->mode != ExecMode::Direct) {
    s->oneHost.push_back(s->block.get());
    s->blockTakesCalls = s->mode == ExecMode::Host;
  }
  if (s->block->shm->directMin) {
    s->shmDirect = std::make_unique<ShmDirectPath>(s);
    s->oneHost.push_back(s->shmDirect.get());
  }
  return flagcxSuccess;
}

size_t smallMaxBytes(const ExecState *s) { return s->block ? s->block->shm->maxBytes : 0; }
uint64_t smallCalls(const ExecState *s) { return s->block ? s->block->shm->calls : 0; }

bool blockCarries(const ExecState *s, const CollArgs &a) {
  const SmallShm *sm = s->block->shm.get();
  if (!(sm->ops >> static_cast<unsigned>(a.op) & 1u) || a.op == OpKind::Barrier) return false;
  if (a.count == 0 || dtypeSize(a.dtype) == 0) return false;
  if (opReduces(a.op) && (a.redop < flagcxSum || a.redop > flagcxAvg)) return false;
  return !opIsRooted(a.op) || (a.root >= 0 && a.root < s->nranks);
}

bool BlockPath::fits(const CollItem &ci) const {
  const ExecState *s = s_;
  const SmallShm *sm = shm.get();
  const CollArgs &a = ci.a;
  if (a.op == OpKind::Barrier) return sm->ops >> static_cast<unsigned>(a.op) & 1u;
  if (!blockCarries(s, a)) return false;
  return a.count <= sm->maxBytes / dtypeSize(a.dtype) && slotNeed(a, s->nranks) <= sm->maxBytes;
}

namespace {
uint64_t blockTag(const CollItem &ci) {
  const CollArgs &a = ci.a;
  return collTag(ci.seq, a.op, a.dtype, opIsRooted(a.op) ? a.root : -1,
                 a.op == OpKind::Barrier ? 0 : a.count, ci.ordered);
}
}  // namespace

std::string rankSetText(uint32_t ranks) {
  std::string out;
  int count = 0;
  for (int q = 0; q < 32; q++)
    if (ranks >> q & 1u) out += (count++ ? ", " : "") + std::to_string(q);
  return (count == 1 ? "rank " : "ranks ") + out;
}

flagcxResult_t blockMismatch(ExecState *s, int peer, uint64_t mine, uint64_t theirs) {
  s->block->note = {mine, theirs};
  if (theirs)
    WARN(kColl, "rank %d: mismatched calls: this rank called %s, rank %d called %s", s->rank,
         tagText(mine).c_str(), peer, tagText(theirs).c_str());
  else
    WARN(kColl, "rank %d: mismatched calls: this rank called %s, rank %d has gone past it "
         "(it called something else there)", s->rank, tagText(mine).c_str(), peer);
  return flagcxInvalidUsage;
}

// Everything that ends a call through the block early: a peer that gave up
// (its error frame; sweepPeers), a message waiting on a ring that no call
// here will receive (a peer called something else earlier: a broadcast with
// another root, say, which completed on both sides and would have been
// caught by the rings' next receive), or the block's poison flag.
flagcxResult_t blockCheckPeers(ExecState *s, const char *what) {
  FLAGCX_CHECK(sweepPeers(s, what));
  // (A peer that has finished this call may already be sending for a later
  // one, and after a direct call's fallback (shm_direct.cc) one may send for
  // this call on the rings, under its tag: only a collective's message of an
  // earlier call, or of this call under another tag, is wrong.)
  for (auto &c : *s->env.conns)
    if (c)
      if (uint64_t t = c->inboundTag();
          isCollTag(t) && t != s->curTag && !laterCall(t, s->curTag))
        return blockMismatch(s, c->peer(), s->curTag, t);
  if (s->block->shm->poisoned()->load(std::memory_order_acquire)) {
    WARN(kColl, "rank %d: %s: a rank of this communicator gave up on an earlier operation",
         s->rank, what);
    return flagcxRemoteError;
  }
  return flagcxSuccess;
}

void smallPoison(ExecState *s) {
  if (s->block) s->block->shm->poisoned()->store(1, std::memory_order_release);
}

void BlockPath::passOver(const CollItem &ci) {
  ExecState *s = s_;
  SmallShm *sm = shm.get();
  Pub *a = sm->lineA(s->rank);
  // Seqlock order for readers: word, tag, word.
  a->word.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  a->tag.store(collTag(ci.seq, ci.a.op, ci.a.dtype, opIsRooted(ci.a.op) ? ci.a.root : -1,
                       ci.a.count, ci.ordered),
               std::memory_order_relaxed);
  sm->released(&a->word);
  a->word.store(ci.seq + 1, std::memory_order_release);
  ringsUsed = true;
}

uint64_t blockShape(const CollArgs &a, bool direct) {
  const uint64_t red = opReduces(a.op) ? static_cast<uint64_t>(a.redop) & 0x7f : 0x7f;
  const uint64_t count = a.op == OpKind::Barrier ? 0 : a.count & ((1ull << 56) - 1);
  return (direct ? 1ull << 63 : 0) | red << 56 | count;
}

namespace {
flagcxResult_t shapeMismatch(ExecState *s, int peer, uint64_t mine, uint64_t theirs) {
  s->block->note = {s->curTag, s->curTag};
  auto say = [](uint64_t x) {
    char b[96];
    snprintf(b, sizeof b, "count %llu, reduction %d, %s path",
             static_cast<unsigned long long>(x & ((1ull << 56) - 1)), static_cast<int>(x >> 56 & 0x7f),
             x >> 63 ? "direct" : "small-block");
    return std::string(b);
  };
  WARN(kColl, "rank %d: mismatched calls: this rank called %s (%s), rank %d the same with %s",
       s->rank, tagText(s->curTag).c_str(), say(mine).c_str(), peer, say(theirs).c_str());
  return flagcxInvalidUsage;
}
}  // namespace

flagcxResult_t blockMeet(ExecState *s, const CollItem &ci, uint64_t shape, const void *src,
                         size_t give, const char *what, bool waitForPeers, bool fromDevice) {
  SmallShm *sm = s->block->shm.get();
  const int n = s->nranks, me = s->rank;
  const int p = static_cast<int>(ci.seq & 1);
  const uint64_t word = ci.seq + 1, tag = s->curTag;

  // 0. A rank gave up earlier: fail now, naming it (blockCheckPeers).
  if (sm->poisoned()->load(std::memory_order_acquire)) FLAGCX_CHECK(blockCheckPeers(s, what));

  // 1. Every peer has read what this rank last put in slot p.
  const uint64_t last = sm->lastUse[p];  // 0: never used
  uint32_t missing = 0;
  flagcxResult_t r = waitUntil(s, what, [&] {
    for (int q = 0; q < n && last; q++) {
      if (q == me || sm->seen[static_cast<size_t>(q)] > last) continue;
      sm->seen[static_cast<size_t>(q)] = sm->newest(q);
      missing = 1u << q;
      if (sm->seen[static_cast<size_t>(q)] <= last) return flagcxInProgress;
    }
    return flagcxSuccess;
  }, &missing);
  if (r != flagcxSuccess) return r;

  // 2. Publish: data, tag, then the word (release).
  Pub *mine = sm->slot(me, p);
  if (give && fromDevice) FLAGCX_CHECK(stagedCopy(s, sm->data(me, p), src, give));
  else if (give) copyBytes(sm->data(me, p), src, give);
  mine->tag.store(tag, std::memory_order_relaxed);
  mine->shape.store(shape, std::memory_order_relaxed);
  sm->released(&mine->word);
  mine->word.store(word, std::memory_order_release);
  sm->lastUse[p] = word;
  if (!waitForPeers) return flagcxSuccess;

  // 3. Every peer's slot p holds this call.
  unsigned polls = 0;
  uint32_t arrived = 1u << me;
  const uint32_t everyone = (1u << n) - 1;  // n <= kMaxRanks
  r = waitUntil(s, what, [&]() -> flagcxResult_t {
    polls++;
    for (int q = 0; q < n; q++) {
      if (arrived & (1u << q)) continue;
      Pub *ps = sm->slot(q, p);
      uint64_t w = ps->word.load(std::memory_order_acquire);
      if (w == word) {
        sm->acquired(&ps->word);
        uint64_t t = ps->tag.load(std::memory_order_relaxed);
        if (t != tag) return blockMismatch(s, q, tag, t);
        uint64_t x = ps->shape.load(std::memory_order_relaxed);
        if (x != shape) return shapeMismatch(s, q, shape, x);
        arrived |= 1u << q;
        if (sm->seen[static_cast<size_t>(q)] < word) sm->seen[static_cast<size_t>(q)] = word;
        continue;
      }
      if (polls % 16 == 0) {
        // A peer on the ordinary path at this call or beyond called
        // something else here.
        Pub *pa = sm->lineA(q);
        uint64_t w1 = pa->word.load(std::memory_order_acquire);
        // ... unless it published this call in its slot between the two
        // loads, finished it and went on to an ordinary call: its slot word
        // was written before line A, so after the acquire above it shows.
        if (w1 >= word && ps->word.load(std::memory_order_acquire) == word)
          continue;  // counted on the next poll, its tag checked there
        if (w1 >= word) {
          uint64_t t = pa->tag.load(std::memory_order_relaxed);
          std::atomic_thread_fence(std::memory_order_acquire);
          uint64_t w2 = pa->word.load(std::memory_order_relaxed);
          return blockMismatch(s, q, tag, w1 == word && w2 == w1 ? t : 0);
        }
      }
    }
    missing = everyone & ~arrived;
    return arrived == everyone ? flagcxSuccess : flagcxInProgress;
  }, &missing);
  if (r != flagcxSuccess) return r;
  // Every peer has now finished its earlier calls, so whatever they sent on
  // the rings has landed: when this rank used the rings since its last look,
  // a message still waiting there means a peer called something else.
  if (s->block->ringsUsed) {
    FLAGCX_CHECK(blockCheckPeers(s, what));
    s->block->ringsUsed = false;
  }
  return flagcxSuccess;
}

namespace {

// Step 4 of a block call: this rank's output from the slots, into `out`
// (every slot is a copy: in-place calls need no care).  Reductions run in
// rank order: the same bits on every rank; a deterministic call's are one
// fold over the slots (the narrow floats accumulate in float32 and round
// once, Avg divides inside).
flagcxResult_t blockOutput(ExecState *s, const CollItem &ci, char *out) {
  SmallShm *sm = s->block->shm.get();
  const CollArgs &a = ci.a;
  const int n = s->nranks, me = s->rank;
  const int p = static_cast<int>(ci.seq & 1);
  const size_t bytes = a.count * dtypeSize(a.dtype);  // one rank's share
  auto reduceAll = [&](char *dst, size_t off) -> flagcxResult_t {
    if (ci.ordered) {
      std::array<const void *, kMaxRanks> srcs;
      for (int q = 0; q < n; q++) srcs[static_cast<size_t>(q)] = sm->data(q, p) + off;
      return hostFold(dst, srcs.data(), n, a.count, a.dtype, a.redop);
    }
    flagcxRedOp_t op = a.redop == flagcxAvg ? flagcxSum : a.redop;
    if (n == 1) {
      copyBytes(dst, sm->data(0, p) + off, bytes);
    } else {
      FLAGCX_CHECK(hostReduce(dst, sm->data(0, p) + off, sm->data(1, p) + off, a.count, a.dtype, op));
      for (int q = 2; q < n; q++)
        FLAGCX_CHECK(hostReduce(dst, dst, sm->data(q, p) + off, a.count, a.dtype, op));
    }
    if (a.redop == flagcxAvg) FLAGCX_CHECK(hostDivide(dst, dst, a.count, a.dtype, static_cast<uint64_t>(n)));
    return flagcxSuccess;
  };
  const size_t mine0 = static_cast<size_t>(me) * bytes;
  switch (a.op) {
    case OpKind::AllReduce: return reduceAll(out, 0);
    case OpKind::Reduce: return me == a.root ? reduceAll(out, 0) : flagcxSuccess;
    case OpKind::ReduceScatter: return reduceAll(out, mine0);
    case OpKind::Broadcast:
      copyBytes(out, sm->data(a.root, p), bytes);
      return flagcxSuccess;
    case OpKind::Scatter: copyBytes(out, sm->data(a.root, p) + mine0, bytes); return flagcxSuccess;
    case OpKind::Gather:
      if (me != a.root) return flagcxSuccess;
      [[fallthrough]];
    case OpKind::AllGather:
      for (int q = 0; q < n; q++) copyBytes(out + static_cast<size_t>(q) * bytes, sm->data(q, p), bytes);
      return flagcxSuccess;
    case OpKind::AlltoAll:
      for (int q = 0; q < n; q++)
        copyBytes(out + static_cast<size_t>(q) * bytes, sm->data(q, p) + mine0, bytes);
      return flagcxSuccess;
    default: return flagcxInternalError;
  }
}

}  // namespace

flagcxResult_t BlockPath::run(CollItem &ci) {
  ExecState *s = s_;
  SmallShm *sm = shm.get();
  const CollArgs &a = ci.a;
  const int n = s->nranks, me = s->rank;
  const size_t ts = dtypeSize(a.dtype);
  const size_t bytes = a.op == OpKind::Barrier ? 0 : a.count * ts;  // one rank's share
  // What this rank puts in its slot: its input, or nothing (a broadcast's
  // or scatter's non-roots).
  const bool rootOnly = a.op == OpKind::Broadcast || a.op == OpKind::Scatter;
  const size_t give = rootOnly && me != a.root ? 0 : slotNeed(a, n);
  // A staged rank's adapter copies its input from the device straight into
  // its slot, and its output back from host memory.
  const bool staged = s->mode == ExecMode::Staged && !ci.hostBufs;
  s->curTag = blockTag(ci);
  ci.flight = s->flight.begin(ci.seq, opName(a.op), "shm-small", bytes, a.dtype,
                              opIsRooted(a.op) ? a.root : -1);
  sm->calls++;
  if (flagcxResult_t r = blockMeet(s, ci, blockShape(a, false), a.send, give, blockWhat(a.op), true, staged);
      r != flagcxSuccess)
    return r;
  if (!bytes) return flagcxSuccess;
  if (!staged) return blockOutput(s, ci, static_cast<char *>(a.recv));
  // A non-root rank's reduce and gather output is not the caller's to see.
  if ((a.op == OpKind::Reduce || a.op == OpKind::Gather) && me != a.root) return flagcxSuccess;
  const size_t outB = elemsOut(ci, n) * ts;
  char *host = stagedHostOut(s, outB);
  if (!host) return flagcxSystemError;
  FLAGCX_CHECK(blockOutput(s, ci, host));
  return stagedCopy(s, a.recv, host, outB);
}

}  // namespace flagcx
