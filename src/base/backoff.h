// Polite waiting for progress loops: spin a little, then yield, then sleep
// briefly, so that two busy ranks on two cores do not starve each other.
// Every wait in the library is bounded by FLAGCX_TIMEOUT through expired().
#pragma once
#include <chrono>

namespace flagcx {

class Backoff {
 public:
  Backoff();
  void idle();          // nothing progressed this round
  void progressed() { spins_ = 0; }
  // Still in the first, busy-spinning phase (a few microseconds): callers
  // that can sleep on descriptors do so only after it.
  bool spinning() const { return spins_ < kSpin; }
  bool expired() const;  // FLAGCX_TIMEOUT passed since construction or reset()
  void reset();

 private:
  static constexpr int kSpin = 64;
  int spins_ = 0;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace flagcx
