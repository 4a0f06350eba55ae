// Allreduce with 2 ranks in one process on one GPU through the drop-in
// (ncclCommInitAll with devlist {0, 0}): time per call against the bound of a
// one-GPU allreduce, measured in the same run.  A benchmark, not a test:
// tools/dev/nccl-dropin-gpu.sh builds it with nvcc and keeps its output.
//
// Bound: each of n ranks on one GPU reads its input and writes its output,
// and the reduction reads every input once more, so a 2-rank allreduce moves
// at least what n device-to-device copies of the message move.  With C the
// copy's algbw (S / t_copy), busbw (S/t x 2(n-1)/n) cannot exceed
// C/n x 2(n-1)/n = C/2 at n = 2 (docs/GPU.md uses the same bound).
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "nccl_gpu_check.h"

int main(int argc, char **argv) {
  const int n = 2;
  size_t maxMiB = argc > 1 ? strtoull(argv[1], nullptr, 10) : 1024;
  int devs[n] = {0, 0};
  ncclComm_t comm[n];
  CK(ncclCommInitAll(comm, n, devs));
  size_t maxBytes = maxMiB << 20;
  float *in[n], *out[n];
  cudaStream_t s[n];
  for (int k = 0; k < n; k++) {
    CU(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
    CU(cudaMalloc(&in[k], maxBytes));
    CU(cudaMalloc(&out[k], maxBytes));
    CU(cudaMemset(in[k], 0, maxBytes));
  }
  printf("2 ranks in one process on GPU 0, float32 sum, out of place\n");
  printf("%10s %12s %12s %14s %12s %8s\n", "bytes", "time us", "busbw GB/s", "copy algbw", "bound GB/s",
         "ratio");
  for (size_t mib = 1; mib <= maxMiB; mib *= 4) {
    size_t bytes = mib << 20, count = bytes / sizeof(float);
    int iters = mib >= 256 ? 20 : 50;
    auto allreduce = [&]() -> int {
      CK(ncclGroupStart());
      for (int k = 0; k < n; k++) CK(ncclAllReduce(in[k], out[k], count, ncclFloat, ncclSum, comm[k], s[k]));
      CK(ncclGroupEnd());
      return 0;
    };
    auto sync = [&]() -> int {
      for (int k = 0; k < n; k++) CU(cudaStreamSynchronize(s[k]));
      return 0;
    };
    for (int w = 0; w < 3; w++)
      if (allreduce()) return 1;
    if (sync()) return 1;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; i++)
      if (allreduce()) return 1;
    if (sync()) return 1;
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    // The copy bound, same buffers, same run.
    CU(cudaMemcpyAsync(out[0], in[0], bytes, cudaMemcpyDeviceToDevice, s[0]));
    CU(cudaStreamSynchronize(s[0]));
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; i++) CU(cudaMemcpyAsync(out[0], in[0], bytes, cudaMemcpyDeviceToDevice, s[0]));
    CU(cudaStreamSynchronize(s[0]));
    double cus = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    double busbw = bytes / us / 1e3, copy = bytes / cus / 1e3, bound = copy / 2;
    printf("%10zu %12.1f %12.1f %14.1f %12.1f %7.1f%%\n", bytes, us, busbw, copy, bound, 100 * busbw / bound);
  }
  for (int k = 0; k < n; k++) CK(ncclCommDestroy(comm[k]));
  printf("same_process_bench: done\n");
  return 0;
}
