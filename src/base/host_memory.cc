// Host memory: allocation (shareable memfd mappings or the heap, optional
// page-locking) and IPC handles that a sibling process opens.  The host
// device adapter hands it out; the layers that share it between processes
// (the shm transport, the executor's one-host paths, one-sided) reach it
// here, in base, below all of them.
//
// An IPC handle names the creator's memfd as /proc/<pid>/fd/<n> and carries
// the file's device and inode numbers, so that a handle whose buffer was
// freed (and whose fd number was reused) is refused instead of mapping the
// wrong file.  Opening needs the same rights as reading the creator's
// /proc/<pid>/fd (same user, dumpable process); pidfd_getfd is tried when
// that fails.
#include "base/host_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <map>
#include <mutex>

#include "base/log.h"

struct flagcxIpcMemHandle {
  uint64_t magic;
  flagcx::host::ShareRef ref;  // the creator's memfd and devPtr's offset in it
};

namespace flagcx::host {
namespace {

constexpr uint64_t kIpcMagic = 0x666c676378495043ull;  // "flgcxIPC"

struct Alloc {
  size_t size;
  size_t mapLen;  // 0: heap memory
  int fd;         // -1: heap memory
  bool locked;
  uint64_t dev, ino;
};

struct Opened {
  void *base;
  size_t mapLen;
};

std::mutex g_mu;
std::map<uintptr_t, Alloc> g_allocs;    // by base address
std::map<uintptr_t, Opened> g_opened;   // by the pointer ipcOpen returned
bool g_mlockWarned = false;
std::atomic<uint64_t> g_sharedFrees{0};

size_t pageSize() {
  static const size_t ps = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return ps;
}

size_t roundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// A memfd mapping; false (errno set) if any step fails.
bool mapShareable(size_t size, void **ptr, Alloc *a) {
  size_t len = roundUp(size, pageSize());
  int fd = memfd_create("flagcx-mem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return false;
  struct stat st;
  // Sealed at its size: a process that maps it (a peer) can rely on every
  // page staying there (a file that shrinks under a mapping is SIGBUS).
  if (ftruncate(fd, static_cast<off_t>(len)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
      fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return false;
  }
  void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    errno = e;
    return false;
  }
  *ptr = p;
  a->mapLen = len;
  a->fd = fd;
  a->dev = static_cast<uint64_t>(st.st_dev);
  a->ino = static_cast<uint64_t>(st.st_ino);
  return true;
}

const char *typeName(flagcxMemType_t t) {
  return t == flagcxMemHost ? "host" : t == flagcxMemDevice ? "device" : "managed";
}

// The allocation containing p, or end().
std::map<uintptr_t, Alloc>::iterator findContaining(const void *p) {
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  auto it = g_allocs.upper_bound(u);
  if (it == g_allocs.begin()) return g_allocs.end();
  --it;
  size_t extent = it->second.mapLen ? it->second.mapLen : it->second.size;
  if (u - it->first < extent || (u == it->first)) return it;
  return g_allocs.end();
}

int openPeerFd(int pid, int fd) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
  int f = open(path, O_RDWR | O_CLOEXEC);
  if (f >= 0) return f;
  int firstErr = errno;
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
  int pfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pfd >= 0) {
    f = static_cast<int>(syscall(SYS_pidfd_getfd, pfd, fd, 0));
    close(pfd);
    if (f >= 0) return f;
  }
#endif
  errno = firstErr;
  return -1;
}

}  // namespace

flagcxResult_t memAlloc(void **ptr, size_t size, flagcxMemType_t type) {
  if (!ptr) return argError(flagcxInvalidArgument, kAlloc, "deviceMalloc: ptr is NULL");
  if (type != flagcxMemHost && type != flagcxMemDevice && type != flagcxMemManaged)
    return argError(flagcxInvalidArgument, kAlloc, "deviceMalloc: invalid memory type %d",
                    static_cast<int>(type));
  *ptr = nullptr;
  if (size == 0) return flagcxSuccess;
  // Rounding up to a page must not wrap around to a tiny allocation.
  if (size > SIZE_MAX / 2)
    return argError(flagcxSystemError, kAlloc, "deviceMalloc: out of memory (%zu bytes, %s)", size,
                    typeName(type));
  Alloc a{size, 0, -1, false, 0, 0};
  void *p = nullptr;
  bool shareable = type != flagcxMemHost || size >= kShareableMin;
  if (shareable && !mapShareable(size, &p, &a)) {
    // Still usable, only not shareable with other processes.
    INFO(kAlloc, "deviceMalloc: no shareable mapping for %zu bytes (%s); using the heap", size,
         strerror(errno));
    p = nullptr;
  }
  if (!p) {
    // Page-granular for page-locked memory, so that unlocking one buffer can
    // never unlock a page another locked buffer shares.
    size_t align = type == flagcxMemHost ? pageSize() : 64;
    p = aligned_alloc(align, roundUp(size, align));
    if (!p)
      return argError(flagcxSystemError, kAlloc, "deviceMalloc: out of memory (%zu bytes, %s)",
                      size, typeName(type));
  }
  if (type == flagcxMemHost) {
    if (mlock(p, size) == 0) {
      a.locked = true;
    } else {
      std::lock_guard<std::mutex> g(g_mu);
      if (!g_mlockWarned) {
        g_mlockWarned = true;
        INFO(kAlloc, "deviceMalloc: mlock of %zu bytes failed (%s, see RLIMIT_MEMLOCK); "
             "host memory stays pageable", size, strerror(errno));
      }
    }
  }
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_allocs[reinterpret_cast<uintptr_t>(p)] = a;
  }
  *ptr = p;
  return flagcxSuccess;
}

flagcxResult_t memFree(void *ptr) {
  if (!ptr) return flagcxSuccess;
  Alloc a;
  {
    std::lock_guard<std::mutex> g(g_mu);
    auto it = g_allocs.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == g_allocs.end())
      return argError(flagcxInvalidArgument, kAlloc,
                      "deviceFree: %p was not returned by deviceMalloc (or is freed already)", ptr);
    a = it->second;
    g_allocs.erase(it);
  }
  if (a.locked) munlock(ptr, a.size);
  if (a.fd >= 0) {
    munmap(ptr, a.mapLen);
    close(a.fd);
    g_sharedFrees.fetch_add(1, std::memory_order_relaxed);
  } else {
    free(ptr);
  }
  return flagcxSuccess;
}

bool memIsOurs(const void *ptr) {
  std::lock_guard<std::mutex> g(g_mu);
  return g_allocs.count(reinterpret_cast<uintptr_t>(ptr)) != 0;
}

bool memShareable(const void *ptr, size_t len) {
  ShareRef ref;
  return memShareRef(ptr, len, &ref);
}

bool memIsLocked(const void *ptr) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(ptr));
  return it != g_allocs.end() && it->second.locked;
}

flagcxResult_t ipcCreate(flagcxIpcMemHandle_t *handle, size_t *size) {
  if (!handle) return argError(flagcxInvalidArgument, kAlloc, "ipcMemHandleCreate: handle is NULL");
  auto *h = new (std::nothrow) flagcxIpcMemHandle();
  if (!h) return argError(flagcxSystemError, kAlloc, "ipcMemHandleCreate: out of memory");
  *handle = h;
  if (size) *size = sizeof(flagcxIpcMemHandle);
  return flagcxSuccess;
}

bool memShareRef(const void *ptr, size_t len, ShareRef *ref) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = findContaining(ptr);
  if (it == g_allocs.end() || it->second.fd < 0) return false;
  size_t off = reinterpret_cast<uintptr_t>(ptr) - it->first;
  if (off > it->second.mapLen || len > it->second.mapLen - off) return false;
  *ref = ShareRef{static_cast<int32_t>(getpid()), it->second.fd, it->second.dev, it->second.ino,
                  it->second.mapLen, off, 0};
  return true;
}

uint64_t memFreeCount() { return g_sharedFrees.load(std::memory_order_relaxed); }

flagcxResult_t shareMap(const ShareRef &h, void **base) {
  int fd = openPeerFd(h.pid, h.fd);
  if (fd < 0)
    return argError(flagcxSystemError, kAlloc, "cannot open fd %d of process %d (%s)", h.fd, h.pid,
                    strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_dev) != h.dev ||
      static_cast<uint64_t>(st.st_ino) != h.ino ||
      static_cast<uint64_t>(st.st_size) < h.mapLen) {
    close(fd);
    return argError(flagcxInvalidArgument, kAlloc,
                    "the buffer of process %d behind this handle is gone (freed, or the handle "
                    "is stale)", h.pid);
  }
  // Only memory that cannot shrink under the mapping (memAlloc seals it):
  // any other file of the process could be cut short and fault this one.
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    close(fd);
    return argError(flagcxInvalidArgument, kAlloc,
                    "fd %d of process %d is not a sealed flagcx allocation; not mapped", h.fd,
                    h.pid);
  }
  void *p = mmap(nullptr, h.mapLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);  // the mapping keeps the memory alive
  if (p == MAP_FAILED)
    return argError(flagcxSystemError, kAlloc, "mmap of %llu bytes of process %d failed (%s)",
                    static_cast<unsigned long long>(h.mapLen), h.pid, strerror(e));
  *base = p;
  return flagcxSuccess;
}

void shareUnmap(void *base, size_t mapLen) { munmap(base, mapLen); }

namespace {
// The shm transport maps a peer's shareable buffers through these
// (src/base/shared_mem.h: net/ may not include the adapters).
const SharedMemOps g_sharedOps{memShareRef, shareMap, shareUnmap, memFreeCount};
const bool g_sharedOpsSet = (setSharedMemOps(&g_sharedOps), true);
}  // namespace

flagcxResult_t ipcGet(flagcxIpcMemHandle_t handle, void *devPtr) {
  if (!handle) return argError(flagcxInvalidArgument, kAlloc, "ipcMemHandleGet: handle is NULL");
  if (!devPtr) return argError(flagcxInvalidArgument, kAlloc, "ipcMemHandleGet: devPtr is NULL");
  ShareRef ref{};
  if (!memShareRef(devPtr, 0, &ref)) {
    bool ours;
    {
      std::lock_guard<std::mutex> g(g_mu);
      ours = findContaining(devPtr) != g_allocs.end();
    }
    if (!ours)
      return argError(flagcxInvalidArgument, kAlloc,
                      "ipcMemHandleGet: %p is not memory from deviceMalloc", devPtr);
    return argError(flagcxInvalidArgument, kAlloc,
                    "ipcMemHandleGet: %p is not shareable (host memory under %zu bytes, or no "
                    "memfd was available); allocate it with flagcxMemDevice",
                    devPtr, kShareableMin);
  }
  handle->magic = kIpcMagic;
  handle->ref = ref;
  return flagcxSuccess;
}

flagcxResult_t ipcOpen(flagcxIpcMemHandle_t handle, void **devPtr) {
  if (!handle) return argError(flagcxInvalidArgument, kAlloc, "ipcMemHandleOpen: handle is NULL");
  return ipcOpenFrom(handle, handle->ref.pid, devPtr, nullptr);
}

flagcxResult_t ipcOpenFrom(flagcxIpcMemHandle_t handle, int32_t pid, void **devPtr, size_t *bytes) {
  if (!handle) return argError(flagcxInvalidArgument, kAlloc, "ipcMemHandleOpen: handle is NULL");
  if (!devPtr) return argError(flagcxInvalidArgument, kAlloc, "ipcMemHandleOpen: devPtr is NULL");
  ShareRef h = handle->ref;
  h.pid = pid;
  if (handle->magic != kIpcMagic || h.mapLen == 0 || h.offset >= h.mapLen)
    return argError(flagcxInvalidArgument, kAlloc,
                    "ipcMemHandleOpen: not a host IPC handle filled by ipcMemHandleGet");
  void *p = nullptr;
  flagcxResult_t r = shareMap(h, &p);
  if (r != flagcxSuccess) return r;
  void *user = static_cast<char *>(p) + h.offset;
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_opened[reinterpret_cast<uintptr_t>(user)] = Opened{p, h.mapLen};
  }
  *devPtr = user;
  if (bytes) *bytes = h.mapLen - h.offset;
  return flagcxSuccess;
}

flagcxResult_t ipcClose(void *devPtr) {
  Opened o;
  {
    std::lock_guard<std::mutex> g(g_mu);
    auto it = g_opened.find(reinterpret_cast<uintptr_t>(devPtr));
    if (it == g_opened.end())
      return argError(flagcxInvalidArgument, kAlloc,
                      "ipcMemHandleClose: %p was not returned by ipcMemHandleOpen", devPtr);
    o = it->second;
    g_opened.erase(it);
  }
  munmap(o.base, o.mapLen);
  return flagcxSuccess;
}

flagcxResult_t ipcFree(flagcxIpcMemHandle_t handle) {
  delete handle;
  return flagcxSuccess;
}

}  // namespace flagcx::host
