// Deterministic mode in the executor, ranks as threads: allreduce, reduce
// and reducescatter with Sum, Prod and Avg on every floating type, in and
// out of place, at counts around each path's thresholds, on each path (the
// one-host block, one-host direct, the schedules over loopback Conns),
// compared bit for bit with the rank-ordered left fold this test computes
// (det_ref.h).  Also: default mode gives the same bits run to run on each
// path, and a rank in deterministic mode beside one that is not fails as a
// mismatch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/exec/det_ref.h"
#include "tests/exec/ranks.h"

using namespace flagcx;
using execfix::coll;

namespace {

enum class Path { Block, Direct, Schedule };

const flagcxDataType_t kTypes[] = {flagcxFloat32, flagcxFloat64,    flagcxFloat16,
                                   flagcxBfloat16, flagcxFloat8e4m3, flagcxFloat8e5m2};
const flagcxRedOp_t kOps[] = {flagcxSum, flagcxProd, flagcxAvg};
const OpKind kColls[] = {OpKind::AllReduce, OpKind::Reduce, OpKind::ReduceScatter};

// FLAGCX_SHM_SMALL_BYTES and FLAGCX_SHM_DIRECT_BYTES at their defaults.
constexpr size_t kSmall = 4096, kDirectMin = 8192;

// Rank r's input of one call (count elements per block; reducescatter: n blocks).
std::vector<char> inputBuf(flagcxDataType_t dt, flagcxRedOp_t op, int r, size_t elems) {
  std::vector<char> b(elems * detref::sizeOf(dt));
  for (size_t i = 0; i < elems; i++) detref::put(dt, b.data(), i, detref::inputOf(dt, op, r, i));
  return b;
}

std::string callText(OpKind op, flagcxDataType_t dt, flagcxRedOp_t red, size_t count, bool inPlace) {
  return std::string(opName(op)) + " " + std::to_string(static_cast<int>(dt)) + "/" +
         std::to_string(static_cast<int>(red)) + " count " + std::to_string(count) +
         (inPlace ? " in place" : "");
}

// One call on rank r, its output checked bit for bit against the fold.
void checkedCall(int n, int r, Executor &ex, OpKind op, flagcxDataType_t dt, flagcxRedOp_t red,
                 size_t count, bool inPlace) {
  const size_t ts = detref::sizeOf(dt);
  const size_t elems = op == OpKind::ReduceScatter ? count * static_cast<size_t>(n) : count;
  const int root = n - 1;
  std::vector<std::vector<char>> ins;
  for (int q = 0; q < n; q++) ins.push_back(inputBuf(dt, red, q, elems));
  std::vector<char> mine = ins[static_cast<size_t>(r)], out(count * ts, 0x55);
  char *recv = out.data();
  if (inPlace)
    recv = mine.data() + (op == OpKind::ReduceScatter ? static_cast<size_t>(r) * count * ts : 0);
  ASSERT_EQ(ex.enqueueColl(coll(op, mine.data(), recv, count, dt, red, root), nullptr),
            flagcxSuccess)
      << "rank " << r << " " << callText(op, dt, red, count, inPlace);
  if (op == OpKind::Reduce && r != root) return;
  const size_t base = op == OpKind::ReduceScatter ? static_cast<size_t>(r) * count : 0;
  std::vector<char> want(count * ts);
  for (size_t i = 0; i < count; i++)
    detref::foldInto(dt, red, n, [&](int k) { return detref::get(dt, ins[static_cast<size_t>(k)].data(), base + i); },
                     want.data(), i);
  for (size_t i = 0; i < count; i++)
    ASSERT_EQ(std::memcmp(recv + i * ts, want.data() + i * ts, ts), 0)
        << "rank " << r << " " << callText(op, dt, red, count, inPlace) << " element " << i
        << ": got " << detref::get(dt, recv, i) << ", the fold gives " << detref::get(dt, want.data(), i);
}

// The counts that keep a call on `path` (elements per rank's share).
std::vector<size_t> countsFor(Path path, OpKind op, flagcxDataType_t dt, int n) {
  const size_t ts = detref::sizeOf(dt), blocks = op == OpKind::ReduceScatter ? static_cast<size_t>(n) : 1;
  switch (path) {
    case Path::Block: {
      const size_t most = kSmall / ts / blocks;  // the block's slot
      std::vector<size_t> v;
      for (size_t c : {size_t{1}, size_t{255}, size_t{256}, size_t{257}, most - 1})
        if (c < most) v.push_back(c);
      v.push_back(most);
      return v;
    }
    case Path::Direct: return {kDirectMin / ts, kDirectMin / ts + 257, 40000};
    default: return {1, 255, 256, 257, kSmall / ts + 1, 70000};
  }
}

struct Case {
  int nranks;
  Path path;
};

std::string caseName(const Case &c) {
  static const char *const kNames[] = {"block", "direct", "schedule"};
  return std::string(kNames[static_cast<int>(c.path)]) + "_" + std::to_string(c.nranks) + "ranks";
}

class Deterministic : public ::testing::TestWithParam<Case> {};

INSTANTIATE_TEST_SUITE_P(
    Paths, Deterministic,
    ::testing::Values(Case{1, Path::Schedule}, Case{2, Path::Block}, Case{3, Path::Block}, Case{4, Path::Block},
                      Case{5, Path::Block}, Case{2, Path::Direct}, Case{3, Path::Direct},
                      Case{4, Path::Direct}, Case{2, Path::Schedule}, Case{3, Path::Schedule},
                      Case{4, Path::Schedule}),
    [](const auto &i) { return caseName(i.param); });

TEST_P(Deterministic, EveryCallIsTheRankOrderedFold) {
  const Case c = GetParam();
  execfix::Options o;
  o.sameHost = c.path != Path::Schedule;
  // FLAGCX_ALGO naming these ops takes them off the block: the schedules then.
  const bool forced = std::getenv("FLAGCX_ALGO") != nullptr;
  execfix::runRanks(c.nranks, o, [&](int r, Executor &ex) {
    ex.setDeterministic(true);
    uint64_t calls = 0;
    for (OpKind op : kColls)
      for (flagcxDataType_t dt : kTypes)
        for (flagcxRedOp_t red : kOps)
          for (size_t count : countsFor(c.path, op, dt, c.nranks))
            for (bool inPlace : {false, true}) {
              checkedCall(c.nranks, r, ex, op, dt, red, count, inPlace);
              if (::testing::Test::HasFatalFailure()) return;
              calls++;
            }
    if (forced) return;
    EXPECT_EQ(ex.smallCalls(), c.path == Path::Block ? calls : 0u);
    EXPECT_EQ(ex.shmDirectCalls(), c.path == Path::Direct ? calls : 0u);
  });
}

// Past the slice size (512 KiB): the schedules' messages in several pieces.
TEST(DeterministicLarge, SchedulesPastTheSlice) {
  for (int n : {2, 3})
    execfix::runRanks(n, {}, [&](int r, Executor &ex) {
      ex.setDeterministic(true);
      for (flagcxDataType_t dt : {flagcxFloat32, flagcxBfloat16})
        for (flagcxRedOp_t red : {flagcxSum, flagcxAvg}) {
          checkedCall(n, r, ex, OpKind::AllReduce, dt, red, 300001, false);
          checkedCall(n, r, ex, OpKind::ReduceScatter, dt, red, 150001, true);
        }
    });
}

// Default mode: the same inputs twice give the same bits, on every path.
TEST(DefaultMode, RunToRunOnEveryPath) {
  for (Path path : {Path::Block, Path::Direct, Path::Schedule}) {
    execfix::Options o;
    o.sameHost = path != Path::Schedule;
    const int n = 3;
    execfix::runRanks(n, o, [&](int r, Executor &ex) {
      for (OpKind op : kColls)
        for (flagcxDataType_t dt : {flagcxFloat32, flagcxFloat16, flagcxBfloat16})
          for (flagcxRedOp_t red : {flagcxSum, flagcxAvg}) {
            const size_t count = countsFor(path, op, dt, n).back();
            const size_t ts = detref::sizeOf(dt);
            const size_t elems = op == OpKind::ReduceScatter ? count * n : count;
            std::vector<char> in = inputBuf(dt, red, r, elems), a(count * ts), b(count * ts, 1);
            ASSERT_EQ(ex.enqueueColl(coll(op, in.data(), a.data(), count, dt, red, 0), nullptr), flagcxSuccess);
            ASSERT_EQ(ex.enqueueColl(coll(op, in.data(), b.data(), count, dt, red, 0), nullptr), flagcxSuccess);
            if (op == OpKind::Reduce && r != 0) continue;
            ASSERT_EQ(a, b) << "rank " << r << " " << callText(op, dt, red, count, false);
          }
    });
  }
}

// One rank deterministic, its peer not: both calls fail, naming the
// mismatch, on each path; no hang.
TEST(DeterministicMismatch, IsAnErrorOnEveryPath) {
  for (Path path : {Path::Block, Path::Direct, Path::Schedule}) {
    execfix::Options o;
    o.sameHost = path != Path::Schedule;
    execfix::runRanks(2, o, [&](int r, Executor &ex) {
      ex.setDeterministic(r == 0);
      const size_t count = countsFor(path, OpKind::AllReduce, flagcxFloat32, 2).back();
      std::vector<float> in(count, 1.f), out(count);
      EXPECT_NE(ex.enqueueColl(coll(OpKind::AllReduce, in.data(), out.data(), count), nullptr),
                flagcxSuccess)
          << "rank " << r << " path " << static_cast<int>(path);
      EXPECT_NE(ex.lastError().find("mismatch"), std::string::npos) << ex.lastError();
    });
  }
}

// The reference itself: its encoding against values every format has.
TEST(DeterministicReference, KnownCodes) {
  EXPECT_EQ(detref::encode(flagcxFloat16, 1.0f), 0x3c00u);
  EXPECT_EQ(detref::encode(flagcxFloat16, -2.0f), 0xc000u);
  EXPECT_EQ(detref::encode(flagcxFloat16, 65504.0f), 0x7bffu);
  EXPECT_EQ(detref::encode(flagcxFloat16, std::ldexp(1.0f, -24)), 0x0001u);
  EXPECT_EQ(detref::encode(flagcxBfloat16, 1.0f), 0x3f80u);
  EXPECT_EQ(detref::encode(flagcxFloat8e4m3, 448.0f), 0x7eu);
  EXPECT_EQ(detref::encode(flagcxFloat8e4m3, 1.0f), 0x38u);
  EXPECT_EQ(detref::encode(flagcxFloat8e5m2, 57344.0f), 0x7bu);
  EXPECT_EQ(detref::encode(flagcxFloat8e5m2, 1.0f), 0x3cu);
  EXPECT_EQ(detref::roundTo(flagcxFloat16, 1.0f + std::ldexp(1.0f, -11)), 1.0f);  // tie: even
  EXPECT_EQ(detref::roundTo(flagcxFloat16, 65520.0f), INFINITY);
  EXPECT_EQ(detref::roundTo(flagcxFloat8e4m3, 1000.0f), 448.0f);  // saturates
  EXPECT_EQ(detref::roundTo(flagcxFloat8e5m2, 61440.0f), INFINITY);
  for (uint32_t b = 0; b < 256; b++) {
    float v = detref::decode(flagcxFloat8e4m3, b);
    if (!std::isnan(v)) {
      EXPECT_EQ(detref::encode(flagcxFloat8e4m3, v), b) << b;
    }
  }
  // The inputs make the order matter: folding them backwards differs somewhere.
  bool differs = false;
  for (size_t i = 0; i < 64 && !differs; i++) {
    float fwd = 0, bwd = 0;
    for (int k = 0; k < 4; k++) fwd += static_cast<float>(detref::inputOf(flagcxFloat32, flagcxSum, k, i));
    for (int k = 3; k >= 0; k--) bwd += static_cast<float>(detref::inputOf(flagcxFloat32, flagcxSum, k, i));
    differs = fwd != bwd;
  }
  EXPECT_TRUE(differs);
}

}  // namespace
