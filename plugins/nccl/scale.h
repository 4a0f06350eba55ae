// PreMulSum's local step: dst[i] = scalar * src[i], in stream order.
#pragma once
#include "dropin.h"

namespace ncclx {

// Host memory (the host adapter): waits for `fs`, then scales on the CPU.
// CUDA: a kernel on `stream` (when the drop-in was built with nvcc).
ncclResult_t scaleInto(const char *fn, void *dst, const void *src, size_t count, ncclDataType_t t,
                       const PreMul &pm, cudaStream_t stream, flagcxStream_t fs);

// The CPU loop itself (also what the unit tests check the kernel against).
void scaleHost(void *dst, const void *src, size_t count, ncclDataType_t t, const void *scalar);

}  // namespace ncclx

// scale_cuda.cu: 0 on success, else a cudaError_t.  `scalar` is a device
// pointer when scalarOnDevice, else a host pointer read at once.
extern "C" int ncclxScaleCuda(void *dst, const void *src, size_t count, int ncclType,
                              const void *scalar, int scalarOnDevice, cudaStream_t stream);
