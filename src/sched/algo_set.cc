// AlgoSet: compile at init what the tuner may pick; select per call.
#include "sched/algo_set.h"

#include <algorithm>
#include <map>

#include "base/base.h"
#include "sched/registry.h"
#include "sched/script.h"
#include "sched/tuner.h"
#include "sched/verify.h"

namespace flagcx {

namespace {
constexpr uint8_t kNone = 255;
}

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
        if (!a) {
          set->choice_[o][d][b] = kNone;
          continue;
        }
        auto it = index.find(a);
        if (it == index.end()) {
          if (set->compiled_.size() >= kNone) {
            err = "too many distinct algorithms selected";
            return fail();
          }
          Script *s = cache.get(*a, &err);
          if (!s) return fail();
          if (a->user) {
            std::string skipped;
            if (!verifyScript(*s, t, &err, &skipped)) return fail();
            INFO(kInit, "verified user script %s (%s/%s) at nranks=%d", a->path.c_str(),
                 opName(a->op), a->name.c_str(), nranks);
          }
          Compiled c;
          c.op = a->op;
          c.algo = a->name;
          if (!s->compileRank(t, rank, 0, &c.root0, &err)) return fail();
          if (opIsRooted(a->op)) {
            c.script = cache.take(*a);
            c.slots.resize(kRootSlots);
            c.lastUse.assign(kRootSlots, 0);
          }
          it = index.emplace(a, static_cast<uint8_t>(set->compiled_.size())).first;
          set->compiled_.push_back(std::move(c));
        }
        set->choice_[o][d][b] = it->second;
      }
    }
  }
  if (logEnabled(LogLevel::Info, kTuning)) {
    std::string names;
    for (const auto &c : set->compiled_) names += std::string(" ") + opName(c.op) + "/" + c.algo;
    INFO(kTuning, "nranks=%d ranksPerHost=%d compiled:%s", nranks, ranksPerHost, names.c_str());
  }
  *out = std::move(set);
  return flagcxSuccess;
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
    if (c.op != op) continue;
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
