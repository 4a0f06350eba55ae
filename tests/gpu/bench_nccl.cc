// The NCCL pass-through's own cost (not a test): allreduce on one GPU at
// nranks 1, through flagcx (a homogeneous CUDA communicator hands every call
// to NCCL) and through NCCL called directly, in one process, on the same
// buffers and the same stream, alternating in rounds; the best round of each
// is reported.  Small messages measure what a call costs the host (launch
// rate), large ones the GPU time.
//
//   bench_nccl [maxMiB]     (default 256; exit 77 without a GPU or NCCL)
//
// NCCL is loaded the way the library loads it: FLAGCX_NCCL_LIB, else
// libnccl.so.2.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/params.h"
#include "flagcx.h"
#include "gpu_common.h"

namespace {

double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Nccl {
  ncclResult_t (*getUniqueId)(ncclUniqueId *);
  ncclResult_t (*commInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*allReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*commDestroy)(ncclComm_t);
};

#define CK(x)                                                         \
  do {                                                                \
    if (!(x)) {                                                       \
      fprintf(stderr, "bench_nccl: %s failed (line %d)\n", #x, __LINE__); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

}  // namespace

int main(int argc, char **argv) {
  if (int rc = gputest::skipUnlessGpu("bench_nccl")) return rc;
  size_t maxBytes = (argc > 1 ? strtoull(argv[1], nullptr, 10) : 256) << 20;
  const char *path = getenv("FLAGCX_NCCL_LIB");
  if (!path || !*path) path = "libnccl.so.2";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("bench_nccl: SKIP: cannot load %s (%s)\n", path, dlerror());
    return gputest::kSkip;
  }
  Nccl n{};
  n.getUniqueId = reinterpret_cast<decltype(n.getUniqueId)>(dlsym(lib, "ncclGetUniqueId"));
  n.commInitRank = reinterpret_cast<decltype(n.commInitRank)>(dlsym(lib, "ncclCommInitRank"));
  n.allReduce = reinterpret_cast<decltype(n.allReduce)>(dlsym(lib, "ncclAllReduce"));
  n.commDestroy = reinterpret_cast<decltype(n.commDestroy)>(dlsym(lib, "ncclCommDestroy"));
  CK(n.getUniqueId && n.commInitRank && n.allReduce && n.commDestroy);

  setenv("FLAGCX_DEVICE", "cuda", 1);
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  flagcx::paramsReload();
  CK(cudaSetDevice(0) == cudaSuccess);
  flagcxUniqueId fid;
  CK(flagcxGetUniqueId(&fid) == flagcxSuccess);
  flagcxComm_t fc = nullptr;
  CK(flagcxCommInitRank(&fc, 1, &fid, 0) == flagcxSuccess);
  int homo = 0;
  CK(flagcxIsHomoComm(fc, &homo) == flagcxSuccess);
  if (!homo) {
    printf("bench_nccl: the flagcx communicator is not homogeneous (NCCL not used); nothing to compare\n");
    return 1;
  }
  ncclUniqueId nid;
  ncclComm_t nc = nullptr;
  CK(n.getUniqueId(&nid) == ncclSuccess);
  CK(n.commInitRank(&nc, 1, nid, 0) == ncclSuccess);

  cudaStream_t cs;
  CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) == cudaSuccess);
  flagcxDeviceHandle_t h;
  CK(flagcxDeviceHandleInit(&h) == flagcxSuccess);
  flagcxStream_t fs = nullptr;
  CK(h->streamCopy(&fs, cs) == flagcxSuccess);
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, maxBytes) == cudaSuccess && cudaMalloc(&b, maxBytes) == cudaSuccess);
  CK(cudaMemset(a, 0, maxBytes) == cudaSuccess);

  printf("# allreduce float32 sum, nranks 1, device buffers, out of place; time per call,\n"
         "# best of 7 rounds (each round: N back-to-back calls, then one stream synchronize)\n");
  printf("%12s %8s %12s %12s %12s %9s\n", "bytes", "calls", "nccl (us)", "flagcx (us)", "diff (us)",
         "diff (%)");
  for (size_t bytes = 4; bytes <= maxBytes; bytes *= (bytes < 4096 ? 16 : 8)) {
    size_t count = bytes / 4;
    int iters = static_cast<int>(std::max<size_t>(20, std::min<size_t>(2000, (size_t(16) << 30) / bytes / 8)));
    double best[2] = {1e30, 1e30};
    for (int round = 0; round < 7; round++) {
      for (int which = 0; which < 2; which++) {
        auto call = [&] {
          return which == 0 ? (n.allReduce(a, b, count, ncclFloat32, ncclSum, nc, cs) == ncclSuccess)
                            : (flagcxAllReduce(a, b, count, flagcxFloat32, flagcxSum, fc, fs) == flagcxSuccess);
        };
        CK(call() && call());  // warm
        CK(cudaStreamSynchronize(cs) == cudaSuccess);
        double t0 = nowSec();
        for (int i = 0; i < iters; i++) CK(call());
        CK(cudaStreamSynchronize(cs) == cudaSuccess);
        best[which] = std::min(best[which], (nowSec() - t0) / iters * 1e6);
      }
    }
    printf("%12zu %8d %12.2f %12.2f %12.2f %8.1f%%\n", bytes, iters, best[0], best[1],
           best[1] - best[0], 100.0 * (best[1] - best[0]) / best[0]);
  }
  cudaFree(a);
  cudaFree(b);
  CK(h->streamFree(fs) == flagcxSuccess);
  CK(flagcxDeviceHandleFree(h) == flagcxSuccess);
  cudaStreamDestroy(cs);
  n.commDestroy(nc);
  CK(flagcxCommDestroy(fc) == flagcxSuccess);
  return 0;
}
