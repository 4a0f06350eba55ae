// In-place calls without a copy of the input (sched/script.cc records the
// answer in RankSchedule::inPlaceNoCopy; exec/coll_run.cc uses it).
#pragma once
#include <algorithm>
#include <climits>
#include <vector>

#include "sched/ir.h"
#include "sched/ir_names.h"

namespace flagcx {

// Whether this rank's schedule may run on a buffer that holds both its input
// and its output.  Input chunk c lies at position inPos0 + c and output chunk
// d at outPos0 + d, in chunks of the full data space (the same bytes when the
// positions are equal): inPos0 = outPos0 = 0 when input and output are the
// same buffer; inPos0 = r * inChunks when the input is rank r's block of the
// output (nccl's in-place allgather and gather); outPos0 = r * outChunks when
// the output is rank r's block of the input (reducescatter, scatter).  The
// answer is yes when every input chunk is read only in stages before any
// step writes the output chunk at its position (a copy of an input chunk
// onto its own position writes nothing then; a fold may read the input chunk
// at the position it writes), and no step writes the input.
// Then running on the one buffer is the same as running on a copy of the
// input.
inline bool inPlaceNeedsNoCopy(const RankSchedule &rs, int inChunks, int outChunks, int inPos0,
                               int outPos0) {
  if (inChunks < 0 || outChunks < 0 || inPos0 < 0 || outPos0 < 0) return false;
  auto identity = [&](const Step &st) {
    return st.kind == StepKind::Copy && st.src.buf == BufKind::Input &&
           st.dst.buf == BufKind::Output && inPos0 + st.src.chunk == outPos0 + st.dst.chunk;
  };
  auto badIn = [&](const ChunkRef &c) { return c.chunk < 0 || c.chunk >= inChunks; };
  auto badOut = [&](const ChunkRef &c) { return c.chunk < 0 || c.chunk >= outChunks; };
  int positions = std::max(inPos0 + inChunks, outPos0 + outChunks);
  std::vector<int> firstWrite(static_cast<size_t>(positions), INT_MAX);
  for (const Step &st : rs.steps) {
    if (st.kind == StepKind::Send || identity(st)) continue;
    if (st.dst.buf == BufKind::Input) return false;
    if (st.dst.buf != BufKind::Output) continue;
    if (badOut(st.dst)) return false;
    int &w = firstWrite[static_cast<size_t>(outPos0 + st.dst.chunk)];
    w = std::min(w, st.stage);
  }
  // A fold that writes the output chunk at an input source's own position
  // reads that source in the same step, before it writes (the fold kernel
  // allows a destination that is one of its sources).
  auto lateRead = [&](const Step &st, const ChunkRef &c) {
    if (c.buf != BufKind::Input) return false;
    if (badIn(c)) return true;
    int pos = inPos0 + c.chunk;
    bool own = st.kind == StepKind::Fold && st.dst.buf == BufKind::Output &&
               outPos0 + st.dst.chunk == pos;
    int w = firstWrite[static_cast<size_t>(pos)];
    return own ? st.stage > w : st.stage >= w;
  };
  for (const Step &st : rs.steps) {
    if (stepReadsSrc(st.kind) && lateRead(st, st.src)) return false;
    if (st.kind != StepKind::Fold) continue;
    const std::vector<ChunkRef> *src = foldSources(rs, st);
    if (!src) return false;
    for (const ChunkRef &c : *src)
      if (lateRead(st, c)) return false;
  }
  return true;
}

// Input and output the same bytes with the same chunks.
inline bool inPlaceNeedsNoCopy(const RankSchedule &rs, int nchunks) {
  return inPlaceNeedsNoCopy(rs, nchunks, nchunks, 0, 0);
}

}  // namespace flagcx
