// AlgoSet: compile at init what the tuner may pick; select per call.
#include "sched/algo_set.h"

#include <algorithm>
#include <map>

#include "base/base.h"
#include "sched/ir_names.h"
#include "sched/registry.h"
#include "sched/script.h"
#include "sched/tuner.h"
#include "sched/verify.h"

namespace flagcx {

namespace {
constexpr uint8_t kNone = 255;
constexpr OpKind kOrderedOps[] = {OpKind::AllReduce, OpKind::ReduceScatter, OpKind::Reduce};

// The fold_order algorithm deterministic calls of `op` run (*out; nullptr
// when none applies): FLAGCX_ALGO's choice when it declares fold_order, else
// the registry's "ordered", else any other fold_order script that applies.
// *overridden: FLAGCX_ALGO named an algorithm without fold_order.
bool pickOrdered(const Registry &reg, ScriptCache &cache, const Topo &t, OpKind op,
                 const std::string &forced, const AlgoInfo **out, bool *overridden,
                 std::string *err) {
  *out = nullptr;
  *overridden = false;
  std::vector<const AlgoInfo *> order;
  if (!forced.empty()) order.push_back(reg.find(op, forced));
  order.push_back(reg.find(op, "ordered"));
  for (const AlgoInfo *a : reg.forOp(op)) order.push_back(a);
  for (const AlgoInfo *a : order) {
    if (!a) continue;
    Script *s = cache.get(*a, err);
    if (!s) return false;
    std::string why;
    if (s->foldOrder() && s->supports(t, &why)) {
      *out = a;
      return true;
    }
    if (a->name == forced) *overridden = true;
  }
  return true;
}

}  // namespace

AlgoSet::~AlgoSet() = default;
AlgoSet::Compiled::Compiled() = default;
AlgoSet::Compiled::Compiled(Compiled &&) noexcept = default;
AlgoSet::Compiled::~Compiled() = default;

flagcxResult_t AlgoSet::create(int rank, int nranks, int ranksPerHost,
                               std::unique_ptr<AlgoSet> *out) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return argError(flagcxInvalidArgument, kInit, "AlgoSet: rank %d of %d is invalid", rank, nranks);
  if (ranksPerHost < 1 || ranksPerHost > nranks) ranksPerHost = 1;
  std::string err;
  // argError records the text for flagcxGetLastError even when WARN is off.
  auto fail = [&]() { return argError(flagcxInvalidUsage, kInit, "rank %d: %s", rank, err.c_str()); };
  Registry reg;
  if (!Registry::load(&reg, &err)) return fail();
  ScriptCache cache(reg);
  Topo t{nranks, ranksPerHost};
  auto table = std::make_unique<DecisionTable>();
  if (!decideAll(reg, cache, t, table.get(), &err)) return fail();

  std::unique_ptr<AlgoSet> set(new AlgoSet());
  set->rank_ = rank;
  set->nranks_ = nranks;
  set->ranksPerHost_ = ranksPerHost;
  std::map<const AlgoInfo *, uint8_t> index;
  for (size_t o = 0; o < static_cast<size_t>(OpKind::Count); o++) {
    for (int d = 0; d < flagcxNumTypes; d++) {
      for (int b = 0; b < kSizeBuckets; b++) {
        const AlgoInfo *a = (*table)[o][d][b];
        uint8_t &idx = set->choice_[o][d][b];
        if (!a) idx = kNone;
        else if (!set->addAlgo(*a, cache, t, &index, &idx, &err)) return fail();
      }
    }
  }
  // Deterministic mode: the fold_order schedules of the reductions.
  std::array<std::string, static_cast<size_t>(OpKind::Count)> forced;
  if (!parseForcedAlgos(paramStr(Param::ALGO), &forced, &err)) return fail();
  set->ordered_.fill(kNone);
  for (OpKind op : kOrderedOps) {
    size_t o = static_cast<size_t>(op);
    const AlgoInfo *a = nullptr;
    bool overridden = false;
    if (!pickOrdered(reg, cache, t, op, forced[o], &a, &overridden, &err)) return fail();
    set->orderOverrides_[o] = overridden ? forced[o] : "";
    if (!a) {
      INFO(kTuning, "%s: no fold_order algorithm applies at nranks=%d", opName(op), nranks);
      continue;
    }
    size_t before = set->compiled_.size();
    if (!set->addAlgo(*a, cache, t, &index, &set->ordered_[o], &err)) return fail();
    if (set->compiled_.size() > before) set->compiled_.back().tuned = false;
  }
  if (logEnabled(LogLevel::Info, kTuning)) {
    std::string names;
    for (const auto &c : set->compiled_) names += std::string(" ") + opName(c.op) + "/" + c.algo;
    INFO(kTuning, "nranks=%d ranksPerHost=%d compiled:%s", nranks, ranksPerHost, names.c_str());
  }
  *out = std::move(set);
  return flagcxSuccess;
}

// The compiled entry of algorithm `a` (*idx), compiled now on first use:
// a user script is verified for every rank first.
bool AlgoSet::addAlgo(const AlgoInfo &a, ScriptCache &cache, const Topo &t,
                      std::map<const AlgoInfo *, uint8_t> *index, uint8_t *idx, std::string *err) {
  auto it = index->find(&a);
  if (it != index->end()) {
    *idx = it->second;
    return true;
  }
  if (compiled_.size() >= kNone) {
    *err = "too many distinct algorithms selected";
    return false;
  }
  Script *s = cache.get(a, err);
  if (!s) return false;
  if (a.user) {
    std::string skipped;
    if (!verifyScript(*s, t, err, &skipped)) return false;
    INFO(kInit, "verified user script %s (%s/%s) at nranks=%d", a.path.c_str(), opName(a.op),
         a.name.c_str(), t.nranks);
  }
  Compiled c;
  c.op = a.op;
  c.algo = a.name;
  if (!s->compileRank(t, rank_, 0, &c.root0, err)) return false;
  packScratch(&c.root0);
  if (opIsRooted(a.op)) {
    c.script = cache.take(a);
    c.slots.resize(kRootSlots);
    c.lastUse.assign(kRootSlots, 0);
  }
  *idx = static_cast<uint8_t>(compiled_.size());
  index->emplace(&a, *idx);
  compiled_.push_back(std::move(c));
  return true;
}

const Schedule *AlgoSet::selectOrdered(OpKind op, int root) const {
  size_t o = static_cast<size_t>(op);
  if (o >= static_cast<size_t>(OpKind::Count) || ordered_[o] == kNone) return nullptr;
  Compiled &c = compiled_[ordered_[o]];
  if (!orderOverrides_[o].empty() && orderLogged_[o].exchange(1, std::memory_order_relaxed) == 0)
    INFO(kTuning, "%s: deterministic mode runs %s (fold_order) instead of FLAGCX_ALGO's %s: "
         "the rank-ordered fold is guaranteed", opName(op), c.algo.c_str(),
         orderOverrides_[o].c_str());
  return atRoot(c, root);
}

const Schedule *AlgoSet::select(OpKind op, size_t bytes, flagcxDataType_t dtype, int root) const {
  size_t o = static_cast<size_t>(op);
  if (o >= static_cast<size_t>(OpKind::Count) || dtype < 0 || dtype >= flagcxNumTypes)
    return nullptr;
  int b = sizeBucket(bytes);
  uint8_t idx = choice_[o][dtype][b];
  if (idx == kNone) return nullptr;
  Compiled &c = compiled_[idx];
  if (logEnabled(LogLevel::Info, kTuning) && logged_[o][b].exchange(1, std::memory_order_relaxed) == 0)
    INFO(kTuning, "%s bytes in [%llu, %llu] nranks=%d -> %s", opName(op),
         static_cast<unsigned long long>(bucketLowBytes(b)),
         static_cast<unsigned long long>(b == 0 ? 0 : bucketLowBytes(b) * 2 - 1), nranks_,
         c.algo.c_str());
  return atRoot(c, root);
}

// Root 0 (and unrooted ops): the schedule compiled at init.  Another root: a
// slot holding it, else the least recently used slot compiled anew.
const Schedule *AlgoSet::atRoot(Compiled &c, int root) const {
  if (!opIsRooted(c.op) || root == 0) return &c.root0;
  if (root < 0 || root >= nranks_ || !c.script) return nullptr;
  std::lock_guard<std::mutex> lock(rootMu_);
  auto &slots = c.slots;
  auto &lastUse = c.lastUse;
  size_t pick = 0;
  for (size_t i = 0; i < slots.size(); i++) {
    if (lastUse[i] && slots[i].root == root) {
      lastUse[i] = ++useClock_;
      return &slots[i];
    }
    if (lastUse[i] < lastUse[pick]) pick = i;
  }
  std::string err;
  lastUse[pick] = 0;
  if (!c.script->compileRank(Topo{nranks_, ranksPerHost_}, rank_, root, &slots[pick], &err)) {
    WARN(kColl, "rank %d: %s", rank_, err.c_str());
    return nullptr;
  }
  packScratch(&slots[pick]);
  TRACE(kTuning, "rank %d: compiled %s/%s for root %d (%zu steps)", rank_, opName(c.op),
        c.algo.c_str(), root, slots[pick].ranks[0].steps.size());
  lastUse[pick] = ++useClock_;
  return &slots[pick];
}

const std::string &AlgoSet::selectName(OpKind op, size_t bytes, flagcxDataType_t dtype) const {
  static const std::string none;
  size_t o = static_cast<size_t>(op);
  if (o >= static_cast<size_t>(OpKind::Count) || dtype < 0 || dtype >= flagcxNumTypes) return none;
  uint8_t idx = choice_[o][dtype][sizeBucket(bytes)];
  return idx == kNone ? none : compiled_[idx].algo;
}

const Schedule *AlgoSet::find(OpKind op, const std::string &algo, int root) const {
  for (auto &c : compiled_)
    if (c.op == op && c.algo == algo) return atRoot(c, root);
  return nullptr;
}

namespace {
void addPeers(const Schedule &s, std::vector<int> *out) {
  if (s.ranks.empty()) return;
  for (const Step &x : s.ranks[0].steps)
    if (x.peer >= 0) out->push_back(x.peer);
}
void sortUnique(std::vector<int> *v) {
  std::sort(v->begin(), v->end());
  v->erase(std::unique(v->begin(), v->end()), v->end());
}
}  // namespace

std::vector<int> AlgoSet::peers(OpKind op) const {
  std::vector<int> v;
  std::lock_guard<std::mutex> lock(rootMu_);
  for (const auto &c : compiled_) {
    if (c.op != op || !c.tuned) continue;
    addPeers(c.root0, &v);
    for (size_t i = 0; i < c.slots.size(); i++)
      if (c.lastUse[i]) addPeers(c.slots[i], &v);
    sortUnique(&v);
  }
  return v;
}

std::vector<int> AlgoSet::schedulePeers(bool (*op)(OpKind)) const {
  std::vector<int> v;
  for (size_t o = 0; o < static_cast<size_t>(OpKind::Count); o++) {
    if (!op(static_cast<OpKind>(o))) continue;
    std::vector<int> p = peers(static_cast<OpKind>(o));
    v.insert(v.end(), p.begin(), p.end());
  }
  sortUnique(&v);
  return v;
}

std::vector<int> AlgoSet::peers() const {
  return schedulePeers([](OpKind) { return true; });
}

AlgoSet::Footprint AlgoSet::footprint() const {
  Footprint f;
  std::lock_guard<std::mutex> lock(rootMu_);
  auto add = [&](const Schedule &s) {
    for (const RankSchedule &rs : s.ranks) {
      f.steps += rs.steps.size();
      f.scheduleBytes += rs.steps.capacity() * sizeof(Step);
    }
  };
  for (const auto &c : compiled_) {
    f.algorithms++;
    add(c.root0);
    for (const Schedule &s : c.slots) add(s);
    if (c.script) f.luaBytes += c.script->luaBytes() + c.script->bufferBytes();
  }
  return f;
}

}  // namespace flagcx
