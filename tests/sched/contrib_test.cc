// ContribSet: the verifier's multisets of (rank, chunk) items as runs.
#include <gtest/gtest.h>

#include "sched/contrib.h"

using namespace flagcx;

namespace {
std::vector<ContribSet::Run> runs(const ContribSet &s) { return {s.begin(), s.end()}; }
}  // namespace

TEST(SchedContrib, AddJoinsNeighboursAndCountsOverlaps) {
  ContribSet a = ContribSet::range(0, 4);
  a.add(ContribSet::range(4, 8));
  EXPECT_EQ(runs(a), (std::vector<ContribSet::Run>{{0, 8, 1}}));
  a.add(ContribSet::range(2, 3));
  EXPECT_EQ(runs(a), (std::vector<ContribSet::Run>{{0, 2, 1}, {2, 1, 2}, {3, 5, 1}}));
  EXPECT_FALSE(a == ContribSet::range(0, 8));
  ContribSet::Diff d = a.diff(ContribSet::range(0, 9), 3);
  ASSERT_EQ(d.extra.size(), 1u);
  EXPECT_EQ(d.extra[0].first, 2u);   // item 2, counted twice
  EXPECT_EQ(d.extra[0].second, 1u);  // wanted once
  EXPECT_EQ(d.missing, (std::vector<uint64_t>{8}));
}

TEST(SchedContrib, UniteKeepsMultiplicityOne) {
  ContribSet a = ContribSet::range(0, 3);
  a.unite(ContribSet::range(1, 5));
  a.unite(ContribSet::one(9));
  EXPECT_EQ(runs(a), (std::vector<ContribSet::Run>{{0, 5, 1}, {9, 1, 1}}));
  ContribSet b = a;  // a copy of a set held on the heap
  a.clear();
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.size(), 2u);
  ContribSet c = std::move(b);
  EXPECT_EQ(runs(c), (std::vector<ContribSet::Run>{{0, 5, 1}, {9, 1, 1}}));
  c.add(c);
  EXPECT_EQ(runs(c), (std::vector<ContribSet::Run>{{0, 5, 2}, {9, 1, 2}}));
}

TEST(SchedContrib, DiffNamesStrangers) {
  ContribSet a = ContribSet::one(7);
  ContribSet::Diff d = a.diff(ContribSet::one(3), 3);
  ASSERT_EQ(d.extra.size(), 1u);
  EXPECT_EQ(d.extra[0].first, 7u);
  EXPECT_EQ(d.extra[0].second, 0u);  // does not belong there
  EXPECT_EQ(d.missing, (std::vector<uint64_t>{3}));
}
