// The collective correctness matrix: every op x every shipped algorithm x
// nranks x counts x in/out-of-place x dtypes x reduction ops, real processes,
// each element checked against a reference computed here.  MR_FULL=1 (the
// `full` suite) widens every axis.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/comm.h"
#include "harness.h"
#include "sched/ir.h"
#include "sched/registry.h"

namespace {

using flagcx::OpKind;

bool fullRun() { return getenv("MR_FULL") && strcmp(getenv("MR_FULL"), "1") == 0; }
// MR_DEVICE=cuda (tools/gpu-check.sh): buffers in device memory.
bool deviceRun() { return getenv("MR_DEVICE") && *getenv("MR_DEVICE"); }

// Device copies of a case's two host buffers; pointers into either map across.
struct DeviceMirror {
  flagcxDeviceHandle_t h = nullptr;
  std::vector<char> *hb[2] = {nullptr, nullptr};
  char *db[2] = {nullptr, nullptr};
  int init(flagcxDeviceHandle_t handle, std::vector<char> &a, std::vector<char> &b) {
    h = handle;
    hb[0] = &a;
    hb[1] = &b;
    for (int k = 0; k < 2; k++) {
      void *p = nullptr;
      if (h->deviceMalloc(&p, hb[k]->size() + 16, flagcxMemDevice, nullptr) != flagcxSuccess) return 1;
      db[k] = static_cast<char *>(p);
      if (h->deviceMemcpy(db[k], hb[k]->data(), hb[k]->size(), flagcxMemcpyHostToDevice, nullptr) !=
          flagcxSuccess)
        return 1;
    }
    return 0;
  }
  char *map(char *p) const {
    for (int k = 0; k < 2; k++)
      if (p >= hb[k]->data() && p <= hb[k]->data() + hb[k]->size()) return db[k] + (p - hb[k]->data());
    return p;
  }
  char *unmap(char *p) const {
    for (int k = 0; k < 2; k++)
      if (db[k] && p >= db[k] && p <= db[k] + hb[k]->size()) return hb[k]->data() + (p - db[k]);
    return p;
  }
  int back() {
    for (int k = 0; k < 2; k++)
      if (h->deviceMemcpy(hb[k]->data(), db[k], hb[k]->size(), flagcxMemcpyDeviceToHost, nullptr) !=
          flagcxSuccess)
        return 1;
    return 0;
  }
  ~DeviceMirror() {
    for (char *p : db)
      if (p) h->deviceFree(p, flagcxMemDevice, nullptr);
  }
};

// --- half / bfloat16 (the test's own conversions) ---
uint16_t toHalf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (exp <= 0) return static_cast<uint16_t>(sign);  // test values are never tiny
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return static_cast<uint16_t>(h);
}
float fromHalf(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      float f = std::ldexp(static_cast<float>(mant), -24);
      return (h & 0x8000u) ? -f : f;
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}
uint16_t toBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}
float fromBf16(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

// Store/load a double (an exact small integer, or an average) as dtype.
void store(void *buf, size_t i, flagcxDataType_t dt, double v) {
  switch (dt) {
    case flagcxInt8: static_cast<int8_t *>(buf)[i] = static_cast<int8_t>(static_cast<int64_t>(v)); break;
    case flagcxUint8: static_cast<uint8_t *>(buf)[i] = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
    case flagcxInt32: static_cast<int32_t *>(buf)[i] = static_cast<int32_t>(static_cast<int64_t>(v)); break;
    case flagcxUint32: static_cast<uint32_t *>(buf)[i] = static_cast<uint32_t>(static_cast<int64_t>(v)); break;
    case flagcxInt64: static_cast<int64_t *>(buf)[i] = static_cast<int64_t>(v); break;
    case flagcxUint64: static_cast<uint64_t *>(buf)[i] = static_cast<uint64_t>(static_cast<int64_t>(v)); break;
    case flagcxFloat16: static_cast<uint16_t *>(buf)[i] = toHalf(static_cast<float>(v)); break;
    case flagcxBfloat16: static_cast<uint16_t *>(buf)[i] = toBf16(static_cast<float>(v)); break;
    case flagcxFloat32: static_cast<float *>(buf)[i] = static_cast<float>(v); break;
    case flagcxFloat64: static_cast<double *>(buf)[i] = v; break;
    default: break;
  }
}
double load(const void *buf, size_t i, flagcxDataType_t dt) {
  switch (dt) {
    case flagcxInt8: return static_cast<const int8_t *>(buf)[i];
    case flagcxUint8: return static_cast<const uint8_t *>(buf)[i];
    case flagcxInt32: return static_cast<const int32_t *>(buf)[i];
    case flagcxUint32: return static_cast<const uint32_t *>(buf)[i];
    case flagcxInt64: return static_cast<double>(static_cast<const int64_t *>(buf)[i]);
    case flagcxUint64: return static_cast<double>(static_cast<const uint64_t *>(buf)[i]);
    case flagcxFloat16: return fromHalf(static_cast<const uint16_t *>(buf)[i]);
    case flagcxBfloat16: return fromBf16(static_cast<const uint16_t *>(buf)[i]);
    case flagcxFloat32: return static_cast<const float *>(buf)[i];
    case flagcxFloat64: return static_cast<const double *>(buf)[i];
    default: return 0;
  }
}
bool isInt(flagcxDataType_t dt) { return dt <= flagcxUint64; }

// Rank- and index-dependent inputs, never all zero, exact in every dtype.
double value(int rank, size_t i, flagcxRedOp_t op) {
  if (op == flagcxProd) return ((rank * 7 + i) % 3 == 0) ? 2 : 1;
  return static_cast<double>((rank * 3 + i * 5) % 7 + 1 + (rank % 2) * 8);
}

// The expected reduction of value(r, i) over all ranks, as the dtype holds it.
double reduceRef(int nranks, size_t i, flagcxDataType_t dt, flagcxRedOp_t op) {
  double acc = value(0, i, op);
  for (int r = 1; r < nranks; r++) {
    double v = value(r, i, op);
    if (op == flagcxSum || op == flagcxAvg) acc += v;
    if (op == flagcxProd) acc *= v;
    if (op == flagcxMax) acc = std::max(acc, v);
    if (op == flagcxMin) acc = std::min(acc, v);
  }
  if (op == flagcxAvg) acc = isInt(dt) ? std::trunc(acc / nranks) : acc / nranks;
  // Wrap integers as the dtype does.
  std::vector<char> tmp(8);
  store(tmp.data(), 0, dt, acc);
  return load(tmp.data(), 0, dt);
}

bool close(double got, double want, flagcxDataType_t dt) {
  if (isInt(dt)) return got == want;
  double tol = dt == flagcxFloat16 ? 1e-2 : dt == flagcxBfloat16 ? 2e-2 : 1e-5;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

double load_value(int rank, size_t i, flagcxDataType_t dt, flagcxRedOp_t op) {
  std::vector<char> tmp(8);
  store(tmp.data(), 0, dt, value(rank, i, op));
  return load(tmp.data(), 0, dt);
}

struct Case {
  OpKind op;
  std::string algo;
};
void PrintTo(const Case &c, std::ostream *os) { *os << flagcx::opName(c.op) << ":" << c.algo; }

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
  std::vector<size_t> counts = {0, 1, 7, 1000};
  if (full) counts.push_back((1u << 20) + 3);
  else counts.push_back(4099);
  std::vector<flagcxDataType_t> dts;
  if (full) {
    dts = {flagcxInt8, flagcxUint8, flagcxInt32, flagcxUint32, flagcxInt64,
           flagcxUint64, flagcxFloat16, flagcxBfloat16, flagcxFloat32, flagcxFloat64};
  } else {
    dts = {flagcxInt8, flagcxUint32, flagcxFloat16, flagcxBfloat16, flagcxFloat32};
  }
  bool reduces = flagcx::opReduces(c.op);
  std::vector<flagcxRedOp_t> redops = {flagcxSum};
  if (reduces) redops = {flagcxSum, flagcxProd, flagcxMax, flagcxMin, flagcxAvg};
  std::vector<int> roots = {0};
  if (flagcx::opIsRooted(c.op) && nranks > 1) roots = {0, nranks - 1};
  size_t n = static_cast<size_t>(nranks);
  int failures = 0;
  for (size_t count : counts)
    for (flagcxDataType_t dt : dts)
      for (flagcxRedOp_t rop : redops)
        for (int root : roots)
          for (int inplace = 0; inplace < 2; inplace++) {
            if (!reduces && dt != dts[0] && dt != flagcxFloat16 && count > 1000 && !full) continue;
            if (c.op == OpKind::AlltoAllv && inplace) continue;
            size_t ts = getFlagcxDataTypeSize(dt);
            // Input/output element counts per op.
            size_t inN = count, outN = count;
            std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
            switch (c.op) {
              case OpKind::AllGather: case OpKind::Gather: outN = count * n; break;
              case OpKind::ReduceScatter: case OpKind::Scatter: inN = count * n; break;
              case OpKind::AlltoAll: inN = outN = count * n; break;
              case OpKind::AlltoAllv: {
                size_t s = 0, r = 0;
                for (size_t p = 0; p < n; p++) {
                  sc[p] = count + (static_cast<size_t>(rank) * 3 + p) % 4;
                  rc[p] = count + (p * 3 + static_cast<size_t>(rank)) % 4;
                  sd[p] = s; rd[p] = r;
                  s += sc[p]; r += rc[p];
                }
                inN = s; outN = r;
                break;
              }
              default: break;
            }
            std::vector<char> inBuf(std::max<size_t>(inN, 1) * ts), outBuf(std::max<size_t>(outN, 1) * ts);
            for (size_t i = 0; i < inN; i++) store(inBuf.data(), i, dt, value(rank, i, rop));
            for (size_t i = 0; i < outN; i++) store(outBuf.data(), i, dt, 99);
            char *in = inBuf.data(), *out = outBuf.data();
            size_t r = static_cast<size_t>(rank);
            bool isRoot = rank == root;
            // In place: place the input where the API says and pass aliased pointers.
            if (inplace) {
              switch (c.op) {
                case OpKind::AllReduce: case OpKind::Reduce: case OpKind::Broadcast:
                case OpKind::AlltoAll:
                  memcpy(out, in, inN * ts); in = out; break;
                case OpKind::AllGather:
                  memcpy(out + r * count * ts, in, count * ts); in = out + r * count * ts; break;
                case OpKind::Gather:
                  if (isRoot) { memcpy(out + r * count * ts, in, count * ts); in = out + r * count * ts; }
                  break;
                case OpKind::ReduceScatter:
                  outBuf.assign(1, 0); out = in + r * count * ts; break;
                case OpKind::Scatter:
                  if (isRoot) out = in + r * count * ts;
                  break;
                default: break;
              }
            }
            // MR_DEVICE=cuda: the same call on device copies of both buffers
            // (aliasing kept), results copied back before the check.
            DeviceMirror mirror;
            if (devHandle) {
              RANK_CHECK(mirror.init(devHandle, inBuf, outBuf) == 0, "device buffers");
              in = mirror.map(in);
              out = mirror.map(out);
            }
            flagcxResult_t res = flagcxSuccess;
            switch (c.op) {
              case OpKind::AllReduce: res = flagcxAllReduce(in, out, count, dt, rop, comm, nullptr); break;
              case OpKind::Reduce: res = flagcxReduce(in, out, count, dt, rop, root, comm, nullptr); break;
              case OpKind::Broadcast: res = flagcxBroadcast(in, out, count, dt, root, comm, nullptr); break;
              case OpKind::AllGather: res = flagcxAllGather(in, out, count, dt, comm, nullptr); break;
              case OpKind::Gather: res = flagcxGather(in, out, count, dt, root, comm, nullptr); break;
              case OpKind::ReduceScatter: res = flagcxReduceScatter(in, out, count, dt, rop, comm, nullptr); break;
              case OpKind::Scatter: res = flagcxScatter(in, out, count, dt, root, comm, nullptr); break;
              case OpKind::AlltoAll: res = flagcxAlltoAll(in, out, count, dt, comm, nullptr); break;
              case OpKind::AlltoAllv:
                res = flagcxAlltoAllv(in, sc.data(), sd.data(), out, rc.data(), rd.data(), dt, comm, nullptr);
                break;
              case OpKind::Barrier: res = flagcxBarrier(comm, nullptr); break;
              default: break;
            }
            RANK_CHECK(res == flagcxSuccess, "%s/%s count %zu dtype %d op %d root %d inplace %d: %s",
                       flagcx::opName(c.op), c.algo.c_str(), count, dt, rop, root, inplace,
                       flagcxGetErrorString(res));
            if (devHandle) {
              RANK_CHECK(mirror.back() == 0, "copying device results back");
              in = mirror.unmap(in);
              out = mirror.unmap(out);
            }
            // Check.  value() depends on the index only modulo kPeriod, so
            // the references are computed once per residue (and source rank).
            constexpr size_t kPeriod = 21;
            std::vector<double> refMemo(kPeriod, NAN), valMemo((n + 1) * kPeriod, NAN);
            auto ref = [&](size_t gi) {
              double &m = refMemo[gi % kPeriod];
              if (std::isnan(m)) m = reduceRef(nranks, gi % kPeriod, dt, rop);
              return m;
            };
            auto val = [&](int src, size_t gi) {
              double &m = valMemo[static_cast<size_t>(src) * kPeriod + gi % kPeriod];
              if (std::isnan(m)) m = load_value(src, gi % kPeriod, dt, rop);
              return m;
            };
            auto expect = [&](size_t i) -> double {
              switch (c.op) {
                case OpKind::AllReduce: case OpKind::Reduce: return ref(i);
                case OpKind::Broadcast: return val(root, i);
                case OpKind::AllGather: case OpKind::Gather:
                  return val(static_cast<int>(i / count), i % count);
                case OpKind::ReduceScatter: return ref(r * count + i);
                case OpKind::Scatter: return val(root, r * count + i);
                case OpKind::AlltoAll:
                  return val(static_cast<int>(i / count), r * count + i % count);
                default: return 0;
              }
            };
            bool check = !(flagcx::opIsRooted(c.op) && c.op != OpKind::Broadcast &&
                           c.op != OpKind::Scatter && !isRoot);
            if (c.op == OpKind::AlltoAllv) {
              for (size_t p = 0; p < n && failures < 5; p++) {
                // Sender p's displacement for its block to this rank.
                size_t sdp = 0;
                for (size_t q = 0; q < r; q++) sdp += count + (p * 3 + q) % 4;
                for (size_t i = 0; i < rc[p]; i++) {
                  double want = val(static_cast<int>(p), sdp + i);
                  double got = load(out, rd[p] + i, dt);
                  if (!close(got, want, dt)) {
                    fprintf(stderr, "rank %d alltoallv/%s count %zu dtype %d: from %zu elem %zu got %g want %g\n",
                            rank, c.algo.c_str(), count, dt, p, i, got, want);
                    failures++;
                    break;
                  }
                }
              }
            } else if (check && c.op != OpKind::Barrier) {
              for (size_t i = 0; i < outN; i++) {
                double want = expect(i), got = load(out, i, dt);
                if (!close(got, want, dt)) {
                  fprintf(stderr, "rank %d %s/%s n=%d count %zu dtype %d op %d root %d inplace %d: "
                          "elem %zu got %g want %g\n", rank, flagcx::opName(c.op), c.algo.c_str(),
                          nranks, count, dt, rop, root, inplace, i, got, want);
                  failures++;
                  break;
                }
              }
            }
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
    mr::Env env;
    env.vars = {{"FLAGCX_ALGO", std::string(flagcx::opName(c.op)) + ":" + c.algo},
                {"FLAGCX_TIMEOUT", "60"}, {"FLAGCX_NET_CHUNK_SIZE", "65536"},
                // Vary the data path with the rank count: 2 channels at 3
                // ranks, sockets at 4 (and 8), single-copy shm reads
                // (FLAGCX_SHM_PULL=1) at 5 (and 7), the shm ring otherwise.
                {"FLAGCX_NCHANNELS", nranks == 3 ? "2" : "1"},
                {"FLAGCX_SHM_DISABLE", nranks == 4 || nranks == 8 ? "1" : "0"},
                {"FLAGCX_SHM_PULL", nranks == 5 || nranks == 7 ? "1" : "0"}};
    auto res = mr::run(nranks, [&](int rank, int n, flagcxUniqueId *id) {
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
  mr::Env env;
  env.vars = {{"FLAGCX_ALGO_PATH", std::string(MR_SOURCE_DIR) + "/user_algos"},
              {"FLAGCX_ALGO", "allreduce:star"}, {"FLAGCX_TIMEOUT", "30"}};
  auto res = mr::run(3, [](int rank, int nranks, flagcxUniqueId *id) {
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
  mr::Env env;
  env.vars = {{"FLAGCX_ALGO_PATH", std::string(MR_SOURCE_DIR) + "/broken_algos"},
              {"FLAGCX_ALGO", "allreduce:twice"}, {"FLAGCX_TIMEOUT", "10"}};
  auto res = mr::run(2, [](int rank, int nranks, flagcxUniqueId *id) {
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

// FLAGCX_CLUSTER_SPLIT_LIST: tests/mr/test_split_list.cc.

}  // namespace
