// The P2P engine of flagcx_p2p.h is not built yet (README, "Not yet"): every
// entry point logs once per call and reports failure the way its signature
// allows (NULL, -1, false), so programs link and fail cleanly.
#include "flagcx_p2p.h"

#include "base/log.h"

namespace {
void notYet(const char *fn) {
  WARN(flagcx::kP2P, "%s: the P2P engine is not supported yet (README, \"Not yet\")", fn);
}
}  // namespace

FlagcxP2pEngine *flagcxP2pEngineCreate() {
  notYet("flagcxP2pEngineCreate");
  return nullptr;
}
void flagcxP2pEngineDestroy(FlagcxP2pEngine *) { notYet("flagcxP2pEngineDestroy"); }
void flagcxP2pEngineStopAccept(FlagcxP2pEngine *) { notYet("flagcxP2pEngineStopAccept"); }
FlagcxP2pConn *flagcxP2pEngineConnect(FlagcxP2pEngine *, const char *, int, int, bool) {
  notYet("flagcxP2pEngineConnect");
  return nullptr;
}
FlagcxP2pConn *flagcxP2pEngineAccept(FlagcxP2pEngine *, char *, size_t, int *) {
  notYet("flagcxP2pEngineAccept");
  return nullptr;
}
bool flagcxP2pEngineConnIsLocal(FlagcxP2pConn *) {
  notYet("flagcxP2pEngineConnIsLocal");
  return false;
}
int flagcxP2pEngineReg(FlagcxP2pEngine *, uintptr_t, size_t, FlagcxP2pMr &) {
  notYet("flagcxP2pEngineReg");
  return -1;
}
void flagcxP2pEngineMrDestroy(FlagcxP2pEngine *, FlagcxP2pMr) { notYet("flagcxP2pEngineMrDestroy"); }
int flagcxP2pEnginePrepareDesc(FlagcxP2pEngine *, FlagcxP2pMr, const void *, size_t, char *) {
  notYet("flagcxP2pEnginePrepareDesc");
  return -1;
}
int flagcxP2pEngineRead(FlagcxP2pConn *, FlagcxP2pMr, const void *, size_t, FlagcxP2pRdmaDesc,
                        uint64_t *) {
  notYet("flagcxP2pEngineRead");
  return -1;
}
int flagcxP2pEngineWrite(FlagcxP2pConn *, FlagcxP2pMr, const void *, size_t, FlagcxP2pRdmaDesc,
                         uint64_t *) {
  notYet("flagcxP2pEngineWrite");
  return -1;
}
bool flagcxP2pEngineXferStatus(FlagcxP2pConn *, uint64_t) {
  notYet("flagcxP2pEngineXferStatus");
  return false;
}
