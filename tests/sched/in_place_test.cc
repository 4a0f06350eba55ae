// inPlaceNeedsNoCopy (sched/in_place.h): which ranks' schedules may run an
// in-place call on the one buffer (the same bytes, or nccl's block layouts),
// so that exec/coll_run.cc need not copy the input aside first.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "flagcx_paths.h"
#include "sched/in_place.h"
#include "sched/script.h"

using namespace flagcx;

namespace {

const std::string kSrc = FLAGCX_SOURCE_DIR;

Schedule compileAll(const std::string &script, int nranks, int root) {
  std::unique_ptr<Script> s;
  std::string err;
  Schedule all;
  EXPECT_TRUE(Script::load(kSrc + "/algos/" + script, &s, &err)) << err;
  if (s) {
    EXPECT_TRUE(s->compileAll(Topo{nranks, 1}, root, &all, &err)) << err;
  }
  return all;
}

Step step(StepKind k, BufKind sb, int sc, BufKind db, int dc, int stage) {
  return Step{k, k == StepKind::Copy || k == StepKind::Reduce ? -1 : 1, ChunkRef{sb, sc},
              ChunkRef{db, dc}, stage};
}

constexpr BufKind In = BufKind::Input, Out = BufKind::Output;

// Every shipped allreduce, reduce and broadcast script copies its input to
// the output before touching either, so in place none needs the copy aside
// (a script change that loses this makes in-place calls copy again).
TEST(SchedInPlace, ShippedSchedulesNeedNoCopy) {
  for (const char *algo : {"allreduce/ring.lua", "allreduce/recursive_doubling.lua",
                           "allreduce/rabenseifner.lua", "reduce/binomial.lua", "reduce/chain.lua",
                           "broadcast/binomial.lua", "broadcast/chain.lua"}) {
    for (int n : {2, 3, 4, 5, 8}) {
      for (int root : {0, n - 1}) {
        Schedule s = compileAll(algo, n, root);
        ASSERT_EQ(s.ranks.size(), static_cast<size_t>(n)) << algo;
        for (int r = 0; r < n; r++)
          EXPECT_TRUE(inPlaceNeedsNoCopy(s.ranks[r], s.chunks))
              << algo << ", " << n << " ranks, root " << root << ", rank " << r;
      }
    }
  }
}

TEST(SchedInPlace, ReadingAnInputChunkAfterItsOutputChangedNeedsCopy) {
  RankSchedule rs;
  // Receive into output 0, then send input 0 (the same bytes, now changed).
  rs.steps = {step(StepKind::Recv, In, 0, Out, 0, 0), step(StepKind::Send, In, 0, Out, 0, 1)};
  EXPECT_FALSE(inPlaceNeedsNoCopy(rs, 2));
  // In one stage the send and the receive run together: the same.
  rs.steps = {step(StepKind::Recv, In, 0, Out, 0, 0), step(StepKind::Send, In, 0, Out, 0, 0)};
  EXPECT_FALSE(inPlaceNeedsNoCopy(rs, 2));
  // Send first, a stage earlier: the input was intact when read.
  rs.steps = {step(StepKind::Send, In, 0, Out, 0, 0), step(StepKind::Recv, In, 0, Out, 0, 1)};
  EXPECT_TRUE(inPlaceNeedsNoCopy(rs, 2));
  // Another chunk's output changing does not matter.
  rs.steps = {step(StepKind::Recv, In, 0, Out, 1, 0), step(StepKind::Send, In, 0, Out, 0, 1)};
  EXPECT_TRUE(inPlaceNeedsNoCopy(rs, 2));
}

TEST(SchedInPlace, LocalStepsThatAreNotNoOpsNeedCopy) {
  RankSchedule rs;
  // output 0 += input 0 would add the chunk to itself.
  rs.steps = {step(StepKind::Reduce, In, 0, Out, 0, 0)};
  EXPECT_FALSE(inPlaceNeedsNoCopy(rs, 1));
  // Copying input 0 back over an output 0 that changed would undo the change.
  rs.steps = {step(StepKind::Recv, In, 0, Out, 0, 0), step(StepKind::Copy, In, 0, Out, 0, 1)};
  EXPECT_FALSE(inPlaceNeedsNoCopy(rs, 1));
  // Input 1 onto output 0 changes output 0, so a later read of input 0 (the
  // same bytes) would see input 1's values.
  rs.steps = {step(StepKind::Copy, In, 1, Out, 0, 0), step(StepKind::Send, In, 0, Out, 0, 0)};
  EXPECT_FALSE(inPlaceNeedsNoCopy(rs, 2));
  // The same copy alone: input 0 is never read, so it may change.
  rs.steps = {step(StepKind::Copy, In, 1, Out, 0, 0)};
  EXPECT_TRUE(inPlaceNeedsNoCopy(rs, 2));
}

// nccl's in-place allgather/gather (the input is my block of the output) and
// reducescatter/scatter (the output is my block of the input): the compiled
// flag agrees with the check at my block's position, and the schedules the
// tuning picks for large messages need no copy on any rank.
TEST(SchedInPlace, ShippedBlockSchedules) {
  struct Case {
    const char *algo;
    bool inputIsBlock;
    bool allRanks;  // every rank must qualify
  };
  for (Case c : {Case{"allgather/ring.lua", true, true}, Case{"allgather/recursive_doubling.lua", true, false},
                 Case{"allgather/bruck.lua", true, false}, Case{"gather/linear.lua", true, true},
                 Case{"gather/binomial.lua", true, false}, Case{"reducescatter/ring.lua", false, true},
                 Case{"reducescatter/recursive_halving.lua", false, false},
                 Case{"scatter/linear.lua", false, true}, Case{"scatter/binomial.lua", false, false}}) {
    for (int n : {2, 3, 4, 5, 8}) {
      for (int root : {0, n - 1}) {
        Schedule s = compileAll(c.algo, n, root);
        ASSERT_EQ(s.ranks.size(), static_cast<size_t>(n)) << c.algo;
        int block = s.chunks / n;
        for (int r = 0; r < n; r++) {
          bool want = c.inputIsBlock ? inPlaceNeedsNoCopy(s.ranks[r], block, s.chunks, r * block, 0)
                                     : inPlaceNeedsNoCopy(s.ranks[r], s.chunks, block, 0, r * block);
          EXPECT_EQ(s.ranks[r].inPlaceBlockNoCopy, want) << c.algo << ", " << n << " ranks, rank " << r;
          if (c.allRanks) {
            EXPECT_TRUE(s.ranks[r].inPlaceBlockNoCopy)
                << c.algo << ", " << n << " ranks, root " << root << ", rank " << r;
          }
        }
      }
    }
  }
}

TEST(SchedInPlace, BlockLayoutsUseTheBlocksPosition) {
  RankSchedule rs;
  // Rank 1 of 2, its input (one chunk) is output chunk 1.  Receiving into
  // output chunk 1 and then sending input 0 reads changed bytes.
  rs.steps = {step(StepKind::Recv, In, 0, Out, 1, 0), step(StepKind::Send, In, 0, Out, 0, 1)};
  EXPECT_FALSE(inPlaceNeedsNoCopy(rs, 1, 2, 1, 0));
  // Receiving into output chunk 0 (the peer's block) does not touch it.
  rs.steps = {step(StepKind::Recv, In, 0, Out, 0, 0), step(StepKind::Send, In, 0, Out, 0, 1)};
  EXPECT_TRUE(inPlaceNeedsNoCopy(rs, 1, 2, 1, 0));
  // The copy of my block onto its own place is a no-op, and a later
  // receive into the other block does not matter...
  rs.steps = {step(StepKind::Copy, In, 0, Out, 1, 0), step(StepKind::Send, In, 0, Out, 0, 1),
              step(StepKind::Recv, In, 0, Out, 0, 1)};
  EXPECT_TRUE(inPlaceNeedsNoCopy(rs, 1, 2, 1, 0));
  // ... but a receive into my block in the stage that sends it does.
  rs.steps = {step(StepKind::Copy, In, 0, Out, 0, 0), step(StepKind::Send, In, 0, Out, 0, 1),
              step(StepKind::Recv, In, 0, Out, 1, 1)};
  EXPECT_FALSE(inPlaceNeedsNoCopy(rs, 1, 2, 1, 0));
  // The output is rank 0's block (chunk 0) of a two-chunk input: reducing
  // into it before input chunk 0 is sent reads the sum, not the input.
  rs.steps = {step(StepKind::RecvReduce, In, 0, Out, 0, 0), step(StepKind::Send, In, 0, Out, 0, 1)};
  EXPECT_FALSE(inPlaceNeedsNoCopy(rs, 2, 1, 0, 0));
  rs.steps = {step(StepKind::Send, In, 0, Out, 0, 0), step(StepKind::RecvReduce, In, 1, Out, 0, 1)};
  EXPECT_TRUE(inPlaceNeedsNoCopy(rs, 2, 1, 0, 0));
  // Negative positions are refused.
  EXPECT_FALSE(inPlaceNeedsNoCopy(rs, 2, 1, -1, 0));
}

TEST(SchedInPlace, WritingTheInputOrAChunkOutOfRangeNeedsCopy) {
  RankSchedule rs;
  rs.steps = {step(StepKind::Recv, In, 0, In, 0, 0)};
  EXPECT_FALSE(inPlaceNeedsNoCopy(rs, 1));
  rs.steps = {step(StepKind::Send, In, 3, Out, 0, 0)};
  EXPECT_FALSE(inPlaceNeedsNoCopy(rs, 2));
  rs.steps = {step(StepKind::Recv, In, 0, Out, -1, 0)};
  EXPECT_FALSE(inPlaceNeedsNoCopy(rs, 2));
}

}  // namespace
