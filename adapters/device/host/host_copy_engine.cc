// The host adapter's emulated asynchronous copy engine (host_copy_engine.h).
#include "host_copy_engine.h"

#include <chrono>
#include <cstring>

#include "base/base.h"

namespace flagcx::host {

CopyEngine::~CopyEngine() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CopyEngine::copyAsync(void *dst, const void *src, size_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  queue_.push_back({dst, src, bytes});
  issued_++;
  cv_.notify_one();
}

uint64_t CopyEngine::mark() {
  std::lock_guard<std::mutex> lk(mu_);
  return issued_;
}

bool CopyEngine::reached(uint64_t m) {
  std::lock_guard<std::mutex> lk(mu_);
  return done_ >= m;
}

uint64_t CopyEngine::completed() {
  std::lock_guard<std::mutex> lk(mu_);
  return done_;
}

void CopyEngine::holdAfter(uint64_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  limit_ = n;
}

void CopyEngine::release() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    limit_ = UINT64_MAX;
  }
  cv_.notify_all();
}

void CopyEngine::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  uint64_t m = issued_;
  doneCv_.wait(lk, [&] { return done_ >= m; });
}

// One copy at a time, oldest first (none past a hold): the delay (nsPerKiB_ per KiB, as a
// slow bus would take), then the bytes, then it counts as done.
void CopyEngine::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || (!queue_.empty() && done_ < limit_); });
    if (queue_.empty()) return;
    Copy c = queue_.front();
    lk.unlock();
    std::this_thread::sleep_for(std::chrono::nanoseconds(
        static_cast<int64_t>((c.bytes + 1023) / 1024) * nsPerKiB_));
    memmove(c.dst, c.src, c.bytes);
    lk.lock();
    queue_.pop_front();
    done_++;
    doneCv_.notify_all();
  }
}

CopyEngine *emulatedCopyEngine() {
  static CopyEngine *engine = [] {
    int64_t ns = paramInt(Param::HOST_COPY_ENGINE_NS);
    // Never destroyed: copies may still be queued by threads that outlive
    // static destruction; the thread sleeps on its condition at exit.
    return ns > 0 ? new CopyEngine(ns) : nullptr;
  }();
  return engine;
}

}  // namespace flagcx::host
