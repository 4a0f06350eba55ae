// Data types by their public enum: the name a log line or a tuning rule
// uses, and the size of one element.
#pragma once
#include <cstddef>

#include "flagcx.h"

namespace flagcx {

const char *dtypeName(flagcxDataType_t dt);  // "float32", ...; "?" when invalid
size_t dtypeSize(flagcxDataType_t dt);       // 0 when invalid
// float16, bfloat16, float32, float64 and the 8-bit floats: the types whose
// sums depend on their order.
bool dtypeIsFloat(flagcxDataType_t dt);
// flagcxFloat8e4m3 and flagcxFloat8e5m2.
inline bool dtypeIsFloat8(flagcxDataType_t dt) {
  return dt == flagcxFloat8e4m3 || dt == flagcxFloat8e5m2;
}

}  // namespace flagcx
