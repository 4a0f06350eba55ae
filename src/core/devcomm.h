// Device communicators and device memory handles of flagcx_kernel.h, host
// side: what a flagcxDevComm_t and a flagcxDevMem_t are, how they are made
// from the communicator's one-sided state (a window holds each rank's
// signal/barrier block; DevMem names a window or region registered before),
// and the proxy thread that carries out the descriptors of peers whose memory
// is not mapped, through the one-sided engine (devcomm_proxy.cc).  The
// unified calls that read them are devcomm_calls.cc (host ranks).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "core/onesided.h"
#include "flagcx.h"
#include "flagcx_device_unified.h"
#include "flagcx_kernel.h"

struct flagcxComm;

// Device memory that a CUDA rank's handle owns: the view kernels read
// (flagcxDevCommGetDevicePtr / flagcxDevMemGetDevicePtr) and the arrays it
// points to (devcomm_cuda.cc).
struct flagcxDevCopies {
  std::vector<void *> allocs;
  std::vector<void *> hostAllocs;  // host memory the GPU maps (the proxy's side)
  void *view = nullptr;  // the device copy of the view (one of allocs)
};

struct flagcxDevMemInternal {
  flagcxDevMemView view{};  // first: the handle is also what the calls read
  flagcxComm *comm = nullptr;
  flagcxDevCopies dev;      // CUDA ranks
  flagcx::RegInfo reg;  // the registration holding it (a copy: its mappings stay the owner's)
  std::vector<char *> peerBase;
  std::vector<uint64_t> peerSize;
  std::vector<uint64_t> peerRegOff;  // [rank]: where its part starts in its registration
};

struct flagcxDevCommInternal {
  flagcxDevCommView view{};  // first: the handle is also what host ranks' calls read
  flagcxComm *comm = nullptr;
  bool cuda = false;         // kernels read dev.view
  // A CUDA rank whose kernels queue every call for the proxy (some pair of
  // ranks is not mapped by CUDA IPC): the block, counters and queue are host
  // memory the GPU maps (devcomm_cuda.cc).
  bool viaProxy = false;
  flagcxDevCopies dev;
  flagcxDevCommRequirements reqs{};
  std::vector<int32_t> team[3];
  std::vector<uint64_t *> peerWords;
  std::vector<uint8_t> sameGpu;  // [rank]: its GPU is this rank's (CUDA ranks)
  std::vector<uint64_t> local;  // signal bases, shadows, counters, barrier epochs
  void *block = nullptr;        // this rank's signal/barrier words (shareable)
  size_t blockBytes = 0;
  flagcxWindow *blockWin = nullptr;
  void *queueMem = nullptr;
  int32_t errorWord = flagcxSuccess;  // view.error points here (atomic builtins)
  // The proxy thread and what it keeps: the running totals it stored at
  // each peer that is not mapped ([row * nRanks + peer]).
  std::thread proxy;
  std::atomic<bool> stop{false};     // once the queue is empty
  std::atomic<bool> abandon{false};  // at once (the communicator goes)
  std::vector<uint64_t> sent;
};

namespace flagcx {

// Collective on comm (same requirements on every rank).
flagcxResult_t devCommCreate(flagcxComm *comm, const flagcxDevCommRequirements &reqs,
                             flagcxDevCommInternal **out);
// Collective: the proxy finishes what was queued, the block is deregistered.
flagcxResult_t devCommDestroy(flagcxDevCommInternal *dc);
// Collective on comm: a DevMem for [buf, buf+size) of a registration.
flagcxResult_t devMemCreate(flagcxComm *comm, void *buf, size_t size, flagcxWindow *win,
                            flagcxDevMemInternal **out);
// Once comm's proxies have carried out what their rings hold (within
// FLAGCX_TIMEOUT): a DevMem goes.
flagcxResult_t devMemDestroy(flagcxComm *comm, flagcxDevMemInternal *dm);
// Whether h is a live handle of comm (one log line when not).
bool devCommOf(flagcxComm *comm, flagcxDevCommInternal *h, const char *fn);
bool devMemOf(flagcxComm *comm, flagcxDevMemInternal *h, const char *fn);
bool devCommLive(const flagcxDevCommInternal *h);
bool devMemLive(const flagcxDevMemInternal *h);
// Everything of comm's device API (flagcxCommCleanup): collective.
flagcxResult_t devCleanup(flagcxComm *comm);
// The communicator goes (destroy, abort): stop the proxies and free the
// handles without talking to peers.  Before the one-sided state goes.
void devForget(flagcxComm *comm);

// CUDA ranks (devcomm_cuda.cc): the words and private slots in device
// memory (host memory the GPU maps for the counters, block and queue of a
// device communicator on the proxy); after the block's registration, the
// check that every peer is mapped (all by CUDA IPC, or none used by kernels)
// and the device copy of the view; the same for a DevMem.
flagcxResult_t cudaLayout(flagcxDevCommInternal *dc);
flagcxResult_t cudaPublish(flagcxDevCommInternal *dc);
flagcxResult_t cudaMemPublish(flagcxDevMemInternal *dm);
void cudaRelease(flagcxComm *comm, flagcxDevCopies *c);
int32_t cudaError(flagcxDevCommInternal *dc);

// The descriptor ring (flagcxDevQueue): its size in bytes, and its slots
// made empty in `mem` (zeroed, that many bytes).
size_t devQueueBytes();
flagcxDevQueue *devQueueInit(void *mem);

// The proxy (devcomm_proxy.cc).
void proxyStart(flagcxDevCommInternal *dc);
void proxyStop(flagcxDevCommInternal *dc);
// Its DevMem lookup: the live handle `id` of comm, or null.
flagcxDevMemInternal *devMemById(flagcxComm *comm, uint32_t id);

}  // namespace flagcx
