// bench_onesided [maxMiB]: PutSignal into a device window of another process
// on the same host (CUDA IPC + the copy engine), against the device-to-device
// copy rate of one cudaMemcpyAsync on the same GPU, measured in the same run.
// Not a test (tools/gpu-check.sh runs it when GPU_CHECK_BENCH is not 0).
//
// Two forked ranks (GPU = rank % visible GPUs; both on GPU 0 with
// CUDA_VISIBLE_DEVICES=0), engine communicator.  Rank 0 puts `iters` blocks
// of the size into rank 1's window with flagcxPutSignal on one stream; rank 1
// waits for `iters` signals on its stream and answers with one flagcxSignal;
// rank 0's time runs from the first put to that answer.  Every put's bytes
// are checked once per size (the first and last byte of each block).
// Output: one row per size, times in µs, GB/s = bytes / time.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu_common.h"
#include "tests/common/harness.h"

namespace {

using gputest::nowSec;

int body(int rank, int nranks, flagcxUniqueId *id, size_t maxBytes, int outFd) {
  flagcxDeviceHandle_t dev;
  RANK_OK(flagcxDeviceHandleInit(&dev));
  int ndev = 0;
  RANK_OK(dev->getDeviceCount(&ndev));
  RANK_OK(dev->setDevice(rank % (ndev > 0 ? ndev : 1)));
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
  flagcxStream_t s;
  RANK_OK(dev->streamCreate(&s));
  void *win = nullptr, *src = nullptr, *local = nullptr;
  RANK_OK(flagcxMemAlloc(&win, maxBytes, flagcxMemCCL));
  RANK_OK(flagcxMemAlloc(&src, maxBytes, flagcxMemCCL));
  RANK_OK(flagcxMemAlloc(&local, maxBytes, flagcxMemCCL));
  RANK_OK(dev->deviceMemset(win, 0, maxBytes, flagcxMemDevice, nullptr));
  RANK_OK(dev->deviceMemset(src, 0x5a + rank, maxBytes, flagcxMemDevice, nullptr));
  RANK_OK(dev->deviceSynchronize());
  flagcxWindow_t w = nullptr;
  RANK_OK(flagcxCommWindowRegister(comm, win, maxBytes, &w, FLAGCX_WIN_COLL_SYMMETRIC, flagcxMemCCL));
  char line[256];
  for (size_t bytes = 1 << 20; bytes <= maxBytes; bytes *= 4) {
    int iters = static_cast<int>(std::max<size_t>(5, std::min<size_t>(50, (size_t(8) << 30) / bytes)));
    double best = 1e30;
    for (int rep = 0; rep < 4; rep++) {  // rep 0 warms up
      RANK_OK(flagcxBarrier(comm, s));
      RANK_OK(dev->streamSynchronize(s));
      if (rank == 0) {
        double t0 = nowSec();
        for (int i = 0; i < iters; i++)
          RANK_OK(flagcxPutSignal(src, bytes, flagcxUint8, 1, w, 0, 0, comm, s));
        flagcxWaitSignalDesc_t d{1, 1};
        RANK_OK(flagcxWaitSignal(1, &d, comm, s));
        RANK_OK(dev->streamSynchronize(s));
        double us = (nowSec() - t0) / iters * 1e6;
        if (rep > 0) best = std::min(best, us);
      } else if (rank == 1) {
        flagcxWaitSignalDesc_t d{static_cast<uint64_t>(iters), 0};
        RANK_OK(flagcxWaitSignal(1, &d, comm, s));
        RANK_OK(flagcxSignal(0, 0, comm, s));
        RANK_OK(dev->streamSynchronize(s));
        unsigned char edge[2] = {0, 0};
        RANK_OK(dev->deviceMemcpy(&edge[0], win, 1, flagcxMemcpyDeviceToHost, nullptr));
        RANK_OK(dev->deviceMemcpy(&edge[1], static_cast<char *>(win) + bytes - 1, 1,
                                  flagcxMemcpyDeviceToHost, nullptr));
        RANK_CHECK(edge[0] == 0x5a && edge[1] == 0x5a, "%zu bytes: window holds %d/%d, want %d",
                   bytes, edge[0], edge[1], 0x5a);
      }
    }
    if (rank == 0) {
      double copy = gputest::copyUs(local, src, bytes, cudaMemcpyDeviceToDevice, iters);
      snprintf(line, sizeof(line), "%12zu %12.1f %10.1f %12.1f %10.1f %8.2f\n", bytes, best,
               bytes / best / 1e3, copy, bytes / copy / 1e3, copy / best);
      ssize_t wr = write(outFd, line, strlen(line));
      (void)wr;
    }
  }
  RANK_OK(flagcxBarrier(comm, s));
  RANK_OK(dev->streamSynchronize(s));
  RANK_OK(flagcxCommWindowDeregister(comm, w, flagcxMemCCL));
  RANK_OK(dev->streamDestroy(s));
  RANK_OK(flagcxCommDestroy(comm));
  RANK_OK(flagcxMemFree(win, flagcxMemCCL));
  RANK_OK(flagcxMemFree(src, flagcxMemCCL));
  RANK_OK(flagcxMemFree(local, flagcxMemCCL));
  RANK_OK(flagcxDeviceHandleFree(dev));
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (int rc = gputest::skipUnlessGpu("bench_onesided")) return rc;
  size_t maxMiB = argc > 1 ? strtoul(argv[1], nullptr, 10) : 256;
  size_t maxBytes = std::max<size_t>(1, maxMiB) << 20;
  int fds[2];
  if (pipe(fds) != 0) return 1;
  harness::Env env{{{"FLAGCX_DEVICE", "cuda"}, {"FLAGCX_USE_HETERO_COMM", "1"}, {"FLAGCX_TIMEOUT", "60"}}};
  auto r = harness::run(2, [&](int rank, int n, flagcxUniqueId *id) {
    return body(rank, n, id, maxBytes, fds[1]);
  }, env, 300);
  close(fds[1]);
  printf("# flagcxPutSignal into a device window of another process (2 ranks, same host), vs one\n"
         "# cudaMemcpyAsync device-to-device of the same size on rank 0's GPU; best of 3 rounds\n");
  printf("%12s %12s %10s %12s %10s %8s\n", "bytes", "put(us)", "GB/s", "d2d(us)", "GB/s", "ratio");
  char buf[4096];
  ssize_t k;
  while ((k = read(fds[0], buf, sizeof(buf))) > 0) fwrite(buf, 1, static_cast<size_t>(k), stdout);
  close(fds[0]);
  if (!r.allOk()) {
    fprintf(stderr, "bench_onesided: %s\n", r.describe().c_str());
    return 1;
  }
  return 0;
}
