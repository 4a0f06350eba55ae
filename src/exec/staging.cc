// Device buffers without a device-to-device path: host copies around the
// host engine (staged mode), pipelined — the input comes over in slices
// (FLAGCX_STAGE_SLICE_SIZE, or sized from the copy rate and per-slice cost
// measured at setup) and a send leaves as soon as its slices are on the
// host (the gate); output chunks go back as soon as the stage that writes
// them last is done (the sink, in coll_run.cc).  In direct mode, user
// buffers that are not device memory (pageable or pinned host, managed)
// are copied into device working buffers whole.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "adapters/adapters.h"
#include "base/base.h"
#include "exec/shm_stage.h"
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

// The pipeline's time for N bytes in slices of s, each slice costing o
// seconds beyond its bytes at copy rate r: about N/r_slowest (the stage
// that bounds it) + 2s/r (the first slice down and the last chunk up are
// not overlapped) + (N/s)o.  Its minimum is at s = sqrt(N o r / 2); the
// slowest stage's rate (the link's, or the copy's) does not move it.
size_t chooseStageSlice(size_t bytes, double stepCostS, double bytesPerS) {
  constexpr size_t kMin = 64 << 10, kMax = 64 << 20, kUnmeasured = 1 << 20;
  if (!(stepCostS > 0) || !(bytesPerS > 0)) return kUnmeasured;
  double best = std::sqrt(static_cast<double>(bytes) * stepCostS * bytesPerS / 2);
  size_t sl = best >= kMax ? kMax : std::max(kMin, static_cast<size_t>(best));
  return (sl + 4095) / 4096 * 4096;
}

namespace {

using Clock = std::chrono::steady_clock;

// One copy of `bytes` through the private stream and a mark, polled until
// reached: its seconds (negative on failure or past 5 s).
double timedCopy(DeviceAdapter *dev, char *dst, const char *src, size_t bytes) {
  auto t0 = Clock::now();
  uint64_t m = 0;
  bool done = false;
  if (dev->copyAsync(dst, src, bytes) != flagcxSuccess || dev->mark(&m) != flagcxSuccess) return -1;
  while (!done) {
    if (dev->reached(m, &done) != flagcxSuccess || Clock::now() - t0 > std::chrono::seconds(5))
      return -1;
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

// Staged mode with automatic slices: one small copy (the per-slice cost:
// issuing, marking, seeing the mark reached), best of several, and one of
// 4 MiB (the rate), from device memory where the adapter has it, into
// page-locked memory.  A few milliseconds, once per communicator.
void probeStaging(ExecState *s) {
  constexpr size_t kBig = 4 << 20, kSmall = 4096;
  DeviceAdapter *dev = s->dev;
  StagedBuffers &sb = s->sched->staged;
  void *src = nullptr, *dst = nullptr;
  bool devSrc = dev->allocDevice(&src, kBig) == flagcxSuccess && src;
  if (!devSrc && dev->allocPinned(&src, kBig) != flagcxSuccess) src = nullptr;
  if (src && dev->allocPinned(&dst, kBig) == flagcxSuccess && dst) {
    char *d = static_cast<char *>(dst);
    const char *sp = static_cast<const char *>(src);
    double o = 1e9, big = 1e9;
    for (int i = 0; i < 8; i++) {
      double t = timedCopy(dev, d, sp, kSmall);
      if (t >= 0) o = std::min(o, t);
    }
    for (int i = 0; i < 2; i++) {
      double t = timedCopy(dev, d, sp, kBig);
      if (t >= 0) big = std::min(big, t);
    }
    if (o < 1e9 && big < 1e9) {
      sb.stepCostS = o;
      sb.copyBytesPerS = kBig / std::max(big - o, 1e-7);
    }
    dev->freePinned(dst);
  }
  if (src) devSrc ? dev->freeDevice(src) : dev->freePinned(src);
  INFO(kInit, "rank %d: host staging measured %.1f us per slice, %.2f GB/s copies: slices of %zu KiB "
       "at 4 MiB, %zu KiB at 256 MiB", s->rank, sb.stepCostS * 1e6, sb.copyBytesPerS / 1e9,
       stageSlice(s, 4 << 20) >> 10, stageSlice(s, 256 << 20) >> 10);
}

size_t stageSlice(const ExecState *s, size_t bytes) {
  int64_t fixed = paramInt(Param::STAGE_SLICE_SIZE);
  if (fixed > 0) return static_cast<size_t>(std::max<int64_t>(fixed, 4096));
  return chooseStageSlice(bytes, s->sched->staged.stepCostS, s->sched->staged.copyBytesPerS);
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
  reserveShmStage(j);  // the one-host direct path's shareable copies (shm_stage.cc)
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
  // Staged, an in-place input still gets a host copy of its own, sliced
  // behind the gate: every copy back to the output is issued after every
  // input slice's copy on the same stream, so none overwrites bytes not yet
  // read.  (Alltoallv's output may have gaps its copy back must keep.)
  bool apart = !direct && ci.a.op != OpKind::AlltoAllv;
  bool sendInsideRecv = !apart && send && recv && send >= recv && send + inB <= recv + outB;
  bool recvInsideSend = !apart && send && recv && !sendInsideRecv && recv >= send && recv + outB <= send + inB;
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
      g.slice = stageSlice(s, inB);
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

// Sends go device-to-host into the front of the staging buffer, in slices
// behind the gate like a collective's input, so the first leaves while the
// rest are still copied; receives land behind them and go back through the
// private stream, waited for once at the end.
flagcxResult_t runP2PStaged(ExecState *s, std::vector<P2PItem> &items) {
  size_t total = 0, sendBytes = 0;
  for (auto &it : items) {
    total += it.bytes;
    if (it.isSend) sendBytes += it.bytes;
  }
  char *stage = s->sched->staged.pinnedIn.ifFits(total);
  if (!stage) stage = growHeap(s->sched->staged.heapIn, total);
  if (total && !stage) return flagcxSystemError;
  std::vector<P2PItem> h = items;
  StageGate &g = s->sched->staged.gate;
  g.slice = stageSlice(s, sendBytes);
  g.marks.clear();
  g.ready = 0;
  size_t sendOff = 0, recvOff = sendBytes;
  flagcxResult_t r = flagcxSuccess;
  for (auto &it : h) {
    if (!it.isSend) {
      it.buf = stage + recvOff;
      recvOff += it.bytes;
      continue;
    }
    const char *src = static_cast<const char *>(it.buf);
    it.buf = stage + sendOff;
    // Pieces that end at slice boundaries, a mark after each slice's last.
    for (size_t done = 0; done < it.bytes && r == flagcxSuccess;) {
      size_t len = std::min(it.bytes - done, g.slice - sendOff % g.slice);
      r = s->dev->copyAsync(stage + sendOff, src + done, len);
      done += len;
      sendOff += len;
      uint64_t m = 0;
      if (r == flagcxSuccess && (sendOff % g.slice == 0 || sendOff == sendBytes)) {
        r = s->dev->mark(&m);
        g.marks.push_back(m);
      }
    }
  }
  if (r == flagcxSuccess && sendBytes) {
    g.base = stage;
    g.bytes = sendBytes;
  }
  if (r == flagcxSuccess) r = runP2P(s, h);
  s->sched->staged.gate = StageGate{};
  for (size_t i = 0; i < items.size() && r == flagcxSuccess; i++)
    if (!items[i].isSend && items[i].bytes) r = s->dev->copyAsync(items[i].buf, h[i].buf, items[i].bytes);
  flagcxResult_t f = s->dev->flush();  // the copies read and write the staging buffer
  FLAGCX_CHECK(r);
  return f;
}

}  // namespace flagcx
