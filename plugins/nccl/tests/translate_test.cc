// The drop-in's translation layer (results, datatypes, operations, unique
// ids, ncclConfig_t, the PreMulSum scaling) and its entry points that need
// no peer, on the host adapter (the test runs with FLAGCX_DEVICE=host).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../exports.h"
#include "../scale.h"
#include "../translate.h"

using namespace ncclx;

TEST(Translate, ResultsKeepTheirMeaning) {
  EXPECT_EQ(toNccl(flagcxSuccess), ncclSuccess);
  EXPECT_EQ(toNccl(flagcxUnhandledDeviceError), ncclUnhandledCudaError);
  EXPECT_EQ(toNccl(flagcxSystemError), ncclSystemError);
  EXPECT_EQ(toNccl(flagcxInternalError), ncclInternalError);
  EXPECT_EQ(toNccl(flagcxInvalidArgument), ncclInvalidArgument);
  EXPECT_EQ(toNccl(flagcxInvalidUsage), ncclInvalidUsage);
  EXPECT_EQ(toNccl(flagcxRemoteError), ncclRemoteError);
  EXPECT_EQ(toNccl(flagcxInProgress), ncclInProgress);
  // No NCCL twin: never a value outside ncclResult_t.
  EXPECT_EQ(toNccl(flagcxNotSupported), ncclInvalidUsage);
  EXPECT_EQ(toNccl(flagcxUnhandledCCLError), ncclInternalError);
  EXPECT_EQ(toNccl(static_cast<flagcxResult_t>(1234)), ncclInternalError);
  EXPECT_EQ(toNccl(static_cast<flagcxResult_t>(-1)), ncclInternalError);
}

TEST(Translate, ErrorStrings) {
  for (int r = 0; r < ncclNumResults; r++) {
    const char *s = ncclErrorText(static_cast<ncclResult_t>(r));
    ASSERT_NE(s, nullptr);
    EXPECT_GT(strlen(s), 5u) << r;
    EXPECT_EQ(strcmp(s, ncclErrorText(static_cast<ncclResult_t>(999))) != 0, true) << r;
  }
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_STREQ(ncclGetErrorString(static_cast<ncclResult_t>(-5)), "unknown result code");
}

TEST(Translate, Datatypes) {
  for (int t = ncclInt8; t <= ncclBfloat16; t++) {
    for (Use u : {Use::Move, Use::Reduce, Use::Scale}) {
      flagcxDataType_t out = flagcxNumTypes;
      const char *why = nullptr;
      ASSERT_EQ(mapType(static_cast<ncclDataType_t>(t), u, &out, &why), ncclSuccess);
      EXPECT_EQ(static_cast<int>(out), t);
    }
  }
  // Same element sizes on both sides.
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxFloat16), 2u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxBfloat16), 2u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxInt64), 8u);
  // float8: the flagcx type of the same value, moved and reduced; only the
  // PreMulSum scaling refuses it.
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxFloat8e4m3), 1u);
  for (ncclDataType_t t : {ncclFloat8e4m3, ncclFloat8e5m2}) {
    for (Use u : {Use::Move, Use::Reduce}) {
      flagcxDataType_t out = flagcxNumTypes;
      const char *why = nullptr;
      EXPECT_EQ(mapType(t, u, &out, &why), ncclSuccess);
      EXPECT_EQ(static_cast<int>(out), static_cast<int>(t));
    }
    EXPECT_EQ(static_cast<int>(t) == ncclFloat8e4m3 ? flagcxFloat8e4m3 : flagcxFloat8e5m2,
              static_cast<flagcxDataType_t>(t));
    flagcxDataType_t out = flagcxNumTypes;
    const char *why = nullptr;
    EXPECT_EQ(mapType(t, Use::Scale, &out, &why), ncclInvalidArgument);
    ASSERT_NE(why, nullptr);
    EXPECT_NE(strstr(why, "float8"), nullptr);
  }
  for (int bad : {-1, static_cast<int>(ncclNumTypes), 99}) {
    flagcxDataType_t out;
    const char *why = nullptr;
    EXPECT_EQ(mapType(static_cast<ncclDataType_t>(bad), Use::Move, &out, &why), ncclInvalidArgument);
    EXPECT_EQ(mapType(static_cast<ncclDataType_t>(bad), Use::Reduce, &out, &why), ncclInvalidArgument);
    EXPECT_EQ(mapType(static_cast<ncclDataType_t>(bad), Use::Scale, &out, &why), ncclInvalidArgument);
  }
}

TEST(Translate, Operations) {
  for (int op = 0; op < ncclNumOps; op++) EXPECT_TRUE(builtinOp(static_cast<ncclRedOp_t>(op)));
  EXPECT_FALSE(builtinOp(static_cast<ncclRedOp_t>(ncclNumOps)));
  EXPECT_FALSE(builtinOp(static_cast<ncclRedOp_t>(-1)));
  for (int i : {0, 1, 17, kMaxUserOps - 1}) EXPECT_EQ(userOpIndex(userOp(i)), i);
  EXPECT_EQ(static_cast<int>(userOp(0)), static_cast<int>(ncclNumOps));
  EXPECT_EQ(userOpIndex(ncclSum), -1);
  EXPECT_EQ(userOpIndex(ncclAvg), -1);
  EXPECT_EQ(userOpIndex(static_cast<ncclRedOp_t>(ncclNumOps + kMaxUserOps)), -1);
  EXPECT_EQ(userOpIndex(ncclMaxRedOp), -1);
}

TEST(Translate, UniqueIdCarriesFlagcxId) {
  flagcxUniqueId f;
  memset(&f, 0, sizeof(f));
  for (size_t i = 0; i < sizeof(ncclUniqueId); i++) f.internal[i] = static_cast<char>(i * 7 + 1);
  ncclUniqueId n;
  std::string why;
  ASSERT_EQ(packId(f, &n, &why), ncclSuccess);
  flagcxUniqueId back;
  memset(&back, 0x55, sizeof(back));
  unpackId(n, &back);
  EXPECT_EQ(memcmp(&back, &f, sizeof(f)), 0);
  f.internal[200] = 1;  // a flagcx id that does not fit
  EXPECT_EQ(packId(f, &n, &why), ncclInternalError);
  EXPECT_NE(why.find("200"), std::string::npos) << why;
  // A real id (its root listens in this process) fits, and ncclGetUniqueId agrees.
  flagcxUniqueId real;
  ASSERT_EQ(flagcxGetUniqueId(&real), flagcxSuccess);
  EXPECT_EQ(packId(real, &n, &why), ncclSuccess) << why;
  ncclUniqueId viaApi;
  ASSERT_EQ(ncclGetUniqueId(&viaApi), ncclSuccess);
  EXPECT_EQ(ncclGetUniqueId(nullptr), ncclInvalidArgument);
}

TEST(Translate, Config) {
  Config c;
  std::string why;
  ASSERT_EQ(parseConfig(nullptr, nullptr, &c, &why), ncclSuccess);
  EXPECT_TRUE(c.blocking);
  ASSERT_EQ(parseConfig(nullptr, "0", &c, &why), ncclSuccess);
  EXPECT_FALSE(c.blocking);  // NCCL_COMM_BLOCKING=0

  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ASSERT_EQ(parseConfig(&cfg, nullptr, &c, &why), ncclSuccess);
  EXPECT_TRUE(c.blocking);
  EXPECT_TRUE(c.ignored.empty()) << c.ignored;
  ASSERT_EQ(parseConfig(&cfg, "0", &c, &why), ncclSuccess);
  EXPECT_FALSE(c.blocking);  // undefined in the config: the variable decides
  cfg.blocking = 1;
  ASSERT_EQ(parseConfig(&cfg, "0", &c, &why), ncclSuccess);
  EXPECT_TRUE(c.blocking);  // the config wins
  cfg.blocking = 0;
  cfg.commName = "trainer";
  cfg.minCTAs = 4;
  cfg.netName = "IB";
  ASSERT_EQ(parseConfig(&cfg, nullptr, &c, &why), ncclSuccess);
  EXPECT_FALSE(c.blocking);
  EXPECT_EQ(c.commName, "trainer");
  EXPECT_NE(c.ignored.find("minCTAs"), std::string::npos);
  EXPECT_NE(c.ignored.find("netName"), std::string::npos);

  cfg.blocking = 2;
  EXPECT_EQ(parseConfig(&cfg, nullptr, &c, &why), ncclInvalidArgument);
  EXPECT_NE(why.find("blocking"), std::string::npos);
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  EXPECT_EQ(parseConfig(&bad, nullptr, &c, &why), ncclInvalidArgument);
  EXPECT_NE(why.find("NCCL_CONFIG_INITIALIZER"), std::string::npos);
  bad = ncclConfig_t(NCCL_CONFIG_INITIALIZER);
  bad.version = 7;
  EXPECT_EQ(parseConfig(&bad, nullptr, &c, &why), ncclInvalidArgument);
  bad = ncclConfig_t(NCCL_CONFIG_INITIALIZER);
  bad.size = 8;
  EXPECT_EQ(parseConfig(&bad, nullptr, &c, &why), ncclInvalidArgument);

  // An older, smaller struct: fields beyond its size are not read.
  ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
  old.size = offsetof(ncclConfig_t, netName);
  old.blocking = 0;
  old.commName = "must not be read";
  old.nvlinkCentricSched = 1;
  ASSERT_EQ(parseConfig(&old, nullptr, &c, &why), ncclSuccess);
  EXPECT_FALSE(c.blocking);
  EXPECT_TRUE(c.commName.empty());
  EXPECT_EQ(c.ignored.find("nvlinkCentricSched"), std::string::npos);
}

namespace {
template <class T>
void expectScaled(ncclDataType_t t, std::vector<T> in, T s, std::vector<T> want) {
  std::vector<T> out(in.size());
  scaleHost(out.data(), in.data(), in.size(), t, &s);
  EXPECT_EQ(memcmp(out.data(), want.data(), want.size() * sizeof(T)), 0) << "type " << t;
}
uint16_t halfBits(float f) {  // exact for the values used below
  if (f == 0) return 0;
  int e;
  float m = std::frexp(std::fabs(f), &e);  // f = m * 2^e, m in [0.5, 1)
  uint16_t bits = static_cast<uint16_t>(((e - 1 + 15) << 10) | static_cast<int>((m * 2 - 1) * 1024));
  return f < 0 ? static_cast<uint16_t>(bits | 0x8000) : bits;
}
uint16_t bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
}  // namespace

TEST(Translate, PreMulSumScaling) {
  expectScaled<int8_t>(ncclInt8, {1, -2, 100}, 3, {3, -6, 44});  // 300 wraps to 44
  expectScaled<uint8_t>(ncclUint8, {1, 2, 200}, 2, {2, 4, 144});
  expectScaled<int32_t>(ncclInt32, {7, -7, 1 << 30}, -2, {-14, 14, INT32_MIN});
  expectScaled<uint32_t>(ncclUint32, {5, 0xffffffffu}, 2, {10, 0xfffffffeu});
  expectScaled<int64_t>(ncclInt64, {1ll << 40, -3}, 4, {1ll << 42, -12});
  expectScaled<uint64_t>(ncclUint64, {9}, 9, {81});
  expectScaled<float>(ncclFloat32, {1.5f, -2.0f, 0.0f}, 0.5f, {0.75f, -1.0f, 0.0f});
  expectScaled<double>(ncclFloat64, {1e300, 3.0}, 2.0, {2e300, 6.0});
  expectScaled<uint16_t>(ncclFloat16, {halfBits(1.5f), halfBits(-3.0f), halfBits(0.25f)}, halfBits(2.0f),
                         {halfBits(3.0f), halfBits(-6.0f), halfBits(0.5f)});
  expectScaled<uint16_t>(ncclBfloat16, {bf16(1.5f), bf16(-3.0f), bf16(1024.0f)}, bf16(0.5f),
                         {bf16(0.75f), bf16(-1.5f), bf16(512.0f)});
  // half overflow goes to infinity, not garbage
  expectScaled<uint16_t>(ncclFloat16, {halfBits(32768.0f)}, halfBits(4.0f), {0x7c00});
}

TEST(Api, VersionAndRefusals) {
  int v = 0;
  ASSERT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_GE(v, 22800);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
  ncclComm_t c = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(ncclCommShrink(nullptr, nullptr, 0, &c, nullptr, 0), ncclInvalidArgument);
  EXPECT_NE(strstr(ncclGetLastError(nullptr), "ncclCommShrink"), nullptr);
  EXPECT_EQ(ncclCommRevoke(nullptr, 0), ncclInvalidArgument);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_EQ(ncclCommCount(nullptr, &v), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(nullptr), ncclSuccess);
  ncclComm_t out = nullptr;
  ncclUniqueId id{};
  EXPECT_EQ(ncclCommInitRank(&out, 0, id, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(&out, 2, id, 2), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(nullptr, 2, id, 0), ncclInvalidArgument);
  // A zero id is not a flagcx id: refused by flagcx, reported as NCCL's code.
  EXPECT_EQ(ncclCommInitRank(&out, 1, id, 0), ncclInvalidArgument);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(ncclCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument);
  ncclComm_t two[2];
  int badList[2] = {0, 5};  // the host adapter has one device
  EXPECT_EQ(ncclCommInitAll(two, 2, badList), ncclInvalidArgument);
}

TEST(Api, OneRankCommunicator) {
  ncclComm_t c = nullptr;
  ASSERT_EQ(ncclCommInitAll(&c, 1, nullptr), ncclSuccess);
  int n = 0, r = -1;
  EXPECT_EQ(ncclCommCount(c, &n), ncclSuccess);
  EXPECT_EQ(ncclCommUserRank(c, &r), ncclSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(r, 0);
  double x[3] = {1, 2, 3}, y[3] = {};
  EXPECT_EQ(ncclAllReduce(x, y, 3, ncclDouble, ncclSum, c, nullptr), ncclSuccess);
  EXPECT_EQ(y[2], 3.0);
  ncclRedOp_t op;
  double s = 0.5;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &s, ncclDouble, ncclScalarDevice, c), ncclSuccess);
  s = 4;  // ncclScalarDevice: read when the operation runs
  EXPECT_EQ(ncclAllReduce(x, y, 3, ncclDouble, op, c, nullptr), ncclSuccess);
  EXPECT_EQ(y[1], 8.0);
  EXPECT_EQ(ncclRedOpDestroy(op, c), ncclSuccess);
  EXPECT_EQ(ncclRedOpDestroy(op, c), ncclInvalidArgument);
  // The group brackets a creation: the communicator is usable after ncclGroupEnd.
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t g = nullptr;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclCommInitRank(&g, 1, id, 0), ncclSuccess);
  ASSERT_NE(g, nullptr);
  ncclResult_t a = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(g, &a), ncclSuccess);
  EXPECT_EQ(a, ncclInProgress);
  EXPECT_EQ(ncclCommCount(g, &n), ncclInvalidUsage);  // not before ncclGroupEnd
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclCommCount(g, &n), ncclSuccess);
  // Nested groups: only the outermost end runs the work; an empty group and
  // an end without a start.
  float u[4] = {1, 2, 3, 4}, v[4] = {};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(u, v, 4, ncclFloat, ncclSum, g, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclBroadcast(u, u + 2, 2, ncclFloat, 0, g, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(v[3], 4.0f);
  EXPECT_EQ(u[2], 1.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_EQ(ncclCommDestroy(g), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// Several ranks in one process, driven by one thread (what nccl-tests does
// with -t/-g and what ncclCommInitAll is for).  On the host adapter: NULL
// streams inside a group, and host streams passed as cudaStream_t.
namespace {
void groupAllReduce(ncclComm_t *c, int n, cudaStream_t *streams, float base) {
  std::vector<std::vector<float>> in(n, std::vector<float>(33)), out(n, std::vector<float>(33));
  for (int k = 0; k < n; k++)
    for (int i = 0; i < 33; i++) in[k][i] = base + k + i;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int k = 0; k < n; k++)
    ASSERT_EQ(ncclAllReduce(in[k].data(), out[k].data(), 33, ncclFloat, ncclSum, c[k],
                            streams ? streams[k] : nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  if (streams) {
    for (int k = 0; k < n; k++)
      ASSERT_EQ(device()->streamSynchronize(reinterpret_cast<flagcxStream_t>(streams[k])), flagcxSuccess);
  }
  for (int k = 0; k < n; k++)
    for (int i = 0; i < 33; i++)
      ASSERT_EQ(out[k][i], n * (base + i) + n * (n - 1) / 2.0f) << "rank " << k << " [" << i << "]";
}
}  // namespace

TEST(SameProcess, InitAllThenGroupsOnNullStreams) {
  constexpr int n = 3;
  ncclComm_t c[n] = {};
  ASSERT_EQ(ncclCommInitAll(c, n, nullptr), ncclSuccess);
  for (int k = 0; k < n; k++) {
    int r = -1;
    ASSERT_EQ(ncclCommUserRank(c[k], &r), ncclSuccess);
    EXPECT_EQ(r, k);
  }
  for (int it = 0; it < 3; it++) groupAllReduce(c, n, nullptr, static_cast<float>(it));
  // A ring of sends and receives, one group for every rank.
  std::vector<std::vector<int>> snd(n, std::vector<int>(100)), rcv(n, std::vector<int>(100, -1));
  for (int k = 0; k < n; k++)
    for (int i = 0; i < 100; i++) snd[k][i] = k * 1000 + i;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int k = 0; k < n; k++) {
    ASSERT_EQ(ncclSend(snd[k].data(), 100, ncclInt32, (k + 1) % n, c[k], nullptr), ncclSuccess);
    ASSERT_EQ(ncclRecv(rcv[k].data(), 100, ncclInt32, (k + n - 1) % n, c[k], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int k = 0; k < n; k++) EXPECT_EQ(rcv[k][99], ((k + n - 1) % n) * 1000 + 99);
  for (int k = 0; k < n; k++) EXPECT_EQ(ncclCommDestroy(c[k]), ncclSuccess);
}

TEST(SameProcess, InitRankInOneGroupThenStreams) {
  constexpr int n = 2;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t c[n] = {};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int k = 0; k < n; k++) ASSERT_EQ(ncclCommInitRank(&c[k], n, id, k), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  // On the host adapter a "cudaStream_t" is a flagcx host stream.
  cudaStream_t s[n];
  for (int k = 0; k < n; k++) {
    flagcxStream_t fs = nullptr;
    ASSERT_EQ(device()->streamCreate(&fs), flagcxSuccess);
    s[k] = reinterpret_cast<cudaStream_t>(fs);
  }
  for (int it = 0; it < 3; it++) groupAllReduce(c, n, s, 10.0f * it);
  for (int k = 0; k < n; k++) EXPECT_EQ(ncclCommDestroy(c[k]), ncclSuccess);
}
