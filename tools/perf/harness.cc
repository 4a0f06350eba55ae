// The benchmark harness shared by every test_<op> (see harness.h).
//
// MPI launches the ranks and broadcasts flagcx's unique id; everything timed
// as "flagcx" moves through flagcx on a stream of the device handle.  With
// -m 1 the same buffers also go through MPI's own collective, in the same
// run, so that the ratio compares like with like.
#include "harness.h"

#include <getopt.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "data.h"
#include "flagcx.h"

namespace perf {
namespace {

// ---------------------------------------------------------------- the table

enum class Op { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, Gather, Scatter,
                AlltoAll, AlltoAllv, SendRecv };

// Sizes follow nccl-tests: `bytes` is the largest buffer of the call (the
// gathered output, the scattered input, the whole alltoall buffer) and a
// "blocked" op moves nranks blocks of bytes/nranks.  Bus bandwidth factors
// are nccl-tests' too.
struct OpInfo {
  const char *name;
  Op op;
  bool reduces, rooted, blocked;
  bool sendIsFull, recvIsFull;  // buffer holds all nranks blocks (else one)
  double (*busFactor)(int n);
};

double allFactor(int n) { return 2.0 * (n - 1) / n; }
double partFactor(int n) { return static_cast<double>(n - 1) / n; }
double oneFactor(int) { return 1.0; }

const OpInfo kOps[] = {
    {"allreduce", Op::AllReduce, true, false, false, true, true, allFactor},
    {"allgather", Op::AllGather, false, false, true, false, true, partFactor},
    {"reducescatter", Op::ReduceScatter, true, false, true, true, false, partFactor},
    {"broadcast", Op::Broadcast, false, true, false, true, true, oneFactor},
    {"reduce", Op::Reduce, true, true, false, true, true, oneFactor},
    {"gather", Op::Gather, false, true, true, false, true, partFactor},
    {"scatter", Op::Scatter, false, true, true, true, false, partFactor},
    {"alltoall", Op::AlltoAll, false, false, true, true, true, partFactor},
    {"alltoallv", Op::AlltoAllv, false, false, true, true, true, partFactor},
    {"sendrecv", Op::SendRecv, false, false, false, true, true, oneFactor},
};

struct TypeInfo {
  const char *name;
  flagcxDataType_t dt;
  MPI_Datatype mpiReduce;  // MPI_DATATYPE_NULL: MPI cannot reduce it
  MPI_Datatype mpiMove;    // same size, for data movement only
};

const TypeInfo kTypes[] = {
    {"int8", flagcxInt8, MPI_INT8_T, MPI_INT8_T},
    {"uint8", flagcxUint8, MPI_UINT8_T, MPI_UINT8_T},
    {"int32", flagcxInt32, MPI_INT32_T, MPI_INT32_T},
    {"uint32", flagcxUint32, MPI_UINT32_T, MPI_UINT32_T},
    {"int64", flagcxInt64, MPI_INT64_T, MPI_INT64_T},
    {"uint64", flagcxUint64, MPI_UINT64_T, MPI_UINT64_T},
    {"half", flagcxFloat16, MPI_DATATYPE_NULL, MPI_UINT16_T},
    {"float", flagcxFloat32, MPI_FLOAT, MPI_FLOAT},
    {"double", flagcxFloat64, MPI_DOUBLE, MPI_DOUBLE},
    {"bfloat16", flagcxBfloat16, MPI_DATATYPE_NULL, MPI_UINT16_T},
};
const struct { const char *alias, *name; } kTypeAliases[] = {
    {"char", "int8"}, {"int", "int32"}, {"float16", "half"}, {"fp16", "half"},
    {"float32", "float"}, {"fp32", "float"}, {"float64", "double"}, {"fp64", "double"},
    {"bf16", "bfloat16"}};

struct RedInfo {
  const char *name;
  flagcxRedOp_t op;
  MPI_Op mpi;  // MPI_OP_NULL: no MPI equivalent
};
const RedInfo kRedOps[] = {{"sum", flagcxSum, MPI_SUM},
                           {"prod", flagcxProd, MPI_PROD},
                           {"max", flagcxMax, MPI_MAX},
                           {"min", flagcxMin, MPI_MIN},
                           {"avg", flagcxAvg, MPI_OP_NULL}};

// ---------------------------------------------------------------- options

struct Options {
  size_t minBytes = 1024, maxBytes = 64u << 20, factor = 2;
  int warmup = 5, iters = 20;
  bool print = false, check = true, mpi = false;
  int root = -1;  // -1: every root in turn
  std::vector<const TypeInfo *> types;
  std::vector<const RedInfo *> redops;
  std::string algo, json;
};

void usage(FILE *f, const char *prog) {
  fprintf(f,
          "usage: mpiexec -n N %s [flags]\n"
          "  -b BYTES   smallest size (K/M/G suffixes, binary), default 1K\n"
          "  -e BYTES   largest size, default 64M\n"
          "  -f N       multiply the size by N each step, default 2\n"
          "  -w N       warm-up iterations per size, default 5\n"
          "  -n N       timed iterations per size, default 20\n"
          "  -p 0|1     print an excerpt of rank 0's result buffer, default 0\n"
          "  -r ROOT    root of rooted ops, default: every root in turn\n"
          "  -d TYPE    int8 uint8 int32 uint32 int64 uint64 half float double bfloat16, or all "
          "(default float; a comma list works too)\n"
          "  -o OP      sum prod max min avg, or all (default sum; a comma list works too)\n"
          "  -c 0|1     check every element of the results, default 1\n"
          "  -m 0|1     also time MPI's own collective on the same buffers, default 0\n"
          "  -a NAME    force the algorithm (FLAGCX_ALGO=<op>:NAME; flagcx-algo list shows names)\n"
          "  -J FILE    append every row to FILE as one JSON object per line\n"
          "  -h         this help\n"
          "Sizes are the largest buffer of the call, as in nccl-tests; time is the slowest\n"
          "rank's average; busbw = algbw x the op's nccl-tests factor.\n",
          prog);
}

bool parseBytes(const char *s, size_t *out) {
  char *end = nullptr;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0) return false;
  double mult = 1;
  switch (*end) {
    case 'k': case 'K': mult = 1024.0; end++; break;
    case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    default: break;
  }
  if (*end == 'i') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

bool parseInt(const char *s, long lo, long hi, long *out) {
  char *end = nullptr;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

template <class T, size_t N, class Name>
bool parseList(const char *arg, const T (&table)[N], Name canonical, std::vector<const T *> *out) {
  out->clear();
  std::string s(arg);
  if (s == "all") {
    for (auto &t : table) out->push_back(&t);
    return true;
  }
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    item = canonical(item);
    const T *found = nullptr;
    for (auto &t : table)
      if (item == t.name) found = &t;
    if (!found) return false;
    out->push_back(found);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return !out->empty();
}

// 0: parsed; 2: bad flags; 3: -h.
int parseOptions(int argc, char **argv, Options *o, std::string *err) {
  o->types = {&kTypes[7]};     // float
  o->redops = {&kRedOps[0]};   // sum
  optind = 1;
  opterr = 0;
  int c;
  long v = 0;
  while ((c = getopt(argc, argv, "b:e:f:w:n:p:r:d:o:c:m:a:J:h")) != -1) {
    bool ok = true;
    switch (c) {
      case 'b': ok = parseBytes(optarg, &o->minBytes); break;
      case 'e': ok = parseBytes(optarg, &o->maxBytes); break;
      case 'f': ok = parseInt(optarg, 1, 1 << 20, &v); o->factor = static_cast<size_t>(v); break;
      case 'w': ok = parseInt(optarg, 0, 1 << 24, &v); o->warmup = static_cast<int>(v); break;
      case 'n': ok = parseInt(optarg, 1, 1 << 24, &v); o->iters = static_cast<int>(v); break;
      case 'p': ok = parseInt(optarg, 0, 1, &v); o->print = v; break;
      case 'c': ok = parseInt(optarg, 0, 1, &v); o->check = v; break;
      case 'm': ok = parseInt(optarg, 0, 1, &v); o->mpi = v; break;
      case 'r': ok = parseInt(optarg, -1, INT_MAX, &v); o->root = static_cast<int>(v); break;
      case 'd':
        ok = parseList(optarg, kTypes, [](std::string s) {
          for (auto &a : kTypeAliases)
            if (s == a.alias) return std::string(a.name);
          return s;
        }, &o->types);
        break;
      case 'o':
        ok = parseList(optarg, kRedOps, [](std::string s) { return s; }, &o->redops);
        break;
      case 'a': o->algo = optarg; ok = !o->algo.empty(); break;
      case 'J': o->json = optarg; break;
      case 'h': return 3;
      default:
        *err = optopt ? std::string("unknown flag or missing value: -") + static_cast<char>(optopt)
                      : "bad flag";
        return 2;
    }
    if (!ok) {
      *err = std::string("bad value for -") + static_cast<char>(c) + ": " + optarg;
      return 2;
    }
  }
  if (optind < argc) {
    *err = std::string("unexpected argument: ") + argv[optind];
    return 2;
  }
  if (o->minBytes > o->maxBytes) {
    *err = "-b is larger than -e";
    return 2;
  }
  return 0;
}

// ---------------------------------------------------------------- helpers

double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

// Per-peer element counts of the alltoallv benchmark: about `block` each,
// uneven on purpose (block-1 .. block+1).
size_t vcount(size_t block, int src, int dst) {
  return block ? block + static_cast<size_t>(src + 2 * dst) % 3 - 1 : 0;
}

struct Layout {  // one call's shape at one size
  size_t bytes = 0;    // reported size
  size_t count = 0;    // count argument of the call (per-rank block for blocked ops)
  size_t sendElems = 0, recvElems = 0;
  std::vector<size_t> sc, sd, rc, rd;  // alltoallv
};

Layout layoutFor(const OpInfo &op, size_t bytes, size_t ts, int nranks, int rank) {
  Layout l;
  size_t n = static_cast<size_t>(nranks);
  if (op.blocked) {
    size_t block = bytes / (ts * n);
    l.count = block;
    l.bytes = block * n * ts;
    l.sendElems = op.sendIsFull ? block * n : block;
    l.recvElems = op.recvIsFull ? block * n : block;
  } else {
    l.count = bytes / ts;
    l.bytes = l.count * ts;
    l.sendElems = l.recvElems = l.count;
  }
  if (op.op == Op::AlltoAllv) {
    l.sc.resize(n); l.sd.resize(n); l.rc.resize(n); l.rd.resize(n);
    size_t s = 0, r = 0;
    for (int p = 0; p < nranks; p++) {
      size_t pi = static_cast<size_t>(p);
      l.sc[pi] = vcount(l.count, rank, p);
      l.rc[pi] = vcount(l.count, p, rank);
      l.sd[pi] = s; l.rd[pi] = r;
      s += l.sc[pi]; r += l.rc[pi];
    }
    l.sendElems = s;
    l.recvElems = r;
  }
  return l;
}

// Upper bound of the per-rank buffer bytes for a size (alltoallv's slack included).
void bufferBytes(const OpInfo &op, size_t bytes, int nranks, size_t *send, size_t *recv) {
  size_t n = static_cast<size_t>(nranks), slack = op.op == Op::AlltoAllv ? n * 8 : 0;
  *send = (op.blocked && !op.sendIsFull ? bytes / n : bytes) + slack + 64;
  *recv = (op.blocked && !op.recvIsFull ? bytes / n : bytes) + slack + 64;
}

struct Bench {
  const OpInfo *op;
  Options opt;
  int rank = 0, nranks = 1, localRanks = 1, localRank = 0, nhosts = 1;
  flagcxDeviceHandle_t dev = nullptr;
  flagcxComm_t comm = nullptr;
  flagcxStream_t stream = nullptr;
  void *send = nullptr, *recv = nullptr;  // what flagcx gets (device memory on a GPU)
  // Where inputs are written and results checked: send/recv themselves on
  // the host adapter; host mirrors, copied to and from the device, on a GPU.
  bool onDevice = false;
  std::vector<char> hostSend, hostRecv;
  void *hsend = nullptr, *hrecv = nullptr;
  size_t sendCap = 0, recvCap = 0;
  FILE *json = nullptr;
  std::string algoLabel, algoName, transport;  // header text; JSON "algo"
  size_t totalWrong = 0;
};

[[noreturn]] void fail(Bench &b, const char *what, flagcxResult_t r) {
  fprintf(stderr, "rank %d: %s failed: %s (%s)\n", b.rank, what, flagcxGetErrorString(r),
          flagcxGetLastError(b.comm));
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

// One flagcx call of the benchmark, enqueued on the stream.
flagcxResult_t callFlagcx(Bench &b, const Layout &l, flagcxDataType_t dt, flagcxRedOp_t rop,
                          int root) {
  void *s = b.send, *r = b.recv;
  switch (b.op->op) {
    case Op::AllReduce: return flagcxAllReduce(s, r, l.count, dt, rop, b.comm, b.stream);
    case Op::AllGather: return flagcxAllGather(s, r, l.count, dt, b.comm, b.stream);
    case Op::ReduceScatter: return flagcxReduceScatter(s, r, l.count, dt, rop, b.comm, b.stream);
    case Op::Broadcast: return flagcxBroadcast(s, r, l.count, dt, root, b.comm, b.stream);
    case Op::Reduce: return flagcxReduce(s, r, l.count, dt, rop, root, b.comm, b.stream);
    case Op::Gather: return flagcxGather(s, r, l.count, dt, root, b.comm, b.stream);
    case Op::Scatter: return flagcxScatter(s, r, l.count, dt, root, b.comm, b.stream);
    case Op::AlltoAll: return flagcxAlltoAll(s, r, l.count, dt, b.comm, b.stream);
    case Op::AlltoAllv: {
      auto &m = const_cast<Layout &>(l);
      return flagcxAlltoAllv(s, m.sc.data(), m.sd.data(), r, m.rc.data(), m.rd.data(), dt, b.comm,
                             b.stream);
    }
    case Op::SendRecv: {
      int next = (b.rank + 1) % b.nranks, prev = (b.rank + b.nranks - 1) % b.nranks;
      flagcxResult_t res = flagcxGroupStart(b.comm);
      if (res == flagcxSuccess) res = flagcxSend(s, l.count, dt, next, b.comm, b.stream);
      if (res == flagcxSuccess) res = flagcxRecv(r, l.count, dt, prev, b.comm, b.stream);
      flagcxResult_t e = flagcxGroupEnd(b.comm);
      return res != flagcxSuccess ? res : e;
    }
  }
  return flagcxInternalError;
}

// Whether MPI can run the same call; `why` says why not.
bool mpiCan(const Bench &b, const Layout &l, const TypeInfo &t, const RedInfo &red,
            const char **why) {
  if (b.onDevice) { *why = "device buffers"; return false; }
  if (b.op->reduces && t.mpiReduce == MPI_DATATYPE_NULL) { *why = "no MPI type"; return false; }
  if (b.op->reduces && red.mpi == MPI_OP_NULL) { *why = "no MPI op"; return false; }
  if (l.sendElems > INT_MAX || l.recvElems > INT_MAX) { *why = "count > INT_MAX"; return false; }
  return true;
}

void callMpi(Bench &b, const Layout &l, const TypeInfo &t, const RedInfo &red, int root) {
  MPI_Datatype dt = b.op->reduces ? t.mpiReduce : t.mpiMove;
  int c = static_cast<int>(l.count);
  void *s = b.send, *r = b.recv;
  MPI_Comm w = MPI_COMM_WORLD;
  switch (b.op->op) {
    case Op::AllReduce: MPI_Allreduce(s, r, c, dt, red.mpi, w); break;
    case Op::AllGather: MPI_Allgather(s, c, dt, r, c, dt, w); break;
    case Op::ReduceScatter: MPI_Reduce_scatter_block(s, r, c, dt, red.mpi, w); break;
    case Op::Broadcast: MPI_Bcast(r, c, dt, root, w); break;
    case Op::Reduce: MPI_Reduce(s, r, c, dt, red.mpi, root, w); break;
    case Op::Gather: MPI_Gather(s, c, dt, r, c, dt, root, w); break;
    case Op::Scatter: MPI_Scatter(s, c, dt, r, c, dt, root, w); break;
    case Op::AlltoAll: MPI_Alltoall(s, c, dt, r, c, dt, w); break;
    case Op::AlltoAllv: {
      size_t n = static_cast<size_t>(b.nranks);
      std::vector<int> sc(n), sd(n), rc(n), rd(n);
      for (size_t p = 0; p < n; p++) {
        sc[p] = static_cast<int>(l.sc[p]); sd[p] = static_cast<int>(l.sd[p]);
        rc[p] = static_cast<int>(l.rc[p]); rd[p] = static_cast<int>(l.rd[p]);
      }
      MPI_Alltoallv(s, sc.data(), sd.data(), dt, r, rc.data(), rd.data(), dt, w);
      break;
    }
    case Op::SendRecv: {
      int next = (b.rank + 1) % b.nranks, prev = (b.rank + b.nranks - 1) % b.nranks;
      MPI_Sendrecv(s, c, dt, next, 7, r, c, dt, prev, 7, w, MPI_STATUS_IGNORE);
      break;
    }
  }
}

// Fills the send buffer with this rank's values and the receive buffer with
// a sentinel no correct result equals.
void fillInputs(Bench &b, const Layout &l, flagcxDataType_t dt, flagcxRedOp_t rop) {
  double table[kPeriod];
  sourceTable(b.rank, dt, rop, table);
  size_t ts = getFlagcxDataTypeSize(dt);
  dispatch<Fill>(dt, b.hsend, l.sendElems, size_t{0}, static_cast<const double *>(table));
  memset(b.hrecv, 0xEE, std::max<size_t>(l.recvElems * ts, 1));
  if (b.onDevice) {
    flagcxResult_t r = b.dev->deviceMemcpy(b.send, b.hsend, l.sendElems * ts, flagcxMemcpyHostToDevice, nullptr);
    if (r == flagcxSuccess)
      r = b.dev->deviceMemcpy(b.recv, b.hrecv, std::max<size_t>(l.recvElems * ts, 1),
                              flagcxMemcpyHostToDevice, nullptr);
    // A copy from pageable memory may return before it has landed; the
    // benchmark's stream does not wait for the legacy stream by itself.
    if (r == flagcxSuccess) r = b.dev->deviceSynchronize();
    if (r != flagcxSuccess) fail(b, "deviceMemcpy (inputs)", r);
  }
}

// Wrong elements of this rank's result.
size_t checkResult(Bench &b, const Layout &l, flagcxDataType_t dt, flagcxRedOp_t rop, int root) {
  size_t ts = getFlagcxDataTypeSize(dt), n = static_cast<size_t>(b.nranks);
  size_t r = static_cast<size_t>(b.rank), B = l.count;
  double tol = tolerance(dt), table[kPeriod];
  char *out = static_cast<char *>(b.hrecv);
  auto check = [&](size_t off, size_t len, size_t idx0) {
    return dispatch<Check>(dt, static_cast<const void *>(out + off * ts), len, idx0,
                           static_cast<const double *>(table), tol);
  };
  size_t wrong = 0;
  switch (b.op->op) {
    case Op::AllReduce:
    case Op::Reduce:
      if (b.op->op == Op::Reduce && b.rank != root) break;
      reducedTable(b.nranks, dt, rop, table);
      wrong = check(0, l.count, 0);
      break;
    case Op::ReduceScatter:
      reducedTable(b.nranks, dt, rop, table);
      wrong = check(0, B, r * B);
      break;
    case Op::Broadcast:
      sourceTable(root, dt, rop, table);
      wrong = check(0, l.count, 0);
      break;
    case Op::Scatter:
      sourceTable(root, dt, rop, table);
      wrong = check(0, B, r * B);
      break;
    case Op::AllGather:
    case Op::Gather:
      if (b.op->op == Op::Gather && b.rank != root) break;
      for (size_t p = 0; p < n; p++) {
        sourceTable(static_cast<int>(p), dt, rop, table);
        wrong += check(p * B, B, 0);
      }
      break;
    case Op::AlltoAll:
      for (size_t p = 0; p < n; p++) {
        sourceTable(static_cast<int>(p), dt, rop, table);
        wrong += check(p * B, B, r * B);
      }
      break;
    case Op::AlltoAllv:
      for (int p = 0; p < b.nranks; p++) {
        size_t pi = static_cast<size_t>(p), senderDispl = 0;
        for (int q = 0; q < b.rank; q++) senderDispl += vcount(B, p, q);
        sourceTable(p, dt, rop, table);
        wrong += check(l.rd[pi], l.rc[pi], senderDispl);
      }
      break;
    case Op::SendRecv:
      sourceTable((b.rank + b.nranks - 1) % b.nranks, dt, rop, table);
      wrong = check(0, l.count, 0);
      break;
  }
  return wrong;
}

void printExcerpt(Bench &b, const Layout &l, flagcxDataType_t dt) {
  if (b.rank != 0) return;
  size_t shown = std::min<size_t>(l.recvElems, 8);
  printf("#   rank 0 recvbuff[0..%zu):", shown);
  double v;
  for (size_t i = 0; i < shown; i++) {
    switch (dt) {
      case flagcxInt8: v = static_cast<int8_t *>(b.hrecv)[i]; break;
      case flagcxUint8: v = static_cast<uint8_t *>(b.hrecv)[i]; break;
      case flagcxInt32: v = static_cast<int32_t *>(b.hrecv)[i]; break;
      case flagcxUint32: v = static_cast<uint32_t *>(b.hrecv)[i]; break;
      case flagcxInt64: v = static_cast<double>(static_cast<int64_t *>(b.hrecv)[i]); break;
      case flagcxUint64: v = static_cast<double>(static_cast<uint64_t *>(b.hrecv)[i]); break;
      case flagcxFloat16: v = halfBitsToFloat(static_cast<uint16_t *>(b.hrecv)[i]); break;
      case flagcxBfloat16: v = bf16BitsToFloat(static_cast<uint16_t *>(b.hrecv)[i]); break;
      case flagcxFloat64: v = static_cast<double *>(b.hrecv)[i]; break;
      default: v = static_cast<float *>(b.hrecv)[i]; break;
    }
    printf(" %g", v);
  }
  printf("%s\n", l.recvElems > shown ? " ..." : "");
}

// Checks (once) and times one row; prints it on rank 0.
void runRow(Bench &b, const Layout &l, const TypeInfo &t, const RedInfo &red, int root) {
  flagcxResult_t res;
  size_t wrong = 0;
  // The checked call uses fresh inputs; the timed calls reuse them.
  fillInputs(b, l, t.dt, red.op);
  if (b.opt.check) {
    if ((res = callFlagcx(b, l, t.dt, red.op, root)) != flagcxSuccess) fail(b, b.op->name, res);
    if ((res = b.dev->streamSynchronize(b.stream)) != flagcxSuccess) fail(b, "streamSynchronize", res);
    if (b.onDevice && l.recvElems &&
        (res = b.dev->deviceMemcpy(b.hrecv, b.recv, l.recvElems * getFlagcxDataTypeSize(t.dt),
                                   flagcxMemcpyDeviceToHost, nullptr)) != flagcxSuccess)
      fail(b, "deviceMemcpy (results)", res);
    // PERF_CORRUPT=1 spoils one result element on rank 0: proves the check sees it.
    if (b.rank == 0 && l.recvElems && getenv("PERF_CORRUPT")) static_cast<unsigned char *>(b.hrecv)[getFlagcxDataTypeSize(t.dt) - 1] ^= 0x40;
    size_t mine = checkResult(b, l, t.dt, red.op, root);
    unsigned long long m = mine, all = 0;
    MPI_Allreduce(&m, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    wrong = static_cast<size_t>(all);
    if (mine) fprintf(stderr, "rank %d: %s %s %s root %d, %zu bytes: %zu wrong element(s)\n",
                      b.rank, b.op->name, t.name, red.name, root, l.bytes, mine);
  }
  if (b.opt.print) printExcerpt(b, l, t.dt);
  for (int i = 0; i < b.opt.warmup; i++)
    if ((res = callFlagcx(b, l, t.dt, red.op, root)) != flagcxSuccess) fail(b, b.op->name, res);
  if ((res = b.dev->streamSynchronize(b.stream)) != flagcxSuccess) fail(b, "streamSynchronize", res);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = nowSec();
  for (int i = 0; i < b.opt.iters; i++)
    if ((res = callFlagcx(b, l, t.dt, red.op, root)) != flagcxSuccess) fail(b, b.op->name, res);
  if ((res = b.dev->streamSynchronize(b.stream)) != flagcxSuccess) fail(b, "streamSynchronize", res);
  double mine = (nowSec() - t0) / b.opt.iters, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  double mpiTime = -1;
  const char *why = "";
  if (b.opt.mpi && mpiCan(b, l, t, red, &why)) {
    for (int i = 0; i < b.opt.warmup; i++) callMpi(b, l, t, red, root);
    MPI_Barrier(MPI_COMM_WORLD);
    double m0 = nowSec();
    for (int i = 0; i < b.opt.iters; i++) callMpi(b, l, t, red, root);
    double m = (nowSec() - m0) / b.opt.iters;
    MPI_Allreduce(&m, &mpiTime, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }
  b.totalWrong += wrong;
  if (b.rank != 0) return;

  double factor = b.op->busFactor(b.nranks);
  double algbw = slowest > 0 ? static_cast<double>(l.bytes) / slowest / 1e9 : 0;
  double busbw = algbw * factor;
  char rootStr[16];
  if (b.op->rooted) snprintf(rootStr, sizeof(rootStr), "%d", root);
  else snprintf(rootStr, sizeof(rootStr), "-");
  char wrongStr[24];
  if (b.opt.check) snprintf(wrongStr, sizeof(wrongStr), "%zu", wrong);
  else snprintf(wrongStr, sizeof(wrongStr), "N/A");
  printf("%12zu %12zu %9s %5s %5s %11.2f %8.3f %8.3f %7s", l.bytes, l.bytes / getFlagcxDataTypeSize(t.dt),
         t.name, b.op->reduces ? red.name : "none", rootStr, slowest * 1e6, algbw, busbw, wrongStr);
  double mpiBus = 0;
  if (b.opt.mpi) {
    if (mpiTime >= 0) {
      mpiBus = mpiTime > 0 ? static_cast<double>(l.bytes) / mpiTime / 1e9 * factor : 0;
      printf("  %11.2f %8.3f %6.2f", mpiTime * 1e6, mpiBus, slowest > 0 ? mpiTime / slowest : 0);
    } else {
      printf("  %11s %8s %6s", "-", "-", "-");
    }
  }
  printf("\n");
  fflush(stdout);
  if (b.json) {
    fprintf(b.json,
            "{\"op\":\"%s\",\"dtype\":\"%s\",\"redop\":\"%s\",\"root\":%d,\"nranks\":%d,"
            "\"bytes\":%zu,\"count\":%zu,\"algo\":\"%s\",\"time_us\":%.3f,\"algbw\":%.4f,"
            "\"busbw\":%.4f,\"wrong\":%zu,\"transport\":\"%s\",\"hosts\":%d",
            b.op->name, t.name, b.op->reduces ? red.name : "none", b.op->rooted ? root : -1,
            b.nranks, l.bytes, l.bytes / getFlagcxDataTypeSize(t.dt), b.algoName.c_str(),
            slowest * 1e6, algbw, busbw, b.opt.check ? wrong : 0, b.transport.c_str(), b.nhosts);
    if (b.opt.mpi) {
      if (mpiTime >= 0) fprintf(b.json, ",\"mpi_time_us\":%.3f,\"mpi_busbw\":%.4f", mpiTime * 1e6, mpiBus);
      else fprintf(b.json, ",\"mpi_time_us\":null,\"mpi_busbw\":null");
    }
    fprintf(b.json, "}\n");
    fflush(b.json);
  }
}

void printHeader(Bench &b, const std::vector<std::string> &hostNames, const char *prog) {
  if (b.rank != 0) return;
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
  int version = 0;
  flagcxGetVersion(&version);
  printf("# flagcx %d.%d.%d benchmark: %s (%s)\n", version / 10000, version / 100 % 100,
         version % 100, b.op->name, prog);
  printf("# ranks: %d on %d host(s) [%s], %d per host; device: %s\n", b.nranks, b.nhosts,
         hosts.c_str(), b.localRanks, vendor);
  const char *shmOff = getenv("FLAGCX_SHM_DISABLE");
  bool sock = shmOff && atoi(shmOff) != 0;
  printf("# transport: same-host peers %s%s", sock ? "socket" : "shm",
         sock ? " (FLAGCX_SHM_DISABLE=1)" : "");
  printf(", other-host peers socket%s\n", b.nhosts > 1 ? "" : " (none here)");
  printf("# algorithm: %s\n", b.algoLabel == "auto" ? "auto (see FLAGCX_DEBUG=INFO FLAGCX_DEBUG_SUBSYS=TUNING)"
                                                    : b.algoLabel.c_str());
  printf("# sizes %zu..%zu x%zu, warm-up %d, iterations %d, check %s, MPI baseline %s\n",
         b.opt.minBytes, b.opt.maxBytes, b.opt.factor, b.opt.warmup, b.opt.iters,
         b.opt.check ? "on" : "off", b.opt.mpi ? mpiVer : "off");
  if (b.opt.mpi) {
    const char *tls = getenv("UCX_TLS");
    printf("# MPI: UCX_TLS=%s UCX_NET_DEVICES=%s\n", tls ? tls : "(default)",
           getenv("UCX_NET_DEVICES") ? getenv("UCX_NET_DEVICES") : "(default)");
  }
  printf("# time: slowest rank's average per call; algbw = bytes/time; busbw = algbw x %.3g",
         b.op->busFactor(b.nranks));
  printf("%s\n", b.opt.mpi ? "; ratio = MPI time / flagcx time (>1: flagcx faster)" : "");
  printf("#\n# %10s %12s %9s %5s %5s %11s %8s %8s %7s", "bytes", "count", "type", "redop", "root",
         "time(us)", "algbw", "busbw", "#wrong");
  if (b.opt.mpi) printf("  %11s %8s %6s", "mpi(us)", "mpibusbw", "ratio");
  printf("\n#%12s %12s %9s %5s %5s %11s %8s %8s %7s", "", "", "", "", "", "", "(GB/s)", "(GB/s)", "");
  if (b.opt.mpi) printf("  %11s %8s %6s", "", "(GB/s)", "");
  printf("\n");
  fflush(stdout);
}

std::vector<size_t> sizeList(const Options &o) {
  std::vector<size_t> v;
  for (size_t s = o.minBytes; s <= o.maxBytes; s *= o.factor) {
    v.push_back(s);
    if (o.factor < 2 || s == 0 || s > SIZE_MAX / o.factor) break;
  }
  return v;
}

bool allOk(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
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
  if (!allOk(avail == 0 || need <= avail + held)) return false;
  if (b.send) b.dev->deviceFree(b.send, flagcxMemDevice, nullptr);
  if (b.recv) b.dev->deviceFree(b.recv, flagcxMemDevice, nullptr);
  b.send = b.recv = nullptr;
  b.sendCap = b.recvCap = 0;
  flagcxResult_t r1 = b.dev->deviceMalloc(&b.send, sb, flagcxMemDevice, nullptr);
  flagcxResult_t r2 = b.dev->deviceMalloc(&b.recv, rb, flagcxMemDevice, nullptr);
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
  if (!allOk(ok)) {
    if (r1 == flagcxSuccess && b.send) b.dev->deviceFree(b.send, flagcxMemDevice, nullptr);
    if (r2 == flagcxSuccess && b.recv) b.dev->deviceFree(b.recv, flagcxMemDevice, nullptr);
    b.send = b.recv = nullptr;
    return false;
  }
  b.sendCap = sb;
  b.recvCap = rb;
  return true;
}

}  // namespace

int run(const char *opName, int argc, char **argv) {
  const OpInfo *op = nullptr;
  for (auto &o : kOps)
    if (strcmp(o.name, opName) == 0) op = &o;
  if (!op) {
    fprintf(stderr, "unknown benchmark op %s\n", opName);
    return 2;
  }
  const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  Options opt;
  std::string err;
  int pr = parseOptions(argc, argv, &opt, &err);
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
  if (!opt.algo.empty()) {
    if (op->op == Op::SendRecv) {
      fprintf(stderr, "%s: -a: send/receive has no algorithm to force\n", prog);
      return 2;
    }
    // The library reads FLAGCX_* once, at its first use: set it before any flagcx call.
    std::string v = std::string(op->name) + ":" + opt.algo;
    setenv("FLAGCX_ALGO", v.c_str(), 1);
  }

  MPI_Init(&argc, &argv);
  Bench b;
  b.op = op;
  b.opt = opt;
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.nranks);
  {
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &b.localRanks);
    MPI_Comm_rank(local, &b.localRank);
    MPI_Comm_free(&local);
  }
  char name[MPI_MAX_PROCESSOR_NAME] = "";
  int nameLen = 0;
  MPI_Get_processor_name(name, &nameLen);
  std::vector<char> all(static_cast<size_t>(b.nranks) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, MPI_COMM_WORLD);
  std::set<std::string> hostSet;
  for (int r = 0; r < b.nranks; r++) hostSet.insert(&all[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  std::vector<std::string> hostNames(hostSet.begin(), hostSet.end());
  b.nhosts = static_cast<int>(hostNames.size());
  const char *forced = getenv("FLAGCX_ALGO");
  b.algoLabel = forced && *forced ? std::string("forced ") + forced : "auto";
  b.algoName = !opt.algo.empty() ? opt.algo : forced && *forced ? std::string(forced) : "auto";
  const char *shmOff = getenv("FLAGCX_SHM_DISABLE");
  b.transport = (shmOff && atoi(shmOff) != 0) || b.nhosts > 1 ? "socket" : "shm";

  flagcxResult_t r = flagcxDeviceHandleInit(&b.dev);
  if (r != flagcxSuccess) fail(b, "flagcxDeviceHandleInit", r);
  {
    // A GPU adapter (FLAGCX_DEVICE=cuda, or auto with a GPU): buffers in
    // device memory, one device per local rank, round robin (ranks may share).
    char vendor[128] = "";
    b.dev->getVendor(vendor);
    b.onDevice = strcmp(vendor, "host") != 0;
    int ndev = 0;
    if (b.onDevice && b.dev->getDeviceCount(&ndev) == flagcxSuccess && ndev > 0 &&
        (r = b.dev->setDevice(b.localRank % ndev)) != flagcxSuccess)
      fail(b, "setDevice", r);
  }
  flagcxUniqueId id;
  memset(&id, 0, sizeof(id));
  if (b.rank == 0 && (r = flagcxGetUniqueId(&id)) != flagcxSuccess) fail(b, "flagcxGetUniqueId", r);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  if ((r = flagcxCommInitRank(&b.comm, b.nranks, &id, b.rank)) != flagcxSuccess)
    fail(b, "flagcxCommInitRank", r);
  if ((r = b.dev->streamCreate(&b.stream)) != flagcxSuccess) fail(b, "streamCreate", r);
  if (b.rank == 0 && !opt.json.empty()) {
    b.json = fopen(opt.json.c_str(), "a");
    if (!b.json) fprintf(stderr, "%s: cannot open %s: %s\n", prog, opt.json.c_str(), strerror(errno));
  }
  printHeader(b, hostNames, prog);

  std::vector<size_t> sizes = sizeList(opt);
  std::vector<int> roots;
  if (op->rooted) {
    if (opt.root >= b.nranks) {
      if (b.rank == 0) fprintf(stderr, "%s: -r %d: only %d ranks\n", prog, opt.root, b.nranks);
      MPI_Finalize();
      return 2;
    }
    if (opt.root >= 0) roots = {opt.root};
    else for (int i = 0; i < b.nranks; i++) roots.push_back(i);
  } else {
    roots = {-1};
  }
  std::vector<const RedInfo *> redops = opt.redops;
  if (!op->reduces) redops = {&kRedOps[0]};
  std::set<size_t> skipReported;
  for (const TypeInfo *t : opt.types)
    for (const RedInfo *red : redops)
      for (int root : roots) {
        size_t last = SIZE_MAX;
        for (size_t s : sizes) {
          uint64_t need = 0, avail = 0;
          if (!ensureBuffers(b, s, &need, &avail)) {
            if (b.rank == 0 && skipReported.insert(s).second) {
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
          Layout l = layoutFor(*op, s, ts, b.nranks, b.rank);
          if (l.bytes == last) continue;  // rounded to the same size as the previous row
          last = l.bytes;
          runRow(b, l, *t, *red, root);
        }
      }

  if (b.send) b.dev->deviceFree(b.send, flagcxMemDevice, nullptr);
  if (b.recv) b.dev->deviceFree(b.recv, flagcxMemDevice, nullptr);
  b.dev->streamDestroy(b.stream);
  flagcxCommDestroy(b.comm);
  flagcxDeviceHandleFree(b.dev);
  if (b.json) fclose(b.json);
  if (b.rank == 0) {
    printf("# %s: %zu wrong element(s)%s\n", b.totalWrong ? "FAILED" : "OK", b.totalWrong,
           opt.check ? "" : " (check off)");
    fflush(stdout);
  }
  MPI_Finalize();
  return b.totalWrong ? 1 : 0;
}

}  // namespace perf
