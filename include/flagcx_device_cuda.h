/* flagcx device API for CUDA kernels: the unified calls of
 * flagcx_device_unified.h as __device__ inline functions (included from there
 * under nvcc; do not include directly).
 *
 * Two paths, one per device communicator (flagcxDevCommCreate picks it):
 *  - every peer mapped by CUDA IPC (one host, all ranks CUDA): data moves by
 *    stores and loads of the cooperative group, signals and barriers are
 *    release atomics on the peers' words, counters on this rank's; the data
 *    of a put is fenced before its signal.  Fences and signals take the
 *    call's scope where the peer runs on this GPU (FLAGCX_MEMORY_SCOPE_DEVICE
 *    and narrower: __threadfence, GPU-scope atomics), system scope for a
 *    peer on another GPU whatever the call asks; waits poll with
 *    system-scope acquire loads, tightly for a few microseconds, then with
 *    __nanosleep backoff;
 *  - via the proxy (view->queue set: another host, a host rank, IPC off):
 *    one member of the group writes one descriptor per put, get, value or
 *    signal into the ring in host memory the GPU maps (ticket from a device
 *    word, slot free when seq == ticket, fields, system fence, seq = ticket
 *    + 1) after the group's writes are fenced; a flagcx thread carries them
 *    out in order through the one-sided engine, the data acknowledged before
 *    the signal, and bumps the counters.  This rank's signal words and
 *    counters are host memory the GPU maps, where the engine lands what
 *    peers send; waits poll them.  Flush and a barrier's wait also wait
 *    until the proxy has finished every ticket taken so far (puts to this
 *    rank itself go through it too).
 * No wait lasts past FLAGCX_TIMEOUT (spinOnce).  FLAGCX_COOP_THREAD, _WARP
 * and _BLOCK are groups of 1, 32 (every lane calls) and the whole block;
 * _TILE_SPAN and _LANES act as _THREAD.  With FLAGCX_DEVICE_CHECKS defined
 * (pkg-config adds it to a -Ddevice_checks=true build) every range is checked
 * and a bad one prints the block, thread and offset, and is skipped. */
#ifndef FLAGCX_DEVICE_CUDA_H_
#define FLAGCX_DEVICE_CUDA_H_

#include <cuda/atomic>
#include <stddef.h>
#include <stdio.h>

namespace flagcx_dev {

using View = flagcxDevCommView;
using Mem = flagcxDevMemView;
using SysAtomic = cuda::atomic_ref<uint64_t, cuda::thread_scope_system>;
using GpuAtomic = cuda::atomic_ref<uint64_t, cuda::thread_scope_device>;

/* Whether a call to world rank w may fence at GPU scope: the caller asked
 * for less than system scope and w runs on this GPU (its memory, and the
 * kernels that wait on it, are here).  Peers on another GPU and host memory
 * (the proxy's path) always get system scope. */
__device__ inline bool gpuScope(const View *v, int w, flagcxDevMemoryScope_t scope) {
  return scope != FLAGCX_MEMORY_SCOPE_SYSTEM && v->sameDevice && v->sameDevice[w];
}

__device__ inline void fence(bool gpu) {
  if (gpu) __threadfence();
  else __threadfence_system();
}

__device__ inline void fail(const View *v, int code) {
  atomicCAS(reinterpret_cast<int *>(v->error), 0, code);
}

__device__ inline unsigned long long globalNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Waiting: tight polls for the first few microseconds (a peer's store
 * usually lands within them), then __nanosleep doubling up to 1 us.  A
 * wait gives up (spinOnce false) once the view holds an error (an earlier
 * wait gave up, a bad call), the proxy failed an operation, or
 * FLAGCX_TIMEOUT passed (printed, flagcxSystemError kept): a kernel whose
 * peer never signals ends, and flagcxDevCommDestroy returns the error. */
struct Spin {
  const View *v;
  long long start;
  unsigned long long deadline;
  unsigned ns;      /* 0 while polling tightly */
  bool proxyFailed; /* whether the proxy's failure ends the wait */
};
constexpr long long kTightCycles = 8192; /* about 4-5 us of SM clock */

__device__ inline Spin spinStart(const View *v, bool proxyFailed = true) {
  return Spin{v, clock64(), 0ull, 0u, proxyFailed};
}

__device__ inline bool spinOnce(Spin &s) {
  if (s.ns == 0) {
    if (clock64() - s.start < kTightCycles) return true;
    s.ns = 32;
    s.deadline = globalNs() + s.v->timeoutNs;
  }
  if (*reinterpret_cast<volatile int32_t *>(s.v->error) != 0) return false;
  if (s.proxyFailed && s.v->queue &&
      reinterpret_cast<volatile flagcxDevQueue *>(s.v->queue)->failed)
    return false;
  if (globalNs() > s.deadline) {
    printf("flagcx device: block (%u,%u,%u) thread (%u,%u,%u): waited FLAGCX_TIMEOUT (%llu s), "
           "giving up\n", blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y,
           threadIdx.z, s.v->timeoutNs / 1000000000ull);
    fail(s.v, 2 /* flagcxSystemError */);
    return false;
  }
  __nanosleep(s.ns);
  if (s.ns < 1024) s.ns *= 2;
  return true;
}

struct Coop {
  unsigned rank, size;
};

__device__ inline Coop coopOf(flagcxDevCoopKind_t k) {
  unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  if (k == FLAGCX_COOP_BLOCK) return Coop{t, blockDim.x * blockDim.y * blockDim.z};
  if (k == FLAGCX_COOP_WARP) return Coop{t % 32u, 32u};
  return Coop{0u, 1u};
}

__device__ inline void coopSync(flagcxDevCoopKind_t k) {
  if (k == FLAGCX_COOP_BLOCK) __syncthreads();
  else if (k == FLAGCX_COOP_WARP) __syncwarp();
}

/* The group copies [src, src+n) to dst: 16-byte words where both are
 * aligned, bytes otherwise. */
__device__ inline void coopCopy(char *dst, const char *src, size_t n, Coop c) {
  if ((((uintptr_t)dst | (uintptr_t)src) & 15u) == 0) {
    size_t words = n / 16;
    for (size_t i = c.rank; i < words; i += c.size)
      reinterpret_cast<uint4 *>(dst)[i] = reinterpret_cast<const uint4 *>(src)[i];
    for (size_t i = words * 16 + c.rank; i < n; i += c.size) dst[i] = src[i];
    return;
  }
  for (size_t i = c.rank; i < n; i += c.size) dst[i] = src[i];
}

/* A bad call: printed with the block and thread, kept as the error. */
__device__ inline void bad(const View *v, const char *fn, const char *what, unsigned long long a,
                           unsigned long long b) {
  printf("flagcx device check: block (%u,%u,%u) thread (%u,%u,%u): %s: %s %llu %llu\n",
         blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, fn, what, a, b);
  fail(v, 4 /* flagcxInvalidArgument */);
}

__device__ inline bool inRange(const View *v, const char *fn, uint64_t off, uint64_t len,
                               uint64_t size) {
#ifdef FLAGCX_DEVICE_CHECKS
  if (off > size || len > size - off) {
    bad(v, fn, "range past the memory (offset, bytes):", off, len);
    return false;
  }
#else
  (void)v, (void)fn, (void)off, (void)len, (void)size;
#endif
  return true;
}

/* Direct path: the peer's part must be mapped here (a host-memory DevMem
 * is for device communicators via the proxy). */
__device__ inline bool mappedOk(const View *v, const char *fn, const char *p, int w) {
#ifdef FLAGCX_DEVICE_CHECKS
  if (!p) {
    bad(v, fn, "peer's memory not mapped here, host memory? (peer, 0):", (unsigned long long)w, 0);
    return false;
  }
#else
  (void)v, (void)fn, (void)p, (void)w;
#endif
  return true;
}

/* World rank of team member `peer`, -1 when out of the team (checked builds). */
__device__ inline int worldOf(const View *v, flagcxDevTeamKind_t team, int peer, const char *fn) {
#ifdef FLAGCX_DEVICE_CHECKS
  if ((unsigned)team > 2u || peer < 0 || peer >= v->teamSize[team]) {
    bad(v, fn, "peer not in the team (kind, peer):", (unsigned long long)team,
        (unsigned long long)peer);
    return -1;
  }
#else
  (void)fn;
#endif
  return v->teamWorld[team][peer];
}

/* Via the proxy: one descriptor into the ring (one thread; the caller
 * fenced what the descriptor's data must carry). */
__device__ inline void enqueue(const View *v, const flagcxDevDesc &d) {
  flagcxDevQueue *q = v->queue;
  uint64_t t = atomicAdd(reinterpret_cast<unsigned long long *>(v->tickets), 1ull);
  flagcxDevDesc *s = &q->slot[t & (q->capacity - 1)];
  /* Ring full: the proxy goes on after a failed operation, so only the
   * timeout (or an error already kept) ends this wait. */
  Spin spin = spinStart(v, false);
  while (SysAtomic(s->seq).load(cuda::memory_order_acquire) != t)
    if (!spinOnce(spin)) return;
  volatile uint64_t *to = reinterpret_cast<volatile uint64_t *>(s);
  const uint64_t *from = reinterpret_cast<const uint64_t *>(&d);
  for (size_t i = 0; i < offsetof(flagcxDevDesc, seq) / 8; i++) to[i] = from[i];
  __threadfence_system();
  SysAtomic(s->seq).store(t + 1, cuda::memory_order_release);
}

__device__ inline flagcxDevDesc desc(uint32_t op, int w) {
  flagcxDevDesc d = {};
  d.op = op;
  d.peer = w;
  d.signal = d.counter = FLAGCX_DEV_NONE;
  return d;
}

/* Adds `add` to row `row` at world rank w; `gpu`: a release at GPU scope
 * (gpuScope said so), else system scope. */
__device__ inline void signalRow(const View *v, int w, uint32_t row, uint64_t add, bool gpu) {
  if (v->queue) {
    flagcxDevDesc d = desc(flagcxDevOpSignal, w);
    d.signal = row;
    d.add = add;
    enqueue(v, d);
    return;
  }
  uint64_t *words = v->peerWords[w];
  size_t at = (size_t)row * (size_t)v->nRanks + (size_t)v->rank;
  if (gpu) GpuAtomic(words[at]).fetch_add(add, cuda::memory_order_release);
  else SysAtomic(words[at]).fetch_add(add, cuda::memory_order_release);
}

__device__ inline uint64_t rowSum(const View *v, uint32_t row) {
  uint64_t *r = v->words + (size_t)row * (size_t)v->nRanks, s = 0;
  for (int i = 0; i < v->nRanks; i++) s += SysAtomic(r[i]).load(cuda::memory_order_acquire);
  return s;
}

__device__ inline uint64_t masked(uint64_t x, int bits) {
  return bits >= 64 ? x : x & ((1ull << bits) - 1);
}

__device__ inline void spinUntil(const View *v, const uint64_t *word, uint64_t least, int bits) {
  Spin spin = spinStart(v);
  while (masked(SysAtomic(*const_cast<uint64_t *>(word)).load(cuda::memory_order_acquire), bits) <
         least)
    if (!spinOnce(spin)) return;
}

struct PutArgs {
  const void *comm, *dst, *src;
  size_t dstOff, srcOff, bytes;
  flagcxDevTeamKind_t team;
  int peer;
  flagcxDevCoopKind_t coop;
  flagcxDevMemoryScope_t scope;
  uint32_t signal, counter;
  uint64_t add;
};

__device__ inline void put(const PutArgs &a, const char *fn) {
  const View *v = (const View *)a.comm;
  const Mem *d = (const Mem *)a.dst, *s = (const Mem *)a.src;
  int w = worldOf(v, a.team, a.peer, fn);
  if (w < 0 || !inRange(v, fn, a.dstOff, a.bytes, d->peerSize[w]) ||
      !inRange(v, fn, a.srcOff, a.bytes, s->size))
    return;
  if (v->queue) {
    __threadfence_system();  /* the group's writes to the source, before the proxy reads it */
    coopSync(a.coop);
    if (coopOf(a.coop).rank == 0) {
      flagcxDevDesc x = desc(flagcxDevOpPut, w);
      x.dstMem = d->id, x.srcMem = s->id, x.dstOff = a.dstOff, x.srcOff = a.srcOff;
      x.bytes = a.bytes, x.signal = a.signal, x.add = a.add, x.counter = a.counter;
      enqueue(v, x);
    }
    coopSync(a.coop);
    return;
  }
  if (!mappedOk(v, fn, d->peerBase[w], w)) return;
  coopCopy(d->peerBase[w] + a.dstOff, s->base + a.srcOff, a.bytes, coopOf(a.coop));
  bool gpu = gpuScope(v, w, a.scope);
  fence(gpu);
  coopSync(a.coop);
  if (coopOf(a.coop).rank == 0) {
    if (a.signal != FLAGCX_DEV_NONE) signalRow(v, w, a.signal, a.add, gpu);
    if (a.counter != FLAGCX_DEV_NONE)
      SysAtomic(v->counters[a.counter]).fetch_add(1, cuda::memory_order_release);
  }
  coopSync(a.coop);
}

__device__ inline void putValue(const void *comm, const void *dst, size_t dstOff, uint64_t value,
                                flagcxDevTeamKind_t team, int peer, flagcxDevCoopKind_t coop,
                                flagcxDevMemoryScope_t scope, uint32_t signal, uint64_t add) {
  const View *v = (const View *)comm;
  const Mem *d = (const Mem *)dst;
  int w = worldOf(v, team, peer, "flagcxDevPutValue");
  if (w < 0 || !inRange(v, "flagcxDevPutValue", dstOff, 8, d->peerSize[w]) ||
      (!v->queue && !mappedOk(v, "flagcxDevPutValue", d->peerBase[w], w)))
    return;
  coopSync(coop);
  if (coopOf(coop).rank == 0 && v->queue) {
    flagcxDevDesc x = desc(flagcxDevOpValue, w);
    x.dstMem = d->id, x.dstOff = dstOff, x.value = value, x.signal = signal, x.add = add;
    enqueue(v, x);
  } else if (coopOf(coop).rank == 0) {
    uint64_t &at = *reinterpret_cast<uint64_t *>(d->peerBase[w] + dstOff);
    bool gpu = gpuScope(v, w, scope);
    if (gpu) GpuAtomic(at).store(value, cuda::memory_order_release);
    else SysAtomic(at).store(value, cuda::memory_order_release);
    if (signal != FLAGCX_DEV_NONE) signalRow(v, w, signal, add, gpu);
  }
  coopSync(coop);
}

/* GPU scope for a barrier when every member of the team runs on this GPU. */
__device__ inline bool teamGpuScope(const View *v, flagcxDevTeamKind_t team,
                                    flagcxDevMemoryScope_t scope) {
  for (int i = 0; i < v->teamSize[team]; i++)
    if (!gpuScope(v, v->teamWorld[team][i], scope)) return false;
  return true;
}

__device__ inline void arrive(const View *v, flagcxDevTeamKind_t team, uint32_t index, bool gpu) {
  int row = v->barrierRow[team] + (int)index;
  SysAtomic(v->epoch[row]).fetch_add(1, cuda::memory_order_relaxed);
  fence(gpu);
  for (int i = 0; i < v->teamSize[team]; i++)
    if (i != v->teamRank[team]) signalRow(v, v->teamWorld[team][i], (uint32_t)row, 1, gpu);
}

/* Via the proxy: until it has finished every ticket taken so far (this
 * thread's among them). */
__device__ inline void drain(const View *v) {
  uint64_t upTo = SysAtomic(*v->tickets).load(cuda::memory_order_acquire);
  spinUntil(v, &v->queue->done, upTo, 64);
}

/* The other members' arrivals, and via the proxy this rank's own calls
 * queued before: a put to itself goes through the proxy too, and must be
 * visible after the barrier as one from any member is (a team of one has
 * no arrival to wait for). */
__device__ inline void barrierWait(const View *v, flagcxDevTeamKind_t team, uint32_t index) {
  if (v->queue) drain(v);
  int row = v->barrierRow[team] + (int)index;
  uint64_t target = SysAtomic(v->epoch[row]).load(cuda::memory_order_relaxed);
  const uint64_t *r = v->words + (size_t)row * (size_t)v->nRanks;
  for (int i = 0; i < v->teamSize[team]; i++)
    if (i != v->teamRank[team]) spinUntil(v, &r[v->teamWorld[team][i]], target, 64);
}

__device__ inline bool barrierOk(const View *v, flagcxDevTeamKind_t team, uint32_t index) {
#ifdef FLAGCX_DEVICE_CHECKS
  if ((unsigned)team > 2u || index >= (uint32_t)v->nBarriers[team]) {
    bad(v, "flagcxDevBarrier", "barrier not requested (kind, index):", (unsigned long long)team,
        index);
    return false;
  }
#else
  (void)v, (void)team, (void)index;
#endif
  return true;
}

}  // namespace flagcx_dev

#include "flagcx_device_cuda_calls.h"

#endif /* FLAGCX_DEVICE_CUDA_H_ */
