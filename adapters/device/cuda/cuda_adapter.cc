// The CUDA device adapter: the flagcxDeviceHandle table on the CUDA runtime,
// the DeviceAdapter object (reduce/divide/fold/copy kernels, stream-ordered host
// tasks), and cudaAdapter(), which the FLAGCX_DEVICE choice
// (adapters/device/select.cc) calls in builds that have CUDA.
//
// Notes for users of the table:
//  - getVendor writes "NVIDIA"; the device is the calling thread's current one;
//  - streams made by streamCreate are non-blocking CUDA streams; streamCopy
//    wraps a caller's cudaStream_t (NULL = the legacy default stream) and
//    streamFree releases only the wrapper; a NULL flagcxStream_t in
//    eventRecord/streamWaitEvent/streamSynchronize is the legacy default stream;
//  - deviceMemcpy/deviceMemset with a NULL stream are cudaMemcpy/cudaMemset
//    (synchronous, any direction: the copy kind is inferred from the pointers).
//
// The adapter's own copy/reduce/divide with a NULL stream (what the engine
// calls from stream tasks) accept any mix of host and device pointers and
// run through a private non-blocking stream, synchronously.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>
#include <string>

#include "adapters/device/adapter.h"
#include "adapters/device/handle_checks.h"
#include "base/base.h"
#include "cuda_internal.h"
#include "cuda_kernels.h"

namespace flagcx {

namespace cuda {
namespace {

std::string g_reason;

#define CHECK_STREAM(fn, s)                                                                    \
  do {                                                                                         \
    if (!streamValid(s))                                                                       \
      return argError(flagcxInvalidArgument, kInit, fn ": stream %p is not a live CUDA stream", \
                      static_cast<void *>(s));                                                 \
  } while (0)

flagcxResult_t dDeviceSynchronize() {
  FLAGCX_CUDA_TRY("cudaDeviceSynchronize", cudaDeviceSynchronize());
  return flagcxSuccess;
}

flagcxResult_t dDeviceMemcpy(void *dst, void *src, size_t size, flagcxMemcpyType_t type,
                             flagcxStream_t stream) {
  FLAGCX_CHECK(checkMemcpyArgs(dst, src, size, type));
  if (size == 0) return flagcxSuccess;
  if (!stream) {
    FLAGCX_CUDA_TRY("cudaMemcpy", cudaMemcpy(dst, src, size, cudaMemcpyDefault));
    return flagcxSuccess;
  }
  CHECK_STREAM("deviceMemcpy", stream);
  FLAGCX_CUDA_TRY("cudaMemcpyAsync", cudaMemcpyAsync(dst, src, size, cudaMemcpyDefault, nativeOf(stream)));
  return flagcxSuccess;
}

flagcxResult_t dDeviceMemset(void *ptr, int value, size_t size, flagcxMemType_t type,
                             flagcxStream_t stream) {
  FLAGCX_CHECK(checkMemsetArgs(ptr, size));
  if (size == 0) return flagcxSuccess;
  if (!stream) {
    if (type == flagcxMemHost || where(ptr) == Where::HostPageable) {
      memset(ptr, value, size);
      return flagcxSuccess;
    }
    FLAGCX_CUDA_TRY("cudaMemset", cudaMemset(ptr, value, size));
    return flagcxSuccess;
  }
  CHECK_STREAM("deviceMemset", stream);
  FLAGCX_CUDA_TRY("cudaMemsetAsync", cudaMemsetAsync(ptr, value, size, nativeOf(stream)));
  return flagcxSuccess;
}

flagcxResult_t dSetDevice(int dev) {
  FLAGCX_CUDA_TRY("cudaSetDevice", cudaSetDevice(dev));
  return flagcxSuccess;
}

flagcxResult_t dGetDevice(int *dev) {
  FLAGCX_CHECK(checkOutArg("getDevice", "dev", dev));
  FLAGCX_CUDA_TRY("cudaGetDevice", cudaGetDevice(dev));
  return flagcxSuccess;
}

flagcxResult_t dGetDeviceCount(int *count) {
  FLAGCX_CHECK(checkOutArg("getDeviceCount", "count", count));
  FLAGCX_CUDA_TRY("cudaGetDeviceCount", cudaGetDeviceCount(count));
  return flagcxSuccess;
}

flagcxResult_t dGetVendor(char *vendor) {
  FLAGCX_CHECK(checkOutArg("getVendor", "vendor", vendor));
  memcpy(vendor, "NVIDIA", 7);
  return flagcxSuccess;
}

flagcxResult_t dHostGetDevicePointer(void **pDevice, void *pHost) {
  FLAGCX_CHECK(checkOutArg("hostGetDevicePointer", "pDevice", pDevice));
  FLAGCX_CUDA_TRY("cudaHostGetDevicePointer", cudaHostGetDevicePointer(pDevice, pHost, 0));
  return flagcxSuccess;
}

// cudaEventElapsedTime; flagcxInProgress while either event is pending (CUDA
// says cudaErrorNotReady, which is no failure), flagcxInvalidUsage for an
// event made with flagcxEventDisableTiming.
flagcxResult_t dEventElapsedTime(float *ms, flagcxEvent_t start, flagcxEvent_t end) {
  FLAGCX_CHECK(checkElapsedArgs(ms, start, end));
  for (flagcxEvent_t e : {start, end}) {
    if (!isLive(asEvent(e)))
      return argError(flagcxInvalidArgument, kInit,
                      "eventElapsedTime: event %p is not a live CUDA event", static_cast<void *>(e));
    if (!asEvent(e)->timing)
      return argError(flagcxInvalidUsage, kInit,
                      "eventElapsedTime: event %p was created with flagcxEventDisableTiming",
                      static_cast<void *>(e));
  }
  cudaError_t r = cudaEventElapsedTime(ms, asEvent(start)->ev, asEvent(end)->ev);
  if (r == cudaErrorNotReady) {
    cudaGetLastError();
    return flagcxInProgress;
  }
  if (r != cudaSuccess) return cudaFail("cudaEventElapsedTime", r);
  return flagcxSuccess;
}

flagcxDeviceHandle g_table = {
    dDeviceSynchronize, dDeviceMemcpy,    dDeviceMemset,   memAlloc,          memFree,
    dSetDevice,         dGetDevice,       dGetDeviceCount, dGetVendor,        dHostGetDevicePointer,
    streamCreate,       streamDestroy,    streamCopy,      streamFree,        streamSynchronize,
    streamQuery,        streamWaitEvent,  eventCreate,     eventDestroy,      eventRecord,
    eventSynchronize,   eventQuery,       dEventElapsedTime, ipcCreate,       ipcGet,
    ipcOpen,            ipcClose,         ipcFree,
};

// Device temporaries for the pageable operands of a "now" kernel: each
// distinct pageable pointer gets one buffer (dst aliasing a source shares it).
class Staging {
 public:
  explicit Staging(cudaStream_t s) : s_(s) {}
  ~Staging() {
    for (int i = 0; i < n_; i++) cudaFreeAsync(bufs_[i].dev, s_);
  }
  // The pointer a kernel may use for `p` (bytes long); copies in when `in`.
  flagcxResult_t map(const void *p, size_t bytes, bool in, void **out) {
    if (where(p) != Where::HostPageable) {
      *out = const_cast<void *>(p);
      return flagcxSuccess;
    }
    for (int i = 0; i < n_; i++)
      if (bufs_[i].host == p) {
        *out = bufs_[i].dev;
        return flagcxSuccess;
      }
    Buf b{p, nullptr};
    FLAGCX_CUDA_TRY("cudaMallocAsync (staging)", cudaMallocAsync(&b.dev, bytes, s_));
    bufs_[n_++] = b;
    if (in)
      FLAGCX_CUDA_TRY("cudaMemcpyAsync (staging in)",
                      cudaMemcpyAsync(b.dev, p, bytes, cudaMemcpyDefault, s_));
    *out = b.dev;
    return flagcxSuccess;
  }
  flagcxResult_t copyOut(void *dst, const void *dev, size_t bytes) {
    if (dst == dev) return flagcxSuccess;
    FLAGCX_CUDA_TRY("cudaMemcpyAsync (staging out)",
                    cudaMemcpyAsync(dst, dev, bytes, cudaMemcpyDefault, s_));
    return flagcxSuccess;
  }

 private:
  struct Buf {
    const void *host;
    void *dev;
  };
  cudaStream_t s_;
  Buf bufs_[3]{};
  int n_ = 0;
};

class CudaAdapter final : public DeviceAdapter {
 public:
  const char *name() const override { return "cuda"; }
  DeviceKind kind() const override { return DeviceKind::Cuda; }
  flagcxDeviceHandle *handle() override { return &g_table; }

  flagcxResult_t reduce(void *dst, const void *a, const void *b, size_t count,
                        flagcxDataType_t dtype, flagcxRedOp_t op, flagcxStream_t stream) override {
    FLAGCX_CHECK(checkReduceArgs("reduce", dtype, op));
    if (count == 0) return flagcxSuccess;
    if (!dst || !a || !b)
      return argError(flagcxInvalidArgument, kColl, "reduce: NULL buffer (dst=%p a=%p b=%p)", dst, a, b);
    size_t bytes = count * getFlagcxDataTypeSize(dtype);
    int dev = currentDevice();
    if (stream) {
      CHECK_STREAM("reduce", stream);
      FLAGCX_CHECK(needDeviceAccess("reduce", dst, a, b));
      FLAGCX_CUDA_TRY("reduce kernel launch",
                      launchReduce(dst, a, b, count, dtype, op, nativeOf(stream), smCount(dev)));
      return flagcxSuccess;
    }
    Where wd = where(dst), wa = where(a), wb = where(b);
    if (wd == Where::HostPageable && wa == Where::HostPageable && wb == Where::HostPageable)
      return hostReduce(dst, a, b, count, dtype, op);
    cudaStream_t s = internalStream(dev);
    {
      Staging st(s);
      void *pa, *pb, *pd;
      FLAGCX_CHECK(st.map(a, bytes, true, &pa));
      FLAGCX_CHECK(st.map(b, bytes, true, &pb));
      FLAGCX_CHECK(st.map(dst, bytes, dst == a || dst == b, &pd));
      FLAGCX_CUDA_TRY("reduce kernel launch", launchReduce(pd, pa, pb, count, dtype, op, s, smCount(dev)));
      FLAGCX_CHECK(st.copyOut(dst, pd, bytes));
    }
    return syncInternal(s, "reduce");
  }

  flagcxResult_t divide(void *dst, const void *src, size_t count, flagcxDataType_t dtype,
                        uint64_t divisor, flagcxStream_t stream) override {
    FLAGCX_CHECK(checkReduceArgs("divide", dtype, flagcxSum));
    if (divisor == 0) return argError(flagcxInvalidArgument, kColl, "divide: divisor is 0");
    if (count == 0) return flagcxSuccess;
    if (!dst || !src)
      return argError(flagcxInvalidArgument, kColl, "divide: NULL buffer (dst=%p src=%p)", dst, src);
    size_t bytes = count * getFlagcxDataTypeSize(dtype);
    int dev = currentDevice();
    if (stream) {
      CHECK_STREAM("divide", stream);
      FLAGCX_CHECK(needDeviceAccess("divide", dst, src, src));
      FLAGCX_CUDA_TRY("divide kernel launch",
                      launchDivide(dst, src, count, dtype, divisor, nativeOf(stream), smCount(dev)));
      return flagcxSuccess;
    }
    if (where(dst) == Where::HostPageable && where(src) == Where::HostPageable)
      return hostDivide(dst, src, count, dtype, divisor);
    cudaStream_t s = internalStream(dev);
    {
      Staging st(s);
      void *ps = nullptr, *pd = nullptr;
      FLAGCX_CHECK(st.map(src, bytes, true, &ps));
      FLAGCX_CHECK(st.map(dst, bytes, dst == src, &pd));
      FLAGCX_CUDA_TRY("divide kernel launch", launchDivide(pd, ps, count, dtype, divisor, s, smCount(dev)));
      FLAGCX_CHECK(st.copyOut(dst, pd, bytes));
    }
    return syncInternal(s, "divide");
  }

  flagcxResult_t copy(void *dst, const void *src, size_t bytes, flagcxStream_t stream) override {
    if (bytes == 0 || dst == src) return flagcxSuccess;
    if (!dst || !src)
      return argError(flagcxInvalidArgument, kColl, "copy: NULL buffer (dst=%p src=%p)", dst, src);
    if (stream) {
      CHECK_STREAM("copy", stream);
      FLAGCX_CUDA_TRY("cudaMemcpyAsync (copy)",
                      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, nativeOf(stream)));
      return flagcxSuccess;
    }
    if (where(dst) == Where::HostPageable && where(src) == Where::HostPageable) {
      memcpy(dst, src, bytes);
      return flagcxSuccess;
    }
    cudaStream_t s = internalStream(currentDevice());
    FLAGCX_CUDA_TRY("cudaMemcpyAsync (copy)", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    return syncInternal(s, "copy");
  }

  flagcxResult_t enqueue(flagcxStream_t stream, StreamTask task) override {
    return enqueueTask(stream, task);
  }
  void batchBegin() override { cuda::batchBegin(); }
  flagcxResult_t batchEnd() override { return cuda::batchEnd(); }
  void releaseLane(const void *lane) override { cuda::releaseLane(lane); }
  StreamHold *streamHold() override { return cuda::streamHold(); }

  // Direct mode (CUDA IPC between processes of one host).
  bool ipcSupported() override { return driver().memGetAddressRange != nullptr; }
  bool isDeviceMemory(const void *p) override {
    cudaPointerAttributes at{};
    if (!p || cudaPointerGetAttributes(&at, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return at.type == cudaMemoryTypeDevice;  // managed memory cannot be exported
  }
  bool deviceUuid(unsigned char *out16) override {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, currentDevice()) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    memcpy(out16, &prop.uuid, 16);
    return true;
  }
  flagcxResult_t allocDevice(void **p, size_t bytes) override {
    FLAGCX_CUDA_TRY("cudaMalloc (engine buffer)", cudaMalloc(p, bytes));
    return flagcxSuccess;
  }
  void freeDevice(void *p) override {
    if (cudaFree(p) != cudaSuccess) cudaGetLastError();
  }
  flagcxResult_t ipcExport(const void *p, void *ref) override {
    static_assert(sizeof(IpcHandle) <= kIpcRefBytes, "IPC reference too large");
    return ipcGet(reinterpret_cast<flagcxIpcMemHandle_t>(ref), const_cast<void *>(p));
  }
  flagcxResult_t ipcImportBase(const void *ref, void **base) override {
    IpcHandle h;
    memcpy(&h, ref, sizeof(h));
    h.offset = 0;
    return ipcOpen(reinterpret_cast<flagcxIpcMemHandle_t>(&h), base);
  }
  flagcxResult_t ipcRelease(void *base) override { return ipcClose(base); }
  uint64_t ipcOffset(const void *ref) override {
    IpcHandle h;
    memcpy(&h, ref, sizeof(h));
    return h.offset;
  }
  uint64_t ipcMappedBytes(void *base) override {
    CUdeviceptr b = 0;
    size_t len = 0;
    if (!driver().memGetAddressRange ||
        driver().memGetAddressRange(&b, &len, reinterpret_cast<CUdeviceptr>(base)) != CUDA_SUCCESS ||
        b != reinterpret_cast<CUdeviceptr>(base))
      return 0;
    return len;
  }
  size_t ipcIdBytes() override { return offsetof(IpcHandle, offset); }
  flagcxResult_t copyAsync(void *dst, const void *src, size_t bytes) override {
    if (!bytes || dst == src) return flagcxSuccess;
    FLAGCX_CUDA_TRY("cudaMemcpyAsync (engine)",
                    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, internalStream(currentDevice())));
    return flagcxSuccess;
  }
  flagcxResult_t reduceAsync(void *dst, const void *a, const void *b, size_t count,
                             flagcxDataType_t dtype, flagcxRedOp_t op) override {
    if (!count) return flagcxSuccess;
    int dev = currentDevice();
    FLAGCX_CUDA_TRY("reduce kernel launch (engine)",
                    launchReduce(dst, a, b, count, dtype, op, internalStream(dev), smCount(dev)));
    return flagcxSuccess;
  }
  flagcxResult_t reduce2Async(void *dst, void *dst2, const void *a, const void *b, size_t count,
                              flagcxDataType_t dtype, flagcxRedOp_t op) override {
    if (!count) return flagcxSuccess;
    int dev = currentDevice();
    FLAGCX_CUDA_TRY("reduce kernel launch (engine, two outputs)",
                    launchReduce2(dst, dst2, a, b, count, dtype, op, internalStream(dev), smCount(dev)));
    return flagcxSuccess;
  }
  flagcxResult_t foldAsync(void *dst, const void *const *srcs, int n, size_t count,
                           flagcxDataType_t dtype, flagcxRedOp_t op) override {
    int dev = currentDevice();
    if (dev < 0 || dev >= kMaxDev) return flagcxInternalError;
    return fold_[dev].fold(dst, srcs, n, count, dtype, op, internalStream(dev), smCount(dev));
  }
  // Pieces whose ends share their offset mod 16 go, in chunks, to one copy
  // kernel (BatchRing, cuda_batch.cc); the rest one copy each.
  flagcxResult_t copyBatchAsync(const CopyPiece *pieces, size_t n) override {
    int dev = currentDevice();
    if (dev < 0 || dev >= kMaxDev) return flagcxInternalError;
    return batch_[dev].copy(pieces, n, internalStream(dev), smCount(dev),
                            [this](const CopyPiece &p) { return copyAsync(p.dst, p.src, p.bytes); });
  }
  flagcxResult_t flush() override { return syncInternal(internalStream(currentDevice()), "engine"); }
  // cuMemGetHandleForAddressRange wants host-page-aligned ends: the fd spans
  // the pages around [p, p+len).  Never run with an RDMA NIC (docs/RDMA.md).
  int exportDmabuf(const void *p, size_t len, uint64_t *offset) override {
    const Driver &d = driver();
    if (!d.memGetHandleForAddressRange || !p || !len || where(p) != Where::Device) return -1;
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
    uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + len + page - 1) & ~(page - 1);
    int fd = -1;
    CUresult r = d.memGetHandleForAddressRange(&fd, static_cast<CUdeviceptr>(lo), hi - lo,
                                               CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS || fd < 0) {
      INFO(kNet, "cuMemGetHandleForAddressRange(dma-buf) of %zu bytes at %p failed (CUresult %d)",
           static_cast<size_t>(hi - lo), reinterpret_cast<void *>(lo), static_cast<int>(r));
      return -1;
    }
    *offset = reinterpret_cast<uintptr_t>(p) - lo;
    return fd;
  }

  flagcxResult_t allocPinned(void **p, size_t bytes) override {
    FLAGCX_CUDA_TRY("cudaHostAlloc (engine staging)", cudaHostAlloc(p, bytes, cudaHostAllocPortable));
    return flagcxSuccess;
  }
  void freePinned(void *p) override {
    if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
  }
  flagcxResult_t hostRegister(void *p, size_t bytes) override {
    FLAGCX_CUDA_TRY("cudaHostRegister (one-host staging)",
                    cudaHostRegister(p, bytes, cudaHostRegisterPortable));
    return flagcxSuccess;
  }
  void hostUnregister(void *p) override {
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
  }
  // Marks: an event recorded on the private stream, per device; numbers grow
  // by one per mark, and events are recycled once reached.
  flagcxResult_t mark(uint64_t *m) override {
    int dev = currentDevice();
    if (dev < 0 || dev >= kMaxDev) return flagcxInternalError;
    std::lock_guard<std::mutex> lk(markMu_);
    Marks &mk = marks_[dev];
    cudaEvent_t e;
    if (!mk.spare.empty()) {
      e = mk.spare.back();
      mk.spare.pop_back();
    } else {
      FLAGCX_CUDA_TRY("cudaEventCreateWithFlags (engine mark)",
                      cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    cudaError_t r = cudaEventRecord(e, internalStream(dev));
    if (r != cudaSuccess) {
      mk.spare.push_back(e);
      return cudaFail("cudaEventRecord (engine mark)", r);
    }
    *m = ++mk.last;
    mk.pending.push_back({*m, e});
    return flagcxSuccess;
  }
  flagcxResult_t reached(uint64_t m, bool *done) override {
    int dev = currentDevice();
    if (dev < 0 || dev >= kMaxDev) return flagcxInternalError;
    std::lock_guard<std::mutex> lk(markMu_);
    Marks &mk = marks_[dev];
    while (!mk.pending.empty() && mk.pending.front().first <= m) {
      cudaError_t r = cudaEventQuery(mk.pending.front().second);
      if (r == cudaErrorNotReady) {
        *done = false;
        return flagcxSuccess;
      }
      mk.spare.push_back(mk.pending.front().second);
      mk.pending.pop_front();
      if (r != cudaSuccess) return cudaFail("engine copy (mark)", r);
    }
    *done = true;
    return flagcxSuccess;
  }

  flagcxResult_t prepareEngine() override {
    int dev = currentDevice();
    {
      std::lock_guard<std::mutex> lk(warmMu_);
      if (dev >= 0 && dev < 64 && warmed_[dev]) return flagcxSuccess;
    }
    // Every reduce (vector and element-wise paths), divide and copy kernel once.
    cudaStream_t s = internalStream(dev);
    char *buf = nullptr;
    FLAGCX_CUDA_TRY("cudaMalloc (kernel warm-up)", cudaMalloc(reinterpret_cast<void **>(&buf), 3 * 4096));
    flagcxResult_t res = flagcxSuccess;
    for (int dt = 0; dt < flagcxNumTypes && res == flagcxSuccess; dt++) {
      auto dtype = static_cast<flagcxDataType_t>(dt);
      size_t ts = getFlagcxDataTypeSize(dtype);
      for (int op = 0; op < flagcxRedNoOp; op++) {
        auto rop = static_cast<flagcxRedOp_t>(op);
        if (launchReduce(buf, buf + 4096, buf + 8192, 256 / ts, dtype, rop, s, smCount(dev)) != cudaSuccess ||
            launchReduce(buf + ts, buf + 4096 + 2 * ts, buf + 8192 + 3 * ts, 100, dtype, rop, s,
                         smCount(dev)) != cudaSuccess)
          res = flagcxUnhandledDeviceError;
      }
      const void *srcs[2] = {buf + 4096, buf + 8192};  // the fold kernel of every dtype x op
      for (int op = 0; op < flagcxRedNoOp; op++)
        if (launchFold(buf, srcs, nullptr, 2, 100, dtype, static_cast<flagcxRedOp_t>(op), s,
                       smCount(dev)) != cudaSuccess)
          res = flagcxUnhandledDeviceError;
      if (launchDivide(buf, buf + 4096, 256 / ts, dtype, 3, s, smCount(dev)) != cudaSuccess ||
          launchDivide(buf + ts, buf + 4096 + 2 * ts, 100, dtype, 3, s, smCount(dev)) != cudaSuccess)
        res = flagcxUnhandledDeviceError;
    }
    if (launchCopy(buf, buf + 4096, 1000, s, smCount(dev)) != cudaSuccess) res = flagcxUnhandledDeviceError;
    BatchChunk none{buf, buf + 64, 0};  // the batched copy kernel, moving nothing
    if (cudaMemcpyAsync(buf + 8192, &none, sizeof(none), cudaMemcpyHostToDevice, s) != cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess ||
        launchCopyBatch(reinterpret_cast<const BatchChunk *>(buf + 8192), 1, 1, s, smCount(dev)) != cudaSuccess)
      res = flagcxUnhandledDeviceError;
    cudaError_t e = cudaStreamSynchronize(s);
    cudaFree(buf);
    if (res != flagcxSuccess || e != cudaSuccess) {
      cudaGetLastError();
      WARN(kInit, "loading the CUDA kernels (warm-up launches) failed");
      return flagcxUnhandledDeviceError;
    }
    std::lock_guard<std::mutex> lk(warmMu_);
    if (dev >= 0 && dev < 64) warmed_[dev] = true;
    return flagcxSuccess;
  }

 private:
  static constexpr int kMaxDev = 64;
  std::mutex warmMu_;
  bool warmed_[kMaxDev] = {};
  struct Marks {
    uint64_t last = 0;
    std::deque<std::pair<uint64_t, cudaEvent_t>> pending;
    std::vector<cudaEvent_t> spare;
  };
  std::mutex markMu_;
  Marks marks_[kMaxDev];
  BatchRing batch_[kMaxDev];  // copyBatchAsync's chunk lists, per device
  FoldList fold_[kMaxDev];     // foldAsync's long source lists, per device
  static flagcxResult_t needDeviceAccess(const char *fn, const void *d, const void *a, const void *b) {
    if (where(d) == Where::HostPageable || where(a) == Where::HostPageable ||
        where(b) == Where::HostPageable)
      return argError(flagcxInvalidArgument, kColl,
                      "%s on a stream needs device-accessible buffers (device or pinned host "
                      "memory); got pageable host memory (use a NULL stream to stage it)", fn);
    return flagcxSuccess;
  }
  // Waits for the internal stream, bounded by FLAGCX_TIMEOUT: a GPU that
  // never gets there (work stuck behind something this thread waits for) is
  // an error, not a hang.
  static flagcxResult_t syncInternal(cudaStream_t s, const char *fn) {
    Backoff bo;
    for (;;) {
      cudaError_t e = cudaStreamQuery(s);
      if (e == cudaSuccess) return flagcxSuccess;
      if (e != cudaErrorNotReady) return cudaFail(fn, e);
      if (bo.expired())
        return argError(flagcxUnhandledDeviceError, kColl, "%s: the engine's device work did not "
                        "finish within FLAGCX_TIMEOUT (%lld s)", fn,
                        static_cast<long long>(paramInt(Param::TIMEOUT)));
      bo.idle();
    }
  }
};

CudaAdapter *probe() {
  // Load kernels at start-up unless the user chose otherwise (see
  // prepareEngine for why lazy loading is a hazard here).
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    g_reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" +
               cudaGetErrorString(e) + ")";
    cudaGetLastError();
  } else if (n == 0) {
    g_reason = "no CUDA device is visible";
  }
  if (!g_reason.empty()) {
    INFO(kInit, "cuda adapter unusable: %s", g_reason.c_str());
    return nullptr;
  }
  INFO(kInit, "cuda adapter: %d device(s)", n);
  return new CudaAdapter();  // lives for the process
}

}  // namespace

const char *unusableReason() { return g_reason.c_str(); }

}  // namespace cuda

DeviceAdapter *cudaAdapter() {
  static DeviceAdapter *a = cuda::probe();
  return a;
}

}  // namespace flagcx
