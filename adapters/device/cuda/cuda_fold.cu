// The CUDA adapter's ordered fold kernel (launchFold, cuda_kernels.h): the
// device twin of hostFold (adapters/device/host/host_reduce_kernels.cc),
// equal to it bit for bit, so that ranks folding on the host and ranks
// folding on a GPU give the same result.
//
// Why the bits agree: each element is folded by one thread, sources in the
// order given; float and double steps go through __fadd_rn / __fmul_rn /
// __dadd_rn / __dmul_rn, which nvcc never contracts into an FMA whatever
// -fmad says, and Avg's division through __fdiv_rn / __ddiv_rn (IEEE
// division, also under -use_fast_math); subnormals are kept (this file is
// built without -ftz).  The narrow types convert exactly to float, fold
// there and round once with Arith<T>::down, the conversions the reduce
// kernels already share with the host (float_convert.h's semantics).
//
// Shape: when dst and every source share their offset modulo 16, each
// thread folds U 16-byte vectors at a time (U vectors of every source in
// flight before they are combined), the head and tail element by element;
// otherwise the whole range goes element by element (coalesced, slower).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "cuda_kernels.h"

namespace flagcx::cuda {
namespace {

using namespace kern;  // building blocks: cuda_kernels.h

// Fold operators on the compute type: float and double rounded per step by
// the intrinsics; integers wrap as in the reduce kernels.  Max and Min
// round nothing and are the reduce kernels' own (NaN from either side).
template <bool Mul>
struct Rn {
  template <class C>
  __device__ static C f(C a, C b) {
    if constexpr (std::is_same_v<C, float>) return Mul ? __fmul_rn(a, b) : __fadd_rn(a, b);
    else if constexpr (std::is_same_v<C, double>) return Mul ? __dmul_rn(a, b) : __dadd_rn(a, b);
    else if constexpr (Mul) return OpProd::f(a, b);
    else return OpSum::f(a, b);
  }
};
using RnSum = Rn<false>;
using RnProd = Rn<true>;
template <class Op>
struct Rounded { using type = Op; };
template <>
struct Rounded<OpSum> { using type = RnSum; };
template <>
struct Rounded<OpProd> { using type = RnProd; };
// The fold operator of a reduce functor that forReduce hands out.
template <class B>
struct FoldOpOf;
template <class T, class Op>
struct FoldOpOf<Binary<T, Op>> { using type = typename Rounded<Op>::type; };

// The last step: Avg's division (divisor != 0) in the compute type, then
// the one rounding to T.  Integers divide as hostDivide does.
template <class T>
struct Finish {
  uint64_t divisor;
  __device__ T operator()(typename Arith<T>::C x) const {
    using A = Arith<T>;
    using C = typename A::C;
    if (divisor == 0) return A::down(x);
    if constexpr (std::is_same_v<C, float>) return A::down(__fdiv_rn(x, static_cast<float>(divisor)));
    else if constexpr (std::is_same_v<C, double>) return __ddiv_rn(x, static_cast<double>(divisor));
    else if constexpr (std::is_signed_v<C>) return DivSigned<T>{divisor}(x);
    else return DivUnsigned<T>{divisor}(x);
  }
};

struct FoldArgs {
  void *dst;
  const void *const *list;  // device memory: the n sources (n > kFoldParamSources)
  const void *src[kFoldParamSources];  // else here
  int n;
  uint64_t divisor;  // Avg: n; else 0
  Split sp;          // in 16-byte vectors, or all head
};

template <class T>
__device__ __forceinline__ const T *source(const FoldArgs &p, int k) {
  return static_cast<const T *>(p.list ? p.list[k] : p.src[k]);
}

template <class T, class Op>
__device__ __forceinline__ void foldElement(const FoldArgs &p, size_t i) {
  using A = Arith<T>;
  typename A::C acc = A::up(source<T>(p, 0)[i]);
  for (int k = 1; k < p.n; k++) acc = Op::f(acc, A::up(source<T>(p, k)[i]));
  static_cast<T *>(p.dst)[i] = Finish<T>{p.divisor}(acc);
}

// Vectors i, i + nth, ... (U of them) of the vector range.
template <class T, class Op, int U>
__device__ __forceinline__ void foldVectors(const FoldArgs &p, size_t i, size_t nth) {
  using A = Arith<T>;
  constexpr int E = 16 / sizeof(T);
  typename A::C acc[U][E];
  for (int k = 0; k < p.n; k++) {
    const uint4 *v = reinterpret_cast<const uint4 *>(source<T>(p, k) + p.sp.head);
    uint4 x[U];
#pragma unroll
    for (int u = 0; u < U; u++) x[u] = v[i + u * nth];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const T *e = reinterpret_cast<const T *>(&x[u]);
#pragma unroll
      for (int j = 0; j < E; j++) acc[u][j] = k == 0 ? A::up(e[j]) : Op::f(acc[u][j], A::up(e[j]));
    }
  }
  uint4 *vd = reinterpret_cast<uint4 *>(static_cast<T *>(p.dst) + p.sp.head);
  const Finish<T> fin{p.divisor};
#pragma unroll
  for (int u = 0; u < U; u++) {
    uint4 r;
    T *o = reinterpret_cast<T *>(&r);
#pragma unroll
    for (int j = 0; j < E; j++) o[j] = fin(acc[u][j]);
    vd[i + u * nth] = r;
  }
}

// U vectors per thread: 16 accumulators at most, so that the kernels fit
// the 64-register budget without spilling (32 spilled for the narrow types'
// Sum and Prod, Avg's division being inlined: ptxas -v, sm_90).
template <class T, class Op>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) foldKernel(const __grid_constant__ FoldArgs p) {
  constexpr int E = 16 / sizeof(T);
  constexpr int U = E >= 16 ? 1 : E >= 8 ? 2 : 4;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nth = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = tid; i < p.sp.head; i += nth) foldElement<T, Op>(p, i);
  for (size_t i = p.sp.head + p.sp.nvec * E + tid; i < p.sp.count; i += nth) foldElement<T, Op>(p, i);
  size_t i = tid;
  for (; i + (U - 1) * nth < p.sp.nvec; i += U * nth) foldVectors<T, Op, U>(p, i, nth);
  for (; i < p.sp.nvec; i += nth) foldVectors<T, Op, 1>(p, i, nth);
}

// dst and every source at one offset modulo 16, a whole number of elements.
template <class T>
bool vectorsFit(const void *dst, const void *const *srcs, int n) {
  const uintptr_t m = reinterpret_cast<uintptr_t>(dst) % 16;
  if (m % sizeof(T) != 0) return false;
  for (int k = 0; k < n; k++)
    if (reinterpret_cast<uintptr_t>(srcs[k]) % 16 != m) return false;
  return true;
}

}  // namespace

cudaError_t launchFold(void *dst, const void *const *srcs, const void *const *devList, int n,
                       size_t count, flagcxDataType_t dtype, flagcxRedOp_t op, cudaStream_t s,
                       int sm) {
  if (count == 0) return cudaSuccess;
  if (n < 1 || (n > kFoldParamSources && !devList)) return cudaErrorInvalidValue;
  FoldArgs p{};
  p.dst = dst;
  p.n = n;
  p.divisor = op == flagcxAvg ? static_cast<uint64_t>(n) : 0;
  if (n > kFoldParamSources)
    p.list = devList;
  else
    for (int k = 0; k < n; k++) p.src[k] = srcs[k];
  return forReduce(dtype, op, [&](auto *tag, auto bin) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using Op = typename FoldOpOf<decltype(bin)>::type;
    p.sp = vectorsFit<T>(dst, srcs, n) ? split<T, uint4>(count, dst) : Split{count, 0, count};
    foldKernel<T, Op><<<gridFor(p.sp, 16 / sizeof(T), sm), kThreads, 0, s>>>(p);
    return cudaGetLastError();
  });
}

}  // namespace flagcx::cuda
