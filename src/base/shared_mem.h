// Shareable host memory as the layers below the adapters see it.  The host
// adapter (adapters/device/host) hands out memfd-backed buffers that a
// sibling process can map; the shm transport (net/shm) maps a peer's when a
// rendezvous message comes from one.  Transports may not include adapters
// (tools/check-layout.sh), so the adapter registers its functions here at
// load time and the transport calls them through sharedMemOps().
#pragma once
#include <cstddef>
#include <cstdint>

#include "flagcx.h"

namespace flagcx {

// What a sibling process needs to map the shareable allocation holding a
// pointer: the creator's memfd (as /proc/<pid>/fd/<fd>), the file's identity
// (so that a freed and reused fd number is refused), the length of the whole
// mapping and the pointer's offset in it.  Plain data, 48 bytes.
struct ShareRef {
  int32_t pid;
  int32_t fd;
  uint64_t dev, ino;
  uint64_t mapLen;
  uint64_t offset;
  uint64_t reserved;
};
static_assert(sizeof(ShareRef) == 48);

struct SharedMemOps {
  // Fills `ref` when [ptr, ptr+len) lies in one shareable allocation.
  bool (*ref)(const void *ptr, size_t len, ShareRef *ref);
  // Maps the whole allocation `ref` names; unmap(base, ref.mapLen).
  flagcxResult_t (*map)(const ShareRef &ref, void **base);
  void (*unmap)(void *base, size_t mapLen);
  // Shareable allocations this process has freed so far.
  uint64_t (*frees)();
};

// Registered once by the host adapter (a static initializer); nullptr before.
void setSharedMemOps(const SharedMemOps *ops);
const SharedMemOps *sharedMemOps();

}  // namespace flagcx
