// Device buffers without a device-to-device path: host copies around the
// host engine (staged mode), pipelined — the input comes over in slices of
// FLAGCX_STAGE_SLICE_SIZE and a send leaves as soon as its slices are on the
// host (the gate); output chunks go back as soon as the stage that writes
// them last is done (the sink, in coll_run.cc).  In direct mode, user
// buffers that are not device memory (pageable or pinned host, managed)
// are copied into device working buffers whole.
#include <algorithm>
#include <vector>

#include "adapters/adapters.h"
#include "base/base.h"
#include "exec/state.h"

namespace flagcx {

// Pipelined staging: is the host copy of [p, p+len) complete?  Bytes outside
// the gated input always are.
flagcxResult_t gateReady(ExecState *s, const char *p, size_t len, bool *ok) {
  StageGate &g = s->sched->staged.gate;
  *ok = true;
  if (!g.base || !len || p + len <= g.base || p >= g.base + g.bytes) return flagcxSuccess;
  size_t last = static_cast<size_t>(std::min(p + len, g.base + g.bytes) - g.base - 1) / g.slice;
  if (last < g.ready) return flagcxSuccess;
  FLAGCX_CHECK(s->dev->reached(g.marks[last], ok));  // reached: every earlier mark too
  if (*ok) g.ready = last + 1;
  return flagcxSuccess;
}

flagcxResult_t gateWait(ExecState *s, const char *p, size_t len) {
  Backoff wait;
  for (;;) {
    bool ok = false;
    FLAGCX_CHECK(gateReady(s, p, len, &ok));
    if (ok) return flagcxSuccess;
    if (s->aborting) return flagcxRemoteError;
    if (wait.expired()) {
      WARN(kColl, "rank %d: the device-to-host copy of an input did not finish within "
           "FLAGCX_TIMEOUT=%llds", s->rank, static_cast<long long>(paramInt(Param::TIMEOUT)));
      return flagcxSystemError;
    }
    wait.idle();
  }
}

// Bytes of a collective's input and output buffers, in elements.
size_t elemsIn(const CollItem &ci, int n) {
  const CollArgs &a = ci.a;
  switch (a.op) {
    case OpKind::ReduceScatter: case OpKind::Scatter: case OpKind::AlltoAll:
      return a.count * static_cast<size_t>(n);
    case OpKind::AlltoAllv: {
      size_t m = 0;
      for (int p = 0; p < n; p++) m = std::max(m, ci.v[static_cast<size_t>(n + p)] + ci.v[static_cast<size_t>(p)]);
      return m;
    }
    case OpKind::Barrier: return 0;
    default: return a.count;
  }
}
size_t elemsOut(const CollItem &ci, int n) {
  const CollArgs &a = ci.a;
  switch (a.op) {
    case OpKind::AllGather: case OpKind::Gather: case OpKind::AlltoAll:
      return a.count * static_cast<size_t>(n);
    case OpKind::AlltoAllv: {
      size_t m = 0;
      for (int p = 0; p < n; p++)
        m = std::max(m, ci.v[static_cast<size_t>(3 * n + p)] + ci.v[static_cast<size_t>(2 * n + p)]);
      return m;
    }
    case OpKind::Barrier: return 0;
    default: return a.count;
  }
}

// Host staging without direct mode: grow the page-locked staging buffers on
// the caller's thread (as reserveDirect does).  Without them the executor
// stages through the heap, slower but correct.
void reserveStaged(Job *j) {
  ExecState *s = j->ex;
  size_t in = 0, out = 0, p2p = 0;
  for (size_t k = 0; k < j->ncolls; k++) {
    size_t ts = dtypeSize(j->colls[k].a.dtype);
    in = std::max(in, elemsIn(j->colls[k], s->nranks) * ts);
    out = std::max(out, elemsOut(j->colls[k], s->nranks) * ts);
  }
  for (const P2PItem &it : j->p2p) p2p += it.bytes;
  in = std::max(in, p2p);
  if ((in && !s->sched->staged.pinnedIn.grow(in)) || (out && !s->sched->staged.pinnedOut.grow(out)))
    INFO(kColl, "rank %d: no page-locked staging memory (%zu/%zu bytes); staging through the heap",
         s->rank, in, out);
}

// Device buffers without direct mode: through page-locked host copies
// around the host engine, pipelined: the input comes over in slices of
// FLAGCX_STAGE_SLICE_SIZE and a send leaves as soon as its slices are on
// the host (the gate); output chunks go back as soon as their last write is
// done (the sink).  In direct mode, user buffers that are not device memory
// (pageable or pinned host, managed) are copied into device working buffers
// whole.
flagcxResult_t runCollStaged(ExecState *s, CollItem &ci) {
  DeviceAdapter *dev = s->dev;
  bool direct = s->direct();
  size_t ts = dtypeSize(ci.a.dtype);
  size_t inB = elemsIn(ci, s->nranks) * ts, outB = elemsOut(ci, s->nranks) * ts;
  const char *send = static_cast<const char *>(ci.a.send);
  char *recv = static_cast<char *>(ci.a.recv);
  if (direct && (!send || !inB || dev->isDeviceMemory(send)) &&
      (!recv || !outB || dev->isDeviceMemory(recv)))
    return runColl(s, ci);
  auto stage = [&](std::vector<char> &h, GrowBuf &d, GrowBuf &pin, size_t bytes) -> char * {
    if (direct) return d.grow(bytes);
    // Page-locked when reserveStaged could get it, else the heap.
    char *p = pin.ifFits(bytes);
    return p ? p : growHeap(h, bytes);
  };
  CollItem h = ci;
  char *hOut = nullptr, *hIn = nullptr;
  if (recv && outB) {
    hOut = stage(s->sched->staged.heapOut, s->sched->direct.stageOut, s->sched->staged.pinnedOut, outB);
    if (!hOut) return flagcxSystemError;
    h.a.recv = hOut;
  }
  bool sendInsideRecv = send && recv && send >= recv && send + inB <= recv + outB;
  bool recvInsideSend = send && recv && !sendInsideRecv && recv >= send && recv + outB <= send + inB;
  if (sendInsideRecv) {
    FLAGCX_CHECK(dev->copy(hOut, recv, outB, nullptr));
    h.a.send = hOut + (send - recv);
  } else if (send && inB) {
    hIn = stage(s->sched->staged.heapIn, s->sched->direct.stageIn, s->sched->staged.pinnedIn, inB);
    if (!hIn) return flagcxSystemError;
    h.a.send = hIn;
    if (recvInsideSend) h.a.recv = hIn + (recv - send);
    if (direct || recvInsideSend) {
      FLAGCX_CHECK(dev->copy(hIn, send, inB, nullptr));
    } else {
      StageGate &g = s->sched->staged.gate;
      g.slice = static_cast<size_t>(std::max<int64_t>(paramInt(Param::STAGE_SLICE_SIZE), 4096));
      g.marks.clear();
      g.ready = 0;
      flagcxResult_t r = flagcxSuccess;
      for (size_t off = 0; off < inB && r == flagcxSuccess; off += g.slice) {
        r = dev->copyAsync(hIn + off, send + off, std::min(g.slice, inB - off));
        uint64_t m = 0;
        if (r == flagcxSuccess) r = dev->mark(&m);
        g.marks.push_back(m);
      }
      if (r != flagcxSuccess) {
        dev->flush();
        return r;
      }
      g.base = hIn;
      g.bytes = inB;
    }
  }
  // A non-root rank's output of reduce and gather is not the caller's to see.
  bool rootOnly = (ci.a.op == OpKind::Reduce || ci.a.op == OpKind::Gather) && s->rank != ci.a.root;
  if (!direct && hOut && !recvInsideSend && !rootOnly) s->sched->staged.sink = {hOut, recv, outB, false};
  flagcxResult_t r = runColl(s, h);
  ci.flight = h.flight;
  bool sunk = s->sched->staged.sink.used;
  s->sched->staged.gate = StageGate{};
  s->sched->staged.sink = StageSink{};
  // Copies still in flight read or write the staging buffers: finish them.
  flagcxResult_t f = direct ? flagcxSuccess : dev->flush();
  FLAGCX_CHECK(r);
  FLAGCX_CHECK(f);
  if (recv && outB && !sunk && !rootOnly) FLAGCX_CHECK(dev->copy(recv, h.a.recv, outB, nullptr));
  return flagcxSuccess;
}

flagcxResult_t runP2PStaged(ExecState *s, std::vector<P2PItem> &items) {
  size_t total = 0;
  for (auto &it : items) total += it.bytes;
  char *stage = s->sched->staged.pinnedIn.ifFits(total);
  if (!stage) stage = growHeap(s->sched->staged.heapIn, total);
  std::vector<P2PItem> h = items;
  size_t off = 0;
  for (auto &it : h) {
    if (it.isSend && it.bytes) FLAGCX_CHECK(s->dev->copy(stage + off, it.buf, it.bytes, nullptr));
    it.buf = stage + off;
    off += it.bytes;
  }
  FLAGCX_CHECK(runP2P(s, h));
  off = 0;
  for (size_t i = 0; i < items.size(); i++) {
    if (!items[i].isSend && items[i].bytes)
      FLAGCX_CHECK(s->dev->copy(items[i].buf, stage + off, items[i].bytes, nullptr));
    off += items[i].bytes;
  }
  return flagcxSuccess;
}

}  // namespace flagcx
