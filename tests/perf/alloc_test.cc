// Zero heap allocations per collective call after the first at a given size.
//
// This binary defines malloc and friends itself; a definition in the
// executable interposes the C library's for every shared object, libflagcx
// and libstdc++ (operator new) included, so no LD_PRELOAD is needed.  The
// wrappers count calls while the counter is armed and keep the first few
// call stacks, which the report prints.
//
// Two real processes (tests/common/harness.h) run every op repeatedly at a few
// sizes, on a stream and on the NULL stream: call 1 may allocate (first use of
// a size); calls 2..N must not, on any thread of the process.
#include <dlfcn.h>
#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "flagcx.h"
#include "tests/common/harness.h"

extern "C" {
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void __libc_free(void *);
}

namespace {

constexpr int kKeptStacks = 6, kDepth = 28;
std::atomic<bool> g_armed{false};
std::atomic<long> g_count{0};
void *g_stacks[kKeptStacks][kDepth];
int g_depth[kKeptStacks];
size_t g_sizes[kKeptStacks];
thread_local bool t_inHook = false;

inline void note(size_t n) {
  if (!g_armed.load(std::memory_order_relaxed) || t_inHook) return;
  t_inHook = true;
  long k = g_count.fetch_add(1, std::memory_order_relaxed);
  if (k < kKeptStacks) {
    g_sizes[k] = n;
    g_depth[k] = backtrace(g_stacks[k], kDepth);
  }
  t_inHook = false;
}

}  // namespace

extern "C" {
void *malloc(size_t n) {
  note(n);
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  note(a * b);
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  note(n);
  return __libc_realloc(p, n);
}
void free(void *p) { __libc_free(p); }
void *memalign(size_t al, size_t n) {
  note(n);
  return __libc_memalign(al, n);
}
void *aligned_alloc(size_t al, size_t n) {
  note(n);
  return __libc_memalign(al, n);
}
int posix_memalign(void **out, size_t al, size_t n) {
  note(n);
  void *p = __libc_memalign(al, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void *valloc(size_t n) {
  note(n);
  return __libc_memalign(static_cast<size_t>(sysconf(_SC_PAGESIZE)), n);
}
}

namespace {

enum class Op { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, Gather, Scatter, AlltoAll,
                AlltoAllv, SendRecv };
const struct {
  Op op;
  const char *name;
} kOps[] = {{Op::AllReduce, "allreduce"}, {Op::AllGather, "allgather"},
            {Op::ReduceScatter, "reducescatter"}, {Op::Broadcast, "broadcast"},
            {Op::Reduce, "reduce"}, {Op::Gather, "gather"}, {Op::Scatter, "scatter"},
            {Op::AlltoAll, "alltoall"}, {Op::AlltoAllv, "alltoallv"}, {Op::SendRecv, "sendrecv"}};

struct Bufs {
  void *send, *recv;
  size_t count;  // elements per rank block
  std::vector<size_t> sc, sd, rc, rd;
};

flagcxResult_t call(Op op, Bufs &b, int rank, int nranks, flagcxComm_t comm, flagcxStream_t s) {
  flagcxDataType_t dt = flagcxFloat32;
  switch (op) {
    case Op::AllReduce: return flagcxAllReduce(b.send, b.recv, b.count, dt, flagcxSum, comm, s);
    case Op::AllGather: return flagcxAllGather(b.send, b.recv, b.count, dt, comm, s);
    case Op::ReduceScatter: return flagcxReduceScatter(b.send, b.recv, b.count, dt, flagcxSum, comm, s);
    case Op::Broadcast: return flagcxBroadcast(b.send, b.recv, b.count, dt, 0, comm, s);
    case Op::Reduce: return flagcxReduce(b.send, b.recv, b.count, dt, flagcxSum, 0, comm, s);
    case Op::Gather: return flagcxGather(b.send, b.recv, b.count, dt, 0, comm, s);
    case Op::Scatter: return flagcxScatter(b.send, b.recv, b.count, dt, 0, comm, s);
    case Op::AlltoAll: return flagcxAlltoAll(b.send, b.recv, b.count, dt, comm, s);
    case Op::AlltoAllv:
      return flagcxAlltoAllv(b.send, b.sc.data(), b.sd.data(), b.recv, b.rc.data(), b.rd.data(), dt,
                             comm, s);
    case Op::SendRecv: {
      flagcxResult_t r = flagcxGroupStart(comm);
      if (r == flagcxSuccess) r = flagcxSend(b.send, b.count, dt, (rank + 1) % nranks, comm, s);
      if (r == flagcxSuccess) r = flagcxRecv(b.recv, b.count, dt, (rank + nranks - 1) % nranks, comm, s);
      flagcxResult_t e = flagcxGroupEnd(comm);
      return r != flagcxSuccess ? r : e;
    }
  }
  return flagcxInternalError;
}

// Prints the kept call stacks of the allocations counted so far, one line per
// allocation (innermost frame first), as a single write so ranks do not mix.
void report(int rank, const char *what, long n) {
  std::string out = "rank " + std::to_string(rank) + ": " + what + ": " + std::to_string(n) +
                    " allocation(s) in calls 2..N\n";
  for (int k = 0; k < kKeptStacks && k < n; k++) {
    out += "  " + std::to_string(g_sizes[k]) + " bytes:";
    // Frame 0 is note(), frame 1 the wrapper.
    for (int f = 2; f < g_depth[k]; f++) {
      Dl_info info{};
      void *pc = g_stacks[k][f];
      char buf[160];
      if (dladdr(pc, &info) && info.dli_fname) {
        const char *lib = strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname;
        if (strcmp(lib, "libc.so.6") == 0 && f > 2 && !info.dli_sname) continue;
        if (info.dli_sname)
          snprintf(buf, sizeof buf, " <- %s(%s)", lib, info.dli_sname);
        else
          snprintf(buf, sizeof buf, " <- %s+%#lx", lib,
                   static_cast<unsigned long>(static_cast<char *>(pc) - static_cast<char *>(info.dli_fbase)));
      } else {
        snprintf(buf, sizeof buf, " <- %p", pc);
      }
      out += buf;
      if (info.dli_sname && strncmp(info.dli_sname, "flagcx", 6) == 0 && islower(info.dli_sname[6]) == 0 &&
          info.dli_sname[6] >= 'A' && info.dli_sname[6] <= 'Z')
        break;  // the API entry point: enough
    }
    out += "\n";
  }
  (void)!write(2, out.data(), out.size());
}

int body(int rank, int nranks, flagcxUniqueId *id) {
  // Load the unwinder before anything is counted (its first use allocates).
  void *warm[4];
  backtrace(warm, 4);
  flagcxDeviceHandle_t dev;
  flagcxComm_t comm;
  flagcxStream_t stream;
  RANK_OK(flagcxDeviceHandleInit(&dev));
  RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
  RANK_OK(dev->streamCreate(&stream));
  const size_t sizes[] = {1024, 256 * 1024, 4u << 20};  // bytes per rank block
  const int iters = 10;
  size_t maxBytes = (4u << 20) * static_cast<size_t>(nranks) + 64 * static_cast<size_t>(nranks);
  Bufs b{};
  RANK_OK(dev->deviceMalloc(&b.send, maxBytes, flagcxMemDevice, nullptr));
  RANK_OK(dev->deviceMalloc(&b.recv, maxBytes, flagcxMemDevice, nullptr));
  memset(b.send, 1, maxBytes);
  memset(b.recv, 0, maxBytes);
  size_t n = static_cast<size_t>(nranks);
  b.sc.resize(n); b.sd.resize(n); b.rc.resize(n); b.rd.resize(n);
  int failures = 0;
  for (auto &o : kOps)
    for (size_t bytes : sizes)
      for (int useStream = 0; useStream < 2; useStream++) {
        b.count = bytes / sizeof(float);
        for (size_t p = 0; p < n; p++) {
          b.sc[p] = b.rc[p] = b.count;
          b.sd[p] = b.rd[p] = p * b.count;
        }
        flagcxStream_t s = useStream ? stream : nullptr;
        RANK_OK(call(o.op, b, rank, nranks, comm, s));  // the first call at this size
        RANK_OK(dev->streamSynchronize(stream));
        g_count.store(0);
        g_armed.store(true);
        flagcxResult_t r = flagcxSuccess;
        for (int i = 1; i < iters && r == flagcxSuccess; i++) {
          r = call(o.op, b, rank, nranks, comm, s);
          if (useStream && r == flagcxSuccess) r = dev->streamSynchronize(stream);
        }
        g_armed.store(false);
        RANK_OK(r);
        long got = g_count.load();
        char what[128];
        snprintf(what, sizeof(what), "%s %zu bytes/rank, %s stream", o.name, bytes,
                 useStream ? "a" : "the NULL");
        if (got) {
          report(rank, what, got);
          failures++;
        } else if (rank == 0) {
          printf("%s: 0 allocations in calls 2..%d\n", what, iters);
        }
      }
  RANK_OK(dev->deviceFree(b.send, flagcxMemDevice, nullptr));
  RANK_OK(dev->deviceFree(b.recv, flagcxMemDevice, nullptr));
  RANK_OK(dev->streamDestroy(stream));
  RANK_OK(flagcxCommDestroy(comm));
  RANK_OK(flagcxDeviceHandleFree(dev));
  return failures ? 3 : 0;
}

}  // namespace

int main() {
  harness::Result res = harness::run(2, body, {}, 300);
  if (!res.allOk()) {
    fprintf(stderr, "allocation test failed: %s\n", res.describe().c_str());
    return 1;
  }
  printf("no heap allocation in calls 2..N of any op, size or stream kind\n");
  return 0;
}
