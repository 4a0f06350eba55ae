// shared_mem.h: the hook through which host_memory.cc lends its map and
// unmap functions, and PeerMaps, the cache of mappings of a peer's shareable
// memory.
#include "base/shared_mem.h"

#include <algorithm>
#include <atomic>

namespace flagcx {

namespace {
std::atomic<const SharedMemOps *> g_ops{nullptr};  // constant-initialized: safe in static init
}

void setSharedMemOps(const SharedMemOps *ops) { g_ops.store(ops, std::memory_order_release); }
const SharedMemOps *sharedMemOps() { return g_ops.load(std::memory_order_acquire); }

PeerMaps::~PeerMaps() {
  if (const SharedMemOps *ops = sharedMemOps())
    for (Map &m : maps_) ops->unmap(m.base, m.len);
}

char *PeerMaps::get(const ShareRef &ref, uint64_t use) {
  for (Map &m : maps_)
    if (m.dev == ref.dev && m.ino == ref.ino && m.len == ref.mapLen) {
      m.used = use;
      return m.base;
    }
  const SharedMemOps *ops = sharedMemOps();
  void *base = nullptr;
  if (!ops || ops->map(ref, &base) != flagcxSuccess) return nullptr;
  maps_.push_back(Map{ref.dev, ref.ino, ref.mapLen, static_cast<char *>(base), use});
  return maps_.back().base;
}

void PeerMaps::dropStale(uint64_t peerFrees, uint64_t use, size_t keep) {
  if (peerFrees == seenFrees_ && maps_.size() <= keep) return;
  seenFrees_ = peerFrees;
  const SharedMemOps *ops = sharedMemOps();
  auto gone = std::remove_if(maps_.begin(), maps_.end(), [&](const Map &m) {
    if (m.used == use) return false;
    if (ops) ops->unmap(m.base, m.len);
    return true;
  });
  maps_.erase(gone, maps_.end());
}

}  // namespace flagcx
