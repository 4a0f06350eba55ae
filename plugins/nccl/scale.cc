// PreMulSum's local step (scale.h): the host loops for every type (16-bit
// floats through float) and scaleInto, which picks them or the CUDA kernel.
#include "scale.h"

#include "exports.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ncclx {

namespace {

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while (!(man & 0x400u));
      bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToHalf(float f) {  // round to nearest even
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (ax < 0x38800000u) {  // subnormal or zero in half
    float a;
    memcpy(&a, &ax, 4);
    uint32_t m = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));  // a / 2^-24
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant = ax & 0x7fffffu, exp = (ax >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return static_cast<uint16_t>(sign | h);
}

float bf16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

template <class T, class U = T>
void scaleAs(void *dst, const void *src, size_t n, const void *scalar) {
  // Integers multiply in the unsigned type (wrap-around, no UB).
  U s;
  memcpy(&s, scalar, sizeof(T));
  const T *in = static_cast<const T *>(src);
  T *out = static_cast<T *>(dst);
  for (size_t i = 0; i < n; i++) out[i] = static_cast<T>(static_cast<U>(in[i]) * s);
}

template <float (*toF)(uint16_t), uint16_t (*fromF)(float)>
void scale16(void *dst, const void *src, size_t n, const void *scalar) {
  uint16_t sb;
  memcpy(&sb, scalar, 2);
  float s = toF(sb);
  const uint16_t *in = static_cast<const uint16_t *>(src);
  uint16_t *out = static_cast<uint16_t *>(dst);
  for (size_t i = 0; i < n; i++) out[i] = fromF(toF(in[i]) * s);
}

}  // namespace

void scaleHost(void *dst, const void *src, size_t n, ncclDataType_t t, const void *scalar) {
  switch (t) {
    case ncclInt8: scaleAs<int8_t, uint8_t>(dst, src, n, scalar); break;
    case ncclUint8: scaleAs<uint8_t>(dst, src, n, scalar); break;
    case ncclInt32: scaleAs<int32_t, uint32_t>(dst, src, n, scalar); break;
    case ncclUint32: scaleAs<uint32_t>(dst, src, n, scalar); break;
    case ncclInt64: scaleAs<int64_t, uint64_t>(dst, src, n, scalar); break;
    case ncclUint64: scaleAs<uint64_t>(dst, src, n, scalar); break;
    case ncclFloat16: scale16<halfToFloat, floatToHalf>(dst, src, n, scalar); break;
    case ncclFloat32: scaleAs<float>(dst, src, n, scalar); break;
    case ncclFloat64: scaleAs<double>(dst, src, n, scalar); break;
    case ncclBfloat16: scale16<bf16ToFloat, floatToBf16>(dst, src, n, scalar); break;
    default: break;  // callers map the type first
  }
}

ncclResult_t scaleInto(const char *fn, void *dst, const void *src, size_t count, ncclDataType_t t,
                       const PreMul &pm, cudaStream_t stream, flagcxStream_t fs) {
  if (hostAdapter()) {
    // Host "streams" run in order on a worker: wait for the inputs, then scale.
    if (fs && device()->streamSynchronize(fs) != flagcxSuccess)
      return fail(ncclUnhandledCudaError, fn, "stream failed before the PreMulSum scaling");
    scaleHost(dst, src, count, t, pm.residence == ncclScalarDevice ? pm.ptr : pm.value);
    return ncclSuccess;
  }
#ifdef NCCLX_HAVE_CUDA_SCALE
  int e = ncclxScaleCuda(dst, src, count, static_cast<int>(t),
                         pm.residence == ncclScalarDevice ? pm.ptr : pm.value,
                         pm.residence == ncclScalarDevice, stream);
  if (e != 0) return fail(ncclUnhandledCudaError, fn, "PreMulSum scaling kernel: CUDA error %d", e);
  return ncclSuccess;
#else
  (void)stream;
  return fail(ncclInvalidUsage, fn,
              "PreMulSum on device buffers needs the drop-in's scaling kernel (built with nvcc)");
#endif
}

}  // namespace ncclx
