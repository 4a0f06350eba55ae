// AlgoSet: compile at init what the tuner may pick; select per call.
#include "sched/algo_set.h"

#include <map>

#include "base/log.h"
#include "sched/registry.h"
#include "sched/script.h"
#include "sched/tuner.h"
#include "sched/verify.h"

namespace flagcx {

namespace {
constexpr uint8_t kNone = 255;
}

AlgoSet::~AlgoSet() = default;

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
          Compiled c{a->op, a->name, {}};
          int roots = opIsRooted(a->op) ? nranks : 1;
          c.byRoot.resize(roots);
          for (int root = 0; root < roots; root++)
            if (!s->compileRank(t, rank, root, &c.byRoot[root], &err)) return fail();
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
  const Compiled &c = compiled_[idx];
  if (logEnabled(LogLevel::Info, kTuning) && logged_[o][b].exchange(1, std::memory_order_relaxed) == 0)
    INFO(kTuning, "%s bytes in [%llu, %llu] nranks=%d -> %s", opName(op),
         static_cast<unsigned long long>(bucketLowBytes(b)),
         static_cast<unsigned long long>(b == 0 ? 0 : bucketLowBytes(b) * 2 - 1), nranks_,
         c.algo.c_str());
  if (opIsRooted(op)) {
    if (root < 0 || root >= nranks_) return nullptr;
    return &c.byRoot[root];
  }
  return &c.byRoot[0];
}

const std::string &AlgoSet::selectName(OpKind op, size_t bytes, flagcxDataType_t dtype) const {
  static const std::string none;
  size_t o = static_cast<size_t>(op);
  if (o >= static_cast<size_t>(OpKind::Count) || dtype < 0 || dtype >= flagcxNumTypes) return none;
  uint8_t idx = choice_[o][dtype][sizeBucket(bytes)];
  return idx == kNone ? none : compiled_[idx].algo;
}

const Schedule *AlgoSet::find(OpKind op, const std::string &algo, int root) const {
  for (const auto &c : compiled_) {
    if (c.op != op || c.algo != algo) continue;
    if (!opIsRooted(op)) return &c.byRoot[0];
    return root >= 0 && root < nranks_ ? &c.byRoot[root] : nullptr;
  }
  return nullptr;
}

std::vector<int> AlgoSet::schedulePeers(bool (*op)(OpKind)) const {
  std::vector<char> named(static_cast<size_t>(nranks_), 0);
  for (const auto &c : compiled_) {
    if (!op(c.op)) continue;
    for (const Schedule &s : c.byRoot)
      for (const RankSchedule &rs : s.ranks)
        for (const Step &st : rs.steps)
          if (st.peer >= 0 && st.peer < nranks_ && st.peer != rank_)
            named[static_cast<size_t>(st.peer)] = 1;
  }
  std::vector<int> out;
  for (int r = 0; r < nranks_; r++)
    if (named[static_cast<size_t>(r)]) out.push_back(r);
  return out;
}

}  // namespace flagcx
