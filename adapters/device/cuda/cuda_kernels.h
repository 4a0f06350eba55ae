// Launchers for the CUDA adapter's element-wise kernels (cuda_kernels.cu).
// Plain C++ interface: the adapter does not need to be compiled by nvcc.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "flagcx.h"

namespace flagcx::cuda {

// dst[i] = a[i] op b[i], i < count, on `stream`.  dst may alias a or b;
// pointers must be addressable by the device (device memory, or pinned host
// memory mapped into the device's address space).  Avg reduces as Sum (the
// caller divides at the end).  `smCount` sizes the grid.  Returns the launch
// error (cudaErrorInvalidValue for a bad dtype/op).
cudaError_t launchReduce(void *dst, const void *a, const void *b, size_t count,
                         flagcxDataType_t dtype, flagcxRedOp_t op, cudaStream_t stream,
                         int smCount);
// The same result written to dst and dst2 (neither aliasing a or b unless
// it is dst): one pass over the operands when all four share their offset
// modulo 16, else a reduce into dst and a copy to dst2.
cudaError_t launchReduce2(void *dst, void *dst2, const void *a, const void *b, size_t count,
                          flagcxDataType_t dtype, flagcxRedOp_t op, cudaStream_t stream,
                          int smCount);

// dst[i] = src[i] / divisor with the host adapter's semantics (integers
// truncate toward zero; half and bfloat16 divide in float and round).
cudaError_t launchDivide(void *dst, const void *src, size_t count, flagcxDataType_t dtype,
                         uint64_t divisor, cudaStream_t stream, int smCount);

// The rank-ordered left fold (cuda_fold.cu), hostFold's contract bit for
// bit: dst[i] = ((srcs[0][i] op srcs[1][i]) op ...) op srcs[n-1][i]; float
// and double in their own arithmetic, every step rounded to nearest even
// (no FMA contraction); half, bfloat16 and the 8-bit floats accumulate in
// float and round once; Avg divides by n (in float for the narrow types)
// before that rounding.  dst may be one of the sources.  Up to
// kFoldParamSources sources travel in the kernel's parameters; beyond that
// the kernel reads them from `devList`, a device-memory copy of srcs that
// the caller keeps alive and unchanged until the kernel has run.  `srcs` is
// host memory either way (alignment is decided from it).
constexpr int kFoldParamSources = 64;
cudaError_t launchFold(void *dst, const void *const *srcs, const void *const *devList, int n,
                       size_t count, flagcxDataType_t dtype, flagcxRedOp_t op, cudaStream_t stream,
                       int smCount);

// dst[i] = src[i] as bytes; the same vectorized kernel shape, used by the
// benchmark as a copy-kernel baseline next to cudaMemcpyAsync.
// How operands without a common 16-byte offset are handled: `realign`
// (aligned 16-byte loads shifted in registers, the next vector taken from the
// neighbouring lane), `words` (the widest word width the operands share), or
// (cuda_kernels_misaligned.cu), realigning like `realign`: `shuffle4` (4
// vectors in flight per operand, byte permutes), `chunk` (each warp takes 4
// consecutive 512-byte steps, the next vector of lane 31 from lane 0's next
// step), `chunkLine` (chunk, destination aligned to 128 bytes).  `best`, the
// default, is `chunk` (H200: 95.6-97.5 % of the copy rate at
// every shift, against 82-92 % for realign/words).  Only benchmarks and
// tests change it.
enum class MisalignedPath { best, realign, words, shuffle4, chunk, chunkLine };
constexpr int kMisalignedPaths = 6;
extern __attribute__((visibility("default"))) MisalignedPath g_misaligned;

cudaError_t launchCopy(void *dst, const void *src, size_t bytes, cudaStream_t stream,
                       int smCount);

// One piece of a batched copy, at most kBatchChunkBytes long, with src and dst
// at the same offset modulo 16 (the caller splits and sorts pieces so).
struct BatchChunk {
  const char *src;
  char *dst;
  size_t bytes;
};
constexpr size_t kBatchChunkBytes = 1 << 20;
// Copy every chunk of `chunks` (device-readable memory, e.g. mapped pinned
// host memory, holding n entries), each cut into `parts` shares, in one
// launch of at most 4 blocks per multiprocessor.
cudaError_t launchCopyBatch(const BatchChunk *chunks, unsigned n, unsigned parts, cudaStream_t stream,
                            int smCount);

}  // namespace flagcx::cuda

#ifdef __CUDACC__
// Device building blocks shared by cuda_kernels.cu and
// cuda_kernels_misaligned.cu (nvcc only).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <climits>
#include <type_traits>

namespace flagcx::cuda::kern {

constexpr int kThreads = 512;

// Compute type: halves and bfloat16 go through float.
template <class T>
struct Arith {
  using C = T;
  __device__ static C up(T x) { return x; }
  __device__ static T down(C x) { return x; }
};
template <>
struct Arith<__half> {
  using C = float;
  __device__ static float up(__half x) { return __half2float(x); }
  __device__ static __half down(float x) { return __float2half_rn(x); }
};
template <>
struct Arith<__nv_bfloat16> {
  using C = float;
  __device__ static float up(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat16 down(float x) { return __float2bfloat16_rn(x); }
};

// The 8-bit floats compute in float and round as the host kernels do
// (adapters/device/host/float_convert.h): e4m3 saturates to +-448 (the
// satfinite conversion), e5m2 gives infinity from 61440 up (the satfinite
// conversion is exact below it), NaN gives 0x7f.
template <>
struct Arith<__nv_fp8_e4m3> {
  using C = float;
  __device__ static float up(__nv_fp8_e4m3 x) { return static_cast<float>(x); }
  __device__ static __nv_fp8_e4m3 down(float x) { return __nv_fp8_e4m3(x); }
};
template <>
struct Arith<__nv_fp8_e5m2> {
  using C = float;
  __device__ static float up(__nv_fp8_e5m2 x) { return static_cast<float>(x); }
  __device__ static __nv_fp8_e5m2 down(float x) {
    __nv_fp8_e5m2 r(x);
    if (fabsf(x) >= 61440.0f) r.__x = static_cast<__nv_fp8_storage_t>(x < 0 ? 0xfcu : 0x7cu);
    return r;
  }
};

// Operators on the compute type.  Integers add and multiply in the unsigned
// type of the same width (wrap-around, as on the host); floating max/min
// propagate a NaN from either side.
struct OpSum {
  template <class C>
  __device__ static C f(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      using U = std::make_unsigned_t<C>;
      return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};
struct OpProd {
  template <class C>
  __device__ static C f(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      using U = std::make_unsigned_t<C>;
      return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};
struct OpMax {
  template <class C>
  __device__ static C f(C a, C b) {
    C r = a < b ? b : a;
    if constexpr (std::is_floating_point_v<C>) return b != b ? b : r;
    return r;
  }
};
struct OpMin {
  template <class C>
  __device__ static C f(C a, C b) {
    C r = b < a ? b : a;
    if constexpr (std::is_floating_point_v<C>) return b != b ? b : r;
    return r;
  }
};

template <class T, class Op>
struct Binary {
  __device__ T operator()(T a, T b) const {
    using A = Arith<T>;
    return A::down(Op::f(A::up(a), A::up(b)));
  }
};

template <class T>
struct DivSigned {
  uint64_t divisor;
  __device__ T operator()(T x) const {
    if (divisor > static_cast<uint64_t>(INT64_MAX)) {
      // |x| <= 2^63 <= divisor: 0, except -2^63 / 2^63 = -1.
      int64_t v = x;
      return static_cast<T>(v == INT64_MIN && divisor == (1ull << 63) ? -1 : 0);
    }
    return static_cast<T>(static_cast<int64_t>(x) / static_cast<int64_t>(divisor));
  }
};
template <class T>
struct DivUnsigned {
  uint64_t divisor;
  __device__ T operator()(T x) const { return static_cast<T>(static_cast<uint64_t>(x) / divisor); }
};
template <class T>
struct DivFloat {
  typename Arith<T>::C q;
  __device__ T operator()(T x) const {
    using A = Arith<T>;
    return A::down(A::up(x) / q);
  }
};
template <class T>
struct Identity {
  __device__ T operator()(T x) const { return x; }
};

template <class T, class V, class F>
__device__ __forceinline__ V apply2(V x, V y, const F &f) {
  constexpr int n = sizeof(V) / sizeof(T);
  T *px = reinterpret_cast<T *>(&x);
  const T *py = reinterpret_cast<const T *>(&y);
#pragma unroll
  for (int k = 0; k < n; k++) px[k] = f(px[k], py[k]);
  return x;
}
template <class T, class V, class F>
__device__ __forceinline__ V apply1(V x, const F &f) {
  constexpr int n = sizeof(V) / sizeof(T);
  T *px = reinterpret_cast<T *>(&x);
#pragma unroll
  for (int k = 0; k < n; k++) px[k] = f(px[k]);
  return x;
}

// Layout of one launch: `head` scalar elements, then `nvec` words of V, then
// scalars up to `count`.  Without a common alignment head == count.
struct Split {
  size_t head, nvec, count;
};

// Blocks per multiprocessor of the element-wise kernels: with
// __launch_bounds__(kThreads, kBlocksPerSm), 1024 threads/SM, <= 64 registers.
constexpr int kBlocksPerSm = 2;

// The split of `count` elements of T starting at p0 into words of V.
template <class T, class V>
inline Split split(size_t count, const void *p0) {
  constexpr size_t W = sizeof(V);
  constexpr size_t n = W / sizeof(T);
  uintptr_t m = reinterpret_cast<uintptr_t>(p0) % W;
  size_t head = ((W - m) % W) / sizeof(T);
  if (head > count) head = count;
  return {head, (count - head) / n, count};
}

// Blocks of a launch over `sp` (perVec elements per word): enough for the
// work, at most kBlocksPerSm per multiprocessor.
inline unsigned gridFor(const Split &sp, size_t perVec, int smCount) {
  size_t scalar = sp.head + (sp.count - sp.head - sp.nvec * perVec);
  size_t work = sp.nvec > scalar ? sp.nvec : scalar;
  size_t want = (work + kThreads - 1) / kThreads;
  size_t cap = static_cast<size_t>(smCount > 0 ? smCount : 1) * kBlocksPerSm;
  if (want > cap) want = cap;
  return static_cast<unsigned>(want ? want : 1);
}

// Calls run(T *tag, F f) with the element type and operator of a reduce.
template <class T, class Run>
cudaError_t forOp(flagcxRedOp_t op, Run run) {
  switch (op) {
    case flagcxSum:
    case flagcxAvg: return run(static_cast<T *>(nullptr), Binary<T, OpSum>{});
    case flagcxProd: return run(static_cast<T *>(nullptr), Binary<T, OpProd>{});
    case flagcxMax: return run(static_cast<T *>(nullptr), Binary<T, OpMax>{});
    case flagcxMin: return run(static_cast<T *>(nullptr), Binary<T, OpMin>{});
    default: return cudaErrorInvalidValue;
  }
}
template <class Run>
cudaError_t forReduce(flagcxDataType_t dtype, flagcxRedOp_t op, Run run) {
  switch (dtype) {
    case flagcxInt8: return forOp<int8_t>(op, run);
    case flagcxUint8: return forOp<uint8_t>(op, run);
    case flagcxInt32: return forOp<int32_t>(op, run);
    case flagcxUint32: return forOp<uint32_t>(op, run);
    case flagcxInt64: return forOp<int64_t>(op, run);
    case flagcxUint64: return forOp<uint64_t>(op, run);
    case flagcxFloat16: return forOp<__half>(op, run);
    case flagcxFloat32: return forOp<float>(op, run);
    case flagcxFloat64: return forOp<double>(op, run);
    case flagcxBfloat16: return forOp<__nv_bfloat16>(op, run);
    case flagcxFloat8e4m3: return forOp<__nv_fp8_e4m3>(op, run);
    case flagcxFloat8e5m2: return forOp<__nv_fp8_e5m2>(op, run);
    default: return cudaErrorInvalidValue;
  }
}
// Calls run(T *tag, F f) with the element type and the divide functor.
template <class Run>
cudaError_t forDivide(flagcxDataType_t dtype, uint64_t q, Run run) {
  switch (dtype) {
    case flagcxInt8: return run(static_cast<int8_t *>(nullptr), DivSigned<int8_t>{q});
    case flagcxUint8: return run(static_cast<uint8_t *>(nullptr), DivUnsigned<uint8_t>{q});
    case flagcxInt32: return run(static_cast<int32_t *>(nullptr), DivSigned<int32_t>{q});
    case flagcxUint32: return run(static_cast<uint32_t *>(nullptr), DivUnsigned<uint32_t>{q});
    case flagcxInt64: return run(static_cast<int64_t *>(nullptr), DivSigned<int64_t>{q});
    case flagcxUint64: return run(static_cast<uint64_t *>(nullptr), DivUnsigned<uint64_t>{q});
    case flagcxFloat16:
      return run(static_cast<__half *>(nullptr), DivFloat<__half>{static_cast<float>(q)});
    case flagcxFloat32:
      return run(static_cast<float *>(nullptr), DivFloat<float>{static_cast<float>(q)});
    case flagcxFloat64:
      return run(static_cast<double *>(nullptr), DivFloat<double>{static_cast<double>(q)});
    case flagcxBfloat16:
      return run(static_cast<__nv_bfloat16 *>(nullptr),
                 DivFloat<__nv_bfloat16>{static_cast<float>(q)});
    case flagcxFloat8e4m3:
      return run(static_cast<__nv_fp8_e4m3 *>(nullptr), DivFloat<__nv_fp8_e4m3>{static_cast<float>(q)});
    case flagcxFloat8e5m2:
      return run(static_cast<__nv_fp8_e5m2 *>(nullptr), DivFloat<__nv_fp8_e5m2>{static_cast<float>(q)});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace flagcx::cuda::kern

namespace flagcx::cuda {
// The candidate paths (g_misaligned >= shuffle4) for operands that differ
// modulo 16 and are element-aligned: return false without launching
// anything otherwise; else launch and set *err.  b may be null (unary).
bool launchMisalignedReduce(void *dst, const void *a, const void *b, size_t count,
                            flagcxDataType_t dtype, flagcxRedOp_t op, cudaStream_t s, int sm,
                            cudaError_t *err);
bool launchMisalignedDivide(void *dst, const void *src, size_t count, flagcxDataType_t dtype,
                            uint64_t divisor, cudaStream_t s, int sm, cudaError_t *err);
}  // namespace flagcx::cuda
#endif  // __CUDACC__
