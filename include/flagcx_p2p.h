/* flagcx P2P engine: point-to-point one-sided transfers for transfer frameworks.
 * C++ linkage, as in FlagCX's user guide. */
#ifndef FLAGCX_P2P_H_
#define FLAGCX_P2P_H_

#include <stddef.h>
#include <stdint.h>

struct FlagcxP2pEngine;
struct FlagcxP2pConn;
typedef uint64_t FlagcxP2pMr;
#define FLAGCX_P2P_DESC_BYTES 64
typedef struct {
  char data[FLAGCX_P2P_DESC_BYTES];
} FlagcxP2pRdmaDesc;

FlagcxP2pEngine *flagcxP2pEngineCreate();
void flagcxP2pEngineDestroy(FlagcxP2pEngine *engine);
void flagcxP2pEngineStopAccept(FlagcxP2pEngine *engine);
FlagcxP2pConn *flagcxP2pEngineConnect(FlagcxP2pEngine *engine, const char *ipAddr,
                                      int remoteGpuIdx, int remotePort, bool sameProcess);
FlagcxP2pConn *flagcxP2pEngineAccept(FlagcxP2pEngine *engine, char *ipAddrBuf,
                                     size_t ipAddrBufLen, int *remoteGpuIdx);
bool flagcxP2pEngineConnIsLocal(FlagcxP2pConn *conn);
int flagcxP2pEngineReg(FlagcxP2pEngine *engine, uintptr_t data, size_t size,
                       FlagcxP2pMr &mrId);
void flagcxP2pEngineMrDestroy(FlagcxP2pEngine *engine, FlagcxP2pMr mr);
int flagcxP2pEnginePrepareDesc(FlagcxP2pEngine *engine, FlagcxP2pMr mr, const void *data,
                               size_t size, char *descBuf);
int flagcxP2pEngineRead(FlagcxP2pConn *conn, FlagcxP2pMr mr, const void *data, size_t size,
                        FlagcxP2pRdmaDesc desc, uint64_t *transferId);
int flagcxP2pEngineWrite(FlagcxP2pConn *conn, FlagcxP2pMr mr, const void *data, size_t size,
                         FlagcxP2pRdmaDesc desc, uint64_t *transferId);
bool flagcxP2pEngineXferStatus(FlagcxP2pConn *conn, uint64_t transferId);

#endif /* FLAGCX_P2P_H_ */
