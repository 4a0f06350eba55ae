// Stand-in for the header a CUDA build of torch generates: a CPU-only torch
// (Debian's) ships c10/cuda headers without it.  Used only by the
// torch-cuda-syntax test, which type-checks the plugin's CUDA paths.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
