// Per-ISA entry points of the CPU reduction kernels.  host_reduce_kernels.cc
// is compiled once per instruction set (baseline, and AVX2 on x86-64), each
// time into its own namespace; host_reduce.cc validates the arguments and
// picks the best variant the running CPU supports.
#pragma once
#include <cstddef>
#include <cstdint>

#include "flagcx.h"

namespace flagcx::reduce_kernels {

// Arguments are already validated: dtype < flagcxNumTypes, op one of
// Sum/Prod/Max/Min, divisor != 0, pointers non-null when count > 0.
using ReduceFn = void (*)(void *dst, const void *a, const void *b, size_t count,
                          flagcxDataType_t dtype, flagcxRedOp_t op);
using DivideFn = void (*)(void *dst, const void *src, size_t count, flagcxDataType_t dtype,
                          uint64_t divisor);
// n >= 1 sources; op may also be Avg (the fold divided by n).
using FoldFn = void (*)(void *dst, const void *const *srcs, int n, size_t count,
                        flagcxDataType_t dtype, flagcxRedOp_t op);

namespace generic {
void reduce(void *dst, const void *a, const void *b, size_t count, flagcxDataType_t dtype,
            flagcxRedOp_t op);
void divide(void *dst, const void *src, size_t count, flagcxDataType_t dtype, uint64_t divisor);
void fold(void *dst, const void *const *srcs, int n, size_t count, flagcxDataType_t dtype,
          flagcxRedOp_t op);
}  // namespace generic

namespace avx2 {
void reduce(void *dst, const void *a, const void *b, size_t count, flagcxDataType_t dtype,
            flagcxRedOp_t op);
void divide(void *dst, const void *src, size_t count, flagcxDataType_t dtype, uint64_t divisor);
void fold(void *dst, const void *const *srcs, int n, size_t count, flagcxDataType_t dtype,
          flagcxRedOp_t op);
}  // namespace avx2

// Scalar conversions, exposed for tests (same code the kernels use).
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t h);
uint16_t floatToBf16(float f);
float e4m3ToFloat(uint8_t v);  // OCP FP8 e4m3 (saturating to +-448)
uint8_t floatToE4m3(float f);
float e5m2ToFloat(uint8_t v);  // OCP FP8 e5m2 (with infinities)
uint8_t floatToE5m2(float f);

}  // namespace flagcx::reduce_kernels
