// One element of a floating dtype (float32/64, half, bfloat16, the 8-bit
// floats) read as or written from a double, through the host kernels'
// scalar conversions (checked against the formats' definitions by
// tests/adapters/reduce_test and fp8_test).  For tests that build inputs
// and references element by element.
#pragma once
#include <cstdint>
#include <cstring>

#include "adapters/device/host/host_reduce_kernels.h"
#include "flagcx.h"

namespace testelems {

inline double widen(const uint8_t *p, flagcxDataType_t dt) {
  namespace rk = flagcx::reduce_kernels;
  uint16_t h;
  switch (dt) {
    case flagcxFloat32: { float f; memcpy(&f, p, 4); return f; }
    case flagcxFloat64: { double v; memcpy(&v, p, 8); return v; }
    case flagcxFloat16: memcpy(&h, p, 2); return rk::halfToFloat(h);
    case flagcxBfloat16: memcpy(&h, p, 2); return rk::bf16ToFloat(h);
    case flagcxFloat8e4m3: return rk::e4m3ToFloat(*p);
    default: return rk::e5m2ToFloat(*p);
  }
}

inline void narrow(double v, uint8_t *p, flagcxDataType_t dt) {
  namespace rk = flagcx::reduce_kernels;
  uint16_t h;
  switch (dt) {
    case flagcxFloat32: { float f = static_cast<float>(v); memcpy(p, &f, 4); return; }
    case flagcxFloat64: memcpy(p, &v, 8); return;
    case flagcxFloat16: h = rk::floatToHalf(static_cast<float>(v)); memcpy(p, &h, 2); return;
    case flagcxBfloat16: h = rk::floatToBf16(static_cast<float>(v)); memcpy(p, &h, 2); return;
    case flagcxFloat8e4m3: *p = rk::floatToE4m3(static_cast<float>(v)); return;
    default: *p = rk::floatToE5m2(static_cast<float>(v)); return;
  }
}

}  // namespace testelems
