/* A one-kernel small-message allreduce (float sum) on the device API: each
 * rank's kernel puts its input into slot `rank` of every rank's window with a
 * signal (flagcxDevPut_RSigInc), waits until all n signals of the round are
 * in, and sums the n slots in rank order.  Two halves of the window alternate
 * between rounds: a rank writes a half again only after every peer's next
 * round reached it, which that peer sent after reading the half.
 *
 * Written to the installed headers only:
 *   nvcc -std=c++17 -arch=sm_90 device_allreduce.cu $(pkg-config --cflags --libs flagcx)
 * Usage: device_allreduce [nranks 2..8] [bytes] [iterations]; forks the ranks,
 * which share GPU rank % device count (CUDA IPC between them; with
 * FLAGCX_IPC_DISABLE=1 through the proxy).  device_allreduce --rank R
 * [nranks] [bytes] [iterations]: one rank of a job started elsewhere
 * (FLAGCX_COMM_ID names it; ranks on other hosts reach each other through
 * the proxy).  The window is device memory, or host memory the GPU maps
 * where flagcxDevCommUsesHostMemory says so.  Prints the mean time per
 * allreduce (one kernel, launched and waited for) and exits 0 when every
 * element is right; 77 without a GPU. */
#include <cuda_runtime.h>
#include <flagcx.h>
#include <flagcx_device_unified.h>
#include <flagcx_kernel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fork_ranks.h"
#define THREADS 512

#define CHECK(call)                                                                      \
  do {                                                                                   \
    flagcxResult_t r_ = (call);                                                          \
    if (r_ != flagcxSuccess) {                                                           \
      fprintf(stderr, "rank %d: %s:%d %s failed: %s (%s)\n", rank, __FILE__, __LINE__,   \
              #call, flagcxGetErrorString(r_), flagcxGetLastError(NULL));                \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

/* Window layout in floats: half h (0, 1) at h * n * count, slot r of it at
 * + r * count; this rank's input after both halves. */
__global__ void allreduce(const void *comm, const void *win, float *out, int rank, int n,
                          size_t count, unsigned round) {
  size_t bytes = count * sizeof(float), half = (round & 1u) * (size_t)n * bytes;
  size_t input = 2 * (size_t)n * bytes;
  for (int p = 0; p < n; p++)
    flagcxDevPut_RSigInc(comm, win, half + (size_t)rank * bytes, win, input, bytes,
                         FLAGCX_TEAM_WORLD, p, 0, FLAGCX_COOP_BLOCK, FLAGCX_MEMORY_SCOPE_SYSTEM,
                         FLAGCX_MEMORY_ORDER_RELEASE, 0);
  flagcxDevWaitSignal(comm, 0, (uint64_t)(round + 1) * (uint64_t)n, 64, 0, FLAGCX_COOP_BLOCK,
                      FLAGCX_MEMORY_ORDER_ACQUIRE);
  const float *slots =
      (const float *)(((const flagcxDevMemView *)win)->base + half);
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) {
    float s = 0.f;
    for (int r = 0; r < n; r++) s += slots[(size_t)r * count + i];
    out[i] = s;
  }
}

static float input(int rank, size_t i) { return (float)(rank + 1) + (float)(i % 7); }

static int runRank(int rank, int n, flagcxUniqueId *id, size_t bytes, int iters) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return 77;
  cudaSetDevice(rank % ndev);
  flagcxComm_t comm;
  CHECK(flagcxCommInitRank(&comm, n, id, rank));
  size_t count = bytes / sizeof(float), winBytes = (2 * (size_t)n + 1) * count * sizeof(float);
  flagcxDevCommRequirements req = FLAGCX_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.interSignalCount = 1;
  flagcxDevComm_t dc;
  flagcxDevMem_t dm;
  CHECK(flagcxDevCommCreate(comm, &req, &dc));
  /* Peers through the proxy: the window is host memory the GPU maps. */
  int hostMem = 0;
  CHECK(flagcxDevCommUsesHostMemory(dc, &hostMem));
  void *win = NULL;
  float *out = NULL;
  if (hostMem) {
    if (cudaHostAlloc(&win, winBytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
      return 1;
  } else {
    CHECK(flagcxMemAlloc(&win, winBytes, flagcxMemCCL));
  }
  cudaMalloc((void **)&out, count * sizeof(float));
  float *host = (float *)malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) host[i] = input(rank, i);
  cudaMemcpy((char *)win + 2 * (size_t)n * count * sizeof(float), host, count * sizeof(float),
             cudaMemcpyDefault);
  flagcxWindow_t w;
  CHECK(flagcxCommWindowRegister(comm, win, winBytes, &w, FLAGCX_WIN_COLL_SYMMETRIC, flagcxMemCCL));
  CHECK(flagcxDevMemCreate(comm, win, winBytes, w, &dm));
  void *dcPtr, *dmPtr;
  CHECK(flagcxDevCommGetDevicePtr(dc, &dcPtr));
  CHECK(flagcxDevMemGetDevicePtr(dm, &dmPtr));
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  unsigned round = 0;
  for (int warm = 0; warm < 5; warm++, round++)
    allreduce<<<1, THREADS>>>(dcPtr, dmPtr, out, rank, n, count, round);
  cudaDeviceSynchronize();
  cudaEventRecord(t0);
  for (int it = 0; it < iters; it++, round++)
    allreduce<<<1, THREADS>>>(dcPtr, dmPtr, out, rank, n, count, round);
  cudaEventRecord(t1);
  cudaEventSynchronize(t1);
  float ms = 0;
  cudaEventElapsedTime(&ms, t0, t1);
  int bad = cudaGetLastError() != cudaSuccess;
  cudaMemcpy(host, out, count * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < count && !bad; i++) {
    float want = (float)(n * (n + 1) / 2) + (float)n * (float)(i % 7);
    if (host[i] != want) {
      fprintf(stderr, "rank %d: element %zu is %g, want %g\n", rank, i, host[i], want);
      bad = 1;
    }
  }
  if (rank == 0 && !bad)
    printf("device_allreduce: %d ranks, %zu bytes, %s: %.2f us per allreduce (%d iterations)\n",
           n, bytes, hostMem ? "through the proxy" : "CUDA IPC", 1000.0 * ms / iters, iters);
  CHECK(flagcxDevMemDestroy(comm, dm));
  CHECK(flagcxDevCommDestroy(comm, dc));
  CHECK(flagcxCommWindowDeregister(comm, w));
  CHECK(flagcxCommDestroy(comm));
  if (hostMem) cudaFreeHost(win);
  else CHECK(flagcxMemFree(win, flagcxMemCCL));
  cudaFree(out);
  free(host);
  return bad;
}

struct Args {
  size_t bytes;
  int iters;
};

static int rankMain(int rank, int n, flagcxUniqueId *id, void *arg) {
  const struct Args *a = (const struct Args *)arg;
  return runRank(rank, n, id, a->bytes, a->iters);
}

int main(int argc, char **argv) {
  int one = argc > 2 && strcmp(argv[1], "--rank") == 0, rank = one ? atoi(argv[2]) : 0;
  if (one) argv += 2, argc -= 2; /* the rest as without --rank */
  int n = argc > 1 ? atoi(argv[1]) : 2;
  struct Args a = {argc > 2 ? (size_t)atoll(argv[2]) : 4096, argc > 3 ? atoi(argv[3]) : 1000};
  if (n < 2 || n > FORK_RANKS_MAX || a.bytes < sizeof(float) || a.iters < 1) {
    fprintf(stderr, "usage: %s [nranks 2..%d] [bytes] [iterations]\n", argv[0], FORK_RANKS_MAX);
    return 2;
  }
  /* The engine runs the communicator: a vendor pass-through (NCCL) has no
   * one-sided state, which device communicators are made of. */
  setenv("FLAGCX_USE_HETERO_COMM", "1", 0);
  if (one) {
    flagcxUniqueId id;
    if (rank < 0 || rank >= n || flagcxGetUniqueId(&id) != flagcxSuccess) return 2;
    return runRank(rank, n, &id, a.bytes, a.iters);
  }
  return forkRanks(n, rankMain, &a);
}
