// The collective correctness matrix: every op x every shipped algorithm x
// nranks x counts x in/out-of-place x dtypes x reduction ops, real processes,
// each element checked against a reference computed here.  MR_FULL=1 (the
// `full` suite) widens every axis.
#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/comm.h"
#include "sched/ir.h"
#include "sched/registry.h"
#include "tests/common/device_mirror.h"
#include "tests/common/harness.h"
#include "net/socket/socket_mover.h"
#include "tests/common/inspect.h"
#include "tools/perf/data.h"

namespace {

using flagcx::OpKind;

bool fullRun() { return getenv("MR_FULL") && strcmp(getenv("MR_FULL"), "1") == 0; }
// MR_DTYPES=all: all 12 dtypes at the quick matrix's shape (MR_FULL implies it).
bool allDtypes() { return fullRun() || (getenv("MR_DTYPES") && strcmp(getenv("MR_DTYPES"), "all") == 0); }
using testdev::deviceRun;
using testdev::DeviceMirror;

// Test data: tools/perf/data.h's pattern (every rank wins some elements of
// a max and of a min; the blocks of one buffer differ), its conversions and
// its tolerances, shared with the benchmarks.
template <class T> struct StoreAt {
  static int call(void *b, size_t i, double v) {
    static_cast<T *>(b)[i] = perf::fromDouble<T>(v);
    return 0;
  }
};
template <class T> struct LoadAt {
  static double call(const void *b, size_t i) { return perf::toDouble<T>(static_cast<const T *>(b)[i]); }
};
void store(void *buf, size_t i, flagcxDataType_t dt, double v) { perf::dispatch<StoreAt>(dt, buf, i, v); }
double load(const void *buf, size_t i, flagcxDataType_t dt) { return perf::dispatch<LoadAt>(dt, buf, i); }

bool close(double got, double want, flagcxDataType_t dt) {
  double tol = perf::tolerance(dt);
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

// Bytes after every buffer of a case, filled with a pattern that must
// survive the call: an overrun of even one byte is caught.
constexpr size_t kGuard = 64;
uint8_t guardByte(size_t k) { return static_cast<uint8_t>(0xA5 ^ (k * 29)); }
void setGuard(std::vector<char> *buf, size_t dataBytes) {
  buf->resize(dataBytes + kGuard);
  for (size_t k = 0; k < kGuard; k++) (*buf)[dataBytes + k] = static_cast<char>(guardByte(k));
}
// The first guard byte that changed, or -1.
long brokenGuard(const std::vector<char> &buf, size_t dataBytes) {
  for (size_t k = 0; k < kGuard; k++)
    if (static_cast<uint8_t>(buf[dataBytes + k]) != guardByte(k)) return static_cast<long>(k);
  return -1;
}

// The count of every op that exceeds the test's FLAGCX_NET_CHUNK_SIZE
// (kChunk) several times over, so that slicing runs in the quick suite: one
// dtype (float) and two reductions (sum, max) at that size.
constexpr size_t kChunk = 65536;
constexpr size_t kBigCount = 3 * kChunk / 4 + 5;

struct Case {
  OpKind op;
  std::string algo;
};
void PrintTo(const Case &c, std::ostream *os) { *os << flagcx::opName(c.op) << ":" << c.algo; }

// One point of the matrix.
struct Point {
  size_t count;
  flagcxDataType_t dt;
  flagcxRedOp_t rop;
  int root;
  int inplace;
};

// A point's element counts: input and output, and alltoallv's per-peer
// counts and displacements (a few elements more than count, different per
// pair).
struct Shape {
  size_t inN, outN;
  std::vector<size_t> sc, sd, rc, rd;
};
Shape shapeOf(OpKind op, size_t count, size_t n, size_t rank) {
  Shape sh{count, count, std::vector<size_t>(n), std::vector<size_t>(n), std::vector<size_t>(n),
           std::vector<size_t>(n)};
  switch (op) {
    case OpKind::AllGather: case OpKind::Gather: sh.outN = count * n; break;
    case OpKind::ReduceScatter: case OpKind::Scatter: sh.inN = count * n; break;
    case OpKind::AlltoAll: sh.inN = sh.outN = count * n; break;
    case OpKind::AlltoAllv: {
      size_t s = 0, r = 0;
      for (size_t p = 0; p < n; p++) {
        sh.sc[p] = count + (rank * 3 + p) % 4;
        sh.rc[p] = count + (p * 3 + rank) % 4;
        sh.sd[p] = s; sh.rd[p] = r;
        s += sh.sc[p]; r += sh.rc[p];
      }
      sh.inN = s; sh.outN = r;
      break;
    }
    default: break;
  }
  return sh;
}

flagcxResult_t callOp(OpKind op, const char *in, char *out, const Point &pt, Shape &sh,
                      flagcxComm_t comm) {
  size_t count = pt.count;
  flagcxDataType_t dt = pt.dt;
  switch (op) {
    case OpKind::AllReduce: return flagcxAllReduce(in, out, count, dt, pt.rop, comm, nullptr);
    case OpKind::Reduce: return flagcxReduce(in, out, count, dt, pt.rop, pt.root, comm, nullptr);
    case OpKind::Broadcast: return flagcxBroadcast(in, out, count, dt, pt.root, comm, nullptr);
    case OpKind::AllGather: return flagcxAllGather(in, out, count, dt, comm, nullptr);
    case OpKind::Gather: return flagcxGather(in, out, count, dt, pt.root, comm, nullptr);
    case OpKind::ReduceScatter: return flagcxReduceScatter(in, out, count, dt, pt.rop, comm, nullptr);
    case OpKind::Scatter: return flagcxScatter(in, out, count, dt, pt.root, comm, nullptr);
    case OpKind::AlltoAll: return flagcxAlltoAll(in, out, count, dt, comm, nullptr);
    case OpKind::AlltoAllv:
      return flagcxAlltoAllv(in, sh.sc.data(), sh.sd.data(), out, sh.rc.data(), sh.rd.data(), dt,
                             comm, nullptr);
    case OpKind::Barrier: return flagcxBarrier(comm, nullptr);
    default: return flagcxSuccess;
  }
}

// What each rank sent and the reduction, per key of the pattern.
struct Tables {
  std::vector<std::array<double, perf::kKeys>> src;
  std::array<double, perf::kKeys> red;
};

// The output of one call against the pattern's tables: adds to *failures
// (at most one per peer block, or one for the buffer).
void checkOutput(const Case &c, const Point &pt, const Shape &sh, const Tables &t, const char *out,
                 int rank, int nranks, int *failures) {
  size_t count = pt.count, n = static_cast<size_t>(nranks), r = static_cast<size_t>(rank);
  flagcxDataType_t dt = pt.dt;
  auto ref = [&](size_t gi) { return t.red[perf::patternKey(gi)]; };
  auto val = [&](int src, size_t gi) { return t.src[static_cast<size_t>(src)][perf::patternKey(gi)]; };
  auto expect = [&](size_t i) -> double {
    switch (c.op) {
      case OpKind::AllReduce: case OpKind::Reduce: return ref(i);
      case OpKind::Broadcast: return val(pt.root, i);
      case OpKind::AllGather: case OpKind::Gather:
        return val(static_cast<int>(i / count), i % count);
      case OpKind::ReduceScatter: return ref(r * count + i);
      case OpKind::Scatter: return val(pt.root, r * count + i);
      case OpKind::AlltoAll:
        return val(static_cast<int>(i / count), r * count + i % count);
      default: return 0;
    }
  };
  bool check = !(flagcx::opIsRooted(c.op) && c.op != OpKind::Broadcast &&
                 c.op != OpKind::Scatter && rank != pt.root);
  if (c.op == OpKind::AlltoAllv) {
    for (size_t p = 0; p < n && *failures < 5; p++) {
      // Sender p's displacement for its block to this rank.
      size_t sdp = 0;
      for (size_t q = 0; q < r; q++) sdp += count + (p * 3 + q) % 4;
      for (size_t i = 0; i < sh.rc[p]; i++) {
        double want = val(static_cast<int>(p), sdp + i);
        double got = load(out, sh.rd[p] + i, dt);
        if (!close(got, want, dt)) {
          fprintf(stderr, "rank %d alltoallv/%s count %zu dtype %d: from %zu elem %zu got %g want %g\n",
                  rank, c.algo.c_str(), count, dt, p, i, got, want);
          (*failures)++;
          break;
        }
      }
    }
  } else if (check && c.op != OpKind::Barrier) {
    for (size_t i = 0; i < sh.outN; i++) {
      double want = expect(i), got = load(out, i, dt);
      if (!close(got, want, dt)) {
        fprintf(stderr, "rank %d %s/%s n=%d count %zu dtype %d op %d root %d inplace %d: "
                "elem %zu got %g want %g\n", rank, flagcx::opName(c.op), c.algo.c_str(),
                nranks, count, dt, pt.rop, pt.root, pt.inplace, i, got, want);
        (*failures)++;
        break;
      }
    }
  }
}

// One call of the matrix on fresh buffers with guard bytes, on device
// copies under MR_DEVICE=cuda, then its checks.  Returns 0 to go on, or the
// rank's exit code when a check that ends the case failed.
int runPoint(const Case &c, const Point &pt, int rank, int nranks, flagcxComm_t comm,
             flagcxDeviceHandle_t devHandle, int *failures) {
  size_t count = pt.count, n = static_cast<size_t>(nranks), r = static_cast<size_t>(rank);
  flagcxDataType_t dt = pt.dt;
  size_t ts = getFlagcxDataTypeSize(dt);
  Shape sh = shapeOf(c.op, count, n, r);
  Tables t{std::vector<std::array<double, perf::kKeys>>(n), {}};
  for (size_t p = 0; p < n; p++) perf::sourceTable(static_cast<int>(p), dt, pt.rop, t.src[p].data());
  perf::reducedTable(nranks, dt, pt.rop, t.red.data());
  std::vector<char> inBuf, outBuf;
  setGuard(&inBuf, sh.inN * ts);
  setGuard(&outBuf, sh.outN * ts);
  perf::dispatch<perf::Fill>(dt, static_cast<void *>(inBuf.data()), sh.inN, size_t{0},
                             static_cast<const double *>(t.src[r].data()));
  for (size_t i = 0; i < sh.outN; i++) store(outBuf.data(), i, dt, 99);
  char *in = inBuf.data(), *out = outBuf.data();
  bool isRoot = rank == pt.root;
  // In place: place the input where the API says and pass aliased pointers.
  if (pt.inplace) {
    switch (c.op) {
      case OpKind::AllReduce: case OpKind::Reduce: case OpKind::Broadcast:
      case OpKind::AlltoAll:
        memcpy(out, in, sh.inN * ts); in = out; break;
      case OpKind::AllGather:
        memcpy(out + r * count * ts, in, count * ts); in = out + r * count * ts; break;
      case OpKind::Gather:
        if (isRoot) { memcpy(out + r * count * ts, in, count * ts); in = out + r * count * ts; }
        break;
      case OpKind::ReduceScatter:
        out = in + r * count * ts; break;
      case OpKind::Scatter:
        if (isRoot) out = in + r * count * ts;
        break;
      default: break;
    }
  }
  // Out of place, the send buffer must come back unchanged.
  std::vector<char> sentCopy(inBuf.begin(), inBuf.begin() + static_cast<long>(sh.inN * ts));
  // MR_DEVICE=cuda: the same call on device copies of both buffers
  // (aliasing kept), results copied back before the check.
  DeviceMirror mirror;
  if (devHandle) {
    RANK_CHECK(mirror.init(devHandle, inBuf, outBuf) == 0, "device buffers");
    in = mirror.map(in);
    out = mirror.map(out);
  }
  flagcxResult_t res = callOp(c.op, in, out, pt, sh, comm);
  RANK_CHECK(res == flagcxSuccess, "%s/%s count %zu dtype %d op %d root %d inplace %d: %s",
             flagcx::opName(c.op), c.algo.c_str(), count, dt, pt.rop, pt.root, pt.inplace,
             flagcxGetErrorString(res));
  if (devHandle) {
    RANK_CHECK(mirror.back() == 0, "copying device results back");
    in = mirror.unmap(in);
    out = mirror.unmap(out);
  }
  RANK_CHECK(brokenGuard(inBuf, sh.inN * ts) < 0 && brokenGuard(outBuf, sh.outN * ts) < 0,
             "%s/%s count %zu dtype %d op %d root %d inplace %d: wrote past a buffer "
             "(send guard byte %ld, receive guard byte %ld changed)",
             flagcx::opName(c.op), c.algo.c_str(), count, dt, pt.rop, pt.root, pt.inplace,
             brokenGuard(inBuf, sh.inN * ts), brokenGuard(outBuf, sh.outN * ts));
  RANK_CHECK(pt.inplace || sentCopy.empty() ||
                 memcmp(sentCopy.data(), inBuf.data(), sentCopy.size()) == 0,
             "%s/%s count %zu dtype %d op %d root %d: the send buffer changed",
             flagcx::opName(c.op), c.algo.c_str(), count, dt, pt.rop, pt.root);
  checkOutput(c, pt, sh, t, out, rank, nranks, failures);
  return 0;
}

int runCase(const Case &c, int rank, int nranks, flagcxUniqueId *id) {
  flagcxDeviceHandle_t devHandle = nullptr;
  if (deviceRun()) {
    RANK_OK(flagcxDeviceHandleInit(&devHandle));
    char vendor[128] = {};
    RANK_OK(devHandle->getVendor(vendor));
    RANK_CHECK(strcmp(vendor, "host") != 0, "MR_DEVICE set but the device adapter is %s", vendor);
  }
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
  bool full = fullRun();
  std::vector<size_t> counts = {0, 1, 7, 1000, kBigCount};
  if (full) counts.push_back((1u << 20) + 3);
  else counts.push_back(4099);
  std::vector<flagcxDataType_t> dts;
  if (allDtypes()) {
    dts = {flagcxInt8,     flagcxUint8,    flagcxInt32,   flagcxUint32,     flagcxInt64,     flagcxUint64,
           flagcxFloat16,  flagcxBfloat16, flagcxFloat32, flagcxFloat64, flagcxFloat8e4m3, flagcxFloat8e5m2};
  } else {
    dts = {flagcxInt8, flagcxUint32, flagcxFloat16, flagcxBfloat16, flagcxFloat32, flagcxFloat8e4m3};
  }
  bool reduces = flagcx::opReduces(c.op);
  std::vector<flagcxRedOp_t> redops = {flagcxSum};
  if (reduces) redops = {flagcxSum, flagcxProd, flagcxMax, flagcxMin, flagcxAvg};
  std::vector<int> roots = {0};
  if (flagcx::opIsRooted(c.op) && nranks > 1) roots = {0, nranks - 1};
  int failures = 0;
  for (size_t count : counts)
    for (flagcxDataType_t dt : dts)
      for (flagcxRedOp_t rop : redops)
        for (int root : roots)
          for (int inplace = 0; inplace < 2; inplace++) {
            if (!reduces && dt != dts[0] && dt != flagcxFloat16 && count > 1000 && count != kBigCount &&
                !full)
              continue;
            if (count == kBigCount &&
                (dt != flagcxFloat32 || (rop != flagcxSum && rop != flagcxMax) || root != roots[0]))
              continue;
            if (c.op == OpKind::AlltoAllv && inplace) continue;
            int rc = runPoint(c, Point{count, dt, rop, root, inplace}, rank, nranks, comm, devHandle,
                              &failures);
            if (rc) return rc;
            if (failures >= 5) break;
          }
  RANK_OK(flagcxCommDestroy(comm));
  if (devHandle) RANK_OK(flagcxDeviceHandleFree(devHandle));
  return failures ? 1 : 0;
}

std::vector<Case> allCases() {
  flagcx::Registry reg;
  std::string err;
  std::vector<Case> cases;
  if (!flagcx::Registry::load(&reg, &err)) {
    fprintf(stderr, "registry: %s\n", err.c_str());
    return cases;
  }
  for (auto &a : reg.all()) cases.push_back({a.op, a.name});
  return cases;
}

TEST(Collectives, RegistryHasCases) { EXPECT_FALSE(allCases().empty()); }

// One test per shipped algorithm (named op_algo), so a run shows its progress
// and `--gtest_filter=*/Matrix.Run/allreduce_*` picks a part of the matrix.
class Matrix : public ::testing::TestWithParam<Case> {};

TEST_P(Matrix, Run) {
  const Case &c = GetParam();
  std::vector<int> nrankList = fullRun() ? std::vector<int>{1, 2, 3, 4, 5, 7, 8}
                                         : std::vector<int>{1, 2, 3, 4, 5};
  for (int nranks : nrankList) {
    harness::Env env;
    env.vars = {{"FLAGCX_ALGO", std::string(flagcx::opName(c.op)) + ":" + c.algo},
                {"FLAGCX_TIMEOUT", "60"}, {"FLAGCX_NET_CHUNK_SIZE", std::to_string(kChunk)},
                // Vary the data path with the rank count: 2 channels at 3
                // ranks, sockets at 4 (and 8), single-copy shm reads
                // (FLAGCX_SHM_PULL=1) at 5 (and 7), the shm ring otherwise.
                {"FLAGCX_NCHANNELS", nranks == 3 ? "2" : "1"},
                {"FLAGCX_SHM_DISABLE", nranks == 4 || nranks == 8 ? "1" : "0"},
                {"FLAGCX_SHM_PULL", nranks == 5 || nranks == 7 ? "1" : "0"}};
    auto res = harness::run(nranks, [&](int rank, int n, flagcxUniqueId *id) {
      return runCase(c, rank, n, id);
    }, env, 600);
    EXPECT_TRUE(res.allOk()) << flagcx::opName(c.op) << "/" << c.algo << " nranks " << nranks
                             << ": " << res.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Collectives, Matrix, ::testing::ValuesIn(allCases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           std::string n = std::string(flagcx::opName(info.param.op)) + "_" +
                                           info.param.algo;
                           for (char &ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace

namespace {

// A user's script from FLAGCX_ALGO_PATH is found, verified, forced by
// FLAGCX_ALGO, and gives right answers; a broken one fails the init.
TEST(UserAlgorithms, PickedUpVerifiedAndRun) {
  harness::Env env;
  env.vars = {{"FLAGCX_ALGO_PATH", std::string(MR_SOURCE_DIR) + "/user_algos"},
              {"FLAGCX_ALGO", "allreduce:star"}, {"FLAGCX_TIMEOUT", "30"}};
  auto res = harness::run(3, [](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    std::vector<float> in(1000), out(1000);
    for (size_t i = 0; i < in.size(); i++) in[i] = static_cast<float>(rank * 10 + i % 5);
    RANK_OK(flagcxAllReduce(in.data(), out.data(), in.size(), flagcxFloat, flagcxSum, comm, nullptr));
    for (size_t i = 0; i < out.size(); i++)
      RANK_CHECK(out[i] == static_cast<float>(30 + 3 * (i % 5)), "elem %zu = %g", i, out[i]);
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, env, 120);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

TEST(UserAlgorithms, BrokenScriptFailsInit) {
  harness::Env env;
  env.vars = {{"FLAGCX_ALGO_PATH", std::string(MR_SOURCE_DIR) + "/broken_algos"},
              {"FLAGCX_ALGO", "allreduce:twice"}, {"FLAGCX_TIMEOUT", "10"}};
  auto res = harness::run(2, [](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm = nullptr;
    flagcxResult_t r = flagcxCommInitRank(&comm, nranks, id, rank);
    RANK_CHECK(r == flagcxInvalidUsage, "init returned %s", flagcxGetErrorString(r));
    std::string err = flagcxGetLastError(nullptr);
    RANK_CHECK(err.find("twice") != std::string::npos, "error does not name the script: %s",
               err.c_str());
    return 0;
  }, env, 120);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

}  // namespace

namespace {

// FLAGCX_CLUSTER_SPLIT_LIST: tests/multirank/split_list_test.cc.

}  // namespace

namespace {

// The test data's promises (tools/perf/data.h), for every rank count and
// count the tests use (1 Mi + 3 in the full suite only): no two blocks of one buffer are equal (a scatter or
// an alltoall that hands out the wrong block is caught), and from 16
// elements on every rank holds the largest and the smallest value somewhere
// (a max or a min that returns one rank's value is caught).
TEST(Pattern, EveryRankWinsAndBlocksDiffer) {
  std::vector<size_t> counts = {1, 7, 16, 1000, 4099, kBigCount};
  if (fullRun()) counts.push_back((size_t{1} << 20) + 3);  // the full matrix's count
  for (int n = 2; n <= 8; n++)
    for (size_t count : counts) {
      std::vector<std::vector<unsigned>> blocks(static_cast<size_t>(n));
      for (int k = 0; k < n; k++)
        for (size_t i = 0; i < count; i++)
          blocks[static_cast<size_t>(k)].push_back(perf::patternKey(static_cast<size_t>(k) * count + i));
      for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
          EXPECT_NE(blocks[static_cast<size_t>(a)], blocks[static_cast<size_t>(b)])
              << "blocks " << a << " and " << b << " of " << n << " at count " << count;
      if (count < 16) continue;
      for (int r = 0; r < n; r++) {
        bool winsMax = false, winsMin = false;
        for (size_t i = 0; i < count && !(winsMax && winsMin); i++) {
          double mine = perf::sourceValue(r, i, flagcxMax), hi = mine, lo = mine;
          for (int q = 0; q < n; q++) {
            double v = perf::sourceValue(q, i, flagcxMax);
            hi = std::max(hi, v);
            lo = std::min(lo, v);
            if (q != r) {
              EXPECT_NE(v, mine) << "ranks " << q << " and " << r << " tie at " << i;
            }
          }
          winsMax = winsMax || mine == hi;
          winsMin = winsMin || mine == lo;
        }
        EXPECT_TRUE(winsMax && winsMin) << "rank " << r << " of " << n << " at count " << count
                                        << ": wins max " << winsMax << ", min " << winsMin;
      }
    }
}

// Several collectives and a send/recv ring posted in one group (with a
// nested group inside), on a stream: all complete, every result right.
// `helpers`: the run forces socket helper threads; check that they moved.
int groupedBody(int rank, int nranks, flagcxUniqueId *id, size_t cnt = 4099, bool helpers = false) {
  harness::CommOnStream cs;
  RANK_OK(cs.open(rank, nranks, id));
  flagcxComm_t comm = cs.comm;
  flagcxStream_t stream = cs.stream;
  const size_t n = static_cast<size_t>(nranks), r = static_cast<size_t>(rank);
  std::vector<std::array<double, perf::kKeys>> src(n);
  for (size_t p = 0; p < n; p++) perf::sourceTable(static_cast<int>(p), flagcxFloat32, flagcxMax, src[p].data());
  std::array<double, perf::kKeys> maxT, sumT;
  perf::reducedTable(nranks, flagcxFloat32, flagcxMax, maxT.data());
  perf::reducedTable(nranks, flagcxInt32, flagcxSum, sumT.data());
  std::vector<float> in(cnt * n), arOut(cnt, -1), agOut(cnt * n, -1), bcOut(cnt, -1), ring(cnt, -1);
  std::vector<int32_t> inI(cnt * n), rsOut(cnt, -1);
  for (size_t i = 0; i < in.size(); i++) {
    in[i] = static_cast<float>(perf::sourceValue(rank, i, flagcxMax));
    inI[i] = static_cast<int32_t>(perf::sourceValue(rank, i, flagcxSum));
  }
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks, root = nranks - 1;
  RANK_OK(flagcxGroupStart(comm));
  RANK_OK(flagcxAllReduce(in.data(), arOut.data(), cnt, flagcxFloat32, flagcxMax, comm, stream));
  RANK_OK(flagcxAllGather(in.data(), agOut.data(), cnt, flagcxFloat32, comm, stream));
  RANK_OK(flagcxGroupStart(comm));  // groups nest
  RANK_OK(flagcxBroadcast(in.data(), bcOut.data(), cnt, flagcxFloat32, root, comm, stream));
  RANK_OK(flagcxReduceScatter(inI.data(), rsOut.data(), cnt, flagcxInt32, flagcxSum, comm, stream));
  RANK_OK(flagcxGroupEnd(comm));
  RANK_OK(flagcxSend(in.data(), cnt, flagcxFloat32, next, comm, stream));
  RANK_OK(flagcxRecv(ring.data(), cnt, flagcxFloat32, prev, comm, stream));
  RANK_OK(flagcxGroupEnd(comm));
  RANK_OK(cs.sync());
  for (size_t i = 0; i < cnt; i++) {
    unsigned k = perf::patternKey(i);
    RANK_CHECK(arOut[i] == maxT[k], "allreduce(max) [%zu] = %g, want %g", i, arOut[i], maxT[k]);
    RANK_CHECK(bcOut[i] == src[static_cast<size_t>(root)][k], "broadcast [%zu] = %g", i, bcOut[i]);
    RANK_CHECK(ring[i] == src[static_cast<size_t>(prev)][k], "recv [%zu] = %g", i, ring[i]);
    unsigned kr = perf::patternKey(r * cnt + i);
    RANK_CHECK(rsOut[i] == sumT[kr], "reducescatter [%zu] = %d, want %g", i, rsOut[i], sumT[kr]);
    for (size_t p = 0; p < n; p++)
      RANK_CHECK(agOut[p * cnt + i] == src[p][k], "allgather [%zu][%zu] = %g", p, i, agOut[p * cnt + i]);
  }
  if (helpers) RANK_CHECK(flagcx::SocketMover::live() >= 2, "no socket helper thread ran");
  RANK_OK(cs.close());
  return 0;
}

TEST(Grouped, CollectivesAndSendRecvInOneGroup) {
  for (auto [nranks, sockets] : {std::pair{3, false}, std::pair{4, true}}) {
    harness::Env env{{{"FLAGCX_TIMEOUT", "30"}, {"FLAGCX_SHM_DISABLE", sockets ? "1" : "0"}}};
    auto res = harness::run(nranks, [](int rank, int n, flagcxUniqueId *id) {
      return groupedBody(rank, n, id);
    }, env, 120);
    EXPECT_TRUE(res.allOk()) << nranks << " ranks" << (sockets ? " (sockets)" : "") << ": "
                             << res.failures();
  }
}

// The same group with ~1.2 MB per call over sockets, four lanes per peer
// and their helper threads forced on (FLAGCX_SOCKET_HELPERS=1; "auto" keeps
// them off on 2 cores): messages split over the lanes, stripes moved by the
// helpers while the engine sleeps on their completion.
TEST(Grouped, LargeOverSocketHelperThreads) {
  // FLAGCX_NET=Socket: the suites that carry same-host peers over the
  // software RDMA device (FLAGCX_IB_SOFTWARE_DEVICE=2) would take sockets
  // out of this test.
  harness::Env env{{{"FLAGCX_TIMEOUT", "30"}, {"FLAGCX_SHM_DISABLE", "1"}, {"FLAGCX_NET", "Socket"},
                    {"FLAGCX_SOCKET_HELPERS", "1"}, {"FLAGCX_SOCKET_NTHREADS", "4"}}};
  for (int nranks : {2, 4}) {
    auto res = harness::run(nranks, [](int rank, int n, flagcxUniqueId *id) {
      return groupedBody(rank, n, id, 300001, true);
    }, env, 180);
    EXPECT_TRUE(res.allOk()) << nranks << " ranks: " << res.failures();
  }
}

// Barrier by what it promises: no rank leaves before the last one has
// entered.  Each round a different rank arrives last (it sleeps first);
// every rank counts itself in through shared memory before its barrier and
// checks the count when the barrier returns.
TEST(Barrier, NoRankLeavesBeforeTheLastEnters) {
  constexpr int kRounds = 6;
  struct Shared {
    std::atomic<int> entered[kRounds];
  };
  for (auto [nranks, sockets] : {std::pair{2, false}, std::pair{3, false}, std::pair{5, false},
                                 std::pair{4, true}}) {
    Shared *sh = harness::sharedBlock<Shared>();
    harness::Env env{{{"FLAGCX_TIMEOUT", "30"}, {"FLAGCX_SHM_DISABLE", sockets ? "1" : "0"}}};
    auto res = harness::run(nranks, [&](int rank, int n, flagcxUniqueId *id) {
      harness::CommOnStream cs;
      RANK_OK(cs.open(rank, n, id));
      for (int k = 0; k < kRounds; k++) {
        if (rank == k % n) usleep(50000);  // this round's latecomer
        sh->entered[k]++;
        RANK_OK(flagcxBarrier(cs.comm, cs.stream));
        RANK_OK(cs.sync());
        int seen = sh->entered[k].load();
        RANK_CHECK(seen == n, "round %d: left the barrier when %d of %d ranks had entered", k, seen, n);
      }
      RANK_OK(cs.close());
      return 0;
    }, env, 120);
    EXPECT_TRUE(res.allOk()) << nranks << " ranks" << (sockets ? " (sockets)" : "") << ": "
                             << res.failures();
    harness::freeShared(sh);
  }
}

}  // namespace
