// FoldList (cuda_internal.h): the CUDA adapter's foldAsync, i.e. the
// argument checks and the way the sources reach the fold kernel.
//
// Up to kFoldParamSources sources travel in the kernel's parameters (no
// copy, no lock).  A fold of more sources (a communicator of more ranks than
// that) needs them all in one kernel: folding in batches would store a
// partial result between batches, rounded to the dtype for the narrow types
// (not hostFold's single rounding), and dst may be one of the later
// sources.  So the pointers go to a device array, grown on demand: copied
// into page-locked memory, then by a cudaMemcpyAsync on the same private
// stream as the kernel (stream order keeps the next fold's copy behind this
// kernel).  The page-locked copy is rewritten only once an event says the
// previous upload is done (not relying on how the driver treats a copy from
// pageable memory); a fold of many ranks may wait there for the work queued
// before it.
#include <cstring>

#include "cuda_internal.h"
#include "cuda_kernels.h"

namespace flagcx::cuda {

flagcxResult_t FoldList::upload(const void *const *srcs, size_t n, cudaStream_t s) {
  if (uploaded_) FLAGCX_CUDA_TRY("cudaEventSynchronize (fold sources)", cudaEventSynchronize(uploaded_));
  else FLAGCX_CUDA_TRY("cudaEventCreate (fold sources)", cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
  if (n > cap_) {
    size_t cap = n > 2 * cap_ ? n : 2 * cap_;
    if (dev_) FLAGCX_CUDA_TRY("cudaFreeAsync (fold sources)", cudaFreeAsync(dev_, s));
    if (host_) FLAGCX_CUDA_TRY("cudaFreeHost (fold sources)", cudaFreeHost(host_));
    dev_ = host_ = nullptr;
    cap_ = 0;
    FLAGCX_CUDA_TRY("cudaMallocAsync (fold sources)", cudaMallocAsync(&dev_, cap * sizeof(void *), s));
    FLAGCX_CUDA_TRY("cudaHostAlloc (fold sources)", cudaHostAlloc(&host_, cap * sizeof(void *), cudaHostAllocPortable));
    cap_ = cap;
  }
  memcpy(host_, srcs, n * sizeof(void *));
  FLAGCX_CUDA_TRY("cudaMemcpyAsync (fold sources)",
                  cudaMemcpyAsync(dev_, host_, n * sizeof(void *), cudaMemcpyHostToDevice, s));
  FLAGCX_CUDA_TRY("cudaEventRecord (fold sources)", cudaEventRecord(uploaded_, s));
  return flagcxSuccess;
}

flagcxResult_t FoldList::fold(void *dst, const void *const *srcs, int n, size_t count,
                              flagcxDataType_t dtype, flagcxRedOp_t op, cudaStream_t s, int smCount) {
  FLAGCX_CHECK(checkFoldArgs(dst, srcs, n, count, dtype, op));
  if (count == 0) return flagcxSuccess;
  if (n <= kFoldParamSources) {
    FLAGCX_CUDA_TRY("fold kernel launch (engine)",
                    launchFold(dst, srcs, nullptr, n, count, dtype, op, s, smCount));
    return flagcxSuccess;
  }
  std::lock_guard<std::mutex> lk(mu_);  // from the upload through the launch
  FLAGCX_CHECK(upload(srcs, static_cast<size_t>(n), s));
  FLAGCX_CUDA_TRY("fold kernel launch (engine)",
                  launchFold(dst, srcs, static_cast<const void *const *>(dev_), n, count, dtype, op, s,
                             smCount));
  return flagcxSuccess;
}

}  // namespace flagcx::cuda
