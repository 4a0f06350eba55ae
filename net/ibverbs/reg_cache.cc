// The verbs registration cache (reg_cache.h): lookup, reference counts and
// least-recently-used eviction of memory regions.
#include "net/ibverbs/reg_cache.h"

#include <unistd.h>

#include "base/base.h"

namespace flagcx::rdma {

namespace {
uint64_t pageSize() {
  static const uint64_t p = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return p;
}
}  // namespace

RegCache::~RegCache() = default;

flagcxResult_t RegCache::get(void *addr, size_t len, uint32_t access, const Mr **out) {
  *out = nullptr;
  uint64_t a = reinterpret_cast<uint64_t>(addr);
  uint64_t pg = pageSize();
  uint64_t lo = a & ~(pg - 1), hi = (a + len + pg - 1) & ~(pg - 1);
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->stale || it->lo > lo || it->hi < hi || (it->mr->access & access) != access) continue;
    it->refs++;
    stats_.hits++;
    entries_.splice(entries_.begin(), entries_, it);  // most recently used
    *out = entries_.front().mr.get();
    return flagcxSuccess;
  }
  Entry e;
  FLAGCX_CHECK(dev_->regMr(reinterpret_cast<void *>(lo), hi - lo, access, &e.mr));
  e.lo = lo;
  e.hi = hi;
  e.refs = 1;
  stats_.misses++;
  entries_.push_front(std::move(e));
  *out = entries_.front().mr.get();
  trim();
  return flagcxSuccess;
}

void RegCache::put(const Mr *mr) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->mr.get() != mr) continue;
    if (--it->refs == 0 && it->stale) entries_.erase(it);
    break;
  }
  trim();
}

void RegCache::invalidate(const void *addr, size_t len) {
  uint64_t lo = reinterpret_cast<uint64_t>(addr), hi = lo + len;
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->lo < hi && lo < it->hi) {
      if (it->refs == 0) {
        it = entries_.erase(it);
        continue;
      }
      it->stale = true;
    }
    ++it;
  }
}

void RegCache::trim() {
  size_t unused = 0;
  for (const Entry &e : entries_) unused += e.refs == 0;
  for (auto it = entries_.end(); unused > capacity_ && it != entries_.begin();) {
    --it;
    if (it->refs != 0) continue;
    it = entries_.erase(it);
    unused--;
    stats_.evictions++;
  }
}

RegCache::Stats RegCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  Stats s = stats_;
  s.entries = entries_.size();
  return s;
}

}  // namespace flagcx::rdma
