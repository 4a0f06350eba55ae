// Test data for the benchmarks (and the collective tests in tests/multirank):
// rank- and index-dependent values that every dtype holds exactly, typed
// fill and check loops, and half/bfloat16/8-bit float conversions of our own.
//
// The value rank r contributes at index i depends on r and on a key
// k(i) in 0..15 only: value = ((r + k(i)) mod 16) + 1.  So
//   - at any index the ranks (up to 16) hold different values, and every
//     rank holds the largest value at the indices where k = 15 - r and the
//     smallest where k = -r (mod 16): over any 16 consecutive indices every
//     rank wins some elements of a max and of a min (a max that returns one
//     particular rank's value is caught);
//   - k is not periodic: its low part is a permutation of i mod 16 and its
//     high part an odd-weighted sum of i's higher hex digits, so the blocks
//     of one rank's buffer differ from each other (a scatter or an alltoall
//     that hands out the wrong block is caught; tests/multirank checks this
//     property for every count and rank count it uses).
// A fill or a check costs one table look-up per element (the table is
// indexed by the key) plus a few operations per 16 elements.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "flagcx.h"

namespace perf {

constexpr size_t kKeys = 16;

// The part of the key given by i >> 4 (added to 5 * (i mod 16)).
inline unsigned highKey(size_t hi) {
  unsigned d = 0, w = 3;
  for (; hi; hi >>= 4, w += 2) d += w * static_cast<unsigned>(hi & 15);
  return d;
}
inline unsigned patternKey(size_t i) { return (5u * static_cast<unsigned>(i & 15) + highKey(i >> 4)) & 15u; }

// The value rank `rank` contributes where the key is `key`, for reduction
// `op`.  Products stay small: factors are 1 or 2, and at most 4 of any 16
// consecutive ranks hold a 2 at one index.
inline double keyValue(int rank, unsigned key, flagcxRedOp_t op) {
  unsigned k = (static_cast<unsigned>(rank) + key) & 15u;
  if (op == flagcxProd) return k < 4 ? 2 : 1;
  return static_cast<double>(k + 1);
}
inline double sourceValue(int rank, size_t i, flagcxRedOp_t op) {
  return keyValue(rank, patternKey(i), op);
}

struct Half { uint16_t bits; };
struct Bf16 { uint16_t bits; };

inline uint16_t floatToHalfBits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int e = static_cast<int>((x >> 23) & 0xffu) - 127 + 15;
  uint32_t m = x & 0x7fffffu;
  if (((x >> 23) & 0xffu) == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (m ? 0x200u : 0));
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {  // subnormal half (or zero)
    if (e < -10) return static_cast<uint16_t>(sign);
    m |= 0x800000u;
    int shift = 14 - e;
    uint32_t h = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) h++;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = sign | (static_cast<uint32_t>(e) << 10) | (m >> 13), rest = m & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return static_cast<uint16_t>(h);
}

inline float halfBitsToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) ? 1 : 0, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float v;
  if (e == 0) v = std::ldexp(static_cast<float>(m), -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(m | 0x400u), static_cast<int>(e) - 25);
  return sign ? -v : v;
}

inline uint16_t floatToBf16Bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float bf16BitsToFloat(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

// The OCP 8-bit floats, also of our own: decoded exactly (e4m3: bias 7, no
// infinity, S.1111.111 is NaN; e5m2: bias 15, IEEE-like), encoded to the
// nearest finite code, ties to the even code (e4m3 saturates at 448; the
// values used here stay far below either format's largest); the encoder
// searches the codes by bisection.
struct F8e4m3 { uint8_t bits; };
struct F8e5m2 { uint8_t bits; };

template <int M, int Bias>
inline double fp8BitsToDouble(uint8_t b) {
  const int e = (b & 0x7f) >> M, m = b & ((1 << M) - 1);
  if (M == 3 && (b & 0x7f) == 0x7f) return NAN;
  if (M == 2 && e == 31) return m ? NAN : ((b & 0x80) ? -INFINITY : INFINITY);
  double v = e == 0 ? std::ldexp(m, 1 - Bias - M) : std::ldexp(m | (1 << M), e - Bias - M);
  return (b & 0x80) ? -v : v;
}
template <int M, int Bias, unsigned MaxCode>
inline uint8_t doubleToFp8Bits(double v) {
  if (v != v) return 0x7f;
  auto at = [](unsigned c) { return fp8BitsToDouble<M, Bias>(static_cast<uint8_t>(c)); };
  const double a = std::fabs(v);
  unsigned lo = 0, hi = MaxCode, best = MaxCode;  // positive codes grow with their value
  if (a < at(MaxCode)) {
    while (hi - lo > 1) {  // at(lo) <= a < at(hi)
      unsigned mid = (lo + hi) / 2;
      (at(mid) <= a ? lo : hi) = mid;
    }
    double dl = a - at(lo), dh = at(hi) - a;
    best = dl < dh ? lo : dh < dl ? hi : (lo & 1 ? hi : lo);
  }
  return static_cast<uint8_t>((v < 0 ? 0x80u : 0u) | best);
}

// Conversions between a double and each element type (integers wrap as a
// store into the type does).
template <class T> inline T fromDouble(double v) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<int64_t>(v));
  else return static_cast<T>(v);
}
template <> inline Half fromDouble<Half>(double v) { return {floatToHalfBits(static_cast<float>(v))}; }
template <> inline Bf16 fromDouble<Bf16>(double v) { return {floatToBf16Bits(static_cast<float>(v))}; }
template <class T> inline double toDouble(T v) { return static_cast<double>(v); }
template <> inline double toDouble<Half>(Half v) { return halfBitsToFloat(v.bits); }
template <> inline double toDouble<Bf16>(Bf16 v) { return bf16BitsToFloat(v.bits); }
template <> inline F8e4m3 fromDouble<F8e4m3>(double v) { return {doubleToFp8Bits<3, 7, 0x7e>(v)}; }
template <> inline F8e5m2 fromDouble<F8e5m2>(double v) { return {doubleToFp8Bits<2, 15, 0x7b>(v)}; }
template <> inline double toDouble<F8e4m3>(F8e4m3 v) { return fp8BitsToDouble<3, 7>(v.bits); }
template <> inline double toDouble<F8e5m2>(F8e5m2 v) { return fp8BitsToDouble<2, 15>(v.bits); }

// p[i] = table[patternKey(idx0 + i)], the table given as doubles.
template <class T> void fillTyped(void *buf, size_t n, size_t idx0, const double *table) {
  T typed[kKeys];
  for (size_t k = 0; k < kKeys; k++) typed[k] = fromDouble<T>(table[k]);
  T *p = static_cast<T *>(buf);
  unsigned hk = highKey(idx0 >> 4);
  for (size_t i = 0; i < n; i++) {
    size_t g = idx0 + i;
    if ((g & 15) == 0) hk = highKey(g >> 4);
    p[i] = typed[(5u * static_cast<unsigned>(g & 15) + hk) & 15u];
  }
}

// Number of elements of p[0..n) that differ from table[patternKey(idx0 + i)]
// by more than `tol` (relative, at least 1 in absolute terms).  *firstBad
// (when given) gets the index of the first one.
template <class T> size_t checkTyped(const void *buf, size_t n, size_t idx0, const double *table,
                                     double tol, size_t *firstBad = nullptr) {
  const T *p = static_cast<const T *>(buf);
  size_t wrong = 0;
  unsigned hk = highKey(idx0 >> 4);
  for (size_t i = 0; i < n; i++) {
    size_t g = idx0 + i;
    if ((g & 15) == 0) hk = highKey(g >> 4);
    double got = toDouble<T>(p[i]), want = table[(5u * static_cast<unsigned>(g & 15) + hk) & 15u];
    if (!(std::fabs(got - want) <= tol * std::fmax(1.0, std::fabs(want)))) {
      if (!wrong && firstBad) *firstBad = i;
      wrong++;
    }
  }
  return wrong;
}

// Calls F<T>::call(args...) with T the element type of `dt`.
template <template <class> class F, class... A> auto dispatch(flagcxDataType_t dt, A &&...args) {
  switch (dt) {
    case flagcxInt8: return F<int8_t>::call(args...);
    case flagcxUint8: return F<uint8_t>::call(args...);
    case flagcxInt32: return F<int32_t>::call(args...);
    case flagcxUint32: return F<uint32_t>::call(args...);
    case flagcxInt64: return F<int64_t>::call(args...);
    case flagcxUint64: return F<uint64_t>::call(args...);
    case flagcxFloat16: return F<Half>::call(args...);
    case flagcxBfloat16: return F<Bf16>::call(args...);
    case flagcxFloat64: return F<double>::call(args...);
    case flagcxFloat8e4m3: return F<F8e4m3>::call(args...);
    case flagcxFloat8e5m2: return F<F8e5m2>::call(args...);
    default: return F<float>::call(args...);
  }
}

template <class T> struct Fill {
  static int call(void *b, size_t n, size_t i0, const double *t) { fillTyped<T>(b, n, i0, t); return 0; }
};
template <class T> struct Check {
  static size_t call(const void *b, size_t n, size_t i0, const double *t, double tol, size_t *bad) {
    return checkTyped<T>(b, n, i0, t, tol, bad);
  }
};
template <class T> struct Store {  // the value as the type holds it
  static double call(double v) { return toDouble<T>(fromDouble<T>(v)); }
};

inline bool isIntType(flagcxDataType_t dt) { return dt <= flagcxUint64; }
inline bool isFloat8(flagcxDataType_t dt) { return dt == flagcxFloat8e4m3 || dt == flagcxFloat8e5m2; }

// The 8-bit floats' sums and averages: their values are exact, so this
// covers only an average's division (the reference divides in double);
// under half a unit at 1, so that a contribution missed or counted twice (1
// in a sum of at most 8) shows.
inline double tolerance(flagcxDataType_t dt) {
  if (isIntType(dt)) return 0;
  if (dt == flagcxFloat16) return 1e-2;
  if (dt == flagcxBfloat16) return 2e-2;
  if (dt == flagcxFloat8e4m3) return 0.06;
  if (dt == flagcxFloat8e5m2) return 0.12;
  return 1e-5;
}

// keyValue as dtype `dt` gets it.  The 8-bit floats hold the integers
// exactly only up to 16 (e4m3) or 8 (e5m2), and a path that rounds every
// partial sum (a ring) would drift from the once-rounded reference by up to
// 25 % (e4m3) or 43 % (e5m2) over 16 ranks; so their sums and averages take
// the values 1 and 0 (1 where keyValue's products take 2: at most 4 of any
// 16 consecutive ranks), and every partial sum over up to 32 ranks is an
// integer of at most 8, exact in any order.  Products (1 and 2), max and
// min are exact anyway.
inline double keyValueAs(int rank, unsigned key, flagcxRedOp_t op, flagcxDataType_t dt) {
  if (isFloat8(dt) && (op == flagcxSum || op == flagcxAvg)) return keyValue(rank, key, flagcxProd) - 1;
  return keyValue(rank, key, op);
}

// table[k] = what `rank` sends where the key is k, as dtype holds it.
inline void sourceTable(int rank, flagcxDataType_t dt, flagcxRedOp_t op, double *table) {
  for (unsigned k = 0; k < kKeys; k++) table[k] = dispatch<Store>(dt, keyValueAs(rank, k, op, dt));
}

// table[k] = the reduction over all ranks where the key is k, as dtype holds
// it (integers wrap; an integer average truncates).
inline void reducedTable(int nranks, flagcxDataType_t dt, flagcxRedOp_t op, double *table) {
  for (unsigned k = 0; k < kKeys; k++) {
    double acc = dispatch<Store>(dt, keyValueAs(0, k, op, dt));
    for (int r = 1; r < nranks; r++) {
      double v = dispatch<Store>(dt, keyValueAs(r, k, op, dt));
      switch (op) {
        case flagcxProd: acc *= v; break;
        case flagcxMax: acc = std::fmax(acc, v); break;
        case flagcxMin: acc = std::fmin(acc, v); break;
        default: acc += v; break;
      }
    }
    if (op == flagcxAvg) acc = isIntType(dt) ? std::trunc(acc / nranks) : acc / nranks;
    table[k] = dispatch<Store>(dt, acc);
  }
}

}  // namespace perf
