// flagcx-algo: list, verify, show, draw and cost the algorithm scripts.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/params.h"
#include "sched/ir_names.h"
#include "sched/registry.h"
#include "sched/script.h"
#include "sched/tuner.h"
#include "sched/verify.h"

using namespace flagcx;

namespace {

const char *kUsage =
    "usage: flagcx-algo COMMAND [options]\n"
    "  list                                  algorithms, ops and requirements\n"
    "  verify FILE|OP/NAME|OP|all --nranks N[,M|A-B...] [--ranks-per-host G]\n"
    "                                        simulate every rank (every root); exit 1 on error\n"
    "  show OP/NAME|FILE --nranks N [--rank R] [--root R] [--ranks-per-host G]\n"
    "                                        the step table of one rank (or all)\n"
    "  dot OP/NAME|FILE --nranks N [--root R] [--ranks-per-host G]\n"
    "                                        Graphviz DOT of the whole schedule\n"
    "  cost OP/NAME|OP --nranks N --bytes B [--ranks-per-host G] [--alpha S] [--beta S/B]\n"
    "                                        the alpha-beta estimate the tuner uses\n"
    "Scripts come from the shipped registry and FLAGCX_ALGO_PATH; a FILE is any .lua path.\n";

struct Args {
  std::string cmd, target;
  std::vector<int> nranks;
  int rank = -1, root = 0, rph = 0;  // rph 0: not given
  bool rootGiven = false;
  uint64_t bytes = 0;
  bool bytesGiven = false;
  double alpha = kDefaultAlpha, beta = kDefaultBeta;
};

[[noreturn]] void die(const std::string &m) {
  std::fprintf(stderr, "flagcx-algo: %s\n", m.c_str());
  std::exit(2);
}

int toInt(const std::string &s, const char *what) {
  char *end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || v < 0 || v > 1 << 20) die(std::string("bad ") + what + ": '" + s + "'");
  return static_cast<int>(v);
}

std::vector<int> parseRanks(const std::string &s) {
  std::vector<int> v;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t dash = item.find('-');
    if (dash != std::string::npos) {
      int a = toInt(item.substr(0, dash), "--nranks"), b = toInt(item.substr(dash + 1), "--nranks");
      for (int i = a; i <= b; i++) v.push_back(i);
    } else {
      v.push_back(toInt(item, "--nranks"));
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  for (int n : v)
    if (n < 1) die("--nranks must be at least 1");
  return v;
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
    auto is = [&](const char *opt) {
      return s == opt || s.rfind(std::string(opt) + "=", 0) == 0;
    };
    if (is("--nranks") || is("-n")) a.nranks = parseRanks(val());
    else if (is("--rank")) a.rank = toInt(val(), "--rank");
    else if (is("--root")) a.root = toInt(val(), "--root"), a.rootGiven = true;
    else if (is("--ranks-per-host")) a.rph = toInt(val(), "--ranks-per-host");
    else if (is("--bytes")) {
      std::string v = val();
      if (!parseByteSize(v, &a.bytes)) die("bad --bytes: '" + v + "'");
      a.bytesGiven = true;
    } else if (is("--alpha")) a.alpha = std::atof(val().c_str());
    else if (is("--beta")) a.beta = std::atof(val().c_str());
    else if (s == "-h" || s == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (!s.empty() && s[0] == '-') die("unknown option " + s);
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
  if (target.empty()) die("name a script: OP/NAME or a .lua file");
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
  std::printf("%-14s %-20s %-24s %-8s %s\n", "OP", "NAME", "REQUIRES", "SOURCE", "SUMMARY");
  std::string err;
  int rc = 0;
  for (const AlgoInfo &a : reg.all()) {
    std::unique_ptr<Script> s;
    std::string req = "?", summary = a.summary;
    if (Script::load(a.path, &s, &err)) {
      req = s->requirements();
      if (summary.empty()) summary = s->description();
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

int cmdVerify(const Args &a) {
  if (a.nranks.empty()) die("verify needs --nranks N[,M...]");
  std::vector<Loaded> scripts = resolve(a.target, true);
  int failures = 0;
  for (Loaded &l : scripts) {
    std::string okList, skipList;
    bool failed = false;
    for (int n : a.nranks) {
      std::vector<int> groups = a.rph ? std::vector<int>{a.rph} : divisors(n);
      int verified = 0;
      std::string lastSkip;
      for (int g : groups) {
        if (g > n) continue;
        std::string err, skipped;
        if (!verifyScript(*l.script, Topo{n, g}, &err, &skipped)) {
          std::printf("FAIL %s\n  %s\n", l.label.c_str(), err.c_str());
          failed = true;
          break;
        }
        if (skipped.empty()) verified++;
        else lastSkip = skipped;
      }
      if (failed) break;
      std::string ns = std::to_string(n);
      if (verified) okList += (okList.empty() ? "" : ",") + ns;
      else skipList += " " + ns + " (" + lastSkip + ")";
    }
    if (failed) {
      failures++;
      continue;
    }
    std::printf("ok   %-32s nranks %s%s%s\n", l.label.c_str(), okList.empty() ? "-" : okList.c_str(),
                skipList.empty() ? "" : "; not applicable at", skipList.c_str());
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
  if (a.nranks.size() != 1) die("show needs one --nranks N");
  std::vector<Loaded> v = resolve(a.target, false);
  int n = a.nranks[0];
  Schedule s = compileOrDie(*v[0].script, a, n);
  std::string err;
  bool ok = verifySchedule(s, &err);
  std::printf("%s nranks=%d%s chunks=%d  (%s)\n", v[0].label.c_str(), n,
              opIsRooted(s.op) ? (" root=" + std::to_string(s.root)).c_str() : "", s.chunks,
              ok ? "verified" : err.c_str());
  for (int r = 0; r < n; r++) {
    if (a.rank >= 0 && r != a.rank) continue;
    const RankSchedule &rs = s.ranks[r];
    std::printf("\nrank %d: %zu steps in %d stages\n", r, rs.steps.size(), rs.nstages);
    std::printf("  %5s %5s  %-12s %-12s %-12s %s\n", "stage", "step", "kind", "src", "dst", "peer");
    for (size_t i = 0; i < rs.steps.size(); i++) {
      const Step &x = rs.steps[i];
      bool hasSrc = x.kind == StepKind::Send || x.kind == StepKind::Copy || x.kind == StepKind::Reduce;
      bool hasDst = x.kind != StepKind::Send;
      std::printf("  %5d %5zu  %-12s %-12s %-12s %s\n", x.stage, i, stepKindName(x.kind),
                  hasSrc ? refText(x.src).c_str() : "-", hasDst ? refText(x.dst).c_str() : "-",
                  x.peer >= 0 ? std::to_string(x.peer).c_str() : "-");
    }
  }
  return ok ? 0 : 1;
}

int cmdDot(const Args &a) {
  if (a.nranks.size() != 1) die("dot needs one --nranks N");
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
        if (x.stage == st) label += "\\n" + stepText(x);
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
  if (a.nranks.size() != 1) die("cost needs one --nranks N");
  if (!a.bytesGiven) die("cost needs --bytes B (e.g. 1M)");
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
  if (a.cmd == "list") return cmdList();
  if (a.cmd == "verify") return cmdVerify(a);
  if (a.cmd == "show") return cmdShow(a);
  if (a.cmd == "dot") return cmdDot(a);
  if (a.cmd == "cost") return cmdCost(a);
  if (a.cmd == "help" || a.cmd == "-h" || a.cmd == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "flagcx-algo: unknown command '%s'\n%s", a.cmd.c_str(), kUsage);
  return 2;
}
