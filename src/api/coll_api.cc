// Collective entry points: validate, then hand to the engine.
#include "api/checks.h"
#include "core/core.h"

using namespace flagcx;

namespace {

flagcxResult_t common(const char *fn, flagcxComm *comm, flagcxDataType_t dt) {
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkDtype(fn, dt));
  return flagcxSuccess;
}

flagcxResult_t run(flagcxComm *comm, OpKind op, const void *s, void *r, size_t count,
                   flagcxDataType_t dt, flagcxRedOp_t redop, int root, flagcxStream_t stream) {
  CollArgs a{op, s, r, count, dt, redop, root, nullptr, nullptr, nullptr, nullptr};
  return commColl(comm, a, stream);
}

}  // namespace

extern "C" flagcxResult_t flagcxBarrier(flagcxComm_t comm, flagcxStream_t stream) {
  API_CHECK(checkComm("flagcxBarrier", comm));
  return run(comm, OpKind::Barrier, nullptr, nullptr, 0, flagcxUint8, flagcxSum, 0, stream);
}

extern "C" flagcxResult_t flagcxAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                          flagcxDataType_t dt, flagcxRedOp_t op,
                                          flagcxComm_t comm, flagcxStream_t stream) {
  const char *fn = "flagcxAllReduce";
  API_CHECK(common(fn, comm, dt));
  API_CHECK(checkRedOp(fn, op));
  API_CHECK(checkBytes(fn, "count", count, dt, 1, nullptr));
  if (count) {
    API_CHECK(checkPtr(fn, "sendbuff", sendbuff));
    API_CHECK(checkPtr(fn, "recvbuff", recvbuff));
  }
  return run(comm, OpKind::AllReduce, sendbuff, recvbuff, count, dt, op, 0, stream);
}

extern "C" flagcxResult_t flagcxReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       flagcxDataType_t dt, flagcxRedOp_t op, int root,
                                       flagcxComm_t comm, flagcxStream_t stream) {
  const char *fn = "flagcxReduce";
  API_CHECK(common(fn, comm, dt));
  API_CHECK(checkRedOp(fn, op));
  API_CHECK(checkRank(fn, "root", root, comm));
  API_CHECK(checkBytes(fn, "count", count, dt, 1, nullptr));
  if (count) {
    API_CHECK(checkPtr(fn, "sendbuff", sendbuff));
    if (comm->rank == root) API_CHECK(checkPtr(fn, "recvbuff (at the root)", recvbuff));
  }
  return run(comm, OpKind::Reduce, sendbuff, recvbuff, count, dt, op, root, stream);
}

extern "C" flagcxResult_t flagcxBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                          flagcxDataType_t dt, int root, flagcxComm_t comm,
                                          flagcxStream_t stream) {
  const char *fn = "flagcxBroadcast";
  API_CHECK(common(fn, comm, dt));
  API_CHECK(checkRank(fn, "root", root, comm));
  API_CHECK(checkBytes(fn, "count", count, dt, 1, nullptr));
  if (count) {
    if (comm->rank == root) API_CHECK(checkPtr(fn, "sendbuff (at the root)", sendbuff));
    API_CHECK(checkPtr(fn, "recvbuff", recvbuff));
  }
  return run(comm, OpKind::Broadcast, sendbuff, recvbuff, count, dt, flagcxSum, root, stream);
}

extern "C" flagcxResult_t flagcxAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                          flagcxDataType_t dt, flagcxComm_t comm,
                                          flagcxStream_t stream) {
  const char *fn = "flagcxAllGather";
  API_CHECK(common(fn, comm, dt));
  API_CHECK(checkBytes(fn, "sendcount", sendcount, dt, static_cast<size_t>(comm->nranks), nullptr));
  if (sendcount) {
    API_CHECK(checkPtr(fn, "sendbuff", sendbuff));
    API_CHECK(checkPtr(fn, "recvbuff", recvbuff));
  }
  return run(comm, OpKind::AllGather, sendbuff, recvbuff, sendcount, dt, flagcxSum, 0, stream);
}

extern "C" flagcxResult_t flagcxGather(const void *sendbuff, void *recvbuff, size_t count,
                                       flagcxDataType_t dt, int root, flagcxComm_t comm,
                                       flagcxStream_t stream) {
  const char *fn = "flagcxGather";
  API_CHECK(common(fn, comm, dt));
  API_CHECK(checkRank(fn, "root", root, comm));
  API_CHECK(checkBytes(fn, "count", count, dt, static_cast<size_t>(comm->nranks), nullptr));
  if (count) {
    API_CHECK(checkPtr(fn, "sendbuff", sendbuff));
    if (comm->rank == root) API_CHECK(checkPtr(fn, "recvbuff (at the root)", recvbuff));
  }
  return run(comm, OpKind::Gather, sendbuff, recvbuff, count, dt, flagcxSum, root, stream);
}

extern "C" flagcxResult_t flagcxScatter(const void *sendbuff, void *recvbuff, size_t count,
                                        flagcxDataType_t dt, int root, flagcxComm_t comm,
                                        flagcxStream_t stream) {
  const char *fn = "flagcxScatter";
  API_CHECK(common(fn, comm, dt));
  API_CHECK(checkRank(fn, "root", root, comm));
  API_CHECK(checkBytes(fn, "count", count, dt, static_cast<size_t>(comm->nranks), nullptr));
  if (count) {
    if (comm->rank == root) API_CHECK(checkPtr(fn, "sendbuff (at the root)", sendbuff));
    API_CHECK(checkPtr(fn, "recvbuff", recvbuff));
  }
  return run(comm, OpKind::Scatter, sendbuff, recvbuff, count, dt, flagcxSum, root, stream);
}

extern "C" flagcxResult_t flagcxReduceScatter(const void *sendbuff, void *recvbuff,
                                              size_t recvcount, flagcxDataType_t dt,
                                              flagcxRedOp_t op, flagcxComm_t comm,
                                              flagcxStream_t stream) {
  const char *fn = "flagcxReduceScatter";
  API_CHECK(common(fn, comm, dt));
  API_CHECK(checkRedOp(fn, op));
  API_CHECK(checkBytes(fn, "recvcount", recvcount, dt, static_cast<size_t>(comm->nranks), nullptr));
  if (recvcount) {
    API_CHECK(checkPtr(fn, "sendbuff", sendbuff));
    API_CHECK(checkPtr(fn, "recvbuff", recvbuff));
  }
  return run(comm, OpKind::ReduceScatter, sendbuff, recvbuff, recvcount, dt, op, 0, stream);
}

extern "C" flagcxResult_t flagcxAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                         flagcxDataType_t dt, flagcxComm_t comm,
                                         flagcxStream_t stream) {
  const char *fn = "flagcxAlltoAll";
  API_CHECK(common(fn, comm, dt));
  API_CHECK(checkBytes(fn, "count", count, dt, static_cast<size_t>(comm->nranks), nullptr));
  if (count) {
    API_CHECK(checkPtr(fn, "sendbuff", sendbuff));
    API_CHECK(checkPtr(fn, "recvbuff", recvbuff));
  }
  return run(comm, OpKind::AlltoAll, sendbuff, recvbuff, count, dt, flagcxSum, 0, stream);
}

extern "C" flagcxResult_t flagcxAlltoAllv(const void *sendbuff, size_t *sendcounts,
                                          size_t *sdispls, void *recvbuff, size_t *recvcounts,
                                          size_t *rdispls, flagcxDataType_t dt,
                                          flagcxComm_t comm, flagcxStream_t stream) {
  const char *fn = "flagcxAlltoAllv";
  API_CHECK(common(fn, comm, dt));
  API_CHECK(checkPtr(fn, "sendcounts", sendcounts));
  API_CHECK(checkPtr(fn, "sdispls", sdispls));
  API_CHECK(checkPtr(fn, "recvcounts", recvcounts));
  API_CHECK(checkPtr(fn, "rdispls", rdispls));
  size_t sendTotal = 0, recvTotal = 0;
  for (int p = 0; p < comm->nranks; p++) {
    API_CHECK(checkBytes(fn, "sendcounts[p]+sdispls[p]", sendcounts[p] + sdispls[p], dt, 1, nullptr));
    API_CHECK(checkBytes(fn, "recvcounts[p]+rdispls[p]", recvcounts[p] + rdispls[p], dt, 1, nullptr));
    if (sendcounts[p] + sdispls[p] < sdispls[p] || recvcounts[p] + rdispls[p] < rdispls[p])
      return argError(flagcxInvalidArgument, kColl, "%s: counts/displacements for peer %d overflow", fn, p);
    sendTotal += sendcounts[p];
    recvTotal += recvcounts[p];
  }
  if (sendTotal) API_CHECK(checkPtr(fn, "sendbuff", sendbuff));
  if (recvTotal) API_CHECK(checkPtr(fn, "recvbuff", recvbuff));
  CollArgs a{OpKind::AlltoAllv, sendbuff, recvbuff, sendTotal, dt, flagcxSum, 0,
             sendcounts, sdispls, recvcounts, rdispls};
  return commColl(comm, a, stream);
}
