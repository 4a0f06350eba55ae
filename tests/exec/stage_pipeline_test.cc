// Host staging's pipeline on CPU: the host adapter's emulated copy engine
// (FLAGCX_HOST_COPY_ENGINE_NS) completes copies in issue order, later than
// they were issued, and a mark is reached only once every copy before it is
// done; the automatic slice size; and whole staged collectives and
// point-to-point groups on ranks as threads whose inputs reach the host
// slice by slice behind that engine, so that a send posted before its
// slices were copied, or an output read before its copy back, would carry
// the previous call's bytes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "adapters/device/host/host_copy_engine.h"
#include "base/params.h"
#include "exec/state.h"
#include "tests/exec/ranks.h"

using namespace flagcx;
using execfix::coll;

namespace {

TEST(CopyEngine, CompletesInIssueOrder) {
  host::CopyEngine ce(2000);  // 2 us per KiB: a 64 KiB copy takes 128 us
  std::vector<char> a(64 << 10, 'a'), b(64 << 10, 'b'), dst(64 << 10, 0), small(8, 'c');
  ce.copyAsync(dst.data(), a.data(), a.size());
  ce.copyAsync(dst.data(), b.data(), b.size());
  uint64_t m = ce.mark();
  ce.copyAsync(dst.data(), small.data(), small.size());
  uint64_t m2 = ce.mark();
  EXPECT_EQ(m, 2u);
  EXPECT_EQ(m2, 3u);
  while (!ce.reached(m)) {
  }
  // Both earlier copies are done; the later one, if it ran first, would
  // have been overwritten by b's bytes.
  EXPECT_GE(ce.completed(), 2u);
  EXPECT_EQ(dst[100], 'b');
  ce.flush();
  EXPECT_EQ(ce.completed(), 3u);
  EXPECT_TRUE(ce.reached(m2));
  EXPECT_EQ(dst[0], 'c');
  EXPECT_EQ(dst[8], 'b');
}

TEST(StageSlice, FromMeasuredRates) {
  // Unmeasured: 1 MiB.
  EXPECT_EQ(chooseStageSlice(64 << 20, 0, 25e9), size_t(1) << 20);
  // 10 us per slice at 25 GB/s: sqrt(N o r / 2) = 2.9 MiB at 64 MiB.
  size_t s64 = chooseStageSlice(64 << 20, 10e-6, 25e9);
  EXPECT_GT(s64, size_t(2) << 20);
  EXPECT_LT(s64, size_t(4) << 20);
  EXPECT_EQ(s64 % 4096, 0u);
  // Grows with the bytes (as their square root), within [64 KiB, 64 MiB].
  EXPECT_LT(chooseStageSlice(4 << 20, 10e-6, 25e9), s64);
  EXPECT_GT(chooseStageSlice(size_t(1) << 30, 10e-6, 25e9), s64);
  EXPECT_EQ(chooseStageSlice(4096, 10e-6, 25e9), size_t(64) << 10);
  EXPECT_EQ(chooseStageSlice(size_t(1) << 40, 1e-3, 25e9), size_t(64) << 20);
}

// Every test below runs its ranks in staged mode behind a slow engine.
class Staged : public ::testing::TestWithParam<const char *> {
 protected:
  void SetUp() override {
    setenv("FLAGCX_HOST_COPY_ENGINE_NS", "300", 1);  // 0.3 ms per MiB
    setenv("FLAGCX_STAGE_SLICE_SIZE", GetParam(), 1);
    paramsReload();
  }
  void TearDown() override {
    unsetenv("FLAGCX_STAGE_SLICE_SIZE");
    paramsReload();  // the engine itself stays: it is made once per process
  }
};

INSTANTIATE_TEST_SUITE_P(Slices, Staged, ::testing::Values("4096", "-2"),
                         [](const auto &i) { return std::string(i.param[0] == '-' ? "auto" : "4KiB"); });

execfix::Options stagedRanks() {
  execfix::Options o;
  o.mode = ExecMode::Staged;
  return o;
}

float val(int call, int r, size_t i) { return static_cast<float>((call * 7 + r * 3 + static_cast<int>(i % 13)) % 50); }

// Two calls in a row through the same staging buffers, different inputs.
TEST_P(Staged, AllReduceTwiceIsExact) {
  const int n = 3;
  const size_t count = 300001;  // not a multiple of a slice
  execfix::runRanks(n, stagedRanks(), [&](int r, Executor &ex) {
    for (int call = 0; call < 2; call++) {
      std::vector<float> in(count), out(count, -1.f);
      for (size_t i = 0; i < count; i++) in[i] = val(call, r, i);
      ASSERT_EQ(ex.enqueueColl(coll(OpKind::AllReduce, in.data(), out.data(), count), nullptr),
                flagcxSuccess);
      for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int q = 0; q < n; q++) want += val(call, q, i);
        ASSERT_EQ(out[i], want) << "call " << call << " rank " << r << " element " << i;
      }
    }
  });
}

TEST_P(Staged, AllGatherAndReduceScatterAreExact) {
  const int n = 2;
  const size_t count = 70001;
  execfix::runRanks(n, stagedRanks(), [&](int r, Executor &ex) {
    for (int call = 0; call < 2; call++) {
      std::vector<float> in(count * n), out(count * n, -1.f);
      for (size_t i = 0; i < count * n; i++) in[i] = val(call, r, i);
      ASSERT_EQ(ex.enqueueColl(coll(OpKind::AllGather, in.data(), out.data(), count), nullptr),
                flagcxSuccess);
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < count; i++)
          ASSERT_EQ(out[q * count + i], val(call, q, i)) << "allgather call " << call;
      ASSERT_EQ(ex.enqueueColl(coll(OpKind::ReduceScatter, in.data(), out.data(), count), nullptr),
                flagcxSuccess);
      for (size_t i = 0; i < count; i++)
        ASSERT_EQ(out[i], val(call, 0, r * count + i) + val(call, 1, r * count + i))
            << "reducescatter call " << call;
    }
  });
}

// A group of sends and receives (to the peer and to oneself), the sends
// staged slice by slice behind the gate.
TEST_P(Staged, SendRecvGroupIsExact) {
  const int n = 2;
  const size_t bytes = (1 << 20) + 12345;
  execfix::runRanks(n, stagedRanks(), [&](int r, Executor &ex) {
    for (int call = 0; call < 2; call++) {
      std::vector<char> toPeer(bytes), toSelf(bytes / 3), fromPeer(bytes, 0), fromSelf(bytes / 3, 0);
      for (size_t i = 0; i < bytes; i++) toPeer[i] = static_cast<char>(i * 7 + r + call);
      for (size_t i = 0; i < toSelf.size(); i++) toSelf[i] = static_cast<char>(i * 5 + r + call);
      ASSERT_EQ(groupStart(), flagcxSuccess);
      ASSERT_EQ(ex.enqueueP2P(true, toSelf.data(), toSelf.size(), r, nullptr), flagcxSuccess);
      ASSERT_EQ(ex.enqueueP2P(true, toPeer.data(), bytes, 1 - r, nullptr), flagcxSuccess);
      ASSERT_EQ(ex.enqueueP2P(false, fromPeer.data(), bytes, 1 - r, nullptr), flagcxSuccess);
      ASSERT_EQ(ex.enqueueP2P(false, fromSelf.data(), fromSelf.size(), r, nullptr), flagcxSuccess);
      ASSERT_EQ(groupEnd(), flagcxSuccess);
      for (size_t i = 0; i < bytes; i++)
        ASSERT_EQ(fromPeer[i], static_cast<char>(i * 7 + (1 - r) + call)) << "byte " << i;
      ASSERT_EQ(memcmp(fromSelf.data(), toSelf.data(), toSelf.size()), 0);
    }
  });
}

}  // namespace
