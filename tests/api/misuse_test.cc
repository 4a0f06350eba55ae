// API misuse: every public entry point of flagcx.h with NULL pointers, bad
// ranks, bad dtypes and ops, overflowing counts, a destroyed communicator and
// an aborted one.  Each must return the documented code (flagcxInvalidArgument
// for a bad argument or a dead handle, flagcxInvalidUsage for a call that is
// wrong in context), leave a log line that flagcxGetLastError(NULL) returns
// naming the argument, and never crash.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flagcx.h"
#include "tests/common/inspect.h"

namespace {

const auto kBadDt = static_cast<flagcxDataType_t>(99);
const auto kNegDt = static_cast<flagcxDataType_t>(-1);
const auto kBadOp = static_cast<flagcxRedOp_t>(99);

struct Case {
  std::string what;
  std::function<flagcxResult_t()> call;
  flagcxResult_t want;
  std::string mention;  // the argument the error must name ("" = any text)
  flagcxResult_t alt = flagcxSuccess;  // a second acceptable code (Success = none)
};

void runCases(const std::vector<Case> &cases) {
  for (const Case &c : cases) {
    flagcxResult_t got = c.call();
    if (c.alt != flagcxSuccess && got == c.alt) continue;
    EXPECT_EQ(got, c.want) << c.what << ": got " << flagcxGetErrorString(got);
    const char *last = flagcxGetLastError(nullptr);
    ASSERT_NE(last, nullptr) << c.what;
    if (got != flagcxSuccess && !c.mention.empty()) {
      EXPECT_TRUE(harness::containsCi(last, c.mention))
          << c.what << ": flagcxGetLastError(NULL) does not name '" << c.mention << "': " << last;
    }
  }
}

flagcxComm_t makeComm() {
  flagcxUniqueId id;
  if (flagcxGetUniqueId(&id) != flagcxSuccess) return nullptr;
  flagcxComm_t comm = nullptr;
  if (flagcxCommInitRank(&comm, 1, &id, 0) != flagcxSuccess) return nullptr;
  return comm;
}

class Misuse : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("FLAGCX_TIMEOUT", "5", 1);
    comm = makeComm();
    ASSERT_NE(comm, nullptr) << flagcxGetLastError(nullptr);
  }
  void TearDown() override {
    if (comm) flagcxCommDestroy(comm);
  }
  flagcxComm_t comm = nullptr;
  std::vector<float> a = std::vector<float>(64, 1.f), b = std::vector<float>(64, 0.f);
  size_t sc[1] = {4}, sd[1] = {0}, rc[1] = {4}, rd[1] = {0};
};

// Every entry point that takes a communicator, called with `c` (NULL, dead).
std::vector<Case> commCases(flagcxComm_t c, flagcxResult_t want, const std::string &mention,
                            float *a, float *b, size_t *sc, size_t *sd, size_t *rc, size_t *rd) {
  int i = 0;
  void *h = nullptr;
  flagcxResult_t ae = flagcxSuccess;
  uint64_t u = 0;
  size_t z = 0;
  flagcxWindow_t win = nullptr;
  int zi = 0;
  flagcxWaitSignalDesc_t wd{1, 0};
  return {
      {"CommFinalize", [=] { return flagcxCommFinalize(c); }, want, mention},
      {"CommDestroy", [=] { return flagcxCommDestroy(c); }, want, mention},
      {"CommSuspend", [=] { return flagcxCommSuspend(c); }, want, mention},
      {"CommResume", [=] { return flagcxCommResume(c); }, want, mention},
      {"CommGetAsyncError", [=]() mutable { return flagcxCommGetAsyncError(c, &ae); }, want, mention},
      {"CommCount", [=]() mutable { return flagcxCommCount(c, &i); }, want, mention},
      {"CommUserRank", [=]() mutable { return flagcxCommUserRank(c, &i); }, want, mention},
      {"CommGetDeviceNumber", [=]() mutable { return flagcxCommGetDeviceNumber(c, &i); }, want, mention},
      {"IsHomoComm", [=]() mutable { return flagcxIsHomoComm(c, &i); }, want, mention},
      {"CommRegister", [=]() mutable { return flagcxCommRegister(c, a, 64, &h); }, want, mention},
      {"CommDeregister", [=] { return flagcxCommDeregister(c, a); }, want, mention},
      {"CommWindowRegister", [=]() mutable { return flagcxCommWindowRegister(c, a, 64, &win, 0); }, want, mention},
      {"CommWindowDeregister", [=] { return flagcxCommWindowDeregister(c, nullptr); }, want, mention},
      {"Barrier", [=] { return flagcxBarrier(c, nullptr); }, want, mention},
      {"Reduce", [=] { return flagcxReduce(a, b, 4, flagcxFloat, flagcxSum, 0, c, nullptr); }, want, mention},
      {"Gather", [=] { return flagcxGather(a, b, 4, flagcxFloat, 0, c, nullptr); }, want, mention},
      {"Scatter", [=] { return flagcxScatter(a, b, 4, flagcxFloat, 0, c, nullptr); }, want, mention},
      {"Broadcast", [=] { return flagcxBroadcast(a, b, 4, flagcxFloat, 0, c, nullptr); }, want, mention},
      {"AllReduce", [=] { return flagcxAllReduce(a, b, 4, flagcxFloat, flagcxSum, c, nullptr); }, want, mention},
      {"ReduceScatter", [=] { return flagcxReduceScatter(a, b, 4, flagcxFloat, flagcxSum, c, nullptr); }, want, mention},
      {"AllGather", [=] { return flagcxAllGather(a, b, 4, flagcxFloat, c, nullptr); }, want, mention},
      {"AlltoAll", [=] { return flagcxAlltoAll(a, b, 4, flagcxFloat, c, nullptr); }, want, mention},
      {"AlltoAllv", [=] { return flagcxAlltoAllv(a, sc, sd, b, rc, rd, flagcxFloat, c, nullptr); }, want, mention},
      {"Send", [=] { return flagcxSend(a, 4, flagcxFloat, 0, c, nullptr); }, want, mention},
      {"Recv", [=] { return flagcxRecv(b, 4, flagcxFloat, 0, c, nullptr); }, want, mention},
      {"OneSideRegister", [=] { return flagcxOneSideRegister(c, a, 64); }, want, mention},
      {"OneSideSignalRegister", [=] { return flagcxOneSideSignalRegister(c, a, 64, FLAGCX_PTR_HOST); }, want, mention},
      {"OneSideStagingRegister", [=] { return flagcxOneSideStagingRegister(c, a, 64); }, want, mention},
      {"OneSideStagingDeregister", [=] { return flagcxOneSideStagingDeregister(c); }, want, mention},
      {"Get", [=] { return flagcxGet(c, 0, 0, 0, 4, 0, 0); }, want, mention},
      {"Put", [=] { return flagcxPut(c, 0, 0, 0, 4, 0, 0); }, want, mention},
      {"BatchPut", [=] { return flagcxBatchPut(c, 0, &z, &z, &z, &zi, &zi, 1); }, want, mention},
      {"PutSignal", [=] { return flagcxPutSignal(a, 1, flagcxFloat, 0, win, 0, 0, c, nullptr); }, want, mention},
      {"PutValue", [=] { return flagcxPutValue(c, 0, 1, 0, 0); }, want, mention},
      {"Signal", [=] { return flagcxSignal(0, 0, c, nullptr); }, want, mention},
      {"WaitSignal", [=] { return flagcxWaitSignal(1, &wd, c, nullptr); }, want, mention},
      {"ReadCounter", [=]() mutable { return flagcxReadCounter(c, &u); }, want, mention},
      {"WaitCounter", [=] { return flagcxWaitCounter(c, 1); }, want, mention},
      {"GroupStart", [=] { return flagcxGroupStart(c); }, want, mention},
      {"GroupEnd", [=] { return flagcxGroupEnd(c); }, want, mention},
  };
}

TEST_F(Misuse, NullCommunicator) {
  // flagcxGroupStart/End(NULL) are legal (a group not tied to one comm).
  std::vector<Case> cases;
  for (auto &c : commCases(nullptr, flagcxInvalidArgument, "comm", a.data(), b.data(), sc, sd, rc, rd))
    if (c.what.rfind("Group", 0) != 0) cases.push_back(c);
  runCases(cases);
  // Aborting nothing is allowed (as in NCCL).
  EXPECT_EQ(flagcxCommAbort(nullptr), flagcxSuccess);
}

TEST_F(Misuse, DestroyedCommunicator) {
  flagcxComm_t dead = makeComm();
  ASSERT_NE(dead, nullptr);
  ASSERT_EQ(flagcxCommDestroy(dead), flagcxSuccess);
  // `dead` dangles: the live-comm registry must catch it before any use.
  runCases(commCases(dead, flagcxInvalidArgument, "comm", a.data(), b.data(), sc, sd, rc, rd));
  EXPECT_EQ(flagcxCommAbort(dead), flagcxInvalidArgument);
  EXPECT_NE(flagcxGetLastError(dead), nullptr);
}

TEST_F(Misuse, AbortedCommunicator) {
  flagcxComm_t dead = makeComm();
  ASSERT_NE(dead, nullptr);
  ASSERT_EQ(flagcxCommAbort(dead), flagcxSuccess);
  // Either "not a live communicator" or "was aborted" is the documented answer.
  auto cases = commCases(dead, flagcxInvalidArgument, "comm", a.data(), b.data(), sc, sd, rc, rd);
  for (auto &c : cases) c.alt = flagcxInvalidUsage;
  runCases(cases);
  EXPECT_EQ(flagcxCommAbort(dead), flagcxInvalidArgument) << "double abort";
  EXPECT_EQ(flagcxCommDestroy(dead), flagcxInvalidArgument) << "destroy after abort";
}

TEST_F(Misuse, NullOutputPointers) {
  runCases({
      {"GetUniqueId(NULL)", [] { return flagcxGetUniqueId(nullptr); }, flagcxInvalidArgument, "uniqueId"},
      {"GetVersion(NULL)", [] { return flagcxGetVersion(nullptr); }, flagcxInvalidArgument, "version"},
      {"DeviceHandleInit(NULL)", [] { return flagcxDeviceHandleInit(nullptr); }, flagcxInvalidArgument, "devHandle"},
      {"DeviceHandleFree(NULL)", [] { return flagcxDeviceHandleFree(nullptr); }, flagcxInvalidArgument, "devHandle"},
      {"HandleInit(NULL)", [] { return flagcxHandleInit(nullptr); }, flagcxInvalidArgument, "handler"},
      {"HandleFree(NULL)", [] { return flagcxHandleFree(nullptr); }, flagcxInvalidArgument, "handler"},
      {"MemAlloc(NULL)", [] { return flagcxMemAlloc(nullptr, 64); }, flagcxInvalidArgument, "ptr"},
      {"MemAlloc(allocator 7)", [] { void *p; return flagcxMemAlloc(&p, 64, static_cast<flagcxMemAllocator_t>(7)); }, flagcxInvalidArgument, "allocator"},
      {"CommRegister(allocator 7)", [&] { void *h; return flagcxCommRegister(comm, a.data(), 64, &h, static_cast<flagcxMemAllocator_t>(7)); }, flagcxInvalidArgument, "allocator"},
      {"CommGetAsyncError(NULL)", [&] { return flagcxCommGetAsyncError(comm, nullptr); }, flagcxInvalidArgument, "asyncError"},
      {"CommCount(NULL)", [&] { return flagcxCommCount(comm, nullptr); }, flagcxInvalidArgument, "count"},
      {"CommUserRank(NULL)", [&] { return flagcxCommUserRank(comm, nullptr); }, flagcxInvalidArgument, "rank"},
      {"CommGetDeviceNumber(NULL)", [&] { return flagcxCommGetDeviceNumber(comm, nullptr); }, flagcxInvalidArgument, "device"},
      {"IsHomoComm(NULL)", [&] { return flagcxIsHomoComm(comm, nullptr); }, flagcxInvalidArgument, "isHomo"},
      {"CommRegister(buff NULL)", [&] { void *h; return flagcxCommRegister(comm, nullptr, 64, &h); }, flagcxInvalidArgument, "buff"},
      {"CommRegister(handle NULL)", [&] { return flagcxCommRegister(comm, a.data(), 64, nullptr); }, flagcxInvalidArgument, "handle"},
      {"CommDeregister(NULL)", [&] { return flagcxCommDeregister(comm, nullptr); }, flagcxInvalidArgument, "handle"},
  });
  // Harmless NULLs.
  EXPECT_EQ(flagcxMemFree(nullptr), flagcxSuccess);
  EXPECT_EQ(getFlagcxDataTypeSize(kBadDt), 0u);
  EXPECT_NE(flagcxGetErrorString(static_cast<flagcxResult_t>(99)), nullptr);
  EXPECT_NE(flagcxGetErrorString(static_cast<flagcxResult_t>(-1)), nullptr);
  EXPECT_NE(flagcxGetLastError(nullptr), nullptr);
}

TEST_F(Misuse, InitRankArguments) {
  flagcxUniqueId id;
  ASSERT_EQ(flagcxGetUniqueId(&id), flagcxSuccess);
  flagcxUniqueId garbage;
  memset(&garbage, 0x5a, sizeof garbage);
  flagcxUniqueId zero;
  memset(&zero, 0, sizeof zero);
  flagcxComm_t c = reinterpret_cast<flagcxComm_t>(0x1);  // must be overwritten with NULL
  runCases({
      {"InitRank(comm NULL)", [&] { return flagcxCommInitRank(nullptr, 1, &id, 0); }, flagcxInvalidArgument, "comm"},
      {"InitRank(commId NULL)", [&] { return flagcxCommInitRank(&c, 1, nullptr, 0); }, flagcxInvalidArgument, "commId"},
      {"InitRank(nranks 0)", [&] { return flagcxCommInitRank(&c, 0, &id, 0); }, flagcxInvalidArgument, "nranks"},
      {"InitRank(nranks -3)", [&] { return flagcxCommInitRank(&c, -3, &id, 0); }, flagcxInvalidArgument, "nranks"},
      {"InitRank(rank -1)", [&] { return flagcxCommInitRank(&c, 2, &id, -1); }, flagcxInvalidArgument, "rank"},
      {"InitRank(rank == nranks)", [&] { return flagcxCommInitRank(&c, 2, &id, 2); }, flagcxInvalidArgument, "rank"},
      {"InitRank(rank INT_MAX)", [&] { return flagcxCommInitRank(&c, 2, &id, INT32_MAX); }, flagcxInvalidArgument, "rank"},
      {"InitRank(garbage id)", [&] { return flagcxCommInitRank(&c, 1, &garbage, 0); }, flagcxInvalidArgument, "commId"},
      {"InitRank(zero id)", [&] { return flagcxCommInitRank(&c, 1, &zero, 0); }, flagcxInvalidArgument, "commId"},
  });
  EXPECT_EQ(c, nullptr) << "a failed init must leave *comm NULL";
  // Inside a group, init is a usage error.
  ASSERT_EQ(flagcxGroupStart(nullptr), flagcxSuccess);
  EXPECT_EQ(flagcxCommInitRank(&c, 1, &id, 0), flagcxInvalidUsage);
  ASSERT_EQ(flagcxGroupEnd(nullptr), flagcxSuccess);
}

TEST_F(Misuse, BadDtypesOpsRootsPeers) {
  float *x = a.data(), *y = b.data();
  flagcxComm_t c = comm;
  runCases({
      {"AllReduce dtype 99", [=] { return flagcxAllReduce(x, y, 4, kBadDt, flagcxSum, c, nullptr); }, flagcxInvalidArgument, "datatype"},
      {"AllReduce dtype -1", [=] { return flagcxAllReduce(x, y, 4, kNegDt, flagcxSum, c, nullptr); }, flagcxInvalidArgument, "datatype"},
      {"AllReduce dtype NumTypes", [=] { return flagcxAllReduce(x, y, 4, flagcxNumTypes, flagcxSum, c, nullptr); }, flagcxInvalidArgument, "datatype"},
      {"AllReduce op 99", [=] { return flagcxAllReduce(x, y, 4, flagcxFloat, kBadOp, c, nullptr); }, flagcxInvalidArgument, "op"},
      {"AllReduce op NoOp", [=] { return flagcxAllReduce(x, y, 4, flagcxFloat, flagcxRedNoOp, c, nullptr); }, flagcxInvalidArgument, "op"},
      {"Reduce op 99", [=] { return flagcxReduce(x, y, 4, flagcxFloat, kBadOp, 0, c, nullptr); }, flagcxInvalidArgument, "op"},
      {"ReduceScatter op 99", [=] { return flagcxReduceScatter(x, y, 4, flagcxFloat, kBadOp, c, nullptr); }, flagcxInvalidArgument, "op"},
      {"Reduce dtype 99", [=] { return flagcxReduce(x, y, 4, kBadDt, flagcxSum, 0, c, nullptr); }, flagcxInvalidArgument, "datatype"},
      {"Gather dtype 99", [=] { return flagcxGather(x, y, 4, kBadDt, 0, c, nullptr); }, flagcxInvalidArgument, "datatype"},
      {"Scatter dtype 99", [=] { return flagcxScatter(x, y, 4, kBadDt, 0, c, nullptr); }, flagcxInvalidArgument, "datatype"},
      {"Broadcast dtype 99", [=] { return flagcxBroadcast(x, y, 4, kBadDt, 0, c, nullptr); }, flagcxInvalidArgument, "datatype"},
      {"AllGather dtype 99", [=] { return flagcxAllGather(x, y, 4, kBadDt, c, nullptr); }, flagcxInvalidArgument, "datatype"},
      {"AlltoAll dtype 99", [=] { return flagcxAlltoAll(x, y, 4, kBadDt, c, nullptr); }, flagcxInvalidArgument, "datatype"},
      {"Send dtype 99", [=] { return flagcxSend(x, 4, kBadDt, 0, c, nullptr); }, flagcxInvalidArgument, "datatype"},
      {"Recv dtype 99", [=] { return flagcxRecv(y, 4, kBadDt, 0, c, nullptr); }, flagcxInvalidArgument, "datatype"},
      {"Reduce root -1", [=] { return flagcxReduce(x, y, 4, flagcxFloat, flagcxSum, -1, c, nullptr); }, flagcxInvalidArgument, "root"},
      {"Reduce root 1", [=] { return flagcxReduce(x, y, 4, flagcxFloat, flagcxSum, 1, c, nullptr); }, flagcxInvalidArgument, "root"},
      {"Gather root 7", [=] { return flagcxGather(x, y, 4, flagcxFloat, 7, c, nullptr); }, flagcxInvalidArgument, "root"},
      {"Scatter root -5", [=] { return flagcxScatter(x, y, 4, flagcxFloat, -5, c, nullptr); }, flagcxInvalidArgument, "root"},
      {"Broadcast root 1", [=] { return flagcxBroadcast(x, y, 4, flagcxFloat, 1, c, nullptr); }, flagcxInvalidArgument, "root"},
      {"Send peer 1", [=] { return flagcxSend(x, 4, flagcxFloat, 1, c, nullptr); }, flagcxInvalidArgument, "peer"},
      {"Recv peer -1", [=] { return flagcxRecv(y, 4, flagcxFloat, -1, c, nullptr); }, flagcxInvalidArgument, "peer"},
      {"Send to self outside a group", [=] { return flagcxSend(x, 4, flagcxFloat, 0, c, nullptr); }, flagcxInvalidUsage, "peer"},
      {"GroupEnd without GroupStart", [=] { return flagcxGroupEnd(c); }, flagcxInvalidUsage, "group"},
  });
}

TEST_F(Misuse, NullBuffersAndOverflowingCounts) {
  float *x = a.data(), *y = b.data();
  flagcxComm_t c = comm;
  const size_t big = SIZE_MAX, half = SIZE_MAX / 2 + 1;
  runCases({
      {"AllReduce sendbuff NULL", [=] { return flagcxAllReduce(nullptr, y, 4, flagcxFloat, flagcxSum, c, nullptr); }, flagcxInvalidArgument, "sendbuff"},
      {"AllReduce recvbuff NULL", [=] { return flagcxAllReduce(x, nullptr, 4, flagcxFloat, flagcxSum, c, nullptr); }, flagcxInvalidArgument, "recvbuff"},
      {"Reduce recvbuff NULL at root", [=] { return flagcxReduce(x, nullptr, 4, flagcxFloat, flagcxSum, 0, c, nullptr); }, flagcxInvalidArgument, "recvbuff"},
      {"Broadcast sendbuff NULL at root", [=] { return flagcxBroadcast(nullptr, y, 4, flagcxFloat, 0, c, nullptr); }, flagcxInvalidArgument, "sendbuff"},
      {"AllGather recvbuff NULL", [=] { return flagcxAllGather(x, nullptr, 4, flagcxFloat, c, nullptr); }, flagcxInvalidArgument, "recvbuff"},
      {"Gather sendbuff NULL", [=] { return flagcxGather(nullptr, y, 4, flagcxFloat, 0, c, nullptr); }, flagcxInvalidArgument, "sendbuff"},
      {"Scatter recvbuff NULL", [=] { return flagcxScatter(x, nullptr, 4, flagcxFloat, 0, c, nullptr); }, flagcxInvalidArgument, "recvbuff"},
      {"ReduceScatter sendbuff NULL", [=] { return flagcxReduceScatter(nullptr, y, 4, flagcxFloat, flagcxSum, c, nullptr); }, flagcxInvalidArgument, "sendbuff"},
      {"AlltoAll recvbuff NULL", [=] { return flagcxAlltoAll(x, nullptr, 4, flagcxFloat, c, nullptr); }, flagcxInvalidArgument, "recvbuff"},
      {"AlltoAllv sendcounts NULL", [=] { size_t d[1] = {0}, n[1] = {4}; return flagcxAlltoAllv(x, nullptr, d, y, n, d, flagcxFloat, c, nullptr); }, flagcxInvalidArgument, "sendcounts"},
      {"AlltoAllv rdispls NULL", [=] { size_t d[1] = {0}, n[1] = {4}; return flagcxAlltoAllv(x, n, d, y, n, nullptr, flagcxFloat, c, nullptr); }, flagcxInvalidArgument, "rdispls"},
      {"AlltoAllv counts overflow", [=] { size_t d[1] = {0}, n[1] = {big}; return flagcxAlltoAllv(x, n, d, y, n, d, flagcxFloat, c, nullptr); }, flagcxInvalidArgument, "count"},
      {"AlltoAllv displacement overflow", [=] { size_t d[1] = {big}, n[1] = {4}, z[1] = {0}; return flagcxAlltoAllv(x, n, d, y, n, z, flagcxFloat, c, nullptr); }, flagcxInvalidArgument, "displ"},
      {"Send sendbuff NULL", [=] { return flagcxSend(nullptr, 4, flagcxFloat, 0, c, nullptr); }, flagcxInvalidArgument, "sendbuff"},
      {"AllReduce count SIZE_MAX", [=] { return flagcxAllReduce(x, y, big, flagcxFloat, flagcxSum, c, nullptr); }, flagcxInvalidArgument, "count"},
      {"AllReduce count SIZE_MAX/2+1 int8", [=] { return flagcxAllReduce(x, y, half, flagcxInt8, flagcxSum, c, nullptr); }, flagcxInvalidArgument, "count"},
      {"Reduce count SIZE_MAX", [=] { return flagcxReduce(x, y, big, flagcxFloat, flagcxSum, 0, c, nullptr); }, flagcxInvalidArgument, "count"},
      {"Broadcast count SIZE_MAX", [=] { return flagcxBroadcast(x, y, big, flagcxDouble, 0, c, nullptr); }, flagcxInvalidArgument, "count"},
      {"AllGather sendcount SIZE_MAX", [=] { return flagcxAllGather(x, y, big, flagcxFloat, c, nullptr); }, flagcxInvalidArgument, "count"},
      {"Gather count SIZE_MAX", [=] { return flagcxGather(x, y, big, flagcxFloat, 0, c, nullptr); }, flagcxInvalidArgument, "count"},
      {"Scatter count SIZE_MAX", [=] { return flagcxScatter(x, y, big, flagcxFloat, 0, c, nullptr); }, flagcxInvalidArgument, "count"},
      {"ReduceScatter recvcount SIZE_MAX", [=] { return flagcxReduceScatter(x, y, big, flagcxFloat, flagcxSum, c, nullptr); }, flagcxInvalidArgument, "count"},
      {"AlltoAll count SIZE_MAX", [=] { return flagcxAlltoAll(x, y, big, flagcxFloat, c, nullptr); }, flagcxInvalidArgument, "count"},
      {"Send count SIZE_MAX", [=] { return flagcxSend(x, big, flagcxFloat, 0, c, nullptr); }, flagcxInvalidArgument, "count"},
      {"Recv count SIZE_MAX", [=] { return flagcxRecv(y, big, flagcxFloat, 0, c, nullptr); }, flagcxInvalidArgument, "count"},
  });
  // Memory: an impossible allocation fails cleanly.
  void *p = nullptr;
  flagcxResult_t r = flagcxMemAlloc(&p, SIZE_MAX);
  EXPECT_NE(r, flagcxSuccess);
  EXPECT_EQ(p, nullptr);
  // Zero-count calls with NULL buffers are legal no-ops.
  EXPECT_EQ(flagcxAllReduce(nullptr, nullptr, 0, flagcxFloat, flagcxSum, c, nullptr), flagcxSuccess);
  EXPECT_EQ(flagcxBroadcast(nullptr, nullptr, 0, flagcxFloat, 0, c, nullptr), flagcxSuccess);
  // And the communicator still works after all of the above.
  EXPECT_EQ(flagcxAllReduce(x, y, 64, flagcxFloat, flagcxSum, c, nullptr), flagcxSuccess);
  EXPECT_EQ(b[63], 1.f);
  flagcxResult_t ae = flagcxInternalError;
  EXPECT_EQ(flagcxCommGetAsyncError(c, &ae), flagcxSuccess);
  EXPECT_EQ(ae, flagcxSuccess) << "argument errors must not poison the communicator";
}

// Not-yet entry points on a live communicator: flagcxNotSupported, a log line.
TEST_F(Misuse, NotSupportedOnLiveComm) {
  auto cases = commCases(comm, flagcxNotSupported, "not supported", a.data(), b.data(), sc, sd,
                         rc, rd);
  std::vector<Case> keep;
  for (auto &c : cases)
    if (c.what == "CommSuspend" || c.what == "CommResume") keep.push_back(c);
  ASSERT_EQ(keep.size(), 2u);
  runCases(keep);
}

// One-sided operations before anything was registered: flagcxInvalidArgument
// with a line that says nothing is registered (or names the NULL window).
TEST_F(Misuse, OneSidedBeforeRegistration) {
  auto cases = commCases(comm, flagcxInvalidArgument, "registered", a.data(), b.data(), sc, sd,
                         rc, rd);
  std::vector<Case> keep;
  for (auto &c : cases)
    if (c.what == "Get" || c.what == "Put" || c.what == "BatchPut" || c.what == "PutSignal" ||
        c.what == "PutValue" || c.what == "Signal" || c.what == "WaitSignal" ||
        c.what == "ReadCounter" || c.what == "WaitCounter" || c.what == "OneSideStagingDeregister" ||
        c.what == "CommWindowDeregister")
      keep.push_back(c);
  ASSERT_EQ(keep.size(), 11u);
  runCases(keep);
}

}  // namespace
