// The CUDA adapter's stream holds (stream_hold.h): cuStreamWaitValue32 on a
// word of mapped page-locked host memory, the `value` mechanism's wait
// without its task.  Usable where the one-time probe of cuda_stream.cc
// found that such a wait holds a stream and a host store releases it.  The
// releasing thread never touches the device (the stream-ordered small-call
// path runs its collective on host memory), so the hazard of `value` — the
// task's own device work queued behind the hold — cannot arise.
#include <cstring>

#include "adapters/device/stream_hold.h"
#include "base/base.h"
#include "cuda_internal.h"

namespace flagcx::cuda {
namespace {

class CudaHold final : public StreamHold {
 public:
  bool usable() override { return streamWaitValueWorks(); }
  bool canHold(flagcxStream_t stream) override {
    if (!stream || !isLive(stream)) return false;
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(asStream(stream)->native, &st) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return st == cudaStreamCaptureStatusNone;  // a captured hold would replay without its release
  }
  bool streamOrdered(const void *p) override { return where(p) == Where::Device; }
  flagcxResult_t allocWords(int n, HoldPoint *words) override {
    void *p = nullptr;
    size_t bytes = static_cast<size_t>(n) * 64;  // one word per cache line
    FLAGCX_CUDA_TRY("cudaHostAlloc (stream hold words)",
                    cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    memset(p, 0, bytes);
    void *dev = nullptr;
    cudaError_t e = cudaHostGetDevicePointer(&dev, p, 0);
    if (e != cudaSuccess) {
      cudaFreeHost(p);
      return cudaFail("cudaHostGetDevicePointer (stream hold words)", e);
    }
    for (int i = 0; i < n; i++) {
      words[i].word = reinterpret_cast<volatile uint32_t *>(static_cast<char *>(p) + 64 * i);
      words[i].devAddr = reinterpret_cast<uintptr_t>(dev) + 64 * static_cast<uintptr_t>(i);
      words[i].k = 0;
    }
    return flagcxSuccess;
  }
  void freeWords(int, HoldPoint *words) override {
    cudaFreeHost(const_cast<uint32_t *>(words[0].word));
  }
  flagcxResult_t hold(flagcxStream_t stream, const HoldPoint *p) override {
    CUresult cr = driver().streamWaitValue32(reinterpret_cast<CUstream>(asStream(stream)->native),
                                             static_cast<CUdeviceptr>(p->devAddr), p->k,
                                             CU_STREAM_WAIT_VALUE_GEQ);
    if (cr != CUDA_SUCCESS)
      return argError(flagcxUnhandledDeviceError, kColl, "stream hold: cuStreamWaitValue32 failed "
                      "(CUresult %d)", static_cast<int>(cr));
    return flagcxSuccess;
  }
  void noteError(flagcxStream_t stream, flagcxResult_t r) override {
    int expected = flagcxSuccess;
    asStream(stream)->error.compare_exchange_strong(expected, r);
  }
};

}  // namespace

StreamHold *streamHold() {
  static CudaHold h;
  return &h;
}

}  // namespace flagcx::cuda
