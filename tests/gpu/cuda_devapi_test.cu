// The device API from CUDA kernels (docs/DEVICE-API.md): 2-4 forked ranks
// sharing the GPU(s) through CUDA IPC run every unified call in one kernel
// each and check the bytes, signal and counter arithmetic, barriers of each
// team kind and data before signal on the device; the host checks what the
// kernels recorded.  With FLAGCX_DEVICE_CHECKS (the -Ddevice_checks=true
// build) a put past the peer's window must be caught: printed with block,
// thread and offset, skipped, and returned by flagcxDevCommDestroy.
// Usage: cuda_devapi_test [nranks]; exit 0 pass, 1 fail, 77 no GPU.
// Ranks on one GPU run at once only with MPS or time-slicing.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flagcx.h"
#include "flagcx_device_unified.h"
#include "flagcx_kernel.h"
#include "fork_ranks.h"

namespace {

constexpr size_t kChunk = 4096;
constexpr size_t kBig = 256 * 1024;
constexpr int kRounds = 8;
constexpr size_t kWin = kChunk * 8 + kBig * kRounds;
constexpr auto W = FLAGCX_TEAM_WORLD;
constexpr auto B = FLAGCX_COOP_BLOCK;
constexpr auto kSys = FLAGCX_MEMORY_SCOPE_SYSTEM;
constexpr auto kRel = FLAGCX_MEMORY_ORDER_RELEASE;
constexpr auto kAcq = FLAGCX_MEMORY_ORDER_ACQUIRE;

// The first failed check of a kernel (its line), 0 while all hold.
__device__ int g_fail;
#define DCHECK(c)                                   \
  do {                                              \
    if (!(c)) atomicCAS(&g_fail, 0, __LINE__);      \
  } while (0)

__device__ char *local(const void *m, size_t off) {
  return ((const flagcxDevMemView *)m)->base + off;
}

__global__ void putsAndSignals(const void *c, const void *m, int rank, int n) {
  for (size_t i = threadIdx.x; i < 64; i += blockDim.x) local(m, kChunk * 7)[i] = 'a' + rank;
  __syncthreads();
  for (int p = 0; p < n; p++) {
    flagcxDevPut_RSigInc(c, m, rank * 64, m, kChunk * 7, 64, W, p, 0, B, kSys, kRel, 0);
    flagcxDevPut_RSigAdd(c, m, kChunk + rank * 64, m, kChunk * 7, 64, W, p, 0, B, kSys, kRel, 1, 5);
    flagcxDevPut_LCtrInc(c, m, kChunk * 2 + rank * 64, m, kChunk * 7, 64, W, p, 0, B, kSys, kRel, 0);
    flagcxDevPut_RSigInc_LCtrInc(c, m, kChunk * 3 + rank * 64, m, kChunk * 7, 64, W, p, 0, B,
                                 kSys, kRel, 2, 1);
    flagcxDevPut_RSigAdd_LCtrInc(c, m, kChunk * 4 + rank * 64, m, kChunk * 7, 64, W, p, 0, B,
                                 kSys, kRel, 2, 10, 1);
    flagcxDevSignalInc(c, W, p, 3, 0, B, kSys);
    flagcxDevSignalAdd(c, W, p, 3, 100, 0, B, kSys);
  }
  flagcxDevWaitSignal(c, 0, n, 64, 0, B, kAcq);
  flagcxDevWaitSignal(c, 1, 5u * n, 32, 0, B, kAcq);
  flagcxDevWaitSignal(c, 2, 11u * n, 64, 0, B, kAcq);
  flagcxDevWaitSignal(c, 3, 101u * n, 64, 0, B, kAcq);
  flagcxDevWaitCounter(c, 0, n, 64, 0, B, kAcq);
  flagcxDevWaitCounter(c, 1, 2u * n, 64, 0, B, kAcq);
  if (threadIdx.x == 0) {
    for (int p = 0; p < n; p++) {
      DCHECK(*local(m, p * 64) == 'a' + p && *local(m, p * 64 + 63) == 'a' + p);
      DCHECK(*local(m, kChunk + p * 64 + 9) == 'a' + p);
      DCHECK(*local(m, kChunk * 4 + p * 64 + 5) == 'a' + p);
    }
    DCHECK(flagcxDevReadCounter(c, 1, 64, 0, kAcq) == 2u * n);
  }
  flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
  if (threadIdx.x == 0) {
    DCHECK(flagcxDevReadSignal(c, 3, 64, 0, kAcq) == 101u * n);
    flagcxDevResetSignal(c, 0, 3);
    flagcxDevResetCounter(c, 0, 1);
    DCHECK(flagcxDevReadSignal(c, 3, 64, 0, kAcq) == 0);
    DCHECK(flagcxDevReadCounter(c, 1, 64, 0, kAcq) == 0);
    flagcxDevIncreaseSignalShadow(c, 0, 3, 7u * n);
  }
  flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
  for (int p = 0; p < n; p++) flagcxDevSignalAdd(c, W, p, 3, 7, 0, B, kSys);
  flagcxDevWaitSignalMeetShadow(c, 0, 3, 64, B, kAcq);
  flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
}

__global__ void valuesGetsBarriers(const void *c, const void *m, int rank, int n) {
  const flagcxDevCommView *v = (const flagcxDevCommView *)c;
  for (int p = 0; p < n; p++) {
    uint64_t x = 1000u * (uint64_t)rank + (uint64_t)p;
    flagcxDevPutValue(c, m, kChunk * 5 + rank * 8, x, W, p, 0, B, kSys, kRel);
    flagcxDevPutValue_RSigInc(c, m, kChunk * 5 + 512 + rank * 8, x + 1, W, p, 0, B, kSys, kRel, 0);
    flagcxDevPutValue_RSigAdd(c, m, kChunk * 5 + 1024 + rank * 8, x + 2, W, p, 0, B, kSys, kRel,
                              1, 3);
  }
  flagcxDevWaitSignal(c, 0, 2u * n, 64, 0, B, kAcq);
  flagcxDevWaitSignal(c, 1, 8u * n, 64, 0, B, kAcq);
  flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
  for (int p = 0; p < n && threadIdx.x == 0; p++)
    for (int k = 0; k < 3; k++)
      DCHECK(*(volatile uint64_t *)local(m, kChunk * 5 + 512 * k + p * 8) ==
             1000u * (uint64_t)p + (uint64_t)rank + (uint64_t)k);
  for (int p = 0; p < n; p++)
    flagcxDevGet(c, m, p * 64, m, kChunk * 6 + p * 64, 64, W, p, 0, B, kSys, kAcq);
  flagcxDevFlush(c, 0, B, kAcq);
  for (int p = 0; p < n && threadIdx.x == 0; p++) DCHECK(*local(m, kChunk * 6 + p * 64 + 17) == 'a' + p);
  for (int kind = 0; kind < 3; kind++) {
    auto team = (flagcxDevTeamKind_t)kind;
    size_t slot = kChunk * 5 + 2048 + (size_t)kind * 256;
    for (int round = 1; round <= 3; round++) {
      for (int i = 0; i < v->teamSize[kind]; i++)
        flagcxDevPutValue(c, m, slot + rank * 8, 10u * rank + round, team, i, 0, B, kSys, kRel);
      if (round == 2) {
        flagcxDevBarrierArrive(c, team, 1, 0, B, kRel, kSys);
        flagcxDevBarrierWait(c, team, 1, 0, B, kAcq, kSys);
      } else {
        flagcxDevBarrierSync(c, team, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
      }
      for (int i = 0; i < v->teamSize[kind] && threadIdx.x == 0; i++) {
        int w = v->teamWorld[kind][i];
        DCHECK(*(volatile uint64_t *)local(m, slot + w * 8) >= 10u * w + round);
      }
      flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
    }
  }
}

// Data before signal: rank 0 puts kRounds rounds to rank n-1, which checks
// each round as soon as its signal says so.
__global__ void ordering(const void *c, const void *m, int rank, int n) {
  if (threadIdx.x == 0) flagcxDevResetSignal(c, 0, 0);
  flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
  size_t base = kChunk * 8;
  for (int k = 0; k < kRounds; k++) {
    if (rank == 0) {
      for (size_t i = threadIdx.x; i < kBig; i += blockDim.x) local(m, base + kBig * k)[i] = k + 1;
      __syncthreads();
      flagcxDevPut_RSigInc(c, m, base + kBig * k, m, base + kBig * k, kBig, W, n - 1, 0, B, kSys,
                           kRel, 0);
    } else if (rank == n - 1) {
      flagcxDevWaitSignal(c, 0, k + 1, 64, 0, B, kAcq);
      for (size_t i = threadIdx.x; i < kBig; i += blockDim.x)
        DCHECK(((volatile char *)local(m, base + kBig * k))[i] == k + 1);
    }
  }
  flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
}

#ifdef FLAGCX_DEVICE_CHECKS
// A put past the peer's window (caught only with FLAGCX_DEVICE_CHECKS).
__global__ void pastTheWindow(const void *c, const void *m) {
  flagcxDevPut(c, m, kWin - 4, m, 0, 8, W, 0, 0, FLAGCX_COOP_THREAD, kSys, kRel);
}
#endif

#define CHECK(call)                                                                     \
  do {                                                                                  \
    flagcxResult_t r_ = (call);                                                         \
    if (r_ != flagcxSuccess) {                                                          \
      fprintf(stderr, "rank %d: line %d: %s: %s\n", rank, __LINE__, #call,              \
              flagcxGetErrorString(r_));                                                \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

int kernelsPass(int rank, const char *what) {
  int fail = 0;
  cudaError_t e = cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(&fail, g_fail, sizeof(int));
  if (e != cudaSuccess || fail) {
    fprintf(stderr, "rank %d: %s: %s, first failed check at line %d\n", rank, what,
            cudaGetErrorString(e), fail);
    return 0;
  }
  return 1;
}

int runRank(int rank, int n, flagcxUniqueId *id) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return 77;
  cudaSetDevice(rank % ndev);
  flagcxComm_t comm;
  CHECK(flagcxCommInitRank(&comm, n, id, rank));
  void *win = nullptr;
  CHECK(flagcxMemAlloc(&win, kWin, flagcxMemCCL));
  cudaMemset(win, 0, kWin);
  flagcxWindow_t w;
  CHECK(flagcxCommWindowRegister(comm, win, kWin, &w, FLAGCX_WIN_COLL_SYMMETRIC, flagcxMemCCL));
  flagcxDevCommRequirements req = FLAGCX_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.interSignalCount = 4;
  req.interCounterCount = 2;
  req.intraBarrierCount = req.interBarrierCount = req.barrierCount = 2;
  flagcxDevComm_t dc;
  flagcxDevMem_t dm;
  CHECK(flagcxDevCommCreate(comm, &req, &dc));
  CHECK(flagcxDevMemCreate(comm, win, kWin, w, &dm));
  void *c, *m;
  CHECK(flagcxDevCommGetDevicePtr(dc, &c));
  CHECK(flagcxDevMemGetDevicePtr(dm, &m));
  int ok = 1;
  putsAndSignals<<<1, 256>>>(c, m, rank, n);
  ok = ok && kernelsPass(rank, "puts and signals");
  valuesGetsBarriers<<<1, 256>>>(c, m, rank, n);
  ok = ok && kernelsPass(rank, "values, gets, barriers");
  ordering<<<1, 256>>>(c, m, rank, n);
  ok = ok && kernelsPass(rank, "ordering");
  bool checks = false;
#ifdef FLAGCX_DEVICE_CHECKS
  checks = true;
  if (rank == 0) {
    pastTheWindow<<<1, 1>>>(c, m);
    ok = ok && kernelsPass(rank, "past the window");
  }
#endif
  CHECK(flagcxDevMemDestroy(comm, dm));
  flagcxResult_t r = flagcxDevCommDestroy(comm, dc);
  flagcxResult_t want = checks && rank == 0 ? flagcxInvalidArgument : flagcxSuccess;
  if (r != want) {
    fprintf(stderr, "rank %d: flagcxDevCommDestroy gave %s, want %s\n", rank,
            flagcxGetErrorString(r), flagcxGetErrorString(want));
    ok = 0;
  }
  CHECK(flagcxCommWindowDeregister(comm, w));
  CHECK(flagcxCommDestroy(comm));
  CHECK(flagcxMemFree(win, flagcxMemCCL));
  if (ok && rank == 0) printf("device API from CUDA kernels at %d ranks: correct\n", n);
  return ok ? 0 : 1;
}

}  // namespace

int rankMain(int rank, int n, flagcxUniqueId *id, void *) { return runRank(rank, n, id); }

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  if (n < 2 || n > FORK_RANKS_MAX) return 2;
  setenv("FLAGCX_USE_HETERO_COMM", "1", 0);  // the engine: one-sided state needs it
  return forkRanks(n, rankMain, nullptr);
}
