// The host side of flagcx_kernel.h: device communicators and device memory
// handles.  Arguments are checked here (one log line, flagcxInvalidArgument);
// src/core/devcomm does the work.  Create, Destroy of a device communicator
// and DevMemCreate are collective.  The "device pointer" of a handle is the
// view kernels read: a CUDA rank's is in device memory, a host rank's is the
// handle itself.
#include "api/checks.h"
#include "core/core.h"
#include "flagcx_kernel.h"

using namespace flagcx;

namespace {
flagcxResult_t liveComm(flagcxComm_t comm, const char *fn) {
  if (!comm || !commIsLive(comm))
    return argError(flagcxInvalidArgument, kInit, "%s: comm is not a live communicator", fn);
  return flagcxSuccess;
}
}  // namespace

extern "C" {

flagcxResult_t flagcxDevCommCreate(flagcxComm_t comm, const flagcxDevCommRequirements *reqs,
                                   flagcxDevComm_t *devComm) {
  if (devComm) *devComm = nullptr;
  FLAGCX_CHECK(liveComm(comm, __func__));
  if (!reqs || !devComm)
    return argError(flagcxInvalidArgument, kInit, "%s: %s is NULL", __func__,
                    reqs ? "devComm" : "reqs");
  return devCommCreate(comm, *reqs, devComm);
}

flagcxResult_t flagcxDevCommDestroy(flagcxComm_t comm, flagcxDevComm_t devComm) {
  FLAGCX_CHECK(liveComm(comm, __func__));
  if (!devCommOf(comm, devComm, __func__)) return flagcxInvalidArgument;
  return devCommDestroy(devComm);
}

flagcxResult_t flagcxDevMemCreate(flagcxComm_t comm, void *buff, size_t size, flagcxWindow_t win,
                                  flagcxDevMem_t *devMem) {
  if (devMem) *devMem = nullptr;
  FLAGCX_CHECK(liveComm(comm, __func__));
  if (!buff || size == 0 || !devMem)
    return argError(flagcxInvalidArgument, kInit, "%s: %s", __func__,
                    !buff ? "buff is NULL" : size == 0 ? "size is 0" : "devMem is NULL");
  return devMemCreate(comm, buff, size, win, devMem);
}

flagcxResult_t flagcxDevMemDestroy(flagcxComm_t comm, flagcxDevMem_t devMem) {
  FLAGCX_CHECK(liveComm(comm, __func__));
  if (!devMemOf(comm, devMem, __func__)) return flagcxInvalidArgument;
  return devMemDestroy(comm, devMem);
}

flagcxResult_t flagcxDevCommGetDevicePtr(flagcxDevComm_t devComm, void **devPtr) {
  if (devPtr) *devPtr = nullptr;
  if (!devPtr || !devCommLive(devComm))
    return argError(flagcxInvalidArgument, kInit, "%s: %s", __func__,
                    devPtr ? "devComm is not a live device communicator" : "devPtr is NULL");
  *devPtr = devComm->dev.view ? devComm->dev.view : &devComm->view;
  return flagcxSuccess;
}

flagcxResult_t flagcxDevCommUsesHostMemory(flagcxDevComm_t devComm, int *hostMemory) {
  if (hostMemory) *hostMemory = 0;
  if (!hostMemory || !devCommLive(devComm))
    return argError(flagcxInvalidArgument, kInit, "%s: %s", __func__,
                    hostMemory ? "devComm is not a live device communicator" : "hostMemory is NULL");
  *hostMemory = devComm->view.queue != nullptr;  // CUDA ranks: only via the proxy
  return flagcxSuccess;
}

flagcxResult_t flagcxDevCommFreeDevicePtr(flagcxDevComm_t devComm) {
  if (!devCommLive(devComm))
    return argError(flagcxInvalidArgument, kInit, "%s: devComm is not a live device communicator",
                    __func__);
  return flagcxSuccess;
}

flagcxResult_t flagcxDevMemGetDevicePtr(flagcxDevMem_t devMem, void **devPtr) {
  if (devPtr) *devPtr = nullptr;
  if (!devPtr || !devMemLive(devMem))
    return argError(flagcxInvalidArgument, kInit, "%s: %s", __func__,
                    devPtr ? "devMem is not a live device memory handle" : "devPtr is NULL");
  *devPtr = devMem->dev.view ? devMem->dev.view : &devMem->view;
  return flagcxSuccess;
}

flagcxResult_t flagcxDevMemFreeDevicePtr(flagcxDevMem_t devMem) {
  if (!devMemLive(devMem))
    return argError(flagcxInvalidArgument, kInit, "%s: devMem is not a live device memory handle",
                    __func__);
  return flagcxSuccess;
}

// Destroys every device communicator and device memory handle of comm
// (collective, as flagcxDevCommDestroy).
flagcxResult_t flagcxCommCleanup(flagcxComm_t comm) {
  FLAGCX_CHECK(liveComm(comm, __func__));
  return devCleanup(comm);
}
}
