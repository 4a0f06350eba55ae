// Shared by the GPU tests: whether a GPU is usable, asked without touching
// CUDA in the calling process (a forked child probes), and the meson "skip"
// exit code.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

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

// For a test main: print why and return kSkip, or 0 when a GPU is usable.
inline int skipUnlessGpu(const char *prog) {
  std::string why;
  if (gpuUsable(&why)) return 0;
  printf("%s: SKIP: no usable CUDA GPU: %s\n", prog, why.c_str());
  return kSkip;
}

}  // namespace gputest
