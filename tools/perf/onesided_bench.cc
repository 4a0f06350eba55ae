// test_put, test_get, test_putsignal: the one-sided benchmarks (PERF_OP
// names which).  Ranks pair up (r and r^1; an even count); the even rank of
// a pair is the initiator.  The collective benchmarks' flags -b -e -f -w -W
// -n -T -c -m (options.cc: oneSidedTakes); the others are refused.
//
//  put:       n x flagcxPut of the size into the peer's region, then
//             flagcxWaitCounter; time per put.  Next to it: a local memcpy
//             of the same size between two flagcxMemAlloc buffers.
//  get:       the same with flagcxGet.
//  putsignal: ping-pong of flagcxPutSignal + flagcxWaitSignal (NULL stream);
//             half the round trip.  At -b 0 the first row is flagcxSignal
//             alone: the signal round trip.
// -m 1 runs MPI passive-target RMA in the same run (MPI_Win_allocate,
// MPI_Win_lock_all): MPI_Put / MPI_Get x n + MPI_Win_flush, and for
// putsignal MPI_Put + MPI_Win_flush + a zero-byte MPI_Send as the signal.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench.h"
#include "tools/version_line.h"

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

enum class Kind { Put, Get, PutSignal };

struct Ctx {
  Kind kind;
  perf::Options opt;
  int rank = 0, nranks = 0, peer = 0;
  bool initiator = false;
  flagcxComm_t comm = nullptr;
  flagcxDeviceHandle_t dev = nullptr;
  flagcxWindow_t win = nullptr;
  unsigned char *target = nullptr, *local = nullptr, *copyDst = nullptr;
  uint64_t counter = 0;
  MPI_Win mwin;
  unsigned char *mbuf = nullptr;  // MPI window memory (+8 bytes of counter)
};

[[noreturn]] void die(const Ctx &c, const char *what, flagcxResult_t r) {
  fprintf(stderr, "rank %d: %s failed: %s (%s)\n", c.rank, what, flagcxGetErrorString(r),
          flagcxGetLastError(nullptr));
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}
#define OK(c, call)                            \
  do {                                         \
    flagcxResult_t r_ = (call);                \
    if (r_ != flagcxSuccess) die(c, #call, r_); \
  } while (0)

// n operations of `bytes` through flagcx; returns seconds.
double runFlagcx(Ctx &c, size_t bytes, int n) {
  MPI_Barrier(MPI_COMM_WORLD);
  auto t0 = Clock::now();
  if (c.kind == Kind::PutSignal) {
    flagcxWaitSignalDesc_t d{1, c.peer};
    for (int i = 0; i < n; i++) {
      if (c.initiator) {
        if (bytes) OK(c, flagcxPutSignal(c.local, bytes, flagcxUint8, c.peer, c.win, 0, 0, c.comm, nullptr));
        else OK(c, flagcxSignal(c.peer, 0, c.comm, nullptr));
        OK(c, flagcxWaitSignal(1, &d, c.comm, nullptr));
      } else {
        OK(c, flagcxWaitSignal(1, &d, c.comm, nullptr));
        if (bytes) OK(c, flagcxPutSignal(c.local, bytes, flagcxUint8, c.peer, c.win, 0, 0, c.comm, nullptr));
        else OK(c, flagcxSignal(c.peer, 0, c.comm, nullptr));
      }
    }
  } else if (c.initiator) {
    for (int i = 0; i < n; i++) {
      if (c.kind == Kind::Put) OK(c, flagcxPut(c.comm, c.peer, 0, 0, bytes, 1, 0));
      else OK(c, flagcxGet(c.comm, c.peer, 0, 0, bytes, 0, 1));
    }
    c.counter += static_cast<uint64_t>(n);
    OK(c, flagcxWaitCounter(c.comm, c.counter));
  }
  double t = secs(t0, Clock::now());
  MPI_Barrier(MPI_COMM_WORLD);
  return t;
}

double runMemcpy(Ctx &c, size_t bytes, int n) {
  auto t0 = Clock::now();
  for (int i = 0; i < n; i++) {
    memcpy(c.copyDst, c.local, bytes);
    asm volatile("" ::: "memory");
  }
  return secs(t0, Clock::now());
}

double runMpi(Ctx &c, size_t bytes, int n) {
  MPI_Barrier(MPI_COMM_WORLD);
  auto t0 = Clock::now();
  if (c.kind == Kind::PutSignal) {
    // MPI has no put-with-notification: MPI_Put + MPI_Win_flush, then a
    // zero-byte message as the signal.  (Polling a counter updated with
    // MPI_Accumulate stalled MPICH/UCX here for seconds per call.)
    auto send = [&] {
      if (bytes) {
        MPI_Put(c.local, static_cast<int>(bytes), MPI_BYTE, c.peer, 0, static_cast<int>(bytes), MPI_BYTE, c.mwin);
        MPI_Win_flush(c.peer, c.mwin);
      }
      MPI_Send(nullptr, 0, MPI_BYTE, c.peer, 7, MPI_COMM_WORLD);
    };
    auto wait = [&] { MPI_Recv(nullptr, 0, MPI_BYTE, c.peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE); };
    for (int i = 0; i < n; i++) {
      if (c.initiator) {
        send();
        wait();
      } else {
        wait();
        send();
      }
    }
  } else if (c.initiator) {
    for (int i = 0; i < n; i++) {
      if (c.kind == Kind::Put)
        MPI_Put(c.local, static_cast<int>(bytes), MPI_BYTE, c.peer, 0, static_cast<int>(bytes), MPI_BYTE, c.mwin);
      else
        MPI_Get(c.local, static_cast<int>(bytes), MPI_BYTE, c.peer, 0, static_cast<int>(bytes), MPI_BYTE, c.mwin);
    }
    MPI_Win_flush(c.peer, c.mwin);
  }
  double t = secs(t0, Clock::now());
  MPI_Barrier(MPI_COMM_WORLD);
  return t;
}

unsigned char pat(size_t bytes, size_t i, int who) {
  return static_cast<unsigned char>((i * 7 + bytes + static_cast<size_t>(who) * 13) % 251 + 1);
}

// After a timed run: the bytes that must have moved, checked where they land.
size_t check(Ctx &c, size_t bytes) {
  size_t wrong = 0;
  if (c.kind == Kind::Put || c.kind == Kind::PutSignal) {
    bool lands = c.kind == Kind::PutSignal || !c.initiator;
    if (lands)
      for (size_t i = 0; i < bytes; i++) wrong += c.target[i] != pat(bytes, i, c.peer);
  } else if (c.initiator) {
    for (size_t i = 0; i < bytes; i++) wrong += c.local[i] != pat(bytes, i, c.peer);
  }
  return wrong;
}

// Warm up in doubling batches until a batch lasts about -W ms (at least -w
// calls); its pace sizes the timed run (at least -n calls, about -T ms).
// Every decision is taken on the slowest rank's time, so that both ranks of
// a ping-pong make the same number of calls.
int iterationsFor(Ctx &c, size_t bytes, double (*run)(Ctx &, size_t, int)) {
  long k = std::max(1, c.opt.warmup);
  double per = 0;
  for (;;) {
    double t = run(c, bytes, static_cast<int>(k)), worst = 0;
    MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    per = std::max(worst / static_cast<double>(k), 1e-9);
    if (worst * 1000 >= std::max(c.opt.warmupMs, 1) || k >= 1000000) break;
    k *= 2;
  }
  long n = std::max<long>(c.opt.iters, static_cast<long>(c.opt.targetMs / 1000.0 / per));
  return static_cast<int>(std::min<long>(n, 1000000));
}

// The command line: -1 to go on, else the exit status (before MPI_Init).
int checkCommandLine(Ctx &c, const char *prog, int argc, char **argv) {
  std::string err;
  int pr = perf::parseOptions(argc, argv, &c.opt, &err);
  if (pr == 3) {
    perf::usage(stdout, prog, true);
    return 0;
  }
  for (char f : c.opt.given)  // before a bad value's message: the flag itself is wrong here
    if (!perf::oneSidedTakes(f)) {
      err = std::string(f == 'N' ? "--repeat" : std::string("-") + f) + " is not a flag of the one-sided benchmarks";
      pr = 2;
      break;
    }
  if (pr == 0 && c.opt.factor < 2) {
    err = "-f " + std::to_string(c.opt.factor) + ": the one-sided benchmarks need a factor of at least 2";
    pr = 2;
  }
  if (pr == 2) {
    fprintf(stderr, "%s: %s\n", prog, err.c_str());
    perf::usage(stderr, prog, true);
    return 2;
  }
  return -1;
}

// The communicator, the three buffers, their registration (a window for
// putsignal, regions 0 and 1 otherwise) and, with -m 1, MPI's window.
void setUp(Ctx &c) {
  OK(c, flagcxDeviceHandleInit(&c.dev));
  flagcxUniqueId id;
  memset(&id, 0, sizeof(id));
  if (c.rank == 0) OK(c, flagcxGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  OK(c, flagcxCommInitRank(&c.comm, c.nranks, &id, c.rank));
  size_t cap = std::max<size_t>(c.opt.maxBytes, 8);
  OK(c, flagcxMemAlloc(reinterpret_cast<void **>(&c.target), cap, flagcxMemCCL));
  OK(c, flagcxMemAlloc(reinterpret_cast<void **>(&c.local), cap, flagcxMemCCL));
  OK(c, flagcxMemAlloc(reinterpret_cast<void **>(&c.copyDst), cap, flagcxMemCCL));
  memset(c.target, 0, cap);
  memset(c.copyDst, 0, cap);
  if (c.kind == Kind::PutSignal) {
    OK(c, flagcxCommWindowRegister(c.comm, c.target, cap, &c.win, FLAGCX_WIN_COLL_SYMMETRIC, flagcxMemCCL));
  } else {
    OK(c, flagcxOneSideRegister(c.comm, c.target, cap));  // region 0: the peer's target
    OK(c, flagcxOneSideRegister(c.comm, c.local, cap));   // region 1: my source / sink
  }
  if (c.opt.mpi) {
    MPI_Win_allocate(static_cast<MPI_Aint>(cap + 8), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &c.mbuf, &c.mwin);
    memset(c.mbuf, 0, cap + 8);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, c.mwin);
  }
}

void printHeader(const Ctx &c, const char *op, const char *prog) {
  if (c.rank != 0) return;
  const char *shmOff = getenv("FLAGCX_SHM_DISABLE"), *sw = getenv("FLAGCX_IB_SOFTWARE_DEVICE");
  printf("# flagcx %s one-sided benchmark: %s (%s); FlagCX API %s\n", FLAGCX_LIB_VERSION, op, prog,
         flagcxApiLevel().c_str());
  printf("# test_%s: %d rank(s) in pairs; transport: %s\n", op, c.nranks,
         sw && atoi(sw) == 2 ? "verbs (software device)"
         : shmOff && atoi(shmOff) ? "socket" : "shm");
  printf("# %10s %8s %12s %10s %12s%s%s %8s\n", "size(B)", "iters", "flagcx(us)", "GB/s",
         c.kind == Kind::PutSignal ? "" : "memcpy GB/s",
         c.opt.mpi ? "     MPI(us)" : "", c.opt.mpi ? "   MPI GB/s" : "", "wrong");
}

// One row: flagcx, memcpy and (with -m 1) MPI at one size, the slowest
// rank's times printed by rank 0; the wrong bytes of every rank.
size_t measure(Ctx &c, size_t bytes) {
  // Inputs: the initiator's source (put, putsignal) or the target's region (get).
  for (size_t i = 0; i < bytes; i++) c.local[i] = pat(bytes, i, c.rank);
  if (c.kind == Kind::Get)
    for (size_t i = 0; i < bytes; i++) c.target[i] = pat(bytes, i, c.rank);
  MPI_Barrier(MPI_COMM_WORLD);
  int n = iterationsFor(c, bytes, runFlagcx);
  double tf = runFlagcx(c, bytes, n) / n;
  size_t wrong = c.opt.check ? check(c, bytes) : 0;
  double tm = c.kind == Kind::PutSignal ? 0 : runMemcpy(c, bytes, n) / n;
  double tmpi = 0;
  if (c.opt.mpi) {
    for (size_t i = 0; i < bytes; i++) c.mbuf[i] = pat(bytes, i, c.rank);
    int nm = iterationsFor(c, bytes, runMpi);
    tmpi = runMpi(c, bytes, nm) / nm;
  }
  if (c.kind == Kind::PutSignal) {  // one way: half the round trip
    tf /= 2;
    tmpi /= 2;
  }
  double times[2] = {tf, tmpi}, worst[2];
  MPI_Allreduce(times, worst, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  unsigned long long w = wrong, wall = 0;
  MPI_Allreduce(&w, &wall, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (c.rank == 0) {
    printf("  %10zu %8d %12.2f %10.3f", bytes, n, worst[0] * 1e6, bytes / worst[0] / 1e9);
    if (c.kind != Kind::PutSignal) printf(" %12.3f", bytes / tm / 1e9);
    if (c.opt.mpi) printf(" %11.2f %10.3f", worst[1] * 1e6, bytes / worst[1] / 1e9);
    if (c.opt.check) printf(" %8llu\n", wall);
    else printf(" %8s\n", "-");
    fflush(stdout);
  }
  return wall;
}

}  // namespace

int main(int argc, char **argv) {
  const char *op = PERF_OP;
  Ctx c;
  c.kind = strcmp(op, "put") == 0 ? Kind::Put : strcmp(op, "get") == 0 ? Kind::Get : Kind::PutSignal;
  const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  int rc = checkCommandLine(c, prog, argc, argv);
  if (rc >= 0) return rc;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.nranks);
  if (c.nranks % 2 != 0) {
    if (c.rank == 0) fprintf(stderr, "%s: needs an even number of ranks (pairs r, r^1)\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  c.peer = c.rank ^ 1;
  c.initiator = c.rank % 2 == 0;
  setUp(c);
  printHeader(c, op, prog);
  size_t totalWrong = 0;
  std::vector<size_t> sizes;
  size_t f = c.opt.factor;
  if (c.opt.minBytes == 0) sizes.push_back(0);
  for (size_t s = std::max<size_t>(c.opt.minBytes, 1); s <= c.opt.maxBytes; s *= f) sizes.push_back(s);
  for (size_t bytes : sizes)
    if (c.kind == Kind::PutSignal || bytes != 0) totalWrong += measure(c, bytes);
  if (c.opt.mpi) {
    MPI_Win_unlock_all(c.mwin);
    MPI_Win_free(&c.mwin);
  }
  if (c.win) OK(c, flagcxCommWindowDeregister(c.comm, c.win, flagcxMemCCL));
  OK(c, flagcxCommDestroy(c.comm));
  flagcxMemFree(c.target, flagcxMemCCL);
  flagcxMemFree(c.local, flagcxMemCCL);
  flagcxMemFree(c.copyDst, flagcxMemCCL);
  if (c.rank == 0) printf("# wrong bytes: %zu%s\n", totalWrong, c.opt.check ? "" : " (check off)");
  MPI_Finalize();
  return totalWrong ? 1 : 0;
}
