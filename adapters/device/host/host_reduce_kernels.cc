// Element-wise reduction and division kernels for CPU memory.
//
// This file is compiled once per instruction set (see meson.build): the
// namespace FLAGCX_KERNEL_ISA keeps the copies apart, and everything else has
// internal linkage, so no inline function built for AVX2 can be picked by the
// linker for the baseline copy.  For that reason the file calls no std::
// function templates (only builtins and type traits).
//
// The loops are written for the auto-vectorizer (built with -O3): one tight
// loop per (dtype, op) over __restrict pointers, branch-free bodies.  Checked
// with `objdump -d --no-show-raw-insn` on the built objects (GCC 12, x86-64):
//   baseline: float sum -> addps, double -> addpd, int32 sum -> paddd,
//             int8 sum -> paddb, float max -> cmpltps + andps/andnps/orps,
//             half/bf16 conversion loops -> pand/psrld/pslld/cvtdq2ps on xmm
//             (needs -fno-trapping-math, see meson.build);
//   avx2:     the same loops on ymm (vaddps, vpaddd, vpmulld, vmaxps +
//             vcmpneqps/vblendvps for NaN, vpsrld ...), halves through F16C
//             (vcvtph2ps / vcvtps2ph).
// int64 max/min and integer division stay scalar (no packed 64-bit compare
// before SSE4.2 / AVX2 for the baseline copy, and no packed integer divide).
//
// Exact aliasing (dst == a and/or dst == b) is legal and common (in-place
// reductions); each case gets its own loop so that no two __restrict pointers
// ever name the same written object.
#include <cstdint>
#include <type_traits>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define FLAGCX_HAVE_F16C 1
#endif

#include "float_convert.h"
#include "host_reduce_kernels.h"

#ifndef FLAGCX_KERNEL_ISA
#define FLAGCX_KERNEL_ISA generic
#endif

namespace flagcx::reduce_kernels {
namespace {

// Block conversions used by the narrow-float kernels (Bits: the stored type).  With F16C (the AVX2 copy)
// halves convert in hardware, 8 per instruction, rounding to nearest even
// exactly as f2h does; the scalar functions handle the tail.
struct HalfCvt {
  using Bits = uint16_t;
  static void load(float *__restrict dst, const uint16_t *__restrict src, size_t m) {
    size_t i = 0;
#ifdef FLAGCX_HAVE_F16C
    for (; i + 8 <= m; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i))));
#endif
    for (; i < m; i++) dst[i] = h2f(src[i]);
  }
  static void store(uint16_t *__restrict dst, const float *__restrict src, size_t m) {
    size_t i = 0;
#ifdef FLAGCX_HAVE_F16C
    for (; i + 8 <= m; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < m; i++) dst[i] = f2h(src[i]);
  }
};
// The scalar functions in a loop (bfloat16, FP8).
template <class B, float (*Up)(B), B (*Down)(float)>
struct ScalarCvt {
  using Bits = B;
  static void load(float *__restrict dst, const B *__restrict src, size_t m) {
    for (size_t i = 0; i < m; i++) dst[i] = Up(src[i]);
  }
  static void store(B *__restrict dst, const float *__restrict src, size_t m) {
    for (size_t i = 0; i < m; i++) dst[i] = Down(src[i]);
  }
};
using Bf16Cvt = ScalarCvt<uint16_t, bf2f, f2bf>;
using E4m3Cvt = ScalarCvt<uint8_t, e4m3ToF, fToE4m3>;
using E5m2Cvt = ScalarCvt<uint8_t, e5m2ToF, fToE5m2>;

// ---- operators ----

// Integers: sum and product in the unsigned type of the same width, so that
// overflow wraps instead of being undefined.
template <class T>
struct IntSum {
  using U = std::make_unsigned_t<T>;
  static T f(T a, T b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b))); }
};
template <class T>
struct IntProd {
  using U = std::make_unsigned_t<T>;
  static T f(T a, T b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b))); }
};
template <class T>
struct IntMax {
  static T f(T a, T b) { return a < b ? b : a; }
};
template <class T>
struct IntMin {
  static T f(T a, T b) { return b < a ? b : a; }
};

// Floating point: max/min propagate NaN from either side (a NaN in any
// rank's input shows in the result, as with a sum).
template <class T>
struct FltSum {
  static T f(T a, T b) { return a + b; }
};
template <class T>
struct FltProd {
  static T f(T a, T b) { return a * b; }
};
template <class T>
struct FltMax {
  static T f(T a, T b) {
    T r = a < b ? b : a;  // a is NaN -> a
    return b != b ? b : r;
  }
};
template <class T>
struct FltMin {
  static T f(T a, T b) {
    T r = b < a ? b : a;
    return b != b ? b : r;
  }
};

// ---- loops ----

template <class Op, class T>
void loop3(T *__restrict d, const T *__restrict a, const T *__restrict b, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] = Op::f(a[i], b[i]);
}
template <class Op, class T>
void loopDstA(T *__restrict d, const T *__restrict b, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] = Op::f(d[i], b[i]);
}
template <class Op, class T>
void loopDstB(T *__restrict d, const T *__restrict a, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] = Op::f(a[i], d[i]);
}
template <class Op, class T>
void loopAll(T *__restrict d, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] = Op::f(d[i], d[i]);
}

template <class Op, class T>
void run(void *dv, const void *av, const void *bv, size_t n) {
  T *d = static_cast<T *>(dv);
  const T *a = static_cast<const T *>(av);
  const T *b = static_cast<const T *>(bv);
  if (d == a && d == b)
    loopAll<Op>(d, n);
  else if (d == a)
    loopDstA<Op>(d, b, n);
  else if (d == b)
    loopDstB<Op>(d, a, n);
  else
    loop3<Op>(d, a, b, n);
}

// Narrow floats (half, bfloat16, FP8): widen a block of each input to float,
// reduce in float, round back once.  Float keeps 24 >= 2*11+2 bits, so the
// double rounding gives the correctly rounded narrow result.  Each inner loop vectorizes;
// a block is fully read before dst is written, so exact aliasing is fine.
constexpr size_t kBlock = 256;

template <class Op, class Cvt>
void runNarrow(void *dv, const void *av, const void *bv, size_t n) {
  using B = typename Cvt::Bits;
  B *d = static_cast<B *>(dv);
  const B *a = static_cast<const B *>(av);
  const B *b = static_cast<const B *>(bv);
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    size_t m = n - base < kBlock ? n - base : kBlock;
    Cvt::load(fa, a + base, m);
    Cvt::load(fb, b + base, m);
    for (size_t i = 0; i < m; i++) fa[i] = Op::f(fa[i], fb[i]);
    Cvt::store(d + base, fa, m);
  }
}

template <class T>
void reduceInt(void *d, const void *a, const void *b, size_t n, flagcxRedOp_t op) {
  switch (op) {
    case flagcxSum: run<IntSum<T>, T>(d, a, b, n); break;
    case flagcxProd: run<IntProd<T>, T>(d, a, b, n); break;
    case flagcxMax: run<IntMax<T>, T>(d, a, b, n); break;
    default: run<IntMin<T>, T>(d, a, b, n); break;
  }
}

template <class T>
void reduceFlt(void *d, const void *a, const void *b, size_t n, flagcxRedOp_t op) {
  switch (op) {
    case flagcxSum: run<FltSum<T>, T>(d, a, b, n); break;
    case flagcxProd: run<FltProd<T>, T>(d, a, b, n); break;
    case flagcxMax: run<FltMax<T>, T>(d, a, b, n); break;
    default: run<FltMin<T>, T>(d, a, b, n); break;
  }
}

template <class Cvt>
void reduceNarrow(void *d, const void *a, const void *b, size_t n, flagcxRedOp_t op) {
  switch (op) {
    case flagcxSum: runNarrow<FltSum<float>, Cvt>(d, a, b, n); break;
    case flagcxProd: runNarrow<FltProd<float>, Cvt>(d, a, b, n); break;
    case flagcxMax: runNarrow<FltMax<float>, Cvt>(d, a, b, n); break;
    default: runNarrow<FltMin<float>, Cvt>(d, a, b, n); break;
  }
}

// ---- division (the last step of Avg) ----

template <class T>
void divSigned(T *d, const T *s, size_t n, uint64_t divisor) {
  if (divisor > static_cast<uint64_t>(INT64_MAX)) {
    // |x| <= 2^63 <= divisor: the quotient is 0, except -2^63 / 2^63 = -1.
    for (size_t i = 0; i < n; i++) {
      int64_t x = s[i];
      d[i] = static_cast<T>(x == INT64_MIN && divisor == (1ull << 63) ? -1 : 0);
    }
    return;
  }
  int64_t q = static_cast<int64_t>(divisor);
  for (size_t i = 0; i < n; i++) d[i] = static_cast<T>(static_cast<int64_t>(s[i]) / q);
}

template <class T>
void divUnsigned(T *d, const T *s, size_t n, uint64_t divisor) {
  for (size_t i = 0; i < n; i++) d[i] = static_cast<T>(static_cast<uint64_t>(s[i]) / divisor);
}

template <class T>
void divFltLoop(T *__restrict d, const T *__restrict s, size_t n, T q) {
  for (size_t i = 0; i < n; i++) d[i] = s[i] / q;
}
template <class T>
void divFltInPlace(T *__restrict d, size_t n, T q) {
  for (size_t i = 0; i < n; i++) d[i] = d[i] / q;
}
template <class T>
void divFlt(T *d, const T *s, size_t n, uint64_t divisor) {
  T q = static_cast<T>(divisor);
  if (d == s)
    divFltInPlace(d, n, q);
  else
    divFltLoop(d, s, n, q);
}

template <class Cvt>
void divNarrow(typename Cvt::Bits *d, const typename Cvt::Bits *s, size_t n, uint64_t divisor) {
  float q = static_cast<float>(divisor);
  alignas(64) float f[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    size_t m = n - base < kBlock ? n - base : kBlock;
    Cvt::load(f, s + base, m);
    for (size_t i = 0; i < m; i++) f[i] = f[i] / q;
    Cvt::store(d + base, f, m);
  }
}

// ---- the rank-ordered fold of n sources ----
//
// Block by block: the accumulator starts as source 0's block and takes the
// others in order, then is stored (and, for narrow floats, rounded) once.
// Every source's block is read before dst's block is written, so dst may be
// one of the sources.

template <class Op, class T>
void foldSame(void *dv, const void *const *sv, int n, size_t count) {
  T *d = static_cast<T *>(dv);
  alignas(64) T acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t m = count - base < kBlock ? count - base : kBlock;
    const T *s0 = static_cast<const T *>(sv[0]) + base;
    if (n == 1)
      for (size_t i = 0; i < m; i++) acc[i] = s0[i];
    else
      loop3<Op>(acc, s0, static_cast<const T *>(sv[1]) + base, m);
    for (int k = 2; k < n; k++) loopDstA<Op>(acc, static_cast<const T *>(sv[k]) + base, m);
    for (size_t i = 0; i < m; i++) d[base + i] = acc[i];
  }
}

template <class Op, class Cvt>
void foldNarrow(void *dv, const void *const *sv, int n, size_t count, float divisor) {
  using B = typename Cvt::Bits;
  B *d = static_cast<B *>(dv);
  alignas(64) float acc[kBlock];
  alignas(64) float t[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t m = count - base < kBlock ? count - base : kBlock;
    Cvt::load(acc, static_cast<const B *>(sv[0]) + base, m);
    for (int k = 1; k < n; k++) {
      Cvt::load(t, static_cast<const B *>(sv[k]) + base, m);
      loopDstA<Op>(acc, t, m);
    }
    if (divisor != 1.0f) divFltInPlace(acc, m, divisor);
    Cvt::store(d + base, acc, m);
  }
}

template <template <class> class Sum, template <class> class Prod, template <class> class Max,
          template <class> class Min, class T>
void foldOp(void *d, const void *const *s, int n, size_t count, flagcxRedOp_t op) {
  switch (op) {
    case flagcxProd: foldSame<Prod<T>, T>(d, s, n, count); break;
    case flagcxMax: foldSame<Max<T>, T>(d, s, n, count); break;
    case flagcxMin: foldSame<Min<T>, T>(d, s, n, count); break;
    default: foldSame<Sum<T>, T>(d, s, n, count); break;  // Sum, Avg
  }
}

bool narrowFloat(flagcxDataType_t dt) {
  return dt == flagcxFloat16 || dt == flagcxBfloat16 || dt == flagcxFloat8e4m3 ||
         dt == flagcxFloat8e5m2;
}

template <class Cvt>
void foldNarrowOp(void *d, const void *const *s, int n, size_t count, flagcxRedOp_t op) {
  float q = op == flagcxAvg ? static_cast<float>(n) : 1.0f;
  switch (op) {
    case flagcxProd: foldNarrow<FltProd<float>, Cvt>(d, s, n, count, q); break;
    case flagcxMax: foldNarrow<FltMax<float>, Cvt>(d, s, n, count, q); break;
    case flagcxMin: foldNarrow<FltMin<float>, Cvt>(d, s, n, count, q); break;
    default: foldNarrow<FltSum<float>, Cvt>(d, s, n, count, q); break;
  }
}

}  // namespace

namespace FLAGCX_KERNEL_ISA {

void reduce(void *d, const void *a, const void *b, size_t n, flagcxDataType_t dtype,
            flagcxRedOp_t op) {
  switch (dtype) {
    case flagcxInt8: reduceInt<int8_t>(d, a, b, n, op); break;
    case flagcxUint8: reduceInt<uint8_t>(d, a, b, n, op); break;
    case flagcxInt32: reduceInt<int32_t>(d, a, b, n, op); break;
    case flagcxUint32: reduceInt<uint32_t>(d, a, b, n, op); break;
    case flagcxInt64: reduceInt<int64_t>(d, a, b, n, op); break;
    case flagcxUint64: reduceInt<uint64_t>(d, a, b, n, op); break;
    case flagcxFloat16: reduceNarrow<HalfCvt>(d, a, b, n, op); break;
    case flagcxFloat32: reduceFlt<float>(d, a, b, n, op); break;
    case flagcxFloat64: reduceFlt<double>(d, a, b, n, op); break;
    case flagcxBfloat16: reduceNarrow<Bf16Cvt>(d, a, b, n, op); break;
    case flagcxFloat8e4m3: reduceNarrow<E4m3Cvt>(d, a, b, n, op); break;
    case flagcxFloat8e5m2: reduceNarrow<E5m2Cvt>(d, a, b, n, op); break;
    default: break;
  }
}

void divide(void *dv, const void *sv, size_t n, flagcxDataType_t dtype, uint64_t divisor) {
#define FLAGCX_ARGS(T) static_cast<T *>(dv), static_cast<const T *>(sv), n, divisor
  switch (dtype) {
    case flagcxInt8: divSigned<int8_t>(FLAGCX_ARGS(int8_t)); break;
    case flagcxUint8: divUnsigned<uint8_t>(FLAGCX_ARGS(uint8_t)); break;
    case flagcxInt32: divSigned<int32_t>(FLAGCX_ARGS(int32_t)); break;
    case flagcxUint32: divUnsigned<uint32_t>(FLAGCX_ARGS(uint32_t)); break;
    case flagcxInt64: divSigned<int64_t>(FLAGCX_ARGS(int64_t)); break;
    case flagcxUint64: divUnsigned<uint64_t>(FLAGCX_ARGS(uint64_t)); break;
    case flagcxFloat16: divNarrow<HalfCvt>(FLAGCX_ARGS(uint16_t)); break;
    case flagcxFloat32: divFlt<float>(FLAGCX_ARGS(float)); break;
    case flagcxFloat64: divFlt<double>(FLAGCX_ARGS(double)); break;
    case flagcxBfloat16: divNarrow<Bf16Cvt>(FLAGCX_ARGS(uint16_t)); break;
    case flagcxFloat8e4m3: divNarrow<E4m3Cvt>(FLAGCX_ARGS(uint8_t)); break;
    case flagcxFloat8e5m2: divNarrow<E5m2Cvt>(FLAGCX_ARGS(uint8_t)); break;
    default: break;
  }
#undef FLAGCX_ARGS
}

void fold(void *d, const void *const *s, int n, size_t count, flagcxDataType_t dtype,
          flagcxRedOp_t op) {
  // Two sources without Avg: the fold is Op(s0, s1) element by element,
  // rounded once, which is reduce's arithmetic with the same functors, bit
  // for bit; reduce needs no accumulator pass (the 2-rank case, the common one).
  if (n == 2 && op != flagcxAvg) return reduce(d, s[0], s[1], count, dtype, op);
#define FLAGCX_INT(T) foldOp<IntSum, IntProd, IntMax, IntMin, T>(d, s, n, count, op)
#define FLAGCX_FLT(T) foldOp<FltSum, FltProd, FltMax, FltMin, T>(d, s, n, count, op)
  switch (dtype) {
    case flagcxInt8: FLAGCX_INT(int8_t); break;
    case flagcxUint8: FLAGCX_INT(uint8_t); break;
    case flagcxInt32: FLAGCX_INT(int32_t); break;
    case flagcxUint32: FLAGCX_INT(uint32_t); break;
    case flagcxInt64: FLAGCX_INT(int64_t); break;
    case flagcxUint64: FLAGCX_INT(uint64_t); break;
    case flagcxFloat32: FLAGCX_FLT(float); break;
    case flagcxFloat64: FLAGCX_FLT(double); break;
    case flagcxFloat16: foldNarrowOp<HalfCvt>(d, s, n, count, op); break;
    case flagcxBfloat16: foldNarrowOp<Bf16Cvt>(d, s, n, count, op); break;
    case flagcxFloat8e4m3: foldNarrowOp<E4m3Cvt>(d, s, n, count, op); break;
    case flagcxFloat8e5m2: foldNarrowOp<E5m2Cvt>(d, s, n, count, op); break;
    default: break;
  }
#undef FLAGCX_INT
#undef FLAGCX_FLT
  // Avg of the wider types: the fold divided in the dtype's own arithmetic.
  if (op == flagcxAvg && !narrowFloat(dtype)) divide(d, d, count, dtype, static_cast<uint64_t>(n));
}

}  // namespace FLAGCX_KERNEL_ISA

#ifdef FLAGCX_KERNEL_EXPORT_SCALARS
float halfToFloat(uint16_t h) { return h2f(h); }
uint16_t floatToHalf(float f) { return f2h(f); }
float bf16ToFloat(uint16_t h) { return bf2f(h); }
uint16_t floatToBf16(float f) { return f2bf(f); }
float e4m3ToFloat(uint8_t v) { return e4m3ToF(v); }
uint8_t floatToE4m3(float f) { return fToE4m3(f); }
float e5m2ToFloat(uint8_t v) { return e5m2ToF(v); }
uint8_t floatToE5m2(float f) { return fToE5m2(f); }
#endif

}  // namespace flagcx::reduce_kernels
