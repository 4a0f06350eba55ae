// The executor's schedule path in one process: collectives of several sizes
// on 2-4 ranks (threads) over loopback Conns, checked element by element;
// calls that disagree across ranks, and arguments no schedule takes, fail as
// errors.
#include <gtest/gtest.h>

#include <vector>

#include "tests/exec/ranks.h"

using namespace flagcx;
using execfix::coll;
using execfix::inputOf;

namespace {

struct Shape {
  int nranks;
  size_t count;
};

class SchedulePath : public ::testing::TestWithParam<Shape> {};

// Sizes: a single element, one below a slice, several slices (512 KiB each).
INSTANTIATE_TEST_SUITE_P(Sizes, SchedulePath,
                         ::testing::Values(Shape{2, 1}, Shape{2, 1000}, Shape{2, 300001},
                                           Shape{3, 4097}, Shape{4, 1}, Shape{4, 70000}),
                         [](const auto &i) {
                           return std::to_string(i.param.nranks) + "ranks_" +
                                  std::to_string(i.param.count);
                         });

TEST_P(SchedulePath, AllReduce) {
  const Shape sh = GetParam();
  execfix::runRanks(sh.nranks, {}, [&](int r, Executor &ex) {
    std::vector<float> in(sh.count), out(sh.count, -1.f);
    for (size_t i = 0; i < sh.count; i++) in[i] = inputOf(r, i);
    ASSERT_EQ(ex.enqueueColl(coll(OpKind::AllReduce, in.data(), out.data(), sh.count), nullptr),
              flagcxSuccess);
    for (size_t i = 0; i < sh.count; i++) {
      float want = 0;
      for (int q = 0; q < sh.nranks; q++) want += inputOf(q, i);
      ASSERT_EQ(out[i], want) << "rank " << r << " element " << i;
    }
    EXPECT_EQ(ex.smallCalls(), 0u);
    EXPECT_EQ(ex.shmDirectCalls(), 0u);
  });
}

TEST_P(SchedulePath, AllReduceInPlaceMax) {
  const Shape sh = GetParam();
  execfix::runRanks(sh.nranks, {}, [&](int r, Executor &ex) {
    std::vector<float> buf(sh.count);
    for (size_t i = 0; i < sh.count; i++) buf[i] = inputOf(r, i);
    ASSERT_EQ(ex.enqueueColl(coll(OpKind::AllReduce, buf.data(), buf.data(), sh.count,
                                  flagcxFloat32, flagcxMax), nullptr),
              flagcxSuccess);
    for (size_t i = 0; i < sh.count; i++)
      ASSERT_EQ(buf[i], inputOf(sh.nranks - 1, i)) << "rank " << r << " element " << i;
  });
}

TEST_P(SchedulePath, AllGather) {
  const Shape sh = GetParam();
  execfix::runRanks(sh.nranks, {}, [&](int r, Executor &ex) {
    std::vector<float> in(sh.count), out(sh.count * static_cast<size_t>(sh.nranks), -1.f);
    for (size_t i = 0; i < sh.count; i++) in[i] = inputOf(r, i);
    ASSERT_EQ(ex.enqueueColl(coll(OpKind::AllGather, in.data(), out.data(), sh.count), nullptr),
              flagcxSuccess);
    for (int q = 0; q < sh.nranks; q++)
      for (size_t i = 0; i < sh.count; i++)
        ASSERT_EQ(out[static_cast<size_t>(q) * sh.count + i], inputOf(q, i))
            << "rank " << r << " block " << q << " element " << i;
  });
}

TEST_P(SchedulePath, ReduceScatter) {
  const Shape sh = GetParam();
  execfix::runRanks(sh.nranks, {}, [&](int r, Executor &ex) {
    const size_t total = sh.count * static_cast<size_t>(sh.nranks);
    std::vector<float> in(total), out(sh.count, -1.f);
    for (size_t i = 0; i < total; i++) in[i] = inputOf(r, i);
    ASSERT_EQ(ex.enqueueColl(coll(OpKind::ReduceScatter, in.data(), out.data(), sh.count), nullptr),
              flagcxSuccess);
    for (size_t i = 0; i < sh.count; i++) {
      size_t at = static_cast<size_t>(r) * sh.count + i;
      float want = 0;
      for (int q = 0; q < sh.nranks; q++) want += inputOf(q, at);
      ASSERT_EQ(out[i], want) << "rank " << r << " element " << i;
    }
  });
}

// Two channels: the slices of a step alternate between them.
TEST(SchedulePathChannels, AllReduceOverTwoChannels) {
  const size_t count = 600000;  // several 512 KiB slices per step
  execfix::Options o;
  o.nchannels = 2;
  execfix::runRanks(3, o, [&](int r, Executor &ex) {
    std::vector<float> in(count), out(count);
    for (size_t i = 0; i < count; i++) in[i] = inputOf(r, i);
    ASSERT_EQ(ex.enqueueColl(coll(OpKind::AllReduce, in.data(), out.data(), count), nullptr),
              flagcxSuccess);
    for (size_t i = 0; i < count; i++)
      ASSERT_EQ(out[i], inputOf(0, i) + inputOf(1, i) + inputOf(2, i)) << "element " << i;
  });
}

// Several calls in a row on one executor: each is its own tag and sequence.
TEST(SchedulePathSequence, BackToBackCallsOfMixedOps) {
  execfix::runRanks(2, {}, [&](int r, Executor &ex) {
    for (int k = 0; k < 5; k++) {
      size_t count = 100 + static_cast<size_t>(k) * 997;
      std::vector<float> in(count, static_cast<float>(r + k)), out(2 * count);
      OpKind op = k % 2 ? OpKind::AllGather : OpKind::AllReduce;
      ASSERT_EQ(ex.enqueueColl(coll(op, in.data(), out.data(), count), nullptr), flagcxSuccess);
      if (op == OpKind::AllReduce)
        EXPECT_EQ(out[count - 1], static_cast<float>(2 * k + 1)) << "call " << k;
      else
        EXPECT_EQ(out[2 * count - 1], static_cast<float>(1 + k)) << "call " << k;
    }
  });
}

// Rooted ops at a root other than 0, and Avg (divided at the root).
TEST(SchedulePathRooted, BroadcastAndReduceAvgAtRankOne) {
  const size_t count = 200003;
  execfix::runRanks(3, {}, [&](int r, Executor &ex) {
    std::vector<float> buf(count, -1.f);
    if (r == 1)
      for (size_t i = 0; i < count; i++) buf[i] = inputOf(1, i);
    ASSERT_EQ(ex.enqueueColl(coll(OpKind::Broadcast, buf.data(), buf.data(), count,
                                  flagcxFloat32, flagcxSum, 1), nullptr),
              flagcxSuccess);
    for (size_t i = 0; i < count; i++) ASSERT_EQ(buf[i], inputOf(1, i)) << "rank " << r << " element " << i;
    std::vector<float> in(count, static_cast<float>(3 * r)), out(count, -1.f);
    ASSERT_EQ(ex.enqueueColl(coll(OpKind::Reduce, in.data(), out.data(), count, flagcxFloat32,
                                  flagcxAvg, 1), nullptr),
              flagcxSuccess);
    if (r == 1)
      for (size_t i = 0; i < count; i++) ASSERT_EQ(out[i], 3.f) << "element " << i;  // (0+3+6)/3
    else
      EXPECT_EQ(out[0], -1.f) << "a non-root's output is left alone";
  });
}

// Alltoallv with counts that differ per pair (one pair sends nothing).
TEST(SchedulePathAlltoallv, UnevenCounts) {
  const int n = 3;
  auto cnt = [](int from, int to) { return static_cast<size_t>((from * 5 + to * 3) % 7) * 1000; };
  execfix::runRanks(n, {}, [&](int r, Executor &ex) {
    std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
    size_t st = 0, rt = 0;
    for (int q = 0; q < n; q++) {
      sc[q] = cnt(r, q), sd[q] = st, st += sc[q];
      rc[q] = cnt(q, r), rd[q] = rt, rt += rc[q];
    }
    std::vector<float> in(st), out(rt + 1, -1.f);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < sc[q]; i++) in[sd[q] + i] = static_cast<float>(r * 100 + q) + static_cast<float>(i % 5);
    CollArgs a = coll(OpKind::AlltoAllv, in.data(), out.data(), 0);
    a.sendcounts = sc.data(), a.sdispls = sd.data(), a.recvcounts = rc.data(), a.rdispls = rd.data();
    ASSERT_EQ(ex.enqueueColl(a, nullptr), flagcxSuccess);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < rc[q]; i++)
        ASSERT_EQ(out[rd[q] + i], static_cast<float>(q * 100 + r) + static_cast<float>(i % 5))
            << "rank " << r << " from " << q << " element " << i;
    EXPECT_EQ(out[rt], -1.f) << "nothing written past the last block";
  });
}

// Ranks that call with different counts: the tags differ, and every rank
// gets an error (no hang, no wrong sum), with a log line saying why.
TEST(SchedulePathErrors, TagMismatchIsAnError) {
  execfix::runRanks(2, {}, [&](int r, Executor &ex) {
    size_t count = r == 0 ? 1000 : 1001;
    std::vector<float> in(count, 1.f), out(count);
    flagcxResult_t res = ex.enqueueColl(coll(OpKind::AllReduce, in.data(), out.data(), count), nullptr);
    EXPECT_NE(res, flagcxSuccess) << "rank " << r;
    EXPECT_NE(ex.asyncError(), flagcxSuccess) << "rank " << r;
    EXPECT_FALSE(ex.lastError().empty()) << "rank " << r;
  });
}

// A broadcast rooted outside the communicator has no schedule: rejected
// on every rank, nothing sent.
TEST(SchedulePathErrors, RootOutsideTheCommunicatorIsRejected) {
  execfix::runRanks(2, {}, [&](int r, Executor &ex) {
    std::vector<float> buf(64, 1.f);
    flagcxResult_t res = ex.enqueueColl(
        coll(OpKind::Broadcast, buf.data(), buf.data(), buf.size(), flagcxFloat32, flagcxSum, 7),
        nullptr);
    EXPECT_NE(res, flagcxSuccess) << "rank " << r;
    EXPECT_EQ(buf[0], 1.f);
  });
}

}  // namespace
