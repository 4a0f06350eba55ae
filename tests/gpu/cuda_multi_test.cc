// CUDA across processes: IPC handles between two processes, the NCCL
// pass-through, communicators of CUDA ranks run by the engine (several ranks
// on one GPU), and a mixed communicator (CUDA ranks + host ranks).
//
// This process never initializes CUDA (it would not survive fork): every
// CUDA call happens in forked ranks.  Exits 77 (skipped) without a usable GPU.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/harness.h"
#include "adapters/ccl/ccl.h"
#include "core/comm.h"
#include "gpu_common.h"

namespace {

// Exit codes of a rank that cannot run its case here (the test skips; any
// other nonzero code fails it).  "flagcx did not pick NCCL though NCCL loads"
// is a failure, not one of these.
constexpr int kNcclMissing = 60;   // NCCL not loadable (FLAGCX_NCCL_LIB)
constexpr int kTooFewGpus = 61;    // the case needs more GPUs than are visible

// Whether NCCL loads in this process, the way the library loads it.
bool ncclLoadable() {
  const char *lib = getenv("FLAGCX_NCCL_LIB");
  void *h = dlopen(lib && *lib ? lib : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) return false;
  dlclose(h);
  return true;
}

// ---------- IPC between two processes ----------

int ipcOwner(int toPeer, int fromPeer) {
  flagcxDeviceHandle_t h;
  RANK_OK(flagcxDeviceHandleInit(&h));
  RANK_OK(h->setDevice(0));
  const size_t bytes = 1 << 20, off = 4096, span = 64 << 10;
  void *d;
  RANK_OK(h->deviceMalloc(&d, bytes, flagcxMemDevice, nullptr));
  RANK_OK(h->deviceMemset(d, 'A', bytes, flagcxMemDevice, nullptr));
  flagcxIpcMemHandle_t ih;
  size_t sz = 0;
  RANK_OK(h->ipcMemHandleCreate(&ih, &sz));
  RANK_OK(h->ipcMemHandleGet(ih, static_cast<char *>(d) + off));
  RANK_CHECK(write(toPeer, &sz, sizeof(sz)) == sizeof(sz), "write");
  RANK_CHECK(write(toPeer, ih, sz) == static_cast<ssize_t>(sz), "write");
  char ack = 0;
  RANK_CHECK(harness::readAll(fromPeer, &ack, 1) && ack == 'k', "peer did not finish");
  std::vector<char> back(bytes);
  RANK_OK(h->deviceMemcpy(back.data(), d, bytes, flagcxMemcpyDeviceToHost, nullptr));
  for (size_t i = 0; i < bytes; i++) {
    char want = i >= off && i < off + span ? 'B' : 'A';
    RANK_CHECK(back[i] == want, "byte %zu is %d, want %c", i, back[i], want);
  }
  RANK_OK(h->ipcMemHandleFree(ih));
  RANK_OK(h->deviceFree(d, flagcxMemDevice, nullptr));
  RANK_OK(flagcxDeviceHandleFree(h));
  return 0;
}

int ipcPeer(int fromOwner, int toOwner) {
  flagcxDeviceHandle_t h;
  RANK_OK(flagcxDeviceHandleInit(&h));
  RANK_OK(h->setDevice(0));
  size_t sz = 0;
  RANK_CHECK(harness::readAll(fromOwner, &sz, sizeof(sz)), "read size");
  flagcxIpcMemHandle_t ih;
  size_t mySz = 0;
  RANK_OK(h->ipcMemHandleCreate(&ih, &mySz));
  RANK_CHECK(sz == mySz, "handle size %zu vs %zu", sz, mySz);
  RANK_CHECK(harness::readAll(fromOwner, ih, sz), "read handle");
  void *p = nullptr;
  RANK_OK(h->ipcMemHandleOpen(ih, &p));
  const size_t span = 64 << 10;
  std::vector<char> got(span);
  RANK_OK(h->deviceMemcpy(got.data(), p, span, flagcxMemcpyDeviceToHost, nullptr));
  for (size_t i = 0; i < span; i++) RANK_CHECK(got[i] == 'A', "peer sees %d at %zu", got[i], i);
  RANK_OK(h->deviceMemset(p, 'B', span, flagcxMemDevice, nullptr));
  RANK_OK(h->deviceSynchronize());
  RANK_OK(h->ipcMemHandleClose(p));
  RANK_OK(h->ipcMemHandleFree(ih));
  char ack = 'k';
  RANK_CHECK(write(toOwner, &ack, 1) == 1, "write ack");
  return 0;
}

TEST(CudaIpc, TwoProcessesShareDeviceMemory) {
  int a2b[2], b2a[2];
  ASSERT_EQ(pipe(a2b), 0);
  ASSERT_EQ(pipe(b2a), 0);
  // Two ranks of the harness that talk through these pipes only.
  auto r = harness::run(2, [&](int rank, int, flagcxUniqueId *) {
    return rank == 0 ? ipcOwner(a2b[1], b2a[0]) : ipcPeer(a2b[0], b2a[1]);
  }, {{{"FLAGCX_DEVICE", "cuda"}}});
  for (int fd : {a2b[0], a2b[1], b2a[0], b2a[1]}) close(fd);
  EXPECT_TRUE(r.allOk()) << "rank 0 owns the memory, rank 1 writes through IPC: " << r.failures();
}

// ---------- communicators ----------

// Buffers of one rank: device memory of this rank's adapter, or plain host memory.
struct Buf {
  flagcxDeviceHandle_t h;
  bool device;
  void *p = nullptr;
  size_t bytes = 0;
  int alloc(size_t n) {
    bytes = n;
    if (device) {
      RANK_OK(h->deviceMalloc(&p, n ? n : 4, flagcxMemDevice, nullptr));
    } else {
      p = malloc(n ? n : 4);
    }
    return 0;
  }
  void release() {
    if (device) h->deviceFree(p, flagcxMemDevice, nullptr);
    else free(p);
  }
  int put(const std::vector<float> &v) {
    if (device) {
      RANK_OK(h->deviceMemcpy(p, const_cast<float *>(v.data()), v.size() * 4, flagcxMemcpyHostToDevice, nullptr));
      RANK_OK(h->deviceSynchronize());  // the test's streams do not wait for the legacy stream
    }
    else memcpy(p, v.data(), v.size() * 4);
    return 0;
  }
  int get(std::vector<float> *v) {
    v->resize(bytes / 4);
    if (device) RANK_OK(h->deviceMemcpy(v->data(), p, bytes, flagcxMemcpyDeviceToHost, nullptr));
    else memcpy(v->data(), p, bytes);
    return 0;
  }
};

float val(int rank, size_t i) { return static_cast<float>(rank + 1 + static_cast<int>(i % 7)); }

#define SUB(call)            \
  do {                       \
    int _rc = (call);        \
    if (_rc) return _rc;     \
  } while (0)

// Every operation once, results checked in closed form.  `what` names the case.
int collectiveSuite(flagcxComm_t comm, flagcxDeviceHandle_t h, bool device, size_t cnt,
                    const char *what) {
  int rank, n;
  RANK_OK(flagcxCommUserRank(comm, &rank));
  RANK_OK(flagcxCommCount(comm, &n));
  flagcxStream_t s;
  RANK_OK(h->streamCreate(&s));
  const size_t un = static_cast<size_t>(n);
  Buf sb{h, device}, rb{h, device};
  SUB(sb.alloc(cnt * un * 4));
  SUB(rb.alloc(cnt * un * 4));
  std::vector<float> send(cnt * un), got;
  for (size_t i = 0; i < send.size(); i++) send[i] = val(rank, i);
  const float tri = static_cast<float>(n * (n + 1) / 2);
  auto sync = [&]() -> int {
    RANK_OK(h->streamSynchronize(s));
    return 0;
  };

  // AllReduce (sum) of cnt elements.
  SUB(sb.put(send));
  RANK_OK(flagcxAllReduce(sb.p, rb.p, cnt, flagcxFloat32, flagcxSum, comm, s));
  SUB(sync());
  SUB(rb.get(&got));
  for (size_t i = 0; i < cnt; i++)
    RANK_CHECK(got[i] == tri + n * static_cast<float>(i % 7), "%s allreduce [%zu] = %f", what, i, got[i]);
  // AllGather.
  RANK_OK(flagcxAllGather(sb.p, rb.p, cnt, flagcxFloat32, comm, s));
  SUB(sync());
  SUB(rb.get(&got));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < cnt; i++)
      RANK_CHECK(got[p * cnt + i] == val(p, i), "%s allgather [%d][%zu] = %f", what, p, i, got[p * cnt + i]);
  // ReduceScatter.
  RANK_OK(flagcxReduceScatter(sb.p, rb.p, cnt, flagcxFloat32, flagcxSum, comm, s));
  SUB(sync());
  SUB(rb.get(&got));
  for (size_t i = 0; i < cnt; i++) {
    size_t g = static_cast<size_t>(rank) * cnt + i;
    RANK_CHECK(got[i] == tri + n * static_cast<float>(g % 7), "%s reducescatter [%zu] = %f", what, i, got[i]);
  }
  // Broadcast from the last rank.
  int root = n - 1;
  RANK_OK(flagcxBroadcast(sb.p, rb.p, cnt, flagcxFloat32, root, comm, s));
  SUB(sync());
  SUB(rb.get(&got));
  for (size_t i = 0; i < cnt; i++) RANK_CHECK(got[i] == val(root, i), "%s broadcast [%zu]", what, i);
  // Reduce to rank 0.
  RANK_OK(flagcxReduce(sb.p, rb.p, cnt, flagcxFloat32, flagcxMax, 0, comm, s));
  SUB(sync());
  if (rank == 0) {
    SUB(rb.get(&got));
    for (size_t i = 0; i < cnt; i++)
      RANK_CHECK(got[i] == val(n - 1, i), "%s reduce(max) [%zu] = %f", what, i, got[i]);
  }
  // Gather to rank 0.
  RANK_OK(flagcxGather(sb.p, rb.p, cnt, flagcxFloat32, 0, comm, s));
  SUB(sync());
  if (rank == 0) {
    SUB(rb.get(&got));
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < cnt; i++)
        RANK_CHECK(got[p * cnt + i] == val(p, i), "%s gather [%d][%zu]", what, p, i);
  }
  // Scatter from rank 0: rank r gets block r of rank 0's buffer.
  RANK_OK(flagcxScatter(sb.p, rb.p, cnt, flagcxFloat32, 0, comm, s));
  SUB(sync());
  SUB(rb.get(&got));
  for (size_t i = 0; i < cnt; i++)
    RANK_CHECK(got[i] == val(0, static_cast<size_t>(rank) * cnt + i), "%s scatter [%zu]", what, i);
  // AlltoAll: block p of my result is block `rank` of p's send buffer.
  RANK_OK(flagcxAlltoAll(sb.p, rb.p, cnt, flagcxFloat32, comm, s));
  SUB(sync());
  SUB(rb.get(&got));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < cnt; i++)
      RANK_CHECK(got[p * cnt + i] == val(p, static_cast<size_t>(rank) * cnt + i), "%s alltoall [%d][%zu]",
                 what, p, i);
  // AlltoAll in place (on one host: the direct path reads every peer's
  // block aside before any rank overwrites its own).
  SUB(rb.put(send));
  RANK_OK(flagcxAlltoAll(rb.p, rb.p, cnt, flagcxFloat32, comm, s));
  SUB(sync());
  SUB(rb.get(&got));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < cnt; i++)
      RANK_CHECK(got[p * cnt + i] == val(p, static_cast<size_t>(rank) * cnt + i),
                 "%s alltoall in place [%d][%zu]", what, p, i);
  // AlltoAllv with equal blocks.
  std::vector<size_t> counts(un, cnt), displs(un);
  for (size_t p = 0; p < un; p++) displs[p] = p * cnt;
  RANK_OK(flagcxAlltoAllv(sb.p, counts.data(), displs.data(), rb.p, counts.data(), displs.data(),
                          flagcxFloat32, comm, s));
  SUB(sync());
  SUB(rb.get(&got));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < cnt; i++)
      RANK_CHECK(got[p * cnt + i] == val(p, static_cast<size_t>(rank) * cnt + i), "%s alltoallv [%d][%zu]",
                 what, p, i);
  // Send/recv around a ring.
  if (n > 1) {
    RANK_OK(flagcxGroupStart(comm));
    RANK_OK(flagcxSend(sb.p, cnt, flagcxFloat32, (rank + 1) % n, comm, s));
    RANK_OK(flagcxRecv(rb.p, cnt, flagcxFloat32, (rank + n - 1) % n, comm, s));
    RANK_OK(flagcxGroupEnd(comm));
    SUB(sync());
    SUB(rb.get(&got));
    int from = (rank + n - 1) % n;
    for (size_t i = 0; i < cnt; i++) RANK_CHECK(got[i] == val(from, i), "%s sendrecv [%zu]", what, i);
  }
  RANK_OK(flagcxBarrier(comm, s));
  SUB(sync());
  sb.release();
  rb.release();
  RANK_OK(h->streamDestroy(s));
  return 0;
}

void setDeviceEnv(const char *dev) {
  setenv("FLAGCX_DEVICE", dev, 1);
  flagcx::paramsReload();
}

// One rank of a homogeneous CUDA communicator; `wantBackend` is "nccl" or
// "engine" ("any": either).  GPU = rank % visible GPUs.
int cudaRank(int rank, int nranks, flagcxUniqueId *id, const char *wantBackend, bool device,
             size_t cnt) {
  setDeviceEnv("cuda");
  flagcxDeviceHandle_t h;
  RANK_OK(flagcxDeviceHandleInit(&h));
  int ngpu = 0;
  RANK_OK(h->getDeviceCount(&ngpu));
  RANK_OK(h->setDevice(rank % ngpu));
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
  const char *backend = comm->ccl ? comm->ccl->name() : "engine";
  int homo = -1;
  RANK_OK(flagcxIsHomoComm(comm, &homo));
  if (rank == 0)
    printf("nranks %d on %d GPU(s): backend %s%s, flagcxIsHomoComm %d, count %zu, %s buffers\n",
           nranks, ngpu, backend, comm->ccl ? "" : comm->exec->mode() == flagcx::ExecMode::Direct ? " (direct: CUDA IPC)" : " (host staging)",
           homo, cnt, device ? "device" : "host");
  const char *ipcOff = getenv("FLAGCX_IPC_DISABLE");
  bool wantDirect = !comm->ccl && !(ipcOff && strcmp(ipcOff, "1") == 0);
  bool direct = comm->exec->mode() == flagcx::ExecMode::Direct;
  RANK_CHECK(direct == wantDirect, "direct mode %d, expected %d", direct, wantDirect);
  if (strcmp(wantBackend, "nccl") == 0 && !comm->ccl) {
    flagcxCommDestroy(comm);
    if (!ncclLoadable()) return kNcclMissing;
    RANK_CHECK(false, "NCCL loads here but the communicator chose the engine");
  }
  if (strcmp(wantBackend, "engine") == 0)
    RANK_CHECK(!comm->ccl, "expected the engine, got %s", backend);
  SUB(collectiveSuite(comm, h, device, cnt, backend));
  RANK_OK(flagcxCommDestroy(comm));
  RANK_OK(flagcxDeviceHandleFree(h));
  return 0;
}

TEST(CudaComm, NcclPassThroughOneRank) {
  harness::Result r = harness::run(1, [](int rank, int n, flagcxUniqueId *id) {
    return cudaRank(rank, n, id, "nccl", true, 1000);
  }, {{{"FLAGCX_USE_HETERO_COMM", "0"}}});
  if (r.status[0] == kNcclMissing) GTEST_SKIP() << "NCCL is not loadable (FLAGCX_NCCL_LIB)";
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// Two ranks on one GPU (CUDA_VISIBLE_DEVICES=0): NCCL refuses a shared
// device, so the communicator must fall back to the engine, whose stream work
// runs on the CUDA adapter's progress thread (host buffers: device buffers
// through the engine are a separate case below).
TEST(CudaComm, TwoRanksOneGpuFallBackToEngine) {
  harness::Result r = harness::run(2, [](int rank, int n, flagcxUniqueId *id) {
    return cudaRank(rank, n, id, "engine", false, 4099);
  }, {{{"FLAGCX_USE_HETERO_COMM", "0"}, {"CUDA_VISIBLE_DEVICES", "0"}}});
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_TRUE(r.allOk()) << r.describe();
}

TEST(CudaComm, TwoRanksDeviceBuffersNcclWhenTwoGpus) {
  harness::Result r = harness::run(2, [](int rank, int n, flagcxUniqueId *id) {
    flagcxDeviceHandle_t h;
    setDeviceEnv("cuda");
    RANK_OK(flagcxDeviceHandleInit(&h));
    int ngpu = 0;
    RANK_OK(h->getDeviceCount(&ngpu));
    if (ngpu < 2) return kTooFewGpus;
    if (!ncclLoadable()) return kNcclMissing;
    return cudaRank(rank, n, id, "nccl", true, 1 << 16);
  }, {{{"FLAGCX_USE_HETERO_COMM", "0"}}});
  if (r.status[0] == kTooFewGpus) GTEST_SKIP() << "needs 2 GPUs (NCCL refuses two ranks on one GPU)";
  if (r.status[0] == kNcclMissing) GTEST_SKIP() << "NCCL is not loadable (FLAGCX_NCCL_LIB)";
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// The engine on device buffers, ranks sharing the GPUs: direct mode (CUDA
// IPC) and, with FLAGCX_IPC_DISABLE=1, whole-buffer host staging.
TEST(CudaComm, EngineDeviceBuffersSharedGpu) {
  for (const char *ipcOff : {"0", "1"}) {
    for (int n : {2, 4}) {
      size_t cnt = n == 2 ? (1u << 20) + 3 : 4099;
      harness::Result r = harness::run(n, [cnt](int rank, int nr, flagcxUniqueId *id) {
        return cudaRank(rank, nr, id, "engine", true, cnt);
      }, {{{"FLAGCX_USE_HETERO_COMM", "1"}, {"FLAGCX_IPC_DISABLE", ipcOff}}});
      EXPECT_TRUE(r.allOk()) << n << " ranks, FLAGCX_IPC_DISABLE=" << ipcOff << ": " << r.describe();
    }
  }
  unsetenv("FLAGCX_IPC_DISABLE");
}

// The stream pattern of torch's process groups: the caller's work is on the
// legacy default stream; the collective runs on a non-blocking stream of the
// caller's (streamCopy) ordered after it by an event; the legacy stream then
// waits for the collective (an event) and the caller queues more legacy work
// right away.  Buffers are slices of one
// cudaMalloc block, as the caching allocator hands them out; the first op is
// a small in-place int8 allreduce, as in ops_test.py.  A hang is a deadlock
// between the engine's device work and the caller's streams.
int torchStyleRank(int rank, int nranks, flagcxUniqueId *id) {
  setDeviceEnv("cuda");
  flagcxDeviceHandle_t h;
  RANK_OK(flagcxDeviceHandleInit(&h));
  RANK_OK(h->setDevice(0));
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
  RANK_CHECK(!comm->ccl, "expected the engine");
  cudaStream_t side = nullptr;
  RANK_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess, "stream");
  flagcxStream_t fs;
  RANK_OK(h->streamCopy(&fs, side));
  char *block = nullptr;
  const size_t blockBytes = 8 << 20;
  RANK_CHECK(cudaMalloc(reinterpret_cast<void **>(&block), blockBytes) == cudaSuccess, "cudaMalloc");
  cudaEvent_t before, after;
  RANK_CHECK(cudaEventCreateWithFlags(&before, cudaEventDisableTiming) == cudaSuccess, "event");
  RANK_CHECK(cudaEventCreateWithFlags(&after, cudaEventDisableTiming) == cudaSuccess, "event");
  struct Case {
    flagcxDataType_t dt;
    size_t count, offset, esize;
  };
  const Case cases[] = {{flagcxInt8, 1000, 512, 1}, {flagcxFloat32, 7, 4096, 4},
                        {flagcxFloat32, (1 << 20) + 5, 1 << 20, 4}, {flagcxInt8, 1000, 512, 1}};
  // Pinned, so that the copy back is asynchronous (a pageable one would
  // block this thread instead of the poll below).
  char *got = nullptr;
  RANK_CHECK(cudaMallocHost(reinterpret_cast<void **>(&got), 8 << 20) == cudaSuccess, "cudaMallocHost");
  int round = 0;
  for (const Case &c : cases) {
    round++;
    char *buf = block + c.offset;
    size_t bytes = c.count * c.esize;
    std::vector<char> host(bytes);
    if (c.dt == flagcxInt8) {
      for (size_t i = 0; i < c.count; i++) host[i] = static_cast<char>(i % 5 + rank);
    } else {
      for (size_t i = 0; i < c.count; i++) {
        float v = static_cast<float>(i % 5 + rank);
        memcpy(&host[i * 4], &v, 4);
      }
    }
    // Legacy stream: fill; the side stream waits for it; the collective.
    RANK_CHECK(cudaMemcpyAsync(buf, host.data(), bytes, cudaMemcpyHostToDevice, cudaStreamLegacy) ==
                   cudaSuccess, "fill");
    RANK_CHECK(cudaEventRecord(before, cudaStreamLegacy) == cudaSuccess, "record");
    RANK_CHECK(cudaStreamWaitEvent(side, before, 0) == cudaSuccess, "wait event");
    RANK_OK(flagcxAllReduce(buf, buf, c.count, c.dt, flagcxSum, comm, fs));
    RANK_CHECK(cudaEventRecord(after, side) == cudaSuccess, "record");
    RANK_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, after, 0) == cudaSuccess, "wait event");
    // More legacy work before the collective can have run: a memset of
    // another slice, then the copy back.
    RANK_CHECK(cudaMemsetAsync(block + (6 << 20), round, 4096, cudaStreamLegacy) == cudaSuccess, "memset");
    RANK_CHECK(cudaMemcpyAsync(got, buf, bytes, cudaMemcpyDeviceToHost, cudaStreamLegacy) ==
                   cudaSuccess, "copy back");
    auto t0 = std::chrono::steady_clock::now();
    cudaError_t q;
    while ((q = cudaStreamQuery(cudaStreamLegacy)) == cudaErrorNotReady) {
      RANK_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30),
                 "round %d (%zu elements): the legacy stream did not finish within 30 s after the "
                 "collective: the engine and the caller's legacy-stream work wait on each other", round,
                 c.count);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    RANK_CHECK(q == cudaSuccess, "legacy stream: %s", cudaGetErrorString(q));
    const int n = nranks, tri = n * (n - 1) / 2;
    for (size_t i = 0; i < c.count; i++) {
      double want = static_cast<double>(static_cast<int>(i % 5) * n + tri), g;
      if (c.dt == flagcxInt8) {
        g = static_cast<signed char>(got[i]);
      } else {
        float f;
        memcpy(&f, &got[i * 4], 4);
        g = f;
      }
      RANK_CHECK(g == want, "round %d: element %zu is %g, want %g", round, i, g, want);
    }
  }
  RANK_OK(h->streamFree(fs));
  cudaFreeHost(got);
  cudaStreamDestroy(side);
  cudaFree(block);
  RANK_OK(flagcxCommDestroy(comm));
  RANK_OK(flagcxDeviceHandleFree(h));
  return 0;
}

// CUDA_DEVICE_MAX_CONNECTIONS=1 puts every stream of a process on one
// hardware queue: with the user's stream held by cuStreamWaitValue32 (the
// former default) every call deadlocked there, as the 5th call under torch did.
TEST(CudaComm, EngineTorchStyleStreams) {
  struct Case {
    const char *ipcOff, *connections;
  };
  for (Case c : {Case{"0", "8"}, Case{"1", "8"}, Case{"0", "1"}, Case{"1", "1"}}) {
    harness::Result r = harness::run(2, torchStyleRank,
        {{{"FLAGCX_USE_HETERO_COMM", "1"}, {"FLAGCX_IPC_DISABLE", c.ipcOff}, {"CUDA_VISIBLE_DEVICES", "0"},
          {"CUDA_DEVICE_MAX_CONNECTIONS", c.connections}, {"FLAGCX_TIMEOUT", "40"}}}, 90);
    EXPECT_TRUE(r.allOk()) << "FLAGCX_IPC_DISABLE=" << c.ipcOff << " CUDA_DEVICE_MAX_CONNECTIONS="
                           << c.connections << ": " << r.describe();
  }
}

// 2 CUDA ranks + 2 host ranks in one communicator, host buffers.
TEST(CudaComm, MixedCudaAndHostRanks) {
  harness::Result r = harness::run(4, [](int rank, int nranks, flagcxUniqueId *id) {
    bool cuda = rank < 2;
    setDeviceEnv(cuda ? "cuda" : "host");
    flagcxDeviceHandle_t h;
    RANK_OK(flagcxDeviceHandleInit(&h));
    char vendor[128] = {};
    RANK_OK(h->getVendor(vendor));
    RANK_CHECK(strcmp(vendor, cuda ? "NVIDIA" : "host") == 0, "vendor %s", vendor);
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    int homo = -1;
    RANK_OK(flagcxIsHomoComm(comm, &homo));
    RANK_CHECK(homo == 0, "a mixed communicator reports homogeneous");
    RANK_CHECK(!comm->ccl, "a mixed communicator got a vendor CCL");
    SUB(collectiveSuite(comm, h, false, 4099, "mixed"));
    RANK_OK(flagcxCommDestroy(comm));
    RANK_OK(flagcxDeviceHandleFree(h));
    return 0;
  }, {{{"FLAGCX_USE_HETERO_COMM", "0"}}});
  EXPECT_TRUE(r.allOk()) << r.describe();
}

}  // namespace

int main(int argc, char **argv) {
  if (int rc = gputest::skipUnlessGpu("cuda_multi_test")) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
