// Reduction and division kernels of the host adapter against scalar references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "adapters/device/adapter.h"
#include "adapters/device/host/host_reduce_kernels.h"

using namespace flagcx;
namespace rk = flagcx::reduce_kernels;

namespace {

// ---- independent reference for 16-bit floats (slow, obviously correct) ----

struct Fmt {
  int mbits, ebits;
};
constexpr Fmt kHalf{10, 5}, kBf16{7, 8};

double refDecode(uint16_t h, Fmt f) {
  int bias = (1 << (f.ebits - 1)) - 1;
  uint32_t e = (h >> f.mbits) & ((1u << f.ebits) - 1);
  uint32_t m = h & ((1u << f.mbits) - 1);
  double s = (h >> (f.mbits + f.ebits)) ? -1.0 : 1.0;
  if (e == (1u << f.ebits) - 1) return m ? std::nan("") : s * INFINITY;
  if (e == 0) return s * std::ldexp(m, 1 - bias - f.mbits);
  return s * std::ldexp(m + (1u << f.mbits), static_cast<int>(e) - bias - f.mbits);
}

uint16_t refEncode(double v, Fmt f) {
  int bias = (1 << (f.ebits - 1)) - 1;
  uint32_t expMask = ((1u << f.ebits) - 1) << f.mbits;
  uint32_t sign = std::signbit(v) ? 1u << (f.mbits + f.ebits) : 0;
  if (std::isnan(v)) return static_cast<uint16_t>(expMask | (1u << (f.mbits - 1)));
  double a = std::fabs(v);
  if (std::isinf(a)) return static_cast<uint16_t>(sign | expMask);
  if (a == 0) return static_cast<uint16_t>(sign);
  int e;
  std::frexp(a, &e);
  e -= 1;  // a in [2^e, 2^(e+1))
  if (e < 1 - bias) e = 1 - bias;
  double n = std::nearbyint(a / std::ldexp(1.0, e - f.mbits));  // ties to even
  if (n >= std::ldexp(1.0, f.mbits + 1)) {
    n /= 2;
    e += 1;
  }
  if (e > bias) return static_cast<uint16_t>(sign | expMask);
  if (n < std::ldexp(1.0, f.mbits)) return static_cast<uint16_t>(sign | static_cast<uint32_t>(n));
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(e + bias) << f.mbits) |
                               (static_cast<uint32_t>(n) - (1u << f.mbits)));
}

// ---- scalar references per dtype ----

template <class T>
T refInt(T a, T b, flagcxRedOp_t op) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case flagcxSum: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case flagcxProd: return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    case flagcxMax: return a > b ? a : b;
    default: return a < b ? a : b;
  }
}

template <class T>
T refFlt(T a, T b, flagcxRedOp_t op) {
  switch (op) {
    case flagcxSum: return a + b;
    case flagcxProd: return a * b;
    // On equal values (+0 and -0) the first operand is kept.
    case flagcxMax: return std::isnan(a) || std::isnan(b) ? NAN : (b > a ? b : a);
    default: return std::isnan(a) || std::isnan(b) ? NAN : (b < a ? b : a);
  }
}

uint16_t ref16(uint16_t a, uint16_t b, flagcxRedOp_t op, Fmt f) {
  return refEncode(refFlt<double>(refDecode(a, f), refDecode(b, f), op), f);
}

// ---- random inputs, byte buffers ----

std::mt19937_64 rng(12345);

void fill(std::vector<uint8_t> &buf, size_t count, flagcxDataType_t dt) {
  size_t es = getFlagcxDataTypeSize(dt);
  buf.resize(count * es);
  for (size_t i = 0; i < count; i++) {
    uint8_t *p = buf.data() + i * es;
    uint64_t r = rng();
    switch (dt) {
      case flagcxFloat32: {
        float v = static_cast<float>(static_cast<int64_t>(r % 20001) - 10000) / 64.0f + 1e-3f;
        memcpy(p, &v, 4);
        break;
      }
      case flagcxFloat64: {
        double v = static_cast<double>(static_cast<int64_t>(r % 2000001) - 1000000) / 1024.0 + 1e-7;
        memcpy(p, &v, 8);
        break;
      }
      case flagcxFloat16: {
        uint16_t h = static_cast<uint16_t>(r);
        if ((h & 0x7c00) == 0x7c00) h &= 0xbfff;  // finite only (inf/NaN tested separately)
        memcpy(p, &h, 2);
        break;
      }
      case flagcxBfloat16: {
        // Exponents within 2^-30..2^30: float never leaves its normal range.
        uint16_t m = static_cast<uint16_t>(r & 0x7f);
        uint16_t e = static_cast<uint16_t>(127 - 30 + (r >> 8) % 61);
        uint16_t s = static_cast<uint16_t>((r >> 20) & 1);
        uint16_t h = static_cast<uint16_t>((s << 15) | (e << 7) | m);
        memcpy(p, &h, 2);
        break;
      }
      default:
        memcpy(p, &r, es);
        break;
    }
  }
}

template <class T>
T at(const uint8_t *p, size_t i) {
  T v;
  memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

// The expected element i, as bytes.
void expectElem(flagcxDataType_t dt, flagcxRedOp_t op, const uint8_t *a, const uint8_t *b,
                size_t i, uint8_t *out) {
  switch (dt) {
#define INT_CASE(E, T)                               \
  case E: {                                          \
    T v = refInt<T>(at<T>(a, i), at<T>(b, i), op);   \
    memcpy(out, &v, sizeof(T));                      \
    break;                                           \
  }
    INT_CASE(flagcxInt8, int8_t)
    INT_CASE(flagcxUint8, uint8_t)
    INT_CASE(flagcxInt32, int32_t)
    INT_CASE(flagcxUint32, uint32_t)
    INT_CASE(flagcxInt64, int64_t)
    INT_CASE(flagcxUint64, uint64_t)
#undef INT_CASE
    case flagcxFloat32: {
      float v = refFlt<float>(at<float>(a, i), at<float>(b, i), op);
      memcpy(out, &v, 4);
      break;
    }
    case flagcxFloat64: {
      double v = refFlt<double>(at<double>(a, i), at<double>(b, i), op);
      memcpy(out, &v, 8);
      break;
    }
    case flagcxFloat16:
    case flagcxBfloat16: {
      uint16_t v = ref16(at<uint16_t>(a, i), at<uint16_t>(b, i), op,
                         dt == flagcxFloat16 ? kHalf : kBf16);
      memcpy(out, &v, 2);
      break;
    }
    default: break;
  }
}

const flagcxDataType_t kTypes[] = {flagcxInt8,    flagcxUint8,   flagcxInt32,   flagcxUint32,
                                   flagcxInt64,   flagcxUint64,  flagcxFloat16, flagcxFloat32,
                                   flagcxFloat64, flagcxBfloat16};
const flagcxRedOp_t kOps[] = {flagcxSum, flagcxProd, flagcxMax, flagcxMin};
const size_t kCounts[] = {0, 1, 7, 64, 1000, 4099};

enum Layout { kSeparate, kUnaligned, kInPlaceA, kInPlaceB, kAllSame };

using ReduceCall = flagcxResult_t (*)(void *, const void *, const void *, size_t,
                                      flagcxDataType_t, flagcxRedOp_t);

flagcxResult_t callGeneric(void *d, const void *a, const void *b, size_t n, flagcxDataType_t dt,
                           flagcxRedOp_t op) {
  rk::generic::reduce(d, a, b, n, dt, op);
  return flagcxSuccess;
}

void checkAll(ReduceCall call, const char *variant) {
  for (flagcxDataType_t dt : kTypes) {
    size_t es = getFlagcxDataTypeSize(dt);
    for (flagcxRedOp_t op : kOps) {
      for (size_t n : kCounts) {
        for (Layout lay : {kSeparate, kUnaligned, kInPlaceA, kInPlaceB, kAllSame}) {
          std::vector<uint8_t> a, b;
          fill(a, n + 1, dt);
          fill(b, n + 1, dt);
          if (lay == kAllSame) b = a;
          size_t off = lay == kUnaligned ? es : 0;  // offset by one element
          std::vector<uint8_t> want((n + 1) * es);
          for (size_t i = 0; i < n; i++)
            expectElem(dt, op, a.data() + off, b.data() + off, i, want.data() + i * es);
          std::vector<uint8_t> dstBuf((n + 1) * es, 0xcd);
          void *dst = dstBuf.data() + off;
          const void *pa = a.data() + off, *pb = b.data() + off;
          if (lay == kInPlaceA || lay == kAllSame) dst = a.data() + off;
          if (lay == kInPlaceB) dst = b.data() + off;
          if (lay == kAllSame) pb = pa;
          ASSERT_EQ(call(dst, pa, pb, n, dt, op), flagcxSuccess);
          for (size_t i = 0; i < n; i++) {
            ASSERT_EQ(memcmp(static_cast<uint8_t *>(dst) + i * es, want.data() + i * es, es), 0)
                << variant << " dtype " << dt << " op " << op << " count " << n << " layout "
                << lay << " element " << i;
          }
        }
      }
    }
  }
}

}  // namespace

TEST(Reduce, EveryDtypeAndOpMatchesReference) { checkAll(hostReduce, "dispatched"); }

TEST(Reduce, BaselineVariantMatchesReference) { checkAll(callGeneric, "baseline"); }

TEST(Reduce, AvgReducesAsSumAndInvalidOpsFail) {
  float a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, d[3];
  ASSERT_EQ(hostReduce(d, a, b, 3, flagcxFloat32, flagcxAvg), flagcxSuccess);
  EXPECT_EQ(d[0], 5.0f);
  EXPECT_EQ(d[2], 9.0f);
  EXPECT_EQ(hostReduce(d, a, b, 3, flagcxFloat32, flagcxRedNoOp), flagcxInvalidArgument);
  EXPECT_EQ(hostReduce(d, a, b, 3, flagcxFloat32, static_cast<flagcxRedOp_t>(42)),
            flagcxInvalidArgument);
  EXPECT_EQ(hostReduce(d, a, b, 3, flagcxNumTypes, flagcxSum),
            flagcxInvalidArgument);
  EXPECT_EQ(hostReduce(nullptr, a, b, 3, flagcxFloat32, flagcxSum), flagcxInvalidArgument);
  EXPECT_EQ(hostReduce(nullptr, nullptr, nullptr, 0, flagcxFloat32, flagcxSum), flagcxSuccess);
}

TEST(Reduce, IntegerWraps) {
  int8_t a8 = 127, b8 = 1, d8;
  ASSERT_EQ(hostReduce(&d8, &a8, &b8, 1, flagcxInt8, flagcxSum), flagcxSuccess);
  EXPECT_EQ(d8, -128);
  uint8_t ua = 255, ub = 2, ud;
  ASSERT_EQ(hostReduce(&ud, &ua, &ub, 1, flagcxUint8, flagcxProd), flagcxSuccess);
  EXPECT_EQ(ud, 254);
  int32_t a32 = INT32_MAX, b32 = 1, d32;
  ASSERT_EQ(hostReduce(&d32, &a32, &b32, 1, flagcxInt32, flagcxSum), flagcxSuccess);
  EXPECT_EQ(d32, INT32_MIN);
  int64_t a64 = INT64_MIN, b64 = -1, d64;
  ASSERT_EQ(hostReduce(&d64, &a64, &b64, 1, flagcxInt64, flagcxProd), flagcxSuccess);
  EXPECT_EQ(d64, INT64_MIN);  // -(-2^63) wraps to itself
  int64_t m1 = -5, m2 = 3, mm;
  ASSERT_EQ(hostReduce(&mm, &m1, &m2, 1, flagcxInt64, flagcxMax), flagcxSuccess);
  EXPECT_EQ(mm, 3);
}

TEST(Reduce, NanAndInfinity) {
  float a[4] = {NAN, 1.0f, INFINITY, -INFINITY};
  float b[4] = {1.0f, NAN, 1.0f, 1.0f};
  float d[4];
  for (flagcxRedOp_t op : {flagcxMax, flagcxMin, flagcxSum}) {
    ASSERT_EQ(hostReduce(d, a, b, 4, flagcxFloat32, op), flagcxSuccess);
    EXPECT_TRUE(std::isnan(d[0])) << op;
    EXPECT_TRUE(std::isnan(d[1])) << op;
  }
  ASSERT_EQ(hostReduce(d, a, b, 4, flagcxFloat32, flagcxMax), flagcxSuccess);
  EXPECT_EQ(d[2], INFINITY);
  EXPECT_EQ(d[3], 1.0f);
  // Half: NaN stays NaN, inf + finite = inf, inf - inf = NaN.
  uint16_t ha[3] = {0x7e00, 0x7c00, 0x7c00}, hb[3] = {0x3c00, 0x3c00, 0xfc00}, hd[3];
  ASSERT_EQ(hostReduce(hd, ha, hb, 3, flagcxFloat16, flagcxSum), flagcxSuccess);
  EXPECT_EQ(hd[0] & 0x7c00, 0x7c00);
  EXPECT_NE(hd[0] & 0x3ff, 0);
  EXPECT_EQ(hd[1], 0x7c00);
  EXPECT_EQ(hd[2] & 0x7c00, 0x7c00);
  EXPECT_NE(hd[2] & 0x3ff, 0);
  uint16_t ba[2] = {0x7fc1, 0xff80}, bb[2] = {0x3f80, 0x3f80}, bd[2];
  ASSERT_EQ(hostReduce(bd, ba, bb, 2, flagcxBfloat16, flagcxMax), flagcxSuccess);
  EXPECT_EQ(bd[0] & 0x7f80, 0x7f80);
  EXPECT_NE(bd[0] & 0x7f, 0);
  EXPECT_EQ(bd[1], 0x3f80);  // max(-inf, 1) = 1
}

TEST(Reduce, HalfRoundingSpotChecks) {
  EXPECT_EQ(rk::floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(rk::floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(rk::floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(rk::floatToHalf(65520.0f), 0x7c00);  // tie -> even -> overflow
  EXPECT_EQ(rk::floatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(rk::floatToHalf(-INFINITY), 0xfc00);
  EXPECT_EQ(rk::floatToHalf(std::ldexp(1.0f, -25)), 0x0000);      // tie -> even (0)
  EXPECT_EQ(rk::floatToHalf(3 * std::ldexp(1.0f, -25)), 0x0002);  // tie -> even (2)
  EXPECT_EQ(rk::floatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(rk::floatToHalf(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(rk::floatToHalf(std::ldexp(1023.9f, -24)), 0x0400);   // rounds up into normals
  EXPECT_EQ(rk::floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(rk::floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(rk::floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even
  uint16_t n = rk::floatToHalf(NAN);
  EXPECT_EQ(n & 0x7c00, 0x7c00);
  EXPECT_NE(n & 0x3ff, 0);
  EXPECT_EQ(rk::halfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(rk::halfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(rk::halfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(rk::halfToFloat(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(rk::halfToFloat(0x7e01)));
  // Every half survives a round trip through float.
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
    ASSERT_EQ(rk::floatToHalf(rk::halfToFloat(static_cast<uint16_t>(h))), h) << h;
    ASSERT_EQ(rk::halfToFloat(static_cast<uint16_t>(h)),
              static_cast<float>(refDecode(static_cast<uint16_t>(h), kHalf)))
        << h;
  }
  // Through the kernel: 1 + 2^-11 is a tie between 1 and 1 + 2^-10.
  uint16_t a[2] = {0x3c00, 0x3c01}, b[2] = {0x1000, 0x1000}, d[2];
  ASSERT_EQ(hostReduce(d, a, b, 2, flagcxFloat16, flagcxSum), flagcxSuccess);
  EXPECT_EQ(d[0], 0x3c00);
  EXPECT_EQ(d[1], 0x3c02);
}

TEST(Reduce, Bf16RoundingSpotChecks) {
  EXPECT_EQ(rk::floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(rk::floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even
  EXPECT_EQ(rk::floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even
  EXPECT_EQ(rk::floatToBf16(1.0f + std::ldexp(1.0f, -7) * 0.75f), 0x3f81);
  EXPECT_EQ(rk::floatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(rk::floatToBf16(-INFINITY), 0xff80);
  uint16_t n = rk::floatToBf16(NAN);
  EXPECT_EQ(n & 0x7f80, 0x7f80);
  EXPECT_NE(n & 0x7f, 0);
  // A signalling NaN whose payload sits in the low bits stays a NaN.
  uint32_t snan = 0x7f800001u;
  float fs;
  memcpy(&fs, &snan, 4);
  EXPECT_NE(rk::floatToBf16(fs) & 0x7f, 0);
  EXPECT_EQ(rk::bf16ToFloat(0x3f80), 1.0f);
  uint16_t a[2] = {0x3f80, 0x3f81}, b[2] = {0x3b80, 0x3b80}, d[2];  // b = 2^-8
  ASSERT_EQ(hostReduce(d, a, b, 2, flagcxBfloat16, flagcxSum), flagcxSuccess);
  EXPECT_EQ(d[0], 0x3f80);
  EXPECT_EQ(d[1], 0x3f82);
}

TEST(Divide, IntegersTruncateTowardZero) {
  int32_t s[6] = {-7, 7, -1, 5, INT32_MIN, -6};
  int32_t d[6];
  ASSERT_EQ(hostDivide(d, s, 6, flagcxInt32, 2), flagcxSuccess);
  EXPECT_EQ(d[0], -3);
  EXPECT_EQ(d[1], 3);
  EXPECT_EQ(d[2], 0);
  EXPECT_EQ(d[3], 2);
  EXPECT_EQ(d[4], INT32_MIN / 2);
  EXPECT_EQ(d[5], -3);
  int8_t s8[3] = {-128, 127, -5}, d8[3];
  ASSERT_EQ(hostDivide(d8, s8, 3, flagcxInt8, 3), flagcxSuccess);
  EXPECT_EQ(d8[0], -42);
  EXPECT_EQ(d8[1], 42);
  EXPECT_EQ(d8[2], -1);
  ASSERT_EQ(hostDivide(d8, s8, 3, flagcxInt8, 1000), flagcxSuccess);
  EXPECT_EQ(d8[0], 0);
  uint8_t u8[2] = {255, 7};
  ASSERT_EQ(hostDivide(u8, u8, 2, flagcxUint8, 2), flagcxSuccess);  // in place
  EXPECT_EQ(u8[0], 127);
  EXPECT_EQ(u8[1], 3);
  uint64_t u64 = UINT64_MAX;
  ASSERT_EQ(hostDivide(&u64, &u64, 1, flagcxUint64, 3), flagcxSuccess);
  EXPECT_EQ(u64, UINT64_MAX / 3);
  int64_t i64[2] = {INT64_MIN, -9};
  ASSERT_EQ(hostDivide(i64, i64, 2, flagcxInt64, 4), flagcxSuccess);
  EXPECT_EQ(i64[0], INT64_MIN / 4);
  EXPECT_EQ(i64[1], -2);
  int64_t big[2] = {INT64_MIN, INT64_MAX};
  ASSERT_EQ(hostDivide(big, big, 2, flagcxInt64, 1ull << 63), flagcxSuccess);
  EXPECT_EQ(big[0], -1);
  EXPECT_EQ(big[1], 0);
}

TEST(Divide, FloatsAndErrors) {
  std::vector<float> f(1000, 1.0f), fd(1000);
  ASSERT_EQ(hostDivide(fd.data(), f.data(), f.size(), flagcxFloat32, 3), flagcxSuccess);
  for (float v : fd) ASSERT_EQ(v, 1.0f / 3.0f);
  double dd = -9.0;
  ASSERT_EQ(hostDivide(&dd, &dd, 1, flagcxFloat64, 4), flagcxSuccess);
  EXPECT_EQ(dd, -2.25);
  uint16_t h[2] = {0x4200, 0x3c00};  // 3, 1
  ASSERT_EQ(hostDivide(h, h, 2, flagcxFloat16, 2), flagcxSuccess);
  EXPECT_EQ(h[0], 0x3e00);  // 1.5
  EXPECT_EQ(h[1], 0x3800);  // 0.5
  uint16_t bf = 0x4040;     // 3
  ASSERT_EQ(hostDivide(&bf, &bf, 1, flagcxBfloat16, 2), flagcxSuccess);
  EXPECT_EQ(bf, 0x3fc0);  // 1.5
  EXPECT_EQ(hostDivide(&dd, &dd, 1, flagcxFloat64, 0), flagcxInvalidArgument);
  EXPECT_EQ(hostDivide(&dd, &dd, 1, static_cast<flagcxDataType_t>(-1), 2), flagcxInvalidArgument);
}
