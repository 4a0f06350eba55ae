// C++ side of the FlagCX 0.13 surface, built through pkg-config against the
// staged install: the allocator argument defaults to flagcxMemCCL, and the
// device API (flagcx_kernel.h, flagcx_device_unified.h) compiles, links and
// refuses a NULL communicator cleanly, and the P2P engine (flagcx_p2p.h)
// compiles, links and starts.
#include <flagcx.h>
#include <flagcx_device_unified.h>
#include <flagcx_kernel.h>
#include <flagcx_p2p.h>

#include <cstdio>

#define EXPECT(cond)                                               \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                    \
    }                                                              \
  } while (0)

int main() {
  void *p = nullptr;
  EXPECT(flagcxMemAlloc(&p, 4096) == flagcxSuccess && p);  // allocator left out
  EXPECT(flagcxMemFree(p) == flagcxSuccess);
  flagcxDevCommRequirements reqs = FLAGCX_DEV_COMM_REQUIREMENTS_INITIALIZER;
  EXPECT(reqs.interContextCount == 4);
  flagcxDevComm_t dc = reinterpret_cast<flagcxDevComm_t>(&reqs);
  EXPECT(flagcxDevCommCreate(nullptr, &reqs, &dc) == flagcxInvalidArgument && dc == nullptr);
  flagcxDevMem_t dm;
  EXPECT(flagcxDevMemCreate(nullptr, nullptr, 0, nullptr, &dm) == flagcxInvalidArgument);
  EXPECT(flagcxDevReadSignal(nullptr, 0, 64, 0, FLAGCX_MEMORY_ORDER_ACQUIRE) == 0);
  FlagcxP2pEngine *engine = flagcxP2pEngineCreate();
  EXPECT(engine != nullptr && flagcxP2pEngineGetRpcPort(engine) > 0);
  flagcxP2pEngineDestroy(engine);
  void *rpcEngine = flagcxP2pRpcEngineCreate();
  EXPECT(rpcEngine != nullptr && flagcxP2pRpcGetPort(rpcEngine) > 0);
  flagcxP2pRpcEngineDestroy(rpcEngine);
  EXPECT(flagcxP2pEngineGetNotifs().empty());
  EXPECT(flagcxP2pGlobalConfig().qpsPerConn == 4);
  FlagcxP2pRdmaDesc d{};
  d.addr = 0x1234;
  d.rkey = 7;
  char buf[FLAGCX_P2P_DESC_SIZE];
  flagcxP2pSerializeRdmaDesc(d, buf);
  FlagcxP2pRdmaDesc back{};
  flagcxP2pDeserializeRdmaDesc(buf, &back);
  EXPECT(back.addr == 0x1234 && back.rkey == 7);
  std::printf("C++ surface: default allocator and device API answer; a P2P engine starts\n");
  return 0;
}
