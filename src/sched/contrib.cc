// ContribSet: multisets of items as runs of equal multiplicity.
#include "sched/contrib.h"

#include <algorithm>

namespace flagcx {

namespace {
using Run = ContribSet::Run;

// Appends [lo, hi) x mult, joining it to the last run when they meet.
void push(std::vector<Run> *out, uint64_t lo, uint64_t hi, uint32_t mult) {
  if (lo >= hi || mult == 0) return;
  if (!out->empty() && out->back().hi() == lo && out->back().mult == mult &&
      out->back().len + (hi - lo) <= UINT32_MAX) {
    out->back().len += static_cast<uint32_t>(hi - lo);
    return;
  }
  out->push_back({lo, static_cast<uint32_t>(hi - lo), mult});
}

// Walks two run lists: f(lo, hi, multA, multB) for every stretch where both
// multiplicities are constant and one is non-zero, in order.
template <class F>
void sweep(const Run *a, size_t na, const Run *b, size_t nb, F f) {
  size_t i = 0, j = 0;
  uint64_t pos = 0;
  while (i < na || j < nb) {
    uint64_t next = UINT64_MAX;
    if (i < na) next = std::min(next, std::max(pos, a[i].lo));
    if (j < nb) next = std::min(next, std::max(pos, b[j].lo));
    pos = next;  // the next item some run holds
    bool inA = i < na && a[i].lo <= pos, inB = j < nb && b[j].lo <= pos;
    uint64_t end = UINT64_MAX;
    if (i < na) end = std::min(end, inA ? a[i].hi() : a[i].lo);
    if (j < nb) end = std::min(end, inB ? b[j].hi() : b[j].lo);
    f(pos, end, inA ? a[i].mult : 0u, inB ? b[j].mult : 0u);
    pos = end;
    if (inA && a[i].hi() == end) i++;
    if (inB && b[j].hi() == end) j++;
  }
}
}  // namespace

void ContribSet::assign(const Run *r, uint32_t n) {
  if (n <= 1) {
    Run one = n ? r[0] : Run{};
    release();
    inl_.run = one;
  } else {
    Run *h = new Run[n];
    std::copy(r, r + n, h);
    release();
    inl_.heap = h;
    cap_ = n;
  }
  n_ = n;
}

ContribSet ContribSet::range(uint64_t lo, uint64_t hi) {
  ContribSet s;
  if (lo < hi) {
    s.inl_.run = {lo, static_cast<uint32_t>(hi - lo), 1};
    s.n_ = 1;
  }
  return s;
}

bool ContribSet::operator==(const ContribSet &o) const {
  return n_ == o.n_ && std::equal(begin(), end(), o.begin());
}

void ContribSet::combine(const ContribSet &o, bool sum) {
  if (o.n_ == 0) return;
  thread_local std::vector<Run> out;
  out.clear();
  sweep(begin(), n_, o.begin(), o.n_, [&](uint64_t lo, uint64_t hi, uint32_t a, uint32_t b) {
    push(&out, lo, hi, sum ? a + b : 1u);
  });
  assign(out.data(), static_cast<uint32_t>(out.size()));
}

ContribSet::Diff ContribSet::diff(const ContribSet &want, size_t max) const {
  Diff d;
  sweep(begin(), n_, want.begin(), want.n_, [&](uint64_t lo, uint64_t hi, uint32_t got, uint32_t w) {
    for (uint64_t x = lo; x < hi && got > w && d.extra.size() < max; x++) d.extra.push_back({x, w});
    for (uint64_t x = lo; x < hi && got < w && d.missing.size() < max; x++) d.missing.push_back(x);
  });
  return d;
}

}  // namespace flagcx
