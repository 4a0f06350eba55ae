// Data types by their public enum: the name a log line or a tuning rule
// uses, and the size of one element.
#pragma once
#include <cstddef>

#include "flagcx.h"

namespace flagcx {

const char *dtypeName(flagcxDataType_t dt);  // "float32", ...; "?" when invalid
size_t dtypeSize(flagcxDataType_t dt);       // 0 when invalid

}  // namespace flagcx
