// The cost of a recovery (docs/ELASTIC.md): N ranks (forked processes of one
// host) make a communicator and run allreduces; the last rank is SIGKILLed;
// the survivors either shrink with FLAGCX_SHRINK_ABORT (mode "shrink") or
// abort the parent and make a fresh communicator of N-1 ranks from a new
// unique id (mode "fresh": flagcxCommAbort + flagcxGetUniqueId on the first
// survivor, the id handed over through shared memory + flagcxCommInitRank).
// Each survivor times its own recovery calls, from after its failed call to
// the new communicator's return; then one allreduce on it is checked.
// Prints one line per round: mode, ranks, the slowest survivor's time and
// the median survivor's, in milliseconds.
//
// usage: elastic_cost shrink|fresh NRANKS ROUNDS
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "flagcx.h"

namespace {

constexpr int kMaxRanks = 64;
constexpr size_t kCount = 1 << 14;  // floats per allreduce

struct Shared {
  flagcxUniqueId id;        // the parent's
  flagcxUniqueId freshId;   // the fresh communicator's (mode fresh)
  std::atomic<int> idReady, freshReady, warm, failed;
  std::atomic<int64_t> ns[kMaxRanks];  // each survivor's recovery time
  std::atomic<int> ok[kMaxRanks];
};

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

void waitFor(const std::atomic<int> &v, int want) {
  while (v.load() < want) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

bool allreduceOk(flagcxComm_t comm, int nranks) {
  std::vector<float> in(kCount, 1.f), out(kCount, 0.f);
  if (flagcxAllReduce(in.data(), out.data(), kCount, flagcxFloat, flagcxSum, comm, nullptr) !=
      flagcxSuccess)
    return false;
  return out[0] == static_cast<float>(nranks) && out[kCount - 1] == static_cast<float>(nranks);
}

// One survivor after the kill: recovers as `mode` says and times it.
int recover(bool shrink, int rank, int nranks, flagcxComm_t parent, Shared *sh) {
  int dead = nranks - 1;
  flagcxComm_t child = nullptr;
  int64_t t0 = nowNs();
  if (shrink) {
    if (flagcxCommShrink(parent, &dead, 1, &child, FLAGCX_SHRINK_ABORT) != flagcxSuccess) return 4;
  } else {
    flagcxCommAbort(parent);
    parent = nullptr;
    if (rank == 0) {
      if (flagcxGetUniqueId(&sh->freshId) != flagcxSuccess) return 5;
      sh->freshReady = 1;
    }
    waitFor(sh->freshReady, 1);
    if (flagcxCommInitRank(&child, nranks - 1, &sh->freshId, rank) != flagcxSuccess) return 6;
  }
  sh->ns[rank] = nowNs() - t0;
  bool ok = allreduceOk(child, nranks - 1);
  if (parent) flagcxCommAbort(parent);
  flagcxCommDestroy(child);
  return ok ? 0 : 7;
}

int rankBody(bool shrink, int rank, int nranks, Shared *sh) {
  if (rank == 0) {
    if (flagcxGetUniqueId(&sh->id) != flagcxSuccess) return 2;
    sh->idReady = 1;
  }
  waitFor(sh->idReady, 1);
  flagcxComm_t comm;
  if (flagcxCommInitRank(&comm, nranks, &sh->id, rank) != flagcxSuccess) return 3;
  // Warm: every connection the allreduce uses is made.
  if (!allreduceOk(comm, nranks)) return 3;
  sh->warm++;
  std::vector<float> in(kCount, 1.f), out(kCount, 0.f);
  while (flagcxAllReduce(in.data(), out.data(), kCount, flagcxFloat, flagcxSum, comm, nullptr) ==
         flagcxSuccess) {
  }
  return recover(shrink, rank, nranks, comm, sh);
}

int round(bool shrink, int nranks) {
  auto *sh = static_cast<Shared *>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                                        MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  memset(static_cast<void *>(sh), 0, sizeof(Shared));
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; r++) {
    pid_t p = fork();
    if (p == 0) _exit(rankBody(shrink, r, nranks, sh));
    pids.push_back(p);
  }
  waitFor(sh->warm, nranks);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pids.back(), SIGKILL);
  int bad = 0;
  for (int r = 0; r < nranks; r++) {
    int st = 0;
    waitpid(pids[static_cast<size_t>(r)], &st, 0);
    if (r < nranks - 1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      fprintf(stderr, "elastic_cost: rank %d ended with status %d\n", r, st);
      bad = 1;
    }
  }
  if (!bad) {
    std::vector<double> ms;
    for (int r = 0; r < nranks - 1; r++) ms.push_back(static_cast<double>(sh->ns[r]) / 1e6);
    std::sort(ms.begin(), ms.end());
    printf("%s %d %.1f %.1f\n", shrink ? "shrink" : "fresh", nranks, ms.back(),
           ms[ms.size() / 2]);
    fflush(stdout);
  }
  munmap(sh, sizeof(Shared));
  return bad;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 4 || (strcmp(argv[1], "shrink") != 0 && strcmp(argv[1], "fresh") != 0)) {
    fprintf(stderr, "usage: elastic_cost shrink|fresh NRANKS ROUNDS\n");
    return 2;
  }
  int nranks = atoi(argv[2]), rounds = atoi(argv[3]);
  if (nranks < 2 || nranks > kMaxRanks) return 2;
  int bad = 0;
  for (int i = 0; i < rounds; i++) bad |= round(strcmp(argv[1], "shrink") == 0, nranks);
  return bad;
}
