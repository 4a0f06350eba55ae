// The executor.  An API call becomes a Job on the caller's stream; the thread
// that drains the stream runs it when the communicator's issue order says so:
// collectives step by step through their compiled schedules, point-to-point
// operations all posted at once so that grouped sends and receives cannot
// deadlock whatever their order.
#include "exec/enqueue.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "adapters/ccl/ccl.h"
#include "base/log.h"
#include "base/params.h"
#include "net/tags.h"
#include "sched/algo_set.h"
#include "sched/ir_names.h"

namespace flagcx {

namespace {

struct GroupState {
  int depth = 0;
  std::vector<Job *> jobs;
  flagcxResult_t deferred = flagcxSuccess;
};
thread_local GroupState t_group;

Job *takeJob(flagcxComm *comm) {
  Job *j = nullptr;
  {
    std::lock_guard<std::mutex> lk(comm->mu);
    if (!comm->freeJobs.empty()) {
      j = comm->freeJobs.back();
      comm->freeJobs.pop_back();
    }
  }
  if (!j) j = new Job();
  j->comm = comm;
  j->ncolls = 0;
  j->p2p.clear();
  j->stream = nullptr;
  return j;
}

void returnJob(Job *j) {
  flagcxComm *comm = j->comm;
  std::lock_guard<std::mutex> lk(comm->mu);
  comm->freeJobs.push_back(j);
}

// Pipelined staging: is the host copy of [p, p+len) complete?  Bytes outside
// the gated input always are.
flagcxResult_t gateReady(flagcxComm *comm, const char *p, size_t len, bool *ok) {
  flagcxComm::StageGate &g = comm->gate;
  *ok = true;
  if (!g.base || !len || p + len <= g.base || p >= g.base + g.bytes) return flagcxSuccess;
  size_t last = static_cast<size_t>(std::min(p + len, g.base + g.bytes) - g.base - 1) / g.slice;
  if (last < g.ready) return flagcxSuccess;
  FLAGCX_CHECK(comm->dev->reached(g.marks[last], ok));  // reached: every earlier mark too
  if (*ok) g.ready = last + 1;
  return flagcxSuccess;
}

flagcxResult_t gateWait(flagcxComm *comm, const char *p, size_t len) {
  Backoff wait;
  for (;;) {
    bool ok = false;
    FLAGCX_CHECK(gateReady(comm, p, len, &ok));
    if (ok) return flagcxSuccess;
    if (comm->aborting) return flagcxRemoteError;
    if (wait.expired()) {
      WARN(kColl, "rank %d: the device-to-host copy of an input did not finish within "
           "FLAGCX_TIMEOUT=%llds", comm->rank, static_cast<long long>(paramInt(Param::TIMEOUT)));
      return flagcxSystemError;
    }
    wait.idle();
  }
}

// Post and progress every transfer in `xs`; keep per-Conn posting order and
// the per-Conn limit on outstanding requests.  Sends and receives are
// ordered separately on a Conn, so each direction has its own half of the
// limit: a long run of sends can never keep the receives that its peer needs
// from being posted (that deadlocked large exchanges).
flagcxResult_t runXfers(flagcxComm *comm, std::vector<Xfer> &xs, flagcxDataType_t dt,
                        flagcxRedOp_t op, const char *what) {
  if (xs.empty()) return flagcxSuccess;
  size_t ts = getFlagcxDataTypeSize(dt);
  size_t remaining = xs.size();
  Backoff wait;
  std::vector<int> &outstanding = comm->scratchCounts;
  outstanding.assign(static_cast<size_t>(2 * comm->nranks * comm->nchannels), 0);
  std::vector<char> &blocked = comm->scratchFlags;
  constexpr int kLimit = Conn::kMaxPosted / 2 - 8;  // per direction
  unsigned idleRounds = 0;
  while (remaining > 0) {
    if (comm->aborting) return flagcxRemoteError;
    bool progressed = false;
    // Post what fits, in order per Conn.
    blocked.assign(outstanding.size(), 0);
    for (auto &x : xs) {
      if (x.posted) continue;
      size_t ci = static_cast<size_t>(2 * (x.peer * comm->nchannels + x.ch) + (x.isSend ? 1 : 0));
      if (blocked[ci] || outstanding[ci] >= kLimit) {
        blocked[ci] = 1;
        continue;
      }
      if (x.isSend && comm->gate.base) {  // its bytes may still be on their way from the device
        bool ready = false;
        FLAGCX_CHECK(gateReady(comm, x.buf, x.bytes, &ready));
        if (!ready) {
          blocked[ci] = 1;
          continue;
        }
      }
      flagcxResult_t r = x.isSend ? x.conn->isend(x.buf, x.bytes, x.tag, &x.req)
                                  : x.conn->irecv(x.buf, x.bytes, x.tag, &x.req);
      if (r != flagcxSuccess) {
        std::string cause = lastErrorText();  // the transport's own line, if any
        WARN(kColl, "rank %d: %s: posting a %s of %zu bytes %s rank %d failed: %s", comm->rank,
             what, x.isSend ? "send" : "receive", x.bytes, x.isSend ? "to" : "from", x.peer,
             cause.c_str());
        return r;
      }
      x.posted = true;
      outstanding[ci]++;
      progressed = true;
    }
    for (auto &x : xs) {
      if (!x.posted || x.done) continue;
      bool done = false;
      size_t got = 0;
      flagcxResult_t r = x.conn->test(x.req, &done, &got);
      if (r != flagcxSuccess) {
        std::string cause = lastErrorText();  // the transport's own line
        WARN(kColl, "rank %d: %s: %s of %zu bytes %s rank %d (%s) failed: %s", comm->rank, what,
             x.isSend ? "send" : "receive", x.bytes, x.isSend ? "to" : "from", x.peer,
             comm->bs->peers()[static_cast<size_t>(x.peer)].host, cause.c_str());
        return r;
      }
      if (!done) continue;
      if (!x.isSend && got != x.bytes) {
        WARN(kColl, "rank %d: %s: received %zu bytes from rank %d, expected %zu (mismatched "
             "calls?)", comm->rank, what, got, x.peer, x.bytes);
        return flagcxInvalidUsage;
      }
      // Host memory only here (device buffers are staged or go direct).
      if (x.reduceDst && x.bytes)
        FLAGCX_CHECK(hostReduce(x.reduceDst, x.reduceDst, x.buf, x.bytes / ts, dt, op));
      x.done = true;
      remaining--;
      progressed = true;
      outstanding[static_cast<size_t>(2 * (x.peer * comm->nchannels + x.ch) + (x.isSend ? 1 : 0))]--;
    }
    if (progressed) {
      wait.progressed();
      idleRounds = 0;
      continue;
    }
    // Now and then, look at every peer: one that gave up (an error frame)
    // fails this operation at once, even when this stage waits on others.
    if (++idleRounds % 256 == 0) {
      for (auto &c : comm->conns) {
        if (!c) continue;
        flagcxResult_t r = c->progress();
        // A peer that gave up on a later call finished this one: what it sent
        // for it arrived before its error frame, and test() hands it over.
        // The next call fails on that Conn, naming both sides.
        if (r == flagcxSuccess || laterCall(c->peerGaveUpOn(), comm->curTag)) continue;
        std::string cause = lastErrorText();
        WARN(kColl, "rank %d: %s: rank %d failed: %s", comm->rank, what, c->peer(), cause.c_str());
        return r;
      }
    }
    if (wait.expired()) {
      std::string pending;
      for (auto &x : xs)
        if (!x.done && pending.size() < 200)
          pending += std::string(pending.empty() ? "" : ", ") + (x.isSend ? "send to " : "recv from ") +
                     std::to_string(x.peer);
      WARN(kColl, "rank %d: %s: nothing moved for FLAGCX_TIMEOUT=%llds; still waiting on: %s",
           comm->rank, what, static_cast<long long>(paramInt(Param::TIMEOUT)), pending.c_str());
      return flagcxSystemError;
    }
    wait.idle();
  }
  return flagcxSuccess;
}

flagcxResult_t runDirectXfers(flagcxComm *comm, std::vector<Xfer> &xs, flagcxDataType_t dt,
                              flagcxRedOp_t op, const char *what);

flagcxResult_t runP2P(flagcxComm *comm, std::vector<P2PItem> &items) {
  // Sends and receives to oneself pair up in order.
  std::vector<P2PItem *> selfSends, selfRecvs;
  std::vector<Xfer> &xs = comm->scratchXfers;
  xs.clear();
  for (auto &it : items) {
    if (it.peer == comm->rank) {
      (it.isSend ? selfSends : selfRecvs).push_back(&it);
      continue;
    }
    Xfer x{};
    x.conn = comm->conn(it.peer, 0);
    x.isSend = it.isSend;
    x.buf = static_cast<char *>(it.buf);
    x.bytes = it.bytes;
    x.tag = kP2PTag;
    x.peer = it.peer;
    xs.push_back(x);
  }
  if (selfSends.size() != selfRecvs.size()) {
    WARN(kP2P, "rank %d: %zu send(s) to self but %zu receive(s) from self in one group",
         comm->rank, selfSends.size(), selfRecvs.size());
    return flagcxInvalidUsage;
  }
  for (size_t i = 0; i < selfSends.size(); i++) {
    if (selfSends[i]->bytes != selfRecvs[i]->bytes) {
      WARN(kP2P, "rank %d: send to self of %zu bytes meets a receive of %zu bytes", comm->rank,
           selfSends[i]->bytes, selfRecvs[i]->bytes);
      return flagcxInvalidUsage;
    }
    if (!selfSends[i]->bytes || selfSends[i]->buf == selfRecvs[i]->buf) continue;
    if (comm->direct)
      FLAGCX_CHECK(comm->dev->copyAsync(selfRecvs[i]->buf, selfSends[i]->buf, selfSends[i]->bytes));
    else
      memmove(selfRecvs[i]->buf, selfSends[i]->buf, selfSends[i]->bytes);
  }
  if (comm->direct) {
    FLAGCX_CHECK(comm->dev->flush());
    return runDirectXfers(comm, xs, flagcxUint8, flagcxSum, "send/recv");
  }
  return runXfers(comm, xs, flagcxUint8, flagcxSum, "send/recv");
}

// --- Direct mode: device memory between same-host ranks (CUDA IPC) ---
//
// A transfer of a stage becomes, over the same connection and tag:
//   sender -> receiver: a control message {magic, bytes, IPC reference of the
//                       sender's bytes}
//   receiver:           maps the sender's allocation (once per allocation,
//                       cached), copies or reduces straight from it on the GPU
//   receiver -> sender: an acknowledgement; the sender's stage ends with it,
//                       so its buffer is not reused before the peer has read it.
// Payloads never touch host memory; all transfers of a stage share both rounds.
constexpr uint64_t kDirectMagic = 0x44495245435446ull;  // "DIRECTF"
constexpr uint64_t kAckFlip = 1ull << 59;
constexpr size_t kCtrlBytes = 32 + DeviceAdapter::kIpcRefBytes;
constexpr size_t kOutboxMax = 2 << 20;  // messages below this go through the outbox
constexpr size_t kMaxImports = 4096;

// Grow a device (or, with `pinned`, page-locked host) working buffer.
char *growDevBuf(flagcxComm *comm, flagcxComm::DevBuf &b, size_t bytes, bool pinned) {
  if (b.cap.load(std::memory_order_acquire) >= bytes) return b.p.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lk(comm->dMu);
  size_t cap = b.cap.load();
  if (cap >= bytes) return b.p.load();
  // 2 MiB at least: then a buffer owns its allocation granule, which CUDA
  // IPC maps as a whole.
  cap = std::max<size_t>(cap, 2 << 20);
  while (cap < bytes) cap *= 2;
  void *p = nullptr;
  if ((pinned ? comm->dev->allocPinned(&p, cap) : comm->dev->allocDevice(&p, cap)) != flagcxSuccess)
    return nullptr;
  // The old one may still be in use: freed at destroy.
  if (b.p.load()) (pinned ? comm->pRetired : comm->dRetired).push_back(b.p.load());
  b.p.store(static_cast<char *>(p), std::memory_order_release);
  b.cap.store(cap, std::memory_order_release);
  return static_cast<char *>(p);
}
char *growDevice(flagcxComm *comm, flagcxComm::DevBuf &b, size_t bytes) {
  return growDevBuf(comm, b, bytes, false);
}

flagcxResult_t importPeer(flagcxComm *comm, const char *ref, int peer, char **out) {
  DeviceAdapter *dev = comm->dev;
  std::string id(ref, dev->ipcIdBytes());
  auto it = comm->ipcImports.find(id);
  if (it == comm->ipcImports.end()) {
    if (comm->ipcImports.size() >= kMaxImports) {
      // Peers' buffers come and go; drop every mapping rather than grow forever.
      for (auto &kv : comm->ipcImports) dev->ipcRelease(kv.second);
      comm->ipcImports.clear();
    }
    void *base = nullptr;
    flagcxResult_t r = dev->ipcImportBase(ref, &base);
    if (r != flagcxSuccess) {
      WARN(kColl, "rank %d: mapping device memory of rank %d (CUDA IPC) failed", comm->rank, peer);
      return r;
    }
    it = comm->ipcImports.emplace(std::move(id), base).first;
  }
  *out = static_cast<char *>(it->second) + dev->ipcOffset(ref);
  return flagcxSuccess;
}

flagcxResult_t runDirectXfers(flagcxComm *comm, std::vector<Xfer> &xs, flagcxDataType_t dt,
                              flagcxRedOp_t op, const char *what) {
  if (xs.empty()) return flagcxSuccess;
  DeviceAdapter *dev = comm->dev;
  size_t ts = getFlagcxDataTypeSize(dt);
  std::vector<char> &ctrl = comm->directCtrl;
  if (ctrl.size() < xs.size() * kCtrlBytes) ctrl.resize(xs.size() * kCtrlBytes);
  std::vector<Xfer> &cx = comm->directXfers;
  cx.clear();
  size_t outboxUsed = 0;
  for (size_t i = 0; i < xs.size(); i++) {
    Xfer c = xs[i];
    c.buf = ctrl.data() + i * kCtrlBytes;
    c.bytes = kCtrlBytes;
    c.reduceDst = nullptr;
    c.ch = 0;
    c.conn = comm->conn(c.peer, 0);
    if (c.isSend) {
      // {magic, bytes, kind (1: in my outbox at offset; 0: the IPC reference
      // that follows), offset}
      uint64_t hdr[4] = {kDirectMagic, xs[i].bytes, 0, 0};
      memset(c.buf, 0, kCtrlBytes);
      size_t len = (xs[i].bytes + 255) & ~size_t(255);
      if (xs[i].bytes && xs[i].bytes < kOutboxMax && outboxUsed + len <= comm->outboxBytes) {
        FLAGCX_CHECK(dev->copyAsync(comm->outbox + outboxUsed, xs[i].buf, xs[i].bytes));
        hdr[2] = 1;
        hdr[3] = outboxUsed;
        outboxUsed += len;
      } else if (xs[i].bytes) {
        flagcxResult_t r = dev->ipcExport(xs[i].buf, c.buf + 32);
        if (r != flagcxSuccess) {
          WARN(kColl, "rank %d: %s: cannot share %p with rank %d (not device memory from "
               "cudaMalloc?)", comm->rank, what, static_cast<void *>(xs[i].buf), c.peer);
          return r;
        }
      }
      memcpy(c.buf, hdr, sizeof(hdr));
    }
    cx.push_back(c);
  }
  TRACE(kColl, "rank %d: %s: direct: %zu transfer(s), %zu bytes in the outbox", comm->rank, what,
        xs.size(), outboxUsed);
  if (outboxUsed) FLAGCX_CHECK(dev->flush());
  FLAGCX_CHECK(runXfers(comm, cx, flagcxUint8, flagcxSum, what));
  TRACE(kColl, "rank %d: %s: direct: headers exchanged", comm->rank, what);
  // Every receive: read the sender's bytes where they are.
  for (size_t i = 0; i < xs.size(); i++) {
    const Xfer &x = xs[i];
    if (x.isSend) continue;
    const char *c = ctrl.data() + i * kCtrlBytes;
    uint64_t hdr[4];
    memcpy(hdr, c, sizeof(hdr));
    if (hdr[0] != kDirectMagic || hdr[2] > 1) {
      WARN(kColl, "rank %d: %s: rank %d sent a malformed direct-transfer header", comm->rank,
           what, x.peer);
      return flagcxInternalError;
    }
    if (hdr[1] != x.bytes) {
      WARN(kColl, "rank %d: %s: rank %d sends %llu bytes, this rank expects %zu (mismatched "
           "calls?)", comm->rank, what, x.peer, static_cast<unsigned long long>(hdr[1]), x.bytes);
      return flagcxInvalidUsage;
    }
    if (!x.bytes) continue;
    char *src = nullptr;
    if (hdr[2] == 1) {
      if (hdr[3] > comm->outboxBytes || x.bytes > comm->outboxBytes - hdr[3]) {
        WARN(kColl, "rank %d: %s: rank %d names bytes %llu..%llu of its outbox (%zu bytes)",
             comm->rank, what, x.peer, static_cast<unsigned long long>(hdr[3]),
             static_cast<unsigned long long>(hdr[3] + x.bytes), comm->outboxBytes);
        return flagcxInternalError;
      }
      src = comm->peerOutbox[static_cast<size_t>(x.peer)] + hdr[3];
    } else {
      FLAGCX_CHECK(importPeer(comm, c + 32, x.peer, &src));
    }
    if (x.reduceDst)
      FLAGCX_CHECK(dev->reduceAsync(x.reduceDst, x.reduceDst, src, x.bytes / ts, dt, op));
    else
      FLAGCX_CHECK(dev->copyAsync(x.buf, src, x.bytes));
  }
  FLAGCX_CHECK(dev->flush());
  TRACE(kColl, "rank %d: %s: direct: data read", comm->rank, what);
  // Acknowledgements, the other way.
  cx.clear();
  for (size_t i = 0; i < xs.size(); i++) {
    Xfer c = xs[i];
    c.isSend = !xs[i].isSend;
    c.buf = ctrl.data() + i * kCtrlBytes;
    c.bytes = 8;
    c.tag = xs[i].tag ^ kAckFlip;
    c.reduceDst = nullptr;
    c.ch = 0;
    c.conn = comm->conn(c.peer, 0);
    if (c.isSend) memcpy(c.buf, &kDirectMagic, 8);
    cx.push_back(c);
  }
  return runXfers(comm, cx, flagcxUint8, flagcxSum, what);
}

// Local copies: device-side in direct mode (issued, then flushed by the caller).
flagcxResult_t localCopy(flagcxComm *comm, void *dst, const void *src, size_t bytes) {
  if (!bytes || dst == src) return flagcxSuccess;
  if (comm->direct) return comm->dev->copyAsync(dst, src, bytes);
  memcpy(dst, src, bytes);
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

char *growBuffer(std::vector<char> &buf, size_t bytes) {
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

bool overlaps(const void *a, size_t an, const void *b, size_t bn) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return an && bn && pa < pb + bn && pb < pa + an;
}

flagcxResult_t runColl(flagcxComm *comm, CollItem &ci) {
  const CollArgs &a = ci.a;
  int n = comm->nranks;
  size_t ts = getFlagcxDataTypeSize(a.dtype);
  if (a.count == 0 && a.op != OpKind::Barrier && a.op != OpKind::AlltoAllv) return flagcxSuccess;
  const size_t *sc = nullptr, *sd = nullptr, *rc = nullptr, *rd = nullptr;
  size_t recvTotal = 0;
  if (a.op == OpKind::AlltoAllv) {
    sc = ci.v.data();
    sd = sc + n;
    rc = sd + n;
    rd = rc + n;
    size_t sendTotal = 0;
    for (int p = 0; p < n; p++) sendTotal += sc[p], recvTotal += rc[p];
    if (sendTotal == 0 && recvTotal == 0) return flagcxSuccess;
  }
  size_t selectBytes = a.count * ts;
  const Schedule *s = comm->algos->select(a.op, selectBytes, a.dtype, a.root);
  if (!s) {
    WARN(kColl, "rank %d: no schedule for %s (%zu bytes, root %d)", comm->rank, opName(a.op),
         selectBytes, a.root);
    return flagcxInternalError;
  }
  const RankSchedule &rs = s->ranks[0];
  int N = s->chunks;
  FlightEntry *fe = comm->flight.begin(ci.seq, opName(a.op), s->algo.c_str(), selectBytes,
                                       a.dtype, opIsRooted(a.op) ? a.root : -1);
  ci.flight = fe;
  bool rooted = opIsRooted(a.op);
  bool isRoot = !rooted || comm->rank == a.root;
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
    std::vector<size_t> &packed = comm->scratchDispls;
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
  bool direct = comm->direct;
  // Working buffers: host memory, or device memory in direct mode.
  bool outOfMemory = false;
  auto work = [&](std::vector<char> &h, flagcxComm::DevBuf &d, size_t bytes) -> char * {
    char *p = direct ? growDevice(comm, d, std::max<size_t>(bytes, 1)) : growBuffer(h, bytes);
    outOfMemory = outOfMemory || (direct && !p);
    return p;
  };
  // Buffers a non-root rank need not pass get a private stand-in.
  if (!isRoot && (a.op == OpKind::Reduce || a.op == OpKind::Gather))
    out.base = work(comm->bufOutAlt, comm->dOutAlt, outBytes);
  if (!isRoot && (a.op == OpKind::Broadcast || a.op == OpKind::Scatter))
    in.base = work(comm->bufInAlt, comm->dInAlt, inBytes);
  // Schedules assume distinct input and output: snapshot an overlapping input.
  if (in.base && out.base && overlaps(in.base, inBytes, out.base, outBytes)) {
    char *copy = work(comm->bufInPlace, comm->dInPlace, inBytes);
    FLAGCX_CHECK(gateWait(comm, in.base, inBytes));
    if (copy) FLAGCX_CHECK(localCopy(comm, copy, in.base, inBytes));
    in.base = copy;
  }
  scr.base = work(comm->bufScratch, comm->dScratch, scr.total * ts);
  if (outOfMemory) {
    WARN(kColl, "rank %d: out of %s memory for the working buffers of %s", comm->rank,
         direct ? "device" : "host", opName(a.op));
    return flagcxSystemError;
  }

  auto bufOf = [&](BufKind b) -> const Bound & {
    return b == BufKind::Input ? in : b == BufKind::Output ? out : scr;
  };
  size_t slice = static_cast<size_t>(std::max<int64_t>(paramInt(Param::NET_CHUNK_SIZE), 4096));
  slice -= slice % ts;
  uint64_t tag = collTag(ci.seq, a.op, a.dtype, rooted ? a.root : 0,
                         a.op == OpKind::AlltoAllv ? 0 : a.count);
  comm->curTag = tag;
  char what[96];
  snprintf(what, sizeof(what), "%s/%s #%llu", opName(a.op), s->algo.c_str(),
           static_cast<unsigned long long>(ci.seq));
  std::vector<Xfer> &xs = comm->scratchXfers;
  // Staged output: each output chunk goes back to the device after the
  // stage that writes it last (an Avg divides the whole output at the end,
  // and alltoallv chunks may overlap: those copy back at once, after).
  flagcxComm::StageSink &sink = comm->sink;
  bool sinking = !direct && sink.host && out.base == sink.host && a.op != OpKind::AlltoAllv &&
                 !(a.redop == flagcxAvg && opReduces(a.op));
  std::vector<int> &lastWrite = comm->scratchLastWrite;
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
      if (b) FLAGCX_CHECK(comm->dev->copyAsync(sink.dev + (p - sink.host), p, b));
    }
    return flagcxSuccess;
  };
  size_t i = 0;
  while (i < rs.steps.size()) {
    int stage = rs.steps[i].stage;
    comm->flight.stage(fe, stage);
    size_t end = i;
    while (end < rs.steps.size() && rs.steps[end].stage == stage) end++;
    // Local steps of a stage first, then its messages.
    for (size_t k = i; k < end; k++) {
      const Step &st = rs.steps[k];
      if (st.kind != StepKind::Copy && st.kind != StepKind::Reduce) continue;
      char *sp, *dp;
      size_t sb, db;
      bufOf(st.src.buf).range(st.src.chunk, &sp, &sb);
      bufOf(st.dst.buf).range(st.dst.chunk, &dp, &db);
      if (sb != db) {
        WARN(kColl, "rank %d: %s: %s moves %zu bytes into %zu", comm->rank, what,
             stepText(st).c_str(), sb, db);
        return flagcxInternalError;
      }
      if (!direct) FLAGCX_CHECK(gateWait(comm, sp, sb));
      if (st.kind == StepKind::Copy) {
        FLAGCX_CHECK(localCopy(comm, dp, sp, sb));
      } else if (sb && direct) {
        FLAGCX_CHECK(comm->dev->reduceAsync(dp, dp, sp, sb / ts, a.dtype, a.redop));
      } else if (sb) {
        FLAGCX_CHECK(hostReduce(dp, dp, sp, sb / ts, a.dtype, a.redop));
      }
    }
    if (direct) FLAGCX_CHECK(comm->dev->flush());
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
    char *land = direct ? nullptr : growBuffer(comm->bufLanding, landing);
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
      size_t nslices = b == 0 || direct ? 1 : (b + slice - 1) / slice;
      for (size_t sl = 0; sl < nslices; sl++) {
        size_t off = sl * slice, len = direct ? b : std::min(slice, b - std::min(b, off));
        Xfer x{};
        x.ch = static_cast<int>(sl % static_cast<size_t>(comm->nchannels));
        x.conn = comm->conn(st.peer, x.ch);
        x.isSend = isSend;
        x.buf = target ? target + off : nullptr;
        x.bytes = len;
        x.tag = tag;
        x.peer = st.peer;
        if (st.kind == StepKind::RecvReduce) x.reduceDst = p + off;
        xs.push_back(x);
      }
      if (st.kind == StepKind::RecvReduce) landOff += b;
    }
    FLAGCX_CHECK(direct ? runDirectXfers(comm, xs, a.dtype, a.redop, what)
                        : runXfers(comm, xs, a.dtype, a.redop, what));
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
      FLAGCX_CHECK(comm->dev->divide(a.recv, a.recv, a.count, a.dtype, static_cast<uint64_t>(n), nullptr));
    else
      FLAGCX_CHECK(hostDivide(a.recv, a.recv, a.count, a.dtype, static_cast<uint64_t>(n)));
  }
  return flagcxSuccess;
}

// Device buffers (a non-host adapter): stage through host memory around the
// host engine.  A first version: whole-buffer copies, not yet pipelined with
// the transfers (docs/GPU.md says what a pipelined path would add).
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

// Direct mode: grow the device working buffers a job will need, on the
// caller's thread (see flagcxComm::DevBuf).
flagcxResult_t reserveDirect(Job *j) {
  flagcxComm *comm = j->comm;
  DeviceAdapter *dev = comm->dev;
  int n = comm->nranks;
  auto need = [&](flagcxComm::DevBuf &b, size_t bytes) -> flagcxResult_t {
    if (bytes && !growDevice(comm, b, bytes)) {
      WARN(kColl, "rank %d: cannot allocate %zu bytes of device memory for the engine",
           comm->rank, bytes);
      return flagcxSystemError;
    }
    return flagcxSuccess;
  };
  for (size_t k = 0; k < j->ncolls; k++) {
    const CollItem &ci = j->colls[k];
    const CollArgs &a = ci.a;
    size_t ts = getFlagcxDataTypeSize(a.dtype);
    size_t inB = elemsIn(ci, n) * ts, outB = elemsOut(ci, n) * ts;
    size_t scr = (a.op == OpKind::AllReduce || a.op == OpKind::Reduce || a.op == OpKind::Broadcast)
                     ? a.count : a.count * static_cast<size_t>(n);
    if (a.op == OpKind::AlltoAllv) {
      scr = 0;
      for (int p = 0; p < n; p++) scr += ci.v[static_cast<size_t>(p)];
    }
    FLAGCX_CHECK(need(comm->dScratch, std::max<size_t>(scr * ts, 1)));
    const char *send = static_cast<const char *>(a.send);
    const char *recv = static_cast<const char *>(a.recv);
    bool sendDev = !send || !inB || dev->isDeviceMemory(send);
    bool recvDev = !recv || !outB || dev->isDeviceMemory(recv);
    if (!sendDev) FLAGCX_CHECK(need(comm->dStageIn, inB));
    if (!recvDev) FLAGCX_CHECK(need(comm->dStageOut, outB));
    // Staging may place the input inside the output (or the reverse): then
    // the executor snapshots it, as it does for overlapping user buffers.
    if (!sendDev || !recvDev || (send && recv && overlaps(send, inB, recv, outB)))
      FLAGCX_CHECK(need(comm->dInPlace, std::max(inB, outB)));
    bool isRoot = comm->rank == a.root;
    if (!isRoot && (a.op == OpKind::Reduce || a.op == OpKind::Gather))
      FLAGCX_CHECK(need(comm->dOutAlt, outB));
    if (!isRoot && (a.op == OpKind::Broadcast || a.op == OpKind::Scatter))
      FLAGCX_CHECK(need(comm->dInAlt, inB));
  }
  size_t staged = 0;
  for (const P2PItem &it : j->p2p)
    if (it.bytes && !dev->isDeviceMemory(it.buf)) staged += it.bytes;
  return need(comm->dStageIn, staged);
}

// Host staging without direct mode: grow the page-locked staging buffers on
// the caller's thread (as reserveDirect does).  Without them the executor
// stages through the heap, slower but correct.
void reserveStaged(Job *j) {
  flagcxComm *comm = j->comm;
  size_t in = 0, out = 0, p2p = 0;
  for (size_t k = 0; k < j->ncolls; k++) {
    size_t ts = getFlagcxDataTypeSize(j->colls[k].a.dtype);
    in = std::max(in, elemsIn(j->colls[k], comm->nranks) * ts);
    out = std::max(out, elemsOut(j->colls[k], comm->nranks) * ts);
  }
  for (const P2PItem &it : j->p2p) p2p += it.bytes;
  in = std::max(in, p2p);
  if ((in && !growDevBuf(comm, comm->pStageIn, in, true)) ||
      (out && !growDevBuf(comm, comm->pStageOut, out, true)))
    INFO(kColl, "rank %d: no page-locked staging memory (%zu/%zu bytes); staging through the heap",
         comm->rank, in, out);
}

// Device buffers without direct mode: through page-locked host copies
// around the host engine, pipelined: the input comes over in slices of
// FLAGCX_STAGE_SLICE_SIZE and a send leaves as soon as its slices are on
// the host (the gate); output chunks go back as soon as their last write is
// done (the sink).  In direct mode, user buffers that are not device memory
// (pageable or pinned host, managed) are copied into device working buffers
// whole.
flagcxResult_t runCollStaged(flagcxComm *comm, CollItem &ci) {
  DeviceAdapter *dev = comm->dev;
  bool direct = comm->direct;
  size_t ts = getFlagcxDataTypeSize(ci.a.dtype);
  size_t inB = elemsIn(ci, comm->nranks) * ts, outB = elemsOut(ci, comm->nranks) * ts;
  const char *send = static_cast<const char *>(ci.a.send);
  char *recv = static_cast<char *>(ci.a.recv);
  if (direct && (!send || !inB || dev->isDeviceMemory(send)) &&
      (!recv || !outB || dev->isDeviceMemory(recv)))
    return runColl(comm, ci);
  auto stage = [&](std::vector<char> &h, flagcxComm::DevBuf &d, flagcxComm::DevBuf &pin,
                   size_t bytes) -> char * {
    if (direct) return growDevice(comm, d, bytes);
    // Page-locked when reserveStaged could get it, else the heap.
    if (pin.cap.load(std::memory_order_acquire) >= bytes) return pin.p.load(std::memory_order_acquire);
    return growBuffer(h, bytes);
  };
  CollItem h = ci;
  char *hOut = nullptr, *hIn = nullptr;
  if (recv && outB) {
    hOut = stage(comm->bufStageOut, comm->dStageOut, comm->pStageOut, outB);
    if (!hOut) return flagcxSystemError;
    h.a.recv = hOut;
  }
  bool sendInsideRecv = send && recv && send >= recv && send + inB <= recv + outB;
  bool recvInsideSend = send && recv && !sendInsideRecv && recv >= send && recv + outB <= send + inB;
  if (sendInsideRecv) {
    FLAGCX_CHECK(dev->copy(hOut, recv, outB, nullptr));
    h.a.send = hOut + (send - recv);
  } else if (send && inB) {
    hIn = stage(comm->bufStageIn, comm->dStageIn, comm->pStageIn, inB);
    if (!hIn) return flagcxSystemError;
    h.a.send = hIn;
    if (recvInsideSend) h.a.recv = hIn + (recv - send);
    if (direct || recvInsideSend) {
      FLAGCX_CHECK(dev->copy(hIn, send, inB, nullptr));
    } else {
      flagcxComm::StageGate &g = comm->gate;
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
  bool rootOnly = (ci.a.op == OpKind::Reduce || ci.a.op == OpKind::Gather) && comm->rank != ci.a.root;
  if (!direct && hOut && !recvInsideSend && !rootOnly) comm->sink = {hOut, recv, outB, false};
  flagcxResult_t r = runColl(comm, h);
  ci.flight = h.flight;
  bool sunk = comm->sink.used;
  comm->gate = flagcxComm::StageGate{};
  comm->sink = flagcxComm::StageSink{};
  // Copies still in flight read or write the staging buffers: finish them.
  flagcxResult_t f = direct ? flagcxSuccess : dev->flush();
  FLAGCX_CHECK(r);
  FLAGCX_CHECK(f);
  if (recv && outB && !sunk && !rootOnly) FLAGCX_CHECK(dev->copy(recv, h.a.recv, outB, nullptr));
  return flagcxSuccess;
}

// Point-to-point in direct mode: device buffers are read in place by the
// peer; other buffers go through a device staging area.
flagcxResult_t runP2PDirect(flagcxComm *comm, std::vector<P2PItem> &items) {
  DeviceAdapter *dev = comm->dev;
  size_t staged = 0;
  for (auto &it : items)
    if (it.bytes && !dev->isDeviceMemory(it.buf)) staged += it.bytes;
  char *stage = staged ? growDevice(comm, comm->dStageIn, staged) : nullptr;
  if (staged && !stage) return flagcxSystemError;
  std::vector<P2PItem> h = items;
  size_t off = 0;
  for (auto &it : h) {
    if (!it.bytes || dev->isDeviceMemory(it.buf)) continue;
    if (it.isSend) FLAGCX_CHECK(dev->copy(stage + off, it.buf, it.bytes, nullptr));
    it.buf = stage + off;
    off += it.bytes;
  }
  FLAGCX_CHECK(runP2P(comm, h));
  for (size_t i = 0; i < items.size(); i++)
    if (!items[i].isSend && items[i].bytes && h[i].buf != items[i].buf)
      FLAGCX_CHECK(dev->copy(items[i].buf, h[i].buf, items[i].bytes, nullptr));
  return flagcxSuccess;
}

flagcxResult_t runP2PStaged(flagcxComm *comm, std::vector<P2PItem> &items) {
  if (comm->direct) return runP2PDirect(comm, items);
  size_t total = 0;
  for (auto &it : items) total += it.bytes;
  char *stage = comm->pStageIn.cap.load(std::memory_order_acquire) >= total
                    ? comm->pStageIn.p.load(std::memory_order_acquire)
                    : growBuffer(comm->bufStageIn, total);
  std::vector<P2PItem> h = items;
  size_t off = 0;
  for (auto &it : h) {
    if (it.isSend && it.bytes) FLAGCX_CHECK(comm->dev->copy(stage + off, it.buf, it.bytes, nullptr));
    it.buf = stage + off;
    off += it.bytes;
  }
  FLAGCX_CHECK(runP2P(comm, h));
  off = 0;
  for (size_t i = 0; i < items.size(); i++) {
    if (!items[i].isSend && items[i].bytes)
      FLAGCX_CHECK(comm->dev->copy(items[i].buf, stage + off, items[i].bytes, nullptr));
    off += items[i].bytes;
  }
  return flagcxSuccess;
}

// This rank gave up on an operation: tell every peer at once (an error frame
// on each connection), so that ranks waiting on it fail now, naming the
// cause, instead of at FLAGCX_TIMEOUT.  Mismatches keep their code.
void poisonPeers(flagcxComm *comm, flagcxResult_t res) {
  Conn::Mismatch note;
  for (auto &c : comm->conns)
    if (c && c->mismatch().mine) {
      note = c->mismatch();
      break;
    }
  flagcxResult_t code = res == flagcxInvalidUsage ? flagcxInvalidUsage : flagcxRemoteError;
  uint64_t mine = note.mine ? note.mine : comm->curTag;
  for (auto &c : comm->conns)
    if (c) c->poison(code, mine, note.theirs);
}

flagcxResult_t runJob(void *arg) {
  Job *j = static_cast<Job *>(arg);
  flagcxComm *comm = j->comm;
  logSetRank(comm->rank);
  TRACE(kColl, "rank %d: job #%llu starts (%zu collective(s), %zu p2p)", comm->rank,
        static_cast<unsigned long long>(j->ticket), j->ncolls, j->p2p.size());
  comm->curTag = kP2PTag;
  flagcxResult_t res = commWaitTurn(comm, j->ticket);
  for (size_t k = 0; k < j->ncolls; k++) {
    CollItem &c = j->colls[k];
    if (res != flagcxSuccess) break;
    c.flight = nullptr;
    res = comm->staged ? runCollStaged(comm, c) : runColl(comm, c);
    comm->flight.end(c.flight, res == flagcxSuccess);
  }
  if (res == flagcxSuccess && !j->p2p.empty()) {
    size_t bytes = 0;
    for (auto &p : j->p2p) bytes += p.bytes;
    FlightEntry *fe = comm->flight.begin(j->ticket, "p2p", "-", bytes, -1, -1);
    res = comm->staged ? runP2PStaged(comm, j->p2p) : runP2P(comm, j->p2p);
    comm->flight.end(fe, res == flagcxSuccess);
  }
  if (res != flagcxSuccess) {
    comm->flight.dump(flagcxGetErrorString(res));
    poisonPeers(comm, res);
  }
  commFinishTurn(comm, j->ticket, res);
  returnJob(j);
  comm->inFlight.fetch_sub(1);
  return res;
}

flagcxResult_t launch(Job *j) {
  flagcxComm *comm = j->comm;
  j->ticket = comm->nextTicket.fetch_add(1);
  comm->inFlight.fetch_add(1);
  return comm->dev->enqueue(j->stream, StreamTask{runJob, j});
}

Job *groupJob(flagcxComm *comm, flagcxStream_t stream) {
  for (Job *j : t_group.jobs)
    if (j->comm == comm) return j;
  Job *j = takeJob(comm);
  j->stream = stream;
  t_group.jobs.push_back(j);
  return j;
}

}  // namespace

int groupDepth() { return t_group.depth; }

flagcxResult_t groupStart() {
  if (t_group.depth == 0) vendorGroupStart();
  t_group.depth++;
  return flagcxSuccess;
}

flagcxResult_t groupEnd() {
  if (--t_group.depth > 0) return flagcxSuccess;
  vendorGroupEnd();
  flagcxResult_t res = t_group.deferred;
  t_group.deferred = flagcxSuccess;
  for (Job *j : t_group.jobs) {
    if (res != flagcxSuccess) {
      returnJob(j);
      continue;
    }
    TRACE(kColl, "rank %d: launching job (%zu collective(s))", j->comm->rank, j->ncolls);
    flagcxResult_t r = j->comm->direct ? reserveDirect(j) : flagcxSuccess;
    if (j->comm->staged && !j->comm->direct) reserveStaged(j);
    if (r != flagcxSuccess) {
      returnJob(j);
      res = r;
      continue;
    }
    r = launch(j);
    if (r != flagcxSuccess) res = r;
  }
  t_group.jobs.clear();
  return res;
}

flagcxResult_t enqueueP2P(flagcxComm *comm, bool isSend, void *buf, size_t bytes, int peer,
                          flagcxStream_t stream) {
  if (comm->ccl) {
    // The vendor library moves bytes; the dtype was only needed for the size.
    return isSend ? comm->ccl->send(buf, bytes, flagcxUint8, peer, stream)
                  : comm->ccl->recv(buf, bytes, flagcxUint8, peer, stream);
  }
  bool implicit = t_group.depth == 0;
  if (implicit) groupStart();
  Job *j = groupJob(comm, stream);
  if (j->stream != stream) {
    // One job runs on one stream; the group's first stream carries it.
    WARN(kP2P, "rank %d: a group uses several streams on one communicator; all its operations "
         "run on the first one", comm->rank);
  }
  j->p2p.push_back({isSend, buf, bytes, peer});
  return implicit ? groupEnd() : flagcxSuccess;
}

flagcxResult_t enqueueColl(flagcxComm *comm, const CollArgs &args, flagcxStream_t stream) {
  if (comm->ccl) return comm->ccl->coll(args, stream);
  bool implicit = t_group.depth == 0;
  if (implicit) groupStart();
  Job *j = groupJob(comm, stream);
  // Reuse a pooled item (and its vector's capacity): no allocation per call.
  if (j->ncolls == j->colls.size()) j->colls.emplace_back();
  CollItem &ci = j->colls[j->ncolls++];
  ci.a = args;
  ci.seq = comm->collSeq++;
  ci.flight = nullptr;
  if (args.op == OpKind::AlltoAllv) {
    size_t n = static_cast<size_t>(comm->nranks);
    ci.v.resize(4 * n);
    std::copy(args.sendcounts, args.sendcounts + n, ci.v.begin());
    std::copy(args.sdispls, args.sdispls + n, ci.v.begin() + static_cast<long>(n));
    std::copy(args.recvcounts, args.recvcounts + n, ci.v.begin() + static_cast<long>(2 * n));
    std::copy(args.rdispls, args.rdispls + n, ci.v.begin() + static_cast<long>(3 * n));
  }
  return implicit ? groupEnd() : flagcxSuccess;
}

void freeJobs(flagcxComm *comm) {
  for (Job *j : comm->freeJobs) delete j;
  comm->freeJobs.clear();
}

}  // namespace flagcx
