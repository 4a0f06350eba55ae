// Helpers around the IR (ir.h) shared by the compiler, verifier and tools.
#pragma once
#include <string>
#include <vector>

#include "sched/ir.h"

namespace flagcx {

const char *bufName(BufKind b);        // "input", "output", "scratch"
const char *stepKindName(StepKind k);  // "send", "recv", "recv_reduce", "copy", "reduce", "fold"
// Whether a step of this kind reads Step::src (send, copy, reduce).  A fold
// reads its sources (foldSources) instead; every kind but send writes dst.
bool stepReadsSrc(StepKind k);
// A fold step's ordered sources, or nullptr (not a fold, or its index is out
// of range).
const std::vector<ChunkRef> *foldSources(const RankSchedule &rs, const Step &s);

// Whether a buffer of `op` is an "own block" buffer (N/nranks chunks, see ir.h).
bool opInputIsBlock(OpKind op);   // allgather, gather
bool opOutputIsBlock(OpKind op);  // reducescatter, scatter
// Number of chunks of buffer `b` when the data space has `nchunks` chunks
// (scratch: nchunks per copy).
int bufChunks(OpKind op, BufKind b, int nchunks, int nranks, int scratchCopies = 1);

std::string refText(const ChunkRef &r);  // "output[3]"

// Rooted ops run at every root from one schedule built for root 0: rank r
// plays the part of rank v = (r - root) mod n.  relabelSteps moves rank v's
// root-0 steps to `root`: peers p become (p + root) mod n, and for gather and
// scatter the chunks of full-size buffers (gather's output, scatter's input,
// every copy of scratch) move by `root` blocks of N/n chunks, so that block b stays rank
// b's block (fold sources too).  Own-block buffers and reduce/broadcast
// chunks do not move.  With rankOrderedFolds (a fold_order script), a fold
// of nranks sources is also rotated by `root` places: source k, rank k's
// part at root 0, belongs to rank (k + root) mod n, so it moves to position
// (k + root) mod n and a fold listed in rank order stays in rank order.
// This is a symmetry of the op: a correct root-0 schedule stays correct.
void relabelSteps(OpKind op, int nranks, int nchunks, int root, RankSchedule *rs,
                  bool rankOrderedFolds = false);
// A whole schedule (every rank) built for root 0, moved to `root`.
void relabelRoot(Schedule *s, int root);
// A schedule with several copies of the data space in scratch
// (scratchCopies > 1) names few of their chunks on any one rank: rank r of
// allreduce/ordered names n-1 of its n(n-1) chunks.  packScratch renumbers
// each rank's scratch references to the chunks it names (RankSchedule::
// scratchPacked, scratchData), so that the executor allocates those alone:
// (n-1)/n of the message instead of n-1 messages.  Runtime schedules only;
// the verifier reasons about the unpacked S*N chunks.  Applied when S > 1
// and to every fold_order schedule (the deterministic mode's); other
// schedules keep the plain layout.
void packScratch(Schedule *s);
// "send output[3] -> rank 2"; a fold lists its sources when `rs` (the rank's
// schedule holding them) is given: "fold input[0], scratch[1] -> output[0]".
std::string stepText(const Step &s, const RankSchedule *rs = nullptr);

}  // namespace flagcx
