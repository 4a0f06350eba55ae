// The device API of flagcx_kernel.h: declared for FlagCX 0.13 programs, not
// implemented yet (README, "Not supported"): one log line, flagcxNotSupported.
#include "flagcx_kernel.h"

#include "base/base.h"

namespace {
flagcxResult_t notYet(const char *fn) {
  WARN(flagcx::kInit, "%s: the device API (flagcx_kernel.h) is not supported yet "
       "(README, \"Not supported\")", fn);
  return flagcxNotSupported;
}
}  // namespace

extern "C" {
flagcxResult_t flagcxDevCommCreate(flagcxComm_t, const flagcxDevCommRequirements *,
                                   flagcxDevComm_t *devComm) {
  if (devComm) *devComm = nullptr;
  return notYet(__func__);
}
flagcxResult_t flagcxDevCommDestroy(flagcxComm_t, flagcxDevComm_t) { return notYet(__func__); }
flagcxResult_t flagcxDevMemCreate(flagcxComm_t, void *, size_t, flagcxWindow_t,
                                  flagcxDevMem_t *devMem) {
  if (devMem) *devMem = nullptr;
  return notYet(__func__);
}
flagcxResult_t flagcxDevMemDestroy(flagcxComm_t, flagcxDevMem_t) { return notYet(__func__); }
flagcxResult_t flagcxDevCommGetDevicePtr(flagcxDevComm_t, void **devPtr) {
  if (devPtr) *devPtr = nullptr;
  return notYet(__func__);
}
flagcxResult_t flagcxDevCommFreeDevicePtr(flagcxDevComm_t) { return notYet(__func__); }
flagcxResult_t flagcxDevMemGetDevicePtr(flagcxDevMem_t, void **devPtr) {
  if (devPtr) *devPtr = nullptr;
  return notYet(__func__);
}
flagcxResult_t flagcxDevMemFreeDevicePtr(flagcxDevMem_t) { return notYet(__func__); }
// Nothing of the device API is ever created, so there is nothing to clean.
flagcxResult_t flagcxCommCleanup(flagcxComm_t) { return flagcxSuccess; }
}
