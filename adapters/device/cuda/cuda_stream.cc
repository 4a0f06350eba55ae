// Streams, events, and host work in stream order for the CUDA adapter.
//
// enqueueTask(stream, task) must run a host function after everything
// already queued on the user's CUDA stream and before everything queued on
// it afterwards.  Three mechanisms (FLAGCX_CUDA_STREAM_WAIT):
//
// handoff (default):
//   caller thread                      progress thread (one per lane)
//   -------------                      ------------------------------
//   cudaEventRecord(ready, s)
//   push {ready, task, done} --------> cudaEventSynchronize(ready)
//   wait for done                      task.run(arg)   (device work on the
//                                      cudaEventRecord(after, internal)   internal stream)
//   cudaStreamWaitEvent(s, after) <--- done
//   return
// The call blocks until the stream's earlier work and the task are done;
// every dependency the GPU sees is an ordinary event, recorded before
// anything waits on it.  Between batchBegin and batchEnd (a flagcx group)
// the caller pushes every task first and waits for all of them at batchEnd,
// so several ranks of one process issued from one thread run together.
//
// value (asynchronous):
//   cudaEventRecord(ready, s)
//   cuStreamWaitValue32(s, flag >= k)  pop item; cudaEventSynchronize(ready)
//   push {ready, task, k}; return      task.run(arg); *flag = k (releases s)
// The hold on `s` is invisible to CUDA's scheduler, and the task's own device
// work is queued later on another stream.  When CUDA maps that stream and a
// held stream (or a stream waiting on it) onto one hardware queue — more
// streams than CUDA_DEVICE_MAX_CONNECTIONS, as under PyTorch — the task's
// work sits behind the hold and nothing moves: measured on an H200 with
// CUDA_DEVICE_MAX_CONNECTIONS=1 (every call) and under torch (the 5th call).
// Kept for programs that know their streams; never the default.
// `flag` is one 32-bit word of pinned, device-mapped host memory per stream
// wrapper; k counts the tasks of that wrapper, and the wait uses the driver's
// cyclic ">=" compare, so wrap-around is harmless.
//
// hostfunc: cudaLaunchHostFunc(s, hold).  `hold` runs on the CUDA callback
// thread when s reaches it, hands the task to the progress thread and blocks
// until the task is done.  Same hazard as `value`, and it blocks CUDA's
// callback thread meanwhile.  Also the fallback of `value` where stream
// memory operations do not work (a one-time probe).
//
// The progress thread never calls anything that synchronizes the device or
// the legacy default stream (cudaFree, cudaFreeHost, cudaMemcpy); its own
// "now" work goes through a non-blocking internal stream.
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
#include <strings.h>

#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <memory>
#include <unordered_map>
#include <vector>

#include "adapters/device/handle_checks.h"
#include "base/base.h"
#include "cuda_internal.h"

namespace flagcx::cuda {
namespace {

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

}  // namespace

// Drop one reference; the last one frees the wrapper.
void unref(Stream *s) {
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) deleteStream(s);
}

flagcxResult_t takeReleaseWord(Stream *s) { return flagPool().take(s); }

namespace {

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

struct Done {  // hand-off mode: one per task
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  flagcxResult_t result = flagcxSuccess;
  cudaEvent_t after = nullptr;  // recorded on the internal stream after the task
};

struct Item {
  Stream *s;
  StreamTask task;
  cudaEvent_t ready;  // StreamWaitValue and hand-off modes
  uint32_t value;
  HostHold *hold;     // HostFunc mode
  Done *done;         // hand-off mode
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
      if (it.done) {
        runHandOff(it);
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

  void runHandOff(const Item &it) {
    Done *d = it.done;
    flagcxResult_t r = flagcxSuccess;
    cudaError_t e = cudaEventSynchronize(it.ready);
    if (e != cudaSuccess) r = cudaFail("cudaEventSynchronize (inputs of a stream task)", e);
    else r = it.task.run(it.task.arg);
    e = cudaEventRecord(d->after, internalStream(it.s->device));
    if (e != cudaSuccess && r == flagcxSuccess) r = cudaFail("cudaEventRecord (after a stream task)", e);
    noteError(it.s, r);
    giveEvent(it.s->device, it.ready);
    {
      std::lock_guard<std::mutex> g(d->mu);
      d->result = r;
      d->done = true;
      d->cv.notify_all();
    }
    finishPending(it.s);
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

// FLAGCX_CUDA_STREAM_WAIT, read when asked (tests reload the parameters).
WaitMode configured() {
  const std::string &v = paramStr(Param::CUDA_STREAM_WAIT);
  if (strcasecmp(v.c_str(), "value") == 0) return probed();
  if (strcasecmp(v.c_str(), "hostfunc") == 0) return WaitMode::HostFunc;
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    INFO(kInit, "cuda: stream-ordered host work by hand-off (the call waits for the stream's "
         "earlier work and the operation; FLAGCX_CUDA_STREAM_WAIT)");
  return WaitMode::HandOff;
}

WaitMode mode() {
  int f = g_forced.load(std::memory_order_acquire);
  if (f == static_cast<int>(WaitMode::StreamWaitValue) && driver().streamWaitValue32)
    return WaitMode::StreamWaitValue;
  if (f == static_cast<int>(WaitMode::HostFunc)) return WaitMode::HostFunc;
  if (f == static_cast<int>(WaitMode::HandOff)) return WaitMode::HandOff;
  return configured();
}

// Hand-off tasks this thread pushed inside a batch, waited for at its end.
struct Awaited {
  Stream *s;
  Done *d;
  Progress *pg;
};
thread_local int t_batchDepth = 0;
thread_local std::vector<Awaited> t_awaited;

// Waits for one hand-off task; the stream then waits for the task's device
// work (an event recorded after it).  Frees d.
flagcxResult_t awaitTask(const Awaited &a) {
  Done *d = a.d;
  {
    std::unique_lock<std::mutex> lk(d->mu);
    d->cv.wait(lk, [d] { return d->done; });
  }
  flagcxResult_t r = d->result;
  cudaError_t e = cudaStreamWaitEvent(a.s->native, d->after, 0);
  if (e != cudaSuccess && r == flagcxSuccess) r = cudaFail("cudaStreamWaitEvent (after a stream task)", e);
  a.pg->giveEvent(a.s->device, d->after);
  delete d;
  return r;
}

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

}  // namespace

bool streamWaitValueWorks() { return probed() == WaitMode::StreamWaitValue; }

void forceWaitMode(WaitMode m) { g_forced.store(static_cast<int>(m), std::memory_order_release); }

const char *waitModeName() {
  switch (mode()) {
    case WaitMode::StreamWaitValue: return "stream-wait-value";
    case WaitMode::HandOff: return "hand-off";
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
  Awaited handOff{};
  {
    std::lock_guard<std::mutex> g(s->mu);
    // Back-pressure: each task holds two entries of CUDA's launch queue (event
    // record + wait); a full queue would block the CUDA calls below until the
    // progress thread catches up, so keep well under it.
    for (int spins = 0; s->pending.load(std::memory_order_acquire) >= kMaxPending; spins++) {
      if (spins < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    if (m == WaitMode::StreamWaitValue || m == WaitMode::HandOff) {
      FLAGCX_CHECK(pg.takeEvent(s->device, &it.ready));
      cudaError_t e = cudaEventRecord(it.ready, s->native);
      if (e != cudaSuccess) {
        pg.giveEvent(s->device, it.ready);
        return cudaFail("cudaEventRecord (enqueue)", e);
      }
    }
    if (m == WaitMode::HandOff) {
      it.done = new (std::nothrow) Done();
      flagcxResult_t r = it.done ? pg.takeEvent(s->device, &it.done->after)
                                 : argError(flagcxSystemError, kColl, "enqueue: out of memory");
      if (r != flagcxSuccess) {
        delete it.done;
        pg.giveEvent(s->device, it.ready);  // recorded, never waited on
        return r;
      }
      handOff = Awaited{s, it.done, &pg};
    } else if (m == WaitMode::StreamWaitValue) {
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
  }
  if (!handOff.d) return flagcxSuccess;
  if (t_batchDepth > 0) {
    t_awaited.push_back(handOff);
    return flagcxSuccess;
  }
  return awaitTask(handOff);
}

void batchBegin() { t_batchDepth++; }

flagcxResult_t batchEnd() {
  if (t_batchDepth > 0 && --t_batchDepth > 0) return flagcxSuccess;
  std::vector<Awaited> all;
  all.swap(t_awaited);
  flagcxResult_t res = flagcxSuccess;
  for (const Awaited &a : all) {
    flagcxResult_t r = awaitTask(a);
    if (res == flagcxSuccess) res = r;
  }
  return res;
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

}  // namespace flagcx::cuda
