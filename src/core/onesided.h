// FlagCX's one-sided API on the communicator (docs/ONESIDED.md): windows
// (PutSignal / Signal / WaitSignal, stream-ordered) and regions (Put / Get /
// BatchPut / PutValue with a completion counter).
//
// Registration is collective: every rank passes its buffer, the ranks
// allgather sizes and, for memory the host adapter allocated shareable
// (flagcxMemAlloc: memfd), an IPC handle, and each rank maps the buffers of
// its shm peers.  An operation to a peer whose target memory is mapped is a
// memcpy (a signal an atomic add in the peer's mapped signal block); any
// other goes through the software engine of net/rma.h, whose service thread
// on the target applies it.  Created at the first registration.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "flagcx.h"
#include "net/net.h"

struct flagcxComm;

namespace flagcx {


// Memory registered by every rank under one key: what this rank knows of
// each rank's part.
struct RegInfo {
  uint32_t key = 0;
  char *base = nullptr;  // this rank's buffer
  uint64_t size = 0;
  struct Remote {
    uint64_t size = 0;
    char *mapped = nullptr;  // peer's buffer mapped here (shm fast path), or null
    bool ownsMap = false;    // mapped through an IPC handle (close it)
    uint64_t addr = 0;       // native (verbs) peers: address and remote key
    uint32_t rkey = 0;
    void *deviceBase = nullptr;  // device memory mapped by CUDA IPC (release it)
  };
  bool device = false;       // some rank registered device memory: copies through the adapter
  std::vector<Remote> peer;  // [rank]; self: mapped = base
};

class OneSided;

}  // namespace flagcx

// The public opaque handle.
struct flagcxWindow {
  static constexpr uint64_t kMagic = 0x574f444e4957ull;  // "WINDOW"
  uint64_t magic = kMagic;
  flagcx::OneSided *owner = nullptr;
  flagcx::RegInfo reg;
  std::atomic<int> inflight{0};  // enqueued operations not finished
};

namespace flagcx {

class OneSided {
 public:
  // Collective: create comm's one-sided state if it has none (the first
  // registration of any kind on every rank).
  static flagcxResult_t ensure(flagcxComm *comm);
  explicit OneSided(flagcxComm *comm);
  ~OneSided();

  // Registration (collective).
  flagcxResult_t windowRegister(void *buf, size_t size, int flags, flagcxWindow **out);
  flagcxResult_t windowDeregister(flagcxWindow *win);
  flagcxResult_t regionRegister(void *buf, size_t size);
  flagcxResult_t signalRegister(void *buf, size_t size, int ptrType);
  flagcxResult_t stagingRegister(void *buf, size_t size);
  flagcxResult_t stagingDeregister();

  // Windows (stream-ordered).
  bool isWindow(const flagcxWindow *w);
  // The registration holding [buf, buf+size): the window `win`, or (win
  // null) any window or region, copied to *out; false when none holds it.
  bool findReg(const void *buf, size_t size, const flagcxWindow *win, RegInfo *out) const;
  // The engine of the peers that are not mapped (the device API's proxy).
  RmaEngine *engine() const { return eng_.get(); }
  bool signalsReady() const { return signalsReady_; }
  flagcxResult_t putSignal(const void *src, size_t bytes, int peer, flagcxWindow *win,
                           size_t off, bool withData, flagcxStream_t stream);
  flagcxResult_t waitSignal(int n, const flagcxWaitSignalDesc_t *descs, flagcxStream_t stream);

  // Regions (asynchronous; counted by readCounter).
  int regions() const;
  uint64_t regionSize(int idx, int rank) const;
  bool stagingReady() const { return staging_ != nullptr; }
  flagcxResult_t batchPut(int peer, const size_t *srcOff, const size_t *dstOff,
                          const size_t *sizes, const int *srcIdx, const int *dstIdx,
                          size_t count);
  flagcxResult_t get(int peer, size_t srcOff, size_t dstOff, size_t size, int srcIdx,
                     int dstIdx);
  flagcxResult_t putValue(int peer, uint64_t value, size_t dstOff, int dstIdx);
  flagcxResult_t readCounter(uint64_t *count);
  flagcxResult_t waitCounter(uint64_t target);

  // Stream tasks (public for the task trampolines).
  struct PutSignalTask;
  struct WaitTask;
  flagcxResult_t runPutSignal(const PutSignalTask &t);
  flagcxResult_t runWait(const WaitTask &t);

 private:
  flagcxResult_t setup();
  flagcxResult_t exchange(void *buf, size_t size, uint32_t key, RegInfo *out);
  void release(RegInfo *reg);
  flagcxResult_t waitDone(RmaDone &d, int peer, const char *what);
  flagcxResult_t peerProblem(int peer);
  flagcxResult_t checkMappedPeer(int peer, const char *fn);
  // A copy into or out of mapped memory: memcpy, or through the device
  // adapter (its private stream, then waited for) when device memory is in it.
  flagcxResult_t copyMapped(void *dst, const void *src, size_t bytes, bool device);
  RmaDone *countedOp();

  flagcxComm *comm_;
  int rank_, nranks_;
  std::unique_ptr<RmaEngine> eng_;
  void *sigBlock_ = nullptr;                 // this rank's signal block (memfd)
  std::atomic<uint64_t> *sig_ = nullptr;     // sig_[r * kStride]: signals from rank r
  std::vector<std::atomic<uint64_t> *> peerSig_;  // my slot in each peer's mapped block
  std::vector<void *> peerSigMap_;
  std::vector<RmaRemote> peerSigRemote_;     // my slot in each peer's block (native peers)
  std::vector<uint64_t> consumed_;           // signals from each rank consumed by waits
  // [rank]: its process as the kernel named it (a shm Conn's peerPid), or 0:
  // the only pid its memory is mapped under, and what liveness checks use.
  std::vector<pid_t> provenPid_;
  std::vector<pid_t> pid_;                   // = provenPid_ once set up
  std::vector<bool> local_;                  // same host, reached over shm
  // Same-host liveness, looked at no more than every 20 ms per peer.
  struct Liveness {
    std::atomic<int64_t> nextNs{0};
    std::atomic<bool> dead{false};
  };
  std::unique_ptr<Liveness[]> live_;
  bool signalsReady_ = false;
  void *sigUser_ = nullptr;
  void *staging_ = nullptr;
  size_t stagingSize_ = 0;

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<flagcxWindow>> windows_;
  uint32_t nextWindow_ = 0;
  std::vector<RegInfo> regions_;

  std::atomic<uint64_t> completed_{0};
  std::atomic<int> error_{flagcxSuccess};
  std::atomic<int> tasks_{0};  // stream tasks enqueued, not finished
  std::atomic<bool> closing_{false};  // the communicator goes: waits give up

 public:
  static constexpr size_t kStride = 8;  // 64 bytes between signal slots
};

}  // namespace flagcx
