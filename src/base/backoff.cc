// Backoff (backoff.h): the spin, yield and sleep steps of a wait and its
// FLAGCX_TIMEOUT deadline.
#include "base/backoff.h"

#include <sched.h>

#include <thread>

#include "base/params.h"

namespace flagcx {

Backoff::Backoff() { reset(); }

void Backoff::reset() {
  spins_ = 0;
  int64_t t = paramInt(Param::TIMEOUT);
  deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(t > 0 ? t : 600);
}

bool Backoff::expired() const { return std::chrono::steady_clock::now() >= deadline_; }

void Backoff::idle() {
  spins_++;
  if (spins_ < kSpin) {
    __builtin_ia32_pause();
  } else if (spins_ < 2048) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace flagcx
