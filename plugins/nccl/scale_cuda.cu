// PreMulSum's scaling kernel: dst[i] = scalar * src[i] on the caller's stream.
// Same arithmetic as scaleHost: integers wrap, half/bfloat16 in float.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstring>

namespace {

template <class T, class U>
__global__ void scaleKernel(T *dst, const T *src, size_t n, const T *dscalar, U hs) {
  U s = dscalar ? static_cast<U>(*dscalar) : hs;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = static_cast<T>(static_cast<U>(src[i]) * s);
}

template <class T>
__global__ void scale16Kernel(T *dst, const T *src, size_t n, const T *dscalar, float hs) {
  float s = dscalar ? static_cast<float>(*dscalar) : hs;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = T(static_cast<float>(src[i]) * s);
}

unsigned blocksFor(size_t n) {
  size_t b = (n + 511) / 512;
  return static_cast<unsigned>(b > 1024 ? 1024 : (b ? b : 1));
}

template <class T, class U>
int launch(void *dst, const void *src, size_t n, const void *scalar, int onDev, cudaStream_t s) {
  U hs{};
  if (!onDev) {
    T v;
    memcpy(&v, scalar, sizeof(T));
    hs = static_cast<U>(v);
  }
  scaleKernel<T, U><<<blocksFor(n), 512, 0, s>>>(static_cast<T *>(dst), static_cast<const T *>(src),
                                                  n, onDev ? static_cast<const T *>(scalar) : nullptr, hs);
  return static_cast<int>(cudaGetLastError());
}

template <class T>
int launch16(void *dst, const void *src, size_t n, const void *scalar, int onDev, cudaStream_t s) {
  float hs = 0.f;
  if (!onDev) {
    T v;
    memcpy(&v, scalar, sizeof(T));
    hs = static_cast<float>(v);
  }
  scale16Kernel<T><<<blocksFor(n), 512, 0, s>>>(static_cast<T *>(dst), static_cast<const T *>(src),
                                                 n, onDev ? static_cast<const T *>(scalar) : nullptr, hs);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" __attribute__((visibility("hidden"))) int ncclxScaleCuda(
    void *dst, const void *src, size_t n, int t, const void *scalar, int onDev, cudaStream_t s) {
  switch (t) {
    case ncclInt8: return launch<int8_t, uint8_t>(dst, src, n, scalar, onDev, s);
    case ncclUint8: return launch<uint8_t, uint8_t>(dst, src, n, scalar, onDev, s);
    case ncclInt32: return launch<int32_t, uint32_t>(dst, src, n, scalar, onDev, s);
    case ncclUint32: return launch<uint32_t, uint32_t>(dst, src, n, scalar, onDev, s);
    case ncclInt64: return launch<int64_t, uint64_t>(dst, src, n, scalar, onDev, s);
    case ncclUint64: return launch<uint64_t, uint64_t>(dst, src, n, scalar, onDev, s);
    case ncclFloat16: return launch16<__half>(dst, src, n, scalar, onDev, s);
    case ncclFloat32: return launch<float, float>(dst, src, n, scalar, onDev, s);
    case ncclFloat64: return launch<double, double>(dst, src, n, scalar, onDev, s);
    case ncclBfloat16: return launch16<__nv_bfloat16>(dst, src, n, scalar, onDev, s);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}
