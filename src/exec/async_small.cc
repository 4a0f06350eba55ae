// The stream-ordered small-call path of a staged rank.  On the caller's
// thread, all on the user's stream s, for a call whose input and output fit
// a slot (FLAGCX_STREAM_ASYNC_BYTES):
//   copy input -> slot.in (device to page-locked host); record `ready`;
//   hold s until the slot's word reaches k; copy slot.out -> output;
//   record `freed`; push the slot to the worker; return.
// The worker: wait for `ready` (the input is on the host), run the job as
// a host collective on the slots (the host engine's paths; no device call),
// note a failure on the stream, store k (s goes on).  Nothing the worker
// does needs the device, so nothing can queue behind the hold.  A slot is
// reused once its `freed` event completed; when all are busy the caller
// waits for the oldest, bounded by FLAGCX_TIMEOUT.
#include "exec/async_small.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "adapters/adapters.h"
#include "base/base.h"
#include "exec/state.h"

namespace flagcx {

namespace {
constexpr int kSlots = 32;

struct Slot {
  HoldPoint hp;
  flagcxEvent_t ready = nullptr, freed = nullptr;
  bool busy = false;    // `freed` recorded and maybe not reached
  Job *job = nullptr;
  flagcxStream_t stream = nullptr;
  flagcxResult_t late = flagcxSuccess;  // a failure after the hold was queued
};
}  // namespace

struct AsyncPath {
  ExecState *s = nullptr;
  StreamHold *h = nullptr;
  flagcxDeviceHandle *dh = nullptr;
  size_t maxB = 0;
  char *mem = nullptr;  // kSlots x (in, out), maxB each
  bool ok = false;      // made and usable
  std::atomic<bool> off{false};  // a slot's state is unknown: ordinary path from now on
  Slot slots[kSlots];
  HoldPoint words[kSlots];
  uint64_t next = 0;   // the next slot, under launchMu
  std::mutex launchMu;
  JobRunner run = nullptr;
  std::mutex qmu;
  std::condition_variable qcv;
  std::deque<int> q;
  bool stop = false;
  std::thread worker;
  std::atomic<uint64_t> calls{0};

  char *in(int i) { return mem + static_cast<size_t>(i) * 2 * maxB; }
  char *out(int i) { return in(i) + maxB; }
  void loop();
  flagcxResult_t runSlot(Slot &sl);
};

namespace {

// Poll an event until it completes, bounded by FLAGCX_TIMEOUT.
flagcxResult_t waitEvent(flagcxDeviceHandle *dh, flagcxEvent_t e, const char *what) {
  Backoff wait;
  for (;;) {
    flagcxResult_t r = dh->eventQuery(e);
    if (r == flagcxSuccess) return r;
    if (r != flagcxInProgress) return r;
    if (wait.expired()) {
      WARN(kColl, "stream-ordered small call: %s did not complete within FLAGCX_TIMEOUT=%llds",
           what, static_cast<long long>(paramInt(Param::TIMEOUT)));
      return flagcxSystemError;
    }
    wait.idle();
  }
}

// Set up once per communicator, on the first call that could use it.
AsyncPath *pathOf(ExecState *s) {
  std::lock_guard<std::mutex> g(s->mu);
  if (s->async) return s->async->ok ? s->async.get() : nullptr;
  s->async.reset(new AsyncPath);
  AsyncPath *p = s->async.get();
  p->s = s;
  p->h = s->dev->streamHold();
  p->dh = s->dev->handle();
  p->maxB = static_cast<size_t>(paramInt(Param::STREAM_ASYNC_BYTES) + 63) / 64 * 64;
  if (!p->h || !p->h->usable() || !p->maxB) return nullptr;
  void *mem = nullptr;
  if (s->dev->allocPinned(&mem, kSlots * 2 * p->maxB) != flagcxSuccess) return nullptr;
  p->mem = static_cast<char *>(mem);
  if (p->h->allocWords(kSlots, p->words) != flagcxSuccess) return nullptr;
  for (int i = 0; i < kSlots; i++) {
    p->slots[i].hp = p->words[i];
    if (p->dh->eventCreate(&p->slots[i].ready, flagcxEventDisableTiming) != flagcxSuccess ||
        p->dh->eventCreate(&p->slots[i].freed, flagcxEventDisableTiming) != flagcxSuccess)
      return nullptr;
  }
  p->worker = std::thread([p] { p->loop(); });
  p->ok = true;
  INFO(kColl, "rank %d: calls of up to %zu bytes on a stream return at once (stream-ordered "
       "through %d page-locked slots; FLAGCX_STREAM_ASYNC_BYTES)", s->rank, p->maxB, kSlots);
  return p;
}

// Input bytes this rank copies in and output bytes it copies back.
void rankBytes(const CollArgs &a, int rank, size_t inB, size_t outB, size_t *in, size_t *out) {
  bool rootIn = a.op == OpKind::Broadcast || a.op == OpKind::Scatter;
  bool rootOut = a.op == OpKind::Reduce || a.op == OpKind::Gather;
  *in = (rootIn && rank != a.root) || !a.send ? 0 : inB;
  *out = (rootOut && rank != a.root) || !a.recv ? 0 : outB;
}

}  // namespace

bool asyncShape(const Job *j, int nranks, size_t *inB, size_t *outB) {
  if (j->ncolls != 1 || !j->p2p.empty()) return false;
  const CollItem &ci = j->colls[0];
  if (ci.a.op == OpKind::AlltoAllv) return false;
  size_t ts = getFlagcxDataTypeSize(ci.a.dtype);
  *inB = elemsIn(ci, nranks) * ts;
  *outB = elemsOut(ci, nranks) * ts;
  return true;
}

flagcxResult_t AsyncPath::runSlot(Slot &sl) {
  flagcxResult_t r = waitEvent(dh, sl.ready, "the copy of an input to the host");
  if (r != flagcxSuccess) {
    // The input never arrived: the job passes its turn without running
    // (its peers fail at their FLAGCX_TIMEOUT).
    sl.job->ncolls = 0;
    int expected = flagcxSuccess;
    s->asyncError.compare_exchange_strong(expected, r);
  }
  flagcxResult_t jr = run(sl.job);  // returns the job to the pool
  if (r == flagcxSuccess) r = jr;
  return r != flagcxSuccess ? r : sl.late;
}

void AsyncPath::loop() {
  for (;;) {
    int i;
    {
      std::unique_lock<std::mutex> lk(qmu);
      qcv.wait(lk, [this] { return stop || !q.empty(); });
      if (q.empty()) return;
      i = q.front();
      q.pop_front();
    }
    Slot &sl = slots[i];
    const HoldPoint hp = sl.hp;  // the slot is the caller's again once released
    flagcxStream_t st = sl.stream;
    flagcxResult_t r = runSlot(sl);
    if (r != flagcxSuccess) h->noteError(st, r);
    StreamHold::release(hp);  // even after a failure: the stream never hangs
  }
}

void AsyncPathFree::operator()(AsyncPath *p) const {
  {
    std::lock_guard<std::mutex> g(p->qmu);
    p->stop = true;
  }
  p->qcv.notify_one();
  if (p->worker.joinable()) p->worker.join();
  bool idle = true;
  for (Slot &sl : p->slots)
    if (sl.busy && waitEvent(p->dh, sl.freed, "a copy out of a slot") != flagcxSuccess) idle = false;
  for (Slot &sl : p->slots) {
    if (sl.ready) p->dh->eventDestroy(sl.ready);
    if (sl.freed) p->dh->eventDestroy(sl.freed);
  }
  if (idle) {  // else leave them: the device may still write there
    if (p->words[0].word) p->h->freeWords(kSlots, p->words);
    if (p->mem) p->s->dev->freePinned(p->mem);
  }
  delete p;
}

namespace {

// The next slot, once its last copy out is done (the caller waits for the
// oldest call when all are busy).
flagcxResult_t claimSlot(AsyncPath *p, int *idx) {
  int i = static_cast<int>(p->next % kSlots);
  Slot &sl = p->slots[i];
  if (sl.busy) FLAGCX_CHECK(waitEvent(p->dh, sl.freed, "the oldest stream-ordered call"));
  sl.busy = false;
  *idx = i;
  return flagcxSuccess;
}

// Queue the slot's copies and hold on the stream.  *held: the hold is
// queued (from then on the worker must release it).
flagcxResult_t queueSlot(AsyncPath *p, int i, const CollArgs &a, size_t in, size_t out, bool *held) {
  Slot &sl = p->slots[i];
  DeviceAdapter *dev = p->s->dev;
  flagcxStream_t st = sl.stream;
  if (in) FLAGCX_CHECK(dev->copy(p->in(i), a.send, in, st));
  FLAGCX_CHECK(p->dh->eventRecord(sl.ready, st));
  sl.hp.k++;
  FLAGCX_CHECK(p->h->hold(st, &sl.hp));
  *held = true;
  if (out) sl.late = dev->copy(a.recv, p->out(i), out, st);
  return flagcxSuccess;
}

}  // namespace

bool asyncLaunch(Job *j, JobRunner run, flagcxResult_t *res) {
  ExecState *s = j->ex;
  size_t inB = 0, outB = 0;
  if (s->mode != ExecMode::Staged || !j->stream || !asyncShape(j, s->nranks, &inB, &outB))
    return false;
  if (paramInt(Param::STREAM_ASYNC_BYTES) <= 0) return false;
  AsyncPath *p = pathOf(s);
  if (!p || p->off.load() || inB > p->maxB || outB > p->maxB || !p->h->canHold(j->stream))
    return false;
  CollItem &ci = j->colls[0];
  size_t in = 0, out = 0;
  rankBytes(ci.a, s->rank, inB, outB, &in, &out);
  if ((in && !p->h->streamOrdered(ci.a.send)) || (out && !p->h->streamOrdered(ci.a.recv)))
    return false;  // host buffers of a device rank: the ordinary path
  std::lock_guard<std::mutex> g(p->launchMu);
  int i = 0;
  if ((*res = claimSlot(p, &i)) != flagcxSuccess) {  // nothing queued: the job goes back
    std::lock_guard<std::mutex> lk(s->mu);
    s->freeJobs.push_back(j);
    return true;
  }
  Slot &sl = p->slots[i];
  sl.stream = j->stream;
  sl.late = flagcxSuccess;
  bool held = false;
  flagcxResult_t r = queueSlot(p, i, ci.a, in, out, &held);
  // `freed` marks the slot's last use on the stream (also after a failure).
  sl.busy = p->dh->eventRecord(sl.freed, j->stream) == flagcxSuccess;
  if (!sl.busy) p->off = true;
  if (!held) {
    // Nothing waits on the stream: the ordinary path runs the call.
    WARN(kColl, "rank %d: stream-ordered small call not queued (%s); the call blocks instead",
         s->rank, flagcxGetErrorString(r));
    return false;
  }
  p->next++;
  ci.a.send = ci.a.send ? p->in(i) : nullptr;
  ci.a.recv = ci.a.recv ? p->out(i) : nullptr;
  ci.hostBufs = true;
  sl.job = j;
  p->run = run;
  j->ticket = s->nextTicket.fetch_add(1);
  s->inFlight.fetch_add(1);
  p->calls.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> q(p->qmu);
    p->q.push_back(i);
  }
  p->qcv.notify_one();
  *res = r != flagcxSuccess ? r : sl.late;
  return true;
}

uint64_t asyncCalls(const ExecState *s) { return s->async ? s->async->calls.load() : 0; }

}  // namespace flagcx
