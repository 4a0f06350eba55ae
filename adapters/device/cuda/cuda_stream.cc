// Streams, events, and host work in stream order for the CUDA adapter.
//
// enqueueTask(stream, task) must run a host function after everything
// already queued on the user's CUDA stream, and hold back everything queued
// after it, without blocking the caller.  Design:
//
//   caller thread                      progress thread (one per process)
//   -------------                      ---------------------------------
//   cudaEventRecord(ready, s)
//   cuStreamWaitValue32(s, flag >= k)  pop item (FIFO over all streams)
//   push {ready, task, k}  ----------> cudaEventSynchronize(ready)
//   return                             task.run(arg)
//                                      *flag = k   (host-mapped word: releases s)
//
// `flag` is one 32-bit word of pinned, device-mapped host memory per stream
// wrapper; k counts the tasks of that wrapper, and the wait uses the driver's
// cyclic ">=" compare, so wrap-around is harmless.  cudaStreamSynchronize(s)
// is the only wait a user needs.  The progress thread never calls anything
// that synchronizes the device or the legacy default stream (cudaFree,
// cudaFreeHost, cudaMemcpy): a held user stream would deadlock it.  Its own
// "now" work goes through a non-blocking internal stream.
//
// Fallback (driver without stream memory operations, or they do not work on
// this platform, found by a one-time probe): cudaLaunchHostFunc(s, hold).
// `hold` runs on the CUDA callback thread when s reaches it, hands the task
// to the progress thread and blocks until the task is done (host functions
// may not call CUDA themselves, the progress thread can).  This blocks
// CUDA's callback thread for the duration of the task.
//
// Back-pressure: at most kMaxPending tasks per stream are queued; enqueue
// waits beyond that.  Without it a deep queue fills CUDA's launch queue, the
// enqueuer blocks inside cudaEventRecord, and nothing the progress thread
// needs may be held meanwhile (the wrapper's lifetime is reference-counted,
// lock-free, for that reason).
//
// Lanes: one progress thread per lane (StreamTask::lane; the executor uses
// one per communicator) runs that lane's tasks in enqueue order across all
// streams, so a task waits for every task of its lane enqueued before it.
// Ranks that share a process have their own lanes and never queue behind
// each other.  Streams under CUDA graph capture are
// refused with flagcxInvalidUsage: a captured wait on a host word would be
// replayed without the host task behind it.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <thread>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "adapters/device/handle_checks.h"
#include "cuda_internal.h"

namespace flagcx::cuda {
namespace {

// ---- registry of live stream/event wrappers ----
std::mutex g_regMu;
std::unordered_set<const void *> g_live;

// Tasks queued per stream before enqueue waits (see enqueueTask).
constexpr int kMaxPending = 128;

// ---- pinned, device-mapped release words ----
constexpr size_t kSlotStride = 64;  // one word per cache line
constexpr size_t kPageBytes = 4096;
struct FlagPool {
  std::mutex mu;
  std::vector<char *> pages;  // never freed: cudaFreeHost would synchronize the device
  std::vector<int> freeSlots;

  flagcxResult_t take(Stream *s) {
    std::lock_guard<std::mutex> g(mu);
    if (freeSlots.empty()) {
      void *p = nullptr;
      FLAGCX_CUDA_TRY("cudaHostAlloc (stream release words)",
                      cudaHostAlloc(&p, kPageBytes, cudaHostAllocMapped | cudaHostAllocPortable));
      memset(p, 0, kPageBytes);
      int base = static_cast<int>(pages.size() * (kPageBytes / kSlotStride));
      pages.push_back(static_cast<char *>(p));
      for (int i = static_cast<int>(kPageBytes / kSlotStride) - 1; i >= 0; i--)
        freeSlots.push_back(base + i);
    }
    int slot = freeSlots.back();
    char *host = pages[static_cast<size_t>(slot) / (kPageBytes / kSlotStride)] +
                 (static_cast<size_t>(slot) % (kPageBytes / kSlotStride)) * kSlotStride;
    void *dev = nullptr;
    FLAGCX_CUDA_TRY("cudaHostGetDevicePointer (stream release word)",
                    cudaHostGetDevicePointer(&dev, host, 0));
    freeSlots.pop_back();
    s->flagSlot = slot;
    s->flag = reinterpret_cast<volatile uint32_t *>(host);
    s->flagDev = reinterpret_cast<CUdeviceptr>(dev);
    // A recycled word keeps its last value: continue counting from there.
    s->issued = __atomic_load_n(s->flag, __ATOMIC_ACQUIRE);
    return flagcxSuccess;
  }
  void give(int slot) {
    std::lock_guard<std::mutex> g(mu);
    freeSlots.push_back(slot);
  }
};
FlagPool &flagPool() {
  static FlagPool *p = new FlagPool;  // outlives static destruction
  return *p;
}

void deleteStream(Stream *s) {
  if (s->flagSlot >= 0) flagPool().give(s->flagSlot);
  s->magic = 0;
  delete s;
}

// Drop one reference; the last one frees the wrapper.
void unref(Stream *s) {
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) deleteStream(s);
}

// A task was released: no lock here (see Stream::refs).
void finishPending(Stream *s) {
  s->pending.fetch_sub(1, std::memory_order_release);
  unref(s);
}

void noteError(Stream *s, flagcxResult_t r) {
  if (r == flagcxSuccess) return;
  int expected = flagcxSuccess;
  s->error.compare_exchange_strong(expected, r);
}

// ---- the progress thread ----
struct HostHold {  // fallback mode: one per task
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false, done = false;
};

struct Item {
  Stream *s;
  StreamTask task;
  cudaEvent_t ready;  // StreamWaitValue mode
  uint32_t value;
  HostHold *hold;     // HostFunc mode
};

class Progress {
 public:
  Progress() : th_([this] { loop(); }) {}
  ~Progress() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    th_.join();
  }

  void push(const Item &it) {
    {
      std::lock_guard<std::mutex> g(mu_);
      q_.push_back(it);
    }
    cv_.notify_one();
  }

  // A ready-event from the pool (created on the stream's device).
  flagcxResult_t takeEvent(int device, cudaEvent_t *ev) {
    {
      std::lock_guard<std::mutex> g(mu_);
      auto &pool = events_[device & 63];
      if (!pool.empty()) {
        *ev = pool.back();
        pool.pop_back();
        return flagcxSuccess;
      }
    }
    FLAGCX_CUDA_TRY("cudaEventCreateWithFlags (enqueue)",
                    cudaEventCreateWithFlags(ev, cudaEventDisableTiming));
    return flagcxSuccess;
  }
  void giveEvent(int device, cudaEvent_t ev) {
    std::lock_guard<std::mutex> g(mu_);
    events_[device & 63].push_back(ev);
  }

 private:
  void loop() {
    int dev = -1;
    for (;;) {
      Item it;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [this] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;  // stop requested and nothing left
        it = q_.front();
        q_.pop_front();
      }
      Stream *s = it.s;
      if (s->device != dev) {
        dev = s->device;
        cudaSetDevice(dev);
      }
      if (it.hold) {
        runHeld(it);
        continue;
      }
      flagcxResult_t r = flagcxSuccess;
      cudaError_t e = cudaEventSynchronize(it.ready);
      if (e != cudaSuccess)
        r = cudaFail("cudaEventSynchronize (inputs of a stream task)", e);
      else
        r = it.task.run(it.task.arg);
      noteError(s, r);
      // Release the stream even after a failure, so that it never hangs; the
      // error is returned by streamSynchronize.
      __atomic_store_n(s->flag, it.value, __ATOMIC_RELEASE);
      __atomic_thread_fence(__ATOMIC_SEQ_CST);
      giveEvent(s->device, it.ready);
      finishPending(s);
    }
  }

  void runHeld(const Item &it) {
    HostHold *h = it.hold;
    {
      std::unique_lock<std::mutex> lk(h->mu);
      h->cv.wait(lk, [h] { return h->ready; });
    }
    noteError(it.s, it.task.run(it.task.arg));
    Stream *s = it.s;
    {
      std::lock_guard<std::mutex> g(h->mu);
      h->done = true;
      h->cv.notify_all();  // under the lock: `hold` frees h once it owns the lock
    }
    finishPending(s);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> q_;
  bool stop_ = false;
  std::vector<cudaEvent_t> events_[64];
  std::thread th_;
};

// One progress thread per lane (see StreamTask::lane), made on first use.
std::mutex g_lanesMu;
std::unordered_map<const void *, std::unique_ptr<Progress>> *g_lanes =
    new std::unordered_map<const void *, std::unique_ptr<Progress>>();  // never freed: threads

Progress &progress(const void *lane) {
  if (!lane) {
    static Progress p;
    return p;
  }
  std::lock_guard<std::mutex> g(g_lanesMu);
  auto &slot = (*g_lanes)[lane];
  if (!slot) slot = std::make_unique<Progress>();
  return *slot;
}

// Runs on CUDA's callback thread when the stream reaches the task.
void CUDART_CB hold(void *arg) {
  auto *h = static_cast<HostHold *>(arg);
  {
    std::unique_lock<std::mutex> lk(h->mu);
    h->ready = true;
    h->cv.notify_all();
    h->cv.wait(lk, [h] { return h->done; });
  }
  delete h;
}

std::atomic<int> g_forced{static_cast<int>(WaitMode::Auto)};

// Does a stream wait on a host-mapped word, and does a host store release it?
bool probeStreamWaitValue() {
  if (!driver().streamWaitValue32) return false;
  Stream probe;
  if (flagPool().take(&probe) != flagcxSuccess) return false;
  bool ok = false;
  cudaStream_t st = nullptr;
  if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess) {
    uint32_t want = probe.issued + 1;
    CUresult cr = driver().streamWaitValue32(reinterpret_cast<CUstream>(st), probe.flagDev, want,
                                             CU_STREAM_WAIT_VALUE_GEQ);
    if (cr == CUDA_SUCCESS) {
      // Held before the store, released after it (bounded: 2 s).
      bool heldBefore = cudaStreamQuery(st) == cudaErrorNotReady;
      __atomic_store_n(probe.flag, want, __ATOMIC_RELEASE);
      for (int i = 0; i < 2000; i++) {
        cudaError_t q = cudaStreamQuery(st);
        if (q == cudaSuccess) {
          ok = heldBefore;
          break;
        }
        if (q != cudaErrorNotReady) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!ok) INFO(kInit, "cuda: cuStreamWaitValue32 on host memory did not behave; using host functions");
    } else {
      INFO(kInit, "cuda: cuStreamWaitValue32 failed (CUresult %d); using host functions",
           static_cast<int>(cr));
    }
    if (ok) cudaStreamDestroy(st);  // else leave it: it may still be held
  }
  cudaGetLastError();
  if (ok) flagPool().give(probe.flagSlot);
  probe.flagSlot = -1;
  return ok;
}

// The mechanism the probe found (once per process).
WaitMode probed() {
  static const WaitMode m = [] {
    WaitMode r = probeStreamWaitValue() ? WaitMode::StreamWaitValue : WaitMode::HostFunc;
    INFO(kInit, "cuda: stream-ordered host work via %s",
         r == WaitMode::StreamWaitValue ? "cuStreamWaitValue32 on a host-mapped word"
                                        : "cudaLaunchHostFunc (blocking fallback)");
    return r;
  }();
  return m;
}

WaitMode mode() {
  int f = g_forced.load(std::memory_order_acquire);
  if (f == static_cast<int>(WaitMode::StreamWaitValue) && driver().streamWaitValue32)
    return WaitMode::StreamWaitValue;
  if (f == static_cast<int>(WaitMode::HostFunc)) return WaitMode::HostFunc;
  return probed();
}

#define CHECK_LIVE(fn, p, what)                                                              \
  do {                                                                                       \
    if (!isLive(p))                                                                          \
      return argError(flagcxInvalidArgument, kInit, fn ": %s %p is not a live CUDA " what,   \
                      what, static_cast<const void *>(p));                                   \
  } while (0)

flagcxResult_t refuseCapture(const char *fn, cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(s, &st);
  if (e != cudaSuccess) return cudaFail(fn, e);
  if (st != cudaStreamCaptureStatusNone)
    return argError(flagcxInvalidUsage, kColl,
                    "%s: the stream is being captured into a CUDA graph; flagcx operations "
                    "that run host work cannot be captured (run them outside the capture)", fn);
  return flagcxSuccess;
}

flagcxResult_t newWrapper(cudaStream_t native, bool owned, flagcxStream_t *out) {
  auto *s = new (std::nothrow) Stream();
  if (!s) return argError(flagcxSystemError, kInit, "stream: out of memory");
  s->native = native;
  s->owned = owned;
  s->device = currentDevice();
  flagcxResult_t r = flagPool().take(s);
  if (r != flagcxSuccess) {
    delete s;
    return r;
  }
  registerObject(s);
  *out = toHandle(s);
  return flagcxSuccess;
}

// The user let go of the wrapper; it is freed now or after its last task.
void retire(Stream *s) {
  unregisterObject(s);
  unref(s);
}

}  // namespace

void registerObject(const void *p) {
  std::lock_guard<std::mutex> g(g_regMu);
  g_live.insert(p);
}
void unregisterObject(const void *p) {
  std::lock_guard<std::mutex> g(g_regMu);
  g_live.erase(p);
}
bool isLive(const void *p) {
  std::lock_guard<std::mutex> g(g_regMu);
  return g_live.count(p) != 0;
}
bool streamValid(flagcxStream_t s) { return !s || isLive(s); }

void forceWaitMode(WaitMode m) { g_forced.store(static_cast<int>(m), std::memory_order_release); }

const char *waitModeName() {
  switch (mode()) {
    case WaitMode::StreamWaitValue: return "stream-wait-value";
    default: return "host-func";
  }
}

flagcxResult_t enqueueTask(flagcxStream_t stream, StreamTask task) {
  if (!task.run) return argError(flagcxInvalidArgument, kColl, "enqueue: task.run is NULL");
  if (!stream) {
    // NULL stream: now, on the calling thread, after the legacy default
    // stream's work (a cudaMemcpy from pageable memory may return before its
    // DMA has landed; the engine's own stream would not wait for it).
    FLAGCX_CUDA_TRY("cudaStreamSynchronize (legacy stream)", cudaStreamSynchronize(cudaStreamLegacy));
    return task.run(task.arg);
  }
  CHECK_LIVE("enqueue", stream, "stream");
  Stream *s = asStream(stream);
  FLAGCX_CHECK(refuseCapture("enqueue", s->native));
  WaitMode m = mode();
  Progress &pg = progress(task.lane);
  Item it{};
  it.s = s;
  it.task = task;
  std::lock_guard<std::mutex> g(s->mu);
  // Back-pressure: each task holds two entries of CUDA's launch queue (event
  // record + wait); a full queue would block the CUDA calls below until the
  // progress thread catches up, so keep well under it.
  for (int spins = 0; s->pending.load(std::memory_order_acquire) >= kMaxPending; spins++) {
    if (spins < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  if (m == WaitMode::StreamWaitValue) {
    FLAGCX_CHECK(pg.takeEvent(s->device, &it.ready));
    cudaError_t e = cudaEventRecord(it.ready, s->native);
    if (e != cudaSuccess) {
      pg.giveEvent(s->device, it.ready);
      return cudaFail("cudaEventRecord (enqueue)", e);
    }
    it.value = s->issued + 1;
    CUresult cr = driver().streamWaitValue32(reinterpret_cast<CUstream>(s->native), s->flagDev,
                                             it.value, CU_STREAM_WAIT_VALUE_GEQ);
    if (cr != CUDA_SUCCESS)
      // The event stays recorded and unused; nothing waits on it.
      return argError(flagcxUnhandledDeviceError, kColl, "enqueue: cuStreamWaitValue32 failed "
                      "(CUresult %d)", static_cast<int>(cr));
    s->issued = it.value;
  } else {
    it.hold = new (std::nothrow) HostHold();
    if (!it.hold) return argError(flagcxSystemError, kColl, "enqueue: out of memory");
    cudaError_t e = cudaLaunchHostFunc(s->native, hold, it.hold);
    if (e != cudaSuccess) {
      delete it.hold;
      return cudaFail("cudaLaunchHostFunc (enqueue)", e);
    }
  }
  s->pending.fetch_add(1, std::memory_order_acq_rel);
  s->refs.fetch_add(1, std::memory_order_acq_rel);
  pg.push(it);
  return flagcxSuccess;
}

void releaseLane(const void *lane) {
  if (!lane) return;
  std::unique_ptr<Progress> p;
  {
    std::lock_guard<std::mutex> g(g_lanesMu);
    auto it = g_lanes->find(lane);
    if (it == g_lanes->end()) return;
    p = std::move(it->second);
    g_lanes->erase(it);
  }
  // ~Progress lets the thread finish its queue (empty by contract) and joins it.
}

// ---- streams ----

flagcxResult_t streamCreate(flagcxStream_t *stream) {
  if (!stream) return argError(flagcxInvalidArgument, kInit, "streamCreate: stream is NULL");
  cudaStream_t st = nullptr;
  FLAGCX_CUDA_TRY("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  flagcxResult_t r = newWrapper(st, true, stream);
  if (r != flagcxSuccess) cudaStreamDestroy(st);
  return r;
}

flagcxResult_t streamDestroy(flagcxStream_t stream) {
  if (!stream) return flagcxSuccess;
  CHECK_LIVE("streamDestroy", stream, "stream");
  Stream *s = asStream(stream);
  if (!s->owned)
    return argError(flagcxInvalidUsage, kInit,
                    "streamDestroy: stream %p wraps a caller's stream (streamCopy); use streamFree",
                    static_cast<void *>(stream));
  // CUDA releases the stream once its queued work (our pending waits
  // included) has completed; the wrapper goes after its last task.
  cudaError_t e = cudaStreamDestroy(s->native);
  retire(s);
  if (e != cudaSuccess) return cudaFail("cudaStreamDestroy", e);
  return flagcxSuccess;
}

flagcxResult_t streamCopy(flagcxStream_t *newStream, void *oldStream) {
  if (!newStream) return argError(flagcxInvalidArgument, kInit, "streamCopy: newStream is NULL");
  return newWrapper(static_cast<cudaStream_t>(oldStream), false, newStream);
}

flagcxResult_t streamFree(flagcxStream_t stream) {
  if (!stream) return flagcxSuccess;
  CHECK_LIVE("streamFree", stream, "stream");
  Stream *s = asStream(stream);
  if (s->owned)
    return argError(flagcxInvalidUsage, kInit,
                    "streamFree: stream %p was made by streamCreate (use streamDestroy)",
                    static_cast<void *>(stream));
  retire(s);  // the native stream is the caller's
  return flagcxSuccess;
}

flagcxResult_t streamSynchronize(flagcxStream_t stream) {
  if (stream) CHECK_LIVE("streamSynchronize", stream, "stream");
  FLAGCX_CUDA_TRY("cudaStreamSynchronize", cudaStreamSynchronize(nativeOf(stream)));
  return stream ? static_cast<flagcxResult_t>(asStream(stream)->error.load()) : flagcxSuccess;
}

flagcxResult_t streamQuery(flagcxStream_t stream) {
  if (stream) CHECK_LIVE("streamQuery", stream, "stream");
  cudaError_t e = cudaStreamQuery(nativeOf(stream));
  if (e == cudaErrorNotReady) return flagcxInProgress;
  if (e != cudaSuccess) return cudaFail("cudaStreamQuery", e);
  return stream ? static_cast<flagcxResult_t>(asStream(stream)->error.load()) : flagcxSuccess;
}

flagcxResult_t streamWaitEvent(flagcxStream_t stream, flagcxEvent_t event) {
  CHECK_LIVE("streamWaitEvent", event, "event");
  if (stream) CHECK_LIVE("streamWaitEvent", stream, "stream");
  FLAGCX_CUDA_TRY("cudaStreamWaitEvent", cudaStreamWaitEvent(nativeOf(stream), asEvent(event)->ev, 0));
  return flagcxSuccess;
}

// ---- events ----

flagcxResult_t eventCreate(flagcxEvent_t *event, flagcxEventType_t type) {
  FLAGCX_CHECK(checkEventCreateArgs(event, type));
  auto *e = new (std::nothrow) Event();
  if (!e) return argError(flagcxSystemError, kInit, "eventCreate: out of memory");
  e->timing = type == flagcxEventDefault;
  cudaError_t ce = cudaEventCreateWithFlags(&e->ev, e->timing ? cudaEventDefault : cudaEventDisableTiming);
  if (ce != cudaSuccess) {
    delete e;
    return cudaFail("cudaEventCreateWithFlags", ce);
  }
  registerObject(e);
  *event = toHandle(e);
  return flagcxSuccess;
}

flagcxResult_t eventDestroy(flagcxEvent_t event) {
  if (!event) return flagcxSuccess;
  CHECK_LIVE("eventDestroy", event, "event");
  Event *e = asEvent(event);
  unregisterObject(e);
  cudaError_t ce = cudaEventDestroy(e->ev);
  e->magic = 0;
  delete e;
  if (ce != cudaSuccess) return cudaFail("cudaEventDestroy", ce);
  return flagcxSuccess;
}

flagcxResult_t eventRecord(flagcxEvent_t event, flagcxStream_t stream) {
  CHECK_LIVE("eventRecord", event, "event");
  if (stream) CHECK_LIVE("eventRecord", stream, "stream");
  FLAGCX_CUDA_TRY("cudaEventRecord", cudaEventRecord(asEvent(event)->ev, nativeOf(stream)));
  return flagcxSuccess;
}

flagcxResult_t eventSynchronize(flagcxEvent_t event) {
  CHECK_LIVE("eventSynchronize", event, "event");
  FLAGCX_CUDA_TRY("cudaEventSynchronize", cudaEventSynchronize(asEvent(event)->ev));
  return flagcxSuccess;
}

flagcxResult_t eventQuery(flagcxEvent_t event) {
  CHECK_LIVE("eventQuery", event, "event");
  cudaError_t e = cudaEventQuery(asEvent(event)->ev);
  if (e == cudaErrorNotReady) return flagcxInProgress;
  if (e != cudaSuccess) return cudaFail("cudaEventQuery", e);
  return flagcxSuccess;
}

}  // namespace flagcx::cuda
