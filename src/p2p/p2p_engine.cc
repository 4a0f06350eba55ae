// The P2P engine of flagcx_p2p.h is not built yet (README, "Not yet"): every
// entry point logs one line and reports failure the way its signature allows
// (NULL, -1, false, an empty vector), so programs link and fail cleanly.
// flagcxP2pGlobalConfig() is real: it reads the FLAGCX_P2P_* variables.
#include "flagcx_p2p.h"

#include "base/log.h"
#include "base/params.h"

using flagcx::Param;
using flagcx::paramInt;

namespace {
void notYet(const char *fn) {
  WARN(flagcx::kP2P, "%s: the P2P engine is not supported yet (README, \"Not yet\")", fn);
}
template <class T>
T fail(const char *fn, T value) {
  notYet(fn);
  return value;
}
}  // namespace

#define NOT_YET(value) return fail(__func__, value)
#define NOT_YET_VOID() notYet(__func__)

FlagcxP2pEngine *flagcxP2pEngineCreate() { NOT_YET(static_cast<FlagcxP2pEngine *>(nullptr)); }
void flagcxP2pEngineDestroy(FlagcxP2pEngine *) { NOT_YET_VOID(); }
void flagcxP2pEngineStopAccept(FlagcxP2pEngine *) { NOT_YET_VOID(); }
FlagcxP2pConn *flagcxP2pEngineConnect(FlagcxP2pEngine *, const char *, int, int, bool) {
  NOT_YET(static_cast<FlagcxP2pConn *>(nullptr));
}
int flagcxP2pEngineStartListener(FlagcxP2pConn *) { NOT_YET(-1); }
FlagcxP2pConn *flagcxP2pEngineAccept(FlagcxP2pEngine *, char *, size_t, int *) {
  NOT_YET(static_cast<FlagcxP2pConn *>(nullptr));
}
void flagcxP2pEngineConnDestroy(FlagcxP2pConn *) { NOT_YET_VOID(); }
bool flagcxP2pEngineConnIsLocal(FlagcxP2pConn *) { NOT_YET(false); }
int flagcxP2pEngineGetRpcPort(FlagcxP2pEngine *) { NOT_YET(-1); }
int flagcxP2pEngineStartRpcServer(FlagcxP2pEngine *) { NOT_YET(-1); }
FlagcxP2pConn *flagcxP2pEngineGetConn(FlagcxP2pEngine *, const char *) {
  NOT_YET(static_cast<FlagcxP2pConn *>(nullptr));
}
int flagcxP2pEngineReg(FlagcxP2pEngine *, uintptr_t, size_t, FlagcxP2pMr &) { NOT_YET(-1); }
void flagcxP2pEngineMrDestroy(FlagcxP2pEngine *, FlagcxP2pMr) { NOT_YET_VOID(); }
int flagcxP2pEnginePrepareDesc(FlagcxP2pEngine *, FlagcxP2pMr, const void *, size_t, char *) {
  NOT_YET(-1);
}
int flagcxP2pEngineUpdateDesc(FlagcxP2pRdmaDesc &, uint64_t, uint32_t) { NOT_YET(-1); }
int flagcxP2pEngineMakeDesc(FlagcxP2pConn *, uint64_t, uint32_t, FlagcxP2pRdmaDesc *) {
  NOT_YET(-1);
}
int flagcxP2pEngineRead(FlagcxP2pConn *, FlagcxP2pMr, const void *, size_t, FlagcxP2pRdmaDesc,
                        uint64_t *) {
  NOT_YET(-1);
}
int flagcxP2pEngineReadVector(FlagcxP2pConn *, std::vector<FlagcxP2pMr>, std::vector<void *>,
                              std::vector<size_t>, std::vector<FlagcxP2pRdmaDesc>, int,
                              uint64_t *, std::vector<char *>) {
  NOT_YET(-1);
}
int flagcxP2pEngineWrite(FlagcxP2pConn *, FlagcxP2pMr, const void *, size_t, FlagcxP2pRdmaDesc,
                         uint64_t *) {
  NOT_YET(-1);
}
int flagcxP2pEngineWriteVector(FlagcxP2pConn *, const std::vector<FlagcxP2pMr> &,
                               const std::vector<void *> &, const std::vector<size_t> &,
                               const std::vector<FlagcxP2pRdmaDesc> &, int, uint64_t *,
                               const std::vector<char *> &) {
  NOT_YET(-1);
}
int flagcxP2pEngineWriteVectorSync(FlagcxP2pConn *, const std::vector<FlagcxP2pMr> &,
                                   const std::vector<void *> &, const std::vector<size_t> &,
                                   const std::vector<FlagcxP2pRdmaDesc> &) {
  NOT_YET(-1);
}
int flagcxP2pEngineSend(FlagcxP2pConn *, FlagcxP2pMr, const void *, size_t, uint64_t *) {
  NOT_YET(-1);
}
int flagcxP2pEngineSendVector(FlagcxP2pConn *, std::vector<FlagcxP2pMr>,
                              std::vector<const void *>, std::vector<size_t>, int, uint64_t *) {
  NOT_YET(-1);
}
int flagcxP2pEngineRecv(FlagcxP2pConn *, FlagcxP2pMr, void *, size_t) { NOT_YET(-1); }
bool flagcxP2pEngineXferStatus(FlagcxP2pConn *, uint64_t) { NOT_YET(false); }
int flagcxP2pEngineGetMetadata(FlagcxP2pEngine *, char **metadataStr) {
  if (metadataStr) *metadataStr = nullptr;
  NOT_YET(-1);
}
std::vector<FlagcxP2pNotifyMsg> flagcxP2pEngineGetNotifs() {
  NOT_YET(std::vector<FlagcxP2pNotifyMsg>());
}
int flagcxP2pEngineSendNotif(FlagcxP2pConn *, FlagcxP2pNotifyMsg *) { NOT_YET(-1); }
int flagcxP2pEngineGetIpcInfo(FlagcxP2pEngine *, uintptr_t, char *, bool *hasIpc) {
  if (hasIpc) *hasIpc = false;
  NOT_YET(-1);
}
int flagcxP2pEngineUpdateIpcInfo(char *, uintptr_t, uintptr_t, size_t) { NOT_YET(-1); }

const FlagcxP2pGlobalConfig &flagcxP2pGlobalConfig() {
  static const FlagcxP2pGlobalConfig cfg = [] {
    FlagcxP2pGlobalConfig c;
    c.qpsPerConn = static_cast<int>(paramInt(Param::P2P_QPS_PER_CONN));
    c.workersPerPool = static_cast<int>(paramInt(Param::P2P_WORKERS_PER_POOL));
    c.shardCount = static_cast<int>(paramInt(Param::P2P_SHARD_COUNT));
    c.sharedCqDepth = static_cast<size_t>(paramInt(Param::P2P_CQ_DEPTH));
    c.maxWrPerPost = static_cast<size_t>(paramInt(Param::P2P_MAX_WR_PER_POST));
    c.maxRequests = static_cast<size_t>(paramInt(Param::P2P_MAX_REQUESTS));
    c.batchPollSize = static_cast<size_t>(paramInt(Param::P2P_BATCH_POLL_SIZE));
    c.sliceSize = static_cast<size_t>(paramInt(Param::P2P_SLICE_SIZE));
    c.fragmentLimit = static_cast<size_t>(paramInt(Param::P2P_FRAGMENT_LIMIT));
    c.maxSge = static_cast<size_t>(paramInt(Param::P2P_MAX_SGE));
    c.maxInline = static_cast<size_t>(paramInt(Param::P2P_MAX_INLINE));
    c.ibPort = static_cast<uint8_t>(paramInt(Param::P2P_IB_PORT));
    c.gidIndex = static_cast<int>(paramInt(Param::P2P_GID_INDEX));
    c.mtuLength = static_cast<int>(paramInt(Param::P2P_MTU));
    c.ibTrafficClass = static_cast<int>(paramInt(Param::P2P_IB_TC));
    c.retryCnt = static_cast<int>(paramInt(Param::P2P_RETRY_CNT));
    c.notifMaxPeers = static_cast<int>(paramInt(Param::P2P_NOTIF_MAX_PEERS));
    c.enableDestDeviceAffinity = paramInt(Param::P2P_DEST_DEV_AFFINITY) != 0;
    return c;
  }();
  return cfg;
}

void flagcxP2pDumpGlobalConfig() {
  const FlagcxP2pGlobalConfig &c = flagcxP2pGlobalConfig();
  INFO(flagcx::kP2P, "P2P config: qpsPerConn %d, workersPerPool %d, shardCount %d, cqDepth %zu, "
       "maxWrPerPost %zu, maxRequests %zu, batchPollSize %zu, sliceSize %zu, fragmentLimit %zu, "
       "maxSge %zu, maxInline %zu, ibPort %u, gidIndex %d, mtu %d, ibTc %d, retryCnt %d, "
       "notifMaxPeers %d, destDevAffinity %d", c.qpsPerConn, c.workersPerPool, c.shardCount,
       c.sharedCqDepth, c.maxWrPerPost, c.maxRequests, c.batchPollSize, c.sliceSize,
       c.fragmentLimit, c.maxSge, c.maxInline, static_cast<unsigned>(c.ibPort), c.gidIndex,
       c.mtuLength, c.ibTrafficClass, c.retryCnt, c.notifMaxPeers,
       c.enableDestDeviceAffinity ? 1 : 0);
}

extern "C" {
void *flagcxP2pRpcEngineCreate(void) { NOT_YET(static_cast<void *>(nullptr)); }
void flagcxP2pRpcEngineDestroy(void *) { NOT_YET_VOID(); }
int flagcxP2pRpcGetPort(void *) { NOT_YET(-1); }
int flagcxP2pRpcStartServer(void *) { NOT_YET(-1); }
int flagcxP2pRpcRegister(void *, uint64_t, uint64_t, uint64_t *) { NOT_YET(-1); }
int flagcxP2pRpcRegisterHost(void *, uint64_t, uint64_t, uint64_t *) { NOT_YET(-1); }
void *flagcxP2pRpcGetConn(void *, const char *) { NOT_YET(static_cast<void *>(nullptr)); }
int flagcxP2pRpcBatchWriteSync(void *, int, const uint64_t *, const uint64_t *,
                               const uint64_t *) {
  NOT_YET(-1);
}
}
