// The verifier's entry points and its final checks: every output chunk
// holds exactly what the op defines (verify.h; the checks before and the
// simulation are in verify_static.cc and verify_sim.cc).
#include "sched/verify.h"

#include "sched/verifier.h"

namespace flagcx {
namespace verifier {

// What output chunk k of rank r must hold at the end.
ContribSet Verifier::expected(int r, int k) const {
  int B = N_ / n_;
  switch (s_.op) {
    case OpKind::AllReduce:
    case OpKind::Reduce: return ContribSet::range(item(0, k), item(0, k) + n_);
    case OpKind::ReduceScatter: return ContribSet::range(item(0, r * B + k), item(0, r * B + k) + n_);
    case OpKind::Broadcast: return ContribSet::one(item(s_.root, k));
    case OpKind::AllGather:
    case OpKind::Gather: return ContribSet::one(item(k / B, k));
    case OpKind::Scatter: return ContribSet::one(item(s_.root, r * B + k));
    case OpKind::AlltoAll: return ContribSet::one(item(k / B, r * B + k % B));
    case OpKind::AlltoAllv: return ContribSet::one(item(k, r));
    default: return {};
  }
}

bool Verifier::finalCheck() {
  if (barrier()) {
    ContribSet all = ContribSet::range(0, n_);
    for (int r = 0; r < n_; r++) {
      if (heard_[r] == all) continue;
      ContribSet::Diff d = heard_[r].diff(all, 1);
      return fail(r, -1, "finishes the barrier without hearing (even indirectly) from rank " +
                             std::to_string(d.missing.empty() ? 0 : d.missing[0]));
    }
    return true;
  }
  for (int r = 0; r < n_; r++) {
    if (!hasOutput(r)) continue;
    int no = nb(BufKind::Output);
    for (int k = 0; k < no; k++) {
      const ChunkState &c = chunk(r, ChunkRef{BufKind::Output, k});
      std::string name = "output[" + std::to_string(k) + "]";
      if (!c.valid) return fail(r, -1, name + " is never written");
      ContribSet want = expected(r, k);
      if (c.items == want) {
        // fold_order: a reduction's output chunks are rank-ordered folds.
        if (s_.foldOrder && !c.ordered)
          return fail(r, -1, "output chunk " + std::to_string(k) + " is not a rank-ordered fold");
        continue;
      }
      ContribSet::Diff d = c.items.diff(want, 3);
      std::string what = name + " ends wrong:";
      for (auto [it, wanted] : d.extra)
        what += " " + itemText(it) + (wanted ? " is counted more than once;" : " does not belong there;");
      for (uint64_t it : d.missing) what += " " + itemText(it) + " is missing;";
      what.pop_back();
      return fail(r, -1, what);
    }
  }
  return true;
}

}  // namespace verifier

using verifier::Verifier;

bool verifySchedule(const Schedule &s, std::string *err) { return Verifier(s).run(err); }

bool verifyScript(Script &script, const Topo &t, std::string *err, std::string *skipped) {
  std::string why;
  if (skipped) skipped->clear();
  if (!script.supports(t, &why)) {
    if (why.find(':') != std::string::npos && why.find(script.path()) == 0) {
      *err = why;  // a Lua error inside requires()
      return false;
    }
    if (skipped) *skipped = why;
    return true;
  }
  Schedule s;
  if (!script.compileAll(t, 0, &s, err)) return false;
  if (!verifySchedule(s, err)) return false;
  // Rooted ops run every root from this schedule, relabelled (script.h):
  // check the relabelling too, at the root farthest from 0.
  if (opIsRooted(script.op()) && t.nranks > 1) {
    relabelRoot(&s, t.nranks - 1);
    if (!verifySchedule(s, err)) return false;
  }
  return true;
}

}  // namespace flagcx
