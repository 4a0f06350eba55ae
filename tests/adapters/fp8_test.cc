// The OCP 8-bit floats on the host adapter: decoding of all 256 codes of e4m3
// and e5m2, encoding (round to nearest even, e4m3 saturating, e5m2 to
// infinity, NaN to 0x7f) against a reference this test computes from the
// formats' definitions, and the reduce and divide kernels against a float32
// reference rounded once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "adapters/device/adapter.h"
#include "adapters/device/host/host_reduce_kernels.h"

using namespace flagcx;
namespace rk = flagcx::reduce_kernels;

namespace {

// ---- the reference, from the format definitions ----

struct Fp8 {
  flagcxDataType_t dt;
  int ebits, mbits;
  bool hasInf;  // e5m2: exponent all ones is inf/NaN; e4m3: only S.1111.111 is NaN
  float (*decode)(uint8_t);
  uint8_t (*encode)(float);
};
const Fp8 kE4m3{flagcxFloat8e4m3, 4, 3, false, rk::e4m3ToFloat, rk::floatToE4m3};
const Fp8 kE5m2{flagcxFloat8e5m2, 5, 2, true, rk::e5m2ToFloat, rk::floatToE5m2};

bool refIsNan(uint8_t c, const Fp8 &f) {
  uint32_t em = c & 0x7fu;
  return f.hasInf ? em > 0x7cu : em == 0x7fu;
}

double refDecode(uint8_t c, const Fp8 &f) {
  int bias = (1 << (f.ebits - 1)) - 1;
  uint32_t e = (c >> f.mbits) & ((1u << f.ebits) - 1);
  uint32_t m = c & ((1u << f.mbits) - 1);
  double s = (c & 0x80u) ? -1.0 : 1.0;
  if (refIsNan(c, f)) return std::nan("");
  if (f.hasInf && e == (1u << f.ebits) - 1) return s * INFINITY;
  if (e == 0) return s * std::ldexp(m, 1 - bias - f.mbits);
  return s * std::ldexp(m + (1u << f.mbits), static_cast<int>(e) - bias - f.mbits);
}

// The non-negative finite codes in increasing order, with their values; for
// e5m2 then its infinity as if it were 2^16, the next step of the ladder
// (so that rounding up from the largest value gives infinity).
struct Ladder {
  std::vector<double> value;
  std::vector<uint8_t> code;
};
Ladder ladder(const Fp8 &f) {
  Ladder l;
  for (uint32_t c = 0; c < 0x80u; c++) {
    double v = refDecode(static_cast<uint8_t>(c), f);
    if (std::isfinite(v)) {
      l.value.push_back(v);
      l.code.push_back(static_cast<uint8_t>(c));
    }
  }
  if (f.hasInf) {
    l.value.push_back(65536.0);
    l.code.push_back(0x7c);
  }
  return l;
}

// Nearest code, ties to the even code; beyond the top of the ladder, its top
// (e4m3 saturates at 448, e5m2 gives infinity).
uint8_t refEncode(double v, const Ladder &l) {
  if (std::isnan(v)) return 0x7f;
  uint8_t sign = std::signbit(v) ? 0x80 : 0;
  double a = std::fabs(v);
  const std::vector<double> &val = l.value;
  const std::vector<uint8_t> &code = l.code;
  if (a >= val.back()) return sign | code.back();
  size_t hi = std::upper_bound(val.begin(), val.end(), a) - val.begin();  // val[hi-1] <= a < val[hi]
  double lo = val[hi - 1], up = val[hi];
  uint8_t c;
  if (a - lo < up - a)
    c = code[hi - 1];
  else if (a - lo > up - a)
    c = code[hi];
  else
    c = (code[hi - 1] & 1) ? code[hi] : code[hi - 1];
  return sign | c;
}

bool sameFloat(float got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return static_cast<double>(got) == want && std::signbit(got) == std::signbit(want);
}

class Fp8Test : public ::testing::TestWithParam<const Fp8 *> {};

TEST_P(Fp8Test, DecodesEveryCode) {
  const Fp8 &f = *GetParam();
  for (uint32_t c = 0; c < 256; c++) {
    double want = refDecode(static_cast<uint8_t>(c), f);
    EXPECT_TRUE(sameFloat(f.decode(static_cast<uint8_t>(c)), want)) << "code " << c << " want " << want;
  }
}

TEST_P(Fp8Test, EveryCodeRoundTrips) {
  const Fp8 &f = *GetParam();
  for (uint32_t c = 0; c < 256; c++) {
    if (refIsNan(static_cast<uint8_t>(c), f)) continue;
    EXPECT_EQ(f.encode(f.decode(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

// Around each pair of neighbouring codes: both values, the midpoint and the
// floats on either side of it, for both signs.
TEST_P(Fp8Test, RoundsToNearestEvenAroundEveryCode) {
  const Fp8 &f = *GetParam();
  Ladder l = ladder(f);
  std::vector<double> top = l.value;
  if (!f.hasInf) top.push_back(2 * l.value.back());  // beyond 448: saturates
  for (size_t i = 0; i + 1 < top.size(); i++) {
    float mid = static_cast<float>((top[i] + top[i + 1]) / 2);
    float probes[] = {static_cast<float>(top[i]), mid, std::nextafter(mid, 0.0f),
                      std::nextafter(mid, INFINITY), std::nextafter(static_cast<float>(top[i]), INFINITY)};
    for (float p : probes) {
      for (float s : {p, -p}) EXPECT_EQ(f.encode(s), refEncode(s, l)) << "value " << s;
    }
  }
}

TEST_P(Fp8Test, EncodesSpecialsAndASweepOfAllFloats) {
  const Fp8 &f = *GetParam();
  Ladder l = ladder(f);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f,
                            1.17e-38f, 3.4e38f, -3.4e38f, 448.0f, 464.0f, 465.0f, 57344.0f,
                            61439.0f, 61440.0f, -61440.0f, 1e6f};
  for (float s : specials) EXPECT_EQ(f.encode(s), refEncode(s, l)) << "value " << s;
  EXPECT_EQ(f.encode(INFINITY), f.hasInf ? 0x7c : 0x7e);  // e4m3 saturates, e5m2 keeps inf
  EXPECT_EQ(f.encode(-1e30f), f.hasInf ? 0xfc : 0xfe);
  for (uint64_t bits = 0; bits < (1ull << 32); bits += 4099) {
    float v;
    uint32_t b = static_cast<uint32_t>(bits);
    memcpy(&v, &b, 4);
    ASSERT_EQ(f.encode(v), refEncode(v, l)) << "bits " << std::hex << b;
  }
}

// ---- kernels: each element in float, rounded once ----

double refOp(double a, double b, flagcxRedOp_t op) {
  float x = static_cast<float>(a), y = static_cast<float>(b);
  if (op == flagcxMax || op == flagcxMin) {
    if (std::isnan(x) || std::isnan(y)) return std::nan("");
    return op == flagcxMax ? std::max(x, y) : std::min(x, y);
  }
  return op == flagcxProd ? x * y : x + y;
}

std::vector<uint8_t> randomCodes(size_t n, std::mt19937 &rng) {
  std::vector<uint8_t> v(n);
  for (auto &c : v) c = static_cast<uint8_t>(rng());
  return v;
}

TEST_P(Fp8Test, ReduceMatchesFloatReferenceForEveryOpAndLayout) {
  const Fp8 &f = *GetParam();
  Ladder l = ladder(f);
  std::mt19937 rng(7);
  for (flagcxRedOp_t op : {flagcxSum, flagcxProd, flagcxMax, flagcxMin, flagcxAvg}) {
    for (size_t n : {1, 7, 255, 256, 257, 1000, 4099}) {
      std::vector<uint8_t> a = randomCodes(n, rng), b = randomCodes(n, rng), want(n);
      for (size_t i = 0; i < n; i++) want[i] = refEncode(refOp(refDecode(a[i], f), refDecode(b[i], f), op), l);
      std::vector<uint8_t> d(n, 0xcd);
      ASSERT_EQ(hostReduce(d.data(), a.data(), b.data(), n, f.dt, op), flagcxSuccess);
      EXPECT_EQ(d, want) << "op " << op << " count " << n;
      std::vector<uint8_t> inA = a;  // dst == a
      ASSERT_EQ(hostReduce(inA.data(), inA.data(), b.data(), n, f.dt, op), flagcxSuccess);
      EXPECT_EQ(inA, want) << "in place, op " << op << " count " << n;
      std::vector<uint8_t> base(n);
      rk::generic::reduce(base.data(), a.data(), b.data(), n, f.dt, op == flagcxAvg ? flagcxSum : op);
      EXPECT_EQ(base, want) << "baseline variant, op " << op << " count " << n;
    }
  }
}

// Values where order matters (mixed magnitudes, cancellation): a left fold of
// 2..8 contributions through the kernel, each step in float rounded once.
TEST_P(Fp8Test, FoldOfMixedMagnitudesMatchesReference) {
  const Fp8 &f = *GetParam();
  Ladder l = ladder(f);
  const float pool[] = {1.0f, -1.0f, 0.0625f, 240.0f, -240.0f, 3.5f, 0.01f, -0.3f, 100.0f, 1e-3f};
  std::mt19937 rng(11);
  for (int ranks = 2; ranks <= 8; ranks++) {
    const size_t n = 300;
    std::vector<std::vector<uint8_t>> x(ranks, std::vector<uint8_t>(n));
    for (auto &v : x)
      for (auto &c : v) c = f.encode(pool[rng() % 10] * (rng() % 2 ? 1.0f : 0.5f));
    std::vector<uint8_t> acc = x[0], want = x[0];
    for (int r = 1; r < ranks; r++) {
      ASSERT_EQ(hostReduce(acc.data(), acc.data(), x[r].data(), n, f.dt, flagcxSum), flagcxSuccess);
      for (size_t i = 0; i < n; i++)
        want[i] = refEncode(refOp(refDecode(want[i], f), refDecode(x[r][i], f), flagcxSum), l);
    }
    EXPECT_EQ(acc, want) << ranks << " contributions";
  }
}

TEST_P(Fp8Test, DivideIsFloatDivisionRoundedOnce) {
  const Fp8 &f = *GetParam();
  Ladder l = ladder(f);
  std::vector<uint8_t> s(256);
  for (uint32_t c = 0; c < 256; c++) s[c] = static_cast<uint8_t>(c);
  for (uint64_t q : {1, 2, 3, 7, 8}) {
    std::vector<uint8_t> d(256), want(256);
    for (uint32_t c = 0; c < 256; c++)
      want[c] = refEncode(static_cast<float>(refDecode(s[c], f)) / static_cast<float>(q), l);
    ASSERT_EQ(hostDivide(d.data(), s.data(), 256, f.dt, q), flagcxSuccess);
    EXPECT_EQ(d, want) << "divisor " << q;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Test, ::testing::Values(&kE4m3, &kE5m2),
                         [](const auto &info) { return info.param == &kE4m3 ? "e4m3" : "e5m2"; });

TEST(Fp8Types, NumberedAsNcclAndOneByteEach) {
  EXPECT_EQ(static_cast<int>(flagcxFloat8e4m3), 10);
  EXPECT_EQ(static_cast<int>(flagcxFloat8e5m2), 11);
  EXPECT_EQ(static_cast<int>(flagcxNumTypes), 12);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxFloat8e4m3), 1u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxFloat8e5m2), 1u);
}

}  // namespace
