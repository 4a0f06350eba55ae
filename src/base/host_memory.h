// Host memory and its IPC handles: what the host device adapter allocates,
// and what the layers that share it between processes (net/shm, the
// executor's one-host paths, one-sided) map (src/base/host_memory.cc).
#pragma once
#include <cstddef>
#include <cstdint>

#include "base/shared_mem.h"
#include "flagcx.h"

namespace flagcx::host {

// Allocations of at least kShareableMin bytes, and all flagcxMemDevice /
// flagcxMemManaged allocations, are memfd mappings so that a sibling process
// can map them (ipcOpen); each keeps one file descriptor open until freed.
// Smaller flagcxMemHost buffers come from the heap.  flagcxMemHost memory is
// page-locked with mlock where RLIMIT_MEMLOCK allows it.  Every buffer is at
// least 64-byte aligned.
constexpr size_t kShareableMin = 64 * 1024;

flagcxResult_t memAlloc(void **ptr, size_t size, flagcxMemType_t type);
flagcxResult_t memFree(void *ptr);
// Whether ptr was returned by memAlloc and is not freed yet (tests, checks).
bool memIsOurs(const void *ptr);
// Whether [ptr, ptr+len) lies in one shareable (memfd) allocation of
// memAlloc, i.e. whether ipcGet can name it.
bool memShareable(const void *ptr, size_t len);
// Whether the page-locking of the buffer at ptr succeeded.
bool memIsLocked(const void *ptr);

// ShareRef (src/base/shared_mem.h): what a sibling process needs to map the
// shareable allocation holding a pointer.
using flagcx::ShareRef;
// Fills `ref` when [ptr, ptr+len) lies in one shareable allocation.
bool memShareRef(const void *ptr, size_t len, ShareRef *ref);
// Maps the whole allocation `ref` names (its offset is ignored) into this
// process; unmap with shareUnmap(base, ref.mapLen).  Fails with
// flagcxSystemError (cannot open or map) or flagcxInvalidArgument (the
// allocation is gone), each with one log line.
flagcxResult_t shareMap(const ShareRef &ref, void **base);
void shareUnmap(void *base, size_t mapLen);
// Shareable allocations freed by this process so far: a peer that keeps
// mappings of them drops its unused ones when this number moves.
uint64_t memFreeCount();

flagcxResult_t ipcCreate(flagcxIpcMemHandle_t *handle, size_t *size);
flagcxResult_t ipcGet(flagcxIpcMemHandle_t handle, void *devPtr);
flagcxResult_t ipcOpen(flagcxIpcMemHandle_t handle, void **devPtr);
// ipcOpen of a handle a peer sent: its memfd is looked up in process `pid`
// (the peer as the kernel identified it, Conn::peerPid), never in the
// process the handle names, and *bytes is how far the mapping reaches from
// the returned pointer (the allocation's end).
flagcxResult_t ipcOpenFrom(flagcxIpcMemHandle_t handle, int32_t pid, void **devPtr, size_t *bytes);
flagcxResult_t ipcClose(void *devPtr);
flagcxResult_t ipcFree(flagcxIpcMemHandle_t handle);

}  // namespace flagcx::host
