// Memory, registration and one-sided entry points.
#include "adapters/device/adapter.h"
#include "api/checks.h"

using namespace flagcx;

// Both allocators name the same memory here (COMPATIBILITY.md): there is no
// NVSHMEM heap, and the memory flagcxMemCCL gives is already what one-sided
// and zero-copy paths want.  An allocator that is neither is an error.
static flagcxResult_t checkAllocator(const char *fn, flagcxMemAllocator_t a) {
  if (a != flagcxMemCCL && a != flagcxMemSHMEM)
    return argError(flagcxInvalidArgument, kAlloc, "%s: allocator %d is not a flagcxMemAllocator_t",
                    fn, static_cast<int>(a));
  return flagcxSuccess;
}

extern "C" flagcxResult_t flagcxMemAlloc(void **ptr, size_t size, flagcxMemAllocator_t allocator) {
  API_CHECK(checkPtr("flagcxMemAlloc", "ptr", ptr));
  *ptr = nullptr;
  API_CHECK(checkAllocator("flagcxMemAlloc", allocator));
  // Far beyond any machine; also keeps the adapters' rounding from wrapping.
  if (size > (size_t(1) << 56))
    return argError(flagcxInvalidArgument, kAlloc, "flagcxMemAlloc: size %zu is not allocatable", size);
  DeviceAdapter *dev = selectedAdapter();
  if (!dev) return argError(flagcxInvalidUsage, kAlloc, "flagcxMemAlloc: no device adapter");
  return dev->handle()->deviceMalloc(ptr, size, flagcxMemDevice, nullptr);
}

extern "C" flagcxResult_t flagcxMemFree(void *ptr, flagcxMemAllocator_t allocator) {
  API_CHECK(checkAllocator("flagcxMemFree", allocator));
  if (ptr == nullptr) return flagcxSuccess;
  DeviceAdapter *dev = selectedAdapter();
  if (!dev) return argError(flagcxInvalidUsage, kAlloc, "flagcxMemFree: no device adapter");
  return dev->handle()->deviceFree(ptr, flagcxMemDevice, nullptr);
}

// Registration is a hint for zero-copy paths; every transport also works on
// unregistered memory, so the handle only remembers the buffer.
extern "C" flagcxResult_t flagcxCommRegister(const flagcxComm_t comm, void *buff, size_t size,
                                             void **handle, flagcxMemAllocator_t allocator) {
  API_CHECK(checkComm("flagcxCommRegister", comm));
  API_CHECK(checkPtr("flagcxCommRegister", "buff", buff));
  API_CHECK(checkPtr("flagcxCommRegister", "handle", handle));
  API_CHECK(checkAllocator("flagcxCommRegister", allocator));
  *handle = buff;
  return flagcxSuccess;
}

extern "C" flagcxResult_t flagcxCommDeregister(const flagcxComm_t comm, void *handle,
                                               flagcxMemAllocator_t allocator) {
  API_CHECK(checkComm("flagcxCommDeregister", comm));
  API_CHECK(checkPtr("flagcxCommDeregister", "handle", handle));
  API_CHECK(checkAllocator("flagcxCommDeregister", allocator));
  return flagcxSuccess;
}

#define NOT_YET(fn)                                                                \
  do {                                                                             \
    WARN(kInit, "%s: not supported yet (README, \"Not yet\": one-sided operations)", fn); \
    return flagcxNotSupported;                                                     \
  } while (0)

extern "C" flagcxResult_t flagcxCommWindowRegister(flagcxComm_t comm, void *, size_t,
                                                   flagcxWindow_t *, int, flagcxMemAllocator_t) {
  API_CHECK(checkComm("flagcxCommWindowRegister", comm));
  NOT_YET("flagcxCommWindowRegister");
}
extern "C" flagcxResult_t flagcxCommWindowDeregister(flagcxComm_t comm, flagcxWindow_t,
                                                     flagcxMemAllocator_t) {
  API_CHECK(checkComm("flagcxCommWindowDeregister", comm));
  NOT_YET("flagcxCommWindowDeregister");
}
extern "C" flagcxResult_t flagcxOneSideRegister(const flagcxComm_t comm, void *, size_t) {
  API_CHECK(checkComm("flagcxOneSideRegister", comm));
  NOT_YET("flagcxOneSideRegister");
}
extern "C" flagcxResult_t flagcxOneSideSignalRegister(const flagcxComm_t comm, void *, size_t, int) {
  API_CHECK(checkComm("flagcxOneSideSignalRegister", comm));
  NOT_YET("flagcxOneSideSignalRegister");
}
extern "C" flagcxResult_t flagcxOneSideStagingRegister(const flagcxComm_t comm, void *, size_t) {
  API_CHECK(checkComm("flagcxOneSideStagingRegister", comm));
  NOT_YET("flagcxOneSideStagingRegister");
}
extern "C" flagcxResult_t flagcxOneSideStagingDeregister(const flagcxComm_t comm) {
  API_CHECK(checkComm("flagcxOneSideStagingDeregister", comm));
  NOT_YET("flagcxOneSideStagingDeregister");
}
extern "C" flagcxResult_t flagcxGet(flagcxComm_t comm, int, size_t, size_t, size_t, int, int) {
  API_CHECK(checkComm("flagcxGet", comm));
  NOT_YET("flagcxGet");
}
extern "C" flagcxResult_t flagcxPut(flagcxComm_t comm, int, size_t, size_t, size_t, int, int) {
  API_CHECK(checkComm("flagcxPut", comm));
  NOT_YET("flagcxPut");
}
extern "C" flagcxResult_t flagcxBatchPut(flagcxComm_t comm, int, const size_t *, const size_t *,
                                         const size_t *, const int *, const int *, size_t) {
  API_CHECK(checkComm("flagcxBatchPut", comm));
  NOT_YET("flagcxBatchPut");
}
extern "C" flagcxResult_t flagcxPutSignal(const void *, size_t, flagcxDataType_t, int,
                                          flagcxWindow_t, size_t, unsigned int, flagcxComm_t comm,
                                          flagcxStream_t) {
  API_CHECK(checkComm("flagcxPutSignal", comm));
  NOT_YET("flagcxPutSignal");
}
extern "C" flagcxResult_t flagcxPutValue(flagcxComm_t comm, int, uint64_t, size_t, int) {
  API_CHECK(checkComm("flagcxPutValue", comm));
  NOT_YET("flagcxPutValue");
}
extern "C" flagcxResult_t flagcxSignal(int, unsigned int, flagcxComm_t comm, flagcxStream_t) {
  API_CHECK(checkComm("flagcxSignal", comm));
  NOT_YET("flagcxSignal");
}
extern "C" flagcxResult_t flagcxWaitSignal(int, const flagcxWaitSignalDesc_t *, flagcxComm_t comm,
                                           flagcxStream_t) {
  API_CHECK(checkComm("flagcxWaitSignal", comm));
  NOT_YET("flagcxWaitSignal");
}
extern "C" flagcxResult_t flagcxReadCounter(flagcxComm_t comm, uint64_t *) {
  API_CHECK(checkComm("flagcxReadCounter", comm));
  NOT_YET("flagcxReadCounter");
}
extern "C" flagcxResult_t flagcxWaitCounter(flagcxComm_t comm, uint64_t) {
  API_CHECK(checkComm("flagcxWaitCounter", comm));
  NOT_YET("flagcxWaitCounter");
}
