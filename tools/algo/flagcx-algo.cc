// flagcx-algo: list, verify, show, draw, cost and scale the algorithm scripts.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/base.h"
#include "scale.h"
#include "sched/sched.h"

using namespace flagcx;

namespace {

const char *kUsage =
    "usage: flagcx-algo COMMAND [TARGET] [options]\n"
    "commands:\n"
    "  list                      every algorithm: op, name, requirements, shipped or user\n"
    "  verify TARGET -n LIST     simulate every rank of each script at each rank count\n"
    "                            (and at each ranks-per-host dividing it); exit 1 on an error\n"
    "  show TARGET -n N          the step table of every rank (or of --rank R)\n"
    "  dot TARGET -n N           Graphviz DOT of the whole schedule\n"
    "  cost TARGET -n N --bytes B  the alpha-beta estimate the tuner uses\n"
    "  scale -n LIST             one rank's init compile time, memory and peers at N ranks\n"
    "  help                      this help\n"
    "TARGET: OP/NAME (e.g. allreduce/ring) or a .lua file; verify and cost also take an\n"
    "OP (all its algorithms), verify also 'all'.  Scripts come from the shipped registry\n"
    "and FLAGCX_ALGO_PATH.\n"
    "options (each command takes those listed with it above or below):\n"
    "  -n, --nranks N|LIST       rank count; LIST: N,M,A-B (verify, scale); 1..1048576\n"
    "  --rank R                  show, scale: only rank R (0 <= R < N; scale's default 1)\n"
    "  --root R                  show, dot: root of a rooted op (0 <= R < N, default 0)\n"
    "  --ranks-per-host G        verify, show, dot, cost, scale: ranks per host, G >= 1\n"
    "                            dividing N (verify's default: every divisor; else 1)\n"
    "  -j, --jobs J              verify: scripts checked at once, J >= 1 (default: CPUs)\n"
    "  --bytes B                 cost: message size, K/M/G suffixes (binary), required\n"
    "  --alpha S                 cost: seconds per sequential step, >= 0 (default 4e-6)\n"
    "  --beta S                  cost: seconds per byte, >= 0 (default 5e-10)\n"
    "  --repeat K                scale: inits timed, the fastest kept, K >= 1 (default 3)\n"
    "  --csv                     scale: one CSV line per algorithm and per init\n"
    "  -h, --help                this help\n"
    "Exit status: 0 ok, 1 a script failed, 2 a bad command line.\n";

struct Args {
  std::string cmd, target;
  std::vector<int> nranks;
  int rank = -1, root = 0, rph = 0;  // rph 0: not given
  uint64_t bytes = 0;
  bool csv = false;
  int repeat = 3;
  int jobs = 0;  // verify: threads (0: one per CPU)
  double alpha = kDefaultAlpha, beta = kDefaultBeta;
  std::vector<std::string> given;  // options named on the command line
};

[[noreturn]] void die(const std::string &m) {
  std::fprintf(stderr, "flagcx-algo: %s\n", m.c_str());
  std::exit(2);
}

int toInt(const std::string &s, const char *what, long lo) {
  char *end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || v < lo || v > 1 << 20)
    die(std::string("bad ") + what + ": '" + s + "' (an integer from " + std::to_string(lo) +
        " to 1048576)");
  return static_cast<int>(v);
}

double toSeconds(const std::string &s, const char *what) {
  char *end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end || !std::isfinite(v) || v < 0)
    die(std::string("bad ") + what + ": '" + s + "' (seconds, >= 0)");
  return v;
}

std::vector<int> parseRanks(const std::string &s) {
  std::vector<int> v;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t dash = item.find('-');
    if (dash != std::string::npos) {
      int a = toInt(item.substr(0, dash), "--nranks", 1), b = toInt(item.substr(dash + 1), "--nranks", 1);
      if (a > b) die("bad --nranks range '" + item + "': " + std::to_string(a) + " > " + std::to_string(b));
      for (int i = a; i <= b; i++) v.push_back(i);
    } else {
      v.push_back(toInt(item, "--nranks", 1));
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return v;
}

// Which options each command reads; any other is an error, not ignored.
const std::map<std::string, std::vector<std::string>> kTakes = {
    {"list", {}},
    {"verify", {"--nranks", "--ranks-per-host", "--jobs"}},
    {"show", {"--nranks", "--rank", "--root", "--ranks-per-host"}},
    {"dot", {"--nranks", "--root", "--ranks-per-host"}},
    {"cost", {"--nranks", "--ranks-per-host", "--bytes", "--alpha", "--beta"}},
    {"scale", {"--nranks", "--rank", "--ranks-per-host", "--repeat", "--csv"}}};

bool knownCommand(const std::string &cmd) { return kTakes.count(cmd) != 0; }

bool takes(const std::string &cmd, const std::string &opt) {
  auto it = kTakes.find(cmd);
  return it != kTakes.end() && std::find(it->second.begin(), it->second.end(), opt) != it->second.end();
}

// The checks that need the whole command line: what the command reads, and
// ranks, roots and hosts that fit every rank count.
void validate(const Args &a) {
  bool oneN = a.cmd == "show" || a.cmd == "dot" || a.cmd == "cost";
  bool wantsTarget = a.cmd != "list" && a.cmd != "scale";
  for (const std::string &o : a.given)
    if (!takes(a.cmd, o)) die(a.cmd + " does not take " + o + " (flagcx-algo --help)");
  if (wantsTarget && a.target.empty()) die(a.cmd + " needs a TARGET: OP/NAME or a .lua file (flagcx-algo --help)");
  if (!wantsTarget && !a.target.empty()) die(a.cmd + " takes no TARGET (got '" + a.target + "')");
  if (a.cmd != "list" && a.nranks.empty()) die(a.cmd + " needs --nranks");
  if (oneN && a.nranks.size() != 1) die(a.cmd + " needs one --nranks N");
  if (a.cmd == "cost" && a.bytes == 0 && std::find(a.given.begin(), a.given.end(), "--bytes") == a.given.end())
    die("cost needs --bytes B (e.g. 1M)");
  for (int n : a.nranks) {
    std::string at = " at --nranks " + std::to_string(n);
    if (a.rank >= n) die("--rank " + std::to_string(a.rank) + " is out of range" + at + " (0.." + std::to_string(n - 1) + ")");
    if (a.root >= n) die("--root " + std::to_string(a.root) + " is out of range" + at + " (0.." + std::to_string(n - 1) + ")");
    if (a.rph && a.cmd != "verify" && n % a.rph != 0)
      die("--ranks-per-host " + std::to_string(a.rph) + " does not divide --nranks " + std::to_string(n));
  }
}

Args parse(int argc, char **argv) {
  Args a;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    std::exit(2);
  }
  a.cmd = argv[1];
  for (int i = 2; i < argc; i++) {
    std::string s = argv[i];
    auto val = [&]() -> std::string {
      size_t eq = s.find('=');
      if (eq != std::string::npos) return s.substr(eq + 1);
      if (i + 1 >= argc) die("missing value after " + s);
      return argv[++i];
    };
    auto is = [&](const char *opt, const char *alias = nullptr) {
      for (const char *o : {opt, alias})
        if (o && (s == o || s.rfind(std::string(o) + "=", 0) == 0)) {
          a.given.push_back(opt);
          return true;
        }
      return false;
    };
    if (is("--nranks", "-n")) a.nranks = parseRanks(val());
    else if (is("--rank")) a.rank = toInt(val(), "--rank", 0);
    else if (is("--root")) a.root = toInt(val(), "--root", 0);
    else if (is("--ranks-per-host")) a.rph = toInt(val(), "--ranks-per-host", 1);
    else if (is("--bytes")) {
      std::string v = val();
      if (!parseByteSize(v, &a.bytes)) die("bad --bytes: '" + v + "'");
    } else if (is("--alpha")) a.alpha = toSeconds(val(), "--alpha");
    else if (is("--beta")) a.beta = toSeconds(val(), "--beta");
    else if (s == "--csv") a.given.push_back(s), a.csv = true;
    else if (is("--repeat")) a.repeat = toInt(val(), "--repeat", 1);
    else if (is("--jobs", "-j")) a.jobs = toInt(val(), "--jobs", 1);
    else if (s == "-h" || s == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (!s.empty() && s[0] == '-') die("unknown option " + s + " (flagcx-algo --help)");
    else if (a.target.empty()) a.target = s;
    else die("unexpected argument " + s);
  }
  return a;
}

Registry loadRegistry() {
  Registry reg;
  std::string err;
  if (!Registry::load(&reg, &err)) die(err);
  return reg;
}

bool isFile(const std::string &t) {
  std::error_code ec;
  return t.size() > 4 && t.compare(t.size() - 4, 4, ".lua") == 0 &&
         std::filesystem::is_regular_file(t, ec);
}

struct Loaded {
  std::string label;  // op/name
  std::unique_ptr<Script> script;
};

// Resolves a target to scripts: a file, op/name, op, or all.
std::vector<Loaded> resolve(const std::string &target, bool allowMany) {
  std::vector<Loaded> out;
  std::string err;
  auto add = [&](const std::string &path) {
    Loaded l;
    if (!Script::load(path, &l.script, &err)) {
      std::fprintf(stderr, "%s\n", err.c_str());
      std::exit(1);
    }
    l.label = std::string(opName(l.script->op())) + "/" + l.script->name();
    out.push_back(std::move(l));
  };
  if (isFile(target)) {
    add(target);
    return out;
  }
  Registry reg = loadRegistry();
  OpKind op;
  if (allowMany && (target == "all" || opFromName(target, &op))) {
    for (const AlgoInfo &a : reg.all())
      if (target == "all" || a.op == op) add(a.path);
    return out;
  }
  const AlgoInfo *a = reg.lookup(target, &err);
  if (!a) die(err);
  add(a->path);
  return out;
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int g = 1; g <= n; g++)
    if (n % g == 0) d.push_back(g);
  return d;
}

int cmdList() {
  Registry reg = loadRegistry();
  std::printf("%-14s %-20s %-24s %-8s %s\n", "OP", "NAME", "REQUIRES", "SOURCE", "DESCRIPTION");
  std::string err;
  int rc = 0;
  for (const AlgoInfo &a : reg.all()) {
    std::unique_ptr<Script> s;
    std::string req = "?", summary;
    if (Script::load(a.path, &s, &err)) {
      req = s->requirements();
      summary = s->description().empty() ? "-" : s->description();
      if (s->foldOrder()) summary += " [fold_order]";
    } else {
      summary = "BROKEN: " + err;
      rc = 1;
    }
    std::printf("%-14s %-20s %-24s %-8s %s\n", opName(a.op), a.name.c_str(), req.c_str(),
                a.user ? "user" : "shipped", summary.c_str());
  }
  std::printf("data dir: %s\n", dataDir().c_str());
  return rc;
}

// One script at every --nranks (every ranks-per-host that divides it unless
// one is given): its report line(s), and whether it failed.
bool verifyOne(Loaded &l, const Args &a, std::string *report) {
  std::string okList, skipList;
  for (int n : a.nranks) {
    std::vector<int> groups = a.rph ? std::vector<int>{a.rph} : divisors(n);
    int verified = 0, firstChunks = -1;
    std::string lastSkip;
    for (int g : groups) {
      if (g > n) continue;
      std::string err, skipped;
      Topo t{n, g};
      // A script that never read s.ranks_per_host and whose chunks(n, g)
      // does not change builds the same schedule at every g: once is enough.
      int nchunks = 0;
      if (verified && !l.script->readsRanksPerHost() && l.script->supports(t, &skipped) &&
          l.script->chunks(t, &nchunks, &err) && nchunks == firstChunks)
        continue;
      if (!verifyScript(*l.script, t, &err, &skipped)) {
        *report = "FAIL " + l.label + "\n  " + err + "\n";
        return false;
      }
      if (skipped.empty()) {
        if (!verified++) l.script->chunks(t, &firstChunks, &err);
      } else {
        lastSkip = skipped;
      }
    }
    std::string ns = std::to_string(n);
    if (verified) okList += (okList.empty() ? "" : ",") + ns;
    else skipList += " " + ns + " (" + lastSkip + ")";
  }
  char head[64];
  std::snprintf(head, sizeof(head), "ok   %-32s nranks ", l.label.c_str());
  *report = head + (okList.empty() ? "-" : okList) +
            (skipList.empty() ? "" : "; not applicable at" + skipList) + "\n";
  return true;
}

// Scripts are independent (a Lua state each): verified on --jobs threads,
// reported in order.
int cmdVerify(const Args &a) {
  std::vector<Loaded> scripts = resolve(a.target, true);
  std::vector<std::string> reports(scripts.size());
  std::vector<char> ok(scripts.size(), 0);
  std::atomic<size_t> next{0};
  auto worker = [&]() {
    for (size_t i; (i = next.fetch_add(1)) < scripts.size();)
      ok[i] = verifyOne(scripts[i], a, &reports[i]);
  };
  int jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int j = 1; j < jobs && static_cast<size_t>(j) < scripts.size(); j++) pool.emplace_back(worker);
  worker();
  for (auto &t : pool) t.join();
  int failures = 0;
  for (size_t i = 0; i < scripts.size(); i++) {
    std::fputs(reports[i].c_str(), stdout);
    failures += !ok[i];
  }
  return failures ? 1 : 0;
}

Schedule compileOrDie(Script &s, const Args &a, int n) {
  int rph = a.rph ? a.rph : 1;
  Topo t{n, rph};
  std::string err, why;
  if (!s.supports(t, &why)) die(s.path() + " does not apply at nranks=" + std::to_string(n) +
                               " ranks_per_host=" + std::to_string(rph) + ": " + why);
  Schedule sch;
  if (!s.compileAll(t, a.root, &sch, &err)) {
    std::fprintf(stderr, "%s\n", err.c_str());
    std::exit(1);
  }
  return sch;
}

int cmdShow(const Args &a) {
  std::vector<Loaded> v = resolve(a.target, false);
  int n = a.nranks[0];
  Schedule s = compileOrDie(*v[0].script, a, n);
  std::string err;
  bool ok = verifySchedule(s, &err);
  std::printf("%s nranks=%d%s chunks=%d%s%s  (%s)\n", v[0].label.c_str(), n,
              opIsRooted(s.op) ? (" root=" + std::to_string(s.root)).c_str() : "", s.chunks,
              s.scratchCopies > 1 ? (" scratch_copies=" + std::to_string(s.scratchCopies)).c_str() : "",
              s.foldOrder ? " fold_order" : "", ok ? "verified" : err.c_str());
  for (int r = 0; r < n; r++) {
    if (a.rank >= 0 && r != a.rank) continue;
    const RankSchedule &rs = s.ranks[r];
    std::printf("\nrank %d: %zu steps in %d stages\n", r, rs.steps.size(), rs.nstages);
    std::printf("  %5s %5s  %-12s %-12s %-12s %s\n", "stage", "step", "kind", "src", "dst", "peer");
    for (size_t i = 0; i < rs.steps.size(); i++) {
      const Step &x = rs.steps[i];
      std::string src = stepReadsSrc(x.kind) ? refText(x.src) : "-";
      if (const std::vector<ChunkRef> *f = foldSources(rs, x)) {
        src.clear();
        for (const ChunkRef &c : *f) {
          if (!src.empty()) src += ',';
          src += refText(c);
        }
      }
      bool hasDst = x.kind != StepKind::Send;
      std::printf("  %5d %5zu  %-12s %-12s %-12s %s\n", x.stage, i, stepKindName(x.kind),
                  src.c_str(), hasDst ? refText(x.dst).c_str() : "-",
                  x.peer >= 0 ? std::to_string(x.peer).c_str() : "-");
    }
  }
  return ok ? 0 : 1;
}

int cmdDot(const Args &a) {
  std::vector<Loaded> v = resolve(a.target, false);
  int n = a.nranks[0];
  Schedule s = compileOrDie(*v[0].script, a, n);
  std::printf("digraph \"%s\" {\n", v[0].label.c_str());
  std::printf("  label=\"%s nranks=%d%s\"; labelloc=t; rankdir=TB; newrank=true; splines=line;\n",
              v[0].label.c_str(), n,
              opIsRooted(s.op) ? (" root=" + std::to_string(s.root)).c_str() : "");
  std::printf("  node [shape=box, fontsize=10, style=rounded]; edge [fontsize=9];\n");
  int maxStages = 0;
  for (int r = 0; r < n; r++) maxStages = std::max(maxStages, s.ranks[r].nstages);
  // One cluster (lane) per rank; one node per stage listing its steps.
  for (int r = 0; r < n; r++) {
    const RankSchedule &rs = s.ranks[r];
    std::printf("  subgraph cluster_rank%d {\n    label=\"rank %d\";\n", r, r);
    std::printf("    r%d_start [label=\"rank %d\", shape=plaintext];\n", r, r);
    std::string prev = "r" + std::to_string(r) + "_start";
    for (int st = 0; st < rs.nstages; st++) {
      std::string label = "stage " + std::to_string(st);
      for (const Step &x : rs.steps)
        if (x.stage == st) label += "\\n" + stepText(x, &rs);
      std::string node = "r" + std::to_string(r) + "_s" + std::to_string(st);
      std::printf("    %s [label=\"%s\"];\n", node.c_str(), label.c_str());
      std::printf("    %s -> %s [style=dotted, arrowhead=none];\n", prev.c_str(), node.c_str());
      prev = node;
    }
    std::printf("  }\n");
  }
  // Message arrows: the k-th send a->b meets the k-th receive at b from a.
  std::map<std::pair<int, int>, std::vector<const Step *>> sends, recvs;
  for (int r = 0; r < n; r++)
    for (const Step &x : s.ranks[r].steps) {
      if (x.kind == StepKind::Send) sends[{r, x.peer}].push_back(&x);
      else if (x.kind == StepKind::Recv || x.kind == StepKind::RecvReduce) recvs[{x.peer, r}].push_back(&x);
    }
  for (auto &[pair, list] : sends) {
    auto &rl = recvs[pair];
    for (size_t k = 0; k < list.size() && k < rl.size(); k++) {
      std::printf("  r%d_s%d -> r%d_s%d [label=\"%s\", color=blue, constraint=false];\n", pair.first,
                  list[k]->stage, pair.second, rl[k]->stage, refText(list[k]->src).c_str());
    }
  }
  std::printf("}\n");
  (void)maxStages;
  return 0;
}

int cmdCost(const Args &a) {
  std::vector<Loaded> v = resolve(a.target, true);
  int n = a.nranks[0];
  Topo t{n, a.rph ? a.rph : 1};
  std::printf("nranks=%d ranks_per_host=%d bytes=%llu alpha=%gs beta=%gs/B\n", n, t.ranksPerHost,
              static_cast<unsigned long long>(a.bytes), a.alpha, a.beta);
  std::printf("%-32s %8s %10s %14s\n", "ALGORITHM", "STEPS", "BYTES/MSG", "ESTIMATE(us)");
  int rc = 0;
  for (Loaded &l : v) {
    std::string err, why;
    if (!l.script->supports(t, &why)) {
      std::printf("%-32s %s\n", l.label.c_str(), ("not applicable: " + why).c_str());
      continue;
    }
    double steps, frac;
    if (!l.script->cost(t, &steps, &frac, &err)) {
      std::printf("%-32s error: %s\n", l.label.c_str(), err.c_str());
      rc = 1;
      continue;
    }
    double sec = alphaBetaSeconds(steps, frac, messageBytes(l.script->op(), a.bytes, n), a.alpha, a.beta);
    std::printf("%-32s %8.2f %10.3f %14.2f\n", l.label.c_str(), steps, frac, sec * 1e6);
  }
  return rc;
}

}  // namespace

int main(int argc, char **argv) {
  Args a = parse(argc, argv);
  if (a.cmd == "help" || a.cmd == "-h" || a.cmd == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!knownCommand(a.cmd)) {
    std::fprintf(stderr, "flagcx-algo: unknown command '%s'\n%s", a.cmd.c_str(), kUsage);
    return 2;
  }
  validate(a);
  if (a.cmd == "list") return cmdList();
  if (a.cmd == "verify") return cmdVerify(a);
  if (a.cmd == "show") return cmdShow(a);
  if (a.cmd == "dot") return cmdDot(a);
  if (a.cmd == "cost") return cmdCost(a);
  return flagcx_algo::cmdScale(a.nranks, a.rank, a.rph, a.repeat, a.csv);
}
