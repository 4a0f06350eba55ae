// The schedule IR: what one rank does for one (op, algorithm, nranks, root),
// as plain data compiled from a Lua script at communicator init.
//
// Chunk addressing.  Every op has a "data space" of T elements cut into
// N = chunks(nranks) chunks.  Chunk k of a buffer with T_B elements and N_B
// chunks covers elements [floor(k*T_B/N_B), floor((k+1)*T_B/N_B)).
//   op              T (data space)   input            output
//   allreduce       count            full             full
//   reduce          count            full             full (root only)
//   broadcast       count            full (root)      full
//   allgather       nranks*count     own block        full
//   gather          nranks*count     own block        full (root only)
//   reducescatter   nranks*count     full             own block
//   scatter         nranks*count     full (root)      own block
//   alltoall        nranks*count     full             full
//   alltoallv       per-peer blocks  full             full  (chunk k = block k, sizes from counts)
//   barrier         0                -                -
// "full" buffers have N chunks; "own block" buffers have N/nranks chunks
// (N must then be a multiple of nranks) and block chunk j of rank r is the
// data-space chunk r*(N/nranks)+j.  Scratch holds S copies of the data space
// (S = Schedule::scratchCopies, 1 unless the script asks for more), S*N
// chunks: scratch chunk k has the size of data-space chunk k mod N (floor
// splitting S*T elements into S*N chunks gives exactly that).  Floor
// splitting keeps a block chunk and its data-space chunk the same size.
// For alltoall, output block j of rank r = input block r of rank j.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/base.h"

namespace flagcx {

enum class BufKind : uint8_t { Input, Output, Scratch };

struct ChunkRef {
  BufKind buf;
  int32_t chunk;  // index within that buffer's chunks
};

enum class StepKind : uint8_t {
  Send,        // send src to peer
  Recv,        // receive from peer into dst
  RecvReduce,  // receive from peer, dst = dst op received
  Copy,        // dst = src (local)
  Reduce,      // dst = dst op src (local)
  Fold,        // dst = ((s0 op s1) op s2) ... in the listed order (local;
               // RankSchedule::folds[fold]); narrow floats accumulate in
               // float32 and round once
};

struct Step {
  StepKind kind;
  int32_t peer;   // -1 for local steps
  ChunkRef src;   // Send, Copy, Reduce
  ChunkRef dst;   // Recv, RecvReduce, Copy, Reduce
  int32_t stage;  // steps of one stage may run concurrently; stages run in order
  int32_t fold = -1;  // Fold: index into RankSchedule::folds
};

// One rank's schedule.
struct RankSchedule {
  std::vector<Step> steps;  // sorted by stage, then in script order
  std::vector<std::vector<ChunkRef>> folds;  // the sources of each Fold step, in order
  int32_t nstages = 0;
  // An in-place call (input and output the same bytes, chunk for chunk) may
  // run on the one buffer without copying the input aside (sched/in_place.h;
  // set when the schedule is compiled).
  bool inPlaceNoCopy = false;
  // The same for nccl's in-place layouts with one block inside the other
  // buffer (allgather and gather: the input is this rank's block of the
  // output; reducescatter and scatter: the output is this rank's block of
  // the input).  False for the other ops.
  bool inPlaceBlockNoCopy = false;
  // Packed scratch (packScratch, ir_names.h): when set, this rank's scratch
  // holds only the chunks its steps name, renumbered 0..P-1 in their old
  // order, and scratchData[p] is the data-space chunk whose size chunk p has.
  bool scratchPacked = false;
  std::vector<int32_t> scratchData;
};

struct Schedule {
  OpKind op = OpKind::Count;
  std::string algo;     // e.g. "ring"
  int32_t nranks = 0;
  int32_t root = 0;
  int32_t chunks = 0;   // N
  int32_t scratchCopies = 1;  // S: scratch has S*N chunks, S*T elements
  // The script declares fold_order = "rank": every reduced output chunk is
  // the rank-ordered left fold of the contributions (checked by the verifier).
  bool foldOrder = false;
  std::vector<RankSchedule> ranks;  // all ranks (verifier) or only one (runtime: index 0 = self)
};

}  // namespace flagcx
