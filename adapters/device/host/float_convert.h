// Scalar conversions between float and the narrow floating types the host
// reduction kernels compute through: half, bfloat16, and the OCP 8-bit floats
// e4m3 and e5m2.  Branch-free, so that the kernels' conversion loops
// vectorize.
//
// Included only by host_reduce_kernels.cc, which is compiled once per
// instruction set: the functions live in an unnamed namespace on purpose, so
// that each copy keeps its own (no inline function built for AVX2 can be
// picked by the linker for the baseline copy).
#pragma once
#include <cstdint>

namespace flagcx::reduce_kernels {
namespace {

inline uint32_t floatBits(float f) { return __builtin_bit_cast(uint32_t, f); }
inline float bitsFloat(uint32_t u) { return __builtin_bit_cast(float, u); }

// ---- half / bfloat16 <-> float, branch-free so that the loops vectorize ----

// Normal halves are re-biased in the integer domain; subnormal halves are
// converted exactly as integer * 2^-24 (avoids float denormals, so the result
// is right even when the application runs with flush-to-zero); inf and NaN
// keep their class and NaN its payload.
inline float h2f(uint16_t h) {
  uint32_t em = h & 0x7fffu;
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t normal = (em << 13) + (112u << 23);
  normal = em >= 0x7c00u ? normal + (112u << 23) : normal;  // exponent 31 -> 255
  float sub = static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f;
  uint32_t mag = em < 0x400u ? floatBits(sub) : normal;
  return bitsFloat(mag | sign);
}

// Round to nearest, ties to even.  Normal results: re-bias, add just under
// half an ulp plus the kept lsb, truncate (a carry into the exponent is the
// correct rounding, up to infinity).  Subnormal results: adding 0.5f puts the
// value's 2^-24 steps in the low mantissa bits, rounded by the FPU itself.
// Too large -> inf; NaN -> quiet NaN with the top payload bits.
inline uint16_t f2h(float f) {
  uint32_t x = floatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  uint32_t lsb = (ax >> 13) & 1u;
  uint32_t normal = (ax - (112u << 23) + 0xfffu + lsb) >> 13;
  uint32_t sub = floatBits(bitsFloat(ax) + 0.5f) - floatBits(0.5f);
  uint32_t r = ax < (113u << 23) ? sub : normal;
  r = ax >= 0x47800000u ? 0x7c00u : r;
  r = ax > 0x7f800000u ? (0x7e00u | ((ax >> 13) & 0x3ffu)) : r;
  return static_cast<uint16_t>(r | sign);
}

inline float bf2f(uint16_t h) { return bitsFloat(static_cast<uint32_t>(h) << 16); }

inline uint16_t f2bf(float f) {
  uint32_t x = floatBits(f);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  r = (x & 0x7fffffffu) > 0x7f800000u ? ((x >> 16) | 0x40u) : r;  // quiet NaN
  return static_cast<uint16_t>(r);
}

// ---- OCP 8-bit floats <-> float ----
//
// e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits; S.1111.111 is NaN,
// there is no infinity, the largest value is 448.  e5m2: sign, 5 exponent bits
// (bias 15), 2 mantissa bits: the upper byte of a half, with infinities.
// Decoding is exact.  Encoding rounds to nearest, ties to even (normal
// results: re-bias and round in the integer domain as f2h does; subnormal
// results: adding 2^14 (e4m3) or 2^7 (e5m2), whose ulp is the format's
// subnormal step, lets the FPU round).  Beyond the largest value, e4m3
// saturates to +-448 (infinity too) and e5m2 gives +-infinity.  NaN gives
// 0x7f in both, as CUDA's conversions do, so host and device agree bit for
// bit.

inline float e4m3ToF(uint8_t v) {
  uint32_t em = v & 0x7fu;
  uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  uint32_t normal = (em << 20) + (120u << 23);
  float sub = static_cast<float>(static_cast<int32_t>(em)) * 0x1p-9f;
  uint32_t mag = em < 0x08u ? floatBits(sub) : normal;
  mag = em == 0x7fu ? 0x7fc00000u : mag;
  return bitsFloat(mag | sign);
}

inline float e5m2ToF(uint8_t v) { return h2f(static_cast<uint16_t>(v << 8)); }

// M mantissa bits, exponent bias `Bias`; `Top` is the largest code a finite
// or infinite input gives (e4m3: 0x7e, 448, saturating; e5m2: 0x7c, inf).
template <uint32_t M, uint32_t Bias, uint32_t Top>
inline uint8_t fToFp8(float f) {
  constexpr uint32_t shift = 23 - M;
  constexpr float subStep = static_cast<float>(1u << (24 - Bias - M));  // ulp = subnormal step
  uint32_t x = floatBits(f);
  uint32_t sign = (x >> 24) & 0x80u;
  uint32_t ax = x & 0x7fffffffu;
  uint32_t lsb = (ax >> shift) & 1u;
  uint32_t normal = (ax - ((127u - Bias) << 23) + (1u << (shift - 1)) - 1u + lsb) >> shift;
  uint32_t sub = floatBits(bitsFloat(ax) + subStep) - floatBits(subStep);
  uint32_t r = ax < ((128u - Bias) << 23) ? sub : normal;
  r = r > Top ? Top : r;
  r |= sign;
  return static_cast<uint8_t>(ax > 0x7f800000u ? 0x7fu : r);
}
inline uint8_t fToE4m3(float f) { return fToFp8<3, 7, 0x7eu>(f); }
inline uint8_t fToE5m2(float f) { return fToFp8<2, 15, 0x7cu>(f); }

}  // namespace
}  // namespace flagcx::reduce_kernels
