// A staged rank (device memory copied through host memory) on the one-host
// direct path, pipelined with the meeting (shm_stage.cc): its input goes
// down into shareable host memory slice by slice, each slice published to
// the peers in line B (`inReady`) as its copy completes, so that the peers
// read slice 0 while later slices are still being copied; its output goes
// back to the device piece by piece as each piece becomes final.  Host
// ranks of a call without a staged rank never build one of these.
#pragma once
#include <cstddef>
#include <cstdint>

#include "exec/small_internal.h"

namespace flagcx {

// One direct call's pipeline, as every rank of a call with a staged rank
// sees it: whose inputs arrive behind marks, and (on a staged rank) where
// its output goes back and when.
struct DirectStage {
  ExecState *s = nullptr;
  SmallShm *sm = nullptr;
  const char *what = nullptr;
  uint64_t word = 0;
  int n = 0, me = 0;
  size_t slice[kMaxRanks] = {};  // [q]: q's input arrives in slices of this; 0: all there
  size_t seen[kMaxRanks] = {};   // [q]: slices of q's input known published
  size_t chunk = 0;              // copies from a gated input split at this (the largest slice)
  // How this rank's own output goes back to its device (staged rank only):
  //   Own      every byte the call writes there, this rank writes (copies
  //            and reduce-scatter): each piece goes back once written;
  //   Writers  its pieces are written by their owners (allreduce), who
  //            publish how far they are (line B's `wrote`);
  //   End      the whole output once every rank is done (reduce, gather).
  enum class Sink { None, Own, Writers, End } sink = Sink::None;
  char *outHost = nullptr, *outDev = nullptr;
  size_t outBytes = 0;
  size_t regionLo[kMaxRanks] = {}, regionHi[kMaxRanks] = {};  // Writers: bytes each rank writes
  size_t sent[kMaxRanks] = {};                                // Writers: bytes of it sent back
  size_t pendFrom = 0, pendTo = 0;  // Own: written, not yet sent (sent a chunk at a time)
  size_t ts = 1;
};

// A staged rank's shareable copies for the direct calls of job j, grown on
// the caller's thread when it is enqueued (GrowBuf::Mem::Shared); a call
// they do not fit takes the rings.
void reserveShmStage(Job *j);
// A staged rank's buffers for a direct call: `h` is `ci` on shareable host
// copies laid out as the caller's; the input's copy issued (stageFeed).
// *ok false without memory.
flagcxResult_t stageDirect(ExecState *s, const CollItem &ci, CollItem *h, bool *ok);
// A staged rank's input for a direct call: `bytes` from the device at src
// into dst (shareable host memory), issued in slices behind marks; nothing
// waits.  Resets what this rank publishes of its progress (line B).
flagcxResult_t stageFeed(ExecState *s, char *dst, const char *src, size_t bytes);
// This rank's input slice size for its descriptor (0: no input behind marks).
uint32_t stageFeedSlice(const ExecState *s);
// Before a direct call's meeting: line B's progress fields of this call
// start at zero (every rank; a staged one's feed does it too).
void stageResetProgress(ExecState *s);
// After the call: no input behind marks any more.
void stageFeedEnd(ExecState *s);
// Waits until bytes [off, off+len) of rank q's input are on the host
// (this rank's own, or a peer's as published), publishing this rank's own
// slices meanwhile.
flagcxResult_t stageNeed(DirectStage &st, int q, size_t off, size_t len);
// The staged rank wrote [p, p+len) of its own host output (Sink::Own):
// send it back now.
flagcxResult_t stageWrote(DirectStage &st, const char *p, size_t len);
// Allreduce: this rank's piece of the output is final up to `bytes` from
// its start (line B's `wrote`), and a staged rank sends back what is final.
flagcxResult_t stageProgress(DirectStage &st, size_t bytes);
// The staged rank's end of a direct call: `done`, then the wait for every
// peer's, sending back output pieces as they become final and publishing
// its input slices meanwhile; then the rest of the output; returns once
// every copy is complete.
flagcxResult_t stageFinish(DirectStage &st);
// Times a staged rank saw a peer's output progress while its own input was
// still being copied (tests: the peers started before the copy ended).
uint64_t stageOverlaps(const ExecState *s);

}  // namespace flagcx
