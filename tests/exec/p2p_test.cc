// Point-to-point groups through the executor in one process (ranks as
// threads over loopback Conns): every rank sends to its right neighbour and
// receives from its left in one group, whatever the order of the calls; a
// receive longer than what arrives fails as an error.
#include <gtest/gtest.h>

#include <vector>

#include "tests/exec/ranks.h"

using namespace flagcx;

namespace {

TEST(ExecP2P, RingExchangeInOneGroup) {
  const int n = 3;
  const size_t count = 150001;  // several slices
  execfix::runRanks(n, {}, [&](int r, Executor &ex) {
    std::vector<int32_t> out(count), in(count, -1);
    for (size_t i = 0; i < count; i++) out[i] = r * 1000003 + static_cast<int32_t>(i);
    int right = (r + 1) % n, left = (r + n - 1) % n;
    ASSERT_EQ(groupStart(), flagcxSuccess);
    // Receive first on odd ranks, send first on even ones: the group posts
    // them all at once, so the order cannot deadlock.
    if (r % 2) ASSERT_EQ(ex.enqueueP2P(false, in.data(), count * 4, left, nullptr), flagcxSuccess);
    ASSERT_EQ(ex.enqueueP2P(true, out.data(), count * 4, right, nullptr), flagcxSuccess);
    if (!(r % 2)) ASSERT_EQ(ex.enqueueP2P(false, in.data(), count * 4, left, nullptr), flagcxSuccess);
    ASSERT_EQ(groupEnd(), flagcxSuccess);
    for (size_t i = 0; i < count; i++)
      ASSERT_EQ(in[i], left * 1000003 + static_cast<int32_t>(i)) << "rank " << r << " element " << i;
  });
}

TEST(ExecP2P, ShorterMessageThanPostedIsAnError) {
  execfix::runRanks(2, {}, [&](int r, Executor &ex) {
    std::vector<char> buf(4096, 7);
    flagcxResult_t res = r == 0 ? ex.enqueueP2P(true, buf.data(), 1000, 1, nullptr)
                                : ex.enqueueP2P(false, buf.data(), 4096, 0, nullptr);
    if (r == 1) {
      EXPECT_NE(res, flagcxSuccess);
      EXPECT_FALSE(ex.lastError().empty());
    }
  });
}

}  // namespace
