// Contribution sets for the verifier (verify.h): which (rank, data-space
// chunk) items a chunk holds, and how many times each.
//
// A set is a sorted list of maximal runs [lo, hi) of consecutive items with
// one multiplicity.  Items are numbered chunk-major (item = chunk * nranks +
// rank), so the states schedules go through are a run or two: a partial sum
// of chunk k over a block of ranks, one rank's block, a rotated range of
// ranks.  Memory and time are thus O(runs), not O(ranks), per chunk; the
// result is exact (a double count or a missing rank is never hidden).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace flagcx {

class ContribSet {
 public:
  struct Run {
    uint64_t lo, hi;  // items [lo, hi)
    uint32_t mult;    // > 0
    bool operator==(const Run &o) const { return lo == o.lo && hi == o.hi && mult == o.mult; }
  };

  ContribSet() = default;
  static ContribSet range(uint64_t lo, uint64_t hi);  // each item of [lo, hi) once
  static ContribSet one(uint64_t item) { return range(item, item + 1); }

  // this += o (multiset sum), or this |= o (set union: multiplicities stay 1).
  void add(const ContribSet &o);
  void unite(const ContribSet &o);
  bool contains(uint64_t item) const;
  bool operator==(const ContribSet &o) const { return runs_ == o.runs_; }
  bool empty() const { return runs_.empty(); }
  const std::vector<Run> &runs() const { return runs_; }
  void clear() { std::vector<Run>().swap(runs_); }

  // Items whose multiplicity here exceeds `want`'s (up to `max`, with their
  // multiplicity in `want`), and items of `want` held fewer times here.
  struct Diff {
    std::vector<std::pair<uint64_t, uint32_t>> extra;  // item, multiplicity wanted
    std::vector<uint64_t> missing;
  };
  Diff diff(const ContribSet &want, size_t max) const;

 private:
  void combine(const ContribSet &o, bool sum);
  std::vector<Run> runs_;
};

}  // namespace flagcx
