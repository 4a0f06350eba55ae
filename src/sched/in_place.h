// In-place calls without a copy of the input (sched/script.cc records the
// answer in RankSchedule::inPlaceNoCopy; exec/coll_run.cc uses it).
#pragma once
#include <algorithm>
#include <climits>
#include <vector>

#include "sched/ir.h"

namespace flagcx {

// For a call whose input and output are the same bytes with the same
// chunks: whether this rank's schedule reads every input chunk only in
// stages before any step writes the output chunk it shares bytes with (a
// copy of input chunk c onto output chunk c writes nothing then), and
// never writes the input.  Then running it on the one buffer is the same as
// running it on a copy of the input.
inline bool inPlaceNeedsNoCopy(const RankSchedule &rs, int nchunks) {
  auto identity = [](const Step &st) {
    return st.kind == StepKind::Copy && st.src.buf == BufKind::Input &&
           st.dst.buf == BufKind::Output && st.src.chunk == st.dst.chunk;
  };
  auto bad = [&](const ChunkRef &c) { return c.chunk < 0 || c.chunk >= nchunks; };
  std::vector<int> firstWrite(static_cast<size_t>(std::max(nchunks, 0)), INT_MAX);
  for (const Step &st : rs.steps) {
    if (st.kind == StepKind::Send || identity(st)) continue;
    if (st.dst.buf == BufKind::Input) return false;
    if (st.dst.buf != BufKind::Output) continue;
    if (bad(st.dst)) return false;
    int &w = firstWrite[static_cast<size_t>(st.dst.chunk)];
    w = std::min(w, st.stage);
  }
  for (const Step &st : rs.steps) {
    bool readsInput = st.src.buf == BufKind::Input &&
                      (st.kind == StepKind::Send || st.kind == StepKind::Copy ||
                       st.kind == StepKind::Reduce);
    if (!readsInput) continue;
    if (bad(st.src)) return false;
    if (st.stage >= firstWrite[static_cast<size_t>(st.src.chunk)]) return false;
  }
  return true;
}

}  // namespace flagcx
