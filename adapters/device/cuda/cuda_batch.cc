// DeviceAdapter::copyBatchAsync's ring of chunk lists (BatchRing,
// cuda_internal.h).
//
// A copy launched per piece costs ~5 us of issue time: 2048 KV-cache blocks
// took 11 ms whatever their size (docs/P2P.md).  Here the pieces become one
// kernel launch and one event record per batch.  The kernel reads the chunk
// list from mapped pinned memory (no upload to order behind the previous
// kernel), the host waits only for a batch whose entries it is about to
// rewrite, normally long done, and a batch of few chunks has each cut into
// shares so that it still runs on every multiprocessor.
#include <algorithm>

#include "cuda_internal.h"
#include "cuda_kernels.h"

namespace flagcx::cuda {

flagcxResult_t BatchRing::copy(const Piece *pieces, size_t n, cudaStream_t s, int smCount,
                               const std::function<flagcxResult_t(const Piece &)> &single) {
  auto batched = [n](const Piece &p) {
    return n > 1 && p.bytes &&
           ((reinterpret_cast<uintptr_t>(p.dst) ^ reinterpret_cast<uintptr_t>(p.src)) & 15) == 0;
  };
  size_t chunks = 0, bytes = 0;
  for (size_t i = 0; i < n; i++) {
    const Piece &p = pieces[i];
    if (batched(p)) {
      chunks += (p.bytes + kBatchChunkBytes - 1) / kBatchChunkBytes;
      bytes += p.bytes;
    } else if (flagcxResult_t r = single(p); r != flagcxSuccess) {
      return r;
    }
  }
  if (!chunks) return flagcxSuccess;
  if (chunks > 0x7fffffffu) return flagcxInvalidArgument;
  std::lock_guard<std::mutex> lk(mu_);
  if (2 * chunks > cap_) {
    // Room for two batches at least, so that writing one never waits for
    // the one before it.  Nothing may still read the old ring.
    for (auto &f : inflight_) {
      FLAGCX_CUDA_TRY("cudaEventSynchronize (batch list)", cudaEventSynchronize(f.done));
      spare_.push_back(f.done);
    }
    inflight_.clear();
    size_t cap = std::max<size_t>({4 * chunks, 2 * cap_, size_t{4096}});
    if (host_) cudaFreeHost(host_);
    host_ = dev_ = nullptr;
    cap_ = next_ = 0;
    FLAGCX_CUDA_TRY("cudaHostAlloc (batch list)",
                    cudaHostAlloc(&host_, cap * sizeof(BatchChunk), cudaHostAllocPortable | cudaHostAllocMapped));
    FLAGCX_CUDA_TRY("cudaHostGetDevicePointer (batch list)", cudaHostGetDevicePointer(&dev_, host_, 0));
    cap_ = cap;
  }
  if (next_ + chunks > cap_) next_ = 0;
  // Batches lie in the ring in the order issued, so the ones in the way are
  // the oldest; a long queue is trimmed from its old end too.
  const size_t from = next_, to = next_ + chunks;
  while (!inflight_.empty() &&
         ((inflight_.front().from < to && from < inflight_.front().to) || inflight_.size() >= 64)) {
    FLAGCX_CUDA_TRY("cudaEventSynchronize (batch list)", cudaEventSynchronize(inflight_.front().done));
    spare_.push_back(inflight_.front().done);
    inflight_.pop_front();
  }
  BatchChunk *h = static_cast<BatchChunk *>(host_) + from;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const Piece &p = pieces[i];
    if (batched(p))
      for (size_t off = 0; off < p.bytes; off += kBatchChunkBytes)
        h[k++] = BatchChunk{static_cast<const char *>(p.src) + off, static_cast<char *>(p.dst) + off,
                            std::min(kBatchChunkBytes, p.bytes - off)};
  }
  // About two units per block of a full grid, none under 64 KiB: each unit
  // costs the kernel one read of its entry from host memory (~1-2 us over
  // PCIe), hidden only behind a copy that takes longer (shares of 4 KiB made
  // small batches 2x slower on the H200, docs/P2P.md).
  const size_t grid = static_cast<size_t>(std::max(smCount, 1)) * 4;
  size_t parts = std::max<size_t>(1, std::min((2 * grid + k - 1) / k, bytes / k / (64 << 10)));
  cudaEvent_t done = nullptr;
  if (!spare_.empty()) {
    done = spare_.back();
    spare_.pop_back();
  } else {
    FLAGCX_CUDA_TRY("cudaEventCreate (batch list)", cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  cudaError_t e = launchCopyBatch(static_cast<const BatchChunk *>(dev_) + from, static_cast<unsigned>(k),
                                  static_cast<unsigned>(parts), s, smCount);
  if (e == cudaSuccess) e = cudaEventRecord(done, s);
  if (e != cudaSuccess) {
    spare_.push_back(done);
    return cudaFail("batched copy kernel launch", e);
  }
  inflight_.push_back(Batch{from, to, done});
  next_ = to;
  return flagcxSuccess;
}

}  // namespace flagcx::cuda
