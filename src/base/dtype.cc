// Data type names and element sizes (dtype.h).
#include "base/dtype.h"

namespace flagcx {

const char *dtypeName(flagcxDataType_t dt) {
  static const char *names[] = {"int8",    "uint8",   "int32",   "uint32",  "int64",
                                "uint64",  "float16", "float32", "float64", "bfloat16",
                                "float8e4m3", "float8e5m2"};
  static_assert(sizeof(names) / sizeof(names[0]) == flagcxNumTypes, "one name per dtype");
  int i = static_cast<int>(dt);
  return i >= 0 && i < flagcxNumTypes ? names[i] : "?";
}

size_t dtypeSize(flagcxDataType_t dt) {
  switch (dt) {
    case flagcxInt8:
    case flagcxUint8:
    case flagcxFloat8e4m3:
    case flagcxFloat8e5m2: return 1;
    case flagcxFloat16:
    case flagcxBfloat16: return 2;
    case flagcxInt32:
    case flagcxUint32:
    case flagcxFloat32: return 4;
    case flagcxInt64:
    case flagcxUint64:
    case flagcxFloat64: return 8;
    default: return 0;
  }
}

bool dtypeIsFloat(flagcxDataType_t dt) {
  switch (dt) {
    case flagcxFloat16:
    case flagcxBfloat16:
    case flagcxFloat32:
    case flagcxFloat64:
    case flagcxFloat8e4m3:
    case flagcxFloat8e5m2: return true;
    default: return false;
  }
}

}  // namespace flagcx
