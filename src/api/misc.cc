// Small library-wide queries: version, dtype sizes, result strings.
#include "base/base.h"
#include "flagcx.h"

extern "C" size_t getFlagcxDataTypeSize(flagcxDataType_t dtype) {
  return flagcx::dtypeSize(dtype);  // 0: invalid, callers treat it as "unknown datatype"
}

extern "C" flagcxResult_t flagcxGetVersion(int *version) {
  if (!version)
    return flagcx::argError(flagcxInvalidArgument, flagcx::kInit, "flagcxGetVersion: version is NULL");
  *version = FLAGCX_VERSION_CODE;
  return flagcxSuccess;
}

extern "C" const char *flagcxGetErrorString(flagcxResult_t result) {
  switch (result) {
    case flagcxSuccess: return "no error";
    case flagcxUnhandledDeviceError: return "unhandled device error";
    case flagcxSystemError: return "unhandled system error (network, memory, or OS call failed)";
    case flagcxInternalError: return "internal error (a bug in flagcx)";
    case flagcxInvalidArgument: return "invalid argument";
    case flagcxInvalidUsage: return "invalid usage";
    case flagcxRemoteError: return "a peer failed, exited or did not answer in time (flagcxGetLastError names it)";
    case flagcxInProgress: return "operation in progress";
    case flagcxUnhandledCCLError: return "unhandled error from the vendor collective library";
    case flagcxNotSupported: return "not supported";
    default: return "unknown result";
  }
}
