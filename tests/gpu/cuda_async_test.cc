// The stream-ordered small-call path on a GPU: a mixed pair (rank 0 CUDA,
// rank 1 host) and a staged CUDA pair (FLAGCX_USE_HETERO_COMM=1
// FLAGCX_IPC_DISABLE=1).  The CUDA rank's stream is held shut by a host
// function queued first; N back-to-back 8-byte allreduces on it, each into
// its own device output (as many as the path has slots), must all return while it is held (the path does
// not wait for the GPU) and all take the path; once the gate opens, every
// result is right.  Also a chain of in-place allreduces (each input the
// previous output), and with CUDA_DEVICE_MAX_CONNECTIONS=1 (every stream on
// one hardware queue: where `value` deadlocked).  Prints the time to issue
// N calls against the time to complete them (not asserted).
//
// This process never initializes CUDA: every CUDA call is in forked ranks.
// Exits 77 (skipped) without a usable GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "adapters/device/cuda/cuda_internal.h"
#include "base/params.h"
#include "core/comm.h"
#include "gpu_common.h"
#include "tests/common/harness.h"

namespace {

constexpr int kCalls = 200;
constexpr int kHeld = 32;  // async_small.cc's ring of slots

#define SUB(x)                     \
  do {                             \
    if (int rc_ = (x)) return rc_; \
  } while (0)

// out[2k] = n*k, out[2k+1] = n for k < calls (the inputs are k and 1).
int check(const float *out, std::vector<float> &host, int calls, int n, const char *what) {
  RANK_CHECK(cudaMemcpy(host.data(), out, 2 * sizeof(float) * calls, cudaMemcpyDeviceToHost) == cudaSuccess, "copy");
  for (int k = 0; k < calls; k++)
    RANK_CHECK(host[2 * k] == static_cast<float>(n * k) && host[2 * k + 1] == static_cast<float>(n),
               "%s call %d: got %g %g, want %d %d", what, k, host[2 * k], host[2 * k + 1], n * k, n);
  return 0;
}

void CUDART_CB gate(void *arg) {
  auto *open = static_cast<std::atomic<bool> *>(arg);
  while (!open->load()) std::this_thread::yield();
}

double now() { return gputest::nowSec(); }

// The CUDA rank's part: calls behind a closed gate, then a timed chain.
int cudaSide(flagcxComm_t comm, flagcxDeviceHandle_t h, int n) {
  flagcxStream_t st;
  RANK_OK(h->streamCreate(&st));
  float *in = nullptr, *out = nullptr;
  RANK_CHECK(cudaMalloc(&in, 2 * sizeof(float) * kCalls) == cudaSuccess, "cudaMalloc");
  RANK_CHECK(cudaMalloc(&out, 2 * sizeof(float) * kCalls) == cudaSuccess, "cudaMalloc");
  std::vector<float> host(2 * kCalls);
  for (int k = 0; k < kCalls; k++) host[2 * k] = static_cast<float>(k), host[2 * k + 1] = 1.f;
  RANK_CHECK(cudaMemcpy(in, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, "copy");
  RANK_CHECK(cudaMemset(out, 0xff, host.size() * sizeof(float)) == cudaSuccess, "memset");
  // Warm the path (its slots and worker are made on first use).
  RANK_OK(flagcxAllReduce(in, out, 2, flagcxFloat32, flagcxSum, comm, st));
  RANK_OK(h->streamSynchronize(st));
  // Behind a closed gate: every call must return (the path holds kHeld
  // calls, its ring of slots) and none may have completed.
  uint64_t before = comm->exec->asyncCalls();
  std::atomic<bool> open{false};
  RANK_CHECK(cudaLaunchHostFunc(flagcx::cuda::nativeOf(st), gate, &open) == cudaSuccess, "cudaLaunchHostFunc");
  for (int k = 0; k < kHeld; k++)
    RANK_OK(flagcxAllReduce(in + 2 * k, out + 2 * k, 2, flagcxFloat32, flagcxSum, comm, st));
  RANK_CHECK(h->streamQuery(st) == flagcxInProgress, "the held stream finished");
  open = true;
  RANK_OK(h->streamSynchronize(st));
  SUB(check(out, host, kHeld, n, "held"));
  // Back to back, timed: the time to issue them against the time to finish.
  RANK_CHECK(cudaMemset(out, 0xff, host.size() * sizeof(float)) == cudaSuccess, "memset");
  double t0 = now();
  for (int k = 0; k < kCalls; k++)
    RANK_OK(flagcxAllReduce(in + 2 * k, out + 2 * k, 2, flagcxFloat32, flagcxSum, comm, st));
  double issued = now() - t0;
  RANK_OK(h->streamSynchronize(st));
  double done = now() - t0;
  SUB(check(out, host, kCalls, n, "back to back"));
  RANK_CHECK(comm->exec->asyncCalls() - before == static_cast<uint64_t>(kHeld + kCalls),
             "%llu of %d calls took the stream-ordered path",
             static_cast<unsigned long long>(comm->exec->asyncCalls() - before), kHeld + kCalls);
  // A chain in place: x <- allreduce(x), timed from the first call to the end.
  const float one[2] = {1.f, 1.f};
  RANK_CHECK(cudaMemcpy(in, one, sizeof(one), cudaMemcpyHostToDevice) == cudaSuccess, "copy");
  t0 = now();
  for (int k = 0; k < 20; k++) RANK_OK(flagcxAllReduce(in, in, 2, flagcxFloat32, flagcxSum, comm, st));
  double chainIssued = now() - t0;
  RANK_OK(h->streamSynchronize(st));
  double chainDone = now() - t0;
  float got[2];
  RANK_CHECK(cudaMemcpy(got, in, sizeof(got), cudaMemcpyDeviceToHost) == cudaSuccess, "copy");
  float want = 1;
  for (int k = 0; k < 20; k++) want *= static_cast<float>(n);
  RANK_CHECK(got[0] == want && got[1] == want, "chain: got %g, want %g", got[0], want);
  printf("ASYNC-FIGURES %d 8-byte allreduces: issued in %.1f us per call, complete in %.1f us per call; "
         "chain of 20 in place: issued %.1f us, complete %.1f us per call\n", kCalls,
         issued / kCalls * 1e6, done / kCalls * 1e6, chainIssued / 20 * 1e6, chainDone / 20 * 1e6);
  cudaFree(in);
  cudaFree(out);
  RANK_OK(h->streamDestroy(st));
  return 0;
}

// The peer: the same calls (plus the warm-up and the chain) on host buffers.
int peerSide(flagcxComm_t comm, flagcxDeviceHandle_t h, bool cudaPeer) {
  flagcxStream_t st;
  RANK_OK(h->streamCreate(&st));
  void *in = nullptr, *out = nullptr;
  const size_t bytes = 2 * sizeof(float) * kCalls;
  RANK_OK(h->deviceMalloc(&in, bytes, cudaPeer ? flagcxMemDevice : flagcxMemHost, nullptr));
  RANK_OK(h->deviceMalloc(&out, bytes, cudaPeer ? flagcxMemDevice : flagcxMemHost, nullptr));
  std::vector<float> host(2 * kCalls, 0.f);
  for (int k = 0; k < kCalls; k++) host[2 * k] = static_cast<float>(k), host[2 * k + 1] = 1.f;
  RANK_OK(h->deviceMemcpy(in, host.data(), bytes, flagcxMemcpyHostToDevice, nullptr));
  float *fin = static_cast<float *>(in), *fout = static_cast<float *>(out);
  RANK_OK(flagcxAllReduce(fin, fout, 2, flagcxFloat32, flagcxSum, comm, st));
  for (int k = 0; k < kHeld; k++)
    RANK_OK(flagcxAllReduce(fin + 2 * k, fout + 2 * k, 2, flagcxFloat32, flagcxSum, comm, st));
  for (int k = 0; k < kCalls; k++)
    RANK_OK(flagcxAllReduce(fin + 2 * k, fout + 2 * k, 2, flagcxFloat32, flagcxSum, comm, st));
  RANK_OK(h->streamSynchronize(st));  // the calls above read fin
  float ones[2] = {1.f, 1.f};
  RANK_OK(h->deviceMemcpy(fin, ones, sizeof(ones), flagcxMemcpyHostToDevice, nullptr));
  for (int k = 0; k < 20; k++) RANK_OK(flagcxAllReduce(fin, fin, 2, flagcxFloat32, flagcxSum, comm, st));
  RANK_OK(h->streamSynchronize(st));
  RANK_OK(h->deviceFree(in, cudaPeer ? flagcxMemDevice : flagcxMemHost, nullptr));
  RANK_OK(h->deviceFree(out, cudaPeer ? flagcxMemDevice : flagcxMemHost, nullptr));
  RANK_OK(h->streamDestroy(st));
  return 0;
}

// Rank 0 is CUDA; rank 1 is host (mixed) or CUDA too (staged).
void runPair(bool mixed, const char *connections) {
  harness::Env env{{{"FLAGCX_TIMEOUT", "40"}, {"CUDA_DEVICE_MAX_CONNECTIONS", connections}}};
  if (!mixed) {
    env.vars.push_back({"FLAGCX_USE_HETERO_COMM", "1"});
    env.vars.push_back({"FLAGCX_IPC_DISABLE", "1"});
  }
  harness::Result r = harness::run(2, [&](int rank, int n, flagcxUniqueId *id) {
    bool cuda = rank == 0 || !mixed;
    setenv("FLAGCX_DEVICE", cuda ? "cuda" : "host", 1);
    flagcx::paramsReload();
    flagcxDeviceHandle_t h;
    RANK_OK(flagcxDeviceHandleInit(&h));
    if (cuda) RANK_OK(h->setDevice(0));
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    RANK_CHECK(!cuda || comm->exec->mode() == flagcx::ExecMode::Staged, "the CUDA rank is not staged");
    int rc = rank == 0 ? cudaSide(comm, h, n) : peerSide(comm, h, cuda);
    if (rc) return rc;
    RANK_OK(flagcxCommDestroy(comm));
    RANK_OK(flagcxDeviceHandleFree(h));
    return 0;
  }, env, 120);
  EXPECT_TRUE(r.allOk()) << (mixed ? "mixed" : "staged") << " pair, CUDA_DEVICE_MAX_CONNECTIONS="
                         << connections << ": " << r.describe();
}

TEST(CudaAsync, MixedPairCallsReturnWhileTheStreamIsHeld) { runPair(true, "8"); }
TEST(CudaAsync, MixedPairOneHardwareQueue) { runPair(true, "1"); }
TEST(CudaAsync, StagedPairCallsReturnWhileTheStreamIsHeld) { runPair(false, "8"); }

}  // namespace

int main(int argc, char **argv) {
  if (int rc = gputest::skipUnlessGpu("cuda_async_test")) return rc;
  setenv("FLAGCX_STREAM_ASYNC_BYTES", "32768", 0);  // the path is opt-in
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
