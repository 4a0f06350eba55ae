// A communicator's copy thread: takes a stage's host copies that none of its
// messages needs (LocalWork) while the engine thread moves the messages.
// The engine thread otherwise makes them itself in 128 KiB pieces between
// its looks at the Conns, and with socket helper threads every piece delays
// the hand-off of the lanes' next stripes: a 16 MiB out-of-place broadcast's
// root took the copy's time plus the send's.  On a 16-core host the thread
// took broadcast -I 0 at 4 / 16 MiB from 957 / 3967 us to 514 / 2112 us, as
// fast as in place (docs/DECISIONS.md, "Sockets").
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "exec/state.h"

namespace flagcx {

class CopyWorker {
 public:
  CopyWorker() = default;
  ~CopyWorker();  // waits for the batch under way, then ends the thread
  CopyWorker(const CopyWorker &) = delete;
  CopyWorker &operator=(const CopyWorker &) = delete;

  // Copy every item (copies only, no reductions) on the thread, started on
  // first use, in 256 KiB pieces.  One batch at a time: wait() for the
  // previous one first.
  void start(const LocalWork::Item *items, size_t n);
  // The caller copies the batch's next piece itself; false when none is left.
  // The engine thread helps so whenever it would otherwise wait for its
  // messages: two threads copy (measured on 16 cores, out-of-place
  // broadcast 4 / 16 MiB: 274 / 1074 us with the thread alone, 218 / 900
  // with the engine's help).
  bool help();
  void wait();  // helps until no piece is left, then waits for the thread's last

 private:
  void loop();
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<LocalWork::Item> items_;  // the batch's pieces
  std::atomic<size_t> next_{0};          // the next piece to take
  bool busy_ = false, stop_ = false;
};

// Should this stage's remaining local work go to the copy thread?  Only
// copies (no reductions), at least 1 MiB of them, none begun, host memory
// whose bytes are all there (no staging gate, not direct mode), and the
// communicator has one (FLAGCX_COPY_THREAD).
bool copyThreadFits(const ExecState *s, const LocalWork &w);
// Batches this process's copy threads were given (tests).
uint64_t copyThreadBatches();

}  // namespace flagcx
