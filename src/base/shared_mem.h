// Shareable host memory as the transports see it.  host_memory.h hands out
// memfd-backed buffers that a sibling process can map; the shm transport
// (net/shm) maps a peer's when a rendezvous message comes from one, through
// the functions host_memory.cc registers here at load time (sharedMemOps()).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

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

// One peer process's shareable allocations mapped into this one, kept
// across uses (host direct mode per peer, the shm transport per pipe).  A
// use carries a stamp; dropStale() unmaps the mappings the current use did
// not take once the peer has freed shareable memory (one of them may be
// what it freed: the mapping would keep it alive) or more than `keep` are
// held.  Identity is the file (dev, ino) and length, so a mapping is never
// taken for a newer allocation.
class PeerMaps {
 public:
  PeerMaps() = default;
  PeerMaps(const PeerMaps &) = delete;
  PeerMaps &operator=(const PeerMaps &) = delete;
  PeerMaps(PeerMaps &&o) noexcept : maps_(std::move(o.maps_)), seenFrees_(o.seenFrees_) {}
  ~PeerMaps();
  // The start of the allocation `ref` names, mapped now if needed; nullptr
  // when it cannot be mapped (the map function has logged why).
  char *get(const ShareRef &ref, uint64_t use);
  void dropStale(uint64_t peerFrees, uint64_t use, size_t keep);

 private:
  struct Map {
    uint64_t dev, ino, len;
    char *base;
    uint64_t used;  // stamp of the last use that took it
  };
  std::vector<Map> maps_;
  uint64_t seenFrees_ = 0;
};

}  // namespace flagcx
