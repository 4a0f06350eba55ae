// The tables of ops, dtypes and reductions, and the command line of every
// test_<op> (bench.h).
#include <getopt.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench.h"

namespace perf {
namespace {

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
    {"float8e4m3", flagcxFloat8e4m3, MPI_DATATYPE_NULL, MPI_UINT8_T},
    {"float8e5m2", flagcxFloat8e5m2, MPI_DATATYPE_NULL, MPI_UINT8_T},
};
const struct { const char *alias, *name; } kTypeAliases[] = {
    {"char", "int8"}, {"int", "int32"}, {"float16", "half"}, {"fp16", "half"},
    {"float32", "float"}, {"fp32", "float"}, {"float64", "double"}, {"fp64", "double"},
    {"bf16", "bfloat16"}, {"fp8e4m3", "float8e4m3"}, {"fp8e5m2", "float8e5m2"}};

const RedInfo kRedOps[] = {{"sum", flagcxSum, MPI_SUM},
                           {"prod", flagcxProd, MPI_PROD},
                           {"max", flagcxMax, MPI_MAX},
                           {"min", flagcxMin, MPI_MIN},
                           {"avg", flagcxAvg, MPI_OP_NULL}};


}  // namespace

const RedInfo kSum = kRedOps[0];

const OpInfo *findOp(const char *name) {
  for (auto &o : kOps)
    if (strcmp(o.name, name) == 0) return &o;
  return nullptr;
}

namespace {

// Every flag of parseOptions, with what it means for the collective
// benchmarks and for the one-sided ones (nullptr: not taken there).
struct FlagHelp {
  char flag;  // 'N': --repeat
  const char *coll, *oneSided;
};
const FlagHelp kFlagHelp[] = {
    {'b', "-b BYTES   smallest size (K/M/G suffixes, binary), default 1K",
     "-b BYTES   smallest size (K/M/G suffixes, binary), default 1K; test_putsignal -b 0\n"
     "             adds a row of flagcxSignal alone"},
    {'e', "-e BYTES   largest size, default 64M", "-e BYTES   largest size, default 64M"},
    {'f', "-f N       multiply the size by N each step, 1..1048576, default 2",
     "-f N       multiply the size by N each step (at least 2), default 2"},
    {'w', "-w N       warm-up calls per point, at least N (default 5) ...",
     "-w N       warm-up calls per size, at least N (default 5) ..."},
    {'W', "-W MS      ... and for at least MS milliseconds (default 100; 0: count only)",
     "-W MS      ... and for at least MS milliseconds (default 100)"},
    {'n', "-n N       timed calls per repetition, at least N (default 20) ...",
     "-n N       timed calls per size, at least N (default 20) ..."},
    {'T', "-T MS      ... and enough to last about MS milliseconds (default 50; 0: count only)",
     "-T MS      ... and enough to last about MS milliseconds (default 50; 0: count only)"},
    {'N', "--repeat N timed repetitions per point, 1..1000; the median is reported with\n"
          "             the spread (max-min)/median of the N (\"-\" when N is 1), default 1",
     nullptr},
    {'p', "-p 0|1     print an excerpt of rank 0's result buffer, default 0", nullptr},
    {'r', "-r ROOT    root of rooted ops, 0..ranks-1; -1 (default): every root in turn", nullptr},
    {'d', "-d TYPE    int8 uint8 int32 uint32 int64 uint64 half float double bfloat16\n"
          "             float8e4m3 float8e5m2, or all (default float; a comma list works too)", nullptr},
    {'o', "-o OP      sum prod max min avg, or all (default sum; a comma list works too)", nullptr},
    {'c', "-c 0|1     check every element of the results, default 1 (0: #wrong prints -)",
     "-c 0|1     check every byte that moved, default 1 (0: wrong prints -)"},
    {'m', "-m 0|1     also time MPI's own collective on the same buffers, default 0",
     "-m 0|1     also time MPI passive-target RMA (MPI_Put/MPI_Get + MPI_Win_flush;\n"
     "             putsignal: MPI_Put + flush + a zero-byte message), default 0"},
    {'I', "-I 0|1     1: in place, one buffer holds input and result (nccl-tests' layout:\n"
          "             the send block at this rank's place in the receive buffer, or the\n"
          "             receive block in the send buffer; MPI gets MPI_IN_PLACE); every op\n"
          "             but alltoallv and sendrecv; default 0", nullptr},
    {'a', "-a NAME    force the algorithm (FLAGCX_ALGO=<op>:NAME; flagcx-algo list shows names)",
     nullptr},
    {'s', "-s MASK    split mask (FlagCX's): ranks r and q share a communicator when\n"
          "             r & MASK == q & MASK; octal, decimal or 0x hex; default 0", nullptr},
    {'R', "-R 0|1     1: buffers from flagcxMemAlloc, registered with flagcxCommRegister\n"
          "             (FlagCX's -R 1; its -R 2 is refused); default 0 (the device\n"
          "             adapter's deviceMalloc)", nullptr},
    {'M', "-M 0|1     1: buffers from the heap (posix_memalign), like torch's CPU tensors;\n"
          "             host adapter only, not with -R 1; default 0", nullptr},
    {'D', "-D 0|1     1: deterministic reductions (FLAGCX_DETERMINISTIC=1: the rank-ordered\n"
          "             fold, docs/DETERMINISM.md); default 0", nullptr},
    {'F', "-F FORMAT  table (default) or flagcx: FlagCX's own result lines", nullptr},
    {'J', "-J FILE    append every row to FILE as one JSON object per line", nullptr},
    {'h', "-h, --help this help", "-h, --help this help"},
};

}  // namespace

bool oneSidedTakes(char flag) {
  for (const FlagHelp &h : kFlagHelp)
    if (h.flag == flag) return h.oneSided != nullptr;
  return false;
}

void usage(FILE *f, const char *prog, bool oneSided) {
  fprintf(f, "usage: mpiexec -n N %s [flags]\n", prog);
  for (const FlagHelp &h : kFlagHelp)
    if (const char *text = oneSided ? h.oneSided : h.coll) fprintf(f, "  %s\n", text);
  if (oneSided) {
    fputs("Ranks pair up (r and r^1, an even count); the even rank of a pair initiates.\n"
          "Time is the slowest rank's per call (putsignal: half the round trip).\n", f);
    return;
  }
  fputs("Sizes are the largest buffer of the call, as in nccl-tests; time is the slowest\n"
        "rank's average per call; busbw = algbw x the op's nccl-tests factor.  Before any\n"
        "timing, one untimed call of every size (both sides); each point then warms up\n"
        "(-w, -W) and times --repeat runs (-n, -T), flagcx and the MPI baseline alike.\n"
        "The results of the first call and of every timed run are checked: every\n"
        "element, the guard bytes after the receive buffer, the send buffer unchanged.\n"
        "In place, timed calls run on their predecessors' results (a sum grows), so\n"
        "after each timed run the inputs are written again and one more call is checked.\n"
        "A column that was not measured prints -.  Exit status: 0 all correct, 1 a wrong\n"
        "result, 2 a bad command line.\n", f);
}

namespace {

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

}  // namespace

// 0: parsed; 2: bad flags (*err says why); 3: -h.
int parseOptions(int argc, char **argv, Options *o, std::string *err) {
  o->types = {&kTypes[7]};     // float
  o->redops = {&kRedOps[0]};   // sum
  optind = 1;
  opterr = 0;
  int c;
  long v = 0;
  static const option kLong[] = {{"repeat", required_argument, nullptr, 'N'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  while ((c = getopt_long(argc, argv, "b:e:f:w:W:n:T:p:r:d:o:c:m:a:s:R:F:J:I:M:D:h", kLong, nullptr)) != -1) {
    bool ok = true;
    o->given += static_cast<char>(c);
    switch (c) {
      case 'b': ok = parseBytes(optarg, &o->minBytes); break;
      case 'e': ok = parseBytes(optarg, &o->maxBytes); break;
      case 'f': ok = parseInt(optarg, 1, 1 << 20, &v); o->factor = static_cast<size_t>(v); break;
      case 'w': ok = parseInt(optarg, 0, 1 << 24, &v); o->warmup = static_cast<int>(v); break;
      case 'n': ok = parseInt(optarg, 1, 1 << 24, &v); o->iters = static_cast<int>(v); break;
      case 'W': ok = parseInt(optarg, 0, 3600000, &v); o->warmupMs = static_cast<int>(v); break;
      case 'T': ok = parseInt(optarg, 0, 3600000, &v); o->targetMs = static_cast<int>(v); break;
      case 'N': ok = parseInt(optarg, 1, 1000, &v); o->repeat = static_cast<int>(v); break;
      case 's': {
        char *end = nullptr;
        errno = 0;
        unsigned long long m = strtoull(optarg, &end, 0);
        ok = errno == 0 && end != optarg && *end == 0 && optarg[0] != '-';
        o->splitMask = m;
        break;
      }
      case 'R':
        ok = parseInt(optarg, 0, 2, &v);
        if (ok && v == 2) {
          *err = "-R 2 (FlagCX's window registration) is not supported by these benchmarks; "
                 "-R 1 registers with flagcxCommRegister";
          return 2;
        }
        o->registerMode = static_cast<int>(v);
        break;
      case 'F':
        ok = strcmp(optarg, "table") == 0 || strcmp(optarg, "flagcx") == 0;
        o->format = strcmp(optarg, "flagcx") == 0 ? Format::FlagCX : Format::Table;
        break;
      case 'p': ok = parseInt(optarg, 0, 1, &v); o->print = v; break;
      case 'c': ok = parseInt(optarg, 0, 1, &v); o->check = v; break;
      case 'm': ok = parseInt(optarg, 0, 1, &v); o->mpi = v; break;
      case 'I': ok = parseInt(optarg, 0, 1, &v); o->inPlace = v; break;
      case 'M': ok = parseInt(optarg, 0, 1, &v); o->heap = v; break;
      case 'D': ok = parseInt(optarg, 0, 1, &v); o->deterministic = v; break;
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
      case 'J': o->json = optarg; ok = !o->json.empty(); break;
      case 'h': return 3;
      default:
        *err = optopt ? std::string("unknown flag or missing value: -") + static_cast<char>(optopt)
                      : std::string("unknown flag or missing value: ") + argv[optind - 1];
        return 2;
    }
    if (!ok) {
      *err = std::string("bad value for ") + (c == 'N' ? "--repeat" : std::string("-") + static_cast<char>(c)) +
             ": " + optarg;
      return 2;
    }
  }
  if (optind < argc) {
    *err = std::string("unexpected argument: ") + argv[optind];
    return 2;
  }
  if (o->heap && o->registerMode) {
    *err = "-M 1 and -R 1 are two kinds of buffer: pick one";
    return 2;
  }
  if (o->minBytes > o->maxBytes) {
    *err = "-b is larger than -e";
    return 2;
  }
  return 0;
}

}  // namespace perf
