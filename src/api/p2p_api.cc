// Point-to-point and group entry points.
#include "api/checks.h"
#include "core/core.h"

using namespace flagcx;

static flagcxResult_t p2p(const char *fn, bool isSend, const void *buf, size_t count,
                          flagcxDataType_t dt, int peer, flagcxComm *comm, flagcxStream_t stream) {
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkDtype(fn, dt));
  API_CHECK(checkRank(fn, "peer", peer, comm));
  size_t bytes = 0;
  API_CHECK(checkBytes(fn, "count", count, dt, 1, &bytes));
  if (count) API_CHECK(checkPtr(fn, isSend ? "sendbuff" : "recvbuff", buf));
  if (peer == comm->rank && commGroupDepth() == 0)
    return argError(flagcxInvalidUsage, kP2P,
                    "%s: peer %d is this rank; a send or receive to oneself must be inside "
                    "flagcxGroupStart/End with its matching call", fn, peer);
  return commP2P(comm, isSend, const_cast<void *>(buf), bytes, peer, stream);
}

extern "C" flagcxResult_t flagcxSend(const void *sendbuff, size_t count, flagcxDataType_t dt,
                                     int peer, flagcxComm_t comm, flagcxStream_t stream) {
  return p2p("flagcxSend", true, sendbuff, count, dt, peer, comm, stream);
}

extern "C" flagcxResult_t flagcxRecv(void *recvbuff, size_t count, flagcxDataType_t dt, int peer,
                                     flagcxComm_t comm, flagcxStream_t stream) {
  return p2p("flagcxRecv", false, recvbuff, count, dt, peer, comm, stream);
}

extern "C" flagcxResult_t flagcxGroupStart(flagcxComm_t comm) {
  if (comm) API_CHECK(checkComm("flagcxGroupStart", comm));
  return commGroupStart();
}

extern "C" flagcxResult_t flagcxGroupEnd(flagcxComm_t comm) {
  if (comm) API_CHECK(checkComm("flagcxGroupEnd", comm));
  if (commGroupDepth() == 0)
    return argError(flagcxInvalidUsage, kP2P, "flagcxGroupEnd: no group is open");
  return commGroupEnd();
}
