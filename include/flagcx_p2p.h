/* flagcx P2P engine (FlagCX 0.13's flagcx_p2p.h): one-sided transfers between
 * processes for transfer frameworks (NIXL, Mooncake-style stores).
 *
 * C++ linkage, except the flagcxP2pRpc* functions at the end (a C ABI for
 * ctypes).  Names, argument order, defaults and struct layouts are FlagCX
 * 0.13's; flagcxP2pEngineXferState is flagcx's addition.  docs/P2P.md has a
 * tutorial and says how bytes move (TCP lanes, cross-memory attach on one
 * host, CUDA IPC for device memory).  Failures log one line and report as
 * the signature allows (NULL, -1, false). */
#ifndef FLAGCX_P2P_H_
#define FLAGCX_P2P_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <cstring>
#include <vector>

#define FLAGCX_P2P_MSG_SIZE 256
#define FLAGCX_P2P_DESC_SIZE 64
#define FLAGCX_P2P_IPC_INFO_SIZE 128

constexpr int kFlagcxP2pMaxQpsPerEngine = 8;

typedef struct FlagcxP2pEngine FlagcxP2pEngine;
typedef struct FlagcxP2pConn FlagcxP2pConn;
typedef uint64_t FlagcxP2pMr; /* a registered region */

/* What an initiator needs to know of a remote buffer: its address, length
 * and key.  nmsgs, rid and idx are the transport's own. */
struct FlagcxP2pRdmaDesc {
  uint64_t addr;
  uint32_t size;
  uint32_t rkey;
  uint32_t nmsgs;
  uint32_t rid;
  uint64_t idx;
  char padding[32];
};
static_assert(sizeof(FlagcxP2pRdmaDesc) == FLAGCX_P2P_DESC_SIZE,
              "FlagcxP2pRdmaDesc is 64 bytes on the wire");

/* Byte images of a descriptor, field by field at fixed offsets. */
inline void flagcxP2pSerializeRdmaDesc(const FlagcxP2pRdmaDesc &desc, char *buf) {
  std::memcpy(buf, &desc.addr, 8);
  std::memcpy(buf + 8, &desc.size, 4);
  std::memcpy(buf + 12, &desc.rkey, 4);
  std::memcpy(buf + 16, &desc.nmsgs, 4);
  std::memcpy(buf + 20, &desc.rid, 4);
  std::memcpy(buf + 24, &desc.idx, 8);
  std::memcpy(buf + 32, desc.padding, sizeof desc.padding);
}
inline void flagcxP2pDeserializeRdmaDesc(const char *buf, FlagcxP2pRdmaDesc *desc) {
  std::memcpy(&desc->addr, buf, 8);
  std::memcpy(&desc->size, buf + 8, 4);
  std::memcpy(&desc->rkey, buf + 12, 4);
  std::memcpy(&desc->nmsgs, buf + 16, 4);
  std::memcpy(&desc->rid, buf + 20, 4);
  std::memcpy(&desc->idx, buf + 24, 8);
  std::memcpy(desc->padding, buf + 32, sizeof desc->padding);
}

/* A transfer cut into slices; done when every slice reported. */
struct FlagcxTransferTask {
  std::atomic<uint64_t> sliceCount{0};
  std::atomic<uint64_t> doneSliceCount{0};
  std::atomic<uint64_t> failedCount{0};
  std::vector<struct FlagcxSlice *> sliceList;

  bool isAllDone() const {
    uint64_t total = sliceCount.load(std::memory_order_acquire);
    return total > 0 && doneSliceCount.load(std::memory_order_acquire) >= total;
  }
  bool hasErrors() const { return failedCount.load(std::memory_order_acquire) > 0; }
};

enum FlagcxSliceOp : uint8_t {
  FLAGCX_SLICE_OP_WRITE = 0,
  FLAGCX_SLICE_OP_READ = 1,
};

struct FlagcxSlice {
  uint64_t srcVa = 0; /* local: the source of a WRITE, the target of a READ */
  uint64_t dstVa = 0; /* remote */
  uint32_t length = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint8_t opcode = FLAGCX_SLICE_OP_WRITE;
  FlagcxTransferTask *task = nullptr;
  volatile int *qpDepth = nullptr;

  void markSuccess() {
    if (task) task->doneSliceCount.fetch_add(1, std::memory_order_release);
  }
  void markFailed() {
    if (!task) return;
    task->failedCount.fetch_add(1, std::memory_order_release);
    task->doneSliceCount.fetch_add(1, std::memory_order_release);
  }
};

struct FlagcxP2pNotifyMsg {
  char name[FLAGCX_P2P_MSG_SIZE]; /* the sending agent */
  char msg[FLAGCX_P2P_MSG_SIZE];
};

struct FlagcxP2pMd {
  FlagcxP2pNotifyMsg notifyData;
};

/* Engine life cycle. */
FlagcxP2pEngine *flagcxP2pEngineCreate();
void flagcxP2pEngineDestroy(FlagcxP2pEngine *engine);
void flagcxP2pEngineStopAccept(FlagcxP2pEngine *engine);

/* Connections. */
FlagcxP2pConn *flagcxP2pEngineConnect(FlagcxP2pEngine *engine, const char *ipAddr,
                                      int remoteGpuIdx, int remotePort, bool sameProcess = false);
int flagcxP2pEngineStartListener(FlagcxP2pConn *conn);
FlagcxP2pConn *flagcxP2pEngineAccept(FlagcxP2pEngine *engine, char *ipAddrBuf,
                                     size_t ipAddrBufLen, int *remoteGpuIdx);
void flagcxP2pEngineConnDestroy(FlagcxP2pConn *conn);
bool flagcxP2pEngineConnIsLocal(FlagcxP2pConn *conn);

/* RPC control plane: sessions are "host:port" strings. */
int flagcxP2pEngineGetRpcPort(FlagcxP2pEngine *engine);
int flagcxP2pEngineStartRpcServer(FlagcxP2pEngine *engine);
FlagcxP2pConn *flagcxP2pEngineGetConn(FlagcxP2pEngine *engine, const char *session);

/* Memory registration. */
int flagcxP2pEngineReg(FlagcxP2pEngine *engine, uintptr_t data, size_t size, FlagcxP2pMr &mrId);
void flagcxP2pEngineMrDestroy(FlagcxP2pEngine *engine, FlagcxP2pMr mr);

/* Descriptors. */
int flagcxP2pEnginePrepareDesc(FlagcxP2pEngine *engine, FlagcxP2pMr mr, const void *data,
                               size_t size, char *descBuf);
int flagcxP2pEngineUpdateDesc(FlagcxP2pRdmaDesc &desc, uint64_t remoteAddr, uint32_t size);
int flagcxP2pEngineMakeDesc(FlagcxP2pConn *conn, uint64_t remoteVa, uint32_t size,
                            FlagcxP2pRdmaDesc *desc);

/* One-sided reads and writes (non-blocking unless named Sync). */
int flagcxP2pEngineRead(FlagcxP2pConn *conn, FlagcxP2pMr mr, const void *data, size_t size,
                        FlagcxP2pRdmaDesc desc, uint64_t *transferId);
int flagcxP2pEngineReadVector(FlagcxP2pConn *conn, std::vector<FlagcxP2pMr> mrIds,
                              std::vector<void *> dstVec, std::vector<size_t> sizeVec,
                              std::vector<FlagcxP2pRdmaDesc> descs, int numIovs,
                              uint64_t *transferId, std::vector<char *> ipcBufs = {});
int flagcxP2pEngineWrite(FlagcxP2pConn *conn, FlagcxP2pMr mr, const void *data, size_t size,
                         FlagcxP2pRdmaDesc desc, uint64_t *transferId);
int flagcxP2pEngineWriteVector(FlagcxP2pConn *conn, const std::vector<FlagcxP2pMr> &mrIds,
                               const std::vector<void *> &dstVec,
                               const std::vector<size_t> &sizeVec,
                               const std::vector<FlagcxP2pRdmaDesc> &descs, int numIovs,
                               uint64_t *transferId, const std::vector<char *> &ipcBufs = {});
int flagcxP2pEngineWriteVectorSync(FlagcxP2pConn *conn, const std::vector<FlagcxP2pMr> &mrIds,
                                   const std::vector<void *> &srcVec,
                                   const std::vector<size_t> &sizeVec,
                                   const std::vector<FlagcxP2pRdmaDesc> &descs);

/* Two-sided. */
int flagcxP2pEngineSend(FlagcxP2pConn *conn, FlagcxP2pMr mr, const void *data, size_t size,
                        uint64_t *transferId);
int flagcxP2pEngineSendVector(FlagcxP2pConn *conn, std::vector<FlagcxP2pMr> mrIds,
                              std::vector<const void *> srcVec, std::vector<size_t> sizeVec,
                              int numIovs, uint64_t *transferId);
int flagcxP2pEngineRecv(FlagcxP2pConn *conn, FlagcxP2pMr mr, void *data, size_t maxSize);

bool flagcxP2pEngineXferStatus(FlagcxP2pConn *conn, uint64_t transferId);
/* flagcx's addition (not in FlagCX 0.13): 1 completed, 0 in flight, -1
 * failed or unknown.  XferStatus reads false for both of the last two; like
 * its true, an answer of 1 or -1 forgets the id. */
int flagcxP2pEngineXferState(FlagcxP2pConn *conn, uint64_t transferId);

/* "ip:port?gpu?notif_port"; the caller frees *metadataStr. */
int flagcxP2pEngineGetMetadata(FlagcxP2pEngine *engine, char **metadataStr);

/* Notifications. */
std::vector<FlagcxP2pNotifyMsg> flagcxP2pEngineGetNotifs();
int flagcxP2pEngineSendNotif(FlagcxP2pConn *conn, FlagcxP2pNotifyMsg *notifyMsg);

/* Same-node IPC helpers (FLAGCX_P2P_IPC_INFO_SIZE-byte buffers). */
int flagcxP2pEngineGetIpcInfo(FlagcxP2pEngine *engine, uintptr_t addr, char *ipcBuf,
                              bool *hasIpc);
int flagcxP2pEngineUpdateIpcInfo(char *ipcBuf, uintptr_t addr, uintptr_t baseAddr, size_t size);

/* Run-time configuration, read once from the FLAGCX_P2P_* variables named
 * beside each field (defaults as shown). */
struct FlagcxP2pGlobalConfig {
  int qpsPerConn = 4;                    /* FLAGCX_P2P_QPS_PER_CONN */
  int workersPerPool = 4;                /* FLAGCX_P2P_WORKERS_PER_POOL */
  int shardCount = 8;                    /* FLAGCX_P2P_SHARD_COUNT */
  size_t sharedCqDepth = 4096;           /* FLAGCX_P2P_CQ_DEPTH */
  size_t maxWrPerPost = 256;             /* FLAGCX_P2P_MAX_WR_PER_POST */
  size_t maxRequests = 256;              /* FLAGCX_P2P_MAX_REQUESTS */
  size_t batchPollSize = 64;             /* FLAGCX_P2P_BATCH_POLL_SIZE */
  size_t sliceSize = 1ull << 30;         /* FLAGCX_P2P_SLICE_SIZE */
  size_t fragmentLimit = 4 * 1024;       /* FLAGCX_P2P_FRAGMENT_LIMIT */
  size_t maxSge = 4;                     /* FLAGCX_P2P_MAX_SGE */
  size_t maxInline = 64;                 /* FLAGCX_P2P_MAX_INLINE */
  uint8_t ibPort = 1;                    /* FLAGCX_P2P_IB_PORT */
  int gidIndex = -1;                     /* FLAGCX_P2P_GID_INDEX (-1: auto) */
  int mtuLength = 4096;                  /* FLAGCX_P2P_MTU */
  int ibTrafficClass = -1;               /* FLAGCX_P2P_IB_TC (-1: off) */
  int retryCnt = 7;                      /* FLAGCX_P2P_RETRY_CNT */
  int notifMaxPeers = 64;                /* FLAGCX_P2P_NOTIF_MAX_PEERS */
  bool enableDestDeviceAffinity = false; /* FLAGCX_P2P_DEST_DEV_AFFINITY */
};
const FlagcxP2pGlobalConfig &flagcxP2pGlobalConfig();
void flagcxP2pDumpGlobalConfig();

/* C ABI (ctypes). */
extern "C" {
void *flagcxP2pRpcEngineCreate(void);
void flagcxP2pRpcEngineDestroy(void *engine);
int flagcxP2pRpcGetPort(void *engine);
int flagcxP2pRpcStartServer(void *engine);
int flagcxP2pRpcRegister(void *engine, uint64_t addr, uint64_t size, uint64_t *mrIdOut);
int flagcxP2pRpcRegisterHost(void *engine, uint64_t addr, uint64_t size, uint64_t *mrIdOut);
void *flagcxP2pRpcGetConn(void *engine, const char *session);
int flagcxP2pRpcBatchWriteSync(void *conn, int count, const uint64_t *srcVa,
                               const uint64_t *dstVa, const uint64_t *sizes);
}

#endif /* FLAGCX_P2P_H_ */
