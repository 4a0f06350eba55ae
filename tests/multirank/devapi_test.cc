// The device API on host ranks (flagcx_kernel.h, flagcx_device_unified.h):
// forked ranks over shm (peers mapped), sockets (every peer through the
// proxy) and two fake hosts (FLAGCX_HOSTID: INTRA mapped, INTER through the
// proxy; at 2 ranks each is alone on its host, INTRA a team of one), 2-4
// ranks.  Every unified call, signal and counter arithmetic,
// barriers of each team kind, data visible before the signal that follows
// it, and bad host use.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/params.h"
#include "flagcx_device_unified.h"
#include "flagcx_kernel.h"
#include "tests/common/harness.h"

namespace {

enum Net { kShm, kSocket, kTwoHosts };
constexpr size_t kChunk = 4096;
constexpr int kRounds = 8;
constexpr size_t kBig = 256 * 1024;  // one ordering round
constexpr auto W = FLAGCX_TEAM_WORLD;
constexpr auto kThread = FLAGCX_COOP_THREAD;
constexpr auto kSys = FLAGCX_MEMORY_SCOPE_SYSTEM;
constexpr auto kRel = FLAGCX_MEMORY_ORDER_RELEASE;
constexpr auto kAcq = FLAGCX_MEMORY_ORDER_ACQUIRE;

#define CHECK_OR(cond, code)                                                         \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "rank %d: %s:%d: %s\n", rank, __FILE__, __LINE__, #cond);     \
      return code;                                                                  \
    }                                                                               \
  } while (0)

struct Setup {
  harness::CommOnStream c;
  void *buf = nullptr;
  size_t size = 0;
  flagcxWindow_t win = nullptr;
  flagcxDevComm_t dc = nullptr;
  flagcxDevMem_t mem = nullptr;
  const void *comm = nullptr, *m = nullptr;  // what the calls take
};

flagcxDevCommRequirements reqs() {
  flagcxDevCommRequirements r = FLAGCX_DEV_COMM_REQUIREMENTS_INITIALIZER;
  r.interSignalCount = 4;
  r.interCounterCount = 2;
  r.intraBarrierCount = r.interBarrierCount = r.barrierCount = 2;
  return r;
}

int open(Setup &s, int rank, int nranks, flagcxUniqueId *id, Net net, bool shareable) {
  if (net == kTwoHosts) {
    setenv("FLAGCX_HOSTID", rank < (nranks + 1) / 2 ? "hostA" : "hostB", 1);
    flagcx::paramsReload();
  }
  CHECK_OR(s.c.open(rank, nranks, id) == flagcxSuccess, 2);
  s.size = kChunk * 8 + kBig * kRounds;
  if (shareable) CHECK_OR(flagcxMemAlloc(&s.buf, s.size, flagcxMemCCL) == flagcxSuccess, 3);
  else s.buf = calloc(1, s.size);
  memset(s.buf, 0, s.size);
  CHECK_OR(flagcxCommWindowRegister(s.c.comm, s.buf, s.size, &s.win, FLAGCX_WIN_COLL_SYMMETRIC,
                                    flagcxMemCCL) == flagcxSuccess, 4);
  flagcxDevCommRequirements r = reqs();
  CHECK_OR(flagcxDevCommCreate(s.c.comm, &r, &s.dc) == flagcxSuccess, 5);
  CHECK_OR(flagcxDevMemCreate(s.c.comm, s.buf, s.size, s.win, &s.mem) == flagcxSuccess, 6);
  void *p = nullptr;
  CHECK_OR(flagcxDevCommGetDevicePtr(s.dc, &p) == flagcxSuccess && p, 7);
  s.comm = p;
  CHECK_OR(flagcxDevMemGetDevicePtr(s.mem, &p) == flagcxSuccess && p, 8);
  s.m = p;
  return 0;
}

int close(Setup &s, int rank, bool shareable) {
  CHECK_OR(flagcxDevMemFreeDevicePtr(s.mem) == flagcxSuccess, 60);
  CHECK_OR(flagcxDevCommFreeDevicePtr(s.dc) == flagcxSuccess, 61);
  CHECK_OR(flagcxDevMemDestroy(s.c.comm, s.mem) == flagcxSuccess, 62);
  CHECK_OR(flagcxDevCommDestroy(s.c.comm, s.dc) == flagcxSuccess, 63);
  CHECK_OR(flagcxCommWindowDeregister(s.c.comm, s.win) == flagcxSuccess, 64);
  CHECK_OR(flagcxCommDestroy(s.c.comm) == flagcxSuccess, 65);
  if (shareable) flagcxMemFree(s.buf, flagcxMemCCL);
  else free(s.buf);
  return 0;
}

char *at(Setup &s, size_t off) { return static_cast<char *>(s.buf) + off; }

void sync(Setup &s) {
  flagcxDevBarrierSync(s.comm, W, 0, 0, kThread, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
}

// Puts with each completion action, signals, counters, reads and resets.
int putsAndSignals(Setup &s, int rank, int n) {
  const void *c = s.comm;
  // Chunk 0: rank r's bytes land at offset r*64 of every peer, signal 0 +1.
  memset(at(s, kChunk * 7), 'a' + rank, 64);
  for (int p = 0; p < n; p++)
    flagcxDevPut_RSigInc(c, s.m, rank * 64, s.m, kChunk * 7, 64, W, p, 0, kThread, kSys, kRel, 0);
  flagcxDevWaitSignal(c, 0, n, 64, 0, kThread, kAcq);
  for (int p = 0; p < n; p++) CHECK_OR(*at(s, p * 64) == 'a' + p && *at(s, p * 64 + 63) == 'a' + p, 20);
  CHECK_OR(flagcxDevReadSignal(c, 0, 64, 0, kAcq) == static_cast<uint64_t>(n), 21);
  // RSigAdd and LCtrInc forms: signal 1 grows by 5 per peer; counter 0 by 1.
  for (int p = 0; p < n; p++) {
    flagcxDevPut_RSigAdd(c, s.m, kChunk + rank * 64, s.m, kChunk * 7, 64, W, p, 0, kThread, kSys,
                         kRel, 1, 5);
    flagcxDevPut_LCtrInc(c, s.m, kChunk * 2 + rank * 64, s.m, kChunk * 7, 64, W, p, 0, kThread,
                         kSys, kRel, 0);
    flagcxDevPut_RSigInc_LCtrInc(c, s.m, kChunk * 3 + rank * 64, s.m, kChunk * 7, 64, W, p, 0,
                                 kThread, kSys, kRel, 2, 1);
    flagcxDevPut_RSigAdd_LCtrInc(c, s.m, kChunk * 4 + rank * 64, s.m, kChunk * 7, 64, W, p, 0,
                                 kThread, kSys, kRel, 2, 10, 1);
  }
  flagcxDevWaitSignal(c, 1, 5u * n, 32, 0, kThread, kAcq);
  flagcxDevWaitCounter(c, 0, n, 64, 0, kThread, kAcq);
  flagcxDevWaitCounter(c, 1, 2u * n, 64, 0, kThread, kAcq);
  flagcxDevWaitSignal(c, 2, 11u * n, 64, 0, kThread, kAcq);
  CHECK_OR(flagcxDevReadCounter(c, 1, 64, 0, kAcq) == 2u * n, 22);
  for (int p = 0; p < n; p++) CHECK_OR(*at(s, kChunk + p * 64) == 'a' + p, 23);
  for (int p = 0; p < n; p++) CHECK_OR(*at(s, kChunk * 4 + p * 64 + 5) == 'a' + p, 24);
  // Signal 3: SignalInc from every rank, SignalAdd of 100 from every rank.
  for (int p = 0; p < n; p++) {
    flagcxDevSignalInc(c, W, p, 3, 0, kThread, kSys);
    flagcxDevSignalAdd(c, W, p, 3, 100, 0, kThread, kSys);
  }
  flagcxDevWaitSignal(c, 3, 101u * n, 64, 0, kThread, kAcq);
  sync(s);  // nothing more arrives on signal 3
  CHECK_OR(flagcxDevReadSignal(c, 3, 64, 0, kAcq) == 101u * n, 25);
  // Resets: the next value counts from zero.
  flagcxDevResetSignal(c, 0, 3);
  flagcxDevResetCounter(c, 0, 1);
  CHECK_OR(flagcxDevReadSignal(c, 3, 64, 0, kAcq) == 0, 26);
  CHECK_OR(flagcxDevReadCounter(c, 1, 64, 0, kAcq) == 0, 27);
  sync(s);
  for (int p = 0; p < n; p++) flagcxDevSignalAdd(c, W, p, 3, 7, 0, kThread, kSys);
  // The shadow: expect 7 from every rank.
  flagcxDevIncreaseSignalShadow(c, 0, 3, 7u * n);
  flagcxDevWaitSignalMeetShadow(c, 0, 3, 64, kThread, kAcq);
  CHECK_OR(flagcxDevReadSignal(c, 3, 64, 0, kAcq) == 7u * n, 28);
  sync(s);
  return 0;
}

// PutValue (each form) and Get.
int valuesAndGets(Setup &s, int rank, int n) {
  const void *c = s.comm;
  for (int p = 0; p < n; p++) {
    uint64_t v = 1000u * static_cast<uint64_t>(rank) + static_cast<uint64_t>(p);
    flagcxDevPutValue(c, s.m, kChunk * 5 + rank * 8, v, W, p, 0, kThread, kSys, kRel);
    flagcxDevPutValue_RSigInc(c, s.m, kChunk * 5 + 512 + rank * 8, v + 1, W, p, 0, kThread, kSys,
                              kRel, 0);
    flagcxDevPutValue_RSigAdd(c, s.m, kChunk * 5 + 1024 + rank * 8, v + 2, W, p, 0, kThread, kSys,
                              kRel, 1, 3);
  }
  flagcxDevWaitSignal(c, 0, 2u * n, 64, 0, kThread, kAcq);  // n from the puts before
  flagcxDevWaitSignal(c, 1, 8u * n, 64, 0, kThread, kAcq);
  sync(s);  // the plain PutValues are flushed by the barrier's order
  for (int p = 0; p < n; p++) {
    uint64_t v = 1000u * static_cast<uint64_t>(p) + static_cast<uint64_t>(rank), got[3];
    for (int k = 0; k < 3; k++) memcpy(&got[k], at(s, kChunk * 5 + 512 * k + p * 8), 8);
    CHECK_OR(got[0] == v && got[1] == v + 1 && got[2] == v + 2, 30);
  }
  // Get rank p's chunk-0 slot of itself (holds 'a'+p) into chunk 6.
  for (int p = 0; p < n; p++)
    flagcxDevGet(c, s.m, p * 64, s.m, kChunk * 6 + p * 64, 64, W, p, 0, kThread, kSys, kAcq);
  flagcxDevFlush(c, 0, kThread, kAcq);
  for (int p = 0; p < n; p++) CHECK_OR(*at(s, kChunk * 6 + p * 64 + 17) == 'a' + p, 31);
  sync(s);
  return 0;
}

// Barriers of each team kind: every member's value is there after it.
int barriers(Setup &s, int rank, int n) {
  const void *c = s.comm;
  auto *v = static_cast<const flagcxDevCommView *>(c);
  for (int kind = 0; kind < 3; kind++) {
    auto team = static_cast<flagcxDevTeamKind_t>(kind);
    size_t slot = kChunk * 5 + 2048 + static_cast<size_t>(kind) * 256;
    for (int round = 1; round <= 3; round++) {
      for (int i = 0; i < v->teamSize[kind]; i++)
        flagcxDevPutValue(c, s.m, slot + rank * 8, 10u * rank + round, team, i, 0, kThread, kSys,
                          kRel);
      if (round == 2) {
        flagcxDevBarrierArrive(c, team, 1, 0, kThread, kRel, kSys);
        flagcxDevBarrierWait(c, team, 1, 0, kThread, kAcq, kSys);
      } else {
        flagcxDevBarrierSync(c, team, 0, 0, kThread, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
      }
      for (int i = 0; i < v->teamSize[kind]; i++) {
        int w = v->teamWorld[kind][i];
        uint64_t got;
        memcpy(&got, at(s, slot + w * 8), 8);
        CHECK_OR(got >= 10u * w + round, 40 + kind);
      }
      sync(s);  // nobody overwrites before every member looked
    }
  }
  (void)n;
  return 0;
}

// Data before signal: rank 0 puts round k (kBig bytes of k) and raises
// signal 0; rank 1 checks all of round k as soon as the signal says k.
int ordering(Setup &s, int rank, int n) {
  const void *c = s.comm;
  flagcxDevResetSignal(c, 0, 0);
  sync(s);
  size_t base = kChunk * 8;
  if (rank == 0) {
    for (int k = 0; k < kRounds; k++) {
      memset(at(s, base + kBig * k), k + 1, kBig);
      flagcxDevPut_RSigInc(c, s.m, base + kBig * k, s.m, base + kBig * k, kBig, W, n - 1, 0,
                           FLAGCX_COOP_BLOCK, kSys, kRel, 0);
    }
  } else if (rank == n - 1) {
    for (int k = 0; k < kRounds; k++) {
      flagcxDevWaitSignal(c, 0, k + 1, 64, 0, kThread, kAcq);
      const char *p = at(s, base + kBig * k);
      for (size_t i = 0; i < kBig; i += 512) CHECK_OR(p[i] == k + 1, 50);
      CHECK_OR(p[kBig - 1] == k + 1, 51);
    }
  }
  sync(s);
  return 0;
}

int body(int rank, int nranks, flagcxUniqueId *id, Net net, bool shareable) {
  Setup s;
  int rc = open(s, rank, nranks, id, net, shareable);
  if (rc == 0) rc = putsAndSignals(s, rank, nranks);
  if (rc == 0) rc = valuesAndGets(s, rank, nranks);
  if (rc == 0) rc = barriers(s, rank, nranks);
  if (rc == 0) rc = ordering(s, rank, nranks);
  if (rc == 0) rc = close(s, rank, shareable);
  return rc;
}

// Bad host use, each one clear error: requirements refused or unequal, a
// range past the window, a window / DevMem of another communicator, a signal,
// counter or barrier not requested, a put past the peer's part.
struct Shared {
  volatile int ready;
  flagcxUniqueId id;
};
Shared *g_shared = nullptr;

int badUse(int rank, int nranks, flagcxUniqueId *id) {
  Setup s;
  int rc = open(s, rank, nranks, id, kShm, true);
  if (rc) return rc;
  flagcxComm_t comm = s.c.comm;
  flagcxDevCommRequirements r = reqs();
  r.intraMulticast = true;
  flagcxDevComm_t dc2 = nullptr;
  CHECK_OR(flagcxDevCommCreate(comm, &r, &dc2) == flagcxNotSupported && !dc2, 70);
  r = reqs();
  r.interSignalCount = rank == 1 ? 5 : 4;
  CHECK_OR(flagcxDevCommCreate(comm, &r, &dc2) == flagcxInvalidArgument && !dc2, 71);
  flagcxDevMem_t m2 = nullptr;
  CHECK_OR(flagcxDevMemCreate(comm, at(s, s.size - 8), 64, s.win, &m2) == flagcxInvalidArgument, 72);
  // A second communicator: rank 0 makes its id, the others read it.
  if (rank == 0) {
    CHECK_OR(flagcxGetUniqueId(&g_shared->id) == flagcxSuccess, 73);
    __atomic_store_n(&g_shared->ready, 1, __ATOMIC_RELEASE);
  }
  while (!__atomic_load_n(&g_shared->ready, __ATOMIC_ACQUIRE)) usleep(1000);
  flagcxComm_t other = nullptr;
  CHECK_OR(flagcxCommInitRank(&other, nranks, &g_shared->id, rank) == flagcxSuccess, 74);
  void *buf2 = nullptr;
  CHECK_OR(flagcxMemAlloc(&buf2, 4096, flagcxMemCCL) == flagcxSuccess, 75);
  flagcxWindow_t w2 = nullptr;
  CHECK_OR(flagcxCommWindowRegister(other, buf2, 4096, &w2, 0, flagcxMemCCL) == flagcxSuccess, 76);
  CHECK_OR(flagcxDevMemCreate(comm, buf2, 4096, w2, &m2) == flagcxInvalidArgument, 77);
  CHECK_OR(flagcxDevMemCreate(other, buf2, 4096, w2, &m2) == flagcxSuccess, 78);
  CHECK_OR(flagcxDevMemDestroy(comm, m2) == flagcxInvalidArgument, 79);
  CHECK_OR(flagcxDevCommDestroy(other, s.dc) == flagcxInvalidArgument, 80);
  // From the calls: the first bad one is what DevCommDestroy returns.
  if (rank == 0) {
    void *pm2 = nullptr;
    flagcxDevMemGetDevicePtr(m2, &pm2);
    flagcxDevPut(s.comm, pm2, 0, s.m, 0, 8, W, 1, 0, kThread, kSys, kRel);  // another comm's DevMem
    flagcxDevSignalInc(s.comm, W, 1, 4, 0, kThread, kSys);                  // 4 signals requested
    flagcxDevPut_LCtrInc(s.comm, s.m, 0, s.m, 0, 8, W, 1, 0, kThread, kSys, kRel, 2);
    flagcxDevPut(s.comm, s.m, s.size - 4, s.m, 0, 8, W, 1, 0, kThread, kSys, kRel);
    flagcxDevBarrierSync(s.comm, FLAGCX_TEAM_INTRA, 2, 0, kThread, kRel, kSys);
    flagcxDevPut(s.comm, s.m, 0, s.m, 0, 8, W, nranks, 0, kThread, kSys, kRel);
  }
  CHECK_OR(flagcxDevMemDestroy(other, m2) == flagcxSuccess, 81);
  CHECK_OR(flagcxCommWindowDeregister(other, w2) == flagcxSuccess, 82);
  CHECK_OR(flagcxCommDestroy(other) == flagcxSuccess, 83);
  flagcxMemFree(buf2, flagcxMemCCL);
  CHECK_OR(flagcxDevMemDestroy(comm, s.mem) == flagcxSuccess, 84);
  flagcxResult_t want = rank == 0 ? flagcxInvalidArgument : flagcxSuccess;
  CHECK_OR(flagcxDevCommDestroy(comm, s.dc) == want, 85);
  CHECK_OR(flagcxDevCommDestroy(comm, s.dc) == flagcxInvalidArgument, 86);
  // flagcxCommCleanup takes what is left: a device communicator made again.
  r = reqs();
  CHECK_OR(flagcxDevCommCreate(comm, &r, &s.dc) == flagcxSuccess, 87);
  CHECK_OR(flagcxCommCleanup(comm) == flagcxSuccess, 88);
  CHECK_OR(flagcxDevCommDestroy(comm, s.dc) == flagcxInvalidArgument, 89);
  CHECK_OR(flagcxCommWindowDeregister(comm, s.win) == flagcxSuccess, 90);
  CHECK_OR(flagcxCommDestroy(comm) == flagcxSuccess, 91);
  flagcxMemFree(s.buf, flagcxMemCCL);
  return 0;
}

// A communicator destroyed with its device communicator and DevMem still
// there (over sockets: the proxy thread runs): they go with it, no hang.
int leftAtDestroy(int rank, int nranks, flagcxUniqueId *id) {
  Setup s;
  int rc = open(s, rank, nranks, id, kSocket, true);
  if (rc) return rc;
  flagcxDevSignalInc(s.comm, W, (rank + 1) % nranks, 0, 0, kThread, kSys);
  flagcxDevFlush(s.comm, 0, kThread, kAcq);  // the successor's signal is out
  flagcxDevWaitSignal(s.comm, 0, 1, 64, 0, kThread, kAcq);
  CHECK_OR(flagcxCommDestroy(s.c.comm) == flagcxSuccess, 92);
  flagcxMemFree(s.buf, flagcxMemCCL);
  return 0;
}

TEST(DevApiBadUse, LeftAtCommDestroy) {
  harness::Env env{{{"FLAGCX_DEVICE", "host"}, {"FLAGCX_TIMEOUT", "60"},
                    {"FLAGCX_SHM_DISABLE", "1"}}};
  auto res = harness::run(3, leftAtDestroy, env, 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

TEST(DevApiBadUse, ClearErrors) {
  g_shared = static_cast<Shared *>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                                        MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(g_shared, MAP_FAILED);
  harness::Env env{{{"FLAGCX_DEVICE", "host"}, {"FLAGCX_TIMEOUT", "60"}}};
  auto res = harness::run(2, badUse, env, 240);
  munmap(g_shared, 4096);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

struct Param {
  int nranks;
  Net net;
  bool shareable;
};

class DevApi : public ::testing::TestWithParam<Param> {};

TEST_P(DevApi, EveryCallOnHostRanks) {
  Param p = GetParam();
  harness::Env env{{{"FLAGCX_DEVICE", "host"}, {"FLAGCX_TIMEOUT", "60"},
                    {"FLAGCX_SHM_DISABLE", p.net == kSocket ? "1" : "0"}}};
  auto res = harness::run(
      p.nranks, [&](int r, int n, flagcxUniqueId *id) { return body(r, n, id, p.net, p.shareable); },
      env, 240);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

std::string name(const ::testing::TestParamInfo<Param> &i) {
  const char *net = i.param.net == kShm ? "shm" : i.param.net == kSocket ? "socket" : "twohosts";
  return std::string(net) + "_" + std::to_string(i.param.nranks) +
         (i.param.shareable ? "" : "_malloc");
}

INSTANTIATE_TEST_SUITE_P(Host, DevApi,
                         ::testing::Values(Param{2, kShm, true}, Param{3, kShm, true},
                                           Param{4, kShm, true}, Param{2, kShm, false},
                                           Param{2, kSocket, true}, Param{3, kSocket, true},
                                           Param{2, kTwoHosts, true}, Param{4, kTwoHosts, true}),
                         name);

}  // namespace
