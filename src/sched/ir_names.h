// Helpers around the IR (ir.h) shared by the compiler, verifier and tools.
#pragma once
#include <string>

#include "sched/ir.h"

namespace flagcx {

const char *bufName(BufKind b);        // "input", "output", "scratch"
const char *stepKindName(StepKind k);  // "send", "recv", "recv_reduce", "copy", "reduce"

// Whether a buffer of `op` is an "own block" buffer (N/nranks chunks, see ir.h).
bool opInputIsBlock(OpKind op);   // allgather, gather
bool opOutputIsBlock(OpKind op);  // reducescatter, scatter
// Number of chunks of buffer `b` when the data space has `nchunks` chunks.
int bufChunks(OpKind op, BufKind b, int nchunks, int nranks);

std::string refText(const ChunkRef &r);  // "output[3]"
std::string stepText(const Step &s);     // "send output[3] -> rank 2"

}  // namespace flagcx
