// Forking ranks from a process that runs other threads (the rendezvous root
// that flagcxGetUniqueId starts) is safe only while those threads hold no
// lock the child will need.  Under the sanitizers that includes the
// allocator's own lock: a fork that lands while the root thread allocates
// leaves a child that blocks in its first malloc forever (seen with ASan in
// net-socket and mr-p2p: the root thread serves rank 0 while rank 1 is
// forked).  So the harnesses fork every rank first and only then make the
// unique id, handing it to each rank through a pipe (forkRanksThenId).
// waitThreadsAsleep() covers threads left by earlier tests: it returns once
// every other thread of this process sleeps in the kernel (state S or D in
// /proc/self/task/*/stat), or after `maxMs` whatever their state.
#pragma once
#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "flagcx.h"

namespace testfork {

inline bool otherThreadsAsleep() {
  DIR *d = opendir("/proc/self/task");
  if (!d) return true;
  long self = syscall(SYS_gettid);
  bool asleep = true;
  while (dirent *e = readdir(d)) {
    long tid = strtol(e->d_name, nullptr, 10);
    if (tid <= 0 || tid == self) continue;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/self/task/%ld/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    // "tid (comm) S ...": the state follows the last ')'.
    const char *p = nullptr;
    for (const char *q = buf; *q; q++)
      if (*q == ')') p = q;
    char st = p && p[1] && p[2] ? p[2] : 'S';
    if (st != 'S' && st != 'D') asleep = false;
  }
  closedir(d);
  return asleep;
}

inline void waitThreadsAsleep(int maxMs = 2000) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(maxMs);
  // Two looks in a row, a moment apart: a thread between two sleeps is seen awake.
  int quiet = 0;
  while (quiet < 2 && std::chrono::steady_clock::now() < end) {
    quiet = otherThreadsAsleep() ? quiet + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Fork n ranks, then make the unique id and send it to each.  In a child,
// `child(rank, id)` runs once the id has arrived and its result is the exit
// code (100: the parent could not make an id).  Returns the pids (-1 where
// fork failed) and whether the id was made.
template <class Child>
std::vector<pid_t> forkRanksThenId(int n, flagcxUniqueId *id, bool *idOk, Child child) {
  fflush(stdout);
  fflush(stderr);
  waitThreadsAsleep();
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  std::vector<int> wfds(static_cast<size_t>(n), -1);
  for (int r = 0; r < n; r++) {
    int fds[2];
    if (pipe(fds) != 0) continue;
    pid_t p = fork();
    if (p == 0) {
      close(fds[1]);
      for (int w : wfds)
        if (w >= 0) close(w);
      flagcxUniqueId mine;
      size_t got = 0;
      while (got < sizeof(mine)) {
        ssize_t k = read(fds[0], reinterpret_cast<char *>(&mine) + got, sizeof(mine) - got);
        if (k <= 0) _exit(100);
        got += static_cast<size_t>(k);
      }
      close(fds[0]);
      int rc = child(r, &mine);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    close(fds[0]);
    if (p < 0) {
      close(fds[1]);
      continue;
    }
    pids[static_cast<size_t>(r)] = p;
    wfds[static_cast<size_t>(r)] = fds[1];
  }
  *idOk = flagcxGetUniqueId(id) == flagcxSuccess;
  for (int w : wfds) {
    if (w < 0) continue;
    if (*idOk && write(w, id, sizeof(*id)) != static_cast<ssize_t>(sizeof(*id))) {
      // The rank sees a short read and exits with 100.
    }
    close(w);
  }
  return pids;
}

}  // namespace testfork

