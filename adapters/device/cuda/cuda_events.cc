// Stream and event wrappers of the CUDA adapter's device table: the registry
// of live handles (a destroyed handle is refused, never dereferenced), and
// the thin calls over CUDA's streams and events.  Stream-ordered host work
// (enqueueTask) lives in cuda_stream.cc.
#include <mutex>
#include <unordered_set>

#include "adapters/device/handle_checks.h"
#include "cuda_internal.h"

namespace flagcx::cuda {
namespace {

std::mutex g_regMu;
std::unordered_set<const void *> g_live;

flagcxResult_t newWrapper(cudaStream_t native, bool owned, flagcxStream_t *out) {
  auto *s = new (std::nothrow) Stream();
  if (!s) return argError(flagcxSystemError, kInit, "stream: out of memory");
  s->native = native;
  s->owned = owned;
  s->device = currentDevice();
  flagcxResult_t r = takeReleaseWord(s);
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
