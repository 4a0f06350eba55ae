// Posting and progressing the messages of one stage (or one group of
// sends and receives) on the transports, with the per-Conn limits, the
// idle sweep that notices a peer that gave up, and FLAGCX_TIMEOUT.
#include <poll.h>

#include <algorithm>
#include <string>
#include <vector>

#include "adapters/adapters.h"
#include "base/base.h"
#include "exec/copy_worker.h"
#include "exec/state.h"
#include "net/net.h"
#include "rendezvous/rendezvous.h"

namespace flagcx {

bool everyPeerConnected(const ExecState *s) {
  for (int p = 0; p < s->nranks; p++)
    if (p != s->rank && !s->conn(p)) return false;
  return true;
}

flagcxResult_t connectFor(ExecState *s, const std::vector<int> &peers) {
  std::vector<int> &want = s->sched->scratchPeers;
  want.clear();
  for (int p : peers)
    if (p != s->rank && !s->conn(p)) want.push_back(p);
  if (want.empty()) return flagcxSuccess;
  std::sort(want.begin(), want.end());
  want.erase(std::unique(want.begin(), want.end()), want.end());
  if (!s->env.connect) {
    WARN(kNet, "rank %d: no connection to rank %d and no way to make one", s->rank, want[0]);
    return flagcxInternalError;
  }
  TRACE(kNet, "rank %d: connecting to %zu more peer(s) on first use", s->rank, want.size());
  std::vector<int> copy = want;  // the callee may use the scratch vectors
  FLAGCX_CHECK(s->env.connect(copy));
  s->allConnected = everyPeerConnected(s);
  return flagcxSuccess;
}

// Post and progress every transfer in `xs`; keep per-Conn posting order and
// the per-Conn limit on outstanding requests.  Sends and receives are
// ordered separately on a Conn, so each direction has its own half of the
// limit: a long run of sends can never keep the receives that its peer needs
// from being posted (that deadlocked large exchanges).
flagcxResult_t sweepPeers(ExecState *s, const char *what) {
  for (auto &c : *s->env.conns) {
    if (!c) continue;
    flagcxResult_t r = c->progress();
    // A peer that gave up on a later call finished this one: what it sent
    // for it arrived before its error frame, and test() hands it over.
    // The next call fails on that Conn, naming both sides.
    if (r == flagcxSuccess || laterCall(c->peerGaveUpOn(), s->curTag)) continue;
    std::string cause = lastErrorText();
    WARN(kColl, "rank %d: %s: rank %d failed: %s", s->rank, what, c->peer(), cause.c_str());
    return r;
  }
  return flagcxSuccess;
}

namespace {
flagcxResult_t finishWork(ExecState *s, LocalWork *work) {
  bool did = false;
  while (work && work->pending()) FLAGCX_CHECK(localWorkPiece(s, *work, true, &did));
  return flagcxSuccess;
}

// Nothing moved for a while: when every Conn still owed something can name
// the descriptors it waits on (a socket Conn whose helper threads have a job:
// FramedConn::waitFds), sleep in poll() until one is ready, so the cores go
// to the helpers and the peer instead of to spinning.  False: no such sleep.
bool sleepOnConns(ExecState *s, const std::vector<Xfer> &xs) {
  if (s->sched->staged.gate.base) return false;  // device copies are polled, not waited on
  constexpr int kMax = 64;
  pollfd fds[kMax];
  Conn *asked[kMax];  // Conns repeat across slices: ask each once
  int n = 0, nasked = 0;
  for (const auto &x : xs) {
    if (x.done || std::find(asked, asked + nasked, x.conn) != asked + nasked) continue;
    if (nasked == kMax) return false;
    asked[nasked++] = x.conn;
    int k = x.conn->waitFds(fds + n, kMax - n);
    if (k < 0) return false;
    n += k;
  }
  if (n == 0) return false;
  // Bounded, so that the stall clock and liveness checks keep running.
  poll(fds, static_cast<nfds_t>(n), 10);
  return true;
}

// The outstanding-request counter of x's Conn and direction.
size_t dirIndex(const ExecState *s, const Xfer &x) {
  return static_cast<size_t>(2 * (x.peer * s->nchannels + x.ch) + (x.isSend ? 1 : 0));
}

// Post what fits, in order per Conn and direction.
flagcxResult_t postXfers(ExecState *s, std::vector<Xfer> &xs, flagcxDataType_t dt,
                         flagcxRedOp_t op, const char *what, bool *progressed) {
  constexpr int kLimit = Conn::kMaxPosted / 2 - 8;  // per direction
  std::vector<int> &outstanding = s->sched->scratchCounts;
  std::vector<char> &blocked = s->sched->scratchFlags;
  blocked.assign(outstanding.size(), 0);
  const size_t ts = dtypeSize(dt);
  for (auto &x : xs) {
    if (x.posted) continue;
    size_t ci = dirIndex(s, x);
    if (blocked[ci] || outstanding[ci] >= kLimit) {
      blocked[ci] = 1;
      continue;
    }
    if (x.isSend && s->sched->staged.gate.base) {  // its bytes may still be on their way from the device
      bool ready = false;
      FLAGCX_CHECK(gateReady(s, x.buf, x.bytes, &ready));
      if (!ready) {
        blocked[ci] = 1;
        continue;
      }
    }
    flagcxResult_t r;
    if (x.isSend) {
      r = x.conn->isend(x.buf, x.bytes, x.tag, &x.req);
    } else if (x.reduceDst && x.bytes && x.conn->foldsOnReceive(x.bytes)) {
      RecvFold f;
      f.dst = x.reduceDst;
      f.base = x.reduceBase;
      f.elem = ts;
      f.dt = dt;
      f.op = op;
      r = x.conn->irecvFold(x.buf, x.bytes, x.tag, f, &x.req);
      x.folded = true;
    } else {
      r = x.conn->irecv(x.buf, x.bytes, x.tag, &x.req);
    }
    if (r != flagcxSuccess) {
      std::string cause = lastErrorText();  // the transport's own line, if any
      WARN(kColl, "rank %d: %s: posting a %s of %zu bytes %s rank %d failed: %s", s->rank,
           what, x.isSend ? "send" : "receive", x.bytes, x.isSend ? "to" : "from", x.peer,
           cause.c_str());
      return r;
    }
    x.posted = true;
    outstanding[ci]++;
    *progressed = true;
  }
  return flagcxSuccess;
}

// Complete what is done; a received message to be reduced is reduced now
// (host memory only here: device buffers are staged or go direct) unless
// its Conn folded it on arrival.
flagcxResult_t testXfers(ExecState *s, std::vector<Xfer> &xs, flagcxDataType_t dt,
                         flagcxRedOp_t op, const char *what, size_t *remaining,
                         bool *progressed) {
  const size_t ts = dtypeSize(dt);
  for (auto &x : xs) {
    if (!x.posted || x.done) continue;
    bool done = false;
    size_t got = 0;
    flagcxResult_t r = x.conn->test(x.req, &done, &got);
    if (r != flagcxSuccess) {
      std::string cause = lastErrorText();  // the transport's own line
      WARN(kColl, "rank %d: %s: %s of %zu bytes %s rank %d (%s) failed: %s", s->rank, what,
           x.isSend ? "send" : "receive", x.bytes, x.isSend ? "to" : "from", x.peer,
           s->env.bs->peers()[static_cast<size_t>(x.peer)].host, cause.c_str());
      return r;
    }
    if (!done) continue;
    if (!x.isSend && got != x.bytes) {
      WARN(kColl, "rank %d: %s: received %zu bytes from rank %d, expected %zu (mismatched "
           "calls?)", s->rank, what, got, x.peer, x.bytes);
      return flagcxInvalidUsage;
    }
    if (x.reduceDst && x.bytes && !x.folded)
      FLAGCX_CHECK(hostReduce(x.reduceDst, x.reduceBase ? x.reduceBase : x.reduceDst, x.buf,
                              x.bytes / ts, dt, op));
    x.done = true;
    (*remaining)--;
    *progressed = true;
    s->sched->scratchCounts[dirIndex(s, x)]--;
  }
  return flagcxSuccess;
}

// Nothing moved for FLAGCX_TIMEOUT: say what this rank still waits for.
flagcxResult_t stalled(ExecState *s, const std::vector<Xfer> &xs, const char *what) {
  std::string pending;
  for (auto &x : xs)
    if (!x.done && pending.size() < 200)
      pending += std::string(pending.empty() ? "" : ", ") +
                 (x.isSend ? "rank " + std::to_string(x.peer) + " to take a message"
                           : "a message from rank " + std::to_string(x.peer));
  WARN(kColl, "rank %d: %s: nothing moved for FLAGCX_TIMEOUT=%llds; waiting for %s "
       "(a peer in another call, or none, looks like this)",
       s->rank, what, static_cast<long long>(paramInt(Param::TIMEOUT)), pending.c_str());
  return flagcxRemoteError;
}
}  // namespace

flagcxResult_t runXfers(ExecState *s, std::vector<Xfer> &xs, flagcxDataType_t dt,
                        flagcxRedOp_t op, const char *what, LocalWork *work) {
  if (xs.empty()) return finishWork(s, work);
  // The copy thread's batch ends before this returns, errors included: the
  // caller may free or reuse the buffers then.
  struct Join {
    CopyWorker *w = nullptr;
    ~Join() {
      if (w) w->wait();
    }
  } join;
  if (work && work->pending() && copyThreadFits(s, *work)) {
    s->sched->copyThread->start(work->items.data() + work->next, work->items.size() - work->next);
    work->next = work->items.size();
    join.w = s->sched->copyThread.get();
  }
  size_t remaining = xs.size();
  Backoff wait;
  s->sched->scratchCounts.assign(static_cast<size_t>(2 * s->nranks * s->nchannels), 0);
  unsigned idleRounds = 0;
  while (remaining > 0) {
    if (s->aborting) return flagcxRemoteError;
    bool progressed = false;
    FLAGCX_CHECK(postXfers(s, xs, dt, op, what, &progressed));
    FLAGCX_CHECK(testXfers(s, xs, dt, op, what, &remaining, &progressed));
    // A piece of the stage's local work per round while messages move.
    if (work && work->pending()) {
      bool did = false;
      FLAGCX_CHECK(localWorkPiece(s, *work, false, &did));
      progressed = progressed || did;
    }
    if (progressed) {
      wait.progressed();
      idleRounds = 0;
      continue;
    }
    if (join.w && join.w->help()) continue;  // a piece of the copy thread's batch
    // Now and then, look at every peer: one that gave up (an error frame)
    // fails this operation at once, even when this stage waits on others.
    if (++idleRounds % 256 == 0) FLAGCX_CHECK(sweepPeers(s, what));
    if (wait.expired()) return stalled(s, xs, what);
    if (wait.spinning() || !sleepOnConns(s, xs)) wait.idle();
  }
  return finishWork(s, work);
}

}  // namespace flagcx
