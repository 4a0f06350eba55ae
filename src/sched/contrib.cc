// ContribSet: multisets of items as runs of equal multiplicity.
#include "sched/contrib.h"

#include <algorithm>

namespace flagcx {

namespace {
// Appends [lo, hi) x mult, joining it to the last run when they meet.
void push(std::vector<ContribSet::Run> *out, uint64_t lo, uint64_t hi, uint32_t mult) {
  if (lo >= hi || mult == 0) return;
  if (!out->empty() && out->back().hi == lo && out->back().mult == mult) {
    out->back().hi = hi;
    return;
  }
  out->push_back({lo, hi, mult});
}

// Walks the pieces of two run lists: f(lo, hi, multA, multB) for every
// stretch where both multiplicities are constant and one is non-zero.
template <class F>
void sweep(const std::vector<ContribSet::Run> &a, const std::vector<ContribSet::Run> &b, F f) {
  size_t i = 0, j = 0;
  uint64_t pos = 0;
  while (i < a.size() || j < b.size()) {
    uint64_t next = UINT64_MAX;
    if (i < a.size()) next = std::min(next, std::max(pos, a[i].lo));
    if (j < b.size()) next = std::min(next, std::max(pos, b[j].lo));
    pos = next;  // the next item some run holds
    bool inA = i < a.size() && a[i].lo <= pos, inB = j < b.size() && b[j].lo <= pos;
    uint64_t end = UINT64_MAX;
    if (inA) end = std::min(end, a[i].hi);
    else if (i < a.size()) end = std::min(end, a[i].lo);
    if (inB) end = std::min(end, b[j].hi);
    else if (j < b.size()) end = std::min(end, b[j].lo);
    f(pos, end, inA ? a[i].mult : 0u, inB ? b[j].mult : 0u);
    pos = end;
    if (inA && a[i].hi == end) i++;
    if (inB && b[j].hi == end) j++;
  }
}
}  // namespace

ContribSet ContribSet::range(uint64_t lo, uint64_t hi) {
  ContribSet s;
  push(&s.runs_, lo, hi, 1);
  return s;
}

void ContribSet::combine(const ContribSet &o, bool sum) {
  if (o.runs_.empty()) return;
  if (runs_.empty()) {
    runs_ = o.runs_;
    if (!sum)
      for (Run &r : runs_) r.mult = 1;
    return;
  }
  std::vector<Run> out;
  out.reserve(runs_.size() + o.runs_.size());
  sweep(runs_, o.runs_, [&](uint64_t lo, uint64_t hi, uint32_t a, uint32_t b) {
    push(&out, lo, hi, sum ? a + b : 1u);
  });
  runs_.swap(out);
}

void ContribSet::add(const ContribSet &o) { combine(o, true); }
void ContribSet::unite(const ContribSet &o) { combine(o, false); }

bool ContribSet::contains(uint64_t item) const {
  auto it = std::upper_bound(runs_.begin(), runs_.end(), item,
                             [](uint64_t v, const Run &r) { return v < r.hi; });
  return it != runs_.end() && it->lo <= item;
}

ContribSet::Diff ContribSet::diff(const ContribSet &want, size_t max) const {
  Diff d;
  sweep(runs_, want.runs_, [&](uint64_t lo, uint64_t hi, uint32_t got, uint32_t w) {
    for (uint64_t x = lo; x < hi && got > w && d.extra.size() < max; x++) d.extra.push_back({x, w});
    for (uint64_t x = lo; x < hi && got < w && d.missing.size() < max; x++) d.missing.push_back(x);
  });
  return d;
}

}  // namespace flagcx
