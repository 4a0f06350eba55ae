// Inside the executor (not for other layers): the state one communicator's
// executor owns, split by who uses it -- ExecState (what every path shares)
// and one object per path (CollPath below), each owning its own state --
// and the entry points of its parts, one file each:
//   executor.cc  the issue order (tickets), the job pool, groups, runJob,
//                and which path takes a call (runCollIn)
//   small.cc     path: small collectives of one host through one shared block
//   shm_direct.cc  path: large ones of one host straight between the ranks' buffers
//   coll_run.cc  the schedule path: a collective's chunks bound to bytes,
//                then stage by stage (plan the stage, run it)
//   xfer.cc      ... posting and progressing the messages of a stage
//   staging.cc   ... its buffers for device memory through host memory
//   direct.cc    ... its buffers for device memory read in place (CUDA IPC)
//   p2p_run.cc   a group of sends and receives, on the schedule path's machinery
//
// How bytes move is the executor's mode, fixed at init and the same on
// every rank:
//   Host    user buffers are host memory; working buffers are on the heap.
//   Staged  user buffers are device memory copied through host memory, and
//           the Host machinery runs on the copies.
//   Direct  user buffers are device memory; working buffers are device
//           memory too; a receiver copies or reduces straight from the
//           sender's memory and only small control messages cross the
//           transports.
#pragma once
#include <unistd.h>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "adapters/adapters.h"
#include "base/base.h"
#include "exec/async_small.h"
#include "exec/executor.h"
#include "exec/flight.h"
#include "net/net.h"

namespace flagcx {

struct P2PItem {
  bool isSend;
  void *buf;
  size_t bytes;
  int peer;
};

struct CollItem {
  CollArgs a;
  uint64_t seq;
  std::vector<size_t> v;  // alltoallv counts/displacements, copied at call time
  bool ordered = false;   // folds in rank order (deterministic mode, foldsInOrder)
  bool hostBufs = false;  // a staged rank's call on host slots (async_small.cc): run as a host call
  FlightEntry *flight = nullptr;
};

struct ExecState;

// One unit of stream work: the collectives and point-to-point operations of
// one call, or of one group on one communicator.
struct Job {
  ExecState *ex = nullptr;
  uint64_t ticket = 0;
  flagcxStream_t stream = nullptr;
  std::vector<CollItem> colls;  // the first ncolls are this job's; the rest keep capacity
  size_t ncolls = 0;
  std::vector<P2PItem> p2p;
};

// One message of a stage or group.
struct Xfer {
  Conn *conn;
  bool isSend;
  char *buf;
  size_t bytes;
  uint64_t tag;
  int req = -1;
  bool posted = false, done = false;
  char *reduceDst = nullptr;  // recv_reduce: reduce the landed bytes into it when complete
  bool folded = false;        // ... which the Conn does itself (Conn::irecvFold)
  const char *reduceBase = nullptr;  // when set: reduceDst = reduceBase op received
  int peer;
  int ch = 0;
};

// A working buffer in device or page-locked host memory, or in host memory
// a sibling process can map (host::memAlloc's memfd kind), page-locked by
// the adapter (hostRegister; unlocked, copies still work, at the pageable
// rate).  It grows on the
// callers' threads when work is enqueued, never on the thread that runs the
// work: allocating device memory or locking host memory may wait for every
// stream, including a user's stream that the engine holds.  An outgrown
// buffer may still be in use by running work, so it is kept until the
// executor goes.
class GrowBuf {
 public:
  enum class Mem { Device, Pinned, Shared };
  GrowBuf(DeviceAdapter *dev, Mem mem) : dev_(dev), mem_(mem) {}
  ~GrowBuf();
  GrowBuf(const GrowBuf &) = delete;
  GrowBuf &operator=(const GrowBuf &) = delete;
  // At least `bytes` (2 MiB at least, a whole CUDA IPC granule); nullptr
  // when the allocation fails.
  char *grow(size_t bytes);
  // The buffer when it already holds `bytes`, else nullptr (never allocates).
  char *ifFits(size_t bytes) const {
    return cap_.load(std::memory_order_acquire) >= bytes ? p_.load(std::memory_order_acquire)
                                                         : nullptr;
  }

 private:
  DeviceAdapter *dev_;
  Mem mem_;
  std::mutex mu_;  // serializes growth
  std::atomic<char *> p_{nullptr};
  std::atomic<size_t> cap_{0};
  std::vector<void *> retired_;
};

// A heap buffer that only grows (the Host mode's working buffers).
inline char *growHeap(std::vector<char> &buf, size_t bytes) {
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

inline bool overlaps(const void *a, size_t an, const void *b, size_t bn) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return an && bn && pa < pb + bn && pb < pa + an;
}

// Pipelined staging: the host copy of the input arrives slice by slice;
// slice k may be read once marks[k] is reached.  Sends from it wait for
// their slices, not for the whole copy.
struct StageGate {
  const char *base = nullptr;
  size_t bytes = 0, slice = 1, ready = 0;  // slices [0, ready) are known copied
  std::vector<uint64_t> marks;
};

// ... and the output goes back to the device chunk by chunk, as each chunk's
// last write completes.
struct StageSink {
  char *host = nullptr, *dev = nullptr;
  size_t bytes = 0;
  bool used = false;  // runColl copied the whole output back
};

// Direct mode's state: every rank's outbox (one device buffer per rank,
// mapped by every peer at init) carries small messages; large ones are read
// from the sender's own buffer, mapped on first use.
struct DirectState {
  char *outbox = nullptr;
  size_t outboxBytes = 0;
  std::vector<char *> peerOutbox;                      // [peer], mapped at init
  std::vector<char> sameProcess;                       // [peer]: a rank of this process (proven)
  std::unordered_map<std::string, void *> imports;     // peer allocation id -> mapped base
  std::vector<char> ctrl;                              // control messages of a stage
  std::vector<Xfer> xfers;
};

// small.cc's shared block (defined there).
class CopyWorker;  // copy_worker.h

struct SmallShm;
struct SmallShmDeleter {
  void operator()(SmallShm *p) const;
};

// Host copies and reductions of one stage that no message of the stage
// needs (coll_run.cc decides which): runXfers does them a piece at a time
// while the messages move.  Where the peer moves the bytes itself (the shm
// single-copy pull: the receiver reads the sender's memory), this is what
// lets an out-of-place broadcast or scatter root copy its own block while
// the peers read theirs, instead of before announcing them.
struct LocalWork {
  struct Item {
    bool reduce;
    char *dst;
    const char *src;
    size_t bytes;
  };
  std::vector<Item> items;
  size_t next = 0, done = 0;  // the item under way, bytes of it done
  flagcxDataType_t dt = flagcxUint8;
  flagcxRedOp_t op = flagcxSum;
  bool pending() const { return next < items.size(); }
  void start(flagcxDataType_t t, flagcxRedOp_t o) {
    items.clear();
    next = done = 0;
    dt = t;
    op = o;
  }
};

// The schedule path's buffer providers.  Host: working buffers on the
// heap (host mode, and staged mode's host side).
struct HostBuffers {
  std::vector<char> scratch, landing, inPlace, inAlt, outAlt;
};

// Staged: device buffers copied through page-locked host memory (the heap
// without it), the input pipelined slice by slice (gate), the output sent
// back chunk by chunk (sink).
struct StagedBuffers {
  explicit StagedBuffers(DeviceAdapter *dev)
      : pinnedIn(dev, GrowBuf::Mem::Pinned), pinnedOut(dev, GrowBuf::Mem::Pinned) {}
  std::vector<char> heapIn, heapOut;
  GrowBuf pinnedIn, pinnedOut;
  StageGate gate;
  StageSink sink;
  // Measured at setup (probeStaging) for automatic slices; 0: not measured.
  double stepCostS = 0, copyBytesPerS = 0;
};

// Direct: working buffers in device memory, and the peers' device memory
// mapped by CUDA IPC (dx).
struct DirectBuffers {
  explicit DirectBuffers(DeviceAdapter *dev)
      : scratch(dev, GrowBuf::Mem::Device), inPlace(dev, GrowBuf::Mem::Device),
        inAlt(dev, GrowBuf::Mem::Device), outAlt(dev, GrowBuf::Mem::Device),
        stageIn(dev, GrowBuf::Mem::Device), stageOut(dev, GrowBuf::Mem::Device) {}
  GrowBuf scratch, inPlace, inAlt, outAlt, stageIn, stageOut;
  DirectState dx;
};

// A way to run one collective.  The executor offers each call to its paths
// in a fixed order (executor.cc: runCollIn); every rank decides the same
// from the call's arguments, so every rank takes the same path.  Each path
// owns the state only it uses.
class CollPath {
 public:
  virtual ~CollPath() = default;
  virtual bool fits(const CollItem &ci) const = 0;
  virtual flagcxResult_t run(CollItem &ci) = 0;
};

// The schedule path: the compiled schedule's steps over the transports
// (coll_run.cc, xfer.cc), its buffers provided by the mode -- the heap
// (host), host copies of device buffers (staging.cc), or device memory read
// in place by the peers (direct.cc).  It takes every call the one-host
// paths leave, and runs the point-to-point groups (p2p_run.cc) on the same
// machinery.  Its state: working buffers, the staging gate and sink,
// direct mode's mappings (the providers below), the stage loop's scratch,
// the copy thread.
class SchedulePath final : public CollPath {
 public:
  explicit SchedulePath(ExecState *s);
  ~SchedulePath() override;
  bool fits(const CollItem &) const override { return true; }
  flagcxResult_t run(CollItem &ci) override;

  // Its buffer providers, one per way user buffers are reached (the mode);
  // only one job runs at a time, so one set each.
  HostBuffers host;
  StagedBuffers staged;
  DirectBuffers direct;
  // Scratch of the stage loop, kept for their capacity.
  std::vector<int> scratchCounts;
  std::vector<char> scratchFlags;
  std::vector<size_t> scratchDispls;
  std::vector<int> scratchLastWrite;
  std::vector<char> scratchFuseSkip;          // runColl's fuseCopies
  std::vector<const char *> scratchFuseBase;
  std::vector<const void *> scratchFoldSrcs;  // runFold's sources
  std::vector<Xfer> scratchXfers;
  LocalWork scratchLocal;
  std::vector<int> scratchPeers, stepPeers;
  // The copy thread (FLAGCX_COPY_THREAD), null when off; its thread starts
  // on first use.
  std::unique_ptr<CopyWorker> copyThread;

 private:
  ExecState *const s_;
};

// The one-host block (small.cc): small collectives and barriers of a
// one-host communicator in host mode, through one shared block.  Its
// state: the block.  Made at setup only where the block is used.
class BlockPath final : public CollPath {
 public:
  BlockPath(ExecState *s, std::unique_ptr<SmallShm, SmallShmDeleter> shm)
      : shm(std::move(shm)), s_(s) {}
  bool fits(const CollItem &ci) const override;
  flagcxResult_t run(CollItem &ci) override;
  // A call that goes over the rings: its tag is published in the block
  // (a later small call checks the peers against it) and ringsUsed set.
  void passOver(const CollItem &ci);

  std::unique_ptr<SmallShm, SmallShmDeleter> shm;
  Conn::Mismatch note;    // the calls named when a mismatch was found here
  bool ringsUsed = true;  // a call went over the rings since the block last looked at them

 private:
  ExecState *const s_;
};

// One-host direct (shm_direct.cc): large collectives of a one-host
// communicator straight between the ranks' buffers; the ranks meet in the
// block's shared memory.  Made at setup only where it may take calls.
class ShmDirectPath final : public CollPath {
 public:
  explicit ShmDirectPath(ExecState *s) : s_(s) {}
  bool fits(const CollItem &ci) const override;
  flagcxResult_t run(CollItem &ci) override;

 private:
  ExecState *const s_;
};

// What every path shares: the communicator's loan (env), the mode, the
// issue order and job pool, errors and abort, the flight recorder, the
// proven pids of same-host ranks, and the paths themselves.
struct ExecState {
  explicit ExecState(const ExecEnv &e);
  ~ExecState();

  const int rank, nranks, nchannels;
  DeviceAdapter *const dev;
  const ExecEnv env;
  ExecMode mode = ExecMode::Host;
  bool direct() const { return mode == ExecMode::Direct; }
  Conn *conn(int peer, int ch = 0) const {
    return (*env.conns)[static_cast<size_t>(peer * nchannels + ch)].get();
  }

  FlightRecorder flight;
  // [rank]: its process as the kernel named it (provePeers, at setup), 0
  // for ranks of other hosts or unproven ones.  A rank whose pid is ours is
  // a thread of this process; a peer's memory is only reached under these.
  std::vector<pid_t> provenPid;
  bool sameProcess(int q) const {
    return q == rank || provenPid[static_cast<size_t>(q)] == getpid();
  }
  // Every peer has its Conns (else some connect on first use: connectFor).
  bool allConnected = false;

  // Stream-enqueued work runs in issue order across all streams: a job
  // takes a ticket when enqueued and runs when its turn comes.
  std::atomic<uint64_t> nextTicket{0}, doneTicket{0};
  std::atomic<int> asyncError{flagcxSuccess};
  std::atomic<bool> aborting{false};
  std::atomic<int> inFlight{0};  // enqueued jobs not yet finished
  std::mutex mu;                 // guards lastError and the job pool
  std::string lastError;
  std::vector<std::unique_ptr<Job>> jobs;  // every job ever made
  std::vector<Job *> freeJobs;             // the idle ones
  uint64_t collSeq = 0;  // collectives issued (the same sequence on every rank)
  uint64_t curTag = 0;   // tag of the operation running (for error frames)
  std::atomic<bool> deterministic{false};  // reductions on floating types fold in rank order

  // The paths.  A call is offered to the one-host paths that may take
  // calls on this communicator (set at setup: the block in host and staged mode,
  // direct where FLAGCX_SHM_DIRECT_BYTES allows), in order, then to the
  // schedule path, which takes all.  block is null without a shared block.
  std::unique_ptr<BlockPath> block;
  std::unique_ptr<ShmDirectPath> shmDirect;
  std::unique_ptr<SchedulePath> sched;
  std::vector<CollPath *> oneHost;
  bool blockTakesCalls = false;  // block is in oneHost and its calls are quick (host mode)
  // Stream-ordered small calls of a staged rank (async_small.cc); made on first use.
  std::unique_ptr<AsyncPath, AsyncPathFree> async;
};

// coll_run.cc: the next piece of `w`.  With wait false, a piece whose
// input is still on its way from the device (staging) is left for later and
// *did says whether anything ran; with wait true it is waited for.
flagcxResult_t localWorkPiece(ExecState *s, LocalWork &w, bool wait, bool *did);

// xfer.cc: connect to the peers among `peers` that have no Conn yet (a
// no-op once every peer has one); then post and progress every message of `xs` until all complete.
flagcxResult_t connectFor(ExecState *s, const std::vector<int> &peers);
bool everyPeerConnected(const ExecState *s);
// Progress every Conn; a peer that gave up (its error frame) fails the
// caller's operation `what` with one log line.
flagcxResult_t sweepPeers(ExecState *s, const char *what);
// `work` (may be null): local steps that no message of the stage needs,
// done piece by piece between the rounds (and finished before returning).
flagcxResult_t runXfers(ExecState *s, std::vector<Xfer> &xs, flagcxDataType_t dt,
                        flagcxRedOp_t op, const char *what, LocalWork *work = nullptr);
// coll_run.cc: one collective, its buffers as given (host or, in direct
// mode, device memory).
flagcxResult_t runColl(ExecState *s, CollItem &ci);
// Copies runColl left out, their bytes reduced in with a receive (fuseCopies;
// this process, tests).
uint64_t fusedCopies();
// p2p_run.cc
flagcxResult_t runP2P(ExecState *s, std::vector<P2PItem> &items);
// staging.cc: device buffers through host copies (staged mode) or device
// working buffers (direct mode with host buffers).
size_t elemsIn(const CollItem &ci, int nranks);
size_t elemsOut(const CollItem &ci, int nranks);
flagcxResult_t runCollStaged(ExecState *s, CollItem &ci);
flagcxResult_t runP2PStaged(ExecState *s, std::vector<P2PItem> &items);
void reserveStaged(Job *j);
flagcxResult_t gateReady(ExecState *s, const char *p, size_t len, bool *ok);
flagcxResult_t gateWait(ExecState *s, const char *p, size_t len);
// The slice of a staged input of `bytes`: FLAGCX_STAGE_SLICE_SIZE, or the
// pipeline's best for the rates probeStaging measured (chooseStageSlice).
size_t chooseStageSlice(size_t bytes, double stepCostS, double bytesPerS);
size_t stageSlice(const ExecState *s, size_t bytes);
void probeStaging(ExecState *s);
// small.cc: collective at init; makes s->block (and s->shmDirect) where
// the ranks use the block.
flagcxResult_t setupSmall(ExecState *s, bool sameHostShm);
size_t smallMaxBytes(const ExecState *s);  // 0 without a block
uint64_t smallCalls(const ExecState *s);   // calls run through the block so far
// After this rank's error frames went out: its peers' next small call fails.
void smallPoison(ExecState *s);
// shm_direct.cc: large collectives of a one-host communicator straight
// between the ranks' buffers (falls back to runColl where they are not
// shareable).
uint64_t shmDirectCalls(const ExecState *s);  // calls done that way so far
// direct.cc
flagcxResult_t setupDirect(ExecState *s, bool canDirect);
void releaseDirect(ExecState *s);
flagcxResult_t runDirectXfers(ExecState *s, std::vector<Xfer> &xs, flagcxDataType_t dt,
                              flagcxRedOp_t op, const char *what);
flagcxResult_t runP2PDirect(ExecState *s, std::vector<P2PItem> &items);
// Peer `peer`'s device memory named by an IPC reference, mapped once per
// allocation (cached in s->dx.imports).
// The peer's `need` bytes that `ref` names, mapped (cached); refused when
// they do not lie inside the allocation it shared.
flagcxResult_t directImport(ExecState *s, const char *ref, int peer, uint64_t need, char **out);
// Makes room for k more imports now (all are dropped when the cache would
// overflow), so that none taken after it is released before it is used.
void directImportReserve(ExecState *s, size_t k);
flagcxResult_t reserveDirect(Job *j);

}  // namespace flagcx
