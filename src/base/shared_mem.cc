#include "base/shared_mem.h"

#include <atomic>

namespace flagcx {

namespace {
std::atomic<const SharedMemOps *> g_ops{nullptr};  // constant-initialized: safe in static init
}

void setSharedMemOps(const SharedMemOps *ops) { g_ops.store(ops, std::memory_order_release); }
const SharedMemOps *sharedMemOps() { return g_ops.load(std::memory_order_acquire); }

}  // namespace flagcx
