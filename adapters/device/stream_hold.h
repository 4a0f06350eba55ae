// Holding a stream on a host word: the adapter side of the stream-ordered
// small-call path (src/exec/async_small.cc).  The caller queues, on the
// user's stream, "wait until this host word reaches k"; a host thread
// stores k later and the stream goes on, while the caller has long
// returned.  Only safe when nothing the releasing thread does needs the
// device (the path's tasks run on host memory only): see docs/GPU.md,
// "Stream ordering".
#pragma once
#include <cstdint>

#include "flagcx.h"

namespace flagcx {

// One release word and the value a hold waits for.  Lives as long as any
// hold queued on it may still be waiting (the path keeps one per slot).
struct HoldPoint {
  volatile uint32_t *word = nullptr;  // host memory, written by release()
  uint64_t devAddr = 0;               // the device's address of the word (0: none)
  uint32_t k = 0;                     // the hold waits for *word >= k (cyclic)
};

class StreamHold {
 public:
  virtual ~StreamHold() = default;
  // Holds work here (the adapter's one-time probe).  false: callers keep the
  // ordinary path.
  virtual bool usable() = 0;
  // Whether `stream` may be held now (a live stream, not under graph capture).
  virtual bool canHold(flagcxStream_t stream) = 0;
  // Whether copies between p and page-locked host memory queued on a stream
  // run in the stream's order without the caller waiting (device memory;
  // CUDA copies from or to pageable host memory may run or wait at once).
  virtual bool streamOrdered(const void *p) = 0;
  // n zeroed words the device can wait on, *words[i] for i < n; freed with
  // freeWords (on the caller's thread: it may synchronize the device).
  virtual flagcxResult_t allocWords(int n, HoldPoint *words) = 0;
  virtual void freeWords(int n, HoldPoint *words) = 0;
  // Queue on `stream`: wait until *p->word >= p->k.
  virtual flagcxResult_t hold(flagcxStream_t stream, const HoldPoint *p) = 0;
  // Make `r` the stream's sticky error (streamSynchronize returns it);
  // before the release, so that whoever sees the stream done sees it.
  virtual void noteError(flagcxStream_t stream, flagcxResult_t r) = 0;
  // Release: a host store; every hold queued on the word for k or less goes on.
  static void release(const HoldPoint &p) {
    __atomic_store_n(p.word, p.k, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  }
};

}  // namespace flagcx
