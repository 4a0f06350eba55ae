// Shared by the GPU tests: whether a GPU is usable, asked without touching
// CUDA in the calling process (a forked child probes), and the meson "skip"
// exit code.  Two cases are told apart: no GPU here (no NVIDIA device node,
// or CUDA sees no device: skip, exit 77) and a GPU whose CUDA adapter does
// not work (a driver/runtime error: a failure, exit 1).
#pragma once
#include <cuda_runtime_api.h>
#include <glob.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "adapters/device/adapter.h"

namespace flagcx {
DeviceAdapter *cudaAdapter();
namespace cuda {
const char *unusableReason();
}
}  // namespace flagcx

namespace gputest {

inline double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A copy baseline on the current GPU: µs per cudaMemcpyAsync of `bytes` on a
// fresh non-blocking stream, after two warm-up copies, waited for.
inline double copyUs(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, int iters) {
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

constexpr int kSkip = 77;  // meson: test skipped

// Probe in a child so that this process can still fork CUDA ranks later
// (CUDA does not survive fork).  *why gets the reason when unusable.
inline bool gpuUsable(std::string *why) {
  int fds[2];
  if (pipe(fds) != 0) {
    *why = "pipe failed";
    return false;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t p = fork();
  if (p == 0) {
    close(fds[0]);
    const char *msg = "";
    bool ok = flagcx::cudaAdapter() != nullptr;
    if (!ok) msg = flagcx::cuda::unusableReason();
    ssize_t w = write(fds[1], msg, strlen(msg));
    (void)w;
    close(fds[1]);
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  char buf[512] = {};
  ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  (void)n;
  close(fds[0]);
  int st = 0;
  waitpid(p, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return true;
  *why = buf[0] ? buf : "the probe process failed";
  return false;
}

// Is there no GPU at all, as opposed to one the adapter cannot use?  No
// /dev/nvidia<N> node, or CUDA itself reports that no device is visible.
inline bool noGpuHere(const std::string &why) {
  glob_t g;
  bool nodes = glob("/dev/nvidia[0-9]*", 0, nullptr, &g) == 0 && g.gl_pathc > 0;
  globfree(&g);
  return !nodes || why.find("cudaErrorNoDevice") != std::string::npos ||
         why.find("no CUDA device is visible") != std::string::npos;
}

// For a test main: 0 when a GPU is usable; else print why and return kSkip
// (no GPU here) or 1 (the adapter is broken on a machine with a GPU).
inline int skipUnlessGpu(const char *prog) {
  std::string why;
  if (gpuUsable(&why)) return 0;
  if (noGpuHere(why)) {
    printf("%s: SKIP: no GPU here: %s\n", prog, why.c_str());
    return kSkip;
  }
  printf("%s: FAIL: this machine has an NVIDIA device but the CUDA adapter is unusable: %s\n",
         prog, why.c_str());
  return 1;
}

}  // namespace gputest
