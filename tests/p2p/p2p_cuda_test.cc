// The P2P engine with device memory, two processes on one GPU host (forked
// before either touches CUDA): the target registers a cudaMalloc'd region;
// the initiator writes its first half through CUDA IPC (GetIpcInfo /
// UpdateIpcInfo, WriteVector with ipcBufs), its second half through the
// lanes (device memory staged through host memory at both ends), reads the
// first half back through IPC (ReadVector with ipcBufs) and the whole
// region through the lanes, into device memory.  Exit 77 without a GPU.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../gpu/gpu_common.h"
#include "flagcx_p2p.h"

namespace {

constexpr size_t kN = 8 << 20;
int fails = 0;
#define CHECK(c)                                                        \
  do {                                                                  \
    if (!(c)) {                                                         \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
      fails++;                                                          \
    }                                                                   \
  } while (0)

uint8_t pat(size_t i) { return static_cast<uint8_t>(i * 11 + (i >> 9) + 3); }

struct Hand {  // target -> initiator, through a pipe
  char session[200];
  uint64_t va;
  char ipc[FLAGCX_P2P_IPC_INFO_SIZE];
};

// GetNotifs hands over every notification that has arrived: "written" and
// "bye" may come in one batch, so what a wait did not ask for is kept for
// the next one (dropping it hung the target until its timeout on the H200).
bool waitNotif(const char *text) {
  static std::vector<std::string> kept;
  for (int ms = 0; ms < 120000; ms++) {
    for (auto &n : flagcxP2pEngineGetNotifs()) kept.emplace_back(n.msg);
    for (auto it = kept.begin(); it != kept.end(); ++it)
      if (*it == text) {
        kept.erase(it);
        return true;
      }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

bool notify(FlagcxP2pConn *c, const char *text) {
  FlagcxP2pNotifyMsg m{};
  std::snprintf(m.msg, sizeof(m.msg), "%s", text);
  return flagcxP2pEngineSendNotif(c, &m) > 0;
}

int target(int wfd) {
  void *dev = nullptr;
  CHECK(cudaMalloc(&dev, kN) == cudaSuccess && cudaMemset(dev, 0, kN) == cudaSuccess);
  FlagcxP2pEngine *e = flagcxP2pEngineCreate();
  FlagcxP2pMr mr = 0;
  CHECK(e && flagcxP2pEngineReg(e, reinterpret_cast<uintptr_t>(dev), kN, mr) == 0);
  Hand h{};
  bool has = false;
  CHECK(flagcxP2pEngineGetIpcInfo(e, reinterpret_cast<uintptr_t>(dev), h.ipc, &has) == 0 && has);
  char *meta = nullptr;
  CHECK(flagcxP2pEngineGetMetadata(e, &meta) == 0);
  std::snprintf(h.session, sizeof(h.session), "%.*s", static_cast<int>(std::strcspn(meta, "?")),
                meta);
  delete[] meta;
  h.va = reinterpret_cast<uint64_t>(dev);
  CHECK(flagcxP2pEngineStartRpcServer(e) == 0);
  CHECK(write(wfd, &h, sizeof(h)) == static_cast<ssize_t>(sizeof(h)));
  CHECK(waitNotif("written"));
  std::vector<uint8_t> host(kN);
  CHECK(cudaMemcpy(host.data(), dev, kN, cudaMemcpyDeviceToHost) == cudaSuccess);
  size_t bad = 0;
  for (size_t i = 0; i < kN; i++) bad += host[i] != pat(i);
  std::printf("target: %zu wrong bytes in device memory\n", bad);
  CHECK(bad == 0);
  CHECK(waitNotif("bye"));
  flagcxP2pEngineDestroy(e);
  cudaFree(dev);
  return fails != 0;
}

int initiator(int rfd) {
  Hand h{};
  CHECK(read(rfd, &h, sizeof(h)) == static_cast<ssize_t>(sizeof(h)));
  std::vector<uint8_t> host(kN);
  for (size_t i = 0; i < kN; i++) host[i] = pat(i);
  void *src = nullptr, *back = nullptr;
  CHECK(cudaMalloc(&src, kN) == cudaSuccess && cudaMalloc(&back, kN) == cudaSuccess);
  CHECK(cudaMemcpy(src, host.data(), kN, cudaMemcpyHostToDevice) == cudaSuccess);
  FlagcxP2pEngine *e = flagcxP2pEngineCreate();
  FlagcxP2pMr mrS = 0, mrB = 0;
  CHECK(e && flagcxP2pEngineReg(e, reinterpret_cast<uintptr_t>(src), kN, mrS) == 0);
  CHECK(flagcxP2pEngineReg(e, reinterpret_cast<uintptr_t>(back), kN, mrB) == 0);
  FlagcxP2pConn *c = flagcxP2pEngineGetConn(e, h.session);
  CHECK(c && flagcxP2pEngineConnIsLocal(c));
  if (!c) return 1;
  // First half: CUDA IPC.
  FlagcxP2pRdmaDesc d{};
  CHECK(flagcxP2pEngineMakeDesc(c, h.va, kN / 2, &d) == 0);
  CHECK(flagcxP2pEngineUpdateIpcInfo(h.ipc, h.va, h.va, kN / 2) == 0);
  uint64_t id = 0;
  CHECK(flagcxP2pEngineWriteVector(c, {mrS}, {src}, {kN / 2}, {d}, 1, &id, {h.ipc}) == 0);
  CHECK(flagcxP2pEngineXferState(c, id) == 1);
  // Second half: the lanes, staged.
  CHECK(flagcxP2pEngineMakeDesc(c, h.va + kN / 2, kN / 2, &d) == 0);
  CHECK(flagcxP2pEngineWriteVectorSync(c, {mrS}, {static_cast<char *>(src) + kN / 2}, {kN / 2},
                                       {d}) == 0);
  // The first half back through CUDA IPC.
  CHECK(flagcxP2pEngineMakeDesc(c, h.va, kN / 2, &d) == 0);
  CHECK(flagcxP2pEngineReadVector(c, {mrB}, {back}, {kN / 2}, {d}, 1, &id, {h.ipc}) == 0);
  CHECK(flagcxP2pEngineXferState(c, id) == 1);
  std::vector<uint8_t> half(kN / 2);
  CHECK(cudaMemcpy(half.data(), back, kN / 2, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(std::equal(half.begin(), half.end(), host.begin()));
  CHECK(cudaMemset(back, 0, kN) == cudaSuccess);
  // Everything back, into device memory, through the lanes.
  CHECK(flagcxP2pEngineMakeDesc(c, h.va, kN, &d) == 0);
  CHECK(flagcxP2pEngineRead(c, mrB, back, kN, d, &id) == 0);
  int st;
  while ((st = flagcxP2pEngineXferState(c, id)) == 0) std::this_thread::yield();
  CHECK(st == 1);
  std::vector<uint8_t> got(kN);
  CHECK(cudaMemcpy(got.data(), back, kN, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(got == host);
  CHECK(notify(c, "written"));
  CHECK(notify(c, "bye"));
  flagcxP2pEngineDestroy(e);
  cudaFree(src);
  cudaFree(back);
  std::printf("initiator: %s\n", fails ? "FAILED" : "ok");
  std::fflush(stdout);  // the child leaves by _exit, which flushes nothing
  return fails != 0;
}

}  // namespace

int main() {
  if (int rc = gputest::skipUnlessGpu("p2p_cuda_test")) return rc;
  int fds[2];
  if (pipe(fds) != 0) return 1;
  pid_t p = fork();
  if (p == 0) _exit(initiator(fds[0]));
  int rc = target(fds[1]);
  int st = 0;
  waitpid(p, &st, 0);
  return rc || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
}
