// A byte pipe in memory under the transports' framing (net/common/
// framed_conn.h's Pipe), for tests without sockets: each call moves at most
// `cap` bytes, or a random number below it when seeded, so frames cross in
// pieces as they do over sockets.  The two ends may be used by two threads.
#pragma once
#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <random>

#include "net/common/framed_conn.h"

namespace harness {

// One direction of bytes.
struct Bytes {
  std::mutex mu;
  std::deque<uint8_t> q;
  bool closed = false;
};

class MemPipe : public flagcx::Pipe {
 public:
  // seed 0: exactly `cap` bytes a call where there is room; else random.
  MemPipe(std::shared_ptr<Bytes> out, std::shared_ptr<Bytes> in, size_t cap, unsigned seed = 0)
      : out_(std::move(out)), in_(std::move(in)), cap_(cap), random_(seed != 0), rng_(seed) {}
  ~MemPipe() override { cut(); }
  bool cut() override {
    std::lock_guard<std::mutex> lk(out_->mu);
    out_->closed = true;
    return true;
  }
  flagcxResult_t write(const iovec *iov, int n, size_t *moved, bool *closed) override {
    std::lock_guard<std::mutex> lk(out_->mu);
    *closed = false;
    size_t budget = budget_(), total = 0;
    for (int i = 0; i < n && budget > 0; i++) {
      size_t k = std::min(budget, iov[i].iov_len);
      const uint8_t *p = static_cast<const uint8_t *>(iov[i].iov_base);
      out_->q.insert(out_->q.end(), p, p + k);
      total += k;
      budget -= k;
      if (k < iov[i].iov_len) break;
    }
    *moved = total;
    return flagcxSuccess;
  }
  flagcxResult_t read(void *dst, size_t n, size_t *moved, bool *closed) override {
    std::lock_guard<std::mutex> lk(in_->mu);
    size_t k = std::min({n, in_->q.size(), budget_()});
    std::copy(in_->q.begin(), in_->q.begin() + static_cast<long>(k), static_cast<uint8_t *>(dst));
    in_->q.erase(in_->q.begin(), in_->q.begin() + static_cast<long>(k));
    *moved = k;
    *closed = k == 0 && in_->q.empty() && in_->closed;
    return flagcxSuccess;
  }
  const char *closeCause() const override {
    std::lock_guard<std::mutex> lk(in_->mu);
    return in_->closed ? "the test pipe was reset" : nullptr;
  }

 private:
  size_t budget_() { return random_ ? rng_() % cap_ : cap_; }
  std::shared_ptr<Bytes> out_, in_;
  size_t cap_;
  bool random_;
  std::mt19937 rng_;
};

}  // namespace harness
