// Argument checks shared by the C entry points: each failure is one log line
// naming the function and the argument, and the result the API promises.
#pragma once
#include <cstdint>

#include "core/core.h"
#include "base/base.h"
#include "flagcx.h"

#define API_CHECK(x)                    \
  do {                                  \
    flagcxResult_t _r = (x);            \
    if (_r != flagcxSuccess) return _r; \
  } while (0)

namespace flagcx {

// A live communicator, whatever its state (destroy, abort, shrink, revoke
// and the queries take a failed or revoked one).
inline flagcxResult_t checkHandle(const char *fn, const flagcxComm *comm) {
  if (comm == nullptr) return argError(flagcxInvalidArgument, kInit, "%s: comm is NULL", fn);
  if (!commIsLive(comm))
    return argError(flagcxInvalidArgument, kInit,
                    "%s: comm is not a live communicator (destroyed or aborted?)", fn);
  return flagcxSuccess;
}

// A communicator that may take operations.
inline flagcxResult_t checkComm(const char *fn, const flagcxComm *comm) {
  API_CHECK(checkHandle(fn, comm));
  if (comm->revoked.load(std::memory_order_relaxed))
    return argError(flagcxInvalidUsage, kInit, "%s: comm was revoked (flagcxCommRevoke); "
                    "destroy, abort or shrink it", fn);
  if (comm->exec->asyncError() != flagcxSuccess && comm->exec->aborting())
    return argError(flagcxInvalidUsage, kInit, "%s: comm was aborted", fn);
  return flagcxSuccess;
}

inline flagcxResult_t checkPtr(const char *fn, const char *name, const void *p) {
  if (p == nullptr) return argError(flagcxInvalidArgument, kInit, "%s: %s is NULL", fn, name);
  return flagcxSuccess;
}

inline flagcxResult_t checkDtype(const char *fn, flagcxDataType_t dt) {
  if (static_cast<int>(dt) < 0 || static_cast<int>(dt) >= flagcxNumTypes)
    return argError(flagcxInvalidArgument, kColl, "%s: datatype %d is not a flagcxDataType_t", fn,
                    static_cast<int>(dt));
  return flagcxSuccess;
}

inline flagcxResult_t checkRedOp(const char *fn, flagcxRedOp_t op) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= flagcxNumRedOps)
    return argError(flagcxInvalidArgument, kColl, "%s: op %d is not a reduction operation", fn,
                    static_cast<int>(op));
  return flagcxSuccess;
}

inline flagcxResult_t checkRank(const char *fn, const char *name, int r, const flagcxComm *c) {
  if (r < 0 || r >= c->nranks)
    return argError(flagcxInvalidArgument, kColl, "%s: %s %d is out of range [0, %d)", fn, name, r,
                    c->nranks);
  return flagcxSuccess;
}

// count * typeSize * factor must fit in size_t (and in a signed 63-bit range).
inline flagcxResult_t checkBytes(const char *fn, const char *name, size_t count,
                                 flagcxDataType_t dt, size_t factor, size_t *bytes) {
  size_t ts = getFlagcxDataTypeSize(dt);
  unsigned __int128 b = static_cast<unsigned __int128>(count) * ts * factor;
  if (b > static_cast<unsigned __int128>(INT64_MAX))
    return argError(flagcxInvalidArgument, kColl,
                    "%s: %s %zu elements of %zu bytes (x%zu) overflows the addressable size", fn,
                    name, count, ts, factor);
  if (bytes) *bytes = static_cast<size_t>(b);
  return flagcxSuccess;
}

}  // namespace flagcx

