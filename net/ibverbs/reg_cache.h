// A registration cache: memory regions keyed by page-aligned address range,
// reused while they cover what is asked for, reference counted, and evicted
// least-recently-used once more than `capacity` unused regions are kept.
//
// Registering is expensive on hardware (pinning, a call into the kernel and
// the NIC), so a region registered once serves every later request inside
// it.  The owner of the memory must call invalidate() before it frees or
// remaps it: a cached region outliving its memory would let the NIC write
// into pages that now belong to something else.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>

#include "net/ibverbs/rdma_device.h"

namespace flagcx::rdma {

class RegCache {
 public:
  RegCache(Device *dev, size_t capacity) : dev_(dev), capacity_(capacity) {}
  ~RegCache();
  // A region covering [addr, addr+len) with at least `access`; release it
  // with put().  The returned pointer stays valid until then.
  flagcxResult_t get(void *addr, size_t len, uint32_t access, const Mr **out);
  void put(const Mr *mr);
  // The memory [addr, addr+len) is going away: unused regions overlapping it
  // are deregistered now, used ones as soon as they are put back.
  void invalidate(const void *addr, size_t len);

  struct Stats {
    uint64_t hits = 0, misses = 0, evictions = 0;
    size_t entries = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    std::unique_ptr<Mr> mr;
    uint64_t lo = 0, hi = 0;  // page-aligned range registered
    int refs = 0;
    bool stale = false;       // invalidated while in use
  };
  void trim();

  Device *dev_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;  // most recently used first
  Stats stats_;
};

}  // namespace flagcx::rdma
