// The device adapter interface: what the engine needs from a kind of device.
// `host` (plain CPU memory) runs everywhere; `cuda` comes with the GPU work.
// The public flagcxDeviceHandle table is built on top of one of these.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "flagcx.h"

namespace flagcx {

class StreamHold;  // adapters/device/stream_hold.h

// Work placed on a stream: a plain function and its argument, so that
// enqueueing allocates nothing.  A task that fails records its error on the
// stream; streamSynchronize returns it.
struct StreamTask {
  flagcxResult_t (*run)(void *arg);
  void *arg;
  // Tasks of one lane run one at a time, in enqueue order; tasks of
  // different lanes may run at once.  The executor gives each communicator
  // its own lane, so that ranks sharing a process (which wait for each
  // other) never queue behind one another.  nullptr: the shared lane.
  const void *lane;  // (no initializer: StreamTask lives in unions; {run, arg} zeroes it)
  // A task that takes well under a microsecond of work of its own (the
  // small-message block): an adapter may run it on the calling thread when
  // the stream has nothing else queued or running, instead of handing it to
  // the stream's worker.  Never inside a batch (see batchBegin).
  bool quick;
};

// The kinds of device a rank can drive.  Ranks of different kinds make a
// heterogeneous communicator; the value travels in the bootstrap's PeerInfo.
enum class DeviceKind : int32_t { Host = 0, Cuda = 1 };

// Scalar-free, vectorizable reduction kernels for CPU memory (every dtype x
// op; half and bfloat16 go through float).  Exposed for tests and for the
// shared-memory fast paths.
flagcxResult_t hostReduce(void *dst, const void *a, const void *b, size_t count,
                          flagcxDataType_t dtype, flagcxRedOp_t op);
flagcxResult_t hostDivide(void *dst, const void *src, size_t count, flagcxDataType_t dtype,
                          uint64_t divisor);
// The rank-ordered left fold of n sources, element by element:
// dst = ((srcs[0] op srcs[1]) op srcs[2]) ... op srcs[n-1], Avg then divided
// by n.  float32/float64 (and integers) in their own arithmetic; half,
// bfloat16 and FP8 accumulate in float32 and round once at the end (after
// the division for Avg).  dst may be any one of the sources (same address).
flagcxResult_t hostFold(void *dst, const void *const *srcs, int n, size_t count,
                        flagcxDataType_t dtype, flagcxRedOp_t op);
// hostFold's argument checks (every adapter's fold makes them): a valid
// dtype and op, n >= 1 sources, and, unless count is 0, no NULL pointer.
flagcxResult_t checkFoldArgs(const void *dst, const void *const *srcs, int n, size_t count,
                             flagcxDataType_t dtype, flagcxRedOp_t op);

class DeviceAdapter {
 public:
  virtual ~DeviceAdapter() = default;
  virtual const char *name() const = 0;  // "host", "cuda"
  virtual DeviceKind kind() const = 0;
  // The public function table for this device (static storage; never freed).
  virtual flagcxDeviceHandle *handle() = 0;

  // dst[i] = a[i] op b[i] for i < count; dst may alias a or b.  With a NULL
  // stream it runs now on the calling thread.
  virtual flagcxResult_t reduce(void *dst, const void *a, const void *b, size_t count,
                                flagcxDataType_t dtype, flagcxRedOp_t op,
                                flagcxStream_t stream) = 0;
  // dst[i] = src[i] / divisor (the final step of Avg); integers truncate.
  virtual flagcxResult_t divide(void *dst, const void *src, size_t count,
                                flagcxDataType_t dtype, uint64_t divisor,
                                flagcxStream_t stream) = 0;
  // Plain copy, NULL stream = now.
  virtual flagcxResult_t copy(void *dst, const void *src, size_t bytes,
                              flagcxStream_t stream) = 0;
  // Run `task` in stream order (NULL stream: now, on the calling thread).
  virtual flagcxResult_t enqueue(flagcxStream_t stream, StreamTask task) = 0;
  // Around several enqueues of one thread that must run together (a group of
  // same-process ranks): an adapter whose enqueue waits for the task may
  // defer those waits to batchEnd, which returns the first failure.
  virtual void batchBegin() {}
  virtual flagcxResult_t batchEnd() { return flagcxSuccess; }

  // Direct exchange of device memory between processes of one host (CUDA
  // IPC), used by the executor's direct mode (src/exec/direct.cc).  The host
  // adapter has none.  A reference is kIpcRefBytes of plain data naming the
  // allocation that holds a pointer and the pointer's offset in it.
  static constexpr size_t kIpcRefBytes = 96;
  virtual bool ipcSupported() { return false; }
  // Memory that ipcExport can name (device memory of this process).
  virtual bool isDeviceMemory(const void *) { return false; }
  virtual flagcxResult_t allocDevice(void **p, size_t) { *p = nullptr; return flagcxInternalError; }
  virtual void freeDevice(void *) {}
  virtual flagcxResult_t ipcExport(const void *, void * /*ref*/) { return flagcxInternalError; }
  // Map the allocation named by `ref` (its offset ignored) and return its base.
  virtual flagcxResult_t ipcImportBase(const void * /*ref*/, void ** /*base*/) { return flagcxInternalError; }
  virtual flagcxResult_t ipcRelease(void * /*base*/) { return flagcxInternalError; }
  // The offset a reference carries, and the bytes identifying its allocation.
  virtual uint64_t ipcOffset(const void * /*ref*/) { return 0; }
  // Bytes of the allocation ipcImportBase mapped at `base` (0: unknown).  A
  // reference comes from a peer: its offset, and the length the peer says
  // it has, are checked against this before any access.
  virtual uint64_t ipcMappedBytes(void * /*base*/) { return 0; }
  // 16 bytes naming the current device among the processes of a host (the
  // GPU's UUID); false where the adapter has none.
  virtual bool deviceUuid(unsigned char * /*out16*/) { return false; }
  virtual size_t ipcIdBytes() { return 0; }  // the id is the ref's first ipcIdBytes()
  // Copy and reduce through the adapter's private stream without waiting:
  // `flush` waits for everything issued so.  Defaults: the synchronous calls.
  virtual flagcxResult_t copyAsync(void *dst, const void *src, size_t bytes) {
    return copy(dst, src, bytes, nullptr);
  }
  virtual flagcxResult_t reduceAsync(void *dst, const void *a, const void *b, size_t count,
                                     flagcxDataType_t dtype, flagcxRedOp_t op) {
    return reduce(dst, a, b, count, dtype, op, nullptr);
  }
  // reduceAsync writing the result to dst and dst2 (the direct allreduce of
  // two ranks: its own output and the peer's).  Default: reduce, then copy.
  virtual flagcxResult_t reduce2Async(void *dst, void *dst2, const void *a, const void *b,
                                      size_t count, flagcxDataType_t dtype, flagcxRedOp_t op) {
    flagcxResult_t r = reduceAsync(dst, a, b, count, dtype, op);
    return r != flagcxSuccess ? r : copyAsync(dst2, dst, count * getFlagcxDataTypeSize(dtype));
  }
  // dst = the left fold of srcs[0..n-1] in that order (hostFold's contract:
  // narrow floats accumulate in float32 and round once; Avg divides by n),
  // issued like reduceAsync.  Default: hostFold, for memory the host reads.
  virtual flagcxResult_t foldAsync(void *dst, const void *const *srcs, int n, size_t count,
                                   flagcxDataType_t dtype, flagcxRedOp_t op) {
    return hostFold(dst, srcs, n, count, dtype, op);
  }
  // Many copies issued as one (the P2P engine's vectors of KV-cache blocks):
  // every pointer must be memory this adapter's kernels can address (device
  // memory of the current device, or another process's mapped into it).
  // Default: one copyAsync per piece.
  struct CopyPiece {
    void *dst;
    const void *src;
    size_t bytes;
  };
  virtual flagcxResult_t copyBatchAsync(const CopyPiece *pieces, size_t n) {
    for (size_t i = 0; i < n; i++) {
      flagcxResult_t r = copyAsync(pieces[i].dst, pieces[i].src, pieces[i].bytes);
      if (r != flagcxSuccess) return r;
    }
    return flagcxSuccess;
  }
  virtual flagcxResult_t flush() { return flagcxSuccess; }
  // A file descriptor naming device memory [p, p+len) for a NIC (a dma-buf,
  // for RDMA registration): the fd covers whole host pages, *offset is where
  // p lies in it.  -1 when the memory or the adapter has none.  The caller
  // closes the fd.
  virtual int exportDmabuf(const void * /*p*/, size_t /*len*/, uint64_t * /*offset*/) { return -1; }
  // Pipelined host staging (src/exec/staging.cc): page-locked host memory,
  // and marks in the private stream's order.  `mark` returns a number for
  // "everything issued so far"; `reached` says, without waiting, whether all
  // of it is done.  Defaults: the heap, and every mark already reached.
  virtual flagcxResult_t allocPinned(void **p, size_t bytes) {
    *p = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    return *p ? flagcxSuccess : flagcxSystemError;
  }
  virtual void freePinned(void *p) { free(p); }
  // Page-lock host memory allocated elsewhere (a shared mapping the one-host
  // paths copy through), so that copies to and from it run at the pinned
  // rate; once per mapping, and hostUnregister before it is unmapped.
  // Default: nothing to do (host memory needs no locking for the host).
  virtual flagcxResult_t hostRegister(void * /*p*/, size_t /*bytes*/) { return flagcxSuccess; }
  virtual void hostUnregister(void * /*p*/) {}
  virtual flagcxResult_t mark(uint64_t *m) { *m = 0; return flagcxSuccess; }
  virtual flagcxResult_t reached(uint64_t /*m*/, bool *done) { *done = true; return flagcxSuccess; }
  // Make sure every kernel the engine may launch is loaded, on the caller's
  // thread (CUDA loads kernels lazily, on first launch, and loading may wait
  // for every stream: from the progress thread, while it holds a user's
  // stream, that would never return).
  virtual flagcxResult_t prepareEngine() { return flagcxSuccess; }
  // No task of `lane` is queued or running any more, nor will be: free what
  // the adapter keeps for it (a CUDA progress thread).
  virtual void releaseLane(const void * /*lane*/) {}
  // Holding a stream on a host word (stream_hold.h); nullptr: none.
  virtual StreamHold *streamHold() { return nullptr; }
};

// The host adapter (always available), and its stream holds.
DeviceAdapter *hostAdapter();
StreamHold *hostStreamHold();
// The CUDA adapter, in builds that have one (adapters/device/cuda); nullptr
// when no GPU is usable here (cudaUnavailableReason() in cuda_internal.h says why).
DeviceAdapter *cudaAdapter();
// The adapter chosen by FLAGCX_DEVICE (auto = cuda when usable, else host);
// nullptr, with the reason logged, when the choice cannot be honoured.
DeviceAdapter *selectedAdapter();

}  // namespace flagcx
