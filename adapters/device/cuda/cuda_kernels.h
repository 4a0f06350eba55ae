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

// dst[i] = src[i] / divisor with the host adapter's semantics (integers
// truncate toward zero; half and bfloat16 divide in float and round).
cudaError_t launchDivide(void *dst, const void *src, size_t count, flagcxDataType_t dtype,
                         uint64_t divisor, cudaStream_t stream, int smCount);

// dst[i] = src[i] as bytes; the same vectorized kernel shape, used by the
// benchmark as a copy-kernel baseline next to cudaMemcpyAsync.
// How operands without a common 16-byte offset are handled: `realign`
// (aligned 16-byte loads shifted in registers, the next vector taken from the
// neighbouring lane), `words` (the widest word width the operands share), or
// `best` (the default: words when they share an 8-byte offset, else realign).
// Only benchmarks and tests change it.
enum class MisalignedPath { best, realign, words };
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
