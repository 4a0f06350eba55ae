// The communicator's copy thread (copy_worker.h): its batch of host copies,
// the pieces the engine thread takes from it, and copyThreadFits (whether a
// stage's copies go to the thread).
#include "exec/copy_worker.h"

#include <algorithm>
#include <atomic>

#include "base/base.h"

namespace flagcx {

namespace {
// Below this a hand-off to the thread (two wake-ups, tens of us) is not
// paid back: measured at 1 MiB (163 against 201-211 us), not below.
constexpr size_t kMinBytes = size_t{1} << 20;
std::atomic<uint64_t> g_batches{0};
constexpr size_t kPiece = size_t{256} << 10;
}  // namespace

uint64_t copyThreadBatches() { return g_batches.load(); }

CopyWorker::~CopyWorker() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [this] { return !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool CopyWorker::help() {
  size_t i = next_.fetch_add(1, std::memory_order_relaxed);
  if (i >= items_.size()) return false;
  copyBytes(items_[i].dst, items_[i].src, items_[i].bytes);
  return true;
}

void CopyWorker::start(const LocalWork::Item *items, size_t n) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    items_.clear();
    for (size_t k = 0; k < n; k++)
      for (size_t off = 0; off < items[k].bytes; off += kPiece)
        items_.push_back({false, items[k].dst + off, items[k].src + off,
                          std::min(kPiece, items[k].bytes - off)});
    next_.store(0, std::memory_order_relaxed);
    busy_ = true;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  cv_.notify_all();
  g_batches.fetch_add(1);
}

void CopyWorker::wait() {
  while (help()) {
  }
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [this] { return !busy_; });
}

void CopyWorker::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return busy_ || stop_; });
    if (busy_) {
      lk.unlock();  // items_ is left alone until busy_ drops
      while (help()) {
      }
      lk.lock();
      busy_ = false;
      cv_.notify_all();
      continue;
    }
    return;  // stop_
  }
}

bool copyThreadFits(const ExecState *s, const LocalWork &w) {
  if (!s->sched->copyThread || s->sched->staged.gate.base || s->direct() || w.done != 0) return false;
  size_t bytes = 0;
  for (size_t i = w.next; i < w.items.size(); i++) {
    if (w.items[i].reduce) return false;
    bytes += w.items[i].bytes;
  }
  return bytes >= kMinBytes;
}

}  // namespace flagcx
