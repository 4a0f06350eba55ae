/* A one-kernel small-message allreduce (float sum) on the device API.  The
 * input is cut into slices, one per block; block b of each rank puts its
 * slice into slot `rank` of every peer's window with signal b
 * (flagcxDevPut_RSigInc), waits until the n-1 peers' slices b of the round
 * are in (signal b only), and sums slice b of the n slots in rank order, its
 * own input read in place.  Tiny messages take one block of as few threads
 * as they need; larger ones up to kMaxBlocks blocks of at least kSliceMin
 * bytes.  Two halves of the window alternate between rounds: a rank writes a
 * half again only after every peer's next round reached it, which that peer
 * sent after its whole previous kernel (every block) read the half.
 *
 * Written to the installed headers only:
 *   nvcc -std=c++17 -arch=sm_90 device_allreduce.cu $(pkg-config --cflags --libs flagcx)
 * Usage: device_allreduce [nranks 2..8] [bytes] [iterations] [blocks]; forks
 * the ranks, which share GPU rank % device count (CUDA IPC between them; with
 * FLAGCX_IPC_DISABLE=1 through the proxy, one block: every put is one
 * descriptor for the proxy thread).  blocks 0 or left out: chosen from the
 * size.  device_allreduce --rank R [nranks] [bytes] [iterations] [blocks]:
 * one rank of a job started elsewhere (FLAGCX_COMM_ID names it; ranks on
 * other hosts reach each other through the proxy).  The window is device
 * memory, or host memory the GPU maps where flagcxDevCommUsesHostMemory says
 * so.  Prints the mean time per allreduce (one kernel, launched and waited
 * for) and exits 0 when every element is right; 77 without a GPU. */
#include <cuda_runtime.h>
#include <flagcx.h>
#include <flagcx_device_unified.h>
#include <flagcx_kernel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fork_ranks.h"

static const int kMaxBlocks = 32;        /* signals requested: one per block */
static const size_t kSliceMin = 2048;    /* bytes per block at least */
static const int kMaxThreads = 512;

#define CHECK(call)                                                                      \
  do {                                                                                   \
    flagcxResult_t r_ = (call);                                                          \
    if (r_ != flagcxSuccess) {                                                           \
      fprintf(stderr, "rank %d: %s:%d %s failed: %s (%s)\n", rank, __FILE__, __LINE__,   \
              #call, flagcxGetErrorString(r_), flagcxGetLastError(NULL));                \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

/* Sums floats [lo, lo + len) of the n slots (own input for r == rank) into
 * out: float4 words when every slot is 16-byte aligned (bytes % 16 == 0). */
__device__ void reduceSlice(const char *base, size_t half, size_t input, size_t bytes, int rank,
                            int n, size_t lo, size_t len, float *out) {
  size_t done = 0;
  if (bytes % 16 == 0) {
    size_t words = len / 16;
    for (size_t i = threadIdx.x; i < words; i += blockDim.x) {
      float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int r = 0; r < n; r++) {
        size_t at = (r == rank ? input : half + (size_t)r * bytes) + lo + 16 * i;
        float4 x = *reinterpret_cast<const float4 *>(base + at);
        s.x += x.x, s.y += x.y, s.z += x.z, s.w += x.w;
      }
      reinterpret_cast<float4 *>(reinterpret_cast<char *>(out) + lo)[i] = s;
    }
    done = words * 16;
  }
  for (size_t i = done / 4 + threadIdx.x; i < len / 4; i += blockDim.x) {
    float s = 0.f;
    for (int r = 0; r < n; r++) {
      size_t at = (r == rank ? input : half + (size_t)r * bytes) + lo + 4 * i;
      s += *reinterpret_cast<const float *>(base + at);
    }
    reinterpret_cast<float *>(reinterpret_cast<char *>(out) + lo)[i] = s;
  }
}

/* Window layout in bytes: half h (0, 1) at h * n * bytes, slot r of it at
 * + r * bytes; this rank's input after both halves.  Block b: bytes
 * [b * slice, min((b + 1) * slice, bytes)), signal b. */
__global__ void allreduce(const void *comm, const void *win, float *out, int rank, int n,
                          size_t bytes, size_t slice, unsigned round) {
  size_t half = (round & 1u) * (size_t)n * bytes, input = 2 * (size_t)n * bytes;
  unsigned b = blockIdx.x;
  size_t lo = (size_t)b * slice, len = bytes - lo < slice ? bytes - lo : slice;
  for (int i = 1; i < n; i++) /* the next rank first: ranks spread over their peers */
    flagcxDevPut_RSigInc(comm, win, half + (size_t)rank * bytes + lo, win, input + lo, len,
                         FLAGCX_TEAM_WORLD, (rank + i) % n, 0, FLAGCX_COOP_BLOCK,
                         FLAGCX_MEMORY_SCOPE_DEVICE, FLAGCX_MEMORY_ORDER_RELEASE, b);
  flagcxDevWaitSignal(comm, b, (uint64_t)(round + 1) * (uint64_t)(n - 1), 64, 0,
                      FLAGCX_COOP_BLOCK, FLAGCX_MEMORY_ORDER_ACQUIRE);
  reduceSlice(((const flagcxDevMemView *)win)->base, half, input, bytes, rank, n, lo, len, out);
}

/* Blocks and threads for `bytes`: `want` blocks (0: by size, one through the
 * proxy), slices of whole 16-byte words. */
struct Shape {
  int blocks, threads;
  size_t slice;
};

static struct Shape shapeFor(size_t bytes, int want, int viaProxy) {
  int blocks = want > 0 ? want : viaProxy ? 1 : (int)((bytes + kSliceMin - 1) / kSliceMin);
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (blocks < 1) blocks = 1;
  size_t slice = (bytes + (size_t)blocks - 1) / (size_t)blocks;
  if (blocks > 1) slice = (slice + 15) / 16 * 16;
  struct Shape s;
  s.blocks = (int)((bytes + slice - 1) / slice);
  s.slice = slice;
  size_t threads = (slice + 15) / 16;
  threads = (threads + 31) / 32 * 32;
  s.threads = threads > (size_t)kMaxThreads ? kMaxThreads : (int)threads;
  return s;
}

static float input(int rank, size_t i) { return (float)(rank + 1) + (float)(i % 7); }

static int runRank(int rank, int n, flagcxUniqueId *id, size_t bytes, int iters, int blocks) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return 77;
  cudaSetDevice(rank % ndev);
  flagcxComm_t comm;
  CHECK(flagcxCommInitRank(&comm, n, id, rank));
  size_t count = bytes / sizeof(float), winBytes = (2 * (size_t)n + 1) * count * sizeof(float);
  bytes = count * sizeof(float);
  flagcxDevCommRequirements req = FLAGCX_DEV_COMM_REQUIREMENTS_INITIALIZER;
  req.interSignalCount = kMaxBlocks;
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
  struct Shape sh = shapeFor(bytes, blocks, hostMem);
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  unsigned round = 0;
  for (int warm = 0; warm < 5; warm++, round++)
    allreduce<<<sh.blocks, sh.threads>>>(dcPtr, dmPtr, out, rank, n, bytes, sh.slice, round);
  cudaDeviceSynchronize();
  cudaEventRecord(t0);
  for (int it = 0; it < iters; it++, round++)
    allreduce<<<sh.blocks, sh.threads>>>(dcPtr, dmPtr, out, rank, n, bytes, sh.slice, round);
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
    printf("device_allreduce: %d ranks, %zu bytes, %s, %d block(s) of %d threads: %.2f us per "
           "allreduce (%d iterations)\n", n, bytes, hostMem ? "through the proxy" : "CUDA IPC",
           sh.blocks, sh.threads, 1000.0 * ms / iters, iters);
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
  int iters, blocks;
};

static int rankMain(int rank, int n, flagcxUniqueId *id, void *arg) {
  const struct Args *a = (const struct Args *)arg;
  return runRank(rank, n, id, a->bytes, a->iters, a->blocks);
}

int main(int argc, char **argv) {
  int one = argc > 2 && strcmp(argv[1], "--rank") == 0, rank = one ? atoi(argv[2]) : 0;
  if (one) argv += 2, argc -= 2; /* the rest as without --rank */
  int n = argc > 1 ? atoi(argv[1]) : 2;
  struct Args a = {argc > 2 ? (size_t)atoll(argv[2]) : 4096, argc > 3 ? atoi(argv[3]) : 1000,
                   argc > 4 ? atoi(argv[4]) : 0};
  if (n < 2 || n > FORK_RANKS_MAX || a.bytes < sizeof(float) || a.iters < 1 || a.blocks < 0 ||
      a.blocks > kMaxBlocks) {
    fprintf(stderr, "usage: %s [nranks 2..%d] [bytes] [iterations] [blocks 0..%d]\n", argv[0],
            FORK_RANKS_MAX, kMaxBlocks);
    return 2;
  }
  /* The engine runs the communicator: a vendor pass-through (NCCL) has no
   * one-sided state, which device communicators are made of. */
  setenv("FLAGCX_USE_HETERO_COMM", "1", 0);
  if (one) {
    flagcxUniqueId id;
    if (rank < 0 || rank >= n || flagcxGetUniqueId(&id) != flagcxSuccess) return 2;
    return runRank(rank, n, &id, a.bytes, a.iters, a.blocks);
  }
  return forkRanks(n, rankMain, &a);
}
