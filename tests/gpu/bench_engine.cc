// The engine on device buffers (not a test): allreduce busbw with ranks that
// share the GPU(s), against copy bandwidths measured in the same run.
//
//   bench_engine [nranks] [maxMiB]        (default 2 ranks, 1024 MiB; exit 77 without a GPU)
//
// Passes, each with its own communicator:
//   direct  - the default on one host: payloads move GPU to GPU by CUDA IPC
//             (FLAGCX_USE_HETERO_COMM=1 keeps NCCL out of the way); each call
//             returns once it is done (FLAGCX_CUDA_STREAM_WAIT=handoff);
//   direct-value - the same with the user's stream held by
//             cuStreamWaitValue32 (asynchronous calls; FLAGCX_CUDA_STREAM_WAIT=value);
//   direct, host-function waits - the same, but the user's stream is held by
//             a blocking cudaLaunchHostFunc instead of cuStreamWaitValue32 (a
//             stream spinning on a wait keeps its context busy: with ranks
//             sharing a GPU, the GPU time-slices between their contexts);
//   staged  - FLAGCX_IPC_DISABLE=1 FLAGCX_SHM_DISABLE=1: device <-> pinned-host
//             copies pipelined with the socket transport (the path a peer on
//             another host takes);
//   staged-shm - the same over the shared-memory transport;
//   host, host-shm - host buffers with FLAGCX_DEVICE=host over each of those
//             transports: the engine's own time, which staging adds to.
// Each pass also times a barrier and a one-element allreduce on the stream
// (the fixed cost of a call).
// Bounds, measured by rank 0 in the same run:
//   direct: a device-to-device cudaMemcpy of the message (algbw C = S / t).
//           An allreduce of S bytes over n ranks on one GPU must at least read
//           the n inputs and write the n outputs (2nS bytes of traffic) where
//           a copy moves 2S: the bound on algbw is C / n, on busbw
//           C / n * 2(n-1)/n.  Reported: busbw / that bound.
//   staged: a pinned D2H copy of S bytes followed by an H2D copy of S bytes
//           (S / (t_d2h + t_h2d)); reported: the allreduce's algbw / that.
#include <cuda_runtime_api.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <new>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/common/harness.h"
#include "adapters/device/cuda/cuda_internal.h"
#include "gpu_common.h"

namespace {

using gputest::copyUs;
using gputest::nowSec;

struct Row {
  size_t bytes;
  double us, copyUs;
};


enum Pass { kDirect, kDirectValue, kDirectHostFunc, kHost, kHostShm, kStaged, kStagedShm, kPasses };
const char *passName(int p) {
  static const char *names[] = {"direct", "direct-value", "direct-hostfunc", "host", "host-shm", "staged", "staged-shm"};
  return names[p];
}
bool isStaged(int p) { return p == kStaged || p == kStagedShm; }
bool isHost(int p) { return p == kHost || p == kHostShm; }
bool overSocket(int p) { return p == kStaged || p == kHost; }

int rankBody(int rank, int nranks, flagcxUniqueId *id, size_t maxBytes, int pass, int outFd) {
  bool staged = isStaged(pass), host = isHost(pass);
  setenv("FLAGCX_DEVICE", host ? "host" : "cuda", 1);
  flagcx::paramsReload();
  if (pass == kDirectHostFunc) flagcx::cuda::forceWaitMode(flagcx::cuda::WaitMode::HostFunc);
  if (pass == kDirectValue) flagcx::cuda::forceWaitMode(flagcx::cuda::WaitMode::StreamWaitValue);
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
    if (staged || host) iters = std::max(3, iters / 5);
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
  // Fixed costs: a barrier (bytes 0 in the table) and a one-element allreduce.
  for (int kind = 0; kind < 2; kind++) {
    auto call = [&] {
      return kind == 0 ? flagcxBarrier(comm, s) : flagcxAllReduce(a, b, 1, flagcxFloat32, flagcxSum, comm, s);
    };
    for (int i = 0; i < 3; i++) RANK_OK(call());
    RANK_OK(h->streamSynchronize(s));
    const int iters = 100;
    double t0 = nowSec();
    for (int i = 0; i < iters; i++) RANK_OK(call());
    RANK_OK(h->streamSynchronize(s));
    rows.push_back({kind == 0 ? size_t(0) : size_t(4), (nowSec() - t0) / iters * 1e6, 0});
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
      if (r.bytes < 1024 || host) continue;  // fixed-cost rows and host buffers: no baseline
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

// What one hand-over of the GPU between two processes costs: two ranks take
// turns (a shared counter) issuing a 4-byte device copy and synchronizing;
// the same loop in one process, alone, is the baseline.  Without MPS the
// GPU time-slices between the processes' contexts, and the engine's direct
// mode hands over several times per call.
double handoverUs(bool twoProcs) {
  auto *turn = static_cast<std::atomic<int> *>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  auto *result = reinterpret_cast<double *>(reinterpret_cast<char *>(turn) + 64);
  new (turn) std::atomic<int>(0);
  const int kTurns = 400;
  harness::Result r = harness::run(twoProcs ? 2 : 1, [&](int rank, int nranks, flagcxUniqueId *) {
    if (cudaSetDevice(0) != cudaSuccess) return 1;
    cudaStream_t s;
    void *buf = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc(&buf, 64) != cudaSuccess)
      return 1;
    cudaMemcpyAsync(buf, static_cast<char *>(buf) + 32, 4, cudaMemcpyDeviceToDevice, s);
    cudaStreamSynchronize(s);
    double t0 = nowSec();
    for (int i = 0; i < kTurns; i++) {
      if (i % nranks != rank) continue;
      while (turn->load(std::memory_order_acquire) != i) {}
      cudaMemcpyAsync(buf, static_cast<char *>(buf) + 32, 4, cudaMemcpyDeviceToDevice, s);
      cudaStreamSynchronize(s);
      turn->store(i + 1, std::memory_order_release);
    }
    if (rank == 0) *result = (nowSec() - t0) / kTurns * 1e6;
    cudaFree(buf);
    cudaStreamDestroy(s);
    return 0;
  }, harness::Env{}, 60);
  double us = r.allOk() ? *result : -1;
  munmap(turn, 4096);
  return us;
}

}  // namespace

int main(int argc, char **argv) {
  if (int rc = gputest::skipUnlessGpu("bench_engine")) return rc;
  int nranks = argc > 1 ? atoi(argv[1]) : 2;
  size_t maxMiB = argc > 2 ? strtoull(argv[2], nullptr, 10) : 1024;
  size_t maxBytes = maxMiB << 20;
  printf("# allreduce float32 sum, %d ranks sharing the GPU(s), device buffers, times per call\n", nranks);
  {
    double one = handoverUs(false), two = handoverUs(true);
    printf("# 4-byte device copy + synchronize, turn by turn: one process %.1f us per turn, "
           "two processes sharing the GPU %.1f us per turn\n", one, two);
  }
  bool allOk = true;
  const char *only = getenv("BENCH_ENGINE_PASS");  // one pass by name, e.g. staged
  std::vector<Row> passRows[kPasses];
  for (int pass = 0; pass < kPasses; pass++) {
    if (only && *only && strcmp(only, passName(pass)) != 0) continue;
    bool staged = isStaged(pass), host = isHost(pass);
    int fds[2];
    if (pipe(fds) != 0) return 1;
    harness::Env env;
    env.vars = {{"FLAGCX_USE_HETERO_COMM", "1"}, {"FLAGCX_IPC_DISABLE", staged ? "1" : "0"},
                {"FLAGCX_SHM_DISABLE", overSocket(pass) ? "1" : "0"}, {"NCCL_NVLS_ENABLE", "0"}};
    size_t top = staged || host ? std::min(maxBytes, size_t(256) << 20) : maxBytes;
    harness::Result r = harness::run(nranks, [&](int rank, int n, flagcxUniqueId *id) {
      return rankBody(rank, n, id, top, pass, fds[1]);
    }, env, 580);
    close(fds[1]);
    size_t n = 0;
    std::vector<Row> &rows = passRows[pass];
    if (read(fds[0], &n, sizeof(n)) == sizeof(n) && n < 64) {
      rows.resize(n);
      if (read(fds[0], rows.data(), n * sizeof(Row)) != static_cast<ssize_t>(n * sizeof(Row))) rows.clear();
    }
    close(fds[0]);
    if (!r.allOk()) {
      printf("# %s: FAILED: %s\n", passName(pass), r.describe().c_str());
      allOk = false;
      continue;
    }
    double busF = 2.0 * (nranks - 1) / nranks;
    for (const Row &w : rows)
      if (w.bytes < 1024)
        printf("# %s: %s: %.1f us per call\n", passName(pass),
               w.bytes == 0 ? "barrier" : "allreduce of 1 float", w.us);
    rows.erase(std::remove_if(rows.begin(), rows.end(), [](const Row &w) { return w.bytes < 1024; }),
               rows.end());
    if (host) {
      printf("\n## %s (host buffers, FLAGCX_DEVICE=host, %s transport: what staging adds to)\n",
             passName(pass), overSocket(pass) ? "socket" : "shared-memory");
      printf("%10s %12s %12s %12s\n", "bytes", "time(us)", "algbw GB/s", "busbw GB/s");
      for (const Row &w : rows) {
        double alg = w.bytes / w.us / 1e3;
        printf("%10zu %12.1f %12.1f %12.1f\n", w.bytes, w.us, alg, alg * busF);
      }
    } else if (!staged) {
      printf("\n## %s (CUDA IPC, device to device%s)\n", passName(pass),
             pass == kDirectHostFunc ? ", streams held by host functions"
             : pass == kDirectValue ? ", streams held by cuStreamWaitValue32" : ", hand-off");
      printf("%10s %12s %12s %12s %14s %14s %8s\n", "bytes", "time(us)", "algbw GB/s", "busbw GB/s",
             "d2d copy GB/s", "bound busbw", "ratio");
      for (const Row &w : rows) {
        double alg = w.bytes / w.us / 1e3, copy = w.bytes / w.copyUs / 1e3;
        double bound = copy / nranks * busF;
        printf("%10zu %12.1f %12.1f %12.1f %14.1f %14.1f %7.1f%%\n", w.bytes, w.us, alg, alg * busF,
               copy, bound, 100.0 * alg * busF / bound);
      }
    } else {
      // The same exchange on host buffers (the host pass of this transport),
      // when it ran: the time staging adds.
      const std::vector<Row> &hr = passRows[overSocket(pass) ? kHost : kHostShm];
      printf("\n## %s (pinned host staging pipelined with the %s transport)\n", passName(pass),
             overSocket(pass) ? "socket" : "shared-memory");
      printf("%10s %12s %12s %12s %18s %8s %16s\n", "bytes", "time(us)", "algbw GB/s", "busbw GB/s",
             "d2h+h2d copy GB/s", "ratio", "host-buffers(us)");
      for (const Row &w : rows) {
        double alg = w.bytes / w.us / 1e3, copy = w.bytes / w.copyUs / 1e3;
        double hostUs = -1;
        for (const Row &x : hr)
          if (x.bytes == w.bytes) hostUs = x.us;
        printf("%10zu %12.1f %12.1f %12.1f %18.1f %7.1f%% %16.1f\n", w.bytes, w.us, alg, alg * busF,
               copy, 100.0 * alg / copy, hostUs);
      }
    }
  }
  return allOk ? 0 : 1;
}
