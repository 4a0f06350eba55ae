// The header every test_<op> prints before its rows: the library and API
// level, ranks and hosts, transport, algorithm, buffers, the method and the
// columns (docs/PERFORMANCE.md, "The method").
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench.h"
#include "flagcx.h"
#include "tools/version_line.h"

namespace perf {

void printHeader(Bench &b, const std::vector<std::string> &hostNames, const char *prog) {
  if (!b.printer()) return;
  char vendor[128] = "?";
  b.dev->getVendor(vendor);
  char mpiVer[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0;
  MPI_Get_library_version(mpiVer, &len);
  for (char *p = mpiVer; *p; p++) {
    if (*p == '\n') { *p = 0; break; }
    if (*p == '\t') *p = ' ';
  }
  std::string hosts;
  for (auto &h : hostNames) hosts += (hosts.empty() ? "" : ",") + h;
  printf("# flagcx %s benchmark: %s (%s); FlagCX API %s\n", FLAGCX_LIB_VERSION, b.op->name, prog,
         flagcxApiLevel().c_str());
  printf("# ranks: %d on %d host(s) [%s], %d per host; device: %s\n", b.nranks, b.nhosts,
         hosts.c_str(), b.localRanks, vendor);
  const char *shmOff = getenv("FLAGCX_SHM_DISABLE");
  bool sock = shmOff && atoi(shmOff) != 0;
  printf("# transport: same-host peers %s%s", sock ? "socket" : "shm",
         sock ? " (FLAGCX_SHM_DISABLE=1)" : "");
  printf(", other-host peers socket%s\n", b.nhosts > 1 ? "" : " (none here)");
  printf("# algorithm: %s\n", b.algoLabel == "auto" ? "auto (see FLAGCX_DEBUG=INFO FLAGCX_DEBUG_SUBSYS=TUNING)"
                                                    : b.algoLabel.c_str());
  if (b.opt.splitMask)
    printf("# split mask 0x%llx: %d group(s), one communicator each; figures of group 0 (%d ranks)\n",
           static_cast<unsigned long long>(b.opt.splitMask), b.ngroups, b.nranks);
  const char *det = getenv("FLAGCX_DETERMINISTIC");
  if (det && atoi(det) == 1)
    printf("# deterministic reductions: on (FLAGCX_DETERMINISTIC=1%s)\n", b.opt.deterministic ? ", -D 1" : "");
  if (b.opt.registerMode)
    printf("# buffers: flagcxMemAlloc, registered with flagcxCommRegister (-R 1)\n");
  if (b.opt.heap)
    printf("# buffers: the heap (-M 1; no shared-memory direct mode, which needs the adapter's "
           "memory)\n");
  if (b.opt.inPlace)
    printf("# in place (-I 1): %s; MPI gets MPI_IN_PLACE\n",
           recvInsideSend(b.op->op) ? "the receive block is this rank's block of the send buffer"
           : b.op->blocked && b.op->op != Op::AlltoAll
               ? "the send block is this rank's block of the receive buffer"
               : "one buffer is both send and receive buffer");
  printf("# sizes %zu..%zu x%zu; a cold pass over every size first; per point warm-up >= %d calls "
         "and >= %d ms, then %d timed run(s) of >= %d calls and ~%d ms; check %s; MPI baseline %s\n",
         b.opt.minBytes, b.opt.maxBytes, b.opt.factor, b.opt.warmup, b.opt.warmupMs, b.opt.repeat,
         b.opt.iters, b.opt.targetMs, b.opt.check ? "on (first call and every timed run)" : "off",
         b.opt.mpi ? mpiVer : "off");
  if (b.opt.mpi) {
    const char *tls = getenv("UCX_TLS");
    printf("# MPI: UCX_TLS=%s UCX_NET_DEVICES=%s\n", tls ? tls : "(default)",
           getenv("UCX_NET_DEVICES") ? getenv("UCX_NET_DEVICES") : "(default)");
  }
  printf("# time: the median over the runs of the slowest rank's average per call; spread = "
         "(max - min) / median; algbw = bytes/time; busbw = algbw x %.3g", b.op->busFactor(b.nranks));
  printf("%s\n", b.opt.mpi ? "; ratio = MPI time / flagcx time (>1: flagcx faster)" : "");
  printf("# #wrong: wrong elements, overruns past the receive buffer and changed send buffers\n");
  if (b.opt.format == Format::FlagCX) {
    fflush(stdout);
    return;
  }
  printf("#\n# %10s %12s %9s %5s %5s %11s %6s %8s %8s %7s", "bytes", "count", "type", "redop", "root",
         "time(us)", "spread", "algbw", "busbw", "#wrong");
  if (b.opt.mpi) printf("  %11s %6s %8s %6s", "mpi(us)", "spread", "mpibusbw", "ratio");
  printf("\n#%12s %12s %9s %5s %5s %11s %6s %8s %8s %7s", "", "", "", "", "", "", "(%)", "(GB/s)", "(GB/s)", "");
  if (b.opt.mpi) printf("  %11s %6s %8s %6s", "", "(%)", "(GB/s)", "");
  printf("\n");
  fflush(stdout);
}

}  // namespace perf
