// Streams and events of the host device adapter.
//
// A host stream is an in-order queue of work drained by whichever thread gets
// there first: the caller of streamSynchronize/streamQuery/eventSynchronize
// runs pending work inline (no thread hand-off on the fast path), and a
// per-stream worker thread drains it when nobody synchronizes.  See
// host_stream.cc for why the worker is never woken per enqueue.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "adapters/device/adapter.h"

namespace flagcx::host {

// One queued item.  Besides opaque StreamTasks, the adapter's own operations
// carry their arguments inline, so that nothing is allocated per enqueue.
struct Entry {
  enum Kind : uint8_t { Task, Copy, Set, Reduce, Divide, EventRecord, EventWait };
  Kind kind;
  union {
    StreamTask task;
    struct {
      void *dst;
      const void *src;
      size_t bytes;
    } copy;
    struct {
      void *dst;
      size_t bytes;
      int value;
    } set;
    struct {
      void *dst;
      const void *a;
      const void *b;
      size_t count;
      flagcxDataType_t dtype;
      flagcxRedOp_t op;
    } reduce;
    struct {
      void *dst;
      const void *src;
      size_t count;
      uint64_t divisor;
      flagcxDataType_t dtype;
    } divide;
    struct {
      flagcxEvent *event;
      uint64_t gen;           // which recording of the event
      flagcxStream *stream;   // EventWait: the stream the event was recorded on
      uint64_t ticket;        // EventWait: its position there
    } ev;
  };
};

// Runs one entry on the calling thread (used for the NULL stream, too).
flagcxResult_t runEntry(const Entry &e);

flagcxResult_t streamCreate(flagcxStream **out);
flagcxResult_t streamDestroy(flagcxStream *s);
// References besides the owner's (a queued wait on an event recorded on s,
// a deviceSynchronize in progress): the stream's memory outlives
// streamDestroy until the last is dropped.
void streamRetain(flagcxStream *s);
void streamRelease(flagcxStream *s);
flagcxResult_t streamEnqueue(flagcxStream *s, const Entry &e);
// The same, but an entry that finds the stream idle (nothing queued, no
// runner) runs now on the calling thread; its failure is the stream's, as
// if the worker had run it.
flagcxResult_t streamEnqueueOrRun(flagcxStream *s, const Entry &e);
// Both return the stream's sticky error (the first failure of queued work,
// kept until the stream is destroyed) once nothing is pending; streamQuery
// answers flagcxInProgress while work is pending and another thread runs it.
flagcxResult_t streamSynchronize(flagcxStream *s);
flagcxResult_t streamQuery(flagcxStream *s);
bool streamValid(const flagcxStream *s);

flagcxResult_t eventCreate(flagcxEvent **out, bool timing);
flagcxResult_t eventDestroy(flagcxEvent *e);
flagcxResult_t eventRecord(flagcxEvent *e, flagcxStream *s);
// An event never recorded counts as complete (as on CUDA).
flagcxResult_t eventSynchronize(flagcxEvent *e);
flagcxResult_t eventQuery(flagcxEvent *e);
flagcxResult_t streamWaitEvent(flagcxStream *s, flagcxEvent *e);
bool eventValid(const flagcxEvent *e);

}  // namespace flagcx::host

namespace flagcx {
// Milliseconds between two completed events of the host adapter (end - start;
// may be negative if `end` was recorded first).  flagcxInProgress while either
// is pending, flagcxInvalidUsage for events created with
// flagcxEventDisableTiming or never recorded.
flagcxResult_t hostEventElapsedMs(flagcxEvent_t start, flagcxEvent_t end, float *ms);
}  // namespace flagcx

// The opaque public types, defined for the host adapter.
struct flagcxStream {
  static constexpr uint32_t kMagic = 0x5354524du;  // "STRM"
  std::atomic<uint32_t> magic{kMagic};

  std::mutex mu;
  std::condition_variable workCv;  // the worker parks here
  std::condition_variable doneCv;  // synchronizers wait here while another thread runs
  std::vector<flagcx::host::Entry> ring;  // power-of-two capacity; grows, never shrinks
  uint64_t head = 0;                      // next entry to claim (monotonic)
  uint64_t tail = 0;                      // next free slot (monotonic)
  std::atomic<uint64_t> done{0};          // entries finished (ran or skipped)
  std::atomic<bool> running{false};       // a thread holds the runner role
  int waiters = 0;                        // threads blocked on doneCv
  int users = 0;                          // threads inside a synchronize (destroy waits)
  std::atomic<int> refs{1};               // the owner's + streamRetain's (the last frees)
  uint64_t wakeAt = UINT64_MAX;           // the smallest `done` one of them waits for
  bool parked = false;                    // worker in an untimed wait: enqueue must notify
  bool wakeSent = false;                  // ... and has already been notified
  bool stop = false;
  std::atomic<int> error{flagcxSuccess};  // sticky until destroyed
  std::atomic<int> copies{0};             // live streamCopy aliases
  std::thread worker;
};

struct flagcxEvent {
  static constexpr uint32_t kMagic = 0x45564e54u;  // "EVNT"
  std::atomic<uint32_t> magic{kMagic};
  bool timing = true;
  std::mutex mu;                          // record vs. record
  std::atomic<uint64_t> recorded{0};      // generation of the latest record
  std::atomic<uint64_t> completed{0};     // highest generation whose marker ran
  std::atomic<flagcxStream *> stream{nullptr};  // where the latest record was queued
  std::atomic<uint64_t> ticket{0};        // ... and the stream position that completes it
  std::atomic<int64_t> stampNs{0};        // steady clock at completion
  std::atomic<int> refs{1};               // the owner's + one per queued marker
};
