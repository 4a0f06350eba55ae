#include "tests/net/rank_harness.h"

#include "net/ibverbs/ib_transport.h"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/log.h"
#include "base/params.h"
#include "tests/common/fork_safe.h"

namespace nettest {

using Clock = std::chrono::steady_clock;

std::vector<RankOutcome> runRanks(
    int n, const std::function<int(int, int, const flagcxUniqueId &)> &fn,
    const RunOptions &opt) {
  std::vector<RankOutcome> out(static_cast<size_t>(n));
  flagcxUniqueId id;
  bool idOk = false;
  std::vector<pid_t> pids = testfork::forkRanksThenId(n, &id, &idOk, [&](int r, flagcxUniqueId *mine) {
    alarm(static_cast<unsigned>(opt.timeoutSec + 5));  // belt and braces
    for (auto &kv : opt.env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    flagcx::paramsReload();
    flagcx::logReinit();
    flagcx::logSetRank(r);
    return fn(r, n, *mine) == 0 ? 0 : 1;
  });
  for (int r = 0; r < n; r++) out[static_cast<size_t>(r)].pid = pids[static_cast<size_t>(r)];
  if (!idOk)
    for (auto &o : out) o.code = 100;  // the ranks exit at once
  auto deadline = Clock::now() + std::chrono::seconds(opt.timeoutSec);
  int left = n;
  while (left > 0) {
    bool any = false;
    for (auto &o : out) {
      if (o.pid <= 0 || o.exited || o.signal || o.hung) continue;
      int st = 0;
      pid_t w = waitpid(o.pid, &st, WNOHANG);
      if (w == o.pid) {
        any = true;
        left--;
        if (WIFEXITED(st)) {
          o.exited = true;
          o.code = WEXITSTATUS(st);
        } else if (WIFSIGNALED(st)) {
          o.signal = WTERMSIG(st);
        }
      }
    }
    if (left == 0) break;
    if (Clock::now() > deadline) {
      for (auto &o : out) {
        if (o.pid <= 0 || o.exited || o.signal) continue;
        o.hung = true;
        kill(o.pid, SIGKILL);
        int st;
        waitpid(o.pid, &st, 0);
      }
      break;
    }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return out;
}

std::string describeFailures(const std::vector<RankOutcome> &out) {
  std::string s;
  for (size_t r = 0; r < out.size(); r++) {
    const auto &o = out[r];
    if (o.exited && o.code == 0) continue;
    s += "rank " + std::to_string(r) + ": ";
    if (o.hung) s += "hung (killed at the deadline); ";
    else if (o.signal) s += "killed by signal " + std::to_string(o.signal) + "; ";
    else s += "exit code " + std::to_string(o.code) + "; ";
  }
  return s;
}

std::vector<std::string> leftoverShm(const std::vector<RankOutcome> &out) {
  std::vector<std::string> found;
  DIR *d = opendir("/dev/shm");
  if (!d) return found;
  while (dirent *e = readdir(d)) {
    for (const auto &o : out) {
      std::string prefix = "flagcx-shm-" + std::to_string(o.pid) + "-";
      if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
        found.push_back(e->d_name);
        shm_unlink(("/" + std::string(e->d_name)).c_str());  // leave the machine clean
      }
    }
  }
  closedir(d);
  return found;
}

std::vector<std::string> leftoverShmNames() {
  std::vector<std::string> found;
  DIR *d = opendir("/dev/shm");
  if (!d) return found;
  while (dirent *e = readdir(d))
    if (strncmp(e->d_name, "flagcx-shm-", 11) == 0) found.push_back(e->d_name);
  closedir(d);
  return found;
}

std::unique_ptr<flagcx::Bootstrap> makeBootstrap(int rank, int nranks, const flagcxUniqueId &id) {
  flagcx::PeerInfo self;
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  self.hostHash = std::hash<std::string>()(host);
  self.pid = getpid();
  snprintf(self.host, sizeof self.host, "%s", host);
  std::unique_ptr<flagcx::Bootstrap> bs;
  if (flagcx::Bootstrap::create(id, rank, nranks, self, &bs) != flagcxSuccess) return nullptr;
  return bs;
}

std::unique_ptr<flagcx::Transport> makeTransport(const std::string &name) {
  if (name == "shm") return flagcx::makeShmTransport();
  if (name == "ib") {  // verbs on the software device (tests only)
    std::unique_ptr<flagcx::rdma::Device> dev;
    flagcx::rdma::openSoftDevice(&dev);
    return flagcx::makeIbTransport(std::move(dev));
  }
  return flagcx::makeSocketTransport();
}

flagcxResult_t waitAll(std::vector<Pending> &reqs, double timeoutSec) {
  auto deadline = Clock::now() + std::chrono::duration<double>(timeoutSec);
  flagcxResult_t first = flagcxSuccess;
  int spins = 0;
  for (;;) {
    bool all = true;
    for (auto &p : reqs) {
      if (p.done) continue;
      bool d = false;
      flagcxResult_t rc = p.conn->test(p.req, &d, &p.bytes);
      if (rc != flagcxSuccess) {
        p.done = true;
        p.rc = rc;
        if (first == flagcxSuccess) first = rc;
        continue;
      }
      if (d) p.done = true;
      else all = false;
    }
    if (all) return first;
    if (Clock::now() > deadline) {
      fprintf(stderr, "[rank %d] waitAll: requests still pending after %.1f s\n",
              flagcx::logRank(), timeoutSec);
      return flagcxInternalError;
    }
    if (++spins > 64) {
      spins = 0;
      sched_yield();
    }
  }
}

}  // namespace nettest
