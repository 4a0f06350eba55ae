/* flagcx device API (FlagCX 0.13's flagcx_kernel.h): device communicators and
 * device memory handles for kernels that communicate by themselves.
 *
 * Declared so that programs written for FlagCX 0.13 compile; not implemented
 * yet (README, "Not supported"): every function logs one line and returns
 * flagcxNotSupported.  The types, enumerators and constants have FlagCX 0.13's
 * names, values and layouts.  FlagCX's internal plumbing that its header also
 * declares (the FIFO class, the trigger accessors, IPC table clean-up) is not
 * part of this library; docs/COMPATIBILITY.md lists it. */
#ifndef FLAGCX_KERNEL_H_
#define FLAGCX_KERNEL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flagcx.h"

/* ---- Device-side trigger formats (proxy FIFO entries) ---- */

#define FLAGCX_FIFO_CAPACITY 128
#define flagcxTriggerMask(w) ((w == 64) ? ~0ull : ((1ull << w) - 1))

#ifndef FLAGCX_DEVICE_CTA_COUNT
#define FLAGCX_DEVICE_CTA_COUNT 36
#endif
#ifndef FLAGCX_DEVICE_THREADS_PER_CTA
#define FLAGCX_DEVICE_THREADS_PER_CTA 512
#endif

typedef enum {
  flagcxDevicePrimSend = 0,
  flagcxDevicePrimRecv = 1,
  flagcxDevicePrimTerm = 2,
  flagcxDevicePrimWait = 3,
  flagcxDevicePrimPut = 4,
  flagcxDevicePrimSignal = 5,
  flagcxDevicePrimBarrierSignal = 6,
  flagcxDevicePrimWaitSignal = 7,
  flagcxDevicePrimPutValue = 8,
  flagcxDevicePrimPutSignal = 9,
  flagcxDevicePrimGet = 10
} flagcxDevicePrim;

/* Word indices of a FIFO: capacity, consumed, produced, then a word whose
 * meaning depends on the FIFO (terminate for reduce triggers, completed for
 * device triggers), then the entries. */
typedef enum {
  flagcxFifoIdxCapacity = 0,
  flagcxFifoIdxConsumed = 1,
  flagcxFifoIdxProduced = 2,
  flagcxFifoIdxTerminate = 3,
  flagcxFifoIdxCompleted = 3,
  flagcxFifoIdxData = 4
} flagcxFifoIndex;

typedef enum {
  flagcxReduceTriggerAvailable = 0,
  flagcxReduceTriggerEnqueued = 1,
  flagcxReduceTriggerInprogress = 2,
  flagcxReduceTriggerComplete = 3
} flagcxReduceTriggerState;

/* 24 bytes: two payload words, then the control word (valid bit last). */
struct flagcxDeviceTrigger {
  uint64_t fst;
  uint64_t snd;
  uint64_t trd;
};
typedef struct flagcxDeviceTrigger *flagcxDeviceTrigger_t;

/* 32 bytes, 16-aligned. */
struct
#ifdef __cplusplus
    alignas(16)
#else
    __attribute__((aligned(16)))
#endif
    flagcxReduceTrigger {
  uint64_t value[4];
};
typedef struct flagcxReduceTrigger *flagcxReduceTrigger_t;

#ifdef __cplusplus
/* Bit positions and widths inside a flagcxDeviceTrigger / flagcxReduceTrigger. */
constexpr unsigned int flagcxDeviceTriggerOffValid = 63;
constexpr uint64_t flagcxDeviceTriggerValidMask = 1ULL << 63;
constexpr unsigned int flagcxDeviceTriggerOffPrim = 59, flagcxDeviceTriggerBitsPrim = 4;
constexpr unsigned int flagcxDeviceTriggerOffPeerRank = 39, flagcxDeviceTriggerBitsPeerRank = 20;
constexpr unsigned int flagcxDeviceTriggerOffSlotIdx = 36, flagcxDeviceTriggerBitsSlotIdx = 3;
constexpr unsigned int flagcxDeviceTriggerOffDatatype = 32, flagcxDeviceTriggerBitsDatatype = 4;
constexpr unsigned int flagcxDeviceTriggerOffCount = 0, flagcxDeviceTriggerBitsCount = 32;
constexpr unsigned int flagcxDeviceTriggerOffSrcMrIdx = 29, flagcxDeviceTriggerBitsSrcMrIdx = 7;
constexpr unsigned int flagcxDeviceTriggerOffDstMrIdx = 22, flagcxDeviceTriggerBitsDstMrIdx = 7;
constexpr unsigned int flagcxDeviceTriggerOffSignalIdx = 10, flagcxDeviceTriggerBitsSignalIdx = 12;
constexpr unsigned int flagcxDeviceTriggerOffSignalValuePut = 0;
constexpr unsigned int flagcxDeviceTriggerBitsSignalValuePut = 16;
constexpr unsigned int flagcxDeviceTriggerOffSrcOffset = 32, flagcxDeviceTriggerBitsSrcOffset = 32;
constexpr unsigned int flagcxDeviceTriggerOffDstOffset = 0, flagcxDeviceTriggerBitsDstOffset = 32;
constexpr unsigned int flagcxDeviceTriggerOffSize = 32, flagcxDeviceTriggerBitsSize = 32;
constexpr unsigned int flagcxDeviceTriggerOffBufferType = 34, flagcxDeviceTriggerBitsBufferType = 2;
constexpr unsigned int flagcxDeviceTriggerOffSignalIdxSig = 22;
constexpr unsigned int flagcxDeviceTriggerBitsSignalIdxSig = 12;
constexpr unsigned int flagcxDeviceTriggerOffSignalValue = 6, flagcxDeviceTriggerBitsSignalValue = 16;
constexpr unsigned int flagcxReduceTriggerBitsAddr = 64;
constexpr unsigned int flagcxReduceTriggerOffCount = 0, flagcxReduceTriggerBitsCount = 32;
constexpr unsigned int flagcxReduceTriggerOffNThreads = 32, flagcxReduceTriggerBitsNThreads = 16;
constexpr unsigned int flagcxReduceTriggerOffDatatype = 48, flagcxReduceTriggerBitsDatatype = 4;
constexpr unsigned int flagcxReduceTriggerOffRedop = 52, flagcxReduceTriggerBitsRedop = 4;
constexpr unsigned int flagcxReduceTriggerOffState = 56, flagcxReduceTriggerBitsState = 2;
constexpr unsigned int flagcxReduceTriggerBitsFifoReserved = 1;
#endif

/* ---- Device communicators and device memory (host side) ---- */

/* What a device communicator must provide ("intra" = same-node peers,
 * "inter" = through the network, as in FlagCX). */
struct flagcxDevCommRequirements {
  bool intraMulticast;
  int barrierCount;
  int intraBarrierCount;
  int interBarrierCount;
  int intraLLA2ABlockCount;
  int intraLLA2ASlotCount;
  bool interForceEnable;
  int interContextCount;
  int interSignalCount;
  int interCounterCount;
};
#ifndef __cplusplus
typedef struct flagcxDevCommRequirements flagcxDevCommRequirements;
#endif

#define FLAGCX_DEV_COMM_REQUIREMENTS_INITIALIZER \
  { false, 0, 0, 0, 0, 0, false, 4, 0, 0 }

typedef enum {
  flagcxNetTypeNone = 0,
  flagcxNetTypeProxy = 2,
  flagcxNetTypeGdaki = 3,
} flagcxNetType_t;

struct flagcxCommProperties {
  int rank;
  int nRanks;
  int deviceId;
  bool vendorDeviceApiSupport;
  bool multicastSupport;
  flagcxNetType_t netType;
};
typedef struct flagcxCommProperties flagcxCommProperties_t;

typedef struct flagcxDevCommInternal *flagcxDevComm_t;
#ifndef FLAGCX_DEV_MEM_T_DEFINED
#define FLAGCX_DEV_MEM_T_DEFINED
typedef struct flagcxDevMemInternal *flagcxDevMem_t;
#endif

#ifdef __cplusplus
extern "C" {
#endif

flagcxResult_t flagcxDevCommCreate(flagcxComm_t comm, const flagcxDevCommRequirements *reqs,
                                   flagcxDevComm_t *devComm);
flagcxResult_t flagcxDevCommDestroy(flagcxComm_t comm, flagcxDevComm_t devComm);
/* buff registered before (flagcxCommRegister when win is NULL, else
 * flagcxCommWindowRegister). */
flagcxResult_t flagcxDevMemCreate(flagcxComm_t comm, void *buff, size_t size,
                                  flagcxWindow_t win, flagcxDevMem_t *devMem);
flagcxResult_t flagcxDevMemDestroy(flagcxComm_t comm, flagcxDevMem_t devMem);
/* A device copy of the handle, for kernels written outside C++ (Triton). */
flagcxResult_t flagcxDevCommGetDevicePtr(flagcxDevComm_t devComm, void **devPtr);
flagcxResult_t flagcxDevCommFreeDevicePtr(flagcxDevComm_t devComm);
flagcxResult_t flagcxDevMemGetDevicePtr(flagcxDevMem_t devMem, void **devPtr);
flagcxResult_t flagcxDevMemFreeDevicePtr(flagcxDevMem_t devMem);
flagcxResult_t flagcxCommCleanup(flagcxComm_t comm);
/* flagcx extension: *hostMemory = 1 when the memory kernels name through
 * devComm (its DevMems) must be host memory the GPU maps - a CUDA rank
 * whose kernels reach peers through the proxy (another host, a host rank,
 * FLAGCX_IPC_DISABLE=1): cudaHostAlloc(..., cudaHostAllocMapped |
 * cudaHostAllocPortable) - and on host ranks; 0 when it is device memory
 * that every peer maps by CUDA IPC (flagcxMemAlloc). */
flagcxResult_t flagcxDevCommUsesHostMemory(flagcxDevComm_t devComm, int *hostMemory);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLAGCX_KERNEL_H_ */
