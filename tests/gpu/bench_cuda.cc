// GPU micro-benchmarks of the CUDA adapter (not a test):
//  1. reduce kernel throughput (f32, bf16, e4m3) vs cudaMemcpyAsync
//     device-to-device, measured in the same run; bytes count what moves
//     through memory (copy: read + write = 2x; reduce: 2 reads + 1 write =
//     3x the buffer); the ordered fold of 2, 4, 8 sources likewise;
//  2. host tasks in stream order: enqueue -> stream completion round trip.
// Usage: bench_cuda [maxMiB]   (exits 77 without a usable GPU)
#include <cuda_runtime_api.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "adapters/device/cuda/cuda_internal.h"
#include "adapters/device/cuda/cuda_kernels.h"
#include "gpu_common.h"

using namespace flagcx;

#define CU(x)                                                                    \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)
#define FX(x)                                                                     \
  do {                                                                            \
    flagcxResult_t r_ = (x);                                                      \
    if (r_ != flagcxSuccess) {                                                    \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, flagcxGetLastError(nullptr)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

template <class F>
double timeMs(cudaStream_t s, int iters, F f) {
  cudaEvent_t a, b;
  CU(cudaEventCreate(&a));
  CU(cudaEventCreate(&b));
  for (int i = 0; i < 3; i++) f();  // warm-up
  CU(cudaEventRecord(a, s));
  for (int i = 0; i < iters; i++) f();
  CU(cudaEventRecord(b, s));
  CU(cudaEventSynchronize(b));
  float ms = 0;
  CU(cudaEventElapsedTime(&ms, a, b));
  CU(cudaEventDestroy(a));
  CU(cudaEventDestroy(b));
  return ms / iters;
}

flagcxResult_t nop(void *) { return flagcxSuccess; }

// Watchdog: each phase must finish within its alarm, else say which one hung.
const char *g_phase = "start";
void onAlarm(int) {
  char msg[256];
  int n = snprintf(msg, sizeof(msg), "bench_cuda: HUNG in phase '%s'\n", g_phase);
  ssize_t w = write(2, msg, static_cast<size_t>(n));
  (void)w;
  _exit(3);
}
void phase(const char *name, unsigned seconds) {
  g_phase = name;
  alarm(seconds);
}

// The ordered fold (foldAsync, on the adapter's private stream) of n
// sources of 64 MiB (four slices of a and four of b): bytes moved are
// (n + 1) x the source, against the copy rate; every FP8 and wide dtype.
void foldBandwidth(DeviceAdapter *A, cudaStream_t s, void *a, void *b, void *d, size_t maxBytes) {
  phase("fold bandwidth", 240);
  const size_t bytes = std::min<size_t>(maxBytes / 4, 64u << 20);
  cudaStream_t fs = cuda::internalStream(cuda::currentDevice());
  double tc = timeMs(s, 20, [&] { CU(cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice, s)); });
  struct Case {
    const char *name;
    flagcxDataType_t dt;
  } cases[] = {{"f32", flagcxFloat32}, {"f64", flagcxFloat64}, {"bf16", flagcxBfloat16},
               {"f16", flagcxFloat16}, {"e4m3", flagcxFloat8e4m3}, {"e5m2", flagcxFloat8e5m2}};
  printf("\nfold of n sources of %zu MiB (bytes moved: (n+1) x source; memcpy %.0f GB/s):\n",
         bytes >> 20, 2.0 * bytes / tc / 1e6);
  for (const Case &c : cases)
    for (int n : {2, 4, 8}) {
      const void *srcs[8];
      for (int k = 0; k < n; k++)
        srcs[k] = static_cast<char *>(k % 2 ? b : a) + (k / 2) * bytes;
      size_t count = bytes / getFlagcxDataTypeSize(c.dt);
      double tf = timeMs(fs, 20, [&] { FX(A->foldAsync(d, srcs, n, count, c.dt, flagcxSum)); });
      double bw = (n + 1.0) * bytes / tf / 1e6, bwc = 2.0 * bytes / tc / 1e6;
      printf("fold %-5s sum n=%d: %.0f GB/s (%.1f%% of memcpy)\n", c.name, n, bw, 100 * bw / bwc);
    }
}

// The reduce kernels (f32, bf16, e4m3 sum) against cudaMemcpy D2D, 1 MiB to
// maxMiB.
void reduceBandwidth(DeviceAdapter *A, cudaStream_t s, flagcxStream_t fs, void *a, void *b, void *d,
                     size_t maxMiB) {
  printf("\n%-10s %12s %14s %14s %8s %14s %8s %14s %8s\n", "size", "memcpy GB/s", "f32 sum GB/s", "ratio",
         "", "bf16 sum GB/s", "ratio", "e4m3 sum GB/s", "ratio");
  for (size_t mib = 1; mib <= maxMiB; mib *= 4) {
    phase("reduce bandwidth", 60);
    size_t bytes = mib << 20;
    int iters = mib >= 256 ? 10 : mib >= 16 ? 50 : 200;
    double tc = timeMs(s, iters, [&] { CU(cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice, s)); });
    double tf = timeMs(s, iters, [&] { FX(A->reduce(d, a, b, bytes / 4, flagcxFloat32, flagcxSum, fs)); });
    double tb = timeMs(s, iters, [&] { FX(A->reduce(d, a, b, bytes / 2, flagcxBfloat16, flagcxSum, fs)); });
    double t8 = timeMs(s, iters, [&] { FX(A->reduce(d, a, b, bytes, flagcxFloat8e4m3, flagcxSum, fs)); });
    double bwc = 2.0 * bytes / tc / 1e6, bwf = 3.0 * bytes / tf / 1e6, bwb = 3.0 * bytes / tb / 1e6;
    double bw8 = 3.0 * bytes / t8 / 1e6;
    printf("%6zu MiB %12.0f %14.0f %13.1f%% %8s %14.0f %7.1f%% %14.0f %7.1f%%\n", mib, bwc, bwf,
           100 * bwf / bwc, "", bwb, 100 * bwb / bwc, bw8, 100 * bw8 / bwc);
  }
}

// Operands without a common 16-byte boundary (the narrower word paths),
// against the aligned cudaMemcpy of the same size, on every MisalignedPath.
void misalignedReduce(DeviceAdapter *A, cudaStream_t s, flagcxStream_t fs, void *a, void *b, void *d,
                      size_t maxBytes) {
  phase("misaligned reduce", 480);
  size_t bytes = std::min<size_t>(maxBytes, 256u << 20) - 64;
  double tc = timeMs(s, 10, [&] { CU(cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice, s)); });
  struct Case {
    const char *name;
    flagcxDataType_t dt;
    size_t od, oa, ob;  // byte offsets of dst, a, b
  } cases[] = {{"f32 d+4 a+8 b+0", flagcxFloat32, 4, 8, 0},
               {"f32 d+0 a+8 b+8", flagcxFloat32, 0, 8, 8},
               {"f64 d+8 a+0 b+0", flagcxFloat64, 8, 0, 0},
               {"bf16 d+2 a+0 b+6", flagcxBfloat16, 2, 0, 6},
               {"i8 d+1 a+0 b+3", flagcxInt8, 1, 0, 3}};
  using P = cuda::MisalignedPath;
  const char *names[] = {"best", "realign", "words", "shuffle4", "chunk", "chunkLine"};
  static_assert(sizeof(names) / sizeof(names[0]) == cuda::kMisalignedPaths);
  for (P path : {P::best, P::realign, P::words, P::shuffle4, P::chunk, P::chunkLine}) {
    cuda::g_misaligned = path;
    const char *pname = names[static_cast<int>(path)];
    for (const Case &c : cases) {
      size_t ts = getFlagcxDataTypeSize(c.dt);
      double tf = timeMs(s, 10, [&] {
        FX(A->reduce(static_cast<char *>(d) + c.od, static_cast<char *>(a) + c.oa,
                     static_cast<char *>(b) + c.ob, bytes / ts, c.dt, flagcxSum, fs));
      });
      printf("misaligned %-18s sum (%s), %zu MiB: %.0f GB/s (%.1f%% of memcpy)\n", c.name, pname,
             bytes >> 20, 3.0 * bytes / tf / 1e6, 100 * (3.0 * bytes / tf) / (2.0 * bytes / tc));
    }
    double tu = timeMs(s, 10, [&] {
      FX(A->divide(static_cast<char *>(d) + 4, static_cast<char *>(a) + 8, bytes / 4, flagcxFloat32, 3, fs));
    });
    printf("misaligned f32 divide d+4 a+8 (%s), %zu MiB: %.0f GB/s (%.1f%% of memcpy)\n", pname,
           bytes >> 20, 2.0 * bytes / tu / 1e6, 100 * tc / tu);
  }
  cuda::g_misaligned = P::best;
}

// Host tasks in stream order: round trip, enqueue cost, pipelined rate.
void streamTasks(DeviceAdapter *A, flagcxDeviceHandle *H, flagcxStream_t fs) {
  phase("stream tasks", 60);
  const int n = 2000;
  StreamTask t{nop, nullptr};
  for (int i = 0; i < 50; i++) FX(A->enqueue(fs, t));
  FX(H->streamSynchronize(fs));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; i++) {
    FX(A->enqueue(fs, t));
    FX(H->streamSynchronize(fs));
  }
  double rt = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; i++) FX(A->enqueue(fs, t));
  double enq = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
  FX(H->streamSynchronize(fs));
  double all = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
  printf("\nstream task (%s): round trip %.1f us; enqueue call %.2f us; pipelined %.1f us/task\n",
         cuda::waitModeName(), rt, enq, all);
}

// A stream of this program's runtime, wrapped (streamCopy): kernels and
// host tasks on it.
void foreignStream(DeviceAdapter *A, flagcxDeviceHandle *H, void *a, void *b, void *d) {
  phase("foreign stream", 30);
  cudaStream_t ns;
  CU(cudaStreamCreateWithFlags(&ns, cudaStreamNonBlocking));
  flagcxStream_t w;
  FX(H->streamCopy(&w, ns));
  FX(A->reduce(d, a, b, 1 << 20, flagcxFloat32, flagcxSum, w));
  CU(cudaStreamSynchronize(ns));
  printf("foreign stream: reduce ok\n");
  FX(A->enqueue(w, StreamTask{nop, nullptr}));
  CU(cudaStreamSynchronize(ns));
  printf("foreign stream: host task ok\n");
  FX(H->streamFree(w));
  CU(cudaStreamDestroy(ns));
}

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  signal(SIGALRM, onAlarm);
  phase("init", 30);
  DeviceAdapter *A = cudaAdapter();
  if (!A) {
    std::string why = cuda::unusableReason();
    bool none = gputest::noGpuHere(why);
    printf("bench_cuda: %s: %s\n", none ? "SKIP: no GPU here" : "FAIL: CUDA adapter unusable", why.c_str());
    return none ? gputest::kSkip : 1;
  }
  size_t maxMiB = argc > 1 ? strtoull(argv[1], nullptr, 10) : 1024;
  flagcxDeviceHandle *H = A->handle();
  cudaDeviceProp prop{};
  CU(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  // The adapter's own stream; events of this program's runtime time it.
  flagcxStream_t fs;
  FX(H->streamCreate(&fs));
  cudaStream_t s = cuda::nativeOf(fs);
  void *a, *b, *d;
  size_t maxBytes = maxMiB << 20;
  FX(H->deviceMalloc(&a, maxBytes, flagcxMemDevice, nullptr));
  FX(H->deviceMalloc(&b, maxBytes, flagcxMemDevice, nullptr));
  FX(H->deviceMalloc(&d, maxBytes, flagcxMemDevice, nullptr));
  FX(H->deviceMemset(a, 0, maxBytes, flagcxMemDevice, nullptr));
  FX(H->deviceMemset(b, 0, maxBytes, flagcxMemDevice, nullptr));
  reduceBandwidth(A, s, fs, a, b, d, maxMiB);
  foldBandwidth(A, s, a, b, d, maxBytes);
  misalignedReduce(A, s, fs, a, b, d, maxBytes);
  streamTasks(A, H, fs);
  foreignStream(A, H, a, b, d);
  phase("teardown", 30);
  FX(H->streamDestroy(fs));
  FX(H->deviceFree(a, flagcxMemDevice, nullptr));
  FX(H->deviceFree(b, flagcxMemDevice, nullptr));
  FX(H->deviceFree(d, flagcxMemDevice, nullptr));
  printf("bench_cuda: done\n");
  phase("exit (static destructors, runtime teardown)", 30);
  return 0;
}
