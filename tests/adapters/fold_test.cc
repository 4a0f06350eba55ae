// hostFold, the rank-ordered fold of n sources, against a left fold this test
// computes element by element: float32/float64 in their own arithmetic; half,
// bfloat16 and FP8 widened, folded in float32 and rounded once (after the
// division for Avg).  Values mix magnitudes and cancel, so that a different
// order or an extra rounding shows.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "adapters/device/adapter.h"
#include "adapters/device/host/host_reduce_kernels.h"
#include "tests/common/float_elems.h"

using namespace flagcx;
namespace rk = flagcx::reduce_kernels;

namespace {

using testelems::narrow;
using testelems::widen;

template <class T>
T apply(T a, T b, flagcxRedOp_t op) {
  switch (op) {
    case flagcxProd: return a * b;
    case flagcxMax: return a < b ? b : a;
    case flagcxMin: return b < a ? b : a;
    default: return a + b;
  }
}

// The left fold of element i, in the arithmetic the contract names.
void refFold(const std::vector<std::vector<uint8_t>> &x, size_t i, flagcxDataType_t dt,
             flagcxRedOp_t op, uint8_t *out) {
  size_t es = getFlagcxDataTypeSize(dt);
  int n = static_cast<int>(x.size());
  if (dt == flagcxFloat64) {
    double acc = widen(&x[0][i * es], dt);
    for (int k = 1; k < n; k++) acc = apply(acc, widen(&x[k][i * es], dt), op);
    if (op == flagcxAvg) acc /= n;
    narrow(acc, out, dt);
    return;
  }
  float acc = static_cast<float>(widen(&x[0][i * es], dt));  // float32 for every other type
  for (int k = 1; k < n; k++) acc = apply(acc, static_cast<float>(widen(&x[k][i * es], dt)), op);
  if (op == flagcxAvg) acc /= static_cast<float>(n);
  narrow(acc, out, dt);
}

const float kPool[] = {1.0f, -1.0f, 3.0f, 0.0625f, 100.0f, -100.0f, 0.3f, -0.7f, 7.5f, 200.0f, 1e-3f};

std::vector<std::vector<uint8_t>> inputs(int n, size_t count, flagcxDataType_t dt, std::mt19937 &rng) {
  size_t es = getFlagcxDataTypeSize(dt);
  std::vector<std::vector<uint8_t>> x(n, std::vector<uint8_t>(count * es));
  for (auto &v : x)
    for (size_t i = 0; i < count; i++) {
      double big = (dt == flagcxFloat32 || dt == flagcxFloat64) && rng() % 3 == 0 ? 1e8 : 1.0;
      narrow(kPool[rng() % 11] * big * (rng() % 2 ? 1.0 : 0.375), &v[i * es], dt);
    }
  return x;
}

const flagcxDataType_t kFloats[] = {flagcxFloat32, flagcxFloat64, flagcxFloat16, flagcxBfloat16,
                                    flagcxFloat8e4m3, flagcxFloat8e5m2};

TEST(Fold, MatchesTheRankOrderedLeftFold) {
  std::mt19937 rng(5);
  for (flagcxDataType_t dt : kFloats) {
    size_t es = getFlagcxDataTypeSize(dt);
    for (flagcxRedOp_t op : {flagcxSum, flagcxProd, flagcxAvg, flagcxMax, flagcxMin}) {
      for (int n = 1; n <= 8; n++) {
        for (size_t count : {1, 255, 256, 257, 700}) {
          auto x = inputs(n, count, dt, rng);
          std::vector<const void *> srcs;
          for (auto &v : x) srcs.push_back(v.data());
          std::vector<uint8_t> want(count * es), got(count * es, 0xcd);
          for (size_t i = 0; i < count; i++) refFold(x, i, dt, op, &want[i * es]);
          ASSERT_EQ(hostFold(got.data(), srcs.data(), n, count, dt, op), flagcxSuccess);
          ASSERT_EQ(got, want) << "dtype " << dt << " op " << op << " n " << n << " count " << count;
          std::vector<uint8_t> base(count * es);
          rk::generic::fold(base.data(), srcs.data(), n, count, dt, op);
          ASSERT_EQ(base, want) << "baseline, dtype " << dt << " op " << op << " n " << n;
          // In place: the destination is one of the sources.
          int k = n - 1 - static_cast<int>(count % n);
          std::vector<uint8_t> keep = x[k];
          ASSERT_EQ(hostFold(x[k].data(), srcs.data(), n, count, dt, op), flagcxSuccess);
          ASSERT_EQ(x[k], want) << "in place into source " << k << ", dtype " << dt << " op " << op;
          x[k] = keep;
        }
      }
    }
  }
}

// Rounding once differs from rounding after each step: 1 + 2^-11 + 2^-11 in
// half is 1 + 2^-10 folded in float, but 1 when each step rounds (ties to even).
TEST(Fold, NarrowTypesRoundOnce) {
  uint16_t one = rk::floatToHalf(1.0f), tiny = rk::floatToHalf(0x1p-11f);
  const uint16_t x0 = one, x1 = tiny, x2 = tiny;
  const void *srcs[] = {&x0, &x1, &x2};
  uint16_t got = 0, pair = 0;
  ASSERT_EQ(hostFold(&got, srcs, 3, 1, flagcxFloat16, flagcxSum), flagcxSuccess);
  EXPECT_EQ(rk::halfToFloat(got), 1.0f + 0x1p-10f);
  ASSERT_EQ(hostReduce(&pair, &x0, &x1, 1, flagcxFloat16, flagcxSum), flagcxSuccess);
  ASSERT_EQ(hostReduce(&pair, &pair, &x2, 1, flagcxFloat16, flagcxSum), flagcxSuccess);
  EXPECT_EQ(rk::halfToFloat(pair), 1.0f);
}

TEST(Fold, IntegersAndBadArguments) {
  int32_t a[3] = {7, -2, 9}, b[3] = {1, 4, -9}, c[3] = {5, 5, 5}, d[3];
  const void *srcs[] = {a, b, c};
  ASSERT_EQ(hostFold(d, srcs, 3, 3, flagcxInt32, flagcxAvg), flagcxSuccess);
  EXPECT_EQ(d[0], 4);
  EXPECT_EQ(d[1], 2);
  EXPECT_EQ(d[2], 1);
  EXPECT_EQ(hostFold(d, srcs, 0, 3, flagcxInt32, flagcxSum), flagcxInvalidArgument);
  EXPECT_EQ(hostFold(d, srcs, 3, 3, flagcxNumTypes, flagcxSum), flagcxInvalidArgument);
  EXPECT_EQ(hostFold(d, srcs, 3, 3, flagcxInt32, flagcxRedNoOp), flagcxInvalidArgument);
  const void *holes[] = {a, nullptr};
  EXPECT_EQ(hostFold(d, holes, 2, 3, flagcxInt32, flagcxSum), flagcxInvalidArgument);
}

}  // namespace
