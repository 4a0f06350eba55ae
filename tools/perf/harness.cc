// The benchmark harness shared by every test_<op> (see harness.h).
//
// MPI launches the ranks and broadcasts flagcx's unique id; everything timed
// as "flagcx" moves through flagcx on a stream of the device handle.  With
// -m 1 the same buffers also go through MPI's own collective, in the same
// run and measured the same way, so that the ratio compares like with like.
// With -s the ranks split into groups (FlagCX's split mask), one communicator
// each; group 0 prints.
#include "harness.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "bench.h"
#include "flagcx.h"

namespace perf {

[[noreturn]] void fail(Bench &b, const char *what, flagcxResult_t r) {
  fprintf(stderr, "rank %d: %s failed: %s (%s)\n", b.worldRank, what, flagcxGetErrorString(r),
          flagcxGetLastError(b.comm));
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

namespace {

// Bytes this host can still give us (MemAvailable), or 0 when unknown.
uint64_t availableMemory() {
  FILE *f = fopen("/proc/meminfo", "r");
  uint64_t kb = 0;
  if (f) {
    char line[256];
    while (fgets(line, sizeof(line), f))
      if (sscanf(line, "MemAvailable: %lu kB", &kb) == 1) break;
    fclose(f);
  }
  if (kb) return kb * 1024;
  long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

std::string humanBytes(double b) {
  char s[32];
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) { b /= 1024; i++; }
  snprintf(s, sizeof(s), i ? "%.1f %s" : "%.0f %s", b, u[i]);
  return s;
}

// ---------------------------------------------------------------- timing
//
// A point (one size, dtype, reduction, root) is measured so that neither
// side is timed cold: run() makes one untimed call of every size first (MPI
// maps its shared-memory pages per size during its first calls, flagcx
// faults in its rings), then each point warms up each side for at least -w
// calls and -W ms, and sizes its timed runs from the warm-up's pace: at
// least -n calls and about -T ms each.  --repeat runs are taken, flagcx and
// MPI alternating, and the median, min and max are kept.  Every decision is
// made from values agreed over the group (MPI_Allreduce), so all ranks make
// the same number of calls.

double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The slowest rank's time of `calls` calls of `one` (then `finish`), per call.
template <class F, class G> double timeCalls(Bench &b, int calls, F &&one, G &&finish) {
  MPI_Barrier(b.mpiComm);
  double t0 = nowSec();
  for (int i = 0; i < calls; i++) one();
  finish();
  double mine = (nowSec() - t0) / std::max(calls, 1), slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, b.mpiComm);
  return slowest;
}

// Warms up (at least opt.warmup calls and opt.warmupMs) and returns the
// number of calls of one timed run.
template <class F, class G> int warmUp(Bench &b, F &&one, G &&finish) {
  const Options &o = b.opt;
  double spent = 0, perCall = 0;
  int done = 0, batch = std::max(o.warmup, 1);
  while (done < o.warmup || spent * 1e3 < o.warmupMs) {
    perCall = timeCalls(b, batch, one, finish);
    spent += perCall * batch;
    done += batch;
    batch = std::min(batch * 2, 1 << 20);
    if (o.warmup == 0 && o.warmupMs == 0) break;
  }
  long calls = o.iters;
  if (o.targetMs > 0 && perCall > 0)
    calls = std::max<long>(calls, std::lround(o.targetMs * 1e-3 / perCall));
  return static_cast<int>(std::min<long>(calls, 1 << 24));
}

struct Stats {
  std::vector<double> runs;  // seconds per call, one per repetition
  double median() const {
    std::vector<double> v = runs;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }
  double lo() const { return runs.empty() ? 0 : *std::min_element(runs.begin(), runs.end()); }
  double hi() const { return runs.empty() ? 0 : *std::max_element(runs.begin(), runs.end()); }
  // (max - min) / median in percent; "-" with fewer than two runs (not measured).
  std::string spreadText() const {
    double m = median();
    if (runs.size() < 2 || m <= 0) return "-";
    char t[32];
    snprintf(t, sizeof(t), "%.1f", (hi() - lo()) / m * 100);
    return t;
  }
};

// Checks, warms up and times one point; prints it.
void runRow(Bench &b, const Layout &l, const TypeInfo &t, const RedInfo &red, int root) {
  flagcxResult_t res;
  auto flagcxOne = [&] {
    if ((res = callFlagcx(b, l, t.dt, red.op, root)) != flagcxSuccess) fail(b, b.op->name, res);
  };
  auto flagcxDone = [&] {
    if ((res = b.dev->streamSynchronize(b.stream)) != flagcxSuccess) fail(b, "streamSynchronize", res);
  };
  const char *why = "";
  bool withMpi = b.opt.mpi && mpiCan(b, l, t, red, root, &why);
  auto mpiOne = [&] { callMpi(b, l, t, red, root); };
  auto nothing = [] {};
  size_t problems = 0;
  fillInputs(b, l, t.dt, red.op);
  flagcxOne();
  flagcxDone();
  if (b.opt.check) problems += verify(b, l, t, red, root, "first call");
  if (b.opt.print) printExcerpt(b, l, t.dt);
  int calls = warmUp(b, flagcxOne, flagcxDone), mpiCalls = withMpi ? warmUp(b, mpiOne, nothing) : 0;
  Stats fx, mpi;
  for (int rep = 0; rep < b.opt.repeat; rep++) {
    // Every timed run writes over the sentinel, and its last call's result is
    // checked.  In place each call works on the previous one's result, so
    // fresh inputs and one more call are checked instead.
    if (b.opt.check && !b.opt.inPlace) resetRecv(b, l, t.dt);
    fx.runs.push_back(timeCalls(b, calls, flagcxOne, flagcxDone));
    if (b.opt.check && b.opt.inPlace) {
      fillInputs(b, l, t.dt, red.op);
      flagcxOne();
      flagcxDone();
    }
    if (b.opt.check)
      problems += verify(b, l, t, red, root,
                         b.opt.inPlace ? "a call after a timed run"
                         : rep + 1 == b.opt.repeat ? "last timed run" : "timed run");
    if (withMpi) mpi.runs.push_back(timeCalls(b, mpiCalls, mpiOne, nothing));
  }
  unsigned long long mine = problems, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, b.mpiComm);
  b.totalWrong += static_cast<size_t>(all);
  if (!b.printer()) return;
  static std::set<std::string> whyShown;
  if (b.opt.mpi && !withMpi && whyShown.insert(why).second)
    printf("# no MPI baseline (-) where: %s\n", why);

  double factor = b.op->busFactor(b.nranks), time = fx.median(), mpiTime = mpi.median();
  double algbw = time > 0 ? static_cast<double>(l.bytes) / time / 1e9 : 0, busbw = algbw * factor;
  double mpiBus = mpiTime > 0 ? static_cast<double>(l.bytes) / mpiTime / 1e9 * factor : 0;
  if (b.opt.format == Format::FlagCX) {
    // FlagCX's own line (its perf tests' format), for the parsers of its logs.
    printf("Comm size: %zu bytes; Elapsed time: %lf sec; Algo bandwidth: %lf GB/s; Bus bandwidth: "
           "%lf GB/s\n", l.bytes, time, algbw, busbw);
  } else {
    char rootStr[16], wrongStr[24];
    snprintf(rootStr, sizeof(rootStr), b.op->rooted ? "%d" : "-", root);
    if (b.opt.check) snprintf(wrongStr, sizeof(wrongStr), "%llu", all);
    else snprintf(wrongStr, sizeof(wrongStr), "-");
    printf("%12zu %12zu %9s %5s %5s %11.2f %6s %8.3f %8.3f %7s", l.bytes,
           l.bytes / getFlagcxDataTypeSize(t.dt), t.name, b.op->reduces ? red.name : "none", rootStr,
           time * 1e6, fx.spreadText().c_str(), algbw, busbw, wrongStr);
    if (b.opt.mpi) {
      if (withMpi)
        printf("  %11.2f %6s %8.3f %6.2f", mpiTime * 1e6, mpi.spreadText().c_str(), mpiBus,
               time > 0 ? mpiTime / time : 0);
      else
        printf("  %11s %6s %8s %6s", "-", "-", "-", "-");
    }
    printf("\n");
  }
  fflush(stdout);
  if (b.json) {
    fprintf(b.json,
            "{\"op\":\"%s\",\"dtype\":\"%s\",\"redop\":\"%s\",\"root\":%d,\"nranks\":%d,"
            "\"bytes\":%zu,\"count\":%zu,\"algo\":\"%s\",\"repeat\":%d,\"iters\":%d,"
            "\"time_us\":%.3f,\"time_min_us\":%.3f,\"time_max_us\":%.3f,\"algbw\":%.4f,"
            "\"busbw\":%.4f,\"wrong\":%llu,\"transport\":\"%s\",\"hosts\":%d,\"in_place\":%s",
            b.op->name, t.name, b.op->reduces ? red.name : "none", b.op->rooted ? root : -1,
            b.nranks, l.bytes, l.bytes / getFlagcxDataTypeSize(t.dt), b.algoName.c_str(),
            b.opt.repeat, calls, time * 1e6, fx.lo() * 1e6, fx.hi() * 1e6, algbw, busbw,
            b.opt.check ? all : 0ull, b.transport.c_str(), b.nhosts, b.opt.inPlace ? "true" : "false");
    if (b.opt.mpi) {
      if (withMpi)
        fprintf(b.json, ",\"mpi_iters\":%d,\"mpi_time_us\":%.3f,\"mpi_time_min_us\":%.3f,"
                "\"mpi_time_max_us\":%.3f,\"mpi_busbw\":%.4f", mpiCalls, mpiTime * 1e6,
                mpi.lo() * 1e6, mpi.hi() * 1e6, mpiBus);
      else
        fprintf(b.json, ",\"mpi_time_us\":null,\"mpi_busbw\":null");
    }
    fprintf(b.json, "}\n");
    fflush(b.json);
  }
}

std::vector<size_t> sizeList(const Options &o) {
  std::vector<size_t> v;
  for (size_t s = o.minBytes; s <= o.maxBytes; s *= o.factor) {
    v.push_back(s);
    if (o.factor < 2 || s == 0 || s > SIZE_MAX / o.factor) break;
  }
  return v;
}

bool allOk(const Bench &b, bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, b.mpiComm);
  return all == 1;
}

// The benchmark's buffers: the device adapter's memory, or with -R 1
// flagcxMemAlloc memory registered with the communicator (FlagCX's -R 1), or
// with -M 1 plain heap memory (the host adapter's memory is a memfd mapping
// that same-host peers can map, the heap is not: it takes the shm rings).
// Called without the allocator argument, so that this compiles whether or
// not the header has FlagCX v0.13's trailing flagcxMemAllocator_t.
flagcxResult_t allocBuffer(Bench &b, void **p, void **reg, size_t bytes) {
  if (b.opt.heap) {
    *p = nullptr;
    return posix_memalign(p, 64, std::max<size_t>(bytes, 1)) == 0 ? flagcxSuccess : flagcxSystemError;
  }
  if (!b.opt.registerMode) return b.dev->deviceMalloc(p, bytes, flagcxMemDevice, nullptr);
  flagcxResult_t r = flagcxMemAlloc(p, bytes);
  if (r == flagcxSuccess) r = flagcxCommRegister(b.comm, *p, bytes, reg);
  return r;
}
void freeBuffer(Bench &b, void **p, void **reg) {
  if (!*p) return;
  if (b.opt.heap) {
    free(*p);
  } else if (!b.opt.registerMode) {
    b.dev->deviceFree(*p, flagcxMemDevice, nullptr);
  } else {
    if (*reg) flagcxCommDeregister(b.comm, *reg);
    flagcxMemFree(*p);
  }
  *p = *reg = nullptr;
}

// Makes the buffers large enough for size `s` (every rank calls this with
// the same s).  Buffers only grow, and only when this host can hold them:
// send + receive per local rank, as much again for the engine's staging
// buffers (it keeps scratch about as large as the message: 3.4 GiB anonymous
// memory per rank was seen at a 2 GiB allreduce), MPI's temporary with -m 1,
// and a reserve.  Returns false (buffers unchanged) when s does not fit;
// *needOut then says how much it would take on this host.
bool ensureBuffers(Bench &b, size_t s, uint64_t *needOut, uint64_t *availOut) {
  size_t sb, rb;
  bufferBytes(*b.op, s, b.nranks, &sb, &rb);
  if (b.send && sb <= b.sendCap && rb <= b.recvCap) return true;
  const uint64_t reserve = 1ull << 30;
  uint64_t L = static_cast<uint64_t>(b.localRanks);
  uint64_t need = L * (2 * (static_cast<uint64_t>(sb) + rb) + (b.opt.mpi ? rb : 0)) + reserve;
  // What we hold now comes back when we replace it.
  uint64_t avail = availableMemory();
  uint64_t held = L * (static_cast<uint64_t>(b.sendCap) + b.recvCap);
  *needOut = need;
  *availOut = avail ? avail + held : 0;
  if (!allOk(b, avail == 0 || need <= avail + held)) return false;
  freeBuffer(b, &b.send, &b.sendReg);
  freeBuffer(b, &b.recv, &b.recvReg);
  b.sendCap = b.recvCap = 0;
  flagcxResult_t r1 = allocBuffer(b, &b.send, &b.sendReg, sb);
  flagcxResult_t r2 = allocBuffer(b, &b.recv, &b.recvReg, rb);
  bool ok = r1 == flagcxSuccess && r2 == flagcxSuccess;
  if (ok && b.onDevice) {
    ok = b.dev->deviceMemset(b.send, 0, sb, flagcxMemDevice, nullptr) == flagcxSuccess &&
         b.dev->deviceMemset(b.recv, 0, rb, flagcxMemDevice, nullptr) == flagcxSuccess;
    b.hostSend.assign(sb, 0);
    b.hostRecv.assign(rb, 0);
    b.hsend = b.hostSend.data();
    b.hrecv = b.hostRecv.data();
  } else if (ok) {
    // Touch every page now, so that no timed call pays for first-touch faults.
    memset(b.send, 0, sb);
    memset(b.recv, 0, rb);
    b.hsend = b.send;
    b.hrecv = b.recv;
  }
  if (!allOk(b, ok)) {
    freeBuffer(b, &b.send, &b.sendReg);
    freeBuffer(b, &b.recv, &b.recvReg);
    return false;
  }
  b.sendCap = sb;
  b.recvCap = rb;
  return true;
}


// One untimed call of every size, flagcx and (with -m 1) MPI, before any
// point is timed: each side's first use of a size costs page faults and
// set-up that a warm-up per point would otherwise have to absorb.
void coldPass(Bench &b, const std::vector<size_t> &sizes, const TypeInfo &t, const RedInfo &red,
              int root) {
  size_t last = SIZE_MAX;
  for (size_t s : sizes) {
    uint64_t need = 0, avail = 0;
    if (!ensureBuffers(b, s, &need, &avail)) break;
    Layout l = layoutFor(*b.op, s, getFlagcxDataTypeSize(t.dt), b.nranks, b.rank);
    if (l.bytes == last) continue;
    last = l.bytes;
    flagcxResult_t res = callFlagcx(b, l, t.dt, red.op, root);
    if (res == flagcxSuccess) res = b.dev->streamSynchronize(b.stream);
    if (res != flagcxSuccess) fail(b, b.op->name, res);
    const char *why = "";
    if (b.opt.mpi && mpiCan(b, l, t, red, root, &why)) callMpi(b, l, t, red, root);
  }
}

// The command line's checks that need no MPI, and the variables they set
// before the library's first use: -1 to go on, else the exit status.
int checkCommandLine(const OpInfo *op, const char *prog, int argc, char **argv, Options *opt) {
  std::string err;
  int pr = parseOptions(argc, argv, opt, &err);
  if (pr == 3) {
    usage(stdout, prog);
    return 0;
  }
  if (pr == 2) {
    // Before MPI_Init: a bad command line never starts MPI.
    fprintf(stderr, "%s: %s\n", prog, err.c_str());
    usage(stderr, prog);
    return 2;
  }
  if (opt->inPlace && !hasInPlace(op->op)) {
    fprintf(stderr, "%s: -I 1: %s has no in-place form here\n", prog, op->name);
    return 2;
  }
  if (!opt->algo.empty()) {
    if (op->op == Op::SendRecv) {
      fprintf(stderr, "%s: -a: send/receive has no algorithm to force\n", prog);
      return 2;
    }
    // The library reads FLAGCX_* once, at its first use: set it before any flagcx call.
    std::string v = std::string(op->name) + ":" + opt->algo;
    setenv("FLAGCX_ALGO", v.c_str(), 1);
  }
  if (opt->deterministic) setenv("FLAGCX_DETERMINISTIC", "1", 1);
  return -1;
}

// After MPI_Init: this rank's group (FlagCX's split mask: worldRank & mask),
// its place on its host, and the hosts of its group.  False, after
// MPI_Finalize, when -r names no rank of some group.
bool joinGroup(Bench &b, const char *prog, std::vector<std::string> *hostNames) {
  const Options &opt = b.opt;
  int worldSize = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &b.worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  b.color = static_cast<int>(static_cast<uint64_t>(b.worldRank) & opt.splitMask);
  MPI_Comm_split(MPI_COMM_WORLD, b.color, b.worldRank, &b.mpiComm);
  MPI_Comm_rank(b.mpiComm, &b.rank);
  MPI_Comm_size(b.mpiComm, &b.nranks);
  int leader = b.rank == 0 ? 1 : 0;
  MPI_Allreduce(&leader, &b.ngroups, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_size(local, &b.localRanks);
  MPI_Comm_rank(local, &b.localRank);
  MPI_Comm_free(&local);
  // -r must name a rank of every group: refused before any flagcx call.
  int fewest = 0;
  MPI_Allreduce(&b.nranks, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (b.op->rooted && opt.root >= fewest) {
    if (b.worldRank == 0)
      fprintf(stderr, "%s: -r %d is out of range: %d ranks (0..%d)\n", prog, opt.root, fewest, fewest - 1);
    MPI_Finalize();
    return false;
  }
  char name[MPI_MAX_PROCESSOR_NAME] = "";
  int nameLen = 0;
  MPI_Get_processor_name(name, &nameLen);
  std::vector<char> all(static_cast<size_t>(b.nranks) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, b.mpiComm);
  std::set<std::string> hostSet;
  for (int r = 0; r < b.nranks; r++) hostSet.insert(&all[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  hostNames->assign(hostSet.begin(), hostSet.end());
  b.nhosts = static_cast<int>(hostNames->size());
  const char *forced = getenv("FLAGCX_ALGO");
  b.algoLabel = forced && *forced ? std::string("forced ") + forced : "auto";
  b.algoName = !opt.algo.empty() ? opt.algo : forced && *forced ? std::string(forced) : "auto";
  const char *shmOff = getenv("FLAGCX_SHM_DISABLE");
  b.transport = (shmOff && atoi(shmOff) != 0) || b.nhosts > 1 ? "socket" : "shm";
  return true;
}

// The device handle, the communicator, its stream and the -J file.  False,
// after MPI_Finalize, when -M 1 asks for heap buffers on a GPU adapter.
bool openComm(Bench &b, const char *prog) {
  flagcxResult_t r = flagcxDeviceHandleInit(&b.dev);
  if (r != flagcxSuccess) fail(b, "flagcxDeviceHandleInit", r);
  // A GPU adapter (FLAGCX_DEVICE=cuda, or auto with a GPU): buffers in
  // device memory, one device per local rank, round robin (ranks may share).
  char vendor[128] = "";
  b.dev->getVendor(vendor);
  b.onDevice = strcmp(vendor, "host") != 0;
  if (b.onDevice && b.opt.heap) {
    if (b.printer()) fprintf(stderr, "%s: -M 1: heap buffers need the host adapter, not %s\n", prog, vendor);
    MPI_Finalize();
    return false;
  }
  int ndev = 0;
  if (b.onDevice && b.dev->getDeviceCount(&ndev) == flagcxSuccess && ndev > 0 &&
      (r = b.dev->setDevice(b.localRank % ndev)) != flagcxSuccess)
    fail(b, "setDevice", r);
  flagcxUniqueId id;
  memset(&id, 0, sizeof(id));
  if (b.rank == 0 && (r = flagcxGetUniqueId(&id)) != flagcxSuccess) fail(b, "flagcxGetUniqueId", r);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, b.mpiComm);
  if ((r = flagcxCommInitRank(&b.comm, b.nranks, &id, b.rank)) != flagcxSuccess)
    fail(b, "flagcxCommInitRank", r);
  if ((r = b.dev->streamCreate(&b.stream)) != flagcxSuccess) fail(b, "streamCreate", r);
  if (b.printer() && !b.opt.json.empty()) {
    b.json = fopen(b.opt.json.c_str(), "a");
    if (!b.json) {
      fprintf(stderr, "%s: -J: cannot open %s: %s\n", prog, b.opt.json.c_str(), strerror(errno));
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  return true;
}

// Every row of the run: each type, reduction and root over the sizes, after
// one cold pass; a size that does not fit in memory ends its sweep, once
// reported.
void sweep(Bench &b) {
  const Options &opt = b.opt;
  std::vector<size_t> sizes = sizeList(opt);
  std::vector<int> roots;
  if (b.op->rooted) {
    if (opt.root >= 0) {
      roots = {opt.root};
    } else {
      for (int i = 0; i < b.nranks; i++) roots.push_back(i);
    }
  } else {
    roots = {-1};
  }
  std::vector<const RedInfo *> redops = opt.redops;
  if (!b.op->reduces) redops = {&kSum};
  if (!roots.empty()) coldPass(b, sizes, *opt.types[0], *redops[0], roots[0]);
  std::set<size_t> skipReported;
  for (const TypeInfo *t : opt.types)
    for (const RedInfo *red : redops)
      for (int root : roots) {
        size_t last = SIZE_MAX;
        for (size_t s : sizes) {
          uint64_t need = 0, avail = 0;
          if (!ensureBuffers(b, s, &need, &avail)) {
            if (b.printer() && skipReported.insert(s).second) {
              printf("# skipped %zu bytes and larger: %d rank(s) on this host need about %s "
                     "(buffers, library staging%s, 1 GiB reserve); %s available\n",
                     s, b.localRanks, humanBytes(static_cast<double>(need)).c_str(),
                     opt.mpi ? ", MPI temporaries" : "",
                     humanBytes(static_cast<double>(avail)).c_str());
              fflush(stdout);
            }
            break;
          }
          size_t ts = getFlagcxDataTypeSize(t->dt);
          Layout l = layoutFor(*b.op, s, ts, b.nranks, b.rank);
          if (l.bytes == last) continue;  // rounded to the same size as the previous row
          last = l.bytes;
          runRow(b, l, *t, *red, root);
        }
      }
}

// Frees what openComm made and ends MPI: the exit status, 1 when any group
// found a problem (each group's ranks agree on theirs).
int finish(Bench &b) {
  freeBuffer(b, &b.send, &b.sendReg);
  freeBuffer(b, &b.recv, &b.recvReg);
  b.dev->streamDestroy(b.stream);
  flagcxCommDestroy(b.comm);
  flagcxDeviceHandleFree(b.dev);
  if (b.json) fclose(b.json);
  unsigned long long mine = b.rank == 0 ? b.totalWrong : 0, total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (b.worldRank == 0) {
    printf("# %s: %llu wrong element(s), overrun(s) or changed send buffer(s)%s\n",
           total ? "FAILED" : "OK", total, b.opt.check ? "" : " (check off)");
    fflush(stdout);
  }
  MPI_Comm_free(&b.mpiComm);
  MPI_Finalize();
  return total ? 1 : 0;
}

}  // namespace

int run(const char *opName, int argc, char **argv) {
  const OpInfo *op = findOp(opName);
  if (!op) {
    fprintf(stderr, "unknown benchmark op %s\n", opName);
    return 2;
  }
  const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  Options opt;
  int rc = checkCommandLine(op, prog, argc, argv, &opt);
  if (rc >= 0) return rc;
  MPI_Init(&argc, &argv);
  Bench b;
  b.op = op;
  b.opt = opt;
  std::vector<std::string> hostNames;
  if (!joinGroup(b, prog, &hostNames) || !openComm(b, prog)) return 2;
  printHeader(b, hostNames, prog);
  sweep(b);
  return finish(b);
}

}  // namespace perf
