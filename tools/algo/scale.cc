// flagcx-algo scale: what communicator init costs one rank at N ranks.
//
// Init (AlgoSet::create) reads the registry and tuning rules, decides an
// algorithm per (op, dtype, size bucket), and compiles each algorithm the
// tuner may pick for this rank and the deterministic mode's ordered ones
// (rooted ops at root 0; other roots on first use).  This runs exactly that, in this process, for a rank of N simulated
// ranks, and measures it:
//   wall, CPU   steady clock and getrusage around AlgoSet::create
//   peak        VmHWM after minus VmRSS before (the high-water mark is reset
//               first through /proc/self/clear_refs)
//   kept        the compiled step lists and Lua states the AlgoSet keeps
//   peers       the peers those schedules name (AlgoSet::peers): what the
//               communicator must connect to at init, with and without the
//               all-to-all ops (whose schedules name every rank)
// and, per shipped algorithm (whether init compiles it or not), the
// compile of this rank alone: steps, stages, bytes, time, peers named.
// Times are the best of --repeat runs (default 3): the machine may be busy.
#include "scale.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "base/base.h"
#include "sched/sched.h"

using namespace flagcx;

namespace flagcx_algo {

namespace {

double cpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// A "VmRSS:" style field of /proc/self/status, in bytes.
size_t statusBytes(const char *field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  size_t len = std::strlen(field);
  while (std::getline(f, line))
    if (line.compare(0, len, field) == 0) return std::stoull(line.substr(len)) * 1024;
  return 0;
}

void resetPeak() { std::ofstream("/proc/self/clear_refs") << "5"; }

struct Clock {
  std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
  double cpu = cpuSeconds();
  double wallMs() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall).count();
  }
  double cpuMs() const { return (cpuSeconds() - cpu) * 1e3; }
};

size_t peersOf(const Schedule &s) {
  std::vector<int> p;
  for (const Step &x : s.ranks[0].steps)
    if (x.peer >= 0) p.push_back(x.peer);
  std::sort(p.begin(), p.end());
  return std::unique(p.begin(), p.end()) - p.begin();
}

int algorithms(const AlgoSet *set, int n, int rank, int rph, int repeat, bool csv) {
  Registry reg;
  std::string err;
  if (!Registry::load(&reg, &err)) {
    std::fprintf(stderr, "%s\n", err.c_str());
    return 1;
  }
  if (!csv)
    std::printf("  %-32s %6s %8s %7s %9s %11s %6s\n", "ALGORITHM (* compiled at init)", "", "STEPS",
                "STAGES", "KB", "COMPILE_MS", "PEERS");
  int rc = 0;
  for (const AlgoInfo &a : reg.all()) {
    std::unique_ptr<Script> s;
    std::string label = std::string(opName(a.op)) + "/" + a.name, why;
    if (!Script::load(a.path, &s, &err)) {
      std::fprintf(stderr, "%s\n", err.c_str());
      rc = 1;
      continue;
    }
    Topo t{n, rph};
    if (!s->supports(t, &why)) {
      if (!csv) std::printf("  %-32s not applicable: %s\n", label.c_str(), why.c_str());
      continue;
    }
    Schedule sch;
    double ms = 0;
    bool ok = true;
    for (int k = 0; ok && k < std::max(repeat, 1); k++) {
      Clock c;
      ok = s->compileRank(t, rank, 0, &sch, &err);
      ms = k ? std::min(ms, c.wallMs()) : c.wallMs();
    }
    if (!ok) {
      std::printf("  %-32s error: %s\n", label.c_str(), err.c_str());
      rc = 1;
      continue;
    }
    const RankSchedule &rs = sch.ranks[0];
    bool picked = set && set->find(a.op, a.name, 0) != nullptr;
    double kb = rs.steps.capacity() * sizeof(Step) / 1024.0;
    if (csv)
      std::printf("algo,%d,%s,%d,%zu,%d,%.1f,%.3f,%zu\n", n, label.c_str(), picked ? 1 : 0,
                  rs.steps.size(), rs.nstages, kb, ms, peersOf(sch));
    else
      std::printf("  %-32s %6s %8zu %7d %9.1f %11.3f %6zu\n", label.c_str(), picked ? "*" : "",
                  rs.steps.size(), rs.nstages, kb, ms, peersOf(sch));
  }
  return rc;
}

}  // namespace

int cmdScale(const std::vector<int> &nranks, int rank, int ranksPerHost, int repeat, bool csv) {
  int rc = 0;
  if (csv)
    std::printf("kind,nranks,name,picked,steps,stages,kb,ms,peers,cpu_ms,peak_mb,kept_mb,"
                "peers_no_alltoall,repeat\n");
  for (int n : nranks) {
    // Rank 1 by default: not the root of rooted ops at root 0 (--rank 0 is).
    int r = rank >= 0 ? rank : n > 1 ? 1 : 0;
    int rph = ranksPerHost > 0 ? ranksPerHost : 1;
    if (r >= n || n % rph != 0) {
      std::fprintf(stderr, "flagcx-algo: scale: --rank %d / --ranks-per-host %d do not fit %d ranks\n",
                   r, rph, n);
      return 2;
    }
    // Init `repeat` times: the fastest wall and CPU time (the machine may be
    // busy), the largest peak.
    std::unique_ptr<AlgoSet> set;
    double wallMs = 0, cpuMs = 0, peakMb = 0;
    for (int k = 0; k < std::max(repeat, 1); k++) {
      set.reset();
      size_t rss0 = statusBytes("VmRSS:");
      resetPeak();
      Clock c;
      flagcxResult_t res = AlgoSet::create(r, n, rph, &set);
      double w = c.wallMs(), u = c.cpuMs();
      size_t hwm = statusBytes("VmHWM:");
      double p = hwm > rss0 ? (hwm - rss0) / 1048576.0 : 0;
      wallMs = k ? std::min(wallMs, w) : w;
      cpuMs = k ? std::min(cpuMs, u) : u;
      peakMb = std::max(peakMb, p);
      if (res != flagcxSuccess) {
        std::fprintf(stderr, "flagcx-algo: scale: init failed at nranks=%d (see the log)\n", n);
        rc = 1;
        break;
      }
    }
    AlgoSet::Footprint f = set ? set->footprint() : AlgoSet::Footprint{};
    std::vector<int> all = set ? set->peers() : std::vector<int>{};
    std::vector<int> most = set ? set->schedulePeers([](OpKind op) {
      return op != OpKind::AlltoAll && op != OpKind::AlltoAllv;
    }) : std::vector<int>{};
    double keptMb = (f.scheduleBytes + f.luaBytes) / 1048576.0;
    if (csv) {
      std::printf("init,%d,AlgoSet::create,%d,%zu,,,%.3f,%zu,%.3f,%.2f,%.2f,%zu,%d\n", n,
                  f.algorithms, f.steps, wallMs, all.size(), cpuMs, peakMb, keptMb, most.size(),
                  std::max(repeat, 1));
    } else {
      std::printf("nranks=%d ranks_per_host=%d rank=%d\n", n, rph, r);
      std::printf("  init (AlgoSet::create, %d algorithms, best of %d): %.1f ms wall, %.1f ms CPU, "
                  "peak +%.1f MB, kept %.2f MB (%zu steps), peers %zu (%zu without "
                  "alltoall/alltoallv)\n",
                  f.algorithms, std::max(repeat, 1), wallMs, cpuMs, peakMb, keptMb, f.steps,
                  all.size(), most.size());
    }
    if (algorithms(set.get(), n, r, rph, repeat, csv) != 0) rc = 1;
    std::fflush(stdout);
  }
  return rc;
}

}  // namespace flagcx_algo
