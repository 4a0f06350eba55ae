// Fork N real processes that share one unique id, run a function in each,
// and report what each rank did.  A rank reports failure through its exit
// code; the parent never waits forever (deadline, then SIGKILL).
#pragma once
#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/bootstrap.h"
#include "flagcx.h"
#include "net/net.h"

namespace nettest {

struct RankOutcome {
  pid_t pid = 0;
  bool exited = false;
  int code = -1;    // exit code when exited
  int signal = 0;   // terminating signal otherwise
  bool hung = false;
};

struct RunOptions {
  int timeoutSec = 90;
  // Environment set in every child (then paramsReload()).
  std::vector<std::pair<std::string, std::string>> env;
};

// fn returns the number of failures seen by that rank (0 = pass).
std::vector<RankOutcome> runRanks(int n, const std::function<int(int rank, int nranks,
                                                                 const flagcxUniqueId &id)> &fn,
                                  const RunOptions &opt = {});
// Every rank exited with code 0?
std::string describeFailures(const std::vector<RankOutcome> &out);
// Names under /dev/shm left by any of these processes.
std::vector<std::string> leftoverShm(const std::vector<RankOutcome> &out);
// Every flagcx shm name now in /dev/shm.
std::vector<std::string> leftoverShmNames();

// Child-side helpers.
std::unique_ptr<flagcx::Bootstrap> makeBootstrap(int rank, int nranks, const flagcxUniqueId &id);
std::unique_ptr<flagcx::Transport> makeTransport(const std::string &name);
// Progress every request until all are done; 0 on success.  `results`, when
// given, receives each request's status.
struct Pending {
  flagcx::Conn *conn;
  int req;
  size_t bytes = 0;
  bool done = false;
  flagcxResult_t rc = flagcxSuccess;
};
flagcxResult_t waitAll(std::vector<Pending> &reqs, double timeoutSec);

}  // namespace nettest

// Child-side check: print and count, never abort.
#define NT_CHECK(cond, ...)                                                          \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "[rank check failed] %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                  \
      fprintf(stderr, "\n");                                                         \
      failures++;                                                                    \
    }                                                                                \
  } while (0)
