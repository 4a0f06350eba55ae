// Multi-rank test harness: fork N real processes that share a unique id made
// by the parent, run a body in each, and collect every rank's result.  A rank
// that hangs past the deadline is killed and reported; nothing here can hang.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/params.h"
#include "flagcx.h"
#include "tests/common/fork_safe.h"

namespace mr {

struct Env {
  std::vector<std::pair<std::string, std::string>> vars;
};

// The body returns 0 on success; anything else is a failure code.
using Body = std::function<int(int rank, int nranks, flagcxUniqueId *id)>;

struct Result {
  std::vector<int> status;  // per rank: exit code, or 128+signal, or -1 if killed at the deadline
  bool allOk() const {
    for (int s : status)
      if (s != 0) return false;
    return true;
  }
  std::string describe() const {
    std::string s;
    for (size_t r = 0; r < status.size(); r++)
      s += "rank " + std::to_string(r) + ": " + std::to_string(status[r]) + "; ";
    return s;
  }
};

inline void applyEnv(const Env &env) {
  for (auto &kv : env.vars) setenv(kv.first.c_str(), kv.second.c_str(), 1);
  flagcx::paramsReload();
}

// `onStart(pids)` runs in the parent once all ranks are forked (for kill tests).
inline Result run(int nranks, const Body &body, const Env &env = {}, int deadlineSec = 120,
                  const std::function<void(std::vector<pid_t> &)> &onStart = nullptr) {
  applyEnv(env);
  flagcxUniqueId id;
  Result res;
  res.status.assign(static_cast<size_t>(nranks), -1);
  bool idOk = false;
  std::vector<pid_t> pids = testfork::forkRanksThenId(nranks, &id, &idOk, [&](int r, flagcxUniqueId *mine) {
    return body(r, nranks, mine);
  });
  if (!idOk) fprintf(stderr, "harness: flagcxGetUniqueId failed\n");
  if (onStart) onStart(pids);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadlineSec);
  int left = nranks;
  while (left > 0) {
    for (int r = 0; r < nranks; r++) {
      pid_t &p = pids[static_cast<size_t>(r)];
      if (p <= 0) continue;
      int st = 0;
      pid_t w = waitpid(p, &st, WNOHANG);
      if (w == p) {
        res.status[static_cast<size_t>(r)] =
            WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        p = -1;
        left--;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < nranks; r++) {
        pid_t p = pids[static_cast<size_t>(r)];
        if (p > 0) {
          fprintf(stderr, "harness: rank %d still running at the deadline; killing it\n", r);
          kill(p, SIGKILL);
          waitpid(p, nullptr, 0);
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return res;
}

}  // namespace mr

// For use inside a rank body: report and fail the rank.
#define RANK_CHECK(cond, ...)                                   \
  do {                                                          \
    if (!(cond)) {                                              \
      fprintf(stderr, "[rank check failed] %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                             \
      fprintf(stderr, "\n");                                    \
      return 1;                                                 \
    }                                                           \
  } while (0)
#define RANK_OK(call)                                                              \
  do {                                                                             \
    flagcxResult_t _r = (call);                                                    \
    if (_r != flagcxSuccess) {                                                     \
      fprintf(stderr, "[rank call failed] %s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, #call, \
              flagcxGetErrorString(_r), flagcxGetLastError(nullptr));              \
      return 2;                                                                    \
    }                                                                              \
  } while (0)
