// Ranks of one host in different PID namespaces.  Containers of one pod (or
// `docker run --ipc=host --uts=host` without `--pid=host`) share the
// hostname, the boot id and /dev/shm, so flagcx puts them on one host and
// connects them over shared memory -- but a pid means nothing across the
// namespace boundary: kill(pid, 0) answers ESRCH for a live peer, another
// process may hold the same number (each container's first process is pid
// 1), and process_vm_readv or /proc/<pid> would reach that other process.
//
// Each test runs a rank (or every rank) as pid 1 of a namespace of its own
// (unshare(CLONE_NEWPID), then fork), which needs CAP_SYS_ADMIN: without it
// the tests skip.

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "tests/common/harness.h"

namespace {

// May this process make PID namespaces?  (Asked in a child, which then exits.)
bool canUnsharePid() {
  pid_t c = fork();
  if (c == 0) _exit(unshare(CLONE_NEWPID) == 0 ? 0 : 1);
  int st = 0;
  return c > 0 && waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// Runs `body` as the first process (pid 1) of a new PID namespace and
// returns its exit code.  The child dies with this process (harness kills
// at its deadline reach only this one).
int inNewPidNamespace(const std::function<int()> &body) {
  if (unshare(CLONE_NEWPID) != 0) return 97;
  pid_t c = fork();
  if (c < 0) return 98;
  if (c == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getpid() != 1) _exit(96);
    int rc = body();
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  int st = 0;
  if (waitpid(c, &st, 0) != c) return 95;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

// Allreduce and a send/receive pair at sizes of every shm path: the small
// block (1 KiB), the ring (16 KiB) and the single-copy pull (1 MiB, heap and
// flagcxMemAlloc buffers).  Rank 0 enters each call `lateMs` after rank 1,
// so rank 1's wait idles long enough for the dead-peer checks to run.
int exchange(int rank, int n, flagcxUniqueId *id, int lateMs) {
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
  int peer = 1 - rank;
  for (size_t count : {256ul, 4096ul, 262144ul}) {
    for (bool shareable : {false, true}) {
      float *in = nullptr, *out = nullptr;
      std::vector<float> hin, hout;
      if (shareable) {
        RANK_OK(flagcxMemAlloc(reinterpret_cast<void **>(&in), count * sizeof(float)));
        RANK_OK(flagcxMemAlloc(reinterpret_cast<void **>(&out), count * sizeof(float)));
      } else {
        hin.resize(count);
        hout.resize(count);
        in = hin.data();
        out = hout.data();
      }
      for (size_t i = 0; i < count; i++) in[i] = static_cast<float>((rank + 1) * 1000 + i % 997);
      if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(lateMs));
      RANK_OK(flagcxAllReduce(in, out, count, flagcxFloat32, flagcxSum, comm, nullptr));
      for (size_t i = 0; i < count; i++) {
        float want = static_cast<float>(3000 + 2 * (i % 997));
        RANK_CHECK(out[i] == want, "allreduce of %zu: [%zu] = %g, want %g", count, i, out[i], want);
      }
      if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(lateMs));
      RANK_OK(flagcxGroupStart(comm));
      RANK_OK(flagcxSend(in, count, flagcxFloat32, peer, comm, nullptr));
      RANK_OK(flagcxRecv(out, count, flagcxFloat32, peer, comm, nullptr));
      RANK_OK(flagcxGroupEnd(comm));
      for (size_t i = 0; i < count; i++) {
        float want = static_cast<float>((peer + 1) * 1000 + i % 997);
        RANK_CHECK(out[i] == want, "recv of %zu: [%zu] = %g, want %g", count, i, out[i], want);
      }
      if (shareable) {
        RANK_OK(flagcxMemFree(in));
        RANK_OK(flagcxMemFree(out));
      }
    }
  }
  RANK_OK(flagcxCommDestroy(comm));
  return 0;
}

const harness::Env kEnv{{{"FLAGCX_TIMEOUT", "30"}}};

// Rank 1 sees no pid of rank 0's namespace: its checks must not take rank 0
// for dead while rank 0 is merely late.
TEST(PidNamespaces, PeerWhosePidIsInvisibleIsNotTakenForDead) {
  if (!canUnsharePid()) GTEST_SKIP() << "no permission to make PID namespaces";
  auto res = harness::run(2, [](int rank, int n, flagcxUniqueId *id) {
    auto body = [&] { return exchange(rank, n, id, 300); };
    return rank == 1 ? inNewPidNamespace(body) : body();
  }, kEnv, 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

// Both ranks are pid 1, each of its own namespace: equal pids on one host
// are still two processes (no shared pointers, no reading "pid 1").
TEST(PidNamespaces, EqualPidsInTwoNamespacesAreTwoProcesses) {
  if (!canUnsharePid()) GTEST_SKIP() << "no permission to make PID namespaces";
  auto res = harness::run(2, [](int rank, int n, flagcxUniqueId *id) {
    return inNewPidNamespace([&] { return exchange(rank, n, id, 50); });
  }, kEnv, 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

}  // namespace
