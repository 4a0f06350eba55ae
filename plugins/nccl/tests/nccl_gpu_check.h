// Check macros of the drop-in's GPU programs (same_process_gpu.cc,
// same_process_bench.cc): print the failing call and leave main with 1.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>

#define CK(x)                                                                         \
  do {                                                                                \
    ncclResult_t r_ = (x);                                                            \
    if (r_ != ncclSuccess) {                                                          \
      printf("FAIL %s -> %s (%s)\n", #x, ncclGetErrorString(r_), ncclGetLastError(nullptr)); \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)
#define CU(x)                                                            \
  do {                                                                   \
    cudaError_t e_ = (x);                                                \
    if (e_ != cudaSuccess) {                                             \
      printf("FAIL %s -> %s\n", #x, cudaGetErrorString(e_));             \
      return 1;                                                          \
    }                                                                    \
  } while (0)
