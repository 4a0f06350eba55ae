// Host streams and events.
//
// Why the worker is never woken per enqueue: a futex wake costs microseconds
// on the enqueuing thread, more than a small collective.  Instead the runner
// role (exactly one thread runs a stream's entries at a time, in order) goes
// to whoever claims it first under the stream mutex:
//  - streamSynchronize/streamQuery/eventSynchronize find pending entries and
//    no runner, so they run them inline on the caller's thread: enqueue + sync
//    costs two uncontended mutex round trips plus the work itself;
//  - the worker polls lazily: after any activity it sleeps in 1 ms timed waits
//    (so work that nobody synchronizes starts within ~1 ms), and only after
//    kIdlePolls empty polls does it park in an untimed wait.  Enqueue notifies
//    only a parked worker, once per park: a stream that is in use never pays
//    for a wake-up, an idle one pays once.
// A synchronizer that finds another thread running spins briefly, then sleeps
// on doneCv; runners notify it only when someone waits and, between batches,
// only once the smallest target among the waiters is reached.
#include "host_stream.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/base.h"

namespace flagcx::host {
namespace {

constexpr int kIdlePolls = 20;  // ~20 ms of lazy polling before parking
constexpr auto kPoll = std::chrono::milliseconds(1);
constexpr int kSpin = 200;  // a few microseconds of pause instructions
constexpr size_t kInitialCapacity = 64;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

using Lock = std::unique_lock<std::mutex>;

// After a batch: wake the synchronizers once one of them has its entries
// done (not after every batch: with calls queued ahead, a waiter woken per
// batch of 16 only goes back to sleep, a futex round trip and a context
// switch on the core the runner needs).  When the runner role is released
// (`always`) they are woken in any case: one of them may have to take it.
void notifyWaiters(flagcxStream *s, bool always) {
  if (s->waiters > 0 && (always || s->done.load(std::memory_order_relaxed) >= s->wakeAt))
    s->doneCv.notify_all();
}

// Caller holds s->mu and has set s->running.  Runs entries, in order, until
// `target` entries are done or the queue is empty.  Entries are claimed in
// batches of up to kBatch under the mutex and run with it released, so a
// caller that keeps enqueueing (a benchmark loop, a training step) and the
// runner meet on the mutex once per batch, not once per entry; tasks may
// enqueue (even onto this stream) while they run.  `done` advances after
// every entry (its readers spin on it); sleepers are woken once per batch.
constexpr size_t kBatch = 16;

void drainLocked(flagcxStream *s, Lock &lk, uint64_t target) {
  Entry batch[kBatch];
  while (s->head < s->tail && s->head < target) {
    uint64_t end = std::min(std::min(s->tail, target), s->head + kBatch);
    size_t k = static_cast<size_t>(end - s->head);
    for (size_t i = 0; i < k; i++) batch[i] = s->ring[(s->head + i) & (s->ring.size() - 1)];
    s->head = end;
    lk.unlock();
    for (size_t i = 0; i < k; i++) {
      const Entry &e = batch[i];
      flagcxResult_t r = flagcxSuccess;
      // After a failure the rest is skipped, except event markers: an event
      // must still complete, or whoever waits for it would hang.
      if (s->error.load(std::memory_order_relaxed) == flagcxSuccess || e.kind == Entry::EventRecord)
        r = runEntry(e);
      else if (e.kind == Entry::EventWait)
        streamRelease(e.ev.stream);  // skipped, but its reference goes
      int none = flagcxSuccess;
      if (r != flagcxSuccess && s->error.compare_exchange_strong(none, r, std::memory_order_relaxed))
        INFO(kColl, "host stream %p: work failed (%s); later work on it is skipped",
             static_cast<void *>(s), flagcxGetErrorString(r));
      s->done.store(s->done.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
    lk.lock();
    notifyWaiters(s, false);
  }
}

// Claims the runner role if free and drains up to `target`.
bool tryRun(flagcxStream *s, Lock &lk, uint64_t target) {
  if (s->running.load(std::memory_order_relaxed)) return false;
  s->running.store(true, std::memory_order_relaxed);
  drainLocked(s, lk, target);
  s->running.store(false, std::memory_order_release);
  notifyWaiters(s, true);
  return true;
}

void grow(flagcxStream *s) {
  size_t cap = s->ring.size();
  size_t ncap = cap ? cap * 2 : kInitialCapacity;
  std::vector<Entry> n(ncap);
  for (uint64_t i = s->head; i < s->tail; i++) n[i & (ncap - 1)] = s->ring[i & (cap - 1)];
  s->ring.swap(n);
}

// Returns true when the caller must notify the parked worker (after unlocking).
bool enqueueLocked(flagcxStream *s, const Entry &e) {
  if (s->tail - s->head == s->ring.size()) grow(s);
  s->ring[s->tail & (s->ring.size() - 1)] = e;
  s->tail++;
  if (s->parked && !s->wakeSent) {
    s->wakeSent = true;
    return true;
  }
  return false;
}

void workerMain(flagcxStream *s) {
  pthread_setname_np(pthread_self(), "flagcx-stream");
  Lock lk(s->mu);
  int idle = 0;
  for (;;) {
    if (s->head < s->tail && !s->running.load(std::memory_order_relaxed)) {
      tryRun(s, lk, UINT64_MAX);
      idle = 0;
      continue;
    }
    if (s->stop && s->head == s->tail) break;
    if (s->head < s->tail || idle < kIdlePolls) {
      // Pending work another thread is running, or recently busy: poll.
      if (s->head == s->tail) idle++;
      s->workCv.wait_for(lk, kPoll);
    } else {
      s->parked = true;
      s->wakeSent = false;
      // Every wake-up consumes the one notify in flight: if a synchronizer
      // ran the queued work before this thread got the CPU, the next enqueue
      // must notify again (with wakeSent left set, none would, and queued
      // work would wait for a synchronize).
      while (s->head == s->tail && !s->stop) {
        s->workCv.wait(lk);
        s->wakeSent = false;
      }
      s->parked = false;
    }
  }
}

// Blocks until `target` entries of s are done, running them inline when no
// other thread is.
flagcxResult_t syncUpTo(flagcxStream *s, uint64_t target) {
  Lock lk(s->mu);
  s->users++;  // streamDestroy waits for this thread to leave
  while (s->done.load(std::memory_order_acquire) < target) {
    if (tryRun(s, lk, target)) continue;
    lk.unlock();
    for (int i = 0; i < kSpin && s->done.load(std::memory_order_acquire) < target &&
                    s->running.load(std::memory_order_acquire);
         i++)
      cpuRelax();
    lk.lock();
    if (s->done.load(std::memory_order_acquire) >= target || !s->running.load(std::memory_order_relaxed))
      continue;
    s->waiters++;
    s->wakeAt = std::min(s->wakeAt, target);
    s->doneCv.wait(lk);
    if (--s->waiters == 0) s->wakeAt = UINT64_MAX;
  }
  s->users--;
  return static_cast<flagcxResult_t>(s->error.load(std::memory_order_relaxed));
}

// Non-blocking progress: runs pending work up to `target` inline if nobody
// else is running the stream.  True when the target is reached.
bool progressUpTo(flagcxStream *s, uint64_t target) {
  if (s->done.load(std::memory_order_acquire) >= target) return true;
  Lock lk(s->mu);
  tryRun(s, lk, target);
  return s->done.load(std::memory_order_acquire) >= target;
}

// Drops one reference to e (its owner's or a queued marker's); the last frees
// it, and with it its reference to the stream of its latest record.
void eventRelease(flagcxEvent *e) {
  if (e->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (flagcxStream *s = e->stream.load(std::memory_order_relaxed)) streamRelease(s);
  delete e;
}

// The stream of e's latest record and its ticket, read together under e->mu
// (a concurrent re-record on another stream could otherwise pair that stream
// with the old stream's ticket, which it may never reach), with a reference
// to the stream the caller drops (it may be destroyed meanwhile: the event's
// own reference keeps it valid only while e->mu is held).
flagcxStream *eventStream(flagcxEvent *e, uint64_t *gen, uint64_t *ticket) {
  std::lock_guard<std::mutex> g(e->mu);
  *gen = e->recorded.load(std::memory_order_relaxed);
  *ticket = e->ticket.load(std::memory_order_relaxed);
  flagcxStream *s = e->stream.load(std::memory_order_relaxed);
  if (s) streamRetain(s);
  return s;
}

// A marker ran: `gen` is complete.  `queued` markers hold a reference to
// the event (an earlier record on another stream may run after the event's
// owner destroyed it) and drop it here, last.
void markComplete(flagcxEvent *e, uint64_t gen, bool queued) {
  if (gen == e->recorded.load(std::memory_order_relaxed) && e->timing)
    e->stampNs.store(nowNs(), std::memory_order_relaxed);
  uint64_t c = e->completed.load(std::memory_order_relaxed);
  while (c < gen && !e->completed.compare_exchange_weak(c, gen, std::memory_order_release,
                                                        std::memory_order_relaxed)) {
  }
  if (queued) eventRelease(e);
}

bool eventDone(const flagcxEvent *e) {
  return e->completed.load(std::memory_order_acquire) >= e->recorded.load(std::memory_order_acquire);
}

}  // namespace

flagcxResult_t runEntry(const Entry &e) {
  switch (e.kind) {
    case Entry::Task:
      return e.task.run(e.task.arg);
    case Entry::Copy: {
      const char *src = static_cast<const char *>(e.copy.src);
      char *dst = static_cast<char *>(e.copy.dst);
      if (e.copy.bytes == 0 || dst == src) return flagcxSuccess;
      if (dst + e.copy.bytes <= src || src + e.copy.bytes <= dst)
        flagcx::copyBytes(dst, src, e.copy.bytes);
      else
        memmove(dst, src, e.copy.bytes);
      return flagcxSuccess;
    }
    case Entry::Set:
      if (e.set.bytes) memset(e.set.dst, e.set.value, e.set.bytes);
      return flagcxSuccess;
    case Entry::Reduce:
      return hostReduce(e.reduce.dst, e.reduce.a, e.reduce.b, e.reduce.count, e.reduce.dtype,
                        e.reduce.op);
    case Entry::Divide:
      return hostDivide(e.divide.dst, e.divide.src, e.divide.count, e.divide.dtype,
                        e.divide.divisor);
    case Entry::EventRecord:
      markComplete(e.ev.event, e.ev.gen, true);
      return flagcxSuccess;
    case Entry::EventWait:
      // The event's marker is entry `ticket` of its stream: drive that stream
      // (inline if idle) until it has run.  Errors stay on their own stream.
      // The entry holds a reference: that stream may be destroyed meanwhile
      // (its destroy ran the marker, so this returns at once).
      syncUpTo(e.ev.stream, e.ev.ticket);
      streamRelease(e.ev.stream);
      return flagcxSuccess;
  }
  return flagcxInternalError;
}

bool streamValid(const flagcxStream *s) {
  return s && s->magic.load(std::memory_order_relaxed) == flagcxStream::kMagic;
}

bool eventValid(const flagcxEvent *e) {
  return e && e->magic.load(std::memory_order_relaxed) == flagcxEvent::kMagic;
}

flagcxResult_t streamCreate(flagcxStream **out) {
  auto *s = new (std::nothrow) flagcxStream();
  if (!s) return argError(flagcxSystemError, kAlloc, "streamCreate: out of memory");
  s->ring.resize(kInitialCapacity);
  try {
    s->worker = std::thread(workerMain, s);
  } catch (const std::exception &ex) {
    delete s;
    return argError(flagcxSystemError, kInit, "streamCreate: cannot start the stream thread (%s)",
                    ex.what());
  }
  *out = s;
  return flagcxSuccess;
}

flagcxResult_t streamDestroy(flagcxStream *s) {
  // Work already queued still runs (as on a device stream), then the worker exits.
  uint64_t target;
  {
    Lock lk(s->mu);
    target = s->tail;
  }
  syncUpTo(s, target);
  {
    Lock lk(s->mu);
    s->stop = true;
  }
  s->workCv.notify_one();
  s->worker.join();
  // Another thread may have run the last entries (a synchronize, or a
  // stream waiting on an event recorded here) and still be inside: it
  // stored `done`, which let this thread past syncUpTo, but has yet to
  // release the runner role or leave its own wait.  Its entries are done,
  // so this wait is short.
  for (;;) {
    {
      Lock lk(s->mu);
      if (!s->running.load(std::memory_order_relaxed) && s->users == 0) break;
    }
    std::this_thread::yield();
  }
  s->magic.store(0, std::memory_order_relaxed);
  streamRelease(s);
  return flagcxSuccess;
}

void streamRetain(flagcxStream *s) { s->refs.fetch_add(1, std::memory_order_relaxed); }

void streamRelease(flagcxStream *s) {
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete s;
}

namespace {

flagcxResult_t enqueue(flagcxStream *s, const Entry &e, bool runIfIdle) {
  bool wake;
  {
    Lock lk(s->mu);
    bool idle = runIfIdle && s->head == s->tail && !s->running.load(std::memory_order_relaxed);
    wake = enqueueLocked(s, e);
    if (idle) {
      // The entry runs here, so the wake-up is not sent: the parked worker
      // must stay wakeable, or every later enqueue would count on a wake-up
      // that never came and queued work would wait for a synchronize.
      if (wake) s->wakeSent = false;
      wake = false;
      tryRun(s, lk, s->tail);
    }
  }
  if (wake) s->workCv.notify_one();
  return flagcxSuccess;
}

}  // namespace

flagcxResult_t streamEnqueue(flagcxStream *s, const Entry &e) { return enqueue(s, e, false); }
flagcxResult_t streamEnqueueOrRun(flagcxStream *s, const Entry &e) { return enqueue(s, e, true); }

flagcxResult_t streamSynchronize(flagcxStream *s) {
  uint64_t target;
  {
    Lock lk(s->mu);
    target = s->tail;
  }
  return syncUpTo(s, target);
}

flagcxResult_t streamQuery(flagcxStream *s) {
  Lock lk(s->mu);
  if (s->done.load(std::memory_order_relaxed) < s->tail) {
    tryRun(s, lk, s->tail);
    if (s->done.load(std::memory_order_relaxed) < s->tail) return flagcxInProgress;
  }
  return static_cast<flagcxResult_t>(s->error.load(std::memory_order_relaxed));
}

flagcxResult_t eventCreate(flagcxEvent **out, bool timing) {
  auto *e = new (std::nothrow) flagcxEvent();
  if (!e) return argError(flagcxSystemError, kAlloc, "eventCreate: out of memory");
  e->timing = timing;
  *out = e;
  return flagcxSuccess;
}

flagcxResult_t eventDestroy(flagcxEvent *e) {
  // The latest record completes first (as before); markers of earlier
  // records on other streams may still be queued and free the event last.
  eventSynchronize(e);
  e->magic.store(0, std::memory_order_relaxed);
  eventRelease(e);
  return flagcxSuccess;
}

flagcxResult_t eventRecord(flagcxEvent *e, flagcxStream *s) {
  std::lock_guard<std::mutex> g(e->mu);
  uint64_t gen = e->recorded.load(std::memory_order_relaxed) + 1;
  // The event holds a reference to the stream of its latest record, so that
  // whoever finds that stream through the event (a query, a synchronize, a
  // wait on another stream) can take its own reference under e->mu, even
  // while another thread destroys the stream.
  // (The new one first: re-recording on the same stream never drops it to 0.)
  if (s) streamRetain(s);
  if (flagcxStream *old = e->stream.load(std::memory_order_relaxed)) streamRelease(old);
  if (!s) {  // the NULL stream: everything before is already done
    e->stream.store(nullptr, std::memory_order_relaxed);
    e->recorded.store(gen, std::memory_order_release);
    markComplete(e, gen, false);
    return flagcxSuccess;
  }
  Entry entry{};
  entry.kind = Entry::EventRecord;
  entry.ev.event = e;
  entry.ev.gen = gen;
  bool wake;
  e->refs.fetch_add(1, std::memory_order_relaxed);  // the marker's, dropped when it runs
  {
    Lock lk(s->mu);
    e->stream.store(s, std::memory_order_relaxed);
    e->ticket.store(s->tail + 1, std::memory_order_relaxed);
    e->recorded.store(gen, std::memory_order_release);
    wake = enqueueLocked(s, entry);
  }
  if (wake) s->workCv.notify_one();
  return flagcxSuccess;
}

flagcxResult_t eventQuery(flagcxEvent *e) {
  if (eventDone(e)) return flagcxSuccess;
  uint64_t gen, ticket;
  if (flagcxStream *s = eventStream(e, &gen, &ticket)) {
    progressUpTo(s, ticket);
    streamRelease(s);
  }
  return eventDone(e) ? flagcxSuccess : flagcxInProgress;
}

flagcxResult_t eventSynchronize(flagcxEvent *e) {
  if (eventDone(e)) return flagcxSuccess;
  // The record's generation, stream and ticket as one (eventRecord sets
  // them together under e->mu): read apart, a concurrent re-record on
  // another stream could pair that stream with the old stream's ticket,
  // which it may never reach.
  uint64_t gen, ticket;
  flagcxStream *s = eventStream(e, &gen, &ticket);
  if (!s) return flagcxSuccess;
  // Once the stream passes the ticket, gen's marker has run and completed
  // is at least gen (markComplete only raises it).
  if (e->completed.load(std::memory_order_acquire) < gen) syncUpTo(s, ticket);
  streamRelease(s);
  return flagcxSuccess;
}

flagcxResult_t streamWaitEvent(flagcxStream *s, flagcxEvent *e) {
  Entry entry{};
  {
    std::lock_guard<std::mutex> g(e->mu);
    uint64_t gen = e->recorded.load(std::memory_order_relaxed);
    if (gen == 0 || e->completed.load(std::memory_order_acquire) >= gen) return flagcxSuccess;
    entry.kind = Entry::EventWait;
    entry.ev.event = e;
    entry.ev.gen = gen;
    entry.ev.stream = e->stream.load(std::memory_order_relaxed);
    entry.ev.ticket = e->ticket.load(std::memory_order_relaxed);
    if (entry.ev.stream == s) return flagcxSuccess;  // already ordered behind the marker
    // Valid here (the event's reference, under e->mu); dropped when the
    // entry runs.
    streamRetain(entry.ev.stream);
  }
  if (!s) return runEntry(entry);  // the NULL stream waits now
  return streamEnqueue(s, entry);
}

}  // namespace flagcx::host

namespace flagcx {

flagcxResult_t hostEventElapsedMs(flagcxEvent_t start, flagcxEvent_t end, float *ms) {
  if (!ms) return argError(flagcxInvalidArgument, kInit, "eventElapsedMs: ms is NULL");
  if (!host::eventValid(start) || !host::eventValid(end))
    return argError(flagcxInvalidArgument, kInit, "eventElapsedMs: invalid event");
  if (!start->timing || !end->timing)
    return argError(flagcxInvalidUsage, kInit,
                    "eventElapsedMs: event created with flagcxEventDisableTiming");
  if (start->recorded.load() == 0 || end->recorded.load() == 0)
    return argError(flagcxInvalidUsage, kInit, "eventElapsedMs: event never recorded");
  if (host::eventQuery(start) != flagcxSuccess || host::eventQuery(end) != flagcxSuccess)
    return flagcxInProgress;
  int64_t d = end->stampNs.load(std::memory_order_relaxed) - start->stampNs.load(std::memory_order_relaxed);
  *ms = static_cast<float>(static_cast<double>(d) / 1e6);
  return flagcxSuccess;
}

}  // namespace flagcx
