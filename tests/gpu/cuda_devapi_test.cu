// The device API from CUDA kernels (docs/DEVICE-API.md): 2-4 ranks run
// every unified call in one kernel each and check the bytes, signal and
// counter arithmetic, barriers of each team kind and data before signal on
// the device (cuda_devapi_body.h); the host checks what the kernels
// recorded.  Forked ranks share the GPU(s) through CUDA IPC, or, with
// FLAGCX_IPC_DISABLE=1, reach each other through the proxy (windows in host
// memory the GPU maps); "mixed": rank 1 is a host rank running the same
// checks as host calls (cuda_devapi_host.cc), the CUDA ranks on the proxy;
// "--rank R": one rank of a job whose ranks start elsewhere (FLAGCX_COMM_ID;
// tests/netns/two_hosts.sh: two netns "hosts", the proxy over sockets).
// With FLAGCX_DEVICE_CHECKS (the -Ddevice_checks=true build) a put past the
// peer's window must be caught: printed with block, thread and offset,
// skipped, and returned by flagcxDevCommDestroy.
// Usage: cuda_devapi_test [nranks] [mixed] | --rank R [nranks];
// exit 0 pass, 1 fail, 77 no GPU.
// Ranks on one GPU run at once only with MPS or time-slicing.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_devapi_host.h"
#include "flagcx.h"
#include "flagcx_device_unified.h"
#include "flagcx_kernel.h"
#include "fork_ranks.h"

// The first failed check of a kernel (its line), 0 while all hold.
__device__ int g_fail;
#define DCHECK(c)                                   \
  do {                                              \
    if (!(c)) atomicCAS(&g_fail, 0, __LINE__);      \
  } while (0)
#define DEVAPI_FN __device__
#define DEVAPI_TID threadIdx.x
#define DEVAPI_NT blockDim.x
#define DEVAPI_SYNC() __syncthreads()
#define DEVAPI_COOP FLAGCX_COOP_BLOCK
#include "cuda_devapi_body.h"

namespace {

using namespace devapi;

__global__ void putsAndSignalsK(const void *c, const void *m, int rank, int n) {
  putsAndSignals(c, m, rank, n);
}
__global__ void valuesGetsBarriersK(const void *c, const void *m, int rank, int n) {
  valuesGetsBarriers(c, m, rank, n);
}
__global__ void orderingK(const void *c, const void *m, int rank, int n) {
  ordering(c, m, rank, n);
}

#ifdef FLAGCX_DEVICE_CHECKS
// A put past the peer's window (caught only with FLAGCX_DEVICE_CHECKS).
__global__ void pastTheWindow(const void *c, const void *m) {
  flagcxDevPut(c, m, kWin - 4, m, 0, 8, W, 0, 0, FLAGCX_COOP_THREAD, kSys, kRel);
}
#endif

int kernelsPass(int rank, const char *what) {
  int fail = 0;
  cudaError_t e = cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(&fail, g_fail, sizeof(int));
  int none = 0;  // the next kernel reports its own first failure
  cudaMemcpyToSymbol(g_fail, &none, sizeof(int));
  if (e != cudaSuccess || fail) {
    fprintf(stderr, "rank %d: %s: %s, first failed check at line %d\n", rank, what,
            cudaGetErrorString(e), fail);
    return 0;
  }
  return 1;
}

// A CUDA rank: the checks as kernels.
int cudaChecks(DevapiRank *r, bool *checks) {
  int ok = 1, rank = r->rank, n = r->n;
  // Every kernel runs and is waited for, whatever the ones before found:
  // the peers' kernels wait on this rank's, and teardown must not free what
  // a running kernel uses.
  putsAndSignalsK<<<1, 256>>>(r->c, r->m, rank, n);
  ok &= kernelsPass(rank, "puts and signals");
  valuesGetsBarriersK<<<1, 256>>>(r->c, r->m, rank, n);
  ok &= kernelsPass(rank, "values, gets, barriers");
  orderingK<<<1, 256>>>(r->c, r->m, rank, n);
  ok &= kernelsPass(rank, "ordering");
  *checks = false;
#ifdef FLAGCX_DEVICE_CHECKS
  *checks = true;
  if (rank == 0) {
    /* tools/gpu-check.sh matches the kernel's line against this one. */
    printf("device checks: a put past the window, offset %zu, 8 bytes\n", kWin - 4);
    fflush(stdout);
    pastTheWindow<<<1, 1>>>(r->c, r->m);
    ok &= kernelsPass(rank, "past the window");
  }
#endif
  return ok;
}

int runRank(int rank, int n, flagcxUniqueId *id, bool hostRank) {
  DevapiRank r;
  r.rank = rank, r.n = n, r.cuda = !hostRank;
  if (r.cuda) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return 77;
    cudaSetDevice(rank % ndev);
  }
  int line = devapiOpen(&r, id);
  if (line) {
    fprintf(stderr, "rank %d: setup failed at cuda_devapi_host.cc:%d\n", rank, line);
    return 1;
  }
  bool checks = false;
  int ok = 1;
  if (r.cuda) {
    ok = cudaChecks(&r, &checks);
  } else if ((line = devapiHostChecks(&r)) != 0) {
    fprintf(stderr, "rank %d (host rank): first failed check at line %d\n", rank, line);
    ok = 0;
  }
  flagcxResult_t want = checks && rank == 0 ? flagcxInvalidArgument : flagcxSuccess;
  if ((line = devapiClose(&r, want)) != 0) {
    fprintf(stderr, "rank %d: teardown failed at cuda_devapi_host.cc:%d\n", rank, line);
    ok = 0;
  }
  if (ok && rank == 0)
    printf("device API from CUDA kernels at %d ranks (%s): correct\n", n,
           r.hostMem ? "through the proxy" : "CUDA IPC");
  return ok ? 0 : 1;
}

bool g_mixed = false;

}  // namespace

int rankMain(int rank, int n, flagcxUniqueId *id, void *) {
  bool hostRank = g_mixed && rank == 1;
  if (hostRank) setenv("FLAGCX_DEVICE", "host", 1);
  return runRank(rank, n, id, hostRank);
}

int main(int argc, char **argv) {
  setenv("FLAGCX_USE_HETERO_COMM", "1", 0);  // the engine: one-sided state needs it
  if (argc > 2 && strcmp(argv[1], "--rank") == 0) {  // one rank, FLAGCX_COMM_ID names the job
    int rank = atoi(argv[2]), n = argc > 3 ? atoi(argv[3]) : 2;
    flagcxUniqueId id;
    if (rank < 0 || rank >= n || flagcxGetUniqueId(&id) != flagcxSuccess) return 2;
    return runRank(rank, n, &id, false);
  }
  int n = argc > 1 ? atoi(argv[1]) : 2;
  g_mixed = argc > 2 && strcmp(argv[2], "mixed") == 0;
  if (n < 2 || n > FORK_RANKS_MAX) return 2;
  return forkRanks(n, rankMain, nullptr);
}
