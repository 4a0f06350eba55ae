// One-sided operations against a dead peer: after the peer registered and
// was SIGKILLed, a wait for its signal, a put-with-signal to it and a
// counted put to it must fail (never hang), over shm and over sockets; a
// wait for a SIGSTOPped (silent) peer, and a read from it over sockets, fail
// at FLAGCX_TIMEOUT.
// The harness's deadline is what bounds the run; FLAGCX_TIMEOUT is 5 s.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/common/harness.h"

namespace {

enum class What { WaitSignal, PutSignal, RegionPut, WaitStopped, GetStopped };

// The ranks' pids, shared with them (MAP_SHARED before the fork): rank 0
// ends a stopped rank 1 once it has its error.
pid_t *g_pids = nullptr;

int body(int rank, int nranks, flagcxUniqueId *id, What what, bool alloc) {
  harness::CommOnStream c;
  if (c.open(rank, nranks, id) != flagcxSuccess) return 2;
  const size_t size = 1 << 20;
  void *buf = nullptr;
  if (alloc) {
    if (flagcxMemAlloc(&buf, size, flagcxMemCCL) != flagcxSuccess) return 3;
  } else {
    buf = calloc(1, size);
  }
  flagcxWindow_t w = nullptr;
  if (flagcxCommWindowRegister(c.comm, buf, size, &w, FLAGCX_WIN_COLL_SYMMETRIC, flagcxMemCCL) !=
      flagcxSuccess)
    return 4;
  if (flagcxOneSideRegister(c.comm, buf, size) != flagcxSuccess) return 5;
  if (flagcxBarrier(c.comm, c.stream) != flagcxSuccess || c.sync() != flagcxSuccess) return 6;
  bool stop = what == What::WaitStopped || what == What::GetStopped;
  if (rank == 1) raise(stop ? SIGSTOP : SIGKILL);
  std::vector<char> src(size, 7);
  flagcxResult_t r = flagcxSuccess;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  switch (what) {
    case What::WaitStopped:  // a silent peer: the wait ends at FLAGCX_TIMEOUT
    case What::WaitSignal: {
      flagcxWaitSignalDesc_t d{1, 1};
      r = flagcxWaitSignal(1, &d, c.comm, c.stream);
      if (r == flagcxSuccess) r = c.sync();
      break;
    }
    case What::PutSignal:
      // Rounds until one fails (the first ones may land before the peer is
      // gone, or in a socket buffer); 15 s is far beyond every bound.
      for (int i = 0; r == flagcxSuccess && std::chrono::steady_clock::now() < until; i++) {
        r = flagcxPutSignal(src.data(), size, flagcxUint8, 1, w, 0, 0, c.comm, c.stream);
        if (r == flagcxSuccess) r = c.sync();
      }
      break;
    case What::GetStopped:
      // A read the silent peer never answers: failed at FLAGCX_TIMEOUT, and
      // the engine cuts the Conn first (nothing may land in buf after).
      r = flagcxGet(c.comm, 1, 0, 0, size, 0, 0);
      if (r == flagcxSuccess) r = flagcxWaitCounter(c.comm, 1);
      break;
    case What::RegionPut:
      for (int i = 0; r == flagcxSuccess && std::chrono::steady_clock::now() < until; i++) {
        r = flagcxPut(c.comm, 1, 0, 0, size, 0, 0);
        if (r == flagcxSuccess) r = flagcxWaitCounter(c.comm, static_cast<uint64_t>(i + 1));
      }
      break;
  }
  if (stop && g_pids && g_pids[1] > 0) kill(g_pids[1], SIGKILL);
  if (r == flagcxSuccess) {
    fprintf(stderr, "rank 0: every operation to the dead rank 1 succeeded\n");
    return 10;
  }
  // The communicator is still usable for teardown.
  flagcxCommAbort(c.comm);
  if (alloc) flagcxMemFree(buf, flagcxMemCCL);
  else free(buf);
  return 0;
}

enum Net { kShm, kSocket, kIb };  // kIb: verbs on the software device (native RDMA)

struct Param {
  What what;
  bool alloc;
  Net net;
};

class DeadPeer : public ::testing::TestWithParam<Param> {};

TEST_P(DeadPeer, FailsInsteadOfHanging) {
  Param p = GetParam();
  // A mapped put lands in the dead rank's memory without error; its signal
  // and the counted put must still fail.
  harness::Env env{{{"FLAGCX_TIMEOUT", "5"}, {"FLAGCX_SHM_DISABLE", p.net == kSocket ? "1" : "0"},
                    {"FLAGCX_IB_SOFTWARE_DEVICE", p.net == kIb ? "2" : "0"}}};
  g_pids = static_cast<pid_t *>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(g_pids, MAP_FAILED);
  auto res = harness::run(
      2, [&](int r, int n, flagcxUniqueId *id) { return body(r, n, id, p.what, p.alloc); }, env,
      60, [](std::vector<pid_t> &pids) {
        for (size_t i = 0; i < pids.size() && i < 2; i++) g_pids[i] = pids[i];
      });
  munmap(g_pids, 4096);
  g_pids = nullptr;
  EXPECT_EQ(res.signal(1), SIGKILL) << res.describe();
  EXPECT_TRUE(res.ok(0)) << res.failures();
}

std::string name(const ::testing::TestParamInfo<Param> &i) {
  const char *w = i.param.what == What::WaitSignal    ? "WaitSignal"
                  : i.param.what == What::PutSignal   ? "PutSignal"
                  : i.param.what == What::WaitStopped ? "WaitStoppedPeer"
                  : i.param.what == What::GetStopped  ? "GetStoppedPeer"
                                                      : "RegionPut";
  return std::string(w) + (i.param.alloc ? "_memalloc" : "_malloc") +
         (i.param.net == kSocket ? "_socket" : i.param.net == kIb ? "_ib" : "_shm");
}

INSTANTIATE_TEST_SUITE_P(
    OneSided, DeadPeer,
    ::testing::Values(Param{What::WaitSignal, true, kShm}, Param{What::WaitSignal, false, kSocket},
                      Param{What::WaitSignal, true, kIb}, Param{What::PutSignal, true, kShm},
                      Param{What::PutSignal, false, kShm}, Param{What::PutSignal, false, kSocket},
                      Param{What::PutSignal, true, kIb}, Param{What::RegionPut, true, kShm},
                      Param{What::RegionPut, false, kSocket}, Param{What::RegionPut, false, kIb},
                      Param{What::WaitStopped, true, kShm}, Param{What::WaitStopped, false, kSocket},
                      Param{What::GetStopped, false, kSocket}),
    name);

}  // namespace
