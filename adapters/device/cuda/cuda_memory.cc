// Memory, IPC handles and per-device facts of the CUDA adapter.
//
//  - flagcxMemDevice: cudaMalloc (never the stream-ordered pool: pool memory
//    cannot be exported with cudaIpcGetMemHandle);
//  - flagcxMemHost: cudaHostAlloc, mapped and portable, so that
//    hostGetDevicePointer works and kernels can read it;
//  - flagcxMemManaged: cudaMallocManaged.
//  Allocation happens at once whatever the stream.  A free with a stream
//  waits for that stream first (cudaFree would anyway synchronize the device).
//
// IPC: a handle names the allocation that contains the pointer plus the
// offset inside it, so any pointer into a cudaMalloc buffer can be shared.
// Opening the same allocation twice in one process maps it once (counted).
#include <cstring>
#include <map>
#include <string>

#include "cuda_internal.h"

namespace flagcx::cuda {
namespace {

constexpr int kMaxDevices = 64;

struct Opened {
  void *base;
  int refs;
};
std::mutex g_ipcMu;
std::map<std::string, Opened> g_openedByHandle;        // allocation handle bytes -> mapping
std::map<uintptr_t, std::pair<std::string, int>> g_openedByPtr;  // user pointer -> (key, opens)

std::string keyOf(const cudaIpcMemHandle_t &h) {
  return std::string(reinterpret_cast<const char *>(&h), sizeof(h));
}

}  // namespace

flagcxResult_t cudaFail(const char *what, cudaError_t e) {
  cudaGetLastError();  // clear a non-sticky error so that later calls are not blamed
  return argError(flagcxUnhandledDeviceError, kInit, "%s failed: %s (%s)", what,
                  cudaGetErrorName(e), cudaGetErrorString(e));
}

int currentDevice() {
  int d = 0;
  if (cudaGetDevice(&d) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return d;
}

int smCount(int device) {
  static std::atomic<int> cache[kMaxDevices];
  if (device < 0 || device >= kMaxDevices) return 1;
  int v = cache[device].load(std::memory_order_relaxed);
  if (v > 0) return v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || v <= 0) {
    cudaGetLastError();
    v = 1;
  }
  cache[device].store(v, std::memory_order_relaxed);
  return v;
}

cudaStream_t internalStream(int device) {
  static std::mutex mu;
  static cudaStream_t streams[kMaxDevices];
  if (device < 0 || device >= kMaxDevices) device = 0;
  std::lock_guard<std::mutex> g(mu);
  if (!streams[device]) {
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
      cudaGetLastError();
      return cudaStreamPerThread;  // still never waits on the legacy stream
    }
    streams[device] = s;
  }
  return streams[device];
}

Where where(const void *p) {
  cudaPointerAttributes at{};
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    cudaGetLastError();
    return Where::HostPageable;
  }
  switch (at.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged: return Where::Device;
    case cudaMemoryTypeHost: return at.devicePointer ? Where::HostPinned : Where::HostPageable;
    default: return Where::HostPageable;
  }
}

const Driver &driver() {
  static const Driver d = [] {
    Driver r;
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &q) ==
            cudaSuccess && q == cudaDriverEntryPointSuccess && fn)
      r.streamWaitValue32 = reinterpret_cast<decltype(r.streamWaitValue32)>(fn);
    fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &q) ==
            cudaSuccess && q == cudaDriverEntryPointSuccess && fn)
      r.memGetAddressRange = reinterpret_cast<decltype(r.memGetAddressRange)>(fn);
    fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess && q == cudaDriverEntryPointSuccess && fn)
      r.memGetHandleForAddressRange = reinterpret_cast<decltype(r.memGetHandleForAddressRange)>(fn);
    cudaGetLastError();
    return r;
  }();
  return d;
}

flagcxResult_t memAlloc(void **ptr, size_t size, flagcxMemType_t type, flagcxStream_t) {
  if (!ptr) return argError(flagcxInvalidArgument, kAlloc, "deviceMalloc: ptr is NULL");
  *ptr = nullptr;
  switch (type) {
    case flagcxMemDevice:
      FLAGCX_CUDA_TRY("cudaMalloc", cudaMalloc(ptr, size));
      return flagcxSuccess;
    case flagcxMemHost:
      FLAGCX_CUDA_TRY("cudaHostAlloc",
                      cudaHostAlloc(ptr, size, cudaHostAllocMapped | cudaHostAllocPortable));
      return flagcxSuccess;
    case flagcxMemManaged:
      FLAGCX_CUDA_TRY("cudaMallocManaged", cudaMallocManaged(ptr, size, cudaMemAttachGlobal));
      return flagcxSuccess;
    default:
      return argError(flagcxInvalidArgument, kAlloc, "deviceMalloc: invalid memory type %d",
                      static_cast<int>(type));
  }
}

flagcxResult_t memFree(void *ptr, flagcxMemType_t type, flagcxStream_t stream) {
  if (!ptr) return flagcxSuccess;
  if (stream) {
    if (!streamValid(stream))
      return argError(flagcxInvalidArgument, kAlloc, "deviceFree: stream %p is not a live CUDA stream",
                      static_cast<void *>(stream));
    FLAGCX_CUDA_TRY("cudaStreamSynchronize (deviceFree)", cudaStreamSynchronize(nativeOf(stream)));
  }
  // The pointer says what it is; `type` is only a hint (a mismatch is logged).
  cudaPointerAttributes at{};
  cudaError_t e = cudaPointerGetAttributes(&at, ptr);
  if (e != cudaSuccess || at.type == cudaMemoryTypeUnregistered) {
    cudaGetLastError();
    return argError(flagcxInvalidArgument, kAlloc,
                    "deviceFree: %p is not CUDA memory (freed already, or not from deviceMalloc)", ptr);
  }
  if (at.type == cudaMemoryTypeHost) {
    if (type != flagcxMemHost) INFO(kAlloc, "deviceFree: %p is pinned host memory (type %d given)", ptr, type);
    FLAGCX_CUDA_TRY("cudaFreeHost", cudaFreeHost(ptr));
  } else {
    FLAGCX_CUDA_TRY("cudaFree", cudaFree(ptr));
  }
  return flagcxSuccess;
}

flagcxResult_t ipcCreate(flagcxIpcMemHandle_t *handle, size_t *size) {
  if (!handle) return argError(flagcxInvalidArgument, kAlloc, "ipcMemHandleCreate: handle is NULL");
  auto *h = new (std::nothrow) IpcHandle();
  if (!h) return argError(flagcxSystemError, kAlloc, "ipcMemHandleCreate: out of memory");
  memset(static_cast<void *>(h), 0, sizeof(*h));
  *handle = reinterpret_cast<flagcxIpcMemHandle_t>(h);
  if (size) *size = sizeof(IpcHandle);
  return flagcxSuccess;
}

flagcxResult_t ipcGet(flagcxIpcMemHandle_t handle, void *devPtr) {
  if (!handle) return argError(flagcxInvalidArgument, kAlloc, "ipcMemHandleGet: handle is NULL");
  if (!devPtr) return argError(flagcxInvalidArgument, kAlloc, "ipcMemHandleGet: devPtr is NULL");
  CUdeviceptr base = reinterpret_cast<CUdeviceptr>(devPtr);
  if (driver().memGetAddressRange) {
    size_t len = 0;
    CUresult r = driver().memGetAddressRange(&base, &len, reinterpret_cast<CUdeviceptr>(devPtr));
    if (r != CUDA_SUCCESS)
      return argError(flagcxInvalidArgument, kAlloc,
                      "ipcMemHandleGet: %p is not device memory (cuMemGetAddressRange: %d)", devPtr,
                      static_cast<int>(r));
  }
  IpcHandle h{};
  h.magic = IpcHandle::kMagic;
  FLAGCX_CUDA_TRY("cudaIpcGetMemHandle",
                  cudaIpcGetMemHandle(&h.mem, reinterpret_cast<void *>(base)));
  h.offset = reinterpret_cast<uintptr_t>(devPtr) - base;
  memcpy(static_cast<void *>(handle), &h, sizeof(h));
  return flagcxSuccess;
}

flagcxResult_t ipcOpen(flagcxIpcMemHandle_t handle, void **devPtr) {
  if (!handle) return argError(flagcxInvalidArgument, kAlloc, "ipcMemHandleOpen: handle is NULL");
  if (!devPtr) return argError(flagcxInvalidArgument, kAlloc, "ipcMemHandleOpen: devPtr is NULL");
  IpcHandle h;
  memcpy(&h, static_cast<const void *>(handle), sizeof(h));
  if (h.magic != IpcHandle::kMagic)
    return argError(flagcxInvalidArgument, kAlloc,
                    "ipcMemHandleOpen: not a CUDA IPC handle filled by ipcMemHandleGet");
  std::string key = keyOf(h.mem);
  std::lock_guard<std::mutex> g(g_ipcMu);
  auto it = g_openedByHandle.find(key);
  void *base;
  if (it != g_openedByHandle.end()) {
    base = it->second.base;
    it->second.refs++;
  } else {
    base = nullptr;
    FLAGCX_CUDA_TRY("cudaIpcOpenMemHandle",
                    cudaIpcOpenMemHandle(&base, h.mem, cudaIpcMemLazyEnablePeerAccess));
    g_openedByHandle[key] = Opened{base, 1};
  }
  void *user = static_cast<char *>(base) + h.offset;
  auto &slot = g_openedByPtr[reinterpret_cast<uintptr_t>(user)];
  slot.first = key;
  slot.second++;
  *devPtr = user;
  return flagcxSuccess;
}

flagcxResult_t ipcClose(void *devPtr) {
  std::lock_guard<std::mutex> g(g_ipcMu);
  auto it = g_openedByPtr.find(reinterpret_cast<uintptr_t>(devPtr));
  if (it == g_openedByPtr.end())
    return argError(flagcxInvalidArgument, kAlloc,
                    "ipcMemHandleClose: %p was not returned by ipcMemHandleOpen", devPtr);
  std::string key = it->second.first;
  if (--it->second.second == 0) g_openedByPtr.erase(it);
  auto o = g_openedByHandle.find(key);
  if (o != g_openedByHandle.end() && --o->second.refs == 0) {
    void *base = o->second.base;
    g_openedByHandle.erase(o);
    FLAGCX_CUDA_TRY("cudaIpcCloseMemHandle", cudaIpcCloseMemHandle(base));
  }
  return flagcxSuccess;
}

flagcxResult_t ipcFree(flagcxIpcMemHandle_t handle) {
  delete reinterpret_cast<IpcHandle *>(handle);
  return flagcxSuccess;
}

}  // namespace flagcx::cuda
