// Candidate kernels for operands at different offsets modulo 16,
// chosen by g_misaligned (shuffle4, chunk, chunkLine; cuda_kernels.h).  Like
// the `realign` path of cuda_kernels.cu, the destination is written in
// aligned 16-byte vectors and each source is read in aligned vectors and
// shifted in registers; they differ in how the next vector of a source
// reaches a lane and in how many vectors are in flight:
//  - shuffle4: grid-stride steps as in cuda_kernels.cu, 4 vectors per operand
//    in flight, the next vector from lane + 1 by shuffle (lane 31 loads it),
//    each vector realigned as soon as its neighbour arrives (only the loaded
//    vectors stay live), byte permutes instead of funnel shifts;
//  - chunk: a warp takes 4 consecutive 512-byte steps (2 KiB per operand);
//    lane 31's next vector is lane 0's vector of the next step, so only one
//    extra load (by lane 0) per chunk instead of one per step;
//  - chunkLine: chunk with the destination aligned to 128 bytes (the head
//    done element by element), so that no store straddles a cache line.
#include <algorithm>
#include <cstdint>

#include "cuda_kernels.h"

namespace flagcx::cuda {
namespace {

using namespace kern;

constexpr int kUnroll = 4;  // vectors per operand in flight per thread
constexpr int kBlocks = 2;  // blocks per multiprocessor (<= 64 registers)

// The 16 bytes that start `s` bytes into lo:hi, s < 16 (launch-wide: the
// switch does not diverge).  sel picks bytes k..k+3 of {h:l}, k = s % 4.
__device__ __forceinline__ uint4 permute(const uint4 &lo, const uint4 &hi, unsigned s) {
  const unsigned sel = 0x3210u + 0x1111u * (s & 3);
  auto p = [sel](uint32_t l, uint32_t h) { return __byte_perm(l, h, sel); };
  switch (s >> 2) {
    case 0: return make_uint4(p(lo.x, lo.y), p(lo.y, lo.z), p(lo.z, lo.w), p(lo.w, hi.x));
    case 1: return make_uint4(p(lo.y, lo.z), p(lo.z, lo.w), p(lo.w, hi.x), p(hi.x, hi.y));
    case 2: return make_uint4(p(lo.z, lo.w), p(lo.w, hi.x), p(hi.x, hi.y), p(hi.y, hi.z));
    default: return make_uint4(p(lo.w, hi.x), p(hi.x, hi.y), p(hi.y, hi.z), p(hi.z, hi.w));
  }
}

__device__ __forceinline__ uint4 shfl(const uint4 &v, int from) {
  return make_uint4(__shfl_sync(0xffffffffu, v.x, from), __shfl_sync(0xffffffffu, v.y, from),
                    __shfl_sync(0xffffffffu, v.z, from), __shfl_sync(0xffffffffu, v.w, from));
}

// One source: its aligned base (the operand's first vector rounded down to
// 16 bytes) and the shift s < 16 from there.
struct Src {
  const uint4 *base;
  unsigned s;
};

__device__ __forceinline__ Src makeSrc(const void *p, unsigned s) {
  return {reinterpret_cast<const uint4 *>(static_cast<const char *>(p) - s), s};
}

// Source vector i seen from the aligned destination (single vectors: the
// remainder).  Vector i + 1 of the base is read only when s > 0; it then
// holds wanted bytes, so the read stays inside the operand.
__device__ __forceinline__ uint4 loadOne(const Src &q, size_t i) {
  uint4 lo = q.base[i];
  if (q.s == 0) return lo;
  return permute(lo, q.base[i + 1], q.s);
}

// shuffle4: vectors i + u * nth, u < U; the whole warp is in the step.
template <int U>
__device__ __forceinline__ void stepStride(uint4 (&x)[U], const Src &q, size_t i, size_t nth) {
#pragma unroll
  for (int u = 0; u < U; u++) x[u] = q.base[i + u * nth];
  if (q.s == 0) return;
  const bool last = (threadIdx.x & 31) == 31;
  const int from = (threadIdx.x + 1) & 31;
#pragma unroll
  for (int u = 0; u < U; u++) {
    uint4 hi = shfl(x[u], from);
    if (last) hi = q.base[i + u * nth + 1];
    x[u] = permute(x[u], hi, q.s);
  }
}

// chunk: vectors c0 + u * 32 + lane, u < U (U * 32 consecutive vectors).
// Lane l's next vector is lane l + 1's; lane 31's is lane 0's of the next
// step, which lane 0 sends in place of its own (nobody else reads it).
template <int U>
__device__ __forceinline__ void stepChunk(uint4 (&x)[U], const Src &q, size_t c0, unsigned lane) {
#pragma unroll
  for (int u = 0; u < U; u++) x[u] = q.base[c0 + u * 32 + lane];
  if (q.s == 0) return;
  uint4 after = make_uint4(0, 0, 0, 0);
  if (lane == 0) after = q.base[c0 + U * 32];
  const int from = (lane + 1) & 31;
#pragma unroll
  for (int u = 0; u < U; u++) {
    const uint4 send = lane == 0 ? (u + 1 < U ? x[u + 1] : after) : x[u];
    x[u] = permute(x[u], shfl(send, from), q.s);
  }
}

template <class T, int NS, class F>
__device__ __forceinline__ uint4 combine(const uint4 &x, const uint4 &y, const F &f) {
  if constexpr (NS == 2) {
    return apply2<T>(x, y, f);
  } else {
    return apply1<T>(x, f);
  }
}

// NS sources (1: divide, 2: reduce); b unused when NS == 1.  sp.head
// elements first, then sp.nvec destination vectors, then the tail.
template <class T, int NS, bool Chunk, class F>
__global__ void __launch_bounds__(kThreads, kBlocks)
    variantKernel(T *dst, const T *a, const T *b, Split sp, unsigned sa, unsigned sb, F f) {
  constexpr size_t n = 16 / sizeof(T);
  constexpr int U = kUnroll;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nth = static_cast<size_t>(gridDim.x) * blockDim.x;
  const unsigned lane = threadIdx.x & 31;
  auto elem = [&](size_t i) {
    if constexpr (NS == 2) {
      dst[i] = f(a[i], b[i]);
    } else {
      dst[i] = f(a[i]);
    }
  };
  for (size_t i = tid; i < sp.head; i += nth) elem(i);
  const size_t tail = sp.head + sp.nvec * n;
  for (size_t i = tail + tid; i < sp.count; i += nth) elem(i);
  const Src qa = makeSrc(a + sp.head, sa);
  const Src qb = NS == 2 ? makeSrc(b + sp.head, sb) : qa;
  uint4 *vd = reinterpret_cast<uint4 *>(dst + sp.head);
  size_t rest;  // then vectors rest + tid, + nth, ... one by one
  if constexpr (Chunk) {
    constexpr size_t C = U * 32;
    const size_t chunks = sp.nvec / C;
    for (size_t c = tid / 32; c < chunks; c += nth / 32) {
      uint4 xa[U], xb[U];
      stepChunk<U>(xa, qa, c * C, lane);
      if constexpr (NS == 2) stepChunk<U>(xb, qb, c * C, lane);
#pragma unroll
      for (int u = 0; u < U; u++)
        vd[c * C + u * 32 + lane] = combine<T, NS>(xa[u], NS == 2 ? xb[u] : xa[u], f);
    }
    rest = chunks * C;
  } else {
    size_t i = tid;
    // The step's condition holds for the warp's last lane, hence for all.
    for (; i - lane + 31 + (U - 1) * nth < sp.nvec; i += U * nth) {
      uint4 xa[U], xb[U];
      stepStride<U>(xa, qa, i, nth);
      if constexpr (NS == 2) stepStride<U>(xb, qb, i, nth);
#pragma unroll
      for (int u = 0; u < U; u++)
        vd[i + u * nth] = combine<T, NS>(xa[u], NS == 2 ? xb[u] : xa[u], f);
    }
    rest = i - tid;  // this thread's vectors below i are done
  }
  for (size_t i = rest + tid; i < sp.nvec; i += nth) {
    uint4 x = loadOne(qa, i), y = x;
    if constexpr (NS == 2) y = loadOne(qb, i);
    vd[i] = combine<T, NS>(x, y, f);
  }
}

bool congruent(size_t w, size_t ts, const void *p0, const void *p1, const void *p2) {
  uintptr_t m = reinterpret_cast<uintptr_t>(p0) % w;
  return reinterpret_cast<uintptr_t>(p1) % w == m &&
         (!p2 || reinterpret_cast<uintptr_t>(p2) % w == m) && m % ts == 0;
}
bool elementAligned(size_t ts, const void *p) {
  return !p || reinterpret_cast<uintptr_t>(p) % ts == 0;
}

// These paths take element-aligned operands that differ modulo 16: `chunk`
// by default (`best`: 95.6-97.5 % of the copy rate on the H200 for every
// shift), the others when a benchmark asks.
bool takes(size_t ts, const void *p0, const void *p1, const void *p2) {
  if (g_misaligned != MisalignedPath::best && g_misaligned != MisalignedPath::shuffle4 &&
      g_misaligned != MisalignedPath::chunk && g_misaligned != MisalignedPath::chunkLine)
    return false;
  if (congruent(16, ts, p0, p1, p2)) return false;
  return elementAligned(ts, p0) && elementAligned(ts, p1) && elementAligned(ts, p2);
}

template <class T, int NS, class F>
cudaError_t launch(void *dst, const void *a, const void *b, size_t count, cudaStream_t s, int sm,
                   F f) {
  const size_t ts = sizeof(T), n = 16 / ts;
  const size_t align = g_misaligned == MisalignedPath::chunkLine ? 128 : 16;
  const uintptr_t m = reinterpret_cast<uintptr_t>(dst) % align;
  size_t head = std::min(count, ((align - m) % align) / ts);
  Split sp{head, (count - head) / n, count};
  auto shift = [&](const void *p) {
    return p ? static_cast<unsigned>((reinterpret_cast<uintptr_t>(p) + head * ts) % 16) : 0u;
  };
  size_t scalar = head + (count - head - sp.nvec * n);
  size_t work = std::max(sp.nvec, scalar);
  size_t cap = static_cast<size_t>(sm > 0 ? sm : 1) * kBlocks;
  unsigned grid = static_cast<unsigned>(
      std::max<size_t>(1, std::min(cap, (work + kThreads - 1) / kThreads)));
  T *d = static_cast<T *>(dst);
  const T *pa = static_cast<const T *>(a), *pb = static_cast<const T *>(b);
  if (g_misaligned == MisalignedPath::shuffle4) {
    variantKernel<T, NS, false, F><<<grid, kThreads, 0, s>>>(d, pa, pb, sp, shift(a), shift(b), f);
  } else {
    variantKernel<T, NS, true, F><<<grid, kThreads, 0, s>>>(d, pa, pb, sp, shift(a), shift(b), f);
  }
  return cudaGetLastError();
}

}  // namespace

bool launchMisalignedReduce(void *dst, const void *a, const void *b, size_t count,
                            flagcxDataType_t dtype, flagcxRedOp_t op, cudaStream_t s, int sm,
                            cudaError_t *err) {
  size_t ts = getFlagcxDataTypeSize(dtype);
  if (ts == 0 || !takes(ts, dst, a, b)) return false;
  *err = forReduce(dtype, op, [&](auto *tag, auto f) {
    return launch<std::remove_pointer_t<decltype(tag)>, 2>(dst, a, b, count, s, sm, f);
  });
  return true;
}

bool launchMisalignedDivide(void *dst, const void *src, size_t count, flagcxDataType_t dtype,
                            uint64_t divisor, cudaStream_t s, int sm, cudaError_t *err) {
  size_t ts = getFlagcxDataTypeSize(dtype);
  if (ts == 0 || !takes(ts, dst, src, nullptr)) return false;
  *err = forDivide(dtype, divisor, [&](auto *tag, auto f) {
    return launch<std::remove_pointer_t<decltype(tag)>, 1>(dst, src, nullptr, count, s, sm, f);
  });
  return true;
}

}  // namespace flagcx::cuda
