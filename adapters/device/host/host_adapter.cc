// The host device adapter: the flagcxDeviceHandle table for plain CPU memory,
// the DeviceAdapter object, and the FLAGCX_DEVICE choice.
//
// Host notes for users of the table:
//  - one device (index 0); getVendor writes "host" (callers pass a buffer of
//    at least 128 bytes, as for every adapter);
//  - flagcxMemDevice/Managed memory is ordinary (shareable) host memory, so
//    programs written for GPUs run unchanged; hostGetDevicePointer is the identity;
//  - a host has no native stream, so the "native stream" streamCopy wraps is a
//    flagcxStream_t made by streamCreate: streamCopy returns that same stream
//    (counted as a copy) and streamFree only drops the count; NULL stays the
//    NULL (synchronous) stream;
//  - an event or stream may be destroyed while another stream still has a
//    pending streamWaitEvent on it (the wait holds a reference to the stream;
//    it never reads the event).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <mutex>
#include <vector>

#include "adapters/device/adapter.h"
#include "adapters/device/handle_checks.h"
#include "base/base.h"
#include "host_copy_engine.h"
#include "host_stream.h"

namespace flagcx {

// Defined by the CUDA adapter when it is built; returns nullptr when no GPU
// is usable.  Weak, so that a build without it links and sees nullptr.

namespace {

using host::Entry;

// Live streams, for deviceSynchronize.
std::mutex g_streamsMu;
std::vector<flagcxStream *> g_streams;

#define CHECK_STREAM(fn, s)                                                               \
  do {                                                                                    \
    if (!host::streamValid(s))                                                            \
      return argError(flagcxInvalidArgument, kInit, fn ": stream %p is not a live host stream", \
                      static_cast<void *>(s));                                            \
  } while (0)
#define CHECK_EVENT(fn, e)                                                                \
  do {                                                                                    \
    if (!host::eventValid(e))                                                             \
      return argError(flagcxInvalidArgument, kInit, fn ": event %p is not a live host event", \
                      static_cast<void *>(e));                                            \
  } while (0)

// Runs now on a NULL stream, else queues in stream order.
flagcxResult_t submit(const char *fn, flagcxStream_t stream, const Entry &e) {
  if (!stream) return host::runEntry(e);
  if (!host::streamValid(stream))
    return argError(flagcxInvalidArgument, kInit, "%s: stream %p is not a live host stream", fn,
                    static_cast<void *>(stream));
  return host::streamEnqueue(stream, e);
}

flagcxResult_t hDeviceSynchronize() {
  std::vector<flagcxStream *> all;
  {
    // Held, so that a stream another thread destroys meanwhile stays valid.
    std::lock_guard<std::mutex> g(g_streamsMu);
    all = g_streams;
    for (flagcxStream *s : all) host::streamRetain(s);
  }
  flagcxResult_t res = flagcxSuccess;
  for (flagcxStream *s : all) {
    flagcxResult_t r = host::streamSynchronize(s);
    if (res == flagcxSuccess) res = r;
    host::streamRelease(s);
  }
  return res;
}

flagcxResult_t hDeviceMemcpy(void *dst, void *src, size_t size, flagcxMemcpyType_t type,
                             flagcxStream_t stream) {
  FLAGCX_CHECK(checkMemcpyArgs(dst, src, size, type));
  Entry e{};
  e.kind = Entry::Copy;
  e.copy = {dst, src, size};
  return submit("deviceMemcpy", stream, e);
}

flagcxResult_t hDeviceMemset(void *ptr, int value, size_t size, flagcxMemType_t type,
                             flagcxStream_t stream) {
  FLAGCX_CHECK(checkMemsetArgs(ptr, size));
  Entry e{};
  e.kind = Entry::Set;
  e.set.dst = ptr;
  e.set.bytes = size;
  e.set.value = value;
  return submit("deviceMemset", stream, e);
}

// Allocation happens at once whatever the stream: the memory is ready before
// any later work on any stream.
flagcxResult_t hDeviceMalloc(void **ptr, size_t size, flagcxMemType_t type, flagcxStream_t) {
  return host::memAlloc(ptr, size, type);
}

flagcxResult_t freeTask(void *p) { return host::memFree(p); }

// With a stream, the free is queued behind the work already on it.
flagcxResult_t hDeviceFree(void *ptr, flagcxMemType_t, flagcxStream_t stream) {
  if (!stream || !ptr) return host::memFree(ptr);
  CHECK_STREAM("deviceFree", stream);
  if (!host::memIsOurs(ptr))
    return argError(flagcxInvalidArgument, kAlloc,
                    "deviceFree: %p was not returned by deviceMalloc (or is freed already)", ptr);
  Entry e{};
  e.kind = Entry::Task;
  e.task = {freeTask, ptr};
  return host::streamEnqueue(stream, e);
}

flagcxResult_t hSetDevice(int dev) {
  if (dev != 0)
    return argError(flagcxInvalidArgument, kInit, "setDevice: device %d out of range (host has 1)", dev);
  return flagcxSuccess;
}

flagcxResult_t hGetDevice(int *dev) {
  FLAGCX_CHECK(checkOutArg("getDevice", "dev", dev));
  *dev = 0;
  return flagcxSuccess;
}

flagcxResult_t hGetDeviceCount(int *count) {
  FLAGCX_CHECK(checkOutArg("getDeviceCount", "count", count));
  *count = 1;
  return flagcxSuccess;
}

flagcxResult_t hGetVendor(char *vendor) {
  FLAGCX_CHECK(checkOutArg("getVendor", "vendor", vendor));
  memcpy(vendor, "host", 5);
  return flagcxSuccess;
}

flagcxResult_t hHostGetDevicePointer(void **pDevice, void *pHost) {
  FLAGCX_CHECK(checkOutArg("hostGetDevicePointer", "pDevice", pDevice));
  *pDevice = pHost;
  return flagcxSuccess;
}

flagcxResult_t hStreamCreate(flagcxStream_t *stream) {
  if (!stream) return argError(flagcxInvalidArgument, kInit, "streamCreate: stream is NULL");
  FLAGCX_CHECK(host::streamCreate(stream));
  std::lock_guard<std::mutex> g(g_streamsMu);
  g_streams.push_back(*stream);
  return flagcxSuccess;
}

flagcxResult_t hStreamDestroy(flagcxStream_t stream) {
  if (!stream) return flagcxSuccess;
  CHECK_STREAM("streamDestroy", stream);
  {
    std::lock_guard<std::mutex> g(g_streamsMu);
    g_streams.erase(std::remove(g_streams.begin(), g_streams.end(), stream), g_streams.end());
  }
  return host::streamDestroy(stream);
}

flagcxResult_t hStreamCopy(flagcxStream_t *newStream, void *oldStream) {
  if (!newStream) return argError(flagcxInvalidArgument, kInit, "streamCopy: newStream is NULL");
  auto *old = static_cast<flagcxStream_t>(oldStream);
  if (old) {
    CHECK_STREAM("streamCopy", old);
    old->copies.fetch_add(1, std::memory_order_relaxed);
  }
  *newStream = old;
  return flagcxSuccess;
}

flagcxResult_t hStreamFree(flagcxStream_t stream) {
  if (!stream) return flagcxSuccess;
  CHECK_STREAM("streamFree", stream);
  int c = stream->copies.load(std::memory_order_relaxed);
  do {
    if (c == 0)
      return argError(flagcxInvalidUsage, kInit,
                      "streamFree: stream %p was not made by streamCopy (use streamDestroy)",
                      static_cast<void *>(stream));
  } while (!stream->copies.compare_exchange_weak(c, c - 1, std::memory_order_relaxed));
  return flagcxSuccess;
}

flagcxResult_t hStreamSynchronize(flagcxStream_t stream) {
  if (!stream) return flagcxSuccess;  // the NULL stream never has pending work
  CHECK_STREAM("streamSynchronize", stream);
  return host::streamSynchronize(stream);
}

flagcxResult_t hStreamQuery(flagcxStream_t stream) {
  if (!stream) return flagcxSuccess;
  CHECK_STREAM("streamQuery", stream);
  return host::streamQuery(stream);
}

flagcxResult_t hStreamWaitEvent(flagcxStream_t stream, flagcxEvent_t event) {
  CHECK_EVENT("streamWaitEvent", event);
  if (stream) CHECK_STREAM("streamWaitEvent", stream);
  return host::streamWaitEvent(stream, event);
}

flagcxResult_t hEventCreate(flagcxEvent_t *event, flagcxEventType_t type) {
  FLAGCX_CHECK(checkEventCreateArgs(event, type));
  return host::eventCreate(event, type == flagcxEventDefault);
}

flagcxResult_t hEventDestroy(flagcxEvent_t event) {
  if (!event) return flagcxSuccess;
  CHECK_EVENT("eventDestroy", event);
  return host::eventDestroy(event);
}

flagcxResult_t hEventRecord(flagcxEvent_t event, flagcxStream_t stream) {
  CHECK_EVENT("eventRecord", event);
  if (stream) CHECK_STREAM("eventRecord", stream);
  return host::eventRecord(event, stream);
}

flagcxResult_t hEventSynchronize(flagcxEvent_t event) {
  CHECK_EVENT("eventSynchronize", event);
  return host::eventSynchronize(event);
}

flagcxResult_t hEventQuery(flagcxEvent_t event) {
  CHECK_EVENT("eventQuery", event);
  return host::eventQuery(event);
}

// As cudaEventElapsedTime: flagcxInProgress while either event is pending.
flagcxResult_t hEventElapsedTime(float *ms, flagcxEvent_t start, flagcxEvent_t end) {
  FLAGCX_CHECK(checkElapsedArgs(ms, start, end));
  CHECK_EVENT("eventElapsedTime", start);
  CHECK_EVENT("eventElapsedTime", end);
  return hostEventElapsedMs(start, end, ms);
}

flagcxResult_t hIpcFree(flagcxIpcMemHandle_t handle) {
  if (!handle) return flagcxSuccess;
  return host::ipcFree(handle);
}

flagcxDeviceHandle g_table = {
    hDeviceSynchronize, hDeviceMemcpy,     hDeviceMemset,      hDeviceMalloc,
    hDeviceFree,        hSetDevice,        hGetDevice,         hGetDeviceCount,
    hGetVendor,         hHostGetDevicePointer,                 hStreamCreate,
    hStreamDestroy,     hStreamCopy,       hStreamFree,        hStreamSynchronize,
    hStreamQuery,       hStreamWaitEvent,  hEventCreate,       hEventDestroy,
    hEventRecord,       hEventSynchronize, hEventQuery,        hEventElapsedTime,
    host::ipcCreate,    host::ipcGet,      host::ipcOpen,      host::ipcClose,
    hIpcFree,
};

class HostAdapter final : public DeviceAdapter {
 public:
  const char *name() const override { return "host"; }
  DeviceKind kind() const override { return DeviceKind::Host; }
  flagcxDeviceHandle *handle() override { return &g_table; }

  flagcxResult_t reduce(void *dst, const void *a, const void *b, size_t count,
                        flagcxDataType_t dtype, flagcxRedOp_t op, flagcxStream_t stream) override {
    if (!stream) return hostReduce(dst, a, b, count, dtype, op);
    FLAGCX_CHECK(checkReduceArgs("reduce", dtype, op));
    CHECK_STREAM("reduce", stream);
    Entry e{};
    e.kind = Entry::Reduce;
    e.reduce = {dst, a, b, count, dtype, op};
    return host::streamEnqueue(stream, e);
  }

  flagcxResult_t divide(void *dst, const void *src, size_t count, flagcxDataType_t dtype,
                        uint64_t divisor, flagcxStream_t stream) override {
    if (!stream) return hostDivide(dst, src, count, dtype, divisor);
    FLAGCX_CHECK(checkReduceArgs("divide", dtype, flagcxSum));
    if (divisor == 0) return argError(flagcxInvalidArgument, kColl, "divide: divisor is 0");
    CHECK_STREAM("divide", stream);
    Entry e{};
    e.kind = Entry::Divide;
    e.divide = {dst, src, count, divisor, dtype};
    return host::streamEnqueue(stream, e);
  }

  flagcxResult_t copy(void *dst, const void *src, size_t bytes, flagcxStream_t stream) override {
    Entry e{};
    e.kind = Entry::Copy;
    e.copy = {dst, src, bytes};
    return submit("copy", stream, e);
  }

  flagcxResult_t enqueue(flagcxStream_t stream, StreamTask task) override {
    if (!task.run) return argError(flagcxInvalidArgument, kColl, "enqueue: task.run is NULL");
    Entry e{};
    e.kind = Entry::Task;
    e.task = task;
    // A quick task on an idle stream runs here: handing a sub-microsecond
    // job to the worker costs more than the job (docs/PERFORMANCE.md).  Not
    // inside a batch: a group's jobs for ranks of this process wait for
    // each other, so none may run before the last is queued.
    if (task.quick && t_batchDepth == 0 && stream && host::streamValid(stream))
      return host::streamEnqueueOrRun(stream, e);
    return submit("enqueue", stream, e);
  }
  // The private stream: synchronous, unless FLAGCX_HOST_COPY_ENGINE_NS
  // (tests) puts copies on the emulated copy engine; work issued after them
  // waits for them, as on a device's stream.
  flagcxResult_t copyAsync(void *dst, const void *src, size_t bytes) override {
    host::CopyEngine *ce = host::emulatedCopyEngine();
    if (!bytes || dst == src) return flagcxSuccess;
    if (!ce) return copy(dst, src, bytes, nullptr);
    ce->copyAsync(dst, src, bytes);
    return flagcxSuccess;
  }
  flagcxResult_t reduceAsync(void *dst, const void *a, const void *b, size_t count,
                             flagcxDataType_t dtype, flagcxRedOp_t op) override {
    FLAGCX_CHECK(flush());
    return hostReduce(dst, a, b, count, dtype, op);
  }
  flagcxResult_t foldAsync(void *dst, const void *const *srcs, int n, size_t count,
                           flagcxDataType_t dtype, flagcxRedOp_t op) override {
    FLAGCX_CHECK(flush());
    return hostFold(dst, srcs, n, count, dtype, op);
  }
  flagcxResult_t flush() override {
    if (host::CopyEngine *ce = host::emulatedCopyEngine()) ce->flush();
    return flagcxSuccess;
  }
  flagcxResult_t mark(uint64_t *m) override {
    host::CopyEngine *ce = host::emulatedCopyEngine();
    *m = ce ? ce->mark() : 0;
    return flagcxSuccess;
  }
  flagcxResult_t reached(uint64_t m, bool *done) override {
    host::CopyEngine *ce = host::emulatedCopyEngine();
    *done = !ce || ce->reached(m);
    return flagcxSuccess;
  }
  StreamHold *streamHold() override { return hostStreamHold(); }
  void batchBegin() override { t_batchDepth++; }
  flagcxResult_t batchEnd() override {
    if (t_batchDepth > 0) t_batchDepth--;
    return flagcxSuccess;
  }

 private:
  static thread_local int t_batchDepth;
};

thread_local int HostAdapter::t_batchDepth = 0;

}  // namespace

DeviceAdapter *hostAdapter() {
  static HostAdapter adapter;
  return &adapter;
}

}  // namespace flagcx
