// The executor's one-host paths in one process (ranks as threads, one
// shared block): small calls through the block, large ones straight between
// the ranks' buffers, each checked element by element and counted; calls
// that disagree across ranks fail as errors on the block too.
#include <gtest/gtest.h>

#include <vector>

#include "tests/exec/ranks.h"

using namespace flagcx;
using execfix::coll;
using execfix::inputOf;

namespace {

execfix::Options oneHost() {
  execfix::Options o;
  o.sameHost = true;
  return o;
}

void allReduceChecked(int nranks, int r, Executor &ex, size_t count) {
  std::vector<float> in(count), out(count, -1.f);
  for (size_t i = 0; i < count; i++) in[i] = inputOf(r, i);
  ASSERT_EQ(ex.enqueueColl(coll(OpKind::AllReduce, in.data(), out.data(), count), nullptr),
            flagcxSuccess);
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int q = 0; q < nranks; q++) want += inputOf(q, i);
    ASSERT_EQ(out[i], want) << "rank " << r << " count " << count << " element " << i;
  }
}

class OneHost : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Ranks, OneHost, ::testing::Values(2, 3, 4));

TEST_P(OneHost, SmallCallsTakeTheBlock) {
  const int n = GetParam();
  execfix::runRanks(n, oneHost(), [&](int r, Executor &ex) {
    ASSERT_GT(ex.smallBytes(), 0u) << "no shared block";
    for (size_t count : {size_t{1}, size_t{16}, ex.smallBytes() / sizeof(float)})
      allReduceChecked(n, r, ex, count);
    EXPECT_EQ(ex.smallCalls(), 3u);
    EXPECT_EQ(ex.shmDirectCalls(), 0u);
  });
}

TEST_P(OneHost, LargeCallsGoDirect) {
  const int n = GetParam();
  execfix::runRanks(n, oneHost(), [&](int r, Executor &ex) {
    allReduceChecked(n, r, ex, 100000);
    const size_t count = 30000;
    std::vector<float> in(count), out(count * static_cast<size_t>(n), -1.f);
    for (size_t i = 0; i < count; i++) in[i] = inputOf(r, i);
    ASSERT_EQ(ex.enqueueColl(coll(OpKind::AllGather, in.data(), out.data(), count), nullptr),
              flagcxSuccess);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < count; i++)
        ASSERT_EQ(out[static_cast<size_t>(q) * count + i], inputOf(q, i)) << "block " << q;
    EXPECT_EQ(ex.shmDirectCalls(), 2u);
    EXPECT_EQ(ex.smallCalls(), 0u);
  });
}

// Between the block's limit and direct's minimum, and for alltoallv, the
// one-host communicator takes the schedules.
TEST_P(OneHost, MiddleSizesTakeTheSchedules) {
  const int n = GetParam();
  execfix::runRanks(n, oneHost(), [&](int r, Executor &ex) {
    allReduceChecked(n, r, ex, ex.smallBytes() / sizeof(float) + 1);
    EXPECT_EQ(ex.smallCalls(), 0u);
    EXPECT_EQ(ex.shmDirectCalls(), 0u);
  });
}

TEST(OneHostErrors, MismatchOnTheBlockIsAnError) {
  execfix::runRanks(2, oneHost(), [&](int r, Executor &ex) {
    size_t count = r == 0 ? 8 : 9;
    std::vector<float> in(count, 1.f), out(count);
    EXPECT_NE(ex.enqueueColl(coll(OpKind::AllReduce, in.data(), out.data(), count), nullptr),
              flagcxSuccess)
        << "rank " << r;
    EXPECT_FALSE(ex.lastError().empty());
  });
}

}  // namespace
