// The host adapter's emulated copy engine (tests only, FLAGCX_HOST_COPY_ENGINE_NS):
// an asynchronous copy engine for CPU memory that completes each copy on a
// thread of its own, in issue order, after a delay proportional to its
// bytes, so that the executor's staged pipeline (the gate, the sink, the
// slice choice) runs on a machine without a GPU with the same ordering
// hazards as a real device's copy stream.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "flagcx.h"

namespace flagcx::host {

class CopyEngine {
 public:
  explicit CopyEngine(int64_t nsPerKiB) : nsPerKiB_(nsPerKiB) {}
  ~CopyEngine();
  CopyEngine(const CopyEngine &) = delete;
  CopyEngine &operator=(const CopyEngine &) = delete;

  // Queue one copy; it completes after every copy queued before it.
  void copyAsync(void *dst, const void *src, size_t bytes);
  // The number of every copy queued so far; reached(m): all of them done.
  uint64_t mark();
  bool reached(uint64_t m);
  void flush();  // waits for every copy queued so far
  // Copies completed so far, in order (tests read it).
  uint64_t completed();
  // Tests: copies numbered above n (mark's numbering) wait until release(),
  // so that a test can see what the engine's users do while a copy is late.
  void holdAfter(uint64_t n);
  void release();

 private:
  struct Copy {
    void *dst;
    const void *src;
    size_t bytes;
  };
  void loop();
  const int64_t nsPerKiB_;
  std::mutex mu_;
  std::condition_variable cv_, doneCv_;
  std::deque<Copy> queue_;
  uint64_t issued_ = 0, done_ = 0;
  uint64_t limit_ = UINT64_MAX;  // holdAfter
  bool stop_ = false;
  std::thread thread_;  // started by the first copy
};

// The process's engine when FLAGCX_HOST_COPY_ENGINE_NS > 0, else nullptr.
CopyEngine *emulatedCopyEngine();

}  // namespace flagcx::host
