// The C ABI of flagcx_p2p.h (flagcxP2pRpc*), for ctypes: thin wrappers over
// the C++ entry points.  BatchWriteSync addresses both sides by absolute
// virtual address: the local region is found by address, the remote one in
// the table the connection holds (MakeDesc).
#include "base/base.h"
#include "p2p/p2p_internal.h"

using namespace flagcx;

extern "C" {

void *flagcxP2pRpcEngineCreate(void) { return flagcxP2pEngineCreate(); }

void flagcxP2pRpcEngineDestroy(void *engine) {
  flagcxP2pEngineDestroy(static_cast<FlagcxP2pEngine *>(engine));
}

int flagcxP2pRpcGetPort(void *engine) {
  return flagcxP2pEngineGetRpcPort(static_cast<FlagcxP2pEngine *>(engine));
}

int flagcxP2pRpcStartServer(void *engine) {
  return flagcxP2pEngineStartRpcServer(static_cast<FlagcxP2pEngine *>(engine));
}

int flagcxP2pRpcRegister(void *engine, uint64_t addr, uint64_t size, uint64_t *mrIdOut) {
  if (!mrIdOut) {
    WARN(kP2P, "flagcxP2pRpcRegister: mrIdOut is NULL");
    return -1;
  }
  FlagcxP2pMr mr = 0;
  int rc = flagcxP2pEngineReg(static_cast<FlagcxP2pEngine *>(engine), addr, size, mr);
  if (rc == 0) *mrIdOut = mr;
  return rc;
}

// Host memory: registration finds the kind by itself, so this is Register.
int flagcxP2pRpcRegisterHost(void *engine, uint64_t addr, uint64_t size, uint64_t *mrIdOut) {
  return flagcxP2pRpcRegister(engine, addr, size, mrIdOut);
}

void *flagcxP2pRpcGetConn(void *engine, const char *session) {
  return flagcxP2pEngineGetConn(static_cast<FlagcxP2pEngine *>(engine), session);
}

int flagcxP2pRpcBatchWriteSync(void *connPtr, int count, const uint64_t *srcVa,
                               const uint64_t *dstVa, const uint64_t *sizes) {
  auto *conn = static_cast<FlagcxP2pConn *>(connPtr);
  if (!conn || count < 0 || (count > 0 && (!srcVa || !dstVa || !sizes))) {
    WARN(kP2P, "flagcxP2pRpcBatchWriteSync: %s", !conn ? "conn is NULL"
                                                 : count < 0 ? "count is negative"
                                                             : "srcVa, dstVa or sizes is NULL");
    return -1;
  }
  std::vector<FlagcxP2pMr> mrs(static_cast<size_t>(count), 0);
  std::vector<void *> src;
  std::vector<size_t> len;
  std::vector<FlagcxP2pRdmaDesc> descs(static_cast<size_t>(count));
  for (int i = 0; i < count; i++) {
    if (sizes[i] > UINT32_MAX) {
      WARN(kP2P, "flagcxP2pRpcBatchWriteSync: sizes[%d] = %lu exceeds a descriptor's 4 GiB", i,
           static_cast<unsigned long>(sizes[i]));
      return -1;
    }
    if (flagcxP2pEngineMakeDesc(conn, dstVa[i], static_cast<uint32_t>(sizes[i]), &descs[i]) != 0)
      return -1;
    src.push_back(reinterpret_cast<void *>(srcVa[i]));
    len.push_back(sizes[i]);
  }
  return flagcxP2pEngineWriteVectorSync(conn, mrs, src, len, descs);
}

}  // extern "C"
