// The engine on device buffers (not a test): allreduce busbw with ranks that
// share the GPU(s), against copy bandwidths measured in the same run.
//
//   bench_engine [nranks] [maxMiB]        (default 2 ranks, 1024 MiB; exit 77 without a GPU)
//
// Two passes, each with its own communicator:
//   direct  - the default on one host: payloads move GPU to GPU by CUDA IPC
//             (FLAGCX_USE_HETERO_COMM=1 keeps NCCL out of the way);
//   staged  - FLAGCX_IPC_DISABLE=1 FLAGCX_SHM_DISABLE=1: whole-buffer device <->
//             pinned-host copies around the socket transport (the path a peer
//             on another host takes).
// Bounds, measured by rank 0 in the same run:
//   direct: a device-to-device cudaMemcpy of the message (algbw C = S / t).
//           An allreduce of S bytes over n ranks on one GPU must at least read
//           the n inputs and write the n outputs (2nS bytes of traffic) where
//           a copy moves 2S: the bound on algbw is C / n, on busbw
//           C / n * 2(n-1)/n.  Reported: busbw / that bound.
//   staged: a pinned D2H copy of S bytes followed by an H2D copy of S bytes
//           (S / (t_d2h + t_h2d)); reported: the allreduce's algbw / that.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../mr/harness.h"
#include "gpu_common.h"

namespace {

double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Row {
  size_t bytes;
  double us, copyUs;
};

// Copy baselines on this rank's GPU (rank 0, while the other ranks wait).
double copyUs(void *dst, void *src, size_t bytes, cudaMemcpyKind kind, int iters) {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  for (int i = 0; i < 2; i++) cudaMemcpyAsync(dst, src, bytes, kind, s);
  cudaStreamSynchronize(s);
  double t0 = nowSec();
  for (int i = 0; i < iters; i++) cudaMemcpyAsync(dst, src, bytes, kind, s);
  cudaStreamSynchronize(s);
  double t = (nowSec() - t0) / iters * 1e6;
  cudaStreamDestroy(s);
  return t;
}

int rankBody(int rank, int nranks, flagcxUniqueId *id, size_t maxBytes, bool staged, int outFd) {
  setenv("FLAGCX_DEVICE", "cuda", 1);
  flagcx::paramsReload();
  flagcxDeviceHandle_t h;
  RANK_OK(flagcxDeviceHandleInit(&h));
  int ngpu = 0;
  RANK_OK(h->getDeviceCount(&ngpu));
  RANK_OK(h->setDevice(rank % ngpu));
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
  flagcxStream_t s;
  RANK_OK(h->streamCreate(&s));
  void *a = nullptr, *b = nullptr;
  RANK_OK(h->deviceMalloc(&a, maxBytes, flagcxMemDevice, nullptr));
  RANK_OK(h->deviceMalloc(&b, maxBytes, flagcxMemDevice, nullptr));
  RANK_OK(h->deviceMemset(a, 0, maxBytes, flagcxMemDevice, nullptr));
  std::vector<Row> rows;
  for (size_t bytes = 1 << 20; bytes <= maxBytes; bytes *= 4) {
    size_t count = bytes / 4;
    int iters = static_cast<int>(std::max<size_t>(5, std::min<size_t>(50, (size_t(8) << 30) / bytes)));
    if (staged) iters = std::max(3, iters / 5);
    for (int i = 0; i < 2; i++)
      RANK_OK(flagcxAllReduce(a, b, count, flagcxFloat32, flagcxSum, comm, s));
    RANK_OK(h->streamSynchronize(s));
    RANK_OK(flagcxBarrier(comm, s));
    RANK_OK(h->streamSynchronize(s));
    double t0 = nowSec();
    for (int i = 0; i < iters; i++)
      RANK_OK(flagcxAllReduce(a, b, count, flagcxFloat32, flagcxSum, comm, s));
    RANK_OK(h->streamSynchronize(s));
    double us = (nowSec() - t0) / iters * 1e6;
    rows.push_back({bytes, us, 0});
  }
  // Check one result: every element is nranks * 0 = 0 after memset; use a
  // small nonzero allreduce instead to make sure data moved.
  {
    std::vector<float> v(4099, static_cast<float>(rank + 1)), got(4099);
    RANK_OK(h->deviceMemcpy(a, v.data(), v.size() * 4, flagcxMemcpyHostToDevice, nullptr));
    RANK_OK(h->deviceSynchronize());  // s does not wait for the legacy stream by itself
    RANK_OK(flagcxAllReduce(a, b, v.size(), flagcxFloat32, flagcxSum, comm, s));
    RANK_OK(h->streamSynchronize(s));
    RANK_OK(h->deviceMemcpy(got.data(), b, got.size() * 4, flagcxMemcpyDeviceToHost, nullptr));
    float want = static_cast<float>(nranks * (nranks + 1) / 2);
    for (size_t i = 0; i < got.size(); i++) RANK_CHECK(got[i] == want, "elem %zu = %g", i, got[i]);
  }
  RANK_OK(flagcxBarrier(comm, s));
  RANK_OK(h->streamSynchronize(s));
  if (rank == 0) {
    void *pinned = nullptr;
    if (staged) RANK_CHECK(cudaHostAlloc(&pinned, maxBytes, cudaHostAllocDefault) == cudaSuccess, "pinned");
    for (Row &r : rows) {
      int iters = static_cast<int>(std::max<size_t>(5, std::min<size_t>(50, (size_t(8) << 30) / r.bytes)));
      r.copyUs = staged ? copyUs(pinned, a, r.bytes, cudaMemcpyDeviceToHost, iters) +
                              copyUs(b, pinned, r.bytes, cudaMemcpyHostToDevice, iters)
                        : copyUs(b, a, r.bytes, cudaMemcpyDeviceToDevice, iters);
    }
    if (pinned) cudaFreeHost(pinned);
    size_t n = rows.size();
    if (write(outFd, &n, sizeof(n)) != sizeof(n) ||
        write(outFd, rows.data(), n * sizeof(Row)) != static_cast<ssize_t>(n * sizeof(Row)))
      return 3;
  }
  RANK_OK(flagcxBarrier(comm, s));
  RANK_OK(h->streamSynchronize(s));
  h->deviceFree(a, flagcxMemDevice, nullptr);
  h->deviceFree(b, flagcxMemDevice, nullptr);
  RANK_OK(h->streamDestroy(s));
  RANK_OK(flagcxCommDestroy(comm));
  RANK_OK(flagcxDeviceHandleFree(h));
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (int rc = gputest::skipUnlessGpu("bench_engine")) return rc;
  int nranks = argc > 1 ? atoi(argv[1]) : 2;
  size_t maxMiB = argc > 2 ? strtoull(argv[2], nullptr, 10) : 1024;
  size_t maxBytes = maxMiB << 20;
  printf("# allreduce float32 sum, %d ranks sharing the GPU(s), device buffers, times per call\n", nranks);
  bool allOk = true;
  for (int staged = 0; staged < 2; staged++) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    mr::Env env;
    env.vars = {{"FLAGCX_USE_HETERO_COMM", "1"}, {"FLAGCX_IPC_DISABLE", staged ? "1" : "0"},
                {"FLAGCX_SHM_DISABLE", staged ? "1" : "0"}, {"NCCL_NVLS_ENABLE", "0"}};
    size_t top = staged ? std::min(maxBytes, size_t(256) << 20) : maxBytes;
    mr::Result r = mr::run(nranks, [&](int rank, int n, flagcxUniqueId *id) {
      return rankBody(rank, n, id, top, staged, fds[1]);
    }, env, 580);
    close(fds[1]);
    size_t n = 0;
    std::vector<Row> rows;
    if (read(fds[0], &n, sizeof(n)) == sizeof(n) && n < 64) {
      rows.resize(n);
      if (read(fds[0], rows.data(), n * sizeof(Row)) != static_cast<ssize_t>(n * sizeof(Row))) rows.clear();
    }
    close(fds[0]);
    if (!r.allOk()) {
      printf("# %s: FAILED: %s\n", staged ? "staged" : "direct", r.describe().c_str());
      allOk = false;
      continue;
    }
    double busF = 2.0 * (nranks - 1) / nranks;
    if (!staged) {
      printf("\n## direct (CUDA IPC, device to device)\n");
      printf("%10s %12s %12s %12s %14s %14s %8s\n", "bytes", "time(us)", "algbw GB/s", "busbw GB/s",
             "d2d copy GB/s", "bound busbw", "ratio");
      for (const Row &w : rows) {
        double alg = w.bytes / w.us / 1e3, copy = w.bytes / w.copyUs / 1e3;
        double bound = copy / nranks * busF;
        printf("%10zu %12.1f %12.1f %12.1f %14.1f %14.1f %7.1f%%\n", w.bytes, w.us, alg, alg * busF,
               copy, bound, 100.0 * alg * busF / bound);
      }
    } else {
      printf("\n## staged (pinned host staging + socket transport)\n");
      printf("%10s %12s %12s %12s %18s %8s\n", "bytes", "time(us)", "algbw GB/s", "busbw GB/s",
             "d2h+h2d copy GB/s", "ratio");
      for (const Row &w : rows) {
        double alg = w.bytes / w.us / 1e3, copy = w.bytes / w.copyUs / 1e3;
        printf("%10zu %12.1f %12.1f %12.1f %18.1f %7.1f%%\n", w.bytes, w.us, alg, alg * busF, copy,
               100.0 * alg / copy);
      }
    }
  }
  return allOk ? 0 : 1;
}
