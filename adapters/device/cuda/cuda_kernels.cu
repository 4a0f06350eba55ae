// Element-wise kernels of the CUDA adapter: reduce (every dtype x op),
// divide (the last step of Avg) and a plain copy.
//
// Shape: one kernel per (dtype, op).  The body moves 16-byte vectors
// (uint4), each thread keeping several of them in flight before it stores, so
// that a few blocks per multiprocessor saturate HBM.  Elements before the
// first 16-byte boundary (head) and after the last full vector (tail) are done
// one by one.  Operands at different offsets modulo 16 either move in 8-byte
// words (when they share an 8-byte offset) or are realigned: aligned vector
// loads shifted in registers (useRealign below says which, and why).
// Candidate realigning kernels (bench_cuda compares them) are in
// cuda_kernels_misaligned.cu; the shared device pieces in cuda_kernels.h.
// Half and bfloat16 are computed in float and rounded to nearest even, as the
// host adapter does, so both give bit-identical results.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "cuda_kernels.h"

namespace flagcx::cuda {

__attribute__((visibility("default"))) MisalignedPath g_misaligned = MisalignedPath::best;

namespace {

using namespace kern;  // building blocks: cuda_kernels.h

// Word types the word path moves: the widest width at which all operands
// share their offset.  Equal offsets mod 16 (the usual case) give 16-byte
// vectors, a shared 8-byte offset 8-byte words; the narrower ones serve the
// `words` setting (compared in bench_cuda) and operands the realigning path
// cannot take.
template <int W>
struct WordOf;
template <>
struct WordOf<16> { using type = uint4; };
template <>
struct WordOf<8> { using type = uint2; };
template <>
struct WordOf<4> { using type = uint32_t; };
template <>
struct WordOf<2> { using type = uint16_t; };
template <>
struct WordOf<1> { using type = uint8_t; };

// Words each thread keeps in flight per operand: 64 bytes for vectors and
// 8-byte words, 16 words below that (register budget of __launch_bounds__).
template <class V>
__host__ __device__ constexpr int unrollFor() {
  return sizeof(V) >= 8 ? static_cast<int>(64 / sizeof(V)) : 16;
}

// dst2 (null, or at dst's offset modulo sizeof(V)) gets the result too.
template <class T, class V, class F>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    binaryKernel(T *dst, T *dst2, const T *a, const T *b, Split sp, F f) {
  constexpr size_t n = sizeof(V) / sizeof(T);
  constexpr int U = unrollFor<V>();
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nth = static_cast<size_t>(gridDim.x) * blockDim.x;
  auto elem = [&](size_t i) {
    T r = f(a[i], b[i]);
    dst[i] = r;
    if (dst2) dst2[i] = r;
  };
  for (size_t i = tid; i < sp.head; i += nth) elem(i);
  const size_t tail = sp.head + sp.nvec * n;
  for (size_t i = tail + tid; i < sp.count; i += nth) elem(i);
  const V *va = reinterpret_cast<const V *>(a + sp.head);
  const V *vb = reinterpret_cast<const V *>(b + sp.head);
  V *vd = reinterpret_cast<V *>(dst + sp.head);
  V *vd2 = dst2 ? reinterpret_cast<V *>(dst2 + sp.head) : nullptr;
  size_t i = tid;
  for (; i + (U - 1) * nth < sp.nvec; i += U * nth) {
    V xa[U], xb[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      xa[u] = va[i + u * nth];
      xb[u] = vb[i + u * nth];
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      V r = apply2<T>(xa[u], xb[u], f);
      vd[i + u * nth] = r;
      if (vd2) vd2[i + u * nth] = r;
    }
  }
  for (; i < sp.nvec; i += nth) {
    V r = apply2<T>(va[i], vb[i], f);
    vd[i] = r;
    if (vd2) vd2[i] = r;
  }
}

template <class T, class V, class F>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    unaryKernel(T *dst, const T *src, Split sp, F f) {
  constexpr size_t n = sizeof(V) / sizeof(T);
  constexpr int U = unrollFor<V>();
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nth = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = tid; i < sp.head; i += nth) dst[i] = f(src[i]);
  const size_t tail = sp.head + sp.nvec * n;
  for (size_t i = tail + tid; i < sp.count; i += nth) dst[i] = f(src[i]);
  const V *vs = reinterpret_cast<const V *>(src + sp.head);
  V *vd = reinterpret_cast<V *>(dst + sp.head);
  size_t i = tid;
  for (; i + (U - 1) * nth < sp.nvec; i += U * nth) {
    V x[U];
#pragma unroll
    for (int u = 0; u < U; u++) x[u] = vs[i + u * nth];
#pragma unroll
    for (int u = 0; u < U; u++) vd[i + u * nth] = apply1<T>(x[u], f);
  }
  for (; i < sp.nvec; i += nth) vd[i] = apply1<T>(vs[i], f);
}

// The 16 bytes that start `s` bytes into lo:hi (two consecutive aligned
// vectors), s < 16.  The switch is on a launch-wide value: no divergence.
__device__ __forceinline__ uint4 realign(const uint4 &lo, const uint4 &hi, unsigned s) {
  const unsigned r = (s & 3) * 8;
  auto fs = [r](uint32_t l, uint32_t h) { return __funnelshift_r(l, h, r); };
  switch (s >> 2) {
    case 0: return make_uint4(fs(lo.x, lo.y), fs(lo.y, lo.z), fs(lo.z, lo.w), fs(lo.w, hi.x));
    case 1: return make_uint4(fs(lo.y, lo.z), fs(lo.z, lo.w), fs(lo.w, hi.x), fs(hi.x, hi.y));
    case 2: return make_uint4(fs(lo.z, lo.w), fs(lo.w, hi.x), fs(hi.x, hi.y), fs(hi.y, hi.z));
    default: return make_uint4(fs(lo.w, hi.x), fs(hi.x, hi.y), fs(hi.y, hi.z), fs(hi.z, hi.w));
  }
}

// Source vector i as seen from an aligned destination: the aligned vectors
// i and i+1 of the source's aligned base, realigned by `s` bytes.  Vector
// i+1 is read only when s > 0; it then holds the last byte wanted, so the
// read never leaves the 16-byte chunk (nor the page) of wanted bytes.
__device__ __forceinline__ uint4 loadShifted(const uint4 *base, size_t i, unsigned s) {
  uint4 lo = base[i];
  if (s == 0) return lo;
  return realign(lo, base[i + 1], s);
}

// Source vectors of one unrolled step: each lane loads its aligned vector
// once and takes the next one from the lane above by a warp shuffle (the
// last lane loads it).  The caller guarantees that the whole warp is in the
// step.  (Loading both vectors in every lane, the second mostly from L1,
// measured 61 % of the copy rate for bf16 and int8 against 84 % for this.)
template <int U>
__device__ __forceinline__ void loadStep(uint4 (&x)[U], const uint4 *base, size_t i, size_t nth,
                                         unsigned s) {
  uint4 lo[U];
#pragma unroll
  for (int u = 0; u < U; u++) lo[u] = base[i + u * nth];
  if (s == 0) {
#pragma unroll
    for (int u = 0; u < U; u++) x[u] = lo[u];
    return;
  }
  const bool last = (threadIdx.x & 31) == 31;
#pragma unroll
  for (int u = 0; u < U; u++) {
    uint4 hi;
    hi.x = __shfl_down_sync(0xffffffffu, lo[u].x, 1);
    hi.y = __shfl_down_sync(0xffffffffu, lo[u].y, 1);
    hi.z = __shfl_down_sync(0xffffffffu, lo[u].z, 1);
    hi.w = __shfl_down_sync(0xffffffffu, lo[u].w, 1);
    if (last) hi = base[i + u * nth + 1];
    x[u] = realign(lo[u], hi, s);
  }
}

// Realign kernels: 2 vectors per operand in flight per thread, 2 blocks per
// multiprocessor (better than 4 and 1 on an H200: docs/GPU.md).
constexpr int kRealignUnroll = 2;
constexpr int kRealignBlocks = 2;

// Operands at different offsets modulo 16: the destination is written in
// aligned vectors and each source is read in aligned vectors and shifted in
// registers (funnel shifts), so every global access stays 16 bytes wide.
// Needs element-aligned pointers; sa/sb are the sources' offsets modulo 16
// after the head.
template <class T, class F>
__global__ void __launch_bounds__(kThreads, kRealignBlocks)
    realignBinaryKernel(T *dst, const T *a, const T *b, Split sp, unsigned sa, unsigned sb, F f) {
  constexpr size_t n = 16 / sizeof(T);
  constexpr int U = kRealignUnroll;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nth = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t lane = threadIdx.x & 31;
  for (size_t i = tid; i < sp.head; i += nth) dst[i] = f(a[i], b[i]);
  const size_t tail = sp.head + sp.nvec * n;
  for (size_t i = tail + tid; i < sp.count; i += nth) dst[i] = f(a[i], b[i]);
  const uint4 *va = reinterpret_cast<const uint4 *>(reinterpret_cast<const char *>(a + sp.head) - sa);
  const uint4 *vb = reinterpret_cast<const uint4 *>(reinterpret_cast<const char *>(b + sp.head) - sb);
  uint4 *vd = reinterpret_cast<uint4 *>(dst + sp.head);
  size_t i = tid;
  // The step's condition holds for the warp's last lane, hence for all.
  for (; i - lane + 31 + (U - 1) * nth < sp.nvec; i += U * nth) {
    uint4 xa[U], xb[U];
    loadStep<U>(xa, va, i, nth, sa);
    loadStep<U>(xb, vb, i, nth, sb);
#pragma unroll
    for (int u = 0; u < U; u++) vd[i + u * nth] = apply2<T>(xa[u], xb[u], f);
  }
  for (; i < sp.nvec; i += nth) vd[i] = apply2<T>(loadShifted(va, i, sa), loadShifted(vb, i, sb), f);
}

template <class T, class F>
__global__ void __launch_bounds__(kThreads, kRealignBlocks)
    realignUnaryKernel(T *dst, const T *src, Split sp, unsigned ss, F f) {
  constexpr size_t n = 16 / sizeof(T);
  constexpr int U = kRealignUnroll;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nth = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t lane = threadIdx.x & 31;
  for (size_t i = tid; i < sp.head; i += nth) dst[i] = f(src[i]);
  const size_t tail = sp.head + sp.nvec * n;
  for (size_t i = tail + tid; i < sp.count; i += nth) dst[i] = f(src[i]);
  const uint4 *vs = reinterpret_cast<const uint4 *>(reinterpret_cast<const char *>(src + sp.head) - ss);
  uint4 *vd = reinterpret_cast<uint4 *>(dst + sp.head);
  size_t i = tid;
  for (; i - lane + 31 + (U - 1) * nth < sp.nvec; i += U * nth) {
    uint4 x[U];
    loadStep<U>(x, vs, i, nth, ss);
#pragma unroll
    for (int u = 0; u < U; u++) vd[i + u * nth] = apply1<T>(x[u], f);
  }
  for (; i < sp.nvec; i += nth) vd[i] = apply1<T>(loadShifted(vs, i, ss), f);
}

// Offset modulo 16 of p + head elements.
template <class T>
unsigned shiftAfter(const void *p, size_t head) {
  return static_cast<unsigned>((reinterpret_cast<uintptr_t>(p) + head * sizeof(T)) % 16);
}
template <class T>
bool elementAligned(const void *p) {
  return !p || reinterpret_cast<uintptr_t>(p) % sizeof(T) == 0;
}

// True when every operand sits at the same offset modulo W and that offset
// is a whole number of elements (so a word holds whole elements).
template <class T>
bool congruent(size_t W, const void *p0, const void *p1, const void *p2) {
  uintptr_t m = reinterpret_cast<uintptr_t>(p0) % W;
  return reinterpret_cast<uintptr_t>(p1) % W == m &&
         (!p2 || reinterpret_cast<uintptr_t>(p2) % W == m) && m % sizeof(T) == 0;
}

// Which of this file's paths takes operands that differ modulo 16 when a
// benchmark asks for `realign` or `words` (`best` goes to `chunk` in
// cuda_kernels_misaligned.cu first).  On an H200: operands
// sharing an 8-byte offset move in 8-byte words (92 % of the copy rate for
// f32), the others realigned (84 %; 4-byte words reached 65 %, bytes 52 %).
template <class T>
bool useRealign(const void *p0, const void *p1, const void *p2) {
  if (congruent<T>(16, p0, p1, p2)) return false;
  if (!elementAligned<T>(p0) || !elementAligned<T>(p1) || !elementAligned<T>(p2)) return false;
  switch (g_misaligned) {
    case MisalignedPath::realign: return true;
    case MisalignedPath::words: return false;
    default: return !congruent<T>(8, p0, p1, p2);
  }
}

// Calls go(V{}, split) with the widest word width W >= sizeof(T) at which the
// operands are congruent; when none is (operands not even element-aligned to
// each other) the split is all head: element by element.
template <class T, class Go>
cudaError_t byWidth(size_t count, const void *p0, const void *p1, const void *p2, Go go) {
  using E = typename WordOf<sizeof(T)>::type;
  if (congruent<T>(16, p0, p1, p2)) return go(uint4{}, split<T, uint4>(count, p0));
  if constexpr (sizeof(T) <= 8) {
    if (congruent<T>(8, p0, p1, p2)) return go(uint2{}, split<T, uint2>(count, p0));
  }
  if constexpr (sizeof(T) <= 4) {
    if (congruent<T>(4, p0, p1, p2)) return go(uint32_t{}, split<T, uint32_t>(count, p0));
  }
  if constexpr (sizeof(T) <= 2) {
    if (congruent<T>(2, p0, p1, p2)) return go(uint16_t{}, split<T, uint16_t>(count, p0));
  }
  if constexpr (sizeof(T) == 1) return go(uint8_t{}, split<T, uint8_t>(count, p0));
  return go(E{}, Split{count, 0, count});
}

template <class T, class F>
cudaError_t runBinary(void *dst, const void *a, const void *b, size_t count, cudaStream_t s,
                      int sm, F f) {
  if (useRealign<T>(dst, a, b)) {
    Split sp = split<T, uint4>(count, dst);
    realignBinaryKernel<T, F><<<gridFor(sp, 16 / sizeof(T), sm), kThreads, 0, s>>>(
        static_cast<T *>(dst), static_cast<const T *>(a), static_cast<const T *>(b), sp,
        shiftAfter<T>(a, sp.head), shiftAfter<T>(b, sp.head), f);
    return cudaGetLastError();
  }
  return byWidth<T>(count, dst, a, b, [&](auto word, Split sp) {
    using V = decltype(word);
    binaryKernel<T, V, F><<<gridFor(sp, sizeof(V) / sizeof(T), sm), kThreads, 0, s>>>(
        static_cast<T *>(dst), nullptr, static_cast<const T *>(a), static_cast<const T *>(b), sp, f);
    return cudaGetLastError();
  });
}

template <class T, class F>
cudaError_t runUnary(void *dst, const void *src, size_t count, cudaStream_t s, int sm, F f) {
  if (useRealign<T>(dst, src, nullptr)) {
    Split sp = split<T, uint4>(count, dst);
    realignUnaryKernel<T, F><<<gridFor(sp, 16 / sizeof(T), sm), kThreads, 0, s>>>(
        static_cast<T *>(dst), static_cast<const T *>(src), sp, shiftAfter<T>(src, sp.head), f);
    return cudaGetLastError();
  }
  return byWidth<T>(count, dst, src, nullptr, [&](auto word, Split sp) {
    using V = decltype(word);
    unaryKernel<T, V, F><<<gridFor(sp, sizeof(V) / sizeof(T), sm), kThreads, 0, s>>>(
        static_cast<T *>(dst), static_cast<const T *>(src), sp, f);
    return cudaGetLastError();
  });
}

}  // namespace

cudaError_t launchReduce(void *dst, const void *a, const void *b, size_t count,
                         flagcxDataType_t dtype, flagcxRedOp_t op, cudaStream_t s, int sm) {
  if (count == 0) return cudaSuccess;
  cudaError_t e;
  if (launchMisalignedReduce(dst, a, b, count, dtype, op, s, sm, &e)) return e;
  return forReduce(dtype, op, [&](auto *tag, auto f) {
    return runBinary<std::remove_pointer_t<decltype(tag)>>(dst, a, b, count, s, sm, f);
  });
}

cudaError_t launchReduce2(void *dst, void *dst2, const void *a, const void *b, size_t count,
                          flagcxDataType_t dtype, flagcxRedOp_t op, cudaStream_t s, int sm) {
  if (count == 0) return cudaSuccess;
  size_t ts = getFlagcxDataTypeSize(dtype);
  uintptr_t m = reinterpret_cast<uintptr_t>(dst) % 16;
  if (!dst2 || reinterpret_cast<uintptr_t>(dst2) % 16 != m || reinterpret_cast<uintptr_t>(a) % 16 != m ||
      reinterpret_cast<uintptr_t>(b) % 16 != m || ts == 0 || m % ts != 0) {
    cudaError_t e = launchReduce(dst, a, b, count, dtype, op, s, sm);
    if (e != cudaSuccess || !dst2) return e;
    return cudaMemcpyAsync(dst2, dst, count * ts, cudaMemcpyDeviceToDevice, s);
  }
  return forReduce(dtype, op, [&](auto *tag, auto f) {
    using T = std::remove_pointer_t<decltype(tag)>;
    Split sp = split<T, uint4>(count, dst);
    binaryKernel<T, uint4, decltype(f)><<<gridFor(sp, 16 / sizeof(T), sm), kThreads, 0, s>>>(
        static_cast<T *>(dst), static_cast<T *>(dst2), static_cast<const T *>(a),
        static_cast<const T *>(b), sp, f);
    return cudaGetLastError();
  });
}

cudaError_t launchDivide(void *dst, const void *src, size_t count, flagcxDataType_t dtype,
                         uint64_t divisor, cudaStream_t s, int sm) {
  if (count == 0) return cudaSuccess;
  if (divisor == 0) return cudaErrorInvalidValue;
  cudaError_t e;
  if (launchMisalignedDivide(dst, src, count, dtype, divisor, s, sm, &e)) return e;
  return forDivide(dtype, divisor, [&](auto *tag, auto f) {
    return runUnary<std::remove_pointer_t<decltype(tag)>>(dst, src, count, s, sm, f);
  });
}

namespace {
// Each block takes units blockIdx.x, + gridDim.x, ... (a resident grid: a
// block per chunk spent more time being scheduled than copying 32 KiB):
// bytes up to the first 16-byte boundary one by one, the body in 16-byte
// vectors (four loads in flight per thread before the stores), the tail one
// by one.  src and dst share their offset mod 16.
__global__ void __launch_bounds__(kThreads) copyBatchKernel(const BatchChunk *chunks, unsigned n,
                                                             unsigned parts) {
  // Work unit u is part u % parts of chunk u / parts (parts > 1 spreads a
  // batch of few chunks over every multiprocessor).  The list may live in
  // host memory (mapped pinned): one thread reads each entry, the next
  // unit's load issued before this unit's copy and used after it, so that
  // its latency hides behind the copy.
  __shared__ BatchChunk cur[2];
  const unsigned t = threadIdx.x;
  const size_t units = static_cast<size_t>(n) * parts;
  if (t == 0) cur[0] = chunks[blockIdx.x / parts];  // launchCopyBatch: gridDim.x <= units
  __syncthreads();
  int slot = 0;
  for (size_t u = blockIdx.x; u < units; u += gridDim.x) {
    const BatchChunk whole = cur[slot];
    const size_t nu = u + gridDim.x;
    BatchChunk ahead{};
    if (t == 0 && nu < units) ahead = chunks[nu / parts];
    // This unit's share, cut at multiples of 16 so that src and dst keep
    // their common offset modulo 16.
    const size_t share = ((whole.bytes + parts - 1) / parts + 15) & ~size_t{15};
    const size_t from = (u % parts) * share;
    const size_t bytes = from < whole.bytes ? min(share, whole.bytes - from) : 0;
    const char *src = whole.src + from;
    char *dst = whole.dst + from;
    const size_t head =
        min(bytes, static_cast<size_t>((16 - (reinterpret_cast<uintptr_t>(src) & 15)) & 15));
    const size_t nvec = (bytes - head) / 16;
    const size_t tail = head + nvec * 16;
    if (t < head) dst[t] = src[t];
    if (tail + t < bytes) dst[tail + t] = src[tail + t];
    const uint4 *vs = reinterpret_cast<const uint4 *>(src + head);
    uint4 *vd = reinterpret_cast<uint4 *>(dst + head);
    constexpr int U = 4;
    size_t i = t;
    for (; i + (U - 1) * kThreads < nvec; i += U * kThreads) {
      uint4 x[U];
#pragma unroll
      for (int k = 0; k < U; k++) x[k] = vs[i + k * kThreads];
#pragma unroll
      for (int k = 0; k < U; k++) vd[i + k * kThreads] = x[k];
    }
    for (; i < nvec; i += kThreads) vd[i] = vs[i];
    if (t == 0 && nu < units) cur[slot ^ 1] = ahead;
    __syncthreads();  // cur[slot ^ 1] written; everyone done reading cur[slot]
    slot ^= 1;
  }
}
}  // namespace

cudaError_t launchCopyBatch(const BatchChunk *chunks, unsigned n, unsigned parts, cudaStream_t s,
                            int smCount) {
  if (n == 0 || parts == 0) return cudaSuccess;
  size_t units = static_cast<size_t>(n) * parts;
  size_t cap = static_cast<size_t>(smCount > 0 ? smCount : 1) * 4;
  unsigned grid = static_cast<unsigned>(std::min(units, cap));
  copyBatchKernel<<<grid, kThreads, 0, s>>>(chunks, n, parts);
  return cudaGetLastError();
}

cudaError_t launchCopy(void *dst, const void *src, size_t bytes, cudaStream_t s, int sm) {
  if (bytes == 0) return cudaSuccess;
  return runUnary<uint8_t>(dst, src, bytes, s, sm, Identity<uint8_t>{});
}

}  // namespace flagcx::cuda
