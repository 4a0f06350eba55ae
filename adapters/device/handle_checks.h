// Argument checks of the flagcxDeviceHandle table that do not depend on the
// device: every adapter's entry points call these, so that a bad argument
// draws the same result and the same log line whichever device runs.
#pragma once
#include "base/base.h"
#include "flagcx.h"

namespace flagcx {

// `fn: name is NULL`.
inline flagcxResult_t checkOutArg(const char *fn, const char *name, const void *p) {
  if (p) return flagcxSuccess;
  return argError(flagcxInvalidArgument, kInit, "%s: %s is NULL", fn, name);
}

inline flagcxResult_t checkMemcpyArgs(const void *dst, const void *src, size_t size,
                                      flagcxMemcpyType_t type) {
  if (size && (!dst || !src))
    return argError(flagcxInvalidArgument, kInit, "deviceMemcpy: %s is NULL", dst ? "src" : "dst");
  if (type != flagcxMemcpyHostToDevice && type != flagcxMemcpyDeviceToHost &&
      type != flagcxMemcpyDeviceToDevice)
    return argError(flagcxInvalidArgument, kInit, "deviceMemcpy: invalid copy type %d",
                    static_cast<int>(type));
  return flagcxSuccess;
}

inline flagcxResult_t checkMemsetArgs(const void *ptr, size_t size) {
  if (size && !ptr) return argError(flagcxInvalidArgument, kInit, "deviceMemset: ptr is NULL");
  return flagcxSuccess;
}

inline flagcxResult_t checkEventCreateArgs(const flagcxEvent_t *event, flagcxEventType_t type) {
  if (!event) return argError(flagcxInvalidArgument, kInit, "eventCreate: event is NULL");
  if (type != flagcxEventDefault && type != flagcxEventDisableTiming)
    return argError(flagcxInvalidArgument, kInit, "eventCreate: invalid event type %d",
                    static_cast<int>(type));
  return flagcxSuccess;
}

inline flagcxResult_t checkElapsedArgs(const float *ms, flagcxEvent_t start, flagcxEvent_t end) {
  if (!ms) return argError(flagcxInvalidArgument, kInit, "eventElapsedTime: ms is NULL");
  if (!start || !end)
    return argError(flagcxInvalidArgument, kInit, "eventElapsedTime: %s event is NULL",
                    start ? "end" : "start");
  return flagcxSuccess;
}

// The adapters' own reduce/divide: a dtype and an op the kernels know.
inline flagcxResult_t checkReduceArgs(const char *fn, flagcxDataType_t dtype, flagcxRedOp_t op) {
  if (static_cast<unsigned>(dtype) >= flagcxNumTypes)
    return argError(flagcxInvalidArgument, kColl, "%s: invalid datatype %d", fn, static_cast<int>(dtype));
  if (static_cast<unsigned>(op) >= flagcxRedNoOp)
    return argError(flagcxInvalidArgument, kColl, "%s: invalid reduction op %d", fn, static_cast<int>(op));
  return flagcxSuccess;
}

}  // namespace flagcx
