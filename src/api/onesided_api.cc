// One-sided entry points (FlagCX v0.13): windows and regions.  Every check
// names the argument and the bound it broke; then src/core/onesided does it.
#include <cstdio>

#include "api/checks.h"
#include "core/core.h"

using namespace flagcx;

namespace {

flagcxResult_t checkAlloc(const char *fn, flagcxMemAllocator_t a) {
  if (a != flagcxMemCCL && a != flagcxMemSHMEM)
    return argError(flagcxInvalidArgument, kAlloc, "%s: allocator %d is not a flagcxMemAllocator_t",
                    fn, static_cast<int>(a));
  return flagcxSuccess;
}

// The communicator's one-sided state, made by the first registration.
flagcxResult_t state(const char *fn, flagcxComm *comm, bool create, OneSided **os) {
  std::lock_guard<std::mutex> g(comm->osMu);
  if (!comm->os && create) FLAGCX_CHECK(OneSided::ensure(comm));
  if (!comm->os)
    return argError(flagcxInvalidArgument, kP2P, "%s: nothing is registered for one-sided "
                    "operations on this communicator (flagcxCommWindowRegister, "
                    "flagcxOneSideRegister)", fn);
  *os = comm->os.get();
  return flagcxSuccess;
}

// off + len within a region of `size` bytes.
flagcxResult_t checkRange(const char *fn, const char *offName, size_t off, size_t len,
                          uint64_t size, const char *what, int owner, int idx) {
  if (off > size || len > size - off) {
    char which[32] = "";
    if (idx >= 0) snprintf(which, sizeof which, " %d", idx);
    return argError(flagcxInvalidArgument, kP2P, "%s: %s %zu + %zu bytes is past the end of rank "
                    "%d's %s%s (%llu bytes)", fn, offName, off, len, owner, what, which,
                    static_cast<unsigned long long>(size));
  }
  return flagcxSuccess;
}

flagcxResult_t checkIdx(const char *fn, const char *name, int idx, OneSided *os) {
  int n = os->regions();
  if (idx < 0 || idx >= n)
    return argError(flagcxInvalidArgument, kP2P, "%s: %s %d is not a registered region (%d "
                    "registered with flagcxOneSideRegister)", fn, name, idx, n);
  return flagcxSuccess;
}

flagcxResult_t checkWindow(const char *fn, flagcxWindow_t win, OneSided *os) {
  if (win == nullptr) return argError(flagcxInvalidArgument, kP2P, "%s: window is NULL", fn);
  if (!os->isWindow(win))
    return argError(flagcxInvalidArgument, kP2P, "%s: window %p is not a registered window of "
                    "this communicator", fn, static_cast<void *>(win));
  return flagcxSuccess;
}

}  // namespace

extern "C" flagcxResult_t flagcxCommWindowRegister(flagcxComm_t comm, void *buff, size_t size,
                                                   flagcxWindow_t *win, int winFlags,
                                                   flagcxMemAllocator_t allocator) {
  const char *fn = "flagcxCommWindowRegister";
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkPtr(fn, "buff", buff));
  API_CHECK(checkPtr(fn, "win", win));
  API_CHECK(checkAlloc(fn, allocator));
  if (size == 0) return argError(flagcxInvalidArgument, kP2P, "%s: size is 0", fn);
  // Only FLAGCX_WIN_COLL_SYMMETRIC means something; other bits (NCCL's
  // drop-in passes its own) are ignored, as long as every rank agrees.
  *win = nullptr;
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, true, &os));
  return os->windowRegister(buff, size, winFlags, win);
}

extern "C" flagcxResult_t flagcxCommWindowDeregister(flagcxComm_t comm, flagcxWindow_t win,
                                                     flagcxMemAllocator_t allocator) {
  const char *fn = "flagcxCommWindowDeregister";
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkAlloc(fn, allocator));
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, false, &os));
  API_CHECK(checkWindow(fn, win, os));
  return os->windowDeregister(win);
}

extern "C" flagcxResult_t flagcxOneSideRegister(const flagcxComm_t comm, void *buff, size_t size) {
  const char *fn = "flagcxOneSideRegister";
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkPtr(fn, "buff", buff));
  if (size == 0) return argError(flagcxInvalidArgument, kP2P, "%s: size is 0", fn);
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, true, &os));
  return os->regionRegister(buff, size);
}

extern "C" flagcxResult_t flagcxOneSideSignalRegister(const flagcxComm_t comm, void *buff,
                                                      size_t size, int ptrType) {
  const char *fn = "flagcxOneSideSignalRegister";
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkPtr(fn, "buff", buff));
  if (size < sizeof(uint64_t))
    return argError(flagcxInvalidArgument, kP2P, "%s: size %zu is below one 8-byte signal", fn,
                    size);
  if (ptrType != FLAGCX_PTR_HOST && ptrType != FLAGCX_PTR_CUDA && ptrType != FLAGCX_PTR_DMABUF)
    return argError(flagcxInvalidArgument, kP2P, "%s: ptrType %d is none of FLAGCX_PTR_HOST, "
                    "FLAGCX_PTR_CUDA, FLAGCX_PTR_DMABUF", fn, ptrType);
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, true, &os));
  return os->signalRegister(buff, size, ptrType);
}

extern "C" flagcxResult_t flagcxOneSideStagingRegister(const flagcxComm_t comm, void *buff,
                                                       size_t size) {
  const char *fn = "flagcxOneSideStagingRegister";
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkPtr(fn, "buff", buff));
  if (size < sizeof(uint64_t))
    return argError(flagcxInvalidArgument, kP2P, "%s: size %zu is below the 8 bytes of one value",
                    fn, size);
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, true, &os));
  return os->stagingRegister(buff, size);
}

extern "C" flagcxResult_t flagcxOneSideStagingDeregister(const flagcxComm_t comm) {
  const char *fn = "flagcxOneSideStagingDeregister";
  API_CHECK(checkComm(fn, comm));
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, false, &os));
  return os->stagingDeregister();
}

extern "C" flagcxResult_t flagcxGet(flagcxComm_t comm, int peer, size_t srcOffset,
                                    size_t dstOffset, size_t size, int srcMrIdx, int dstMrIdx) {
  const char *fn = "flagcxGet";
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkRank(fn, "peer", peer, comm));
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, false, &os));
  API_CHECK(checkIdx(fn, "srcMrIdx", srcMrIdx, os));
  API_CHECK(checkIdx(fn, "dstMrIdx", dstMrIdx, os));
  API_CHECK(checkRange(fn, "srcOffset", srcOffset, size, os->regionSize(srcMrIdx, peer), "region",
                       peer, srcMrIdx));
  API_CHECK(checkRange(fn, "dstOffset", dstOffset, size, os->regionSize(dstMrIdx, comm->rank),
                       "region", comm->rank, dstMrIdx));
  return os->get(peer, srcOffset, dstOffset, size, srcMrIdx, dstMrIdx);
}

static flagcxResult_t batchPut(const char *fn, flagcxComm_t comm, int peer,
                               const size_t *srcOffsets, const size_t *dstOffsets,
                               const size_t *sizes, const int *srcMrIdxs, const int *dstMrIdxs,
                               size_t count) {
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkRank(fn, "peer", peer, comm));
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, false, &os));
  if (count == 0) return flagcxSuccess;
  API_CHECK(checkPtr(fn, "srcOffsets", srcOffsets));
  API_CHECK(checkPtr(fn, "dstOffsets", dstOffsets));
  API_CHECK(checkPtr(fn, "sizes", sizes));
  API_CHECK(checkPtr(fn, "srcMrIdxs", srcMrIdxs));
  API_CHECK(checkPtr(fn, "dstMrIdxs", dstMrIdxs));
  for (size_t i = 0; i < count; i++) {
    API_CHECK(checkIdx(fn, "srcMrIdx", srcMrIdxs[i], os));
    API_CHECK(checkIdx(fn, "dstMrIdx", dstMrIdxs[i], os));
    API_CHECK(checkRange(fn, "srcOffset", srcOffsets[i], sizes[i],
                         os->regionSize(srcMrIdxs[i], comm->rank), "region", comm->rank,
                         srcMrIdxs[i]));
    API_CHECK(checkRange(fn, "dstOffset", dstOffsets[i], sizes[i],
                         os->regionSize(dstMrIdxs[i], peer), "region", peer, dstMrIdxs[i]));
  }
  return os->batchPut(peer, srcOffsets, dstOffsets, sizes, srcMrIdxs, dstMrIdxs, count);
}

extern "C" flagcxResult_t flagcxPut(flagcxComm_t comm, int peer, size_t srcOffset,
                                    size_t dstOffset, size_t size, int srcMrIdx, int dstMrIdx) {
  return batchPut("flagcxPut", comm, peer, &srcOffset, &dstOffset, &size, &srcMrIdx, &dstMrIdx, 1);
}

extern "C" flagcxResult_t flagcxBatchPut(flagcxComm_t comm, int peer, const size_t *srcOffsets,
                                         const size_t *dstOffsets, const size_t *sizes,
                                         const int *srcMrIdxs, const int *dstMrIdxs,
                                         size_t count) {
  return batchPut("flagcxBatchPut", comm, peer, srcOffsets, dstOffsets, sizes, srcMrIdxs,
                  dstMrIdxs, count);
}

extern "C" flagcxResult_t flagcxPutValue(flagcxComm_t comm, int peer, uint64_t value,
                                         size_t dstOffset, int dstMrIdx) {
  const char *fn = "flagcxPutValue";
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkRank(fn, "peer", peer, comm));
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, false, &os));
  if (!os->stagingReady())
    return argError(flagcxInvalidArgument, kP2P, "%s: no staging region registered "
                    "(flagcxOneSideStagingRegister)", fn);
  API_CHECK(checkIdx(fn, "dstMrIdx", dstMrIdx, os));
  API_CHECK(checkRange(fn, "dstOffset", dstOffset, sizeof(uint64_t),
                       os->regionSize(dstMrIdx, peer), "region", peer, dstMrIdx));
  return os->putValue(peer, value, dstOffset, dstMrIdx);
}

extern "C" flagcxResult_t flagcxPutSignal(const void *localbuff, size_t count,
                                          flagcxDataType_t datatype, int peer,
                                          flagcxWindow_t peerWin, size_t peerWinOffset,
                                          unsigned int flags, flagcxComm_t comm,
                                          flagcxStream_t stream) {
  const char *fn = "flagcxPutSignal";
  (void)flags;  // reserved
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkDtype(fn, datatype));
  API_CHECK(checkRank(fn, "peer", peer, comm));
  size_t bytes = 0;
  API_CHECK(checkBytes(fn, "count", count, datatype, 1, &bytes));
  if (bytes > 0) API_CHECK(checkPtr(fn, "localbuff", localbuff));
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, false, &os));
  API_CHECK(checkWindow(fn, peerWin, os));
  API_CHECK(checkRange(fn, "peerWinOffset", peerWinOffset, bytes,
                       peerWin->reg.peer[static_cast<size_t>(peer)].size, "window", peer, -1));
  return os->putSignal(localbuff, bytes, peer, peerWin, peerWinOffset, true, stream);
}

extern "C" flagcxResult_t flagcxSignal(int peer, unsigned int flags, flagcxComm_t comm,
                                       flagcxStream_t stream) {
  const char *fn = "flagcxSignal";
  (void)flags;
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkRank(fn, "peer", peer, comm));
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, false, &os));
  if (!os->signalsReady())
    return argError(flagcxInvalidArgument, kP2P, "%s: no window or signal buffer is registered",
                    fn);
  return os->putSignal(nullptr, 0, peer, nullptr, 0, false, stream);
}

extern "C" flagcxResult_t flagcxWaitSignal(int nDesc, const flagcxWaitSignalDesc_t *signalDescs,
                                           flagcxComm_t comm, flagcxStream_t stream) {
  const char *fn = "flagcxWaitSignal";
  API_CHECK(checkComm(fn, comm));
  if (nDesc < 0) return argError(flagcxInvalidArgument, kP2P, "%s: nDesc %d is negative", fn, nDesc);
  if (nDesc == 0) return flagcxSuccess;
  API_CHECK(checkPtr(fn, "signalDescs", signalDescs));
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, false, &os));
  if (!os->signalsReady())
    return argError(flagcxInvalidArgument, kP2P, "%s: a wait before any window or signal buffer "
                    "was registered", fn);
  for (int i = 0; i < nDesc; i++)
    API_CHECK(checkRank(fn, "signalDescs[i].peer", signalDescs[i].peer, comm));
  return os->waitSignal(nDesc, signalDescs, stream);
}

extern "C" flagcxResult_t flagcxReadCounter(flagcxComm_t comm, uint64_t *count) {
  const char *fn = "flagcxReadCounter";
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkPtr(fn, "count", count));
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, false, &os));
  return os->readCounter(count);
}

extern "C" flagcxResult_t flagcxWaitCounter(flagcxComm_t comm, uint64_t target) {
  const char *fn = "flagcxWaitCounter";
  API_CHECK(checkComm(fn, comm));
  OneSided *os = nullptr;
  API_CHECK(state(fn, comm, false, &os));
  return os->waitCounter(target);
}
