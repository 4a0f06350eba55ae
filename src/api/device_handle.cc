// flagcxDeviceHandleInit/Free and the deprecated flagcxHandleInit/Free.
//
// The table handed out is a heap copy of the selected adapter's static table,
// so that a program that patches a field of its copy cannot affect anybody
// else; flagcxDeviceHandleFree deletes that copy.
#include <mutex>
#include <new>

#include "adapters/adapters.h"
#include "base/base.h"

using namespace flagcx;

extern "C" flagcxResult_t flagcxDeviceHandleInit(flagcxDeviceHandle_t *devHandle) {
  if (!devHandle)
    return argError(flagcxInvalidArgument, kInit, "flagcxDeviceHandleInit: devHandle is NULL");
  *devHandle = nullptr;
  DeviceAdapter *dev = selectedAdapter();
  if (!dev) return flagcxInvalidUsage;  // selectedAdapter logged why
  auto *h = new (std::nothrow) flagcxDeviceHandle(*dev->handle());
  if (!h) return argError(flagcxSystemError, kInit, "flagcxDeviceHandleInit: out of memory");
  *devHandle = h;
  INFO(kInit, "device adapter: %s", dev->name());
  return flagcxSuccess;
}

extern "C" flagcxResult_t flagcxDeviceHandleFree(flagcxDeviceHandle_t devHandle) {
  if (!devHandle)
    return argError(flagcxInvalidArgument, kInit, "flagcxDeviceHandleFree: devHandle is NULL");
  delete devHandle;
  return flagcxSuccess;
}

extern "C" flagcxResult_t flagcxHandleInit(flagcxHandlerGroup_t *handler) {
  if (!handler) return argError(flagcxInvalidArgument, kInit, "flagcxHandleInit: handler is NULL");
  *handler = nullptr;
  static std::once_flag warned;
  std::call_once(warned, [] {
    WARN(kInit, "flagcxHandleInit/flagcxHandleFree are deprecated; use flagcxDeviceHandleInit/Free "
         "and your own flagcxUniqueId");
  });
  auto *g = new (std::nothrow) flagcxHandlerGroup();
  auto *id = new (std::nothrow) flagcxUniqueId();
  if (!g || !id) {
    delete g;
    delete id;
    return argError(flagcxSystemError, kInit, "flagcxHandleInit: out of memory");
  }
  g->uniqueId = id;
  g->comm = nullptr;
  flagcxResult_t r = flagcxDeviceHandleInit(&g->devHandle);
  if (r != flagcxSuccess) {
    delete id;
    delete g;
    return r;
  }
  *handler = g;
  return flagcxSuccess;
}

// Frees what flagcxHandleInit allocated; the communicator, if any, is the
// caller's to destroy first.
extern "C" flagcxResult_t flagcxHandleFree(flagcxHandlerGroup_t handler) {
  if (!handler) return argError(flagcxInvalidArgument, kInit, "flagcxHandleFree: handler is NULL");
  if (handler->devHandle) flagcxDeviceHandleFree(handler->devHandle);
  delete handler->uniqueId;
  delete handler;
  return flagcxSuccess;
}
