/* flagcx device API, device side: FlagCX's transport-transparent ("unified")
 * calls that a kernel, or a host rank, makes on a device communicator
 * (flagcx_kernel.h makes one) and on device memory handles.
 *
 * Names, argument order and enumerator values are FlagCX's
 * (bindings/ir/flagcx_device_unified_ir.h and device_api/flagcx_device_enums.h
 * of its main branch).  `comm` is what flagcxDevCommGetDevicePtr gives,
 * `dst`/`src` what flagcxDevMemGetDevicePtr gives; a host rank may pass the
 * flagcxDevComm_t / flagcxDevMem_t handles themselves (same address).
 *
 * Host ranks (a communicator on the host device): FLAGCX_DEVICE_DECORATOR is
 * empty and the calls are ordinary functions of libflagcx.  CUDA kernels
 * (compiled by nvcc, __CUDACC__): the calls are __device__ inline functions
 * of flagcx_device_cuda.h, included from here.  docs/DEVICE-API.md describes
 * the model: teams, windows, signals, counters, scopes, and the transport
 * behind each team kind. */
#ifndef FLAGCX_DEVICE_UNIFIED_H_
#define FLAGCX_DEVICE_UNIFIED_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define FLAGCX_DEVICE_DECORATOR __device__
#define FLAGCX_DEVICE_INLINE_DECORATOR __device__ __forceinline__
#else
#define FLAGCX_DEVICE_DECORATOR
#define FLAGCX_DEVICE_INLINE_DECORATOR static inline
#endif

#ifdef __cplusplus
#define FLAGCX_IR_EXTERN_C extern "C"
#else
#define FLAGCX_IR_EXTERN_C
#endif

/* How the calls are declared: library functions for host code, inline
 * device functions under nvcc. */
#if defined(__CUDACC__)
#define FLAGCX_DEV_CALL FLAGCX_IR_EXTERN_C inline
#else
#define FLAGCX_DEV_CALL FLAGCX_IR_EXTERN_C
#endif

/* ---- Enumerations (FlagCX's values) ---- */

typedef enum {
  FLAGCX_COOP_THREAD = 0,
  FLAGCX_COOP_WARP = 1,
  FLAGCX_COOP_BLOCK = 2,
  FLAGCX_COOP_TILE_SPAN = 3,
  FLAGCX_COOP_LANES = 4,
} flagcxCoopKind_t;

/* INTRA: the ranks of this host; INTER: one rank per host, those with this
 * rank's index inside its host; WORLD: every rank. */
typedef enum {
  FLAGCX_TEAM_INTRA = 0,
  FLAGCX_TEAM_INTER = 1,
  FLAGCX_TEAM_WORLD = 2,
} flagcxTeamKind_t;

typedef enum {
  FLAGCX_MEMORY_ORDER_RELAXED = 0,
  FLAGCX_MEMORY_ORDER_ACQUIRE = 1,
  FLAGCX_MEMORY_ORDER_RELEASE = 2,
  FLAGCX_MEMORY_ORDER_ACQ_REL = 3,
  FLAGCX_MEMORY_ORDER_SEQ_CST = 4,
} flagcxMemoryOrder_t;

typedef enum {
  FLAGCX_MEMORY_SCOPE_SYSTEM = 0,
  FLAGCX_MEMORY_SCOPE_DEVICE = 1,
  FLAGCX_MEMORY_SCOPE_BLOCK = 2,
  FLAGCX_MEMORY_SCOPE_THREAD = 3,
} flagcxMemoryScope_t;

typedef flagcxCoopKind_t flagcxDevCoopKind_t;
typedef flagcxTeamKind_t flagcxDevTeamKind_t;
typedef flagcxMemoryOrder_t flagcxDevMemoryOrder_t;
typedef flagcxMemoryScope_t flagcxDevMemoryScope_t;
typedef uint32_t flagcxDevSignal_t;
typedef uint32_t flagcxDevCounter_t;
typedef uint32_t flagcxDevContext_t;

/* ---- What the calls read (filled by the library) ----
 *
 * A rank's signal and barrier words live in one block that every peer can
 * reach (mapped where it can be, through the one-sided engine otherwise):
 * row r holds one 64-bit word per source rank, which only that source
 * changes, so that an add from a peer that is not mapped travels as a store
 * of the source's running total.  Rows [0, nSignals) are the signals; after
 * them the barriers of each team kind (barrierRow[kind] + index).  A signal's
 * value is the sum of its row less the base a reset recorded. */

#define FLAGCX_DEV_COMM_MAGIC 0x4d4d4f4356454446ull /* "FDEVCOMM" */
#define FLAGCX_DEV_MEM_MAGIC 0x4d454d56454446ull    /* "FDEVMEM" */
#define FLAGCX_DEV_NONE 0xffffffffu                 /* no signal / counter */

/* One descriptor for the proxy thread (72 bytes).  `seq` is written last:
 * the slot of ticket t is full when seq == t + 1. */
enum {
  flagcxDevOpPut = 1,    /* dstMem at peer <- srcMem here; then signal, counter */
  flagcxDevOpGet = 2,    /* dstMem here <- srcMem at peer; then counter */
  flagcxDevOpValue = 3,  /* 8-byte store of `value` into dstMem at peer; then signal */
  flagcxDevOpSignal = 4, /* add `add` to row `signal` at peer */
};
struct flagcxDevDesc {
  uint32_t op;
  int32_t peer; /* world rank */
  uint32_t dstMem, srcMem;
  uint64_t dstOff, srcOff, bytes;
  uint64_t value;  /* put-value: the value stored */
  uint64_t add;    /* what the signal grows by */
  uint32_t signal; /* row, or FLAGCX_DEV_NONE */
  uint32_t counter;
  uint64_t seq;
};

/* The descriptor ring: producers take tickets from `head` (CUDA kernels
 * from the view's `tickets` word in device memory instead, the ring being
 * host memory the GPU maps); the slot of ticket t is slot[t % capacity],
 * free when its seq == t.  A producer waits for that, writes the descriptor,
 * fences (system scope) and stores seq = t + 1.  The proxy consumes in
 * ticket order, frees the slot (seq = t + capacity) and counts finished
 * descriptors in `done`; `failed` becomes 1 once it failed one (CUDA
 * kernels' waits then give up). */
struct flagcxDevQueue {
  uint64_t head;
  uint64_t pad0[7];
  uint64_t done;
  uint64_t failed;
  uint64_t pad1[6];
  uint64_t capacity; /* a power of two */
  uint64_t pad2[7];
  struct flagcxDevDesc slot[1]; /* [capacity] */
};

struct flagcxDevCommView {
  uint64_t magic;
  uint64_t commId; /* the communicator's identity: handles of another are refused */
  int32_t rank, nRanks;
  int32_t nSignals, nCounters;
  int32_t nBarriers[3];  /* per team kind */
  int32_t barrierRow[3]; /* first row of each kind's barriers */
  int32_t teamSize[3], teamRank[3];
  const int32_t *teamWorld[3];   /* [kind][i]: world rank of team member i */
  uint64_t *words;               /* this rank's block: (nSignals + barriers) x nRanks */
  uint64_t *const *peerWords;    /* [world rank]: its block mapped here, or null */
  uint64_t *signalBase;          /* [nSignals]: value recorded by the last reset */
  uint64_t *shadow;              /* [nSignals] */
  uint64_t *counters;            /* [nCounters] */
  uint64_t *epoch;               /* [barrier rows]: arrivals of this rank */
  struct flagcxDevQueue *queue;  /* to the proxy thread */
  int32_t *error;                /* the first bad use or failure (flagcxResult_t), sticky */
  uint64_t *tickets; /* CUDA kernels via the proxy: the ring's next ticket (device memory) */
  /* CUDA kernels, every peer mapped: [world rank] 1 when that rank runs on
   * this rank's GPU, where a scope narrower than system is honoured; null
   * otherwise (host ranks, via the proxy). */
  const uint8_t *sameDevice;
  /* CUDA kernels: how long a wait may last (FLAGCX_TIMEOUT) before it gives
   * up, keeping flagcxSystemError as the error. */
  uint64_t timeoutNs;
};

struct flagcxDevMemView {
  uint64_t magic;
  uint64_t commId;
  uint32_t id; /* names it in descriptors */
  uint32_t pad;
  char *base;  /* this rank's part */
  uint64_t size;
  char *const *peerBase;    /* [world rank]: its part mapped here, or null */
  const uint64_t *peerSize; /* [world rank]: its part's size */
};

/* ---- The unified calls ---- */

/* Put (U1): bytes from src+srcOffset here to dst+dstOffset at `peer` (a rank
 * of the team).  _RSigInc / _RSigAdd: then add 1 / signalValue to the peer's
 * signal `remoteSignal`, visible only after the data; _LCtrInc: then add 1
 * to this rank's counter `localCounter` once the source may be reused. */
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPut(
    const void *comm, const void *dst, size_t dstOffset, const void *src, size_t srcOffset,
    size_t bytes, flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t order);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPut_RSigInc(
    const void *comm, const void *dst, size_t dstOffset, const void *src, size_t srcOffset,
    size_t bytes, flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t order,
    flagcxDevSignal_t remoteSignal);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPut_RSigAdd(
    const void *comm, const void *dst, size_t dstOffset, const void *src, size_t srcOffset,
    size_t bytes, flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t order,
    flagcxDevSignal_t remoteSignal, uint64_t signalValue);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPut_LCtrInc(
    const void *comm, const void *dst, size_t dstOffset, const void *src, size_t srcOffset,
    size_t bytes, flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t order,
    flagcxDevCounter_t localCounter);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPut_RSigInc_LCtrInc(
    const void *comm, const void *dst, size_t dstOffset, const void *src, size_t srcOffset,
    size_t bytes, flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t order,
    flagcxDevSignal_t remoteSignal, flagcxDevCounter_t localCounter);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPut_RSigAdd_LCtrInc(
    const void *comm, const void *dst, size_t dstOffset, const void *src, size_t srcOffset,
    size_t bytes, flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t order,
    flagcxDevSignal_t remoteSignal, uint64_t signalValue, flagcxDevCounter_t localCounter);

/* Get (U2): bytes from src+srcOffset at `peer` to dst+dstOffset here;
 * complete at the latest after the next flagcxDevFlush. */
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevGet(
    const void *comm, const void *src, size_t srcOffset, const void *dst, size_t dstOffset,
    size_t bytes, flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t order);

/* PutValue (U3): an 8-byte store of `value` at dst+dstOffset at `peer`. */
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPutValue(
    const void *comm, const void *dst, size_t dstOffset, uint64_t value,
    flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t order);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPutValue_RSigInc(
    const void *comm, const void *dst, size_t dstOffset, uint64_t value,
    flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t order,
    flagcxDevSignal_t remoteSignal);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPutValue_RSigAdd(
    const void *comm, const void *dst, size_t dstOffset, uint64_t value,
    flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t order,
    flagcxDevSignal_t remoteSignal, uint64_t signalValue);

/* Signals (U4): add 1 / value to signal `signal` of `peer`. */
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevSignalInc(
    const void *comm, flagcxDevTeamKind_t teamKind, int peer, flagcxDevSignal_t signal,
    flagcxDevContext_t contextId, flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevSignalAdd(
    const void *comm, flagcxDevTeamKind_t teamKind, int peer, flagcxDevSignal_t signal,
    uint64_t value, flagcxDevContext_t contextId, flagcxDevCoopKind_t coopKind,
    flagcxDevMemoryScope_t scope);

/* Waits (U5): until this rank's signal / counter, compared in its low
 * `bits` (32 or 64) bits, is at least `least`. */
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevWaitSignal(
    const void *comm, flagcxDevSignal_t signal, uint64_t least, int bits,
    flagcxDevContext_t contextId, flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t order);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevWaitCounter(
    const void *comm, flagcxDevCounter_t counter, uint64_t least, int bits,
    flagcxDevContext_t contextId, flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t order);

/* Reads (U6): the current value, without waiting. */
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR uint64_t flagcxDevReadSignal(
    const void *comm, flagcxDevSignal_t signal, int bits, flagcxDevContext_t contextId,
    flagcxDevMemoryOrder_t order);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR uint64_t flagcxDevReadCounter(
    const void *comm, flagcxDevCounter_t counter, int bits, flagcxDevContext_t contextId,
    flagcxDevMemoryOrder_t order);

/* Flush, reset, shadow (U7).  Flush: every operation this rank issued before
 * is complete (gets landed, puts in the peer's memory). */
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevFlush(
    const void *comm, flagcxDevContext_t contextId, flagcxDevCoopKind_t coopKind,
    flagcxDevMemoryOrder_t order);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevResetSignal(
    const void *comm, flagcxDevContext_t contextId, flagcxDevSignal_t slot);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevResetCounter(
    const void *comm, flagcxDevContext_t contextId, flagcxDevCounter_t slot);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevIncreaseSignalShadow(
    const void *comm, flagcxDevContext_t contextId, flagcxDevSignal_t slot, uint64_t delta);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevWaitSignalMeetShadow(
    const void *comm, flagcxDevContext_t contextId, flagcxDevSignal_t slot, int bits,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t order);

/* Barriers (U8) of a team kind; `index` < the count requested for it
 * (intraBarrierCount, interBarrierCount, barrierCount for WORLD). */
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevBarrierArrive(
    const void *comm, flagcxDevTeamKind_t teamKind, uint32_t index, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t order, flagcxDevMemoryScope_t scope);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevBarrierWait(
    const void *comm, flagcxDevTeamKind_t teamKind, uint32_t index, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t order, flagcxDevMemoryScope_t scope);
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevBarrierSync(
    const void *comm, flagcxDevTeamKind_t teamKind, uint32_t index, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t order, flagcxDevMemoryScope_t scope);

#if defined(__CUDACC__)
#include "flagcx_device_cuda.h"
#endif

#endif /* FLAGCX_DEVICE_UNIFIED_H_ */
