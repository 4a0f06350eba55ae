// Contribution sets for the verifier (verify.h): which (rank, data-space
// chunk) items a chunk holds, and how many times each.
//
// A set is a sorted list of maximal runs of consecutive items with one
// multiplicity.  Items are numbered chunk-major (item = chunk * nranks +
// rank), so the states schedules go through are a run or two: a partial sum
// of chunk k over a block of ranks, one rank's block, a rotated range of
// ranks.  Memory and time are thus O(runs), not O(ranks), per chunk (one run
// is stored inline, 24 bytes in all); the result is exact (a double count or
// a missing rank is never hidden).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace flagcx {

class ContribSet {
 public:
  struct Run {
    uint64_t lo;    // items [lo, lo + len)
    uint32_t len;   // > 0
    uint32_t mult;  // > 0
    uint64_t hi() const { return lo + len; }
    bool operator==(const Run &o) const { return lo == o.lo && len == o.len && mult == o.mult; }
  };

  ContribSet() : inl_{} {}
  ContribSet(const ContribSet &o) : ContribSet() { assign(o.begin(), o.n_); }
  ContribSet(ContribSet &&o) noexcept : n_(o.n_), cap_(o.cap_), inl_(o.inl_) { o.n_ = o.cap_ = 0; }
  ContribSet &operator=(const ContribSet &o) {
    if (this != &o) assign(o.begin(), o.n_);
    return *this;
  }
  ContribSet &operator=(ContribSet &&o) noexcept {
    std::swap(n_, o.n_);
    std::swap(cap_, o.cap_);
    std::swap(inl_, o.inl_);
    return *this;
  }
  ~ContribSet() { release(); }

  static ContribSet range(uint64_t lo, uint64_t hi);  // each item of [lo, hi) once
  static ContribSet one(uint64_t item) { return range(item, item + 1); }

  // this += o (multiset sum), or this |= o (set union: multiplicities stay 1).
  void add(const ContribSet &o) { combine(o, true); }
  void unite(const ContribSet &o) { combine(o, false); }
  bool operator==(const ContribSet &o) const;
  // Whether the set holds exactly one item, once (then *item is it): what a
  // chunk holds before anything was reduced into it.
  bool single(uint64_t *item) const {
    if (n_ != 1 || begin()->len != 1 || begin()->mult != 1) return false;
    *item = begin()->lo;
    return true;
  }
  size_t size() const { return n_; }
  const Run *begin() const { return cap_ ? inl_.heap : &inl_.run; }
  const Run *end() const { return begin() + n_; }
  void clear() {
    release();
    n_ = 0;
  }

  // Items whose multiplicity here exceeds `want`'s (up to `max`, with their
  // multiplicity in `want`), and items of `want` held fewer times here.
  struct Diff {
    std::vector<std::pair<uint64_t, uint32_t>> extra;  // item, multiplicity wanted
    std::vector<uint64_t> missing;
  };
  Diff diff(const ContribSet &want, size_t max) const;

 private:
  void combine(const ContribSet &o, bool sum);
  void assign(const Run *r, uint32_t n);
  void release() {
    if (cap_) delete[] inl_.heap;
    cap_ = 0;
  }
  uint32_t n_ = 0;
  uint32_t cap_ = 0;  // 0: the run (if any) is inline
  union Store {
    Run run;
    Run *heap;
  } inl_;
};

}  // namespace flagcx
