// The shared block of a one-host communicator, as small.cc (small
// collectives through the block) and shm_direct.cc (large ones read straight
// out of the peers' memory) both use it.  The protocol is described at the
// top of small.cc.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adapters/adapters.h"
#include "base/base.h"
#include "exec/state.h"

namespace flagcx {

constexpr size_t kLine = 64;
constexpr size_t kHeader = 32;  // word, tag and shape before a slot's data
constexpr int kMaxRanks = 16;   // one-shot: every rank reads every slot

struct Pub {
  std::atomic<uint64_t> word;
  std::atomic<uint64_t> tag;
  // What the tag leaves out: the whole count, the reduction, the path
  // (blockShape); slots only.
  std::atomic<uint64_t> shape;
  uint64_t pad;
};
static_assert(sizeof(Pub) == kHeader);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// Line B of a rank: how far it is inside a direct call (shm_direct.cc).
struct Phase {
  std::atomic<uint64_t> mapped;   // word * 2 + 1: mapped every peer buffer it needs; word * 2: could not
  std::atomic<uint64_t> done;     // word: it no longer touches any peer's buffers
  std::atomic<uint64_t> read;     // word: it read what it needs of its peers (in-place alltoall)
  // With a staged rank in the call (shm_stage.h), zeroed before the meeting:
  std::atomic<uint64_t> inReady;  // slices of its input on the host (a staged rank)
  std::atomic<uint64_t> wrote;    // allreduce: bytes of its piece of the output final
};

// What a rank publishes in its slot for a direct call: its buffers, as
// this process sees them and as a sibling process maps them (host memory:
// a memfd; device memory in direct mode: a CUDA IPC reference).
struct DirectDesc {
  uint64_t frees;               // host::memFreeCount() now
  uint64_t sendAddr, recvAddr;  // for ranks of this process
  uint32_t sendOk, recvOk;      // whether send / recv below name the buffer
  uint32_t usable;              // 0: this rank's buffers rule the call out
  uint32_t inSlice;             // its input arrives in slices of this (inReady); 0: all there
  host::ShareRef send, recv;
  char sendIpc[DeviceAdapter::kIpcRefBytes], recvIpc[DeviceAdapter::kIpcRefBytes];
};

static_assert(sizeof(DirectDesc) == 328, "FLAGCX_SHM_DIRECT_BYTES's documentation names this size");

struct SmallShm {
  explicit SmallShm(DeviceAdapter *dev)
      : stageIn(dev, GrowBuf::Mem::Shared), stageOut(dev, GrowBuf::Mem::Shared) {}
  std::shared_ptr<Segment> seg;
  char *base = nullptr;   // seg's mapping
  size_t maxBytes = 0;    // payload of a slot
  size_t slotStride = 0;  // kHeader + maxBytes, in whole lines
  size_t rankStride = 0;  // lines A and B + 2 slots
  size_t bytes = 0;       // the whole block
  uint32_t ops = 0;       // bit per OpKind that takes the block (not where FLAGCX_ALGO forces one)
  uint64_t lastUse[2] = {0, 0};  // word of this rank's last call on each slot
  uint64_t calls = 0;            // calls this rank ran here (tests)
  std::vector<uint64_t> seen;    // [peer]: newest word seen from it
  bool oneProcess = true;  // every rank in this process (buffers reached by address)
  // Direct calls (shm_direct.cc): the smallest contribution that takes them
  // (0: never), and what they keep.
  size_t directMin = 0;
  // After a call fell back because some buffer was not shareable, calls
  // before this sequence number go straight to the rings, without meeting
  // (every rank decides the same fallback, so every rank skips the same
  // calls; shm_direct.cc).
  uint64_t directQuietUntil = 0;
  uint64_t directCalls = 0;                    // calls done that way (tests)
  std::vector<PeerMaps> maps;  // [peer]; uses stamped with the call's word
  // A staged rank's shareable copies for direct calls, which its peers map
  // once (grown at enqueue: reserveShmStage, shm_stage.cc).
  GrowBuf stageIn, stageOut;
  // A staged rank's input of the direct call under way, arriving behind
  // marks (shm_stage.cc): slices of `slice` bytes, the first `ready`
  // published.  slice 0: none.
  struct Feed {
    size_t slice = 0, bytes = 0, ready = 0;
    std::vector<uint64_t> marks;
  } feed;
  std::atomic<uint64_t> overlaps{0};  // stageOverlaps (tests read it from another thread)
  DeviceAdapter *pinnedBy = nullptr;  // a staged rank's adapter locked the block (setupSmall)
  void layout(size_t payload, int nranks) {
    maxBytes = payload;
    slotStride = (kHeader + maxBytes + kLine - 1) / kLine * kLine;
    rankStride = 2 * kLine + 2 * slotStride;
    bytes = kLine + rankStride * static_cast<size_t>(nranks);
    seen.assign(static_cast<size_t>(nranks), 0);
    maps.clear();
    maps.resize(static_cast<size_t>(nranks));
  }
  // Set by a rank that gave up on an operation, after its error frames went
  // out on the Conns: the others then fail their next call here too.
  std::atomic<uint32_t> *poisoned() const { return reinterpret_cast<std::atomic<uint32_t> *>(base); }
  char *rankBase(int r) const { return base + kLine + static_cast<size_t>(r) * rankStride; }
  Pub *lineA(int r) const { return reinterpret_cast<Pub *>(rankBase(r)); }
  Phase *lineB(int r) const { return reinterpret_cast<Phase *>(rankBase(r) + kLine); }
  Pub *slot(int r, int p) const {
    return reinterpret_cast<Pub *>(rankBase(r) + 2 * kLine + static_cast<size_t>(p) * slotStride);
  }
  char *data(int r, int p) const { return reinterpret_cast<char *>(slot(r, p)) + kHeader; }
  // ThreadSanitizer's view of the handshakes (Segment::released/acquired;
  // nothing in other builds).
  void released(const void *p) const { seg->released(p); }
  void acquired(const void *p) const { seg->acquired(p); }
  // Newest word peer q has published anywhere.
  uint64_t newest(int q) const {
    uint64_t w = lineA(q)->word.load(std::memory_order_acquire);
    w = std::max(w, slot(q, 0)->word.load(std::memory_order_acquire));
    w = std::max(w, slot(q, 1)->word.load(std::memory_order_acquire));
    acquired(&lineA(q)->word);
    acquired(&slot(q, 0)->word);
    acquired(&slot(q, 1)->word);
    return w;
  }
};
static_assert(sizeof(Phase) <= kLine);

// Whether a collective of this shape may go through the block at all (an
// op it carries, not a barrier, a count, a known reduction, a valid root);
// BlockPath::fits and ShmDirectPath::fits add their sizes.
bool blockCarries(const ExecState *s, const CollArgs &a);
// Logs a mismatch with `peer` (theirs 0: it has gone past this call) and
// returns flagcxInvalidUsage.
flagcxResult_t blockMismatch(ExecState *s, int peer, uint64_t mine, uint64_t theirs);
// Everything that ends a call through the block early (small.cc).
flagcxResult_t blockCheckPeers(ExecState *s, const char *what);
// What a slot's tag leaves out: the tag keeps 20 bits of the count, so
// calls that differ by a multiple of 2^20 elements, or in their reduction,
// or that take the other path (small or direct) for the same tag, would
// meet as equals.
uint64_t blockShape(const CollArgs &a, bool direct);
// Steps 1-3 of a call through the block: wait until slot (seq & 1) may be
// reused, publish `give` bytes of `src` in it with the call's word, tag
// (s->curTag: op, dtype, root and count, as the transports' frames carry it)
// and `shape` (blockShape),
// and wait until every peer has published the same call there.  Then every
// peer's slot holds its contribution (sm->data(q, seq & 1)).  With
// `waitForPeers` false the last wait is skipped: for a rank that needs
// nothing of its peers' slots (its own tells them this call takes the
// rings).  Slot reuse stays safe: step 1 of the next call on the same slot
// waits until every peer has published a later call, i.e. is past this one.
// `fromDevice`: src is a staged rank's device buffer, copied by its adapter.
flagcxResult_t blockMeet(ExecState *s, const CollItem &ci, uint64_t shape, const void *src,
                         size_t give, const char *what, bool waitForPeers = true,
                         bool fromDevice = false);

// A staged rank's copy between its device and host memory on the one-host
// paths: through the adapter's private stream, finished before it returns.
inline flagcxResult_t stagedCopy(ExecState *s, void *dst, const void *src, size_t bytes) {
  FLAGCX_CHECK(s->dev->copyAsync(dst, src, bytes));
  return s->dev->flush();
}
// Host memory for a staged rank's output of `bytes` (not shared): the
// page-locked buffer reserveStaged grew, else the heap; null without memory.
inline char *stagedHostOut(ExecState *s, size_t bytes) {
  char *p = s->sched->staged.pinnedOut.ifFits(bytes);
  return p ? p : growHeap(s->sched->staged.heapOut, bytes);
}

// Waits, with the engine's usual checks, until `ready()` holds: abort, a
// peer that gave up (its error frame, seen through the Conns), a peer that
// died, FLAGCX_TIMEOUT.  `ready` returns flagcxInProgress while it does not
// hold.  `missing`, when given, is the set of ranks `ready` still waits for
// (bit q: rank q), which the timeout's warning names.
std::string rankSetText(uint32_t ranks);  // "rank 1", "ranks 1, 3"
template <class Ready>
flagcxResult_t waitUntil(ExecState *s, const char *what, Ready ready,
                         const uint32_t *missing = nullptr) {
  for (int i = 0; i < 256; i++) {  // the common case: a few hundred nanoseconds
    flagcxResult_t r = ready();
    if (r != flagcxInProgress) return r;
    __builtin_ia32_pause();
  }
  Backoff wait;
  for (unsigned round = 1;; round++) {
    flagcxResult_t r = ready();
    if (r != flagcxInProgress) return r;
    if (s->aborting) return flagcxRemoteError;
    if (round % 256 == 0) {
      FLAGCX_CHECK(blockCheckPeers(s, what));
      // A peer that died without a word (killed): the Conns look only while
      // they have requests pending, and here they have none.
      for (auto &c : *s->env.conns)
        if (c && (r = c->checkAlive()) != flagcxSuccess) {
          std::string cause = lastErrorText();
          if (cause.empty()) cause = "its process exited";
          WARN(kColl, "rank %d: %s: rank %d is gone: %s", s->rank, what, c->peer(), cause.c_str());
          return r;
        }
      if (wait.expired()) {
        std::string who = missing && *missing ? rankSetText(*missing) : "a peer";
        WARN(kColl, "rank %d: %s: %s did not reach this call within FLAGCX_TIMEOUT=%llds "
             "(alive, but in another call or none)", s->rank, what, who.c_str(),
             static_cast<long long>(paramInt(Param::TIMEOUT)));
        return flagcxRemoteError;
      }
    }
    wait.idle();
  }
}

}  // namespace flagcx
