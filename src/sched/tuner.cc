// Tuning rules (YAML), the Lua policy, FLAGCX_ALGO and the alpha-beta model.
#include "sched/tuner.h"

#include <cctype>
#include <filesystem>
#include <map>
#include <sstream>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
}

#include "base/base.h"
#include "sched/yaml_ops.h"

namespace flagcx {

bool parseByteSize(const std::string &s0, uint64_t *out) {
  std::string s;
  for (char c : s0)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  if (s.empty()) return false;
  if (s == "inf" || s == "infinity" || s == "max") {
    *out = UINT64_MAX;
    return true;
  }
  size_t i = 0;
  uint64_t v = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + (s[i++] - '0');
  }
  if (i == 0) return false;
  std::string suf = s.substr(i);
  for (auto &c : suf) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suf.size() >= 2 && suf.compare(suf.size() - 2, 2, "IB") == 0) suf.resize(suf.size() - 2);
  else if (!suf.empty() && suf.back() == 'B') suf.pop_back();
  int shift = 0;
  if (suf.empty()) shift = 0;
  else if (suf == "K") shift = 10;
  else if (suf == "M") shift = 20;
  else if (suf == "G") shift = 30;
  else if (suf == "T") shift = 40;
  else return false;
  if (shift && v > (UINT64_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

namespace {
// One key of a rule; errors name the file, line, key and value.
bool parseRuleKey(const std::string &name, const std::string &key,
                  const std::pair<YAML::Node, YAML::Node> &f, TuneRule *rule, std::string *err) {
  std::string val = f.second.IsScalar() ? f.second.as<std::string>() : "";
  auto bad = [&](const char *what) {
    *err = yamlAt(name, f.second.Mark()) + key + ": " + what + ", got '" + val + "'";
    return false;
  };
  auto toInt = [&](int *dst) {
    try {
      *dst = f.second.as<int>();
    } catch (const YAML::Exception &) {
      return bad("expected an integer");
    }
    if (*dst < 1) return bad("expected an integer >= 1");
    return true;
  };
  if (key == "algo") {
    if (val.empty()) return bad("expected an algorithm name");
    rule->algo = val;
    return true;
  }
  if (key == "min_bytes" || key == "max_bytes") {
    uint64_t v;
    if (!parseByteSize(val, &v)) return bad("expected a size such as 4096, 64K or 1M");
    (key == "min_bytes" ? rule->minBytes : rule->maxBytes) = v;
    return true;
  }
  static const struct {
    const char *key;
    int TuneRule::*field;
  } ints[] = {{"min_ranks", &TuneRule::minRanks},
              {"max_ranks", &TuneRule::maxRanks},
              {"min_ranks_per_host", &TuneRule::minRanksPerHost},
              {"max_ranks_per_host", &TuneRule::maxRanksPerHost},
              {"min_hosts", &TuneRule::minHosts},
              {"max_hosts", &TuneRule::maxHosts}};
  for (const auto &i : ints)
    if (key == i.key) return toInt(&(rule->*i.field));
  *err = yamlAt(name, f.first.Mark()) + "unknown key '" + key +
         "' (algo, min_bytes, max_bytes, min_ranks, max_ranks, min_ranks_per_host, "
         "max_ranks_per_host, min_hosts, max_hosts)";
  return false;
}
}  // namespace

bool parseTuningText(const std::string &name, const std::string &text, TuningRules *out,
                     std::string *err) {
  TuningRules r;
  r.file = name;
  YAML::Node root;
  if (!yamlLoad(name, &text, "", &root, err)) return false;
  auto entry = [&](OpKind op, const std::string &, const YAML::Node &n, std::string *e) {
    if (!n.IsMap()) {
      *e = yamlAt(name, n.Mark()) + "a rule is a map such as {max_bytes: 64K, algo: ring}";
      return false;
    }
    TuneRule rule;
    rule.line = n.Mark().line + 1;
    for (const auto &f : n)
      if (!parseRuleKey(name, f.first.as<std::string>(), f, &rule, e)) return false;
    if (rule.algo.empty()) {
      *e = yamlAt(name, n.Mark()) + "rule without 'algo'";
      return false;
    }
    r.byOp[static_cast<size_t>(op)].push_back(rule);
    return true;
  };
  if (!forEachOpEntry(name, root, "rules", entry, err)) return false;
  *out = std::move(r);
  return true;
}

bool parseTuningRules(const std::string &file, TuningRules *out, std::string *err) {
  std::string text;
  return readConfigFile(file, &text, err) && parseTuningText(file, text, out, err);
}

bool parseForcedAlgos(const std::string &spec,
                      std::array<std::string, static_cast<size_t>(OpKind::Count)> *forced,
                      std::string *err) {
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t colon = item.find(':');
    OpKind op;
    if (colon == std::string::npos || colon + 1 == item.size()) {
      *err = "FLAGCX_ALGO: '" + item + "' should read op:algorithm, e.g. allreduce:ring";
      return false;
    }
    if (!opFromName(item.substr(0, colon), &op)) {
      *err = "FLAGCX_ALGO: unknown op '" + item.substr(0, colon) + "' in '" + item + "'";
      return false;
    }
    (*forced)[static_cast<size_t>(op)] = item.substr(colon + 1);
  }
  return true;
}

double alphaBetaSeconds(double steps, double bytesFraction, double msgBytes, double alpha,
                        double beta) {
  return steps * alpha + bytesFraction * msgBytes * beta;
}

double messageBytes(OpKind op, uint64_t bytes, int nranks) {
  switch (op) {
    case OpKind::AllGather:
    case OpKind::Gather:
    case OpKind::ReduceScatter:
    case OpKind::Scatter:
    case OpKind::AlltoAll: return static_cast<double>(bytes) * nranks;
    default: return static_cast<double>(bytes);
  }
}

uint64_t bucketLowBytes(int b) { return b == 0 ? 0 : uint64_t(1) << (b - 1); }

namespace {

struct Candidate {
  const AlgoInfo *info;
  Script *script;
  bool ok;
  std::string why;
  double steps = 0, bytes = 0;
};

class Decider {
 public:
  Decider(const Registry &reg, ScriptCache &cache, const Topo &t) : reg_(reg), cache_(cache), t_(t) {}

  // The candidate entry for an algorithm (loads and asks the script once).
  Candidate *get(const AlgoInfo *a, std::string *err) {
    auto it = cands_.find(a);
    if (it != cands_.end()) return &it->second;
    Script *s = cache_.get(*a, err);
    if (!s) return nullptr;
    Candidate c{a, s, false, ""};
    c.ok = s->supports(t_, &c.why);
    if (!c.ok && c.why.rfind(a->path, 0) == 0) {  // a Lua error inside requires()
      *err = c.why;
      return nullptr;
    }
    if (c.ok && !s->cost(t_, &c.steps, &c.bytes, err)) return nullptr;
    return &cands_.emplace(a, std::move(c)).first->second;
  }

  const AlgoInfo *cheapest(OpKind op, uint64_t bytes, std::string *err, bool *failed) {
    const AlgoInfo *best = nullptr;
    double bestT = 0;
    for (const AlgoInfo *a : reg_.forOp(op)) {
      Candidate *c = get(a, err);
      if (!c) {
        *failed = true;
        return nullptr;
      }
      // fold_order scripts are the deterministic mode's (AlgoSet::selectOrdered).
      if (!c->ok || c->script->foldOrder()) continue;
      double tt = alphaBetaSeconds(c->steps, c->bytes, messageBytes(op, bytes, t_.nranks));
      if (!best || tt < bestT) {
        best = a;
        bestT = tt;
      }
    }
    return best;
  }

 private:
  const Registry &reg_;
  ScriptCache &cache_;
  Topo t_;
  std::map<const AlgoInfo *, Candidate> cands_;
};

bool ruleMatches(const TuneRule &r, uint64_t bytes, const Topo &t) {
  return bytes >= r.minBytes && bytes < r.maxBytes && t.nranks >= r.minRanks &&
         t.nranks <= r.maxRanks && t.ranksPerHost >= r.minRanksPerHost &&
         t.ranksPerHost <= r.maxRanksPerHost && t.nranks / t.ranksPerHost >= r.minHosts &&
         t.nranks / t.ranksPerHost <= r.maxHosts;
}

using OpTable = std::array<std::array<const AlgoInfo *, kSizeBuckets>, flagcxNumTypes>;
using BucketPicks = std::array<const AlgoInfo *, kSizeBuckets>;

// FLAGCX_ALGO named `name` for op: every dtype and size runs it, or the
// decision fails (unknown, or it cannot run on this topology).
bool forceAlgo(const Registry &reg, Decider &dec, const Topo &t, OpKind op, const std::string &name,
               OpTable *table, std::string *err) {
  const AlgoInfo *a = reg.find(op, name);
  if (!a) {
    std::string names;
    for (const AlgoInfo *b : reg.forOp(op)) names += (names.empty() ? "" : ", ") + b->name;
    *err = "FLAGCX_ALGO: unknown algorithm '" + name + "' for " + opName(op) + " (known: " +
           names + ")";
    return false;
  }
  Candidate *c = dec.get(a, err);
  if (!c) return false;
  if (!c->ok) {
    *err = std::string("FLAGCX_ALGO: ") + opName(op) + ":" + a->name + " cannot run on " +
           std::to_string(t.nranks) + " ranks (" + std::to_string(t.ranksPerHost) +
           " per host): " + c->why;
    return false;
  }
  for (auto &row : *table) row.fill(a);
  return true;
}

// Each size bucket's pick for op: the first matching rule whose algorithm
// can run, else the cost model's cheapest.  Rules and the cost model do not
// depend on the dtype.
bool pickByRules(const Registry &reg, Decider &dec, const TuningRules &rules, const Topo &t,
                 OpKind op, BucketPicks *byBucket, std::string *err) {
  const size_t o = static_cast<size_t>(op);
  for (int b = 0; b < kSizeBuckets; b++) {
    uint64_t bytes = bucketLowBytes(b);
    const AlgoInfo *pick = nullptr;
    for (const TuneRule &r : rules.byOp[o]) {
      if (!ruleMatches(r, bytes, t)) continue;
      const AlgoInfo *a = reg.find(op, r.algo);
      if (!a) {
        *err = rules.file + ":" + std::to_string(r.line) + ": unknown algorithm '" + r.algo +
               "' for " + opName(op);
        return false;
      }
      Candidate *c = dec.get(a, err);
      if (!c) return false;
      if (c->ok) {
        pick = a;
        break;
      }
    }
    if (!pick) {
      bool failed = false;
      pick = dec.cheapest(op, bytes, err, &failed);
      if (failed) return false;
    }
    (*byBucket)[static_cast<size_t>(b)] = pick;
  }
  return true;
}

// FLAGCX_TUNING_POLICY: a Lua file returning function(op, bytes, dtype,
// nranks, ranks_per_host), which names an algorithm or returns nil (the
// rules decide).
struct Policy {
  std::string file;
  std::unique_ptr<Sandbox> box;
  int ref = LUA_NOREF;

  // Runs the file (none set: nothing to do).
  bool load(std::string *err) {
    file = paramStr(Param::TUNING_POLICY);
    if (file.empty()) return true;
    std::string text;
    if (!readConfigFile(file, &text, err)) {
      *err = "FLAGCX_TUNING_POLICY: " + *err;
      return false;
    }
    if (!Sandbox::create(file, ScriptLimits{}, &box, err)) return false;
    if (!box->run(text, 1, err)) return false;
    if (!lua_isfunction(box->L(), -1)) {
      *err = file + ": the policy must return a function(op, bytes, dtype, nranks, ranks_per_host)";
      return false;
    }
    ref = luaL_ref(box->L(), LUA_REGISTRYINDEX);
    return true;
  }

  // The policy's algorithm for one (op, dtype, bucket); *out stays null
  // when it returns nil.
  bool ask(const Registry &reg, Decider &dec, const Topo &t, OpKind op, int d, int b,
           const AlgoInfo **out, std::string *err) {
    lua_State *L = box->L();
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    lua_pushstring(L, opName(op));
    lua_pushnumber(L, static_cast<double>(bucketLowBytes(b)));
    lua_pushstring(L, dtypeName(static_cast<flagcxDataType_t>(d)));
    lua_pushinteger(L, t.nranks);
    lua_pushinteger(L, t.ranksPerHost);
    if (!box->pcall(5, 1, err)) return false;
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      return true;
    }
    if (lua_type(L, -1) != LUA_TSTRING) {
      *err = file + ": the policy must return an algorithm name or nil, got " +
             lua_typename(L, lua_type(L, -1)) + " for " + opName(op);
      return false;
    }
    std::string name = lua_tostring(L, -1);
    lua_pop(L, 1);
    const AlgoInfo *a = reg.find(op, name);
    if (!a) {
      *err = file + ": the policy chose unknown algorithm '" + name + "' for " + opName(op);
      return false;
    }
    Candidate *c = dec.get(a, err);
    if (!c) return false;
    if (!c->ok) {
      *err = file + ": the policy chose " + opName(op) + "/" + name + ", which cannot run on " +
             std::to_string(t.nranks) + " ranks: " + c->why;
      return false;
    }
    *out = a;
    return true;
  }
};

}  // namespace

bool decideAll(const Registry &reg, ScriptCache &scripts, const Topo &t, DecisionTable *out,
               std::string *err) {
  for (auto &a : *out)
    for (auto &b : a) b.fill(nullptr);
  Decider dec(reg, scripts, t);

  std::array<std::string, static_cast<size_t>(OpKind::Count)> forced;
  if (!parseForcedAlgos(paramStr(Param::ALGO), &forced, err)) return false;

  TuningRules rules;
  std::string rulesFile = paramStr(Param::TUNING_FILE);
  if (rulesFile.empty()) rulesFile = (std::filesystem::path(dataDir()) / "config" / "tuning.yaml").string();
  if (!parseTuningRules(rulesFile, &rules, err)) {
    if (paramIsSet(Param::TUNING_FILE)) *err = "FLAGCX_TUNING_FILE: " + *err;
    return false;
  }
  Policy policy;
  if (!policy.load(err)) return false;

  for (size_t o = 0; o < static_cast<size_t>(OpKind::Count); o++) {
    OpKind op = static_cast<OpKind>(o);
    OpTable &table = (*out)[o];
    if (reg.forOp(op).empty()) continue;
    if (!forced[o].empty()) {
      if (!forceAlgo(reg, dec, t, op, forced[o], &table, err)) return false;
      continue;
    }
    BucketPicks byBucket{};
    if (!pickByRules(reg, dec, rules, t, op, &byBucket, err)) return false;
    for (auto &row : table) row = byBucket;
    if (!policy.box) continue;
    for (int d = 0; d < flagcxNumTypes; d++)
      for (int b = 0; b < kSizeBuckets; b++)
        if (!policy.ask(reg, dec, t, op, d, b, &table[d][b], err)) return false;
  }
  return true;
}

}  // namespace flagcx
