// Names of the IR's enums, shared by the compiler, verifier, tuner and tools.
#include "sched/ir.h"

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
  }
  return "?";
}

bool opInputIsBlock(OpKind op) { return op == OpKind::AllGather || op == OpKind::Gather; }
bool opOutputIsBlock(OpKind op) { return op == OpKind::ReduceScatter || op == OpKind::Scatter; }

int bufChunks(OpKind op, BufKind b, int nchunks, int nranks) {
  bool block = (b == BufKind::Input && opInputIsBlock(op)) ||
               (b == BufKind::Output && opOutputIsBlock(op));
  if (!block) return nchunks;
  return nranks > 0 ? nchunks / nranks : 0;
}

std::string refText(const ChunkRef &r) {
  return std::string(bufName(r.buf)) + "[" + std::to_string(r.chunk) + "]";
}

std::string stepText(const Step &s) {
  std::string t = stepKindName(s.kind);
  switch (s.kind) {
    case StepKind::Send: return t + " " + refText(s.src) + " -> rank " + std::to_string(s.peer);
    case StepKind::Recv:
    case StepKind::RecvReduce:
      return t + " " + refText(s.dst) + " <- rank " + std::to_string(s.peer);
    case StepKind::Copy:
    case StepKind::Reduce: return t + " " + refText(s.src) + " -> " + refText(s.dst);
  }
  return t;
}

}  // namespace flagcx
