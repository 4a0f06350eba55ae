// Memory, registration and one-sided entry points.
#include "adapters/adapters.h"
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

// Windows and one-sided operations: src/api/onesided_api.cc.
