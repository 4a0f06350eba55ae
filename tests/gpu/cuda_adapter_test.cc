// The CUDA device adapter in one process: the device-handle table, the
// reduce/divide kernels for every dtype (FP8 too) x op against the host kernels, copies
// between every kind of memory, streams, events, and host tasks in stream
// order (both mechanisms).  Exits 77 (skipped) without a usable GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "adapters/device/cuda/cuda_internal.h"
#include "adapters/device/cuda/cuda_kernels.h"
#include "adapters/device/host/host_reduce_kernels.h"
#include "gpu_common.h"

using namespace flagcx;

namespace {

DeviceAdapter *A() { return cudaAdapter(); }
flagcxDeviceHandle *H() { return cudaAdapter()->handle(); }

#define OK(call) ASSERT_EQ((call), flagcxSuccess) << #call << ": " << flagcxGetLastError(nullptr)
#define CU(call) ASSERT_EQ((call), cudaSuccess) << #call

// ---------- the table ----------

TEST(CudaTable, Basics) {
  char vendor[128] = {};
  OK(H()->getVendor(vendor));
  EXPECT_STREQ(vendor, "NVIDIA");
  int n = 0, d = -1;
  OK(H()->getDeviceCount(&n));
  EXPECT_GE(n, 1);
  OK(H()->setDevice(0));
  OK(H()->getDevice(&d));
  EXPECT_EQ(d, 0);
  OK(H()->deviceSynchronize());
  EXPECT_STREQ(A()->name(), "cuda");
  printf("stream-ordered host work: %s\n", cuda::waitModeName());
}

TEST(CudaTable, MemoryRoundTrips) {
  const size_t n = (1 << 20) + 13;
  std::vector<unsigned char> src(n), back(n);
  for (size_t i = 0; i < n; i++) src[i] = static_cast<unsigned char>(i * 7 + 3);
  for (flagcxMemType_t t : {flagcxMemDevice, flagcxMemHost, flagcxMemManaged}) {
    void *p = nullptr, *q = nullptr;
    OK(H()->deviceMalloc(&p, n, t, nullptr));
    OK(H()->deviceMalloc(&q, n, t, nullptr));
    ASSERT_NE(p, nullptr);
    // NULL stream: synchronous.
    OK(H()->deviceMemcpy(p, src.data(), n, flagcxMemcpyHostToDevice, nullptr));
    OK(H()->deviceMemcpy(q, p, n, flagcxMemcpyDeviceToDevice, nullptr));
    std::fill(back.begin(), back.end(), 0);
    OK(H()->deviceMemcpy(back.data(), q, n, flagcxMemcpyDeviceToHost, nullptr));
    EXPECT_EQ(memcmp(back.data(), src.data(), n), 0) << "type " << t;
    // On a stream.
    flagcxStream_t s;
    OK(H()->streamCreate(&s));
    OK(H()->deviceMemset(q, 0x5a, n, t, s));
    OK(H()->deviceMemcpy(back.data(), q, n, flagcxMemcpyDeviceToHost, s));
    OK(H()->streamSynchronize(s));
    for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(back[i], 0x5a);
    OK(H()->deviceMemset(q, 0x11, n, t, nullptr));
    OK(H()->deviceMemcpy(back.data(), q, n, flagcxMemcpyDeviceToHost, nullptr));
    EXPECT_EQ(back[n - 1], 0x11);
    OK(H()->streamDestroy(s));
    if (t == flagcxMemHost) {
      void *dp = nullptr;
      OK(H()->hostGetDevicePointer(&dp, p));
      EXPECT_NE(dp, nullptr);
    }
    OK(H()->deviceFree(p, t, nullptr));
    OK(H()->deviceFree(q, t, nullptr));
  }
  // A free with a stream waits for it.
  void *p;
  flagcxStream_t s;
  OK(H()->streamCreate(&s));
  OK(H()->deviceMalloc(&p, 1 << 20, flagcxMemDevice, s));
  OK(H()->deviceMemset(p, 1, 1 << 20, flagcxMemDevice, s));
  OK(H()->deviceFree(p, flagcxMemDevice, s));
  OK(H()->streamDestroy(s));
  int junk;
  EXPECT_NE(H()->deviceFree(&junk, flagcxMemDevice, nullptr), flagcxSuccess);
}

// ---------- reduce / divide against the host kernels ----------

uint16_t f2bf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
uint16_t f2h(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  memcpy(&u, &h, 2);
  return u;
}

void fillRandom(std::vector<unsigned char> &buf, flagcxDataType_t dt, uint32_t seed) {
  std::mt19937 rng(seed);
  size_t ts = getFlagcxDataTypeSize(dt), n = buf.size() / ts;
  std::uniform_int_distribution<int> small(-9, 9);
  std::uniform_real_distribution<float> real(-3.f, 3.f);
  for (size_t i = 0; i < n; i++) {
    unsigned char *p = buf.data() + i * ts;
    int v = small(rng);
    switch (dt) {
      case flagcxInt8: { int8_t x = static_cast<int8_t>(v); memcpy(p, &x, 1); break; }
      case flagcxUint8: { uint8_t x = static_cast<uint8_t>(v + 9); memcpy(p, &x, 1); break; }
      case flagcxInt32: { int32_t x = v * 1000; memcpy(p, &x, 4); break; }
      case flagcxUint32: { uint32_t x = static_cast<uint32_t>(v + 9) * 1000u; memcpy(p, &x, 4); break; }
      case flagcxInt64: { int64_t x = static_cast<int64_t>(v) * 100000; memcpy(p, &x, 8); break; }
      case flagcxUint64: { uint64_t x = static_cast<uint64_t>(v + 9) * 100000u; memcpy(p, &x, 8); break; }
      case flagcxFloat16: { uint16_t x = f2h(real(rng)); memcpy(p, &x, 2); break; }
      case flagcxFloat32: { float x = real(rng); memcpy(p, &x, 4); break; }
      case flagcxFloat64: { double x = real(rng) * 1.000001; memcpy(p, &x, 8); break; }
      case flagcxBfloat16: { uint16_t x = f2bf(real(rng)); memcpy(p, &x, 2); break; }
      case flagcxFloat8e4m3: *p = reduce_kernels::floatToE4m3(real(rng)); break;
      case flagcxFloat8e5m2: *p = reduce_kernels::floatToE5m2(real(rng)); break;
      default: break;
    }
  }
}

const flagcxDataType_t kTypes[] = {flagcxInt8,    flagcxUint8,    flagcxInt32,      flagcxUint32,
                                   flagcxInt64,   flagcxUint64,   flagcxFloat16,    flagcxFloat32,
                                   flagcxFloat64, flagcxBfloat16, flagcxFloat8e4m3, flagcxFloat8e5m2};
const flagcxRedOp_t kOps[] = {flagcxSum, flagcxProd, flagcxMax, flagcxMin, flagcxAvg};

struct Offsets {
  size_t d, a, b;  // in elements from a 256-byte aligned base
};

void everyTypeOpCountAlignment() {
  const size_t counts[] = {1, 5, 31, 4096 + 3, (1u << 20) + 7};
  // Equal offsets (vectors), and offsets that differ so that the operands
  // share only an 8-, 4-, 2-byte or element boundary (the narrower word paths).
  const Offsets offs[] = {{0, 0, 0}, {1, 1, 1}, {3, 0, 1}, {0, 2, 2}, {2, 0, 4}, {4, 0, 12}};
  flagcxStream_t s;
  OK(H()->streamCreate(&s));
  int checked = 0;
  for (auto dt : kTypes) {
    size_t ts = getFlagcxDataTypeSize(dt);
    size_t maxBytes = (counts[4] + 16) * ts;
    std::vector<unsigned char> ha(maxBytes), hb(maxBytes), ref(maxBytes), got(maxBytes);
    fillRandom(ha, dt, 1 + dt);
    fillRandom(hb, dt, 100 + dt);
    void *da, *db, *dd;
    OK(H()->deviceMalloc(&da, maxBytes, flagcxMemDevice, nullptr));
    OK(H()->deviceMalloc(&db, maxBytes, flagcxMemDevice, nullptr));
    OK(H()->deviceMalloc(&dd, maxBytes, flagcxMemDevice, nullptr));
    OK(H()->deviceMemcpy(da, ha.data(), maxBytes, flagcxMemcpyHostToDevice, nullptr));
    OK(H()->deviceMemcpy(db, hb.data(), maxBytes, flagcxMemcpyHostToDevice, nullptr));
    for (auto op : kOps) {
      for (size_t n : counts) {
        for (const Offsets &o : offs) {
          char *pd = static_cast<char *>(dd) + o.d * ts;
          const char *pa = static_cast<const char *>(da) + o.a * ts;
          const char *pb = static_cast<const char *>(db) + o.b * ts;
          OK(A()->reduce(pd, pa, pb, n, dt, op, s));
          OK(H()->deviceMemcpy(got.data(), pd, n * ts, flagcxMemcpyDeviceToHost, s));
          OK(H()->streamSynchronize(s));
          OK(hostReduce(ref.data(), ha.data() + o.a * ts, hb.data() + o.b * ts, n, dt, op));
          ASSERT_EQ(memcmp(got.data(), ref.data(), n * ts), 0)
              << "dtype " << dt << " op " << op << " count " << n << " offsets " << o.d << ","
              << o.a << "," << o.b;
          checked++;
        }
      }
      // In place (dst == a), NULL stream.
      size_t n = counts[3];
      OK(H()->deviceMemcpy(dd, ha.data(), n * ts, flagcxMemcpyHostToDevice, nullptr));
      OK(A()->reduce(dd, dd, db, n, dt, op, nullptr));
      OK(H()->deviceMemcpy(got.data(), dd, n * ts, flagcxMemcpyDeviceToHost, nullptr));
      OK(hostReduce(ref.data(), ha.data(), hb.data(), n, dt, op));
      ASSERT_EQ(memcmp(got.data(), ref.data(), n * ts), 0) << "in place, dtype " << dt << " op " << op;
    }
    // Divide (the end of Avg), by several divisors, misaligned too.
    for (uint64_t q : {1ull, 3ull, 7ull, 1000ull}) {
      for (auto [od, os] : {std::pair<size_t, size_t>{0, 0}, {1, 1}, {0, 1}, {2, 0}}) {
        size_t n = counts[4];
        OK(A()->divide(static_cast<char *>(dd) + od * ts, static_cast<char *>(da) + os * ts, n, dt, q, s));
        OK(H()->deviceMemcpy(got.data(), static_cast<char *>(dd) + od * ts, n * ts,
                             flagcxMemcpyDeviceToHost, s));
        OK(H()->streamSynchronize(s));
        OK(hostDivide(ref.data(), ha.data() + os * ts, n, dt, q));
        ASSERT_EQ(memcmp(got.data(), ref.data(), n * ts), 0) << "divide dtype " << dt << " by " << q;
        checked++;
      }
    }
    OK(H()->deviceFree(da, flagcxMemDevice, nullptr));
    OK(H()->deviceFree(db, flagcxMemDevice, nullptr));
    OK(H()->deviceFree(dd, flagcxMemDevice, nullptr));
  }
  OK(H()->streamDestroy(s));
  printf("reduce/divide cases checked: %d\n", checked);
}

// Every way of handling operands without a common 16-byte offset.
TEST(CudaReduce, EveryTypeOpCountAlignmentMatchesHost) {
  using P = cuda::MisalignedPath;
  for (P p : {P::best, P::realign, P::words, P::shuffle4, P::chunk, P::chunkLine}) {
    SCOPED_TRACE("misaligned path " + std::to_string(static_cast<int>(p)));
    cuda::g_misaligned = p;
    everyTypeOpCountAlignment();
    if (HasFatalFailure()) break;
  }
  cuda::g_misaligned = P::best;
}

// NULL-stream reduce/copy accept any mix of pageable, pinned and device memory.
TEST(CudaReduce, AnyMemoryMixWithNullStream) {
  const size_t n = 100003;
  const flagcxDataType_t dt = flagcxFloat32;
  std::vector<unsigned char> ha(n * 4), hb(n * 4), ref(n * 4), got(n * 4);
  fillRandom(ha, dt, 7);
  fillRandom(hb, dt, 8);
  OK(hostReduce(ref.data(), ha.data(), hb.data(), n, dt, flagcxSum));
  enum Kind { Pageable, Pinned, Device };
  for (int ka = 0; ka < 3; ka++)
    for (int kb = 0; kb < 3; kb++)
      for (int kd = 0; kd < 3; kd++) {
        void *buf[3];
        std::vector<unsigned char> pageable[3];
        int kinds[3] = {ka, kb, kd};
        for (int i = 0; i < 3; i++) {
          if (kinds[i] == Pageable) {
            pageable[i].resize(n * 4);
            buf[i] = pageable[i].data();
          } else {
            OK(H()->deviceMalloc(&buf[i], n * 4, kinds[i] == Pinned ? flagcxMemHost : flagcxMemDevice,
                                 nullptr));
          }
        }
        OK(A()->copy(buf[0], ha.data(), n * 4, nullptr));
        OK(A()->copy(buf[1], hb.data(), n * 4, nullptr));
        OK(A()->reduce(buf[2], buf[0], buf[1], n, dt, flagcxSum, nullptr));
        OK(A()->copy(got.data(), buf[2], n * 4, nullptr));
        EXPECT_EQ(memcmp(got.data(), ref.data(), n * 4), 0) << "kinds a=" << ka << " b=" << kb << " d=" << kd;
        for (int i = 0; i < 3; i++)
          if (kinds[i] != Pageable) {
            OK(H()->deviceFree(buf[i], flagcxMemDevice, nullptr));
          }
      }
}

// ---------- streams and events ----------

TEST(CudaStreams, WrapNativeStreamAndEvents) {
  cudaStream_t native;
  CU(cudaStreamCreateWithFlags(&native, cudaStreamNonBlocking));
  flagcxStream_t w;
  OK(H()->streamCopy(&w, native));
  EXPECT_EQ(H()->streamDestroy(w), flagcxInvalidUsage);  // a wrapper is freed, not destroyed
  void *d;
  const size_t n = 64 << 20;
  OK(H()->deviceMalloc(&d, n, flagcxMemDevice, nullptr));
  flagcxEvent_t e0, e1;
  OK(H()->eventCreate(&e0, flagcxEventDefault));
  OK(H()->eventCreate(&e1, flagcxEventDisableTiming));
  OK(H()->eventRecord(e0, w));
  for (int i = 0; i < 20; i++) OK(H()->deviceMemset(d, i, n, flagcxMemDevice, w));
  OK(H()->eventRecord(e1, w));
  // Another stream waits for the event, then reads.
  flagcxStream_t s2;
  OK(H()->streamCreate(&s2));
  OK(H()->streamWaitEvent(s2, e1));
  unsigned char last = 0;
  OK(H()->deviceMemcpy(&last, static_cast<char *>(d) + n - 1, 1, flagcxMemcpyDeviceToHost, s2));
  OK(H()->streamSynchronize(s2));
  EXPECT_EQ(last, 19);
  OK(H()->eventSynchronize(e1));
  EXPECT_EQ(H()->eventQuery(e1), flagcxSuccess);
  EXPECT_EQ(H()->streamQuery(w), flagcxSuccess);
  OK(H()->streamFree(w));
  // The native stream is still the caller's and still works.
  CU(cudaMemsetAsync(d, 3, n, native));
  CU(cudaStreamSynchronize(native));
  CU(cudaStreamDestroy(native));
  OK(H()->eventDestroy(e0));
  OK(H()->eventDestroy(e1));
  OK(H()->streamDestroy(s2));
  OK(H()->deviceFree(d, flagcxMemDevice, nullptr));
  EXPECT_NE(H()->eventQuery(e0), flagcxSuccess);  // destroyed handles are refused
  EXPECT_NE(H()->streamSynchronize(s2), flagcxSuccess);
}

// eventElapsedTime (FlagCX 0.13's slot 22): through the table a program
// gets, timing device work on a flagcx stream; the refusals of the slot.
TEST(CudaStreams, EventElapsedTime) {
  flagcxDeviceHandle_t h = nullptr;
  OK(flagcxDeviceHandleInit(&h));  // FLAGCX_DEVICE=auto: the CUDA table here
  ASSERT_NE(h->eventElapsedTime, nullptr);
  flagcxStream_t s;
  OK(h->streamCreate(&s));
  void *d;
  const size_t n = 64 << 20;
  OK(h->deviceMalloc(&d, n, flagcxMemDevice, nullptr));
  flagcxEvent_t e0, e1, nt;
  OK(h->eventCreate(&e0, flagcxEventDefault));
  OK(h->eventCreate(&e1, flagcxEventDefault));
  OK(h->eventCreate(&nt, flagcxEventDisableTiming));
  OK(h->eventRecord(e0, s));
  for (int i = 0; i < 20; i++) OK(h->deviceMemset(d, i, n, flagcxMemDevice, s));
  OK(h->eventRecord(e1, s));
  float ms = -1;
  flagcxResult_t r = h->eventElapsedTime(&ms, e0, e1);
  EXPECT_TRUE(r == flagcxSuccess || r == flagcxInProgress) << flagcxGetErrorString(r);
  OK(h->eventSynchronize(e1));
  OK(h->eventElapsedTime(&ms, e0, e1));
  EXPECT_GT(ms, 0.0f);  // 20 memsets of 64 MiB take time on any GPU
  printf("20 x 64 MiB memset: %.3f ms by eventElapsedTime\n", ms);
  OK(h->eventRecord(nt, s));
  OK(h->streamSynchronize(s));
  EXPECT_EQ(h->eventElapsedTime(&ms, e0, nt), flagcxInvalidUsage);
  EXPECT_EQ(h->eventElapsedTime(nullptr, e0, e1), flagcxInvalidArgument);
  EXPECT_EQ(h->eventElapsedTime(&ms, nullptr, e1), flagcxInvalidArgument);
  OK(h->eventDestroy(nt));
  EXPECT_EQ(h->eventElapsedTime(&ms, e0, nt), flagcxInvalidArgument);  // destroyed
  OK(h->eventDestroy(e0));
  OK(h->eventDestroy(e1));
  OK(h->deviceFree(d, flagcxMemDevice, nullptr));
  OK(h->streamDestroy(s));
  OK(flagcxDeviceHandleFree(h));
}

TEST(CudaStreams, NullAndLegacyStreams) {
  flagcxStream_t w;
  OK(H()->streamCopy(&w, nullptr));  // wraps the legacy default stream
  flagcxEvent_t e;
  OK(H()->eventCreate(&e, flagcxEventDefault));
  OK(H()->eventRecord(e, w));
  OK(H()->eventRecord(e, nullptr));
  OK(H()->streamWaitEvent(nullptr, e));
  OK(H()->streamSynchronize(nullptr));
  OK(H()->streamSynchronize(w));
  OK(H()->streamFree(w));
  OK(H()->eventDestroy(e));
}

// ---------- host tasks in stream order ----------

struct Gate {  // a host function that holds a stream for `ms`
  int ms;
  static void CUDART_CB run(void *p) {
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<Gate *>(p)->ms));
  }
};

struct Check {
  void *dev;           // device word the GPU set before the task
  int expect;
  int newValue;        // written back for the GPU work after the task
  std::atomic<int> ran{0};
  std::atomic<int> sawBefore{-1};
  static flagcxResult_t run(void *p) {
    auto *c = static_cast<Check *>(p);
    int v = -1;
    flagcxResult_t r = cudaAdapter()->copy(&v, c->dev, sizeof(v), nullptr);
    if (r != flagcxSuccess) return r;
    c->sawBefore = v;
    r = cudaAdapter()->copy(c->dev, &c->newValue, sizeof(int), nullptr);
    c->ran++;
    return r;
  }
};

void orderingCase(cuda::WaitMode mode) {
  cuda::forceWaitMode(mode);
  flagcxStream_t s;
  OK(H()->streamCreate(&s));
  cudaStream_t native = cuda::nativeOf(s);
  int *d, *pinned;  // pinned host memory: copies from it never block the caller
  OK(H()->deviceMalloc(reinterpret_cast<void **>(&d), sizeof(int) * 2, flagcxMemDevice, nullptr));
  OK(H()->deviceMalloc(reinterpret_cast<void **>(&pinned), sizeof(int) * 3, flagcxMemHost, nullptr));
  pinned[0] = 7;
  pinned[1] = pinned[2] = 0;
  Gate gate{300};
  CU(cudaLaunchHostFunc(native, Gate::run, &gate));  // the stream is busy for 300 ms
  OK(H()->deviceMemcpy(d, pinned, sizeof(int), flagcxMemcpyHostToDevice, s));
  Check c;
  c.dev = d;
  c.newValue = 42;
  auto t0 = std::chrono::steady_clock::now();
  OK(A()->enqueue(s, StreamTask{Check::run, &c}));
  double enqMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const bool handOff = mode == cuda::WaitMode::HandOff;
  if (handOff) {
    // The call returns once the stream's earlier work (the 300 ms gate) and the task are done.
    EXPECT_GE(enqMs, 250.0) << "hand-off: enqueue returned before the stream's earlier work";
    EXPECT_EQ(c.ran.load(), 1) << "hand-off: enqueue returned before the task ran";
  } else {
    EXPECT_LT(enqMs, 100.0) << "enqueue blocked the caller";
  }
  // GPU work after the task must see the task's write.
  OK(A()->copy(d + 1, d, sizeof(int), s));
  OK(H()->deviceMemcpy(pinned + 1, d, sizeof(int) * 2, flagcxMemcpyDeviceToHost, s));
  if (!handOff) {
    EXPECT_EQ(c.ran.load(), 0) << "the task ran before its inputs were ready";
  }
  OK(H()->streamSynchronize(s));
  EXPECT_EQ(c.ran.load(), 1);
  EXPECT_EQ(c.sawBefore.load(), 7);
  EXPECT_EQ(pinned[1], 42);
  EXPECT_EQ(pinned[2], 42);
  OK(H()->deviceFree(pinned, flagcxMemHost, nullptr));
  OK(H()->deviceFree(d, flagcxMemDevice, nullptr));
  OK(H()->streamDestroy(s));
  printf("mode %s: enqueue returned in %.3f ms (the stream was held for 300 ms)\n",
         handOff ? "hand-off" : mode == cuda::WaitMode::HostFunc ? "host-func" : "stream-wait-value", enqMs);
  cuda::forceWaitMode(cuda::WaitMode::Auto);
}

TEST(CudaEnqueue, OrderingHandOff) {
  cuda::forceWaitMode(cuda::WaitMode::Auto);
  EXPECT_STREQ(cuda::waitModeName(), "hand-off") << "the default mechanism";
  orderingCase(cuda::WaitMode::HandOff);
}

TEST(CudaEnqueue, OrderingStreamWaitValue) {
  cuda::forceWaitMode(cuda::WaitMode::StreamWaitValue);
  if (strcmp(cuda::waitModeName(), "stream-wait-value") != 0)
    GTEST_SKIP() << "cuStreamWaitValue32 is not available here";
  orderingCase(cuda::WaitMode::StreamWaitValue);
}

TEST(CudaEnqueue, OrderingHostFuncFallback) { orderingCase(cuda::WaitMode::HostFunc); }

struct Seq {
  std::atomic<int> *counter;
  int expect;
  std::atomic<int> *bad;
  static flagcxResult_t run(void *p) {
    auto *s = static_cast<Seq *>(p);
    if (s->counter->fetch_add(1) != s->expect) s->bad->fetch_add(1);
    return flagcxSuccess;
  }
};

TEST(CudaEnqueue, ManyTasksManyStreamsInOrder) {
  const int kStreams = 4, kTasks = 500;
  flagcxStream_t s[kStreams];
  std::atomic<int> counters[kStreams], bad{0};
  std::vector<std::vector<Seq>> seqs(kStreams, std::vector<Seq>(kTasks));
  void *d;
  OK(H()->deviceMalloc(&d, 1 << 20, flagcxMemDevice, nullptr));
  for (int i = 0; i < kStreams; i++) {
    OK(H()->streamCreate(&s[i]));
    counters[i] = 0;
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < kTasks; t++)
    for (int i = 0; i < kStreams; i++) {
      seqs[i][t] = Seq{&counters[i], t, &bad};
      if (t % 50 == 0) {
        OK(H()->deviceMemset(d, t, 1 << 20, flagcxMemDevice, s[i]));
      }
      OK(A()->enqueue(s[i], StreamTask{Seq::run, &seqs[i][t]}));
    }
  for (int i = 0; i < kStreams; i++) OK(H()->streamSynchronize(s[i]));
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < kStreams; i++) {
    EXPECT_EQ(counters[i].load(), kTasks);
    OK(H()->streamDestroy(s[i]));
  }
  EXPECT_EQ(bad.load(), 0);
  OK(H()->deviceFree(d, flagcxMemDevice, nullptr));
  printf("%d stream tasks in %.0f us (%.2f us each, enqueue to completion, pipelined)\n",
         kStreams * kTasks, us, us / (kStreams * kTasks));
}

// Far more tasks than CUDA's launch queue holds, behind a held stream, with
// no synchronization in between: enqueue must apply back-pressure, not hang.
TEST(CudaEnqueue, DeepQueueDoesNotDeadlock) {
  flagcxStream_t s;
  OK(H()->streamCreate(&s));
  Gate gate{100};
  CU(cudaLaunchHostFunc(cuda::nativeOf(s), Gate::run, &gate));
  const int kTasks = 5000;
  std::atomic<int> counter{0}, bad{0};
  std::vector<Seq> seqs(kTasks);
  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < kTasks; t++) {
    seqs[t] = Seq{&counter, t, &bad};
    OK(A()->enqueue(s, StreamTask{Seq::run, &seqs[t]}));
  }
  OK(H()->streamSynchronize(s));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(counter.load(), kTasks);
  EXPECT_EQ(bad.load(), 0);
  OK(H()->streamDestroy(s));
  printf("%d tasks on one stream behind a 100 ms hold: %.1f ms\n", kTasks, ms);
}

flagcxResult_t failTask(void *) { return flagcxRemoteError; }
flagcxResult_t nopTask(void *p) {
  static_cast<std::atomic<int> *>(p)->fetch_add(1);
  return flagcxSuccess;
}

TEST(CudaEnqueue, FailureIsStickyAndStreamNeverHangs) {
  flagcxStream_t s;
  OK(H()->streamCreate(&s));
  std::atomic<int> hits{0};
  // Hand-off (the default) returns the task's failure from the call too.
  flagcxResult_t r = A()->enqueue(s, StreamTask{failTask, nullptr});
  if (strcmp(cuda::waitModeName(), "hand-off") == 0) EXPECT_EQ(r, flagcxRemoteError);
  else OK(r);
  OK(A()->enqueue(s, StreamTask{nopTask, &hits}));
  EXPECT_EQ(H()->streamSynchronize(s), flagcxRemoteError);
  EXPECT_EQ(hits.load(), 1);
  EXPECT_EQ(H()->streamQuery(s), flagcxRemoteError);
  OK(H()->streamDestroy(s));
  // A NULL stream runs the task now.
  OK(A()->enqueue(nullptr, StreamTask{nopTask, &hits}));
  EXPECT_EQ(hits.load(), 2);
}

TEST(CudaEnqueue, DestroyWithPendingTasksIsDeferred) {
  flagcxStream_t s;
  OK(H()->streamCreate(&s));
  Gate gate{200};
  CU(cudaLaunchHostFunc(cuda::nativeOf(s), Gate::run, &gate));
  std::atomic<int> hits{0};
  for (int i = 0; i < 10; i++) OK(A()->enqueue(s, StreamTask{nopTask, &hits}));
  OK(H()->streamDestroy(s));  // returns at once; the tasks still run
  for (int i = 0; i < 300 && hits.load() < 10; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(hits.load(), 10);
}

TEST(CudaEnqueue, GraphCaptureIsRefusedClearly) {
  cudaStream_t native;
  CU(cudaStreamCreateWithFlags(&native, cudaStreamNonBlocking));
  flagcxStream_t w;
  OK(H()->streamCopy(&w, native));
  CU(cudaStreamBeginCapture(native, cudaStreamCaptureModeRelaxed));
  std::atomic<int> hits{0};
  EXPECT_EQ(A()->enqueue(w, StreamTask{nopTask, &hits}), flagcxInvalidUsage);
  EXPECT_NE(std::string(flagcxGetLastError(nullptr)).find("graph"), std::string::npos);
  cudaGraph_t g;
  CU(cudaStreamEndCapture(native, &g));
  CU(cudaGraphDestroy(g));
  EXPECT_EQ(hits.load(), 0);
  OK(H()->streamFree(w));
  CU(cudaStreamDestroy(native));
}

// ---------- batched copies (the P2P engine's KV-cache vectors) ----------

// Pieces of every shape the batch path splits: shared 16-byte offset (kernel),
// different offsets (one cudaMemcpyAsync each), empty, longer than a chunk,
// a tail shorter than a vector; then a second, larger batch (the chunk list
// grows) and a batch of one.  Every destination byte is checked, and bytes
// between pieces must stay untouched.
TEST(CudaBatchCopy, EveryShapeMovesExactlyItsBytes) {
  const size_t kBuf = 8 << 20;
  char *src = nullptr, *dst = nullptr;
  CU(cudaMalloc(reinterpret_cast<void **>(&src), kBuf));
  CU(cudaMalloc(reinterpret_cast<void **>(&dst), kBuf));
  std::vector<char> hs(kBuf), hd(kBuf);
  std::mt19937 rng(7);
  for (auto &c : hs) c = static_cast<char>(rng());
  CU(cudaMemcpy(src, hs.data(), kBuf, cudaMemcpyHostToDevice));
  for (int round = 0; round < 3; round++) {
    CU(cudaMemset(dst, 0x5a, kBuf));
    std::vector<char> want(kBuf, 0x5a);
    std::vector<DeviceAdapter::CopyPiece> pieces;
    size_t so = 0, dofs = 0;
    int count = round == 2 ? 1 : round == 0 ? 40 : 400;
    for (int i = 0; i < count; i++) {
      // (one piece of several 1 MiB chunks, a fifth of 200 KiB, empty ones)
      size_t len = i == 3 ? (5 << 19) + 5 : i % 7 == 0 ? 0 : i % 5 == 0 ? (200 << 10) + 3 : 1 + rng() % 9000;
      size_t sa = rng() % 64, da = i % 3 == 0 ? rng() % 64 : sa;  // a third misaligned
      so = (so + sa + 15) / 16 * 16 + sa;
      dofs = (dofs + da + 15) / 16 * 16 + da;
      if (so + len > kBuf || dofs + len > kBuf) break;
      pieces.push_back({dst + dofs, src + so, len});
      memcpy(want.data() + dofs, hs.data() + so, len);
      so += len + 16;
      dofs += len + 16;
    }
    OK(A()->copyBatchAsync(pieces.data(), pieces.size()));
    OK(A()->flush());
    CU(cudaMemcpy(hd.data(), dst, kBuf, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t k = 0; k < kBuf; k++) bad += hd[k] != want[k];
    EXPECT_EQ(bad, 0u) << "round " << round << ", " << pieces.size() << " pieces";
  }
  CU(cudaFree(src));
  CU(cudaFree(dst));
}

// Many batches issued without a flush in between: the chunk ring wraps
// (4096 entries at first) and grows (one batch larger than the ring), and no
// kernel may read an entry already rewritten for a later batch.  Each pass
// copies its own random pieces into its own region of dst.
TEST(CudaBatchCopy, RingWrapsAndGrowsWithoutMixingBatches) {
  const size_t kBuf = 8 << 20, kPasses = 96, kRegion = kBuf / kPasses;
  char *src = nullptr, *dst = nullptr;
  CU(cudaMalloc(reinterpret_cast<void **>(&src), kBuf));
  CU(cudaMalloc(reinterpret_cast<void **>(&dst), kBuf + (32 << 20)));
  std::vector<char> hs(kBuf), hd(kBuf);
  std::mt19937 rng(11);
  for (auto &c : hs) c = static_cast<char>(rng());
  CU(cudaMemcpy(src, hs.data(), kBuf, cudaMemcpyHostToDevice));
  CU(cudaMemset(dst, 0x33, kBuf + (32 << 20)));
  std::vector<char> want(kBuf, 0x33);
  for (size_t pass = 0; pass < kPasses; pass++) {
    std::vector<DeviceAdapter::CopyPiece> pieces;
    size_t d = pass * kRegion;
    for (int i = 0; i < 64; i++) {
      size_t len = 1 + rng() % 1000;
      size_t so = (rng() % (kBuf - len)) & ~size_t{15};
      if (d + len > (pass + 1) * kRegion) break;
      pieces.push_back({dst + d, src + so, len});
      memcpy(want.data() + d, hs.data() + so, len);
      d = (d + len + 31) & ~size_t{15};
    }
    for (size_t at = 0; at < pieces.size(); at += 16)
      OK(A()->copyBatchAsync(pieces.data() + at, std::min<size_t>(16, pieces.size() - at)));
    if (pass == kPasses / 2) {
      // One batch of 8192 one-chunk pieces, more than the ring holds, makes
      // it grow (into the 32 MiB behind the region checked above).
      std::vector<DeviceAdapter::CopyPiece> big;
      for (size_t j = 0; j < 8192; j++) big.push_back({dst + kBuf + j * 4096, src + j * 16, 4096});
      OK(A()->copyBatchAsync(big.data(), big.size()));
    }
  }
  OK(A()->flush());
  CU(cudaMemcpy(hd.data(), dst, kBuf, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t k = 0; k < kBuf; k++) bad += hd[k] != want[k];
  EXPECT_EQ(bad, 0u);
  std::vector<char> tail(4096);
  CU(cudaMemcpy(tail.data(), dst + kBuf + 8191 * 4096, 4096, cudaMemcpyDeviceToHost));
  EXPECT_EQ(memcmp(tail.data(), hs.data() + 8191 * 16, 4096), 0);
  CU(cudaFree(src));
  CU(cudaFree(dst));
}

// ---------- IPC handle plumbing inside one process (the two-process test
// is in cuda_multi_test) ----------

TEST(CudaIpc, HandleFillAndRefusals) {
  flagcxIpcMemHandle_t h;
  size_t sz = 0;
  OK(H()->ipcMemHandleCreate(&h, &sz));
  EXPECT_GE(sz, sizeof(cudaIpcMemHandle_t));
  void *d;
  OK(H()->deviceMalloc(&d, 1 << 20, flagcxMemDevice, nullptr));
  OK(H()->ipcMemHandleGet(h, static_cast<char *>(d) + 4096));
  int x;
  EXPECT_NE(H()->ipcMemHandleClose(&x), flagcxSuccess);
  OK(H()->ipcMemHandleFree(h));
  OK(H()->deviceFree(d, flagcxMemDevice, nullptr));
}

}  // namespace

int main(int argc, char **argv) {
  if (int rc = gputest::skipUnlessGpu("cuda_adapter_test")) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
