// What cuda_devapi_test's two kinds of rank share (cuda_devapi_host.cc,
// host code): the communicator, device communicator, window and DevMem of a
// rank, their teardown, and the checks a host rank of a mixed job runs.
#pragma once
#include "flagcx.h"
#include "flagcx_kernel.h"

struct DevapiRank {
  int rank = 0, n = 0;
  bool cuda = false;     // a CUDA rank (else a host rank: FLAGCX_DEVICE=host)
  bool hostMem = false;  // the window is host memory (flagcxDevCommUsesHostMemory)
  flagcxComm_t comm = nullptr;
  void *win = nullptr;
  flagcxWindow_t w = nullptr;
  flagcxDevComm_t dc = nullptr;
  flagcxDevMem_t dm = nullptr;
  void *c = nullptr, *m = nullptr;  // what the calls take
};

// Init, device communicator, then the window of the memory it needs: 0 or
// the failed line.
int devapiOpen(DevapiRank *r, flagcxUniqueId *id);
// Teardown; flagcxDevCommDestroy must return `want`.  0 or the failed line.
int devapiClose(DevapiRank *r, flagcxResult_t want);
// A host rank: the kernels' checks as host calls; 0 or the first failed line.
int devapiHostChecks(DevapiRank *r);
