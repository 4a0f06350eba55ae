// The software device's memory regions (soft_device.cc): the table the
// "NIC" checks every access against, and where it reaches the bytes.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "net/ibverbs/rdma_device.h"

namespace flagcx::rdma {

// The device's memory regions, looked up by key (lkey == rkey here).
struct MrTable {
  std::mutex mu;
  std::map<uint32_t, Mr *> byKey;
  uint32_t nextKey = 0x100;
  // Where this device reaches [addr, addr+len) of region `key` with `need`
  // access; nullptr when the region does not cover it.  A region registered
  // from a file descriptor is reached through the device's own mapping of it.
  char *resolve(uint32_t key, uint64_t addr, uint64_t len, uint32_t need);
  bool check(uint32_t key, uint64_t addr, uint64_t len, uint32_t need) {
    return resolve(key, addr, len, need) != nullptr;
  }
};

class SoftMr final : public Mr {
 public:
  explicit SoftMr(std::shared_ptr<MrTable> t) : table_(std::move(t)) {}
  ~SoftMr() override {
    {
      std::lock_guard<std::mutex> lk(table_->mu);
      table_->byKey.erase(lkey);
    }
    if (mapped) munmap(mapped - mapSkew, length + mapSkew);
  }
  // regDmabuf: map `length` bytes of `fd` from `offset` (false: errno says why).
  bool map(int fd, uint64_t offset, size_t length) {
    size_t skew = offset % static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void *m = mmap(nullptr, length + skew, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                   static_cast<off_t>(offset - skew));
    if (m == MAP_FAILED) return false;
    mapped = static_cast<char *>(m) + skew;
    mapSkew = skew;
    return true;
  }
  char *mapped = nullptr;  // regDmabuf: the device's view of the bytes
  size_t mapSkew = 0;      // mapped - the page-aligned start of the mapping

 private:
  std::shared_ptr<MrTable> table_;
};

inline char *MrTable::resolve(uint32_t key, uint64_t addr, uint64_t len, uint32_t need) {
  std::lock_guard<std::mutex> lk(mu);
  auto it = byKey.find(key);
  if (it == byKey.end()) return nullptr;
  const auto *m = static_cast<const SoftMr *>(it->second);
  uint64_t lo = reinterpret_cast<uint64_t>(m->addr);
  if ((m->access & need) != need || addr < lo || len > m->length || addr - lo > m->length - len)
    return nullptr;
  return m->mapped ? m->mapped + (addr - lo) : reinterpret_cast<char *>(addr);
}

}  // namespace flagcx::rdma
