/* flagcx public C API.  Names, values, argument order and struct layouts follow
 * FlagCX so that programs written for it compile unchanged (docs/COMPATIBILITY.md lists what differs). */
#ifndef FLAGCX_H_
#define FLAGCX_H_

#include <stddef.h>
#include <stdint.h>

/* The FlagCX API level this library implements (README, "Versions"): a
 * program that tests these with #if takes its FlagCX 0.13 branch.  They are
 * not the release number of this library (pkg-config --modversion flagcx). */
#define FLAGCX_VERSION_MAJOR 0
#define FLAGCX_VERSION_MINOR 13
#define FLAGCX_VERSION_PATCH 0
#define FLAGCX_VERSION_CODE \
  (FLAGCX_VERSION_MAJOR * 10000 + FLAGCX_VERSION_MINOR * 100 + FLAGCX_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  flagcxSuccess = 0,
  flagcxUnhandledDeviceError = 1,
  flagcxSystemError = 2,
  flagcxInternalError = 3,
  flagcxInvalidArgument = 4,
  flagcxInvalidUsage = 5,
  flagcxRemoteError = 6,
  flagcxInProgress = 7,
  flagcxUnhandledCCLError = 8,
  flagcxNotSupported = 9,
  flagcxNumResults = 10
} flagcxResult_t;

typedef enum {
  flagcxInt8 = 0, flagcxChar = 0,
  flagcxUint8 = 1,
  flagcxInt32 = 2, flagcxInt = 2,
  flagcxUint32 = 3,
  flagcxInt64 = 4,
  flagcxUint64 = 5,
  flagcxFloat16 = 6, flagcxHalf = 6,
  flagcxFloat32 = 7, flagcxFloat = 7,
  flagcxFloat64 = 8, flagcxDouble = 8,
  flagcxBfloat16 = 9,
  /* OCP 8-bit floats, numbered as NCCL numbers ncclFloat8e4m3/ncclFloat8e5m2:
     e4m3 (bias 7, NaN but no infinity, conversions saturate to +-448) and
     e5m2 (bias 15, IEEE-like with infinities).  Reductions compute in float. */
  flagcxFloat8e4m3 = 10,
  flagcxFloat8e5m2 = 11,
  flagcxNumTypes = 12
} flagcxDataType_t;

/* Sizes flagcxRedOp_t's last enumerator so that the enum is as wide as an
 * int whatever the compiler's enum packing (as in FlagCX). */
typedef enum { flagcxNumRedOps_dummy = 5 } flagcxRedOp_dummy_t;
typedef enum {
  flagcxSum = 0,
  flagcxProd = 1,
  flagcxMax = 2,
  flagcxMin = 3,
  flagcxAvg = 4,
  flagcxRedNoOp = 5,
  flagcxNumRedOps = 5,
  flagcxMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(flagcxRedOp_dummy_t))
} flagcxRedOp_t;

typedef enum {
  flagcxCommOpSend = 0,
  flagcxCommOpRecv = 1,
  flagcxCommOpBroadcast = 2,
  flagcxCommOpGather = 3,
  flagcxCommOpScatter = 4,
  flagcxCommOpReduce = 5,
  flagcxCommOpAllReduce = 6,
  flagcxCommOpAllGather = 7,
  flagcxCommOpReduceScatter = 8,
  flagcxCommOpAlltoAll = 9,
  flagcxCommOpAlltoAllv = 10,
  flagcxCommNoOp = 11,
  flagcxNumCommOps = 12
} flagcxCommOp_t;

typedef enum {
  flagcxMemcpyHostToDevice = 0,
  flagcxMemcpyDeviceToHost = 1,
  flagcxMemcpyDeviceToDevice = 2
} flagcxMemcpyType_t;

typedef enum {
  flagcxMemHost = 0, /* page-locked host memory */
  flagcxMemDevice = 1,
  flagcxMemManaged = 2
} flagcxMemType_t;

typedef enum {
  flagcxEventDefault = 0,
  flagcxEventDisableTiming = 1
} flagcxEventType_t;

/* Vendors of FlagCX's own device adaptors; kept for source compatibility. */
typedef enum {
  FLAGCX_VENDOR_NVIDIA = 0,
  FLAGCX_VENDOR_ILUVATAR_COREX = 1,
  FLAGCX_VENDOR_MLU = 2,
  FLAGCX_VENDOR_METAX = 3,
} flagcxVendorType;

#define FLAGCX_UNIQUE_ID_BYTES 256
typedef struct {
  char internal[FLAGCX_UNIQUE_ID_BYTES];
} flagcxUniqueId;
typedef flagcxUniqueId *flagcxUniqueId_t;

typedef struct flagcxComm *flagcxComm_t;
typedef struct flagcxStream *flagcxStream_t;
typedef struct flagcxEvent *flagcxEvent_t;
typedef struct flagcxIpcMemHandle *flagcxIpcMemHandle_t;
struct flagcxInnerWindow;
typedef struct flagcxInnerWindow *flagcxInnerWindow_t;
struct flagcxSymWindow;
typedef struct flagcxSymWindow *flagcxSymWindow_t;
/* A registered window (flagcxCommWindowRegister); a type of its own. */
struct flagcxWindow;
typedef struct flagcxWindow *flagcxWindow_t;

/* Arguments of a device function launch (FlagCX's adaptors use it). */
typedef struct {
  flagcxStream_t stream;
  flagcxEvent_t event;
  void **argList;
} flagcxFuncArgs;

/* Pointer kinds of flagcxOneSideSignalRegister (FlagCX keeps them in an
 * internal header; the values are the same). */
#define FLAGCX_PTR_HOST 1
#define FLAGCX_PTR_CUDA 2
#define FLAGCX_PTR_DMABUF 4

/* A table of device operations, filled by flagcxDeviceHandleInit for the
 * device this process drives (FLAGCX_DEVICE).  A NULL stream in
 * deviceMalloc/Free/Memcpy/Memset means "now, synchronously". */
struct flagcxDeviceHandle {
  flagcxResult_t (*deviceSynchronize)(void);
  flagcxResult_t (*deviceMemcpy)(void *dst, void *src, size_t size,
                                 flagcxMemcpyType_t type, flagcxStream_t stream);
  flagcxResult_t (*deviceMemset)(void *ptr, int value, size_t size,
                                 flagcxMemType_t type, flagcxStream_t stream);
  flagcxResult_t (*deviceMalloc)(void **ptr, size_t size, flagcxMemType_t type,
                                 flagcxStream_t stream);
  flagcxResult_t (*deviceFree)(void *ptr, flagcxMemType_t type, flagcxStream_t stream);
  flagcxResult_t (*setDevice)(int dev);
  flagcxResult_t (*getDevice)(int *dev);
  flagcxResult_t (*getDeviceCount)(int *count);
  flagcxResult_t (*getVendor)(char *vendor);
  flagcxResult_t (*hostGetDevicePointer)(void **pDevice, void *pHost);
  flagcxResult_t (*streamCreate)(flagcxStream_t *stream);
  flagcxResult_t (*streamDestroy)(flagcxStream_t stream);
  flagcxResult_t (*streamCopy)(flagcxStream_t *newStream, void *oldStream);
  flagcxResult_t (*streamFree)(flagcxStream_t stream);
  flagcxResult_t (*streamSynchronize)(flagcxStream_t stream);
  flagcxResult_t (*streamQuery)(flagcxStream_t stream);
  flagcxResult_t (*streamWaitEvent)(flagcxStream_t stream, flagcxEvent_t event);
  flagcxResult_t (*eventCreate)(flagcxEvent_t *event, flagcxEventType_t eventType);
  flagcxResult_t (*eventDestroy)(flagcxEvent_t event);
  flagcxResult_t (*eventRecord)(flagcxEvent_t event, flagcxStream_t stream);
  flagcxResult_t (*eventSynchronize)(flagcxEvent_t event);
  flagcxResult_t (*eventQuery)(flagcxEvent_t event);
  /* Milliseconds between two completed events, both created timing-enabled. */
  flagcxResult_t (*eventElapsedTime)(float *ms, flagcxEvent_t start, flagcxEvent_t end);
  flagcxResult_t (*ipcMemHandleCreate)(flagcxIpcMemHandle_t *handle, size_t *size);
  flagcxResult_t (*ipcMemHandleGet)(flagcxIpcMemHandle_t handle, void *devPtr);
  flagcxResult_t (*ipcMemHandleOpen)(flagcxIpcMemHandle_t handle, void **devPtr);
  flagcxResult_t (*ipcMemHandleClose)(void *devPtr);
  flagcxResult_t (*ipcMemHandleFree)(flagcxIpcMemHandle_t handle);
};
typedef struct flagcxDeviceHandle *flagcxDeviceHandle_t;

/* Deprecated: use flagcxDeviceHandleInit/Free. */
struct flagcxHandlerGroup {
  flagcxUniqueId_t uniqueId;
  flagcxComm_t comm;
  flagcxDeviceHandle_t devHandle;
};
typedef struct flagcxHandlerGroup *flagcxHandlerGroup_t;

flagcxResult_t flagcxDeviceHandleInit(flagcxDeviceHandle_t *devHandle);
flagcxResult_t flagcxDeviceHandleFree(flagcxDeviceHandle_t devHandle);
flagcxResult_t flagcxHandleInit(flagcxHandlerGroup_t *handler);
flagcxResult_t flagcxHandleFree(flagcxHandlerGroup_t handler);

size_t getFlagcxDataTypeSize(flagcxDataType_t dtype);
flagcxResult_t flagcxGetVersion(int *version);
const char *flagcxGetErrorString(flagcxResult_t result);
const char *flagcxGetLastError(flagcxComm_t comm);

/* Which allocator backs flagcxMemAlloc memory and its registrations.  Here
 * both name the same allocator (COMPATIBILITY.md): memory shareable with
 * same-host ranks on the host adapter, device memory on the CUDA adapter. */
typedef enum {
  flagcxMemCCL = 0,
  flagcxMemSHMEM = 1,
} flagcxMemAllocator_t;

/* C++ callers may leave the allocator out (flagcxMemCCL); C passes it. */
#ifdef __cplusplus
#define FLAGCX_ALLOCATOR_ARG flagcxMemAllocator_t allocator = flagcxMemCCL
#else
#define FLAGCX_ALLOCATOR_ARG flagcxMemAllocator_t allocator
#endif

/* Memory suited to registration on this process's device. */
flagcxResult_t flagcxMemAlloc(void **ptr, size_t size, FLAGCX_ALLOCATOR_ARG);
flagcxResult_t flagcxMemFree(void *ptr, FLAGCX_ALLOCATOR_ARG);

flagcxResult_t flagcxCommRegister(const flagcxComm_t comm, void *buff, size_t size,
                                  void **handle, FLAGCX_ALLOCATOR_ARG);
flagcxResult_t flagcxCommDeregister(const flagcxComm_t comm, void *handle,
                                    FLAGCX_ALLOCATOR_ARG);

#define FLAGCX_WIN_DEFAULT 0x00
#define FLAGCX_WIN_COLL_SYMMETRIC 0x01

flagcxResult_t flagcxCommWindowRegister(flagcxComm_t comm, void *buff, size_t size,
                                        flagcxWindow_t *win, int winFlags,
                                        FLAGCX_ALLOCATOR_ARG);
flagcxResult_t flagcxCommWindowDeregister(flagcxComm_t comm, flagcxWindow_t win,
                                          FLAGCX_ALLOCATOR_ARG);
#undef FLAGCX_ALLOCATOR_ARG

/* Communicator life cycle and queries. */
flagcxResult_t flagcxGetUniqueId(flagcxUniqueId_t uniqueId);
flagcxResult_t flagcxCommInitRank(flagcxComm_t *comm, int nranks,
                                  flagcxUniqueId_t commId, int rank);
flagcxResult_t flagcxCommFinalize(flagcxComm_t comm);
flagcxResult_t flagcxCommDestroy(flagcxComm_t comm);
flagcxResult_t flagcxCommAbort(flagcxComm_t comm);
flagcxResult_t flagcxCommSuspend(flagcxComm_t comm);
flagcxResult_t flagcxCommResume(flagcxComm_t comm);
flagcxResult_t flagcxCommGetAsyncError(flagcxComm_t comm, flagcxResult_t *asyncError);
flagcxResult_t flagcxCommCount(const flagcxComm_t comm, int *count);
flagcxResult_t flagcxCommUserRank(const flagcxComm_t comm, int *rank);
flagcxResult_t flagcxCommGetDeviceNumber(const flagcxComm_t comm, int *device);
flagcxResult_t flagcxIsHomoComm(flagcxComm_t comm, int *isHomo);
/* flagcx's own: on = 1 makes this communicator's reductions on floating types
 * (allreduce, reduce, reducescatter with Sum, Prod, Avg) the rank-ordered left
 * fold, bit for bit (docs/DETERMINISM.md); 0 turns that off.  Collective:
 * every rank calls it with the same value, before the communicator's first
 * collective (different values: flagcxInvalidUsage on every rank, the mode
 * unchanged).  The default is FLAGCX_DETERMINISTIC. */
flagcxResult_t flagcxCommSetDeterministic(flagcxComm_t comm, int on);

/* Elastic communicators (docs/ELASTIC.md), shaped as NCCL's.  Split is
 * collective over the parent (MPI_Comm_split: ranks ordered by key, then
 * parent rank; FLAGCX_SPLIT_NOCOLOR gives *newcomm = NULL).  Shrink is called
 * by the survivors only, all with the same exclude list; their new ranks are
 * their parent order.  Revoke makes in-flight and later operations fail on
 * every rank that reaches them.  GetUniqueId + Grow add ranks: existing ranks
 * call Grow with rank = -1 (the coordinator passes the id made by
 * flagcxCommGetUniqueId, the others may pass NULL), new ranks with comm =
 * NULL, the id and a rank >= the parent's size. */
#define FLAGCX_SPLIT_NOCOLOR  -1
#define FLAGCX_SHRINK_DEFAULT 0x00  /* every remaining rank is healthy and idle */
#define FLAGCX_SHRINK_ABORT   0x01  /* first abort what is in flight on the parent (after a failure) */
flagcxResult_t flagcxCommSplit(flagcxComm_t comm, int color, int key, flagcxComm_t *newcomm);
flagcxResult_t flagcxCommShrink(flagcxComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                flagcxComm_t *newcomm, int shrinkFlags);
flagcxResult_t flagcxCommGetUniqueId(flagcxComm_t comm, flagcxUniqueId *uniqueId);
flagcxResult_t flagcxCommGrow(flagcxComm_t comm, int nranks, const flagcxUniqueId *uniqueId,
                              int rank, flagcxComm_t *newcomm);
flagcxResult_t flagcxCommRevoke(flagcxComm_t comm, int revokeFlags);

/* Collectives: stream-ordered, they return once enqueued. */
flagcxResult_t flagcxBarrier(flagcxComm_t comm, flagcxStream_t stream);
flagcxResult_t flagcxReduce(const void *sendbuff, void *recvbuff, size_t count,
                            flagcxDataType_t datatype, flagcxRedOp_t op, int root,
                            flagcxComm_t comm, flagcxStream_t stream);
flagcxResult_t flagcxGather(const void *sendbuff, void *recvbuff, size_t count,
                            flagcxDataType_t datatype, int root, flagcxComm_t comm,
                            flagcxStream_t stream);
flagcxResult_t flagcxScatter(const void *sendbuff, void *recvbuff, size_t count,
                             flagcxDataType_t datatype, int root, flagcxComm_t comm,
                             flagcxStream_t stream);
flagcxResult_t flagcxBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                               flagcxDataType_t datatype, int root, flagcxComm_t comm,
                               flagcxStream_t stream);
flagcxResult_t flagcxAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                               flagcxDataType_t datatype, flagcxRedOp_t op,
                               flagcxComm_t comm, flagcxStream_t stream);
flagcxResult_t flagcxReduceScatter(const void *sendbuff, void *recvbuff,
                                   size_t recvcount, flagcxDataType_t datatype,
                                   flagcxRedOp_t op, flagcxComm_t comm,
                                   flagcxStream_t stream);
flagcxResult_t flagcxAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                               flagcxDataType_t datatype, flagcxComm_t comm,
                               flagcxStream_t stream);
flagcxResult_t flagcxAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                              flagcxDataType_t datatype, flagcxComm_t comm,
                              flagcxStream_t stream);
flagcxResult_t flagcxAlltoAllv(const void *sendbuff, size_t *sendcounts,
                               size_t *sdispls, void *recvbuff, size_t *recvcounts,
                               size_t *rdispls, flagcxDataType_t datatype,
                               flagcxComm_t comm, flagcxStream_t stream);
flagcxResult_t flagcxSend(const void *sendbuff, size_t count, flagcxDataType_t datatype,
                          int peer, flagcxComm_t comm, flagcxStream_t stream);
flagcxResult_t flagcxRecv(void *recvbuff, size_t count, flagcxDataType_t datatype,
                          int peer, flagcxComm_t comm, flagcxStream_t stream);
flagcxResult_t flagcxGroupStart(flagcxComm_t comm);
flagcxResult_t flagcxGroupEnd(flagcxComm_t comm);

/* One-sided operations (regions registered collectively, indexed by MrIdx). */
flagcxResult_t flagcxOneSideRegister(const flagcxComm_t comm, void *buff, size_t size);
flagcxResult_t flagcxOneSideSignalRegister(const flagcxComm_t comm, void *buff,
                                           size_t size, int ptrType);
flagcxResult_t flagcxOneSideStagingRegister(const flagcxComm_t comm, void *buff,
                                            size_t size);
flagcxResult_t flagcxOneSideStagingDeregister(const flagcxComm_t comm);
flagcxResult_t flagcxGet(flagcxComm_t comm, int peer, size_t srcOffset, size_t dstOffset,
                         size_t size, int srcMrIdx, int dstMrIdx);
flagcxResult_t flagcxPut(flagcxComm_t comm, int peer, size_t srcOffset, size_t dstOffset,
                         size_t size, int srcMrIdx, int dstMrIdx);
/* One operation of `count` puts, entry i from srcOffsets[i] of region
 * srcMrIdxs[i] to dstOffsets[i] of the peer's region dstMrIdxs[i]. */
flagcxResult_t flagcxBatchPut(flagcxComm_t comm, int peer, const size_t *srcOffsets,
                              const size_t *dstOffsets, const size_t *sizes,
                              const int *srcMrIdxs, const int *dstMrIdxs, size_t count);
/* Not in FlagCX 0.13's header (its user guide lists it): 8 bytes through the
 * staging region. */
flagcxResult_t flagcxPutValue(flagcxComm_t comm, int peer, uint64_t value,
                              size_t dstOffset, int dstMrIdx);

/* Window-based and stream-ordered: count elements of localbuff land at
 * peerWinOffset bytes into the peer's window, then the signal the peer keeps
 * for this rank grows by one.  flags: reserved, pass 0. */
flagcxResult_t flagcxPutSignal(const void *localbuff, size_t count,
                               flagcxDataType_t datatype, int peer, flagcxWindow_t peerWin,
                               size_t peerWinOffset, unsigned int flags, flagcxComm_t comm,
                               flagcxStream_t stream);
/* The signal alone. */
flagcxResult_t flagcxSignal(int peer, unsigned int flags, flagcxComm_t comm,
                            flagcxStream_t stream);

typedef struct {
  uint64_t opCnt; /* signals to wait for from `peer` */
  int peer;
} flagcxWaitSignalDesc_t;
/* The stream waits until, for every descriptor, opCnt further signals from
 * its peer have arrived.  nDesc 0 (descs may be NULL) does nothing. */
flagcxResult_t flagcxWaitSignal(int nDesc, const flagcxWaitSignalDesc_t *signalDescs,
                                flagcxComm_t comm, flagcxStream_t stream);
flagcxResult_t flagcxReadCounter(flagcxComm_t comm, uint64_t *count);
flagcxResult_t flagcxWaitCounter(flagcxComm_t comm, uint64_t target);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLAGCX_H_ */
