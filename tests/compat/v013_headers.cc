// C++ side of the FlagCX 0.13 surface, built through pkg-config against the
// staged install: the allocator argument defaults to flagcxMemCCL, and the
// device API (flagcx_kernel.h) and the P2P engine (flagcx_p2p.h) compile, link
// and answer "not supported" cleanly.
#include <flagcx.h>
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
  EXPECT(flagcxDevCommCreate(nullptr, &reqs, &dc) == flagcxNotSupported && dc == nullptr);
  flagcxDevMem_t dm;
  EXPECT(flagcxDevMemCreate(nullptr, nullptr, 0, nullptr, &dm) == flagcxNotSupported);
  EXPECT(flagcxP2pEngineCreate() == nullptr);
  EXPECT(flagcxP2pRpcEngineCreate() == nullptr);
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
  std::printf("C++ surface: default allocator, device API and P2P stubs link and answer\n");
  return 0;
}
