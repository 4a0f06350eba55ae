// inPlaceNeedsNoCopy (sched/in_place.h): which ranks' schedules may run an
// in-place call on the one buffer, so that exec/coll_run.cc need not copy
// the input aside first.
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
  if (s) EXPECT_TRUE(s->compileAll(Topo{nranks, 1}, root, &all, &err)) << err;
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
