// Helpers around the IR (ir_names.h): names of its enums, step text, root
// relabelling and scratch packing, shared by the compiler, verifier, tuner,
// executor and tools.
#include "sched/ir.h"

#include <algorithm>

#include "sched/ir_names.h"

namespace flagcx {

const char *bufName(BufKind b) {
  switch (b) {
    case BufKind::Input: return "input";
    case BufKind::Output: return "output";
    case BufKind::Scratch: return "scratch";
  }
  return "?";
}

const char *stepKindName(StepKind k) {
  switch (k) {
    case StepKind::Send: return "send";
    case StepKind::Recv: return "recv";
    case StepKind::RecvReduce: return "recv_reduce";
    case StepKind::Copy: return "copy";
    case StepKind::Reduce: return "reduce";
    case StepKind::Fold: return "fold";
  }
  return "?";
}

bool opInputIsBlock(OpKind op) { return op == OpKind::AllGather || op == OpKind::Gather; }
bool opOutputIsBlock(OpKind op) { return op == OpKind::ReduceScatter || op == OpKind::Scatter; }

int bufChunks(OpKind op, BufKind b, int nchunks, int nranks, int scratchCopies) {
  if (b == BufKind::Scratch) return nchunks * scratchCopies;
  bool block = (b == BufKind::Input && opInputIsBlock(op)) ||
               (b == BufKind::Output && opOutputIsBlock(op));
  if (!block) return nchunks;
  return nranks > 0 ? nchunks / nranks : 0;
}

std::string refText(const ChunkRef &r) {
  return std::string(bufName(r.buf)) + "[" + std::to_string(r.chunk) + "]";
}

bool stepReadsSrc(StepKind k) {
  return k == StepKind::Send || k == StepKind::Copy || k == StepKind::Reduce;
}

const std::vector<ChunkRef> *foldSources(const RankSchedule &rs, const Step &s) {
  if (s.kind != StepKind::Fold || s.fold < 0 || static_cast<size_t>(s.fold) >= rs.folds.size())
    return nullptr;
  return &rs.folds[static_cast<size_t>(s.fold)];
}

std::string stepText(const Step &s, const RankSchedule *rs) {
  std::string t = stepKindName(s.kind);
  switch (s.kind) {
    case StepKind::Send: return t + " " + refText(s.src) + " -> rank " + std::to_string(s.peer);
    case StepKind::Recv:
    case StepKind::RecvReduce:
      return t + " " + refText(s.dst) + " <- rank " + std::to_string(s.peer);
    case StepKind::Copy:
    case StepKind::Reduce: return t + " " + refText(s.src) + " -> " + refText(s.dst);
    case StepKind::Fold: {
      const std::vector<ChunkRef> *src = rs ? foldSources(*rs, s) : nullptr;
      if (!src) return t + " #" + std::to_string(s.fold) + " -> " + refText(s.dst);
      for (size_t i = 0; i < src->size(); i++) t += (i ? ", " : " ") + refText((*src)[i]);
      return t + " -> " + refText(s.dst);
    }
  }
  return t;
}

void relabelSteps(OpKind op, int nranks, int nchunks, int root, RankSchedule *rs,
                  bool rankOrderedFolds) {
  if (nranks < 1) return;
  root = ((root % nranks) + nranks) % nranks;
  if (root == 0) return;
  bool blocks = op == OpKind::Gather || op == OpKind::Scatter;
  int64_t shift = blocks ? static_cast<int64_t>(root) * (nchunks / nranks) : 0;
  auto move = [&](ChunkRef &c) {
    if (!shift || (c.buf != BufKind::Scratch && bufChunks(op, c.buf, nchunks, nranks) != nchunks))
      return;
    int32_t copy = c.chunk - c.chunk % nchunks;  // scratch: the copy's first chunk
    c.chunk = copy + static_cast<int32_t>((c.chunk % nchunks + shift) % nchunks);
  };
  for (Step &s : rs->steps) {
    if (s.peer >= 0) s.peer = (s.peer + root) % nranks;
    if (stepReadsSrc(s.kind)) move(s.src);
    if (s.kind != StepKind::Send) move(s.dst);
  }
  for (std::vector<ChunkRef> &f : rs->folds) {
    for (ChunkRef &c : f) move(c);
    // Position k held rank k's part at root 0, now rank (k + root)'s.
    if (rankOrderedFolds && static_cast<int>(f.size()) == nranks)
      std::rotate(f.begin(), f.end() - root, f.end());
  }
}

void packScratch(Schedule *s) {
  if ((s->scratchCopies <= 1 && !s->foldOrder) || s->chunks < 1) return;
  for (RankSchedule &rs : s->ranks) {
    std::vector<int32_t> named;
    auto each = [&rs](auto &&f) {
      for (Step &st : rs.steps) {
        if (stepReadsSrc(st.kind)) f(st.src);
        if (st.kind != StepKind::Send) f(st.dst);
      }
      for (std::vector<ChunkRef> &src : rs.folds)
        for (ChunkRef &c : src) f(c);
    };
    each([&named](ChunkRef &c) {
      if (c.buf == BufKind::Scratch) named.push_back(c.chunk);
    });
    std::sort(named.begin(), named.end());
    named.erase(std::unique(named.begin(), named.end()), named.end());
    each([&named](ChunkRef &c) {
      if (c.buf == BufKind::Scratch)
        c.chunk = static_cast<int32_t>(std::lower_bound(named.begin(), named.end(), c.chunk) -
                                       named.begin());
    });
    rs.scratchData.resize(named.size());
    for (size_t p = 0; p < named.size(); p++) rs.scratchData[p] = named[p] % s->chunks;
    rs.scratchPacked = true;
  }
}

void relabelRoot(Schedule *s, int root) {
  int n = s->nranks;
  if (n < 1 || static_cast<int>(s->ranks.size()) != n) return;
  root = ((root % n) + n) % n;
  std::vector<RankSchedule> moved(n);
  for (int r = 0; r < n; r++) {
    moved[r] = std::move(s->ranks[(r - root + n) % n]);
    relabelSteps(s->op, n, s->chunks, root, &moved[r], s->foldOrder);
  }
  s->ranks = std::move(moved);
  s->root = (s->root + root) % n;
}

}  // namespace flagcx
