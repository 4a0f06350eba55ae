// A seeded random mix of every collective and of grouped send/recv, run by
// real forked ranks at 2, 3 and 5 ranks, over shm and over sockets, on two
// communicators at once (the second numbers the ranks backwards).  Each call
// gets fresh buffers (heap, flagcxMemAlloc, or a per-rank, per-buffer mix of
// the two), possibly shifted by a few elements, filled with values that
// depend on the seed, the call, the rank and the index.  Sizes run from 0
// and 1 element through the small-message block (<= 4 KiB), the sizes where
// the paths switch, 64 KiB - 1 MiB, and now and then up to 8 MiB.  Calls go
// one at a time or a few queued on the streams (or inside one group) before
// a synchronize; then every rank checks every element of what it received,
// the guard bytes around each buffer, and that an out-of-place input is
// untouched.  All ranks build the same sequence from the seed.
//
// STRESS_SEED (default kDefaultSeed) picks another sequence, STRESS_CALLS
// (default 150, 60 under TSan) its length per configuration.  To shrink a failure:
// STRESS_ONLY=3,17 issues only those calls of the sequence, STRESS_VERBOSE=1
// has rank 0 print each call as it is issued, STRESS_TIMEOUT (default 30)
// sets FLAGCX_TIMEOUT; --gtest_filter picks the configuration (e.g.
// '*sockets_5ranks').
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/common/harness.h"
#include "tests/common/inspect.h"
#include "tools/perf/data.h"

namespace {

constexpr unsigned long long kDefaultSeed = 20240917;
// Under ThreadSanitizer (CI's --sanitize run) a shorter sequence: the full
// one takes 2.5 min there.
constexpr int kDefaultCalls = harness::kThreadSanitizer ? 60 : 150;

enum Op { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, Gather, Scatter, AlltoAll,
          AlltoAllv, SendRecv, Barrier, kOps };
const char *const kOpName[kOps] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                   "reduce", "gather", "scatter", "alltoall", "alltoallv",
                                   "sendrecv", "barrier"};
bool reduces(Op op) { return op == AllReduce || op == ReduceScatter || op == Reduce; }
bool rooted(Op op) { return op == Broadcast || op == Reduce || op == Gather || op == Scatter; }
bool hasInPlace(Op op) { return op < AlltoAllv; }
// Ops whose count is per block of an n-block buffer.
bool blocked(Op op) { return op == AllGather || op == ReduceScatter || op == Gather || op == Scatter || op == AlltoAll; }

const flagcxDataType_t kTypes[] = {flagcxInt32, flagcxFloat32, flagcxFloat64,
                                   flagcxInt8,  flagcxUint8,   flagcxFloat16};
const char *typeName(flagcxDataType_t dt) {
  static const char *const kNames[] = {"int8",    "uint8",   "int32",   "uint32",  "int64",
                                       "uint64",  "float16", "float32", "float64", "bfloat16"};
  return kNames[dt];
}
const flagcxRedOp_t kRedOps[] = {flagcxSum, flagcxMax, flagcxMin, flagcxProd};
const char *const kRedName[] = {"sum", "prod", "max", "min"};
const char *const kMemName[] = {"heap", "memalloc", "mixed"};

uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 33)) * 0xff51afd7ed558ccdull;
  x = (x ^ (x >> 33)) * 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// Element i of rank r's input.  Small integers that every tested type holds
// exactly, so that every result is exact in whatever order the library
// reduces: sums of [-8, 8] (unsigned [0, 16]), products of {-1, 1, 2}
// ({1, 2}), [-100, 100] ([0, 200]) for max, min and the data-moving ops.
// untouched(dt) lies outside every range: it marks bytes nobody has written.
struct Gen {
  uint64_t salt;
  int64_t lo = -100;
  uint64_t span = 201;
  bool prod = false;
  Gen(uint64_t s, flagcxDataType_t dt, flagcxRedOp_t op, bool reducing) : salt(s) {
    if (reducing && op == flagcxSum) lo = -8, span = 17;
    if (reducing && op == flagcxProd) lo = -1, span = 4, prod = true;  // 0 becomes 1
    if (dt == flagcxUint8) lo = prod ? 1 : 0, span = prod ? 2 : span;
  }
  int64_t operator()(int rank, size_t i) const {
    uint64_t h = mix(salt + static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull + i);
    int64_t v = lo + static_cast<int64_t>(((h >> 32) * span) >> 32);
    return prod && v == 0 ? 1 : v;
  }
};
int64_t untouched(flagcxDataType_t dt) { return dt == flagcxUint8 ? 250 : 123; }

int64_t combine(flagcxRedOp_t op, int64_t a, int64_t b) {
  return op == flagcxProd ? a * b : op == flagcxMax ? std::max(a, b) : op == flagcxMin ? std::min(a, b) : a + b;
}

struct Edge { int src, dst; size_t count; };
struct Call {
  int idx = 0;
  Op op = Barrier;
  int comm = 0;  // 0: the first communicator, 1: the second (ranks backwards)
  flagcxDataType_t dt = flagcxInt32;
  flagcxRedOp_t red = flagcxSum;
  size_t count = 0;  // the API's count
  int root = 0;
  bool inplace = false;
  int mem = 0;       // index into kMemName
  size_t shift = 0;  // elements between an allocation's start and the buffer
  uint64_t salt = 0;
  std::vector<size_t> sc, sd, rd;  // alltoallv, [sender*n+receiver]; rd is [receiver*n+sender]
  std::vector<Edge> edges;         // sendrecv
};
struct Batch { bool onStream = true, grouped = false; std::vector<Call> calls; };

std::string describe(const Call &c, const Batch &b) {
  char s[320];
  snprintf(s, sizeof s, "call %d %s comm %d %s%s%s count %zu (%zu B) root %d in-place %d mem %s "
           "shift %zu %s%s", c.idx, kOpName[c.op], c.comm, typeName(c.dt), reduces(c.op) ? "/" : "",
           reduces(c.op) ? kRedName[c.red] : "", c.count, c.count * getFlagcxDataTypeSize(c.dt),
           rooted(c.op) ? c.root : -1, c.inplace, kMemName[c.mem], c.shift,
           b.onStream ? "stream" : "null-stream", b.grouped ? " grouped" : "");
  std::string out = s;
  if (!c.sc.empty()) {  // the alltoallv count matrix, one row per sender
    size_t un = 1;
    while (un * un < c.sc.size()) un++;
    out += " counts [";
    for (size_t k = 0; k < c.sc.size(); k++)
      out += std::to_string(c.sc[k]) + (k + 1 == c.sc.size() ? "]" : (k + 1) % un ? " " : "; ");
  }
  for (const Edge &e : c.edges)
    out += " [" + std::to_string(e.src) + "->" + std::to_string(e.dst) + " x" + std::to_string(e.count) + "]";
  return out;
}

// Elements of one rank's share: 0, 1, small (the block), the sizes where the
// paths switch, mid, and rarely large (>= 1 MiB: split over the blocks).
size_t pickCount(std::mt19937_64 &g, size_t ts, int blocks) {
  static const size_t kEdges[] = {4096, 4096 + 8, 8192 - 8, 8192, 65536 - 8, 65536, 65536 + 8, 524288 + 8};
  unsigned k = g() % 100;
  size_t bytes;
  if (k < 5) return 0;
  if (k < 12) return 1;
  if (k < 55) bytes = ts * (1 + g() % (4096 / ts));
  else if (k < 67) bytes = kEdges[g() % 8];
  else if (k < 97) bytes = 65536 + g() % (1 << 20);
  else bytes = (1 << 20) + g() % (7 << 20);
  size_t count = std::max<size_t>(1, bytes / ts);
  return bytes >= (1 << 20) ? std::max<size_t>(1, count / static_cast<size_t>(blocks)) : count;
}

std::vector<Batch> makePlan(unsigned long long seed, int n, int ncalls) {
  std::mt19937_64 g(mix(seed));
  const size_t un = static_cast<size_t>(n);
  std::vector<Batch> plan;
  for (int idx = 0; idx < ncalls;) {
    Batch b;
    int size = g() % 2 ? 1 : 2 + static_cast<int>(g() % 3);
    b.onStream = g() % 5 != 0;
    b.grouped = size > 1 && g() % 6 == 0;
    int groupComm = static_cast<int>(g() % 2);
    for (int k = 0; k < size && idx < ncalls; k++) {
      Call c;
      c.idx = idx++;
      do c.op = static_cast<Op>(g() % kOps);
      while (b.grouped && c.op == Barrier);
      c.comm = b.grouped ? groupComm : static_cast<int>(g() % 2);
      c.dt = kTypes[g() % 6];
      c.red = kRedOps[g() % 4];
      size_t ts = getFlagcxDataTypeSize(c.dt);
      c.count = c.op == Barrier ? 0 : pickCount(g, ts, blocked(c.op) ? n : 1);
      c.root = static_cast<int>(g() % un);
      c.inplace = hasInPlace(c.op) && g() % 5 < 2;
      c.mem = static_cast<int>(g() % 3);
      static const size_t kShifts[] = {0, 0, 1, 3};
      c.shift = kShifts[g() % 4];
      c.salt = g();
      if (c.op == AlltoAllv) {
        // Random counts per pair (some 0), blocks laid out in a random
        // order with gaps of up to 2 elements on both sides.
        size_t per = std::max<size_t>(1, c.count / un);
        c.sc.assign(un * un, 0), c.sd.assign(un * un, 0), c.rd.assign(un * un, 0);
        for (size_t &v : c.sc) v = g() % 4 == 0 ? 0 : g() % (per + 1);
        // Ranks with nothing to send or receive while others exchange data
        // come up on purpose: the first library bug this test found (such a
        // rank skipped the call; the others waited for its empty messages).
        std::vector<size_t> order(un);
        for (size_t p = 0; p < un; p++)
          for (int side = 0; side < 2; side++) {
            for (size_t q = 0; q < un; q++) order[q] = q;
            std::shuffle(order.begin(), order.end(), g);
            size_t off = 0;
            for (size_t q : order) {
              (side ? c.rd : c.sd)[p * un + q] = off;
              off += (side ? c.sc[q * un + p] : c.sc[p * un + q]) + g() % 3;
            }
          }
      }
      if (c.op == SendRecv) {  // 1..2n messages between random pairs, self and repeats included
        size_t ne = 1 + g() % (2 * un);
        for (size_t e = 0; e < ne; e++) {
          Edge ed{static_cast<int>(g() % un), static_cast<int>(g() % un), 0};
          ed.count = std::max<size_t>(g() % 8 == 0 ? 0 : 1, pickCount(g, ts, static_cast<int>(ne)) / 2);
          c.edges.push_back(ed);
        }
      }
      b.calls.push_back(std::move(c));
    }
    plan.push_back(std::move(b));
  }
  return plan;
}

// A buffer with guard bytes before (shift elements) and after it.
constexpr size_t kGuard = 64;
uint8_t guardByte(size_t k) { return static_cast<uint8_t>(0xA5 ^ (k * 29)); }
struct Buf {
  char *base = nullptr;
  bool shared = false;  // from flagcxMemAlloc, else from malloc
  size_t pre = 0, bytes = 0;
  char *data() const { return base + pre; }
};
bool allocBuf(Buf *b, size_t bytes, size_t pre, bool shared) {
  b->pre = pre, b->bytes = bytes, b->shared = shared;
  void *p = nullptr;
  if (shared ? flagcxMemAlloc(&p, pre + bytes + kGuard) != flagcxSuccess : !(p = malloc(pre + bytes + kGuard)))
    return false;
  b->base = static_cast<char *>(p);
  for (size_t k = 0; k < pre; k++) b->base[k] = static_cast<char>(guardByte(k + 7));
  for (size_t k = 0; k < kGuard; k++) b->base[pre + bytes + k] = static_cast<char>(guardByte(k));
  return true;
}
// "" when both guards are intact, else which byte changed.
std::string brokenGuard(const Buf &b) {
  for (size_t k = 0; k < b.pre; k++)
    if (static_cast<uint8_t>(b.base[k]) != guardByte(k + 7))
      return "guard byte " + std::to_string(b.pre - k) + " before the buffer changed";
  for (size_t k = 0; k < kGuard; k++)
    if (static_cast<uint8_t>(b.base[b.pre + b.bytes + k]) != guardByte(k))
      return "guard byte " + std::to_string(k) + " after the buffer changed";
  return "";
}
void freeBuf(Buf *b) { b->shared ? (void)flagcxMemFree(b->base) : free(b->base); }

// Typed loops over a function of the element index (tools/perf/data.h's
// conversions, so float16 too).
template <class T> struct FillWith {
  template <class F> static int call(char *p, size_t n, const F &f) {
    T *t = reinterpret_cast<T *>(p);
    for (size_t i = 0; i < n; i++) t[i] = perf::fromDouble<T>(static_cast<double>(f(i)));
    return 0;
  }
};
struct Mismatch { long first = -1; size_t wrong = 0; double got = 0, want = 0; };
template <class T> struct CompareWith {
  template <class F> static int call(const char *p, size_t n, const F &f, Mismatch *m) {
    const T *t = reinterpret_cast<const T *>(p);
    for (size_t i = 0; i < n; i++) {
      double want = perf::toDouble<T>(perf::fromDouble<T>(static_cast<double>(f(i))));
      double got = perf::toDouble<T>(t[i]);
      if (got == want) continue;
      if (m->first < 0) m->first = static_cast<long>(i), m->got = got, m->want = want;
      m->wrong++;
    }
    return 0;
  }
};

// One call as this rank issued it.
struct Live {
  std::vector<Buf> bufs;
  char *in = nullptr, *out = nullptr;
  size_t inN = 0, outN = 0;
  bool inChecked = false;              // out of place: the input must come back unchanged
  std::vector<size_t> sc, sd, rc, rd;  // alltoallv: this rank's arguments
  std::vector<int> edgeBuf;            // sendrecv: this rank's buffer per message (-1: none)
};
struct Ctx {
  int rank, n;
  flagcxComm_t comm[2];
  flagcxStream_t stream[2];  // one per communicator
  int failures = 0;
};
int commRank(const Call &c, const Ctx &x) { return c.comm ? x.n - 1 - x.rank : x.rank; }

// Allocates and fills this rank's buffers of call c, and issues it.
flagcxResult_t issue(const Call &c, const Batch &b, Ctx &x, Live *l) {
  const int me = commRank(c, x);
  const size_t un = static_cast<size_t>(x.n), um = static_cast<size_t>(me), cnt = c.count;
  const size_t ts = getFlagcxDataTypeSize(c.dt);
  flagcxComm_t comm = x.comm[c.comm];
  flagcxStream_t st = b.onStream ? x.stream[c.comm] : nullptr;
  Gen gen(c.salt, c.dt, c.red, reduces(c.op));
  auto alloc = [&](size_t elems) {
    bool shared = c.mem == 1 || (c.mem == 2 && (mix(c.salt ^ (um * 16 + l->bufs.size())) & 1));
    Buf buf;
    if (!allocBuf(&buf, elems * ts, c.shift * ts, shared)) return static_cast<char *>(nullptr);
    l->bufs.push_back(buf);
    return buf.data();
  };
  auto fill = [&](char *p, size_t elems, auto f) { perf::dispatch<FillWith>(c.dt, p, elems, f); };
  auto mine = [&](size_t i) { return gen(me, i); };
  auto blank = [&](size_t) { return untouched(c.dt); };
  size_t inN = cnt, outN = cnt;
  if (c.op == AllGather || c.op == Gather) outN = cnt * un;
  if (c.op == ReduceScatter || c.op == Scatter) inN = cnt * un;
  if (c.op == AlltoAll) inN = outN = cnt * un;
  if (c.op == AlltoAllv) {
    inN = outN = 0;
    for (size_t p = 0; p < un; p++) {
      l->sc.push_back(c.sc[um * un + p]), l->sd.push_back(c.sd[um * un + p]);
      l->rc.push_back(c.sc[p * un + um]), l->rd.push_back(c.rd[um * un + p]);
      inN = std::max(inN, l->sd[p] + l->sc[p]);
      outN = std::max(outN, l->rd[p] + l->rc[p]);
    }
  }
  l->inN = inN, l->outN = outN;
  if (c.op == SendRecv) {
    for (size_t e = 0; e < c.edges.size(); e++) {
      const Edge &ed = c.edges[e];
      l->edgeBuf.push_back(-1);
      if (ed.src != me && ed.dst != me) continue;
      // A message to itself gets two buffers, the receive's second.
      char *p = alloc(ed.count);
      if (!p || (ed.src == me && ed.dst == me && !alloc(ed.count))) return flagcxSystemError;
      Gen ge(c.salt ^ mix(e + 1), c.dt, c.red, false);
      if (ed.src == me) fill(p, ed.count, [&](size_t i) { return ge(me, i); });
      fill(l->bufs.back().data(), ed.dst == me ? ed.count : 0, blank);
      l->edgeBuf.back() = static_cast<int>(l->bufs.size()) - 1 - (ed.src == me && ed.dst == me);
    }
  } else if (c.op == Barrier) {
  } else if (c.inplace && !((c.op == Gather || c.op == Scatter) && me != c.root)) {
    // One buffer, the input where the API wants it.
    char *p = l->in = l->out = alloc(std::max(inN, outN));
    if (!p) return flagcxSystemError;
    if (c.op == AllGather || c.op == Gather) {
      fill(p, outN, blank);
      fill(l->in = p + um * cnt * ts, cnt, mine);
    } else {
      if (c.op == Broadcast && me != c.root) fill(p, inN, blank);
      else fill(p, inN, mine);
      if (c.op == ReduceScatter || c.op == Scatter) l->out = p + um * cnt * ts;
    }
  } else {
    l->in = alloc(inN);
    l->out = alloc(outN);
    if (!l->in || !l->out) return flagcxSystemError;
    l->inChecked = true;
    fill(l->in, inN, mine);
    fill(l->out, outN, blank);
  }
  switch (c.op) {
    case AllReduce: return flagcxAllReduce(l->in, l->out, cnt, c.dt, c.red, comm, st);
    case Reduce: return flagcxReduce(l->in, l->out, cnt, c.dt, c.red, c.root, comm, st);
    case Broadcast: return flagcxBroadcast(l->in, l->out, cnt, c.dt, c.root, comm, st);
    case AllGather: return flagcxAllGather(l->in, l->out, cnt, c.dt, comm, st);
    case Gather: return flagcxGather(l->in, l->out, cnt, c.dt, c.root, comm, st);
    case ReduceScatter: return flagcxReduceScatter(l->in, l->out, cnt, c.dt, c.red, comm, st);
    case Scatter: return flagcxScatter(l->in, l->out, cnt, c.dt, c.root, comm, st);
    case AlltoAll: return flagcxAlltoAll(l->in, l->out, cnt, c.dt, comm, st);
    case AlltoAllv:
      return flagcxAlltoAllv(l->in, l->sc.data(), l->sd.data(), l->out, l->rc.data(), l->rd.data(),
                             c.dt, comm, st);
    case Barrier: return flagcxBarrier(comm, st);
    default: break;
  }
  flagcxResult_t r = flagcxGroupStart(comm);
  // Half of the ranks post their receives first, the others their sends.
  for (int pass = 0; pass < 2; pass++) {
    bool sends = (pass == 0) == ((me + c.idx) % 2 == 0);
    for (size_t e = 0; e < c.edges.size() && r == flagcxSuccess; e++) {
      const Edge &ed = c.edges[e];
      size_t k = static_cast<size_t>(l->edgeBuf[e]);
      if (sends && ed.src == me) r = flagcxSend(l->bufs[k].data(), ed.count, c.dt, ed.dst, comm, st);
      if (!sends && ed.dst == me)
        r = flagcxRecv(l->bufs[k + (ed.src == me)].data(), ed.count, c.dt, ed.src, comm, st);
    }
  }
  flagcxResult_t r2 = flagcxGroupEnd(comm);
  return r != flagcxSuccess ? r : r2;
}

// Checks this rank's results of call c; reports each wrong region.
void verify(const Call &c, const Batch &b, Ctx &x, const Live &l) {
  const int me = commRank(c, x), n = x.n;
  const size_t un = static_cast<size_t>(n), um = static_cast<size_t>(me), cnt = c.count;
  const size_t ts = getFlagcxDataTypeSize(c.dt);
  Gen gen(c.salt, c.dt, c.red, reduces(c.op));
  auto all = [&](size_t i) {
    int64_t v = gen(0, i);
    for (int r = 1; r < n; r++) v = combine(c.red, v, gen(r, i));
    return v;
  };
  auto check = [&](const std::string &what, const char *p, size_t elems, auto want) {
    Mismatch m;
    perf::dispatch<CompareWith>(c.dt, p, elems, want, &m);
    if (m.wrong && x.failures++ < 10)
      fprintf(stderr, "[stress] rank %d (rank %d of comm %d): %s: %s element %ld of %zu is %g, "
              "want %g (%zu wrong)\n", x.rank, me, c.comm, describe(c, b).c_str(), what.c_str(),
              m.first, elems, m.got, m.want, m.wrong);
  };
  const char *o = l.out;
  switch (c.op) {
    case AllReduce: check("output", o, cnt, all); break;
    case Reduce:
      if (me == c.root) check("output", o, cnt, all);
      break;
    case Broadcast: check("output", o, cnt, [&](size_t i) { return gen(c.root, i); }); break;
    case AllGather: case Gather:
      if (c.op == AllGather || me == c.root)
        check("output", o, cnt * un, [&](size_t i) { return gen(static_cast<int>(i / cnt), i % cnt); });
      break;
    case ReduceScatter: check("output", o, cnt, [&](size_t i) { return all(um * cnt + i); }); break;
    case Scatter: check("output", o, cnt, [&](size_t i) { return gen(c.root, um * cnt + i); }); break;
    case AlltoAll:
      check("output", o, cnt * un, [&](size_t i) { return gen(static_cast<int>(i / cnt), um * cnt + i % cnt); });
      break;
    case AlltoAllv: {
      std::vector<char> covered(l.outN, 0);
      for (size_t p = 0; p < un; p++) {
        size_t from = c.sd[p * un + um];  // where sender p keeps this rank's block
        check("block from rank " + std::to_string(p) + ",", o + l.rd[p] * ts, l.rc[p],
              [&](size_t i) { return gen(static_cast<int>(p), from + i); });
        std::fill_n(covered.begin() + static_cast<long>(l.rd[p]), l.rc[p], 1);
      }
      for (size_t i = 0; i < l.outN; i++)
        if (!covered[i])
          check("gap at element " + std::to_string(i) + ",", o + i * ts, 1, [&](size_t) { return untouched(c.dt); });
      break;
    }
    case SendRecv:
      for (size_t e = 0; e < c.edges.size(); e++) {
        const Edge &ed = c.edges[e];
        Gen ge(c.salt ^ mix(e + 1), c.dt, c.red, false);
        auto sent = [&](size_t i) { return ge(ed.src, i); };
        std::string what = "message " + std::to_string(e) + " (" + std::to_string(ed.src) + "->" +
                           std::to_string(ed.dst) + "),";
        size_t k = static_cast<size_t>(l.edgeBuf[e]);
        if (ed.dst == me) check(what, l.bufs[k + (ed.src == me)].data(), ed.count, sent);
        if (ed.src == me) check(what + " send buffer", l.bufs[k].data(), ed.count, sent);
      }
      break;
    default: break;
  }
  if (l.inChecked) check("out-of-place input", l.in, l.inN, [&](size_t i) { return gen(me, i); });
  for (const Buf &buf : l.bufs) {
    std::string g = brokenGuard(buf);
    if (!g.empty() && x.failures++ < 10)
      fprintf(stderr, "[stress] rank %d: %s: %s\n", x.rank, describe(c, b).c_str(), g.c_str());
  }
}

struct Shared { std::atomic<int> secondIdReady; flagcxUniqueId secondId; };

int rankBody(unsigned long long seed, int ncalls, const std::set<int> &only, Shared *sh, int rank,
             int n, flagcxUniqueId *id) {
  harness::CommOnStream cs;
  RANK_OK(cs.open(rank, n, id));
  // The second communicator: rank 0 makes its id and hands it over through
  // shared memory; the ranks join it numbered backwards, with a stream each.
  if (rank == 0) {
    RANK_OK(flagcxGetUniqueId(&sh->secondId));
    sh->secondIdReady.store(1);
  }
  for (int i = 0; i < 30000 && !sh->secondIdReady.load(); i++) usleep(1000);
  RANK_CHECK(sh->secondIdReady.load(), "no id for the second communicator");
  Ctx x{rank, n, {cs.comm, nullptr}, {cs.stream, nullptr}};
  RANK_OK(flagcxCommInitRank(&x.comm[1], n, &sh->secondId, n - 1 - rank));
  RANK_OK(cs.dev->streamCreate(&x.stream[1]));
  bool verbose = rank == 0 && harness::envIs("STRESS_VERBOSE", "1");
  for (const Batch &b : makePlan(seed, n, ncalls)) {
    std::vector<const Call *> calls;
    for (const Call &c : b.calls)
      if (only.empty() || only.count(c.idx)) calls.push_back(&c);
    if (calls.empty()) continue;
    std::vector<Live> live(calls.size());
    flagcxResult_t r = flagcxSuccess;
    if (b.grouped) RANK_OK(flagcxGroupStart(nullptr));
    for (size_t k = 0; k < calls.size(); k++) {
      if (verbose) fprintf(stderr, "[stress] %s\n", describe(*calls[k], b).c_str());
      r = issue(*calls[k], b, x, &live[k]);
      RANK_CHECK(r == flagcxSuccess, "%s: %s (%s)", describe(*calls[k], b).c_str(),
                 flagcxGetErrorString(r), flagcxGetLastError(nullptr));
    }
    if (b.grouped) r = flagcxGroupEnd(nullptr);
    for (int k = 0; k < 2 && b.onStream && r == flagcxSuccess; k++) r = cs.dev->streamSynchronize(x.stream[k]);
    RANK_CHECK(r == flagcxSuccess, "completing calls %d..%d: %s (%s)", calls.front()->idx,
               calls.back()->idx, flagcxGetErrorString(r), flagcxGetLastError(nullptr));
    for (size_t k = 0; k < calls.size(); k++) {
      verify(*calls[k], b, x, live[k]);
      for (Buf &buf : live[k].bufs) freeBuf(&buf);
    }
  }
  RANK_OK(cs.dev->streamDestroy(x.stream[1]));
  RANK_OK(flagcxCommDestroy(x.comm[1]));
  RANK_OK(cs.close());
  return x.failures ? 1 : 0;
}

struct Config { int nranks; bool sockets; };
class Stress : public ::testing::TestWithParam<Config> {};

TEST_P(Stress, RandomSequence) {
  const Config &cfg = GetParam();
  const char *s = getenv("STRESS_SEED");
  unsigned long long seed = s && *s ? strtoull(s, nullptr, 0) : kDefaultSeed;
  int ncalls = harness::envInt("STRESS_CALLS", kDefaultCalls);
  std::set<int> only;
  for (const char *p = getenv("STRESS_ONLY"); p && *p; p += strcspn(p, ","), p += *p ? 1 : 0)
    only.insert(atoi(p));
  const char *over = cfg.sockets ? "sockets" : "shm";
  printf("[stress] seed %llu (STRESS_SEED), %d calls (STRESS_CALLS), %d ranks over %s\n", seed,
         ncalls, cfg.nranks, over);
  Shared *sh = harness::sharedBlock<Shared>();
  harness::Env env{{{"FLAGCX_TIMEOUT", std::to_string(harness::envInt("STRESS_TIMEOUT", 30))},
                    {"FLAGCX_SHM_DISABLE", cfg.sockets ? "1" : "0"}}};
  int64_t t0 = harness::nowNs();
  auto res = harness::run(cfg.nranks, [&](int rank, int n, flagcxUniqueId *id) {
    return rankBody(seed, ncalls, only, sh, rank, n, id);
  }, env, 60 + ncalls / 3);
  printf("[stress] %.1f s\n", harness::secsSince(t0));
  EXPECT_TRUE(res.allOk()) << "seed " << seed << ", " << ncalls << " calls, " << cfg.nranks
                           << " ranks over " << over << ": " << res.failures();
  harness::leftoverShm(res.pids, res.startedNs);
  harness::freeShared(sh);
}

INSTANTIATE_TEST_SUITE_P(Mr, Stress,
                         ::testing::Values(Config{2, false}, Config{3, false}, Config{5, false},
                                           Config{2, true}, Config{3, true}, Config{5, true}),
                         [](const ::testing::TestParamInfo<Config> &info) {
                           return std::string(info.param.sockets ? "sockets_" : "shm_") +
                                  std::to_string(info.param.nranks) + "ranks";
                         });

}  // namespace
