// Host side of cuda_devapi_test, compiled as host C++ (the unified calls
// are library functions here): a rank's setup and teardown for both kinds
// of rank - a CUDA rank's window in device memory, or in host memory the GPU
// maps when its device communicator is on the proxy - and the checks of
// cuda_devapi_body.h run by a host rank of a mixed job (one thread).
#include "cuda_devapi_host.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

static int g_hostFail;
#define DCHECK(c)                                   \
  do {                                              \
    if (!(c) && !g_hostFail) g_hostFail = __LINE__; \
  } while (0)
#define DEVAPI_FN static
#define DEVAPI_TID 0u
#define DEVAPI_NT 1u
#define DEVAPI_SYNC() (void)0
#define DEVAPI_COOP FLAGCX_COOP_THREAD
#include "cuda_devapi_body.h"

#define TRY(call)                                                                        \
  do {                                                                                   \
    flagcxResult_t r_ = (call);                                                          \
    if (r_ != flagcxSuccess) {                                                           \
      fprintf(stderr, "rank %d: line %d: %s: %s\n", r->rank, __LINE__, #call,            \
              flagcxGetErrorString(r_));                                                 \
      return __LINE__;                                                                   \
    }                                                                                    \
  } while (0)

int devapiOpen(DevapiRank *r, flagcxUniqueId *id) {
  TRY(flagcxCommInitRank(&r->comm, r->n, id, r->rank));
  flagcxDevCommRequirements req = FLAGCX_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.interSignalCount = 4;
  req.interCounterCount = 2;
  req.intraBarrierCount = req.interBarrierCount = req.barrierCount = 2;
  TRY(flagcxDevCommCreate(r->comm, &req, &r->dc));
  int hostMem = 0;
  TRY(flagcxDevCommUsesHostMemory(r->dc, &hostMem));
  r->hostMem = hostMem != 0;
  if (r->cuda && r->hostMem) {
    if (cudaHostAlloc(&r->win, devapi::kWin, cudaHostAllocMapped | cudaHostAllocPortable) !=
        cudaSuccess)
      return __LINE__;
  } else {
    TRY(flagcxMemAlloc(&r->win, devapi::kWin, flagcxMemCCL));
  }
  if (r->cuda && !r->hostMem) cudaMemset(r->win, 0, devapi::kWin);
  else memset(r->win, 0, devapi::kWin);
  TRY(flagcxCommWindowRegister(r->comm, r->win, devapi::kWin, &r->w, FLAGCX_WIN_COLL_SYMMETRIC,
                               flagcxMemCCL));
  TRY(flagcxDevMemCreate(r->comm, r->win, devapi::kWin, r->w, &r->dm));
  TRY(flagcxDevCommGetDevicePtr(r->dc, &r->c));
  TRY(flagcxDevMemGetDevicePtr(r->dm, &r->m));
  return 0;
}

int devapiClose(DevapiRank *r, flagcxResult_t want) {
  TRY(flagcxDevMemDestroy(r->comm, r->dm));
  flagcxResult_t got = flagcxDevCommDestroy(r->comm, r->dc);
  if (got != want) {
    fprintf(stderr, "rank %d: flagcxDevCommDestroy gave %s, want %s\n", r->rank,
            flagcxGetErrorString(got), flagcxGetErrorString(want));
    return __LINE__;
  }
  TRY(flagcxCommWindowDeregister(r->comm, r->w));
  TRY(flagcxCommDestroy(r->comm));
  if (r->cuda && r->hostMem) cudaFreeHost(r->win);
  else TRY(flagcxMemFree(r->win, flagcxMemCCL));
  return 0;
}

int devapiHostChecks(DevapiRank *r) {
  devapi::putsAndSignals(r->c, r->m, r->rank, r->n);
  devapi::valuesGetsBarriers(r->c, r->m, r->rank, r->n);
  devapi::ordering(r->c, r->m, r->rank, r->n);
  return g_hostFail;
}
