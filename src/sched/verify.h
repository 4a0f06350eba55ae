// The schedule verifier: simulates every rank of a schedule and proves that
// it completes and leaves exactly what the op defines in every output chunk.
//
// Model.  Stages run in order on each rank; the steps of a stage run
// concurrently, and a stage ends when all its sends and receives have met
// their partners (rendezvous).  Messages between a directed pair of ranks
// match in FIFO order, and a send must meet a recv/recv_reduce of a chunk of
// the same size (checked for several element counts).  A chunk holds a
// multiset of contributions (rank, data-space chunk), kept as runs of items
// (contrib.h) so that memory stays O(total steps); inputs start with their
// own, outputs and scratch start unwritten.  At the end every output chunk
// must hold exactly the op's contributions: every rank's once for a
// reduction, the single right source for gathers, scatters, broadcasts and
// all-to-alls.  Barrier schedules are checked for "every rank has heard,
// directly or not, from every other rank" instead.
//
// A fold step (dst = the left fold of its sources, in order) needs sources
// that hold data of one data-space chunk, each of the destination's size; its
// destination then holds the sum of their contributions.  fold_order: each
// chunk value also carries "is a rank-ordered fold", set by a fold whose n
// sources hold one contribution each, of ranks 0, 1, ..., n-1 in that order;
// copies and messages keep it, reduce and recv_reduce clear it.  A schedule
// declaring fold_order (Schedule::foldOrder; reductions only) must leave it
// on every output chunk: the result is then ((x0 op x1) op x2) ... bit for
// bit, whatever the arrival order.
//
// Errors read: "verify allreduce/ring nranks=5 rank=3 step=7: <what>".
#pragma once
#include <string>

#include "sched/ir.h"
#include "sched/script.h"

namespace flagcx {

// `s` holds every rank (s.ranks.size() == s.nranks), as compileAll makes it.
bool verifySchedule(const Schedule &s, std::string *err);

// Compiles `script` for every rank and verifies it.  Rooted ops are built
// for root 0 and relabelled for other roots (script.h), so the root-0
// schedule and its relabelling to root n-1 are verified.  When the script does
// not apply at this topology (its `requires`), returns true and sets
// *skipped to the reason (an empty *skipped means it was verified).
bool verifyScript(Script &script, const Topo &t, std::string *err,
                  std::string *skipped = nullptr);

}  // namespace flagcx
