// Internals of the CUDA device adapter: the objects behind the opaque
// flagcxStream_t / flagcxEvent_t / flagcxIpcMemHandle_t of a CUDA process,
// error mapping, per-device facts, and the stream-ordered task engine.
//
// The public handle types are opaque pointers; in a process whose adapter is
// CUDA they point at the structs below (the host adapter has its own).  One
// process drives one adapter (FLAGCX_DEVICE), so the two never meet.
#pragma once
#include <cuda.h>  // driver types only: entry points come from cudaGetDriverEntryPointByVersion
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "adapters/device/adapter.h"
#include "base/base.h"

namespace flagcx::cuda {

// Logs "<what> failed: <CUDA error name>: <text>" and returns
// flagcxUnhandledDeviceError (flagcxInProgress for cudaErrorNotReady is the
// caller's business).  Clears the runtime's last error.
flagcxResult_t cudaFail(const char *what, cudaError_t e);

#define FLAGCX_CUDA_TRY(what, call)                                          \
  do {                                                                       \
    cudaError_t _ce = (call);                                                \
    if (_ce != cudaSuccess) return ::flagcx::cuda::cudaFail((what), _ce);    \
  } while (0)

struct Stream {
  static constexpr uint32_t kMagic = 0x43535452u;  // "CSTR"
  uint32_t magic = kMagic;
  cudaStream_t native = nullptr;  // nullptr: the legacy default stream
  bool owned = false;             // made by streamCreate (else a streamCopy wrapper)
  int device = 0;                 // current device when the wrapper was made

  std::mutex mu;                  // orders enqueues on this wrapper
  uint32_t issued = 0;            // value the native stream waits for after the latest task
  volatile uint32_t *flag = nullptr;  // host-mapped release word (one slot of a pinned page)
  CUdeviceptr flagDev = 0;        // the same word as the device sees it
  int flagSlot = -1;
  // Lifetime without a lock that the progress thread would need (an enqueuer
  // may block inside CUDA, holding mu, while the launch queue is full):
  // one reference for the user's handle plus one per queued task.
  std::atomic<int> refs{1};
  std::atomic<int> pending{0};    // tasks queued and not yet released (back-pressure)
  std::atomic<int> error{flagcxSuccess};  // first failure of a task (sticky)
};

struct Event {
  static constexpr uint32_t kMagic = 0x43455654u;  // "CEVT"
  uint32_t magic = kMagic;
  cudaEvent_t ev = nullptr;
  bool timing = true;
};

// What travels between processes: fixed layout, no pointers.
struct IpcHandle {
  static constexpr uint64_t kMagic = 0x4350494178434647ull;
  uint64_t magic;
  cudaIpcMemHandle_t mem;  // of the allocation that contains the pointer
  uint64_t offset;         // of the pointer inside that allocation
};

inline Stream *asStream(flagcxStream_t s) { return reinterpret_cast<Stream *>(s); }
inline flagcxStream_t toHandle(Stream *s) { return reinterpret_cast<flagcxStream_t>(s); }
inline Event *asEvent(flagcxEvent_t e) { return reinterpret_cast<Event *>(e); }
inline flagcxEvent_t toHandle(Event *e) { return reinterpret_cast<flagcxEvent_t>(e); }

// Registry of live wrappers (a destroyed handle is rejected, never dereferenced).
void registerObject(const void *p);
void unregisterObject(const void *p);
bool isLive(const void *p);
#define CHECK_LIVE(fn, p, what)                                                              \
  do {                                                                                       \
    if (!::flagcx::cuda::isLive(p))                                                          \
      return argError(flagcxInvalidArgument, kInit, fn ": %s %p is not a live CUDA " what,   \
                      what, static_cast<const void *>(p));                                   \
  } while (0)
// A stream wrapper's release word (cuda_stream.cc's pool) and its last reference.
flagcxResult_t takeReleaseWord(Stream *s);
void unref(Stream *s);

// The native stream behind a flagcx stream; NULL maps to the legacy default stream.
inline cudaStream_t nativeOf(flagcxStream_t s) { return s ? asStream(s)->native : nullptr; }

// Per-device facts and helpers (cached; the current device unless given).
int currentDevice();
int smCount(int device);
// A non-blocking stream private to the adapter, for "now" work: it never
// waits on the legacy default stream, so a task that runs while a user's
// stream is held by the engine cannot deadlock against it.
cudaStream_t internalStream(int device);

// Where a pointer lives, for the adapter's own copy/reduce paths.
enum class Where { Device, HostPinned, HostPageable };
Where where(const void *p);

// Driver entry points (no link against libcuda): null when unavailable.
struct Driver {
  CUresult (*streamWaitValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
  CUresult (*memGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr) = nullptr;
  CUresult (*memGetHandleForAddressRange)(void *, CUdeviceptr, size_t, CUmemRangeHandleType,
                                          unsigned long long) = nullptr;
};
const Driver &driver();

// The stream-ordered task engine (cuda_stream.cc).
enum class WaitMode : int { Auto = 0, StreamWaitValue = 1, HostFunc = 2, HandOff = 3 };
// Choose the mechanism before the first enqueue (tests); Auto follows
// FLAGCX_CUDA_STREAM_WAIT (default: hand-off).
void forceWaitMode(WaitMode m);
// The one-time probe: does cuStreamWaitValue32 on a host-mapped word hold a
// stream until a host store releases it?  And the holds built on it
// (cuda_hold.cc).
bool streamWaitValueWorks();
StreamHold *streamHold();
// The mechanism in use ("hand-off", "stream-wait-value" or "host-func").
const char *waitModeName();
flagcxResult_t enqueueTask(flagcxStream_t stream, StreamTask task);
// Hand-off mode: enqueues of this thread between batchBegin and the matching
// batchEnd run concurrently; batchEnd waits for all of them (a group of
// several same-process ranks issued from one thread).
void batchBegin();
flagcxResult_t batchEnd();
void releaseLane(const void *lane);  // joins the lane's progress thread

// Streams and events of the device table (cuda_stream.cc).
flagcxResult_t streamCreate(flagcxStream_t *stream);
flagcxResult_t streamDestroy(flagcxStream_t stream);
flagcxResult_t streamCopy(flagcxStream_t *newStream, void *oldStream);
flagcxResult_t streamFree(flagcxStream_t stream);
flagcxResult_t streamSynchronize(flagcxStream_t stream);
flagcxResult_t streamQuery(flagcxStream_t stream);
flagcxResult_t streamWaitEvent(flagcxStream_t stream, flagcxEvent_t event);
flagcxResult_t eventCreate(flagcxEvent_t *event, flagcxEventType_t type);
flagcxResult_t eventDestroy(flagcxEvent_t event);
flagcxResult_t eventRecord(flagcxEvent_t event, flagcxStream_t stream);
flagcxResult_t eventSynchronize(flagcxEvent_t event);
flagcxResult_t eventQuery(flagcxEvent_t event);
bool streamValid(flagcxStream_t s);  // NULL counts as valid (legacy default stream)

// Memory and IPC of the device table (cuda_memory.cc).
flagcxResult_t memAlloc(void **ptr, size_t size, flagcxMemType_t type, flagcxStream_t stream);
flagcxResult_t memFree(void *ptr, flagcxMemType_t type, flagcxStream_t stream);
flagcxResult_t ipcCreate(flagcxIpcMemHandle_t *handle, size_t *size);
flagcxResult_t ipcGet(flagcxIpcMemHandle_t handle, void *devPtr);
flagcxResult_t ipcOpen(flagcxIpcMemHandle_t handle, void **devPtr);
flagcxResult_t ipcClose(void *devPtr);
flagcxResult_t ipcFree(flagcxIpcMemHandle_t handle);

// DeviceAdapter::copyBatchAsync for one device (cuda_batch.cc): pieces whose
// ends share their offset modulo 16 go, cut into chunks, to one copy kernel
// that reads the chunk list straight from mapped pinned memory (a ring, so
// that one transfer may be issued in several batches without waiting for an
// upload); the rest through `single`, one copy each.
class BatchRing {
 public:
  using Piece = DeviceAdapter::CopyPiece;
  flagcxResult_t copy(const Piece *pieces, size_t n, cudaStream_t s, int smCount,
                      const std::function<flagcxResult_t(const Piece &)> &single);

 private:
  struct Batch {
    size_t from, to;   // its entries
    cudaEvent_t done;  // recorded after its kernel
  };
  std::mutex mu_;
  void *host_ = nullptr, *dev_ = nullptr;  // one mapped allocation, two addresses
  size_t cap_ = 0, next_ = 0;  // entries, and where the next batch's list starts
  std::deque<Batch> inflight_;       // oldest first
  std::vector<cudaEvent_t> spare_;   // events to reuse
};

// DeviceAdapter::foldAsync for one device (cuda_fold.cc): launchFold on the
// private stream; the sources of a fold of more than kFoldParamSources go
// to the kernel through a device array that a copy on that stream fills
// just before it (stream order keeps the next fold's copy from overwriting
// it before this kernel has read it).
class FoldList {
 public:
  flagcxResult_t fold(void *dst, const void *const *srcs, int n, size_t count,
                      flagcxDataType_t dtype, flagcxRedOp_t op, cudaStream_t s, int smCount);

 private:
  flagcxResult_t upload(const void *const *srcs, size_t n, cudaStream_t s);
  std::mutex mu_;  // one user of the arrays from the upload through the launch
  void *dev_ = nullptr;             // the list the kernel reads
  void *host_ = nullptr;            // its page-locked source
  cudaEvent_t uploaded_ = nullptr;  // recorded after the last copy out of host_
  size_t cap_ = 0;                  // sources either array holds
};

// Why cudaAdapter() returned nullptr ("" when it did not, or was not asked).
const char *unusableReason();

}  // namespace flagcx::cuda
