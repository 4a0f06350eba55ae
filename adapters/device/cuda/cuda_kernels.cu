// Element-wise kernels of the CUDA adapter: reduce (every dtype x op),
// divide (the last step of Avg) and a plain copy.
//
// Shape: one kernel per (dtype, op).  The body moves 16-byte vectors
// (uint4), each thread keeping kUnroll of them in flight before it stores, so
// that a few blocks per multiprocessor saturate HBM.  Elements before the
// first 16-byte boundary (head) and after the last full vector (tail) are done
// one by one; when the operands are not equally misaligned no common boundary
// exists and the whole range is done element by element (still coalesced).
// Half and bfloat16 are computed in float and rounded to nearest even, as the
// host adapter does, so both give bit-identical results.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "cuda_kernels.h"

namespace flagcx::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 2;  // with __launch_bounds__ below: 1024 threads/SM, <= 64 registers
constexpr int kUnroll = 4;

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

template <class T, class F>
__device__ __forceinline__ uint4 apply2(uint4 x, uint4 y, const F &f) {
  constexpr int n = 16 / sizeof(T);
  T *px = reinterpret_cast<T *>(&x);
  const T *py = reinterpret_cast<const T *>(&y);
#pragma unroll
  for (int k = 0; k < n; k++) px[k] = f(px[k], py[k]);
  return x;
}
template <class T, class F>
__device__ __forceinline__ uint4 apply1(uint4 x, const F &f) {
  constexpr int n = 16 / sizeof(T);
  T *px = reinterpret_cast<T *>(&x);
#pragma unroll
  for (int k = 0; k < n; k++) px[k] = f(px[k]);
  return x;
}

// Layout of one launch: `head` scalar elements, then `nvec` 16-byte vectors,
// then scalars up to `count`.  Without a common alignment head == count.
struct Split {
  size_t head, nvec, count;
};

template <class T, class F>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    binaryKernel(T *dst, const T *a, const T *b, Split sp, F f) {
  constexpr size_t n = 16 / sizeof(T);
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nth = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = tid; i < sp.head; i += nth) dst[i] = f(a[i], b[i]);
  const size_t tail = sp.head + sp.nvec * n;
  for (size_t i = tail + tid; i < sp.count; i += nth) dst[i] = f(a[i], b[i]);
  const uint4 *va = reinterpret_cast<const uint4 *>(a + sp.head);
  const uint4 *vb = reinterpret_cast<const uint4 *>(b + sp.head);
  uint4 *vd = reinterpret_cast<uint4 *>(dst + sp.head);
  size_t i = tid;
  for (; i + (kUnroll - 1) * nth < sp.nvec; i += kUnroll * nth) {
    uint4 xa[kUnroll], xb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      xa[u] = va[i + u * nth];
      xb[u] = vb[i + u * nth];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; u++) vd[i + u * nth] = apply2<T>(xa[u], xb[u], f);
  }
  for (; i < sp.nvec; i += nth) vd[i] = apply2<T>(va[i], vb[i], f);
}

template <class T, class F>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    unaryKernel(T *dst, const T *src, Split sp, F f) {
  constexpr size_t n = 16 / sizeof(T);
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nth = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = tid; i < sp.head; i += nth) dst[i] = f(src[i]);
  const size_t tail = sp.head + sp.nvec * n;
  for (size_t i = tail + tid; i < sp.count; i += nth) dst[i] = f(src[i]);
  const uint4 *vs = reinterpret_cast<const uint4 *>(src + sp.head);
  uint4 *vd = reinterpret_cast<uint4 *>(dst + sp.head);
  size_t i = tid;
  for (; i + (kUnroll - 1) * nth < sp.nvec; i += kUnroll * nth) {
    uint4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) x[u] = vs[i + u * nth];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) vd[i + u * nth] = apply1<T>(x[u], f);
  }
  for (; i < sp.nvec; i += nth) vd[i] = apply1<T>(vs[i], f);
}

template <class T>
Split split(size_t count, const void *p0, const void *p1, const void *p2) {
  constexpr size_t n = 16 / sizeof(T);
  uintptr_t m = reinterpret_cast<uintptr_t>(p0) % 16;
  bool common = reinterpret_cast<uintptr_t>(p1) % 16 == m &&
                (!p2 || reinterpret_cast<uintptr_t>(p2) % 16 == m) && m % sizeof(T) == 0;
  if (!common) return {count, 0, count};
  size_t head = ((16 - m) % 16) / sizeof(T);
  if (head > count) head = count;
  return {head, (count - head) / n, count};
}

unsigned gridFor(const Split &sp, size_t perVec, int smCount) {
  size_t scalar = sp.head + (sp.count - sp.head - sp.nvec * perVec);
  size_t work = sp.nvec > scalar ? sp.nvec : scalar;
  size_t want = (work + kThreads - 1) / kThreads;
  size_t cap = static_cast<size_t>(smCount > 0 ? smCount : 1) * kBlocksPerSm;
  if (want > cap) want = cap;
  return static_cast<unsigned>(want ? want : 1);
}

template <class T, class F>
cudaError_t runBinary(void *dst, const void *a, const void *b, size_t count, cudaStream_t s,
                      int sm, F f) {
  Split sp = split<T>(count, dst, a, b);
  binaryKernel<T, F><<<gridFor(sp, 16 / sizeof(T), sm), kThreads, 0, s>>>(
      static_cast<T *>(dst), static_cast<const T *>(a), static_cast<const T *>(b), sp, f);
  return cudaGetLastError();
}

template <class T, class F>
cudaError_t runUnary(void *dst, const void *src, size_t count, cudaStream_t s, int sm, F f) {
  Split sp = split<T>(count, dst, src, nullptr);
  unaryKernel<T, F><<<gridFor(sp, 16 / sizeof(T), sm), kThreads, 0, s>>>(
      static_cast<T *>(dst), static_cast<const T *>(src), sp, f);
  return cudaGetLastError();
}

template <class T>
cudaError_t reduceT(void *d, const void *a, const void *b, size_t n, flagcxRedOp_t op,
                    cudaStream_t s, int sm) {
  switch (op) {
    case flagcxSum:
    case flagcxAvg: return runBinary<T>(d, a, b, n, s, sm, Binary<T, OpSum>{});
    case flagcxProd: return runBinary<T>(d, a, b, n, s, sm, Binary<T, OpProd>{});
    case flagcxMax: return runBinary<T>(d, a, b, n, s, sm, Binary<T, OpMax>{});
    case flagcxMin: return runBinary<T>(d, a, b, n, s, sm, Binary<T, OpMin>{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launchReduce(void *dst, const void *a, const void *b, size_t count,
                         flagcxDataType_t dtype, flagcxRedOp_t op, cudaStream_t s, int sm) {
  if (count == 0) return cudaSuccess;
  switch (dtype) {
    case flagcxInt8: return reduceT<int8_t>(dst, a, b, count, op, s, sm);
    case flagcxUint8: return reduceT<uint8_t>(dst, a, b, count, op, s, sm);
    case flagcxInt32: return reduceT<int32_t>(dst, a, b, count, op, s, sm);
    case flagcxUint32: return reduceT<uint32_t>(dst, a, b, count, op, s, sm);
    case flagcxInt64: return reduceT<int64_t>(dst, a, b, count, op, s, sm);
    case flagcxUint64: return reduceT<uint64_t>(dst, a, b, count, op, s, sm);
    case flagcxFloat16: return reduceT<__half>(dst, a, b, count, op, s, sm);
    case flagcxFloat32: return reduceT<float>(dst, a, b, count, op, s, sm);
    case flagcxFloat64: return reduceT<double>(dst, a, b, count, op, s, sm);
    case flagcxBfloat16: return reduceT<__nv_bfloat16>(dst, a, b, count, op, s, sm);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launchDivide(void *dst, const void *src, size_t count, flagcxDataType_t dtype,
                         uint64_t divisor, cudaStream_t s, int sm) {
  if (count == 0) return cudaSuccess;
  if (divisor == 0) return cudaErrorInvalidValue;
  switch (dtype) {
    case flagcxInt8: return runUnary<int8_t>(dst, src, count, s, sm, DivSigned<int8_t>{divisor});
    case flagcxUint8: return runUnary<uint8_t>(dst, src, count, s, sm, DivUnsigned<uint8_t>{divisor});
    case flagcxInt32: return runUnary<int32_t>(dst, src, count, s, sm, DivSigned<int32_t>{divisor});
    case flagcxUint32:
      return runUnary<uint32_t>(dst, src, count, s, sm, DivUnsigned<uint32_t>{divisor});
    case flagcxInt64: return runUnary<int64_t>(dst, src, count, s, sm, DivSigned<int64_t>{divisor});
    case flagcxUint64:
      return runUnary<uint64_t>(dst, src, count, s, sm, DivUnsigned<uint64_t>{divisor});
    case flagcxFloat16:
      return runUnary<__half>(dst, src, count, s, sm, DivFloat<__half>{static_cast<float>(divisor)});
    case flagcxFloat32:
      return runUnary<float>(dst, src, count, s, sm, DivFloat<float>{static_cast<float>(divisor)});
    case flagcxFloat64:
      return runUnary<double>(dst, src, count, s, sm, DivFloat<double>{static_cast<double>(divisor)});
    case flagcxBfloat16:
      return runUnary<__nv_bfloat16>(dst, src, count, s, sm,
                                     DivFloat<__nv_bfloat16>{static_cast<float>(divisor)});
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launchCopy(void *dst, const void *src, size_t bytes, cudaStream_t s, int sm) {
  if (bytes == 0) return cudaSuccess;
  return runUnary<uint8_t>(dst, src, bytes, s, sm, Identity<uint8_t>{});
}

}  // namespace flagcx::cuda
