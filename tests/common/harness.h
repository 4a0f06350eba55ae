// The one multi-process harness of the tests: fork N real ranks, give them a
// unique id made by the parent, run a body in each and collect what every
// rank did.  Nothing here can hang: a rank still running at the deadline is
// killed and reported as hung.
//
// Order matters.  flagcxGetUniqueId starts the rendezvous root, a thread of
// this process; forking while a thread holds a lock the child needs (under
// the sanitizers that includes the allocator's) leaves a child that blocks in
// its first malloc forever.  So every rank is forked first, and only then is
// the id made and handed to each rank through a pipe.  Threads left by
// earlier tests are waited for until they sleep in the kernel (bounded).
//
// Environment: `Env` applies to the whole run (the ranks, and the rendezvous
// root in this process): it is set here before the fork, the library's
// parameters are reloaded, and this process's previous values come back
// when the run is over.
//
// Exit codes of a rank: what its body returned (0 = pass; values outside
// 1..99 become 99, so that a failure count never wraps to 0), 100 when the id
// never arrived.  Result::status holds that code, 128+signal for a rank that
// died of a signal, and -1 for one killed at the deadline.
#pragma once
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/params.h"
#include "base/sanitizers.h"
#include "flagcx.h"

namespace harness {

// ThreadSanitizer builds run the library 5-15x slower.  Tests that bound the
// wall-clock time from an event (a rank stopped or killed) to the survivors'
// error include the time the in-flight bytes take to drain before the peers
// notice nothing moves; under TSan they move less data instead of loosening
// the bound (an 8 MiB allreduce at 8 ranks over
// sockets drained for ~5 s after the signal, a 512 MiB buffer took long
// enough to fill that the other rank's barrier ran into FLAGCX_TIMEOUT).
#ifdef FLAGCX_TSAN
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif

struct Env {
  std::vector<std::pair<std::string, std::string>> vars;
};

// The body returns 0 on success; anything else is a failure code.
using Body = std::function<int(int rank, int nranks, flagcxUniqueId *id)>;

constexpr int kHung = -1;     // status of a rank killed at the deadline
constexpr int kNoId = 100;    // exit code of a rank whose id never arrived

struct Result {
  std::vector<int> status;  // per rank: exit code, 128+signal, or kHung
  std::vector<pid_t> pids;  // as forked (-1 where fork failed)
  int64_t startedNs = 0;    // CLOCK_REALTIME just before the first fork
  bool allOk() const {
    for (int s : status)
      if (s != 0) return false;
    return true;
  }
  bool ok(int r) const { return status[static_cast<size_t>(r)] == 0; }
  bool hung(int r) const { return status[static_cast<size_t>(r)] == kHung; }
  // The signal that ended rank r, or 0.
  int signal(int r) const {
    int s = status[static_cast<size_t>(r)];
    return s > 128 ? s - 128 : 0;
  }
  // "" when every rank passed; else one clause per rank that did not.
  std::string failures() const {
    std::string s;
    for (size_t r = 0; r < status.size(); r++) {
      int st = status[r];
      if (st == 0) continue;
      s += "rank " + std::to_string(r) + ": ";
      if (st == kHung) s += "hung (killed at the deadline); ";
      else if (st > 128) s += "killed by signal " + std::to_string(st - 128) + "; ";
      else s += "exit code " + std::to_string(st) + "; ";
    }
    return s;
  }
  // Every rank, passed or not.
  std::string describe() const {
    std::string s;
    for (size_t r = 0; r < status.size(); r++)
      s += "rank " + std::to_string(r) + ": " + std::to_string(status[r]) + "; ";
    return s;
  }
};

namespace detail {

// Is every other thread of this process asleep in the kernel (state S or D
// in /proc/self/task/*/stat)?
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
    const char *p = strrchr(buf, ')');  // "tid (comm) S ...": the state follows the last ')'
    char st = p && p[1] && p[2] ? p[2] : 'S';
    if (st != 'S' && st != 'D') asleep = false;
  }
  closedir(d);
  return asleep;
}

// Returns once the other threads were seen asleep twice in a row, a moment
// apart (a thread between two sleeps is seen awake), or after maxMs.
inline void waitThreadsAsleep(int maxMs = 2000) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(maxMs);
  int quiet = 0;
  while (quiet < 2 && std::chrono::steady_clock::now() < end) {
    quiet = otherThreadsAsleep() ? quiet + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace detail

// Reads exactly n bytes from fd (a pipe between ranks); false at EOF or
// error, or (timeoutMs >= 0) when a piece does not come within timeoutMs.
inline bool readAll(int fd, void *p, size_t n, int timeoutMs = -1) {
  char *c = static_cast<char *>(p);
  while (n) {
    pollfd pf{fd, POLLIN, 0};
    if (timeoutMs >= 0 && poll(&pf, 1, timeoutMs) != 1) return false;
    ssize_t k = read(fd, c, n);
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Sets `env` in this process (and reloads the library's parameters) for the
// lifetime of the object; the previous values come back after.
class ScopedEnv {
 public:
  explicit ScopedEnv(const Env &env) {
    for (auto &kv : env.vars) {
      const char *old = getenv(kv.first.c_str());
      saved_.push_back({kv.first, old ? std::optional<std::string>(old) : std::nullopt});
      setenv(kv.first.c_str(), kv.second.c_str(), 1);
    }
    if (!saved_.empty()) flagcx::paramsReload();
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) setenv(it->first.c_str(), it->second->c_str(), 1);
      else unsetenv(it->first.c_str());
    }
    if (!saved_.empty()) flagcx::paramsReload();
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Runs `body` in nranks forked processes.  `onStart(pids)` runs in this
// process once every rank is forked and has its id (kill tests use it).
inline Result run(int nranks, const Body &body, const Env &env = {}, int deadlineSec = 120,
                  const std::function<void(std::vector<pid_t> &)> &onStart = nullptr) {
  ScopedEnv scoped(env);
  Result res;
  size_t n = static_cast<size_t>(nranks);
  res.status.assign(n, kHung);
  res.pids.assign(n, -1);
  fflush(stdout);
  fflush(stderr);
  detail::waitThreadsAsleep();
  std::vector<int> wfds(n, -1);
  timespec started;
  clock_gettime(CLOCK_REALTIME, &started);
  res.startedNs = static_cast<int64_t>(started.tv_sec) * 1'000'000'000 + started.tv_nsec;
  for (int r = 0; r < nranks; r++) {
    int fds[2];
    if (pipe(fds) != 0) continue;
    pid_t p = fork();
    if (p == 0) {
      close(fds[1]);
      for (int w : wfds)
        if (w >= 0) close(w);
      alarm(static_cast<unsigned>(deadlineSec + 5));  // should this process outlive the parent
      flagcx::logReinit();
      flagcx::logSetRank(r);
      flagcxUniqueId id;
      if (!readAll(fds[0], &id, sizeof(id))) _exit(kNoId);
      close(fds[0]);
      int rc = body(r, nranks, &id);
      fflush(stdout);
      fflush(stderr);
      _exit(rc == 0 ? 0 : rc >= 1 && rc <= 99 ? rc : 99);
    }
    close(fds[0]);
    if (p < 0) {
      close(fds[1]);
      continue;
    }
    res.pids[static_cast<size_t>(r)] = p;
    wfds[static_cast<size_t>(r)] = fds[1];
  }
  flagcxUniqueId id;
  bool idOk = flagcxGetUniqueId(&id) == flagcxSuccess;
  if (!idOk) fprintf(stderr, "harness: flagcxGetUniqueId failed\n");
  for (int w : wfds) {
    if (w < 0) continue;
    // A short write or no id: the rank reads too little and exits with kNoId.
    if (idOk && write(w, &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) {
    }
    close(w);
  }
  std::vector<pid_t> pids = res.pids;
  if (onStart) onStart(pids);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadlineSec);
  size_t left = 0;
  for (pid_t p : res.pids) left += p > 0 ? 1 : 0;
  std::vector<bool> done(n, false);
  while (left > 0) {
    bool any = false;
    for (size_t r = 0; r < n; r++) {
      pid_t p = res.pids[r];
      if (p <= 0 || done[r]) continue;
      int st = 0;
      if (waitpid(p, &st, WNOHANG) != p) continue;
      res.status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
      done[r] = true;
      left--;
      any = true;
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t r = 0; r < n; r++) {
        if (res.pids[r] <= 0 || done[r]) continue;
        fprintf(stderr, "harness: rank %zu still running at the deadline; killing it\n", r);
        kill(res.pids[r], SIGKILL);
        waitpid(res.pids[r], nullptr, 0);
      }
      break;
    }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return res;
}

// Inside a rank body: a communicator and a stream of the device handle.
struct CommOnStream {
  flagcxDeviceHandle_t dev = nullptr;
  flagcxComm_t comm = nullptr;
  flagcxStream_t stream = nullptr;
  flagcxResult_t open(int rank, int nranks, flagcxUniqueId *id) {
    flagcxResult_t r = flagcxDeviceHandleInit(&dev);
    if (r == flagcxSuccess) r = flagcxCommInitRank(&comm, nranks, id, rank);
    if (r == flagcxSuccess) r = dev->streamCreate(&stream);
    return r;
  }
  flagcxResult_t sync() { return dev->streamSynchronize(stream); }
  flagcxResult_t close() {
    flagcxResult_t r = dev->streamDestroy(stream);
    if (r == flagcxSuccess) r = flagcxCommDestroy(comm);
    if (r == flagcxSuccess) r = flagcxDeviceHandleFree(dev);
    return r;
  }
};

}  // namespace harness

// Inside a rank body: print which check failed, where, and why.
#define RANK_SAY_FAILED(what, ...)                                                     \
  do {                                                                                 \
    fprintf(stderr, "[rank check failed] %s:%d: %s: ", __FILE__, __LINE__, what);      \
    fprintf(stderr, __VA_ARGS__);                                                      \
    fprintf(stderr, "\n");                                                             \
  } while (0)
// Inside a rank body: report and fail the rank (exit code 1).
#define RANK_CHECK(cond, ...)                    \
  do {                                           \
    if (!(cond)) {                               \
      RANK_SAY_FAILED(#cond, __VA_ARGS__);       \
      return 1;                                  \
    }                                            \
  } while (0)
// Inside a rank body: a flagcx call that must succeed (exit code 2).
#define RANK_OK(call)                                                                  \
  do {                                                                                 \
    flagcxResult_t _r = (call);                                                        \
    if (_r != flagcxSuccess) {                                                         \
      fprintf(stderr, "[rank call failed] %s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, \
              #call, flagcxGetErrorString(_r), flagcxGetLastError(nullptr));           \
      return 2;                                                                        \
    }                                                                                  \
  } while (0)
// Inside a rank body that counts its failures in `failures`: report, count, go on.
#define RANK_EXPECT(cond, ...)                   \
  do {                                           \
    if (!(cond)) {                               \
      RANK_SAY_FAILED(#cond, __VA_ARGS__);       \
      failures++;                                \
    }                                            \
  } while (0)
