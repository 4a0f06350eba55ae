// The reference of deterministic mode's tests, computed here from the formats'
// definitions (not with the library's kernels): each floating type's
// decoding, rounding to nearest even and encoding, inputs whose sums depend
// on their order, and the rank-ordered left fold of the contract
// (docs/DETERMINISM.md): float32 and float64 in their own arithmetic; the
// 16- and 8-bit floats widened to float32, folded there, rounded once; Avg
// that fold divided by n in the same arithmetic.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "flagcx.h"

namespace detref {

struct Fmt {
  int mbits, ebits, emin;
  double maxFinite;
  bool saturates;  // e4m3: no infinity, overflow gives the largest finite value
};

inline Fmt fmtOf(flagcxDataType_t dt) {
  switch (dt) {
    case flagcxFloat16: return {10, 5, -14, 65504.0, false};
    case flagcxBfloat16: return {7, 8, -126, std::ldexp(2.0 - std::ldexp(1.0, -7), 127), false};
    case flagcxFloat8e4m3: return {3, 4, -6, 448.0, true};
    default: return {2, 5, -14, 57344.0, false};  // e5m2
  }
}

inline bool narrow(flagcxDataType_t dt) {
  return dt == flagcxFloat16 || dt == flagcxBfloat16 || dt == flagcxFloat8e4m3 ||
         dt == flagcxFloat8e5m2;
}

inline size_t sizeOf(flagcxDataType_t dt) {
  switch (dt) {
    case flagcxFloat64: return 8;
    case flagcxFloat32: return 4;
    case flagcxFloat16:
    case flagcxBfloat16: return 2;
    default: return 1;
  }
}

// x rounded to the format, to nearest even (finite x; no NaN here).
inline float roundTo(flagcxDataType_t dt, float x) {
  const Fmt f = fmtOf(dt);
  double a = std::fabs(static_cast<double>(x));
  if (a == 0) return x;
  int e = std::max(std::ilogb(a), f.emin);
  double ulp = std::ldexp(1.0, e - f.mbits);
  double r = std::nearbyint(a / ulp) * ulp;  // a / ulp is exact; the default mode is to-nearest-even
  if (r > f.maxFinite) r = f.saturates ? f.maxFinite : INFINITY;
  return static_cast<float>(x < 0 ? -r : r);
}

// The bits of v, which the format represents exactly.
inline uint32_t encode(flagcxDataType_t dt, float v) {
  const Fmt f = fmtOf(dt);
  const uint32_t sign = std::signbit(v) ? 1u << (f.mbits + f.ebits) : 0u;
  double a = std::fabs(static_cast<double>(v));
  if (a == 0) return sign;
  if (std::isinf(a)) return sign | (((1u << f.ebits) - 1) << f.mbits);
  int e = std::ilogb(a);
  if (e < f.emin) return sign | static_cast<uint32_t>(a / std::ldexp(1.0, f.emin - f.mbits));
  uint32_t mant = static_cast<uint32_t>((a / std::ldexp(1.0, e) - 1.0) * std::ldexp(1.0, f.mbits));
  return sign | static_cast<uint32_t>(e - f.emin + 1) << f.mbits | mant;
}

inline float decode(flagcxDataType_t dt, uint32_t bits) {
  const Fmt f = fmtOf(dt);
  const uint32_t mant = bits & ((1u << f.mbits) - 1), ef = bits >> f.mbits & ((1u << f.ebits) - 1);
  const bool neg = bits >> (f.mbits + f.ebits) & 1u;
  double a;
  if (ef == 0)
    a = std::ldexp(static_cast<double>(mant), f.emin - f.mbits);
  else if (ef == (1u << f.ebits) - 1 && !f.saturates)
    a = mant ? NAN : INFINITY;
  else
    a = std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -f.mbits), static_cast<int>(ef) + f.emin - 1);
  return static_cast<float>(neg ? -a : a);
}

// Stores value v (rounded to the type) as element i of buf.
inline void put(flagcxDataType_t dt, void *buf, size_t i, double v) {
  char *p = static_cast<char *>(buf) + i * sizeOf(dt);
  if (dt == flagcxFloat64) {
    std::memcpy(p, &v, 8);
  } else if (dt == flagcxFloat32) {
    float x = static_cast<float>(v);
    std::memcpy(p, &x, 4);
  } else {
    uint32_t b = encode(dt, roundTo(dt, static_cast<float>(v)));
    std::memcpy(p, &b, sizeOf(dt));  // little-endian
  }
}

// Element i of buf, widened (narrow types to float32, as the contract does).
inline double get(flagcxDataType_t dt, const void *buf, size_t i) {
  const char *p = static_cast<const char *>(buf) + i * sizeOf(dt);
  if (dt == flagcxFloat64) {
    double x;
    std::memcpy(&x, p, 8);
    return x;
  }
  if (dt == flagcxFloat32) {
    float x;
    std::memcpy(&x, p, 4);
    return x;
  }
  uint32_t b = 0;
  std::memcpy(&b, p, sizeOf(dt));
  return decode(dt, b);
}

// Rank r's element i: mixed magnitudes and cancellations (big, 1, -big,
// ...) for Sum and Avg, factors near 1 of many mantissa bits for Prod.
inline double inputOf(flagcxDataType_t dt, flagcxRedOp_t op, int r, size_t i) {
  if (op == flagcxProd) {
    double v = 1.0 + static_cast<double>((i * 7 + static_cast<size_t>(r) * 13) % 97) / 113.0;
    return (i + static_cast<size_t>(r)) % 3 == 0 ? -v : v;
  }
  const double big = dt == flagcxFloat64 ? 1e17 : dt == flagcxFloat32 || dt == flagcxBfloat16 ? 1e8
                     : dt == flagcxFloat16 ? 2048.0 : dt == flagcxFloat8e4m3 ? 48.0 : 4096.0;
  const double pool[] = {big, 1.0, -big, 0.3, -0.7, big / 3.0, 1.0 / 3.0, -big / 7.0, 2.5};
  const size_t k = (static_cast<size_t>(r) * 5 + i * 3 + i / 7) % (sizeof(pool) / sizeof(pool[0]));
  return pool[k] * (1.0 + static_cast<double>((static_cast<size_t>(r) + i) % 4) * 0.125);
}

// The contract's result for element i of the contributions xs[0..n-1].
template <class Get>
void foldInto(flagcxDataType_t dt, flagcxRedOp_t op, int n, Get x, void *out, size_t i) {
  if (dt == flagcxFloat64) {
    double acc = x(0);
    for (int k = 1; k < n; k++) acc = op == flagcxProd ? acc * x(k) : acc + x(k);
    if (op == flagcxAvg) acc = acc / static_cast<double>(n);
    std::memcpy(static_cast<char *>(out) + i * 8, &acc, 8);
    return;
  }
  float acc = static_cast<float>(x(0));
  for (int k = 1; k < n; k++) {
    float y = static_cast<float>(x(k));
    acc = op == flagcxProd ? acc * y : acc + y;
  }
  if (op == flagcxAvg) acc = acc / static_cast<float>(n);
  if (dt == flagcxFloat32) {
    std::memcpy(static_cast<char *>(out) + i * 4, &acc, 4);
    return;
  }
  uint32_t b = encode(dt, roundTo(dt, acc));
  std::memcpy(static_cast<char *>(out) + i * sizeOf(dt), &b, sizeOf(dt));
}

}  // namespace detref
