// FoldList (cuda_internal.h): the CUDA adapter's foldAsync, i.e. the
// argument checks and the way the sources reach the fold kernel.
//
// Up to kFoldParamSources sources travel in the kernel's parameters (no
// copy, no lock).  A fold of more sources (a communicator of more ranks than
// that) needs them all in one kernel: folding in batches would store a
// partial result between batches, rounded to the dtype for the narrow types
// (not hostFold's single rounding), and dst may be one of the later
// sources.  So the pointers go to a device array, grown on demand and
// written by a cudaMemcpyAsync on the same private stream as the kernel:
// from pageable memory that call returns only once it has taken the bytes,
// and stream order keeps the next fold's copy behind this kernel.
#include "cuda_internal.h"
#include "cuda_kernels.h"

namespace flagcx::cuda {

flagcxResult_t FoldList::fold(void *dst, const void *const *srcs, int n, size_t count,
                              flagcxDataType_t dtype, flagcxRedOp_t op, cudaStream_t s, int smCount) {
  FLAGCX_CHECK(checkFoldArgs(dst, srcs, n, count, dtype, op));
  if (count == 0) return flagcxSuccess;
  if (n <= kFoldParamSources) {
    FLAGCX_CUDA_TRY("fold kernel launch (engine)",
                    launchFold(dst, srcs, nullptr, n, count, dtype, op, s, smCount));
    return flagcxSuccess;
  }
  std::lock_guard<std::mutex> lk(mu_);
  const size_t want = static_cast<size_t>(n);
  if (want > cap_) {
    size_t cap = want > 2 * cap_ ? want : 2 * cap_;
    if (dev_) FLAGCX_CUDA_TRY("cudaFreeAsync (fold sources)", cudaFreeAsync(dev_, s));
    dev_ = nullptr;
    cap_ = 0;
    FLAGCX_CUDA_TRY("cudaMallocAsync (fold sources)", cudaMallocAsync(&dev_, cap * sizeof(void *), s));
    cap_ = cap;
  }
  FLAGCX_CUDA_TRY("cudaMemcpyAsync (fold sources)",
                  cudaMemcpyAsync(dev_, srcs, want * sizeof(void *), cudaMemcpyHostToDevice, s));
  FLAGCX_CUDA_TRY("fold kernel launch (engine)",
                  launchFold(dst, srcs, static_cast<const void *const *>(dev_), n, count, dtype, op, s,
                             smCount));
  return flagcxSuccess;
}

}  // namespace flagcx::cuda
