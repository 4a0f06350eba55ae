// Communicator entry points.
#include <cstring>

#include "api/checks.h"
#include "core/core.h"
#include "base/base.h"
#include "rendezvous/rendezvous.h"

using namespace flagcx;

extern "C" flagcxResult_t flagcxGetUniqueId(flagcxUniqueId_t uniqueId) {
  API_CHECK(checkPtr("flagcxGetUniqueId", "uniqueId", uniqueId));
  return makeUniqueId(uniqueId);
}

extern "C" flagcxResult_t flagcxCommInitRank(flagcxComm_t *comm, int nranks,
                                             flagcxUniqueId_t commId, int rank) {
  const char *fn = "flagcxCommInitRank";
  API_CHECK(checkPtr(fn, "comm", comm));
  *comm = nullptr;
  API_CHECK(checkPtr(fn, "commId", commId));
  if (nranks < 1)
    return argError(flagcxInvalidArgument, kInit, "%s: nranks %d must be >= 1", fn, nranks);
  if (rank < 0 || rank >= nranks)
    return argError(flagcxInvalidArgument, kInit, "%s: rank %d is out of range [0, %d)", fn, rank,
                    nranks);
  if (commGroupDepth() > 0)
    return argError(flagcxInvalidUsage, kInit, "%s: cannot be called inside a group", fn);
  flagcxComm *c = nullptr;
  flagcxResult_t r = commInit(&c, nranks, *commId, rank);
  if (r != flagcxSuccess) {
    INFO(kInit, "%s: rank %d of %d failed: %s", fn, rank, nranks, flagcxGetErrorString(r));
    return r;
  }
  *comm = c;
  return flagcxSuccess;
}

extern "C" flagcxResult_t flagcxCommFinalize(flagcxComm_t comm) {
  API_CHECK(checkComm("flagcxCommFinalize", comm));
  // Operations complete in stream order; finalize waits for the ones in flight.
  if (!commDrain(comm)) {
    WARN(kInit, "flagcxCommFinalize: rank %d: operations still in flight after FLAGCX_TIMEOUT",
         comm->rank);
    return flagcxSystemError;
  }
  return commAsyncError(comm);
}

extern "C" flagcxResult_t flagcxCommDestroy(flagcxComm_t comm) {
  API_CHECK(checkHandle("flagcxCommDestroy", comm));
  return commDestroy(comm, false);
}

extern "C" flagcxResult_t flagcxCommAbort(flagcxComm_t comm) {
  if (comm == nullptr) return flagcxSuccess;  // like NCCL: aborting nothing is fine
  if (!commIsLive(comm))
    return argError(flagcxInvalidArgument, kInit,
                    "flagcxCommAbort: comm is not a live communicator (destroyed or aborted?)");
  return commDestroy(comm, true);
}

extern "C" flagcxResult_t flagcxCommSuspend(flagcxComm_t comm) {
  API_CHECK(checkComm("flagcxCommSuspend", comm));
  WARN(kInit, "flagcxCommSuspend: not supported yet (see README, \"Not supported\")");
  return flagcxNotSupported;
}

extern "C" flagcxResult_t flagcxCommResume(flagcxComm_t comm) {
  API_CHECK(checkComm("flagcxCommResume", comm));
  WARN(kInit, "flagcxCommResume: not supported yet (see README, \"Not supported\")");
  return flagcxNotSupported;
}

extern "C" flagcxResult_t flagcxCommGetAsyncError(flagcxComm_t comm, flagcxResult_t *asyncError) {
  API_CHECK(checkHandle("flagcxCommGetAsyncError", comm));
  API_CHECK(checkPtr("flagcxCommGetAsyncError", "asyncError", asyncError));
  *asyncError = commAsyncError(comm);
  return flagcxSuccess;
}

extern "C" flagcxResult_t flagcxCommCount(const flagcxComm_t comm, int *count) {
  API_CHECK(checkHandle("flagcxCommCount", comm));
  API_CHECK(checkPtr("flagcxCommCount", "count", count));
  *count = comm->nranks;
  return flagcxSuccess;
}

extern "C" flagcxResult_t flagcxCommUserRank(const flagcxComm_t comm, int *rank) {
  API_CHECK(checkHandle("flagcxCommUserRank", comm));
  API_CHECK(checkPtr("flagcxCommUserRank", "rank", rank));
  *rank = comm->rank;
  return flagcxSuccess;
}

extern "C" flagcxResult_t flagcxCommGetDeviceNumber(const flagcxComm_t comm, int *device) {
  API_CHECK(checkComm("flagcxCommGetDeviceNumber", comm));
  API_CHECK(checkPtr("flagcxCommGetDeviceNumber", "device", device));
  *device = comm->deviceIndex;
  return flagcxSuccess;
}

extern "C" flagcxResult_t flagcxIsHomoComm(flagcxComm_t comm, int *isHomo) {
  API_CHECK(checkComm("flagcxIsHomoComm", comm));
  API_CHECK(checkPtr("flagcxIsHomoComm", "isHomo", isHomo));
  // Homogeneous means "served by a vendor CCL pass-through": the host device
  // has none, FLAGCX_USE_HETERO_COMM forces the engine, and NCCL refuses
  // ranks that share a GPU; makeVendorCcl decided all that.
  *isHomo = comm->ccl != nullptr;
  return flagcxSuccess;
}

extern "C" flagcxResult_t flagcxCommSetDeterministic(flagcxComm_t comm, int on) {
  API_CHECK(checkComm("flagcxCommSetDeterministic", comm));
  if (on != 0 && on != 1)
    return argError(flagcxInvalidArgument, kInit,
                    "flagcxCommSetDeterministic: on is %d; it must be 0 or 1", on);
  return commSetDeterministic(comm, on == 1);
}

extern "C" const char *flagcxGetLastError(flagcxComm_t comm) {
  if (comm && commIsLive(comm)) {
    std::string e = commAsyncErrorText(comm);
    std::lock_guard<std::mutex> lk(comm->mu);
    if (!e.empty()) {
      comm->lastError = std::move(e);  // kept: the caller reads it after we return
      return comm->lastError.c_str();
    }
  }
  return lastErrorText();
}
