// The executor.  An API call becomes a Job on the caller's stream; the thread
// that drains the stream runs it when the communicator's issue order says so:
// collectives step by step through their compiled schedules, point-to-point
// operations all posted at once so that grouped sends and receives cannot
// deadlock whatever their order.
#include "core/enqueue.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "adapters/ccl/ccl.h"
#include "core/log.h"
#include "core/params.h"
#include "sched/algo_set.h"
#include "sched/ir_names.h"

namespace flagcx {

namespace {

constexpr uint64_t kP2PTag = 0x5032500000000000ull;

// A collective's tag names the call, so that mismatched calls are caught on
// the first message and both sides can be named: 0xC | seq:20 | op:4 |
// dtype:4 | root:12 | count:20 (low bits).
constexpr uint64_t kCollMark = 0xCull << 60;
uint64_t collTag(uint64_t seq, OpKind op, flagcxDataType_t dt, int root, size_t count) {
  return kCollMark | ((seq & 0xFFFFF) << 40) | (static_cast<uint64_t>(op) << 36) |
         (static_cast<uint64_t>(dt) << 32) | ((static_cast<uint64_t>(root) & 0xFFF) << 20) |
         (count & 0xFFFFF);
}

const char *dtypeName(int dt) {
  static const char *names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                "float16", "float32", "float64", "bfloat16"};
  return dt >= 0 && dt < flagcxNumTypes ? names[dt] : "?";
}

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
      flagcxResult_t r = x.isSend ? x.conn->isend(x.buf, x.bytes, x.tag, &x.req)
                                  : x.conn->irecv(x.buf, x.bytes, x.tag, &x.req);
      if (r != flagcxSuccess) {
        WARN(kColl, "rank %d: %s: posting a %s of %zu bytes %s rank %d failed", comm->rank, what,
             x.isSend ? "send" : "receive", x.bytes, x.isSend ? "to" : "from", x.peer);
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
      if (x.reduceDst && x.bytes)
        FLAGCX_CHECK(comm->dev->reduce(x.reduceDst, x.reduceDst, x.buf, x.bytes / ts, dt, op,
                                       nullptr));
      x.done = true;
      remaining--;
      progressed = true;
      outstanding[static_cast<size_t>(2 * (x.peer * comm->nchannels + x.ch) + (x.isSend ? 1 : 0))]--;
    }
    if (progressed) {
      wait.progressed();
      continue;
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
    if (selfSends[i]->bytes && selfSends[i]->buf != selfRecvs[i]->buf)
      memmove(selfRecvs[i]->buf, selfSends[i]->buf, selfSends[i]->bytes);
  }
  return runXfers(comm, xs, flagcxUint8, flagcxSum, "send/recv");
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
  // Buffers a non-root rank need not pass get a private stand-in.
  if (!isRoot && (a.op == OpKind::Reduce || a.op == OpKind::Gather))
    out.base = growBuffer(comm->bufOutAlt, outBytes);
  if (!isRoot && (a.op == OpKind::Broadcast || a.op == OpKind::Scatter))
    in.base = growBuffer(comm->bufInAlt, inBytes);
  // Schedules assume distinct input and output: snapshot an overlapping input.
  if (in.base && out.base && overlaps(in.base, inBytes, out.base, outBytes)) {
    char *copy = growBuffer(comm->bufInPlace, inBytes);
    memcpy(copy, in.base, inBytes);
    in.base = copy;
  }
  scr.base = growBuffer(comm->bufScratch, scr.total * ts);

  auto bufOf = [&](BufKind b) -> const Bound & {
    return b == BufKind::Input ? in : b == BufKind::Output ? out : scr;
  };
  size_t slice = static_cast<size_t>(std::max<int64_t>(paramInt(Param::NET_CHUNK_SIZE), 4096));
  slice -= slice % ts;
  uint64_t tag = collTag(ci.seq, a.op, a.dtype, rooted ? a.root : 0,
                         a.op == OpKind::AlltoAllv ? 0 : a.count);
  char what[96];
  snprintf(what, sizeof(what), "%s/%s #%llu", opName(a.op), s->algo.c_str(),
           static_cast<unsigned long long>(ci.seq));
  std::vector<Xfer> &xs = comm->scratchXfers;
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
      if (st.kind == StepKind::Copy) {
        if (sp != dp && sb) memcpy(dp, sp, sb);
      } else if (sb) {
        FLAGCX_CHECK(comm->dev->reduce(dp, dp, sp, sb / ts, a.dtype, a.redop, nullptr));
      }
    }
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
    char *land = growBuffer(comm->bufLanding, landing);
    size_t landOff = 0;
    for (size_t k = i; k < end; k++) {
      const Step &st = rs.steps[k];
      if (st.kind == StepKind::Copy || st.kind == StepKind::Reduce) continue;
      char *p;
      size_t b;
      bool isSend = st.kind == StepKind::Send;
      const ChunkRef &ref = isSend ? st.src : st.dst;
      bufOf(ref.buf).range(ref.chunk, &p, &b);
      char *target = st.kind == StepKind::RecvReduce ? land + landOff : p;
      size_t nslices = b == 0 ? 1 : (b + slice - 1) / slice;
      for (size_t sl = 0; sl < nslices; sl++) {
        size_t off = sl * slice, len = std::min(slice, b - std::min(b, off));
        Xfer x{};
        x.ch = static_cast<int>(sl % static_cast<size_t>(comm->nchannels));
        x.conn = comm->conn(st.peer, x.ch);
        x.isSend = isSend;
        x.buf = target + off;
        x.bytes = len;
        x.tag = tag;
        x.peer = st.peer;
        if (st.kind == StepKind::RecvReduce) x.reduceDst = p + off;
        xs.push_back(x);
      }
      if (st.kind == StepKind::RecvReduce) landOff += b;
    }
    FLAGCX_CHECK(runXfers(comm, xs, a.dtype, a.redop, what));
    i = end;
  }
  if (a.redop == flagcxAvg && opReduces(a.op) && isRoot) {
    // Every reducing op's output holds `count` elements (reducescatter: its block).
    FLAGCX_CHECK(comm->dev->divide(a.recv, a.recv, a.count, a.dtype, static_cast<uint64_t>(n), nullptr));
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

flagcxResult_t runCollStaged(flagcxComm *comm, CollItem &ci) {
  DeviceAdapter *dev = comm->dev;
  size_t ts = getFlagcxDataTypeSize(ci.a.dtype);
  size_t inB = elemsIn(ci, comm->nranks) * ts, outB = elemsOut(ci, comm->nranks) * ts;
  const char *send = static_cast<const char *>(ci.a.send);
  char *recv = static_cast<char *>(ci.a.recv);
  CollItem h = ci;
  char *hOut = nullptr, *hIn = nullptr;
  if (recv && outB) {
    hOut = growBuffer(comm->bufStageOut, outB);
    h.a.recv = hOut;
  }
  bool sendInsideRecv = send && recv && send >= recv && send + inB <= recv + outB;
  bool recvInsideSend = send && recv && !sendInsideRecv && recv >= send && recv + outB <= send + inB;
  if (sendInsideRecv) {
    FLAGCX_CHECK(dev->copy(hOut, recv, outB, nullptr));
    h.a.send = hOut + (send - recv);
  } else if (send && inB) {
    hIn = growBuffer(comm->bufStageIn, inB);
    FLAGCX_CHECK(dev->copy(hIn, send, inB, nullptr));
    h.a.send = hIn;
    if (recvInsideSend) h.a.recv = hIn + (recv - send);
  }
  flagcxResult_t r = runColl(comm, h);
  ci.flight = h.flight;
  FLAGCX_CHECK(r);
  if (recv && outB) FLAGCX_CHECK(dev->copy(recv, h.a.recv, outB, nullptr));
  return flagcxSuccess;
}

flagcxResult_t runP2PStaged(flagcxComm *comm, std::vector<P2PItem> &items) {
  size_t total = 0;
  for (auto &it : items) total += it.bytes;
  char *stage = growBuffer(comm->bufStageIn, total);
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

flagcxResult_t runJob(void *arg) {
  Job *j = static_cast<Job *>(arg);
  flagcxComm *comm = j->comm;
  logSetRank(comm->rank);
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
  if (res != flagcxSuccess) comm->flight.dump(flagcxGetErrorString(res));
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

std::string tagText(uint64_t tag) {
  if (tag == kP2PTag) return "send/recv";
  if ((tag >> 60) != 0xC) {
    char b[40];
    snprintf(b, sizeof(b), "tag 0x%llx", static_cast<unsigned long long>(tag));
    return b;
  }
  unsigned op = (tag >> 36) & 0xF;
  char b[160];
  snprintf(b, sizeof(b), "%s #%llu (%s, count %llu, root %llu)",
           op < static_cast<unsigned>(OpKind::Count) ? opName(static_cast<OpKind>(op)) : "?",
           static_cast<unsigned long long>((tag >> 40) & 0xFFFFF),
           dtypeName(static_cast<int>((tag >> 32) & 0xF)),
           static_cast<unsigned long long>(tag & 0xFFFFF),
           static_cast<unsigned long long>((tag >> 20) & 0xFFF));
  return b;
}

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
    flagcxResult_t r = launch(j);
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
