// Finding NVIDIA's libnccl copies in the process (forward.h says why).
#include "forward.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace ncclx {
namespace {

// NVIDIA's library calls some of these on every operation (2.28.3's
// ncclEnqueueCheck -> ncclCommEnsureReady -> ncclCommGetAsyncError): a dlsym
// per call cost ~0.3 us in the drop-in's time per call (docs/NCCL-DROPIN.md),
// so each library keeps the functions it was answered with, keyed by the
// call site's name literal (pointer compare; a few entry points only).
constexpr int kMaxNames = 16;
struct Lib {
  uintptr_t lo, hi;  // the span of its loaded segments
  void *handle;      // a reference taken with RTLD_NOLOAD (never a new load)
  std::atomic<const char *> names[kMaxNames];
  std::atomic<void *> fns[kMaxNames];
  std::atomic<int> used;
};
constexpr int kMaxLibs = 8;
Lib g_libs[kMaxLibs];
std::atomic<int> g_count{0};  // entries of g_libs published
std::atomic<unsigned long long> g_scannedAdds{~0ull};
std::mutex g_mu;

// The span of an object's loaded segments.
void span(const dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi) {
  *lo = UINTPTR_MAX;
  *hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &p = info->dlpi_phdr[i];
    if (p.p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + p.p_vaddr;
    if (a < *lo) *lo = a;
    if (a + p.p_memsz > *hi) *hi = a + p.p_memsz;
  }
}

// The loader's count of objects added so far (read from the first object).
int readAdds(dl_phdr_info *info, size_t size, void *arg) {
  unsigned long long adds = 0;
  if (size >= offsetof(dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds)) adds = info->dlpi_adds;
  *static_cast<unsigned long long *>(arg) = adds;
  return 1;
}

struct Seen {
  std::string name;
  uintptr_t lo, hi;
};

// Collects every libnccl.so* but the drop-in (dlopen waits until the walk is
// over: it must not run under the loader's list lock).
int visit(dl_phdr_info *info, size_t, void *arg) {
  const char *n = info->dlpi_name;
  if (!n || !*n) return 0;
  const char *base = std::strrchr(n, '/');
  base = base ? base + 1 : n;
  if (std::strncmp(base, "libnccl.so", 10) != 0) return 0;
  uintptr_t lo, hi;
  span(info, &lo, &hi);
  auto self = reinterpret_cast<uintptr_t>(&visit);
  if (self >= lo && self < hi) return 0;  // the drop-in itself
  static_cast<std::vector<Seen> *>(arg)->push_back(Seen{n, lo, hi});
  return 0;
}

const Lib *known(uintptr_t a) {
  int k = g_count.load(std::memory_order_acquire);
  for (int i = 0; i < k; i++)
    if (a >= g_libs[i].lo && a < g_libs[i].hi) return &g_libs[i];
  return nullptr;
}

}  // namespace

void *realNcclCaller(const void *ret, const char *name) {
  auto a = reinterpret_cast<uintptr_t>(ret);
  const Lib *lib = known(a);
  if (!lib) {
    unsigned long long adds = 0;
    dl_iterate_phdr(readAdds, &adds);
    if (adds == g_scannedAdds.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard<std::mutex> lock(g_mu);
    std::vector<Seen> seen;
    dl_iterate_phdr(visit, &seen);
    for (const Seen &x : seen) {
      int k = g_count.load(std::memory_order_relaxed);
      bool have = false;
      for (int i = 0; i < k; i++) have |= g_libs[i].lo == x.lo;
      if (have || k == kMaxLibs) continue;
      void *h = dlopen(x.name.c_str(), RTLD_NOW | RTLD_NOLOAD);
      if (!h) continue;
      Lib &l = g_libs[k];
      l.lo = x.lo;
      l.hi = x.hi;
      l.handle = h;
      l.used.store(0, std::memory_order_relaxed);
      g_count.store(k + 1, std::memory_order_release);
    }
    g_scannedAdds.store(adds, std::memory_order_release);
    lib = known(a);
    if (!lib) return nullptr;
  }
  Lib *l = const_cast<Lib *>(lib);
  int used = l->used.load(std::memory_order_acquire);
  for (int i = 0; i < used; i++)
    if (l->names[i].load(std::memory_order_relaxed) == name) return l->fns[i].load(std::memory_order_relaxed);
  void *f = dlsym(l->handle, name);
  std::lock_guard<std::mutex> lock(g_mu);
  used = l->used.load(std::memory_order_relaxed);
  if (f && used < kMaxNames) {
    l->names[used].store(name, std::memory_order_relaxed);
    l->fns[used].store(f, std::memory_order_relaxed);
    l->used.store(used + 1, std::memory_order_release);
  }
  return f;
}

}  // namespace ncclx
