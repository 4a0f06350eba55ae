// The verifier's simulation: every rank's chunks as multisets of
// contributions, stage by stage with rendezvous messages, until every rank
// finishes or a deadlock is found (verifier.h, verify.h for the model).
#include <string>

#include "sched/verifier.h"

namespace flagcx {
namespace verifier {

void Verifier::initState() {
  st_.assign(n_, {});
  extra_.assign(n_, {});
  slot_.assign(total(), 0);
  if (barrier()) {
    heard_.assign(n_, {});
    for (int r = 0; r < n_; r++) heard_[r] = ContribSet::one(r);
  }
  int ni = nb(BufKind::Input), no = nb(BufKind::Output);
  for (int r = 0; r < n_; r++) {
    std::vector<ChunkState> &c = st_[r];
    c.assign(ni + no + N_, {});
    if (!hasInput(r)) continue;
    for (int k = 0; k < ni; k++) {
      int d = ni == N_ ? k : r * ni + k;
      c[k].valid = true;
      c[k].items = ContribSet::one(item(r, d));
    }
  }
}

// A stage's sends take their payload when it starts.
bool Verifier::enterStage(int r, int stage) {
  auto [b, e] = stageRanges_[r][stage];
  for (int i = b; i < e; i++) {
    const Step &x = s_.ranks[r].steps[i];
    if (x.kind != StepKind::Send) continue;
    if (!barrier() && !chunk(r, x.src).valid)
      return fail(r, i, "sends " + refText(x.src) + " before anything was written to it");
    uint32_t k;
    if (freeSlots_.empty()) {
      k = static_cast<uint32_t>(pool_.size());
      pool_.emplace_back();
    } else {
      k = freeSlots_.back();
      freeSlots_.pop_back();
    }
    slot_[base_[r] + i] = k;
    pool_[k] = barrier() ? ChunkState{true, heard_[r]} : chunk(r, x.src);
  }
  return true;
}

bool Verifier::readable(int r, int i, const ChunkRef &c) {
  if (barrier() || chunk(r, c).valid) return true;
  return fail(r, i, "reads " + refText(c) + " before anything was written to it");
}

bool Verifier::completeStage(int r, int stage) {
  auto [b, e] = stageRanges_[r][stage];
  for (int i = b; i < e; i++) {
    const Step &x = s_.ranks[r].steps[i];
    uint32_t g = base_[r] + i;
    switch (x.kind) {
      case StepKind::Send: break;
      case StepKind::Recv:
      case StepKind::RecvReduce: {
        uint32_t k = slot_[partner_[g]];
        ChunkState &msg = pool_[k];
        if (barrier()) {
          heard_[r].unite(msg.items);
        } else {
          ChunkState &d = chunk(r, x.dst);
          if (x.kind == StepKind::Recv) {
            d = std::move(msg);
          } else {
            if (!readable(r, i, x.dst)) return false;
            d.items.add(msg.items);
            d.ordered = false;
          }
        }
        msg.items.clear();  // delivered: each send meets one receive
        freeSlots_.push_back(k);
        break;
      }
      case StepKind::Copy:
        if (barrier()) break;
        if (!readable(r, i, x.src)) return false;
        chunk(r, x.dst) = chunk(r, x.src);
        break;
      case StepKind::Reduce: {
        if (barrier()) break;
        if (!readable(r, i, x.src) || !readable(r, i, x.dst)) return false;
        ContribSet src = chunk(r, x.src).items;
        chunk(r, x.dst).items.add(src);
        chunk(r, x.dst).ordered = false;
        break;
      }
      case StepKind::Fold:
        if (!barrier() && !fold(r, i, x)) return false;
        break;
    }
  }
  return true;
}

// The data-space chunk every item of `s` belongs to, or -1 (none or several).
int Verifier::chunkOf(const ContribSet &s) const {
  if (s.size() == 0) return -1;
  uint64_t lo = s.begin()->lo / n_, hi = ((s.end() - 1)->hi() - 1) / n_;
  return lo == hi ? static_cast<int>(lo) : -1;
}

// dst = the sum of the sources, as a reduction would make it; the sources
// must hold data of one data-space chunk.  The value is a rank-ordered fold
// when source k holds rank k's contribution alone, for k = 0..n-1.
bool Verifier::fold(int r, int i, const Step &x) {
  const std::vector<ChunkRef> &src = *foldSources(s_.ranks[r], x);
  ContribSet sum;
  bool ordered = static_cast<int>(src.size()) == n_;
  int d0 = -1;
  for (size_t k = 0; k < src.size(); k++) {
    if (!readable(r, i, src[k])) return false;
    const ContribSet &items = chunk(r, src[k]).items;
    int d = chunkOf(items);
    if (k == 0) d0 = d;
    if (d < 0 || d != d0)
      return fail(r, i, "source " + std::to_string(k + 1) + " (" + refText(src[k]) + ") holds " +
                            (d < 0 ? std::string("contributions to several chunks")
                                   : "chunk " + std::to_string(d)) +
                            ", source 1 chunk " + std::to_string(d0) +
                            ": a fold adds up the contributions to one chunk");
    uint64_t one;
    ordered = ordered && items.single(&one) && one == item(static_cast<int>(k), d);
    sum.add(items);
  }
  ChunkState &dst = chunk(r, x.dst);
  dst.valid = true;
  dst.items = std::move(sum);
  dst.ordered = ordered;
  return true;
}

template <class F>
bool Verifier::deadlock(const std::vector<int> &cur, F blocker) {
  int start = -1;
  for (int r = 0; r < n_ && start < 0; r++)
    if (cur[r] < s_.ranks[r].nstages) start = r;
  // Follow "waits for" edges until a rank repeats: that is the cycle.
  std::vector<int> order, pos(n_, -1);
  int r = start;
  while (pos[r] < 0) {
    pos[r] = static_cast<int>(order.size());
    order.push_back(r);
    r = partnerRank_[base_[r] + blocker(r)];
  }
  std::string what = "deadlock:";
  for (size_t k = pos[r]; k < order.size(); k++) {
    int a = order[k];
    int i = blocker(a);
    uint32_t g = base_[a] + i;
    int p = partnerRank_[g];
    what += " rank " + std::to_string(a) + " step " + std::to_string(i) + " (stage " +
            std::to_string(s_.ranks[a].steps[i].stage) + ", " + stepText(s_.ranks[a].steps[i]) +
            ") waits for rank " + std::to_string(p) + " step " + std::to_string(partnerIdx(g)) +
            " (stage " + std::to_string(partnerStep(g).stage) + "), but rank " +
            std::to_string(p) + " is at stage " + std::to_string(cur[p]) + ";";
  }
  what.pop_back();
  *err_ = head(r, blocker(r)) + what;
  return false;
}

bool Verifier::simulate() {
  initState();
  stageRanges_.assign(n_, {});
  for (int r = 0; r < n_; r++) {
    const RankSchedule &rs = s_.ranks[r];
    stageRanges_[r].assign(rs.nstages, {0, 0});
    int i = 0, ns = static_cast<int>(rs.steps.size());
    for (int stg = 0; stg < rs.nstages; stg++) {
      int b = i;
      while (i < ns && rs.steps[i].stage == stg) i++;
      stageRanges_[r][stg] = {b, i};
    }
  }
  std::vector<int> cur(n_, 0);  // stage each rank has posted
  int unfinished = 0;
  for (int r = 0; r < n_; r++) {
    if (s_.ranks[r].nstages > 0) {
      if (!enterStage(r, 0)) return false;
      unfinished++;
    }
  }
  auto posted = [&](uint32_t g) { return cur[partnerRank_[g]] >= partnerStep(g).stage; };
  // First step of r's current stage whose partner has not been posted.
  auto blocker = [&](int r) {
    auto [b, e] = stageRanges_[r][cur[r]];
    for (int i = b; i < e; i++) {
      if (!isComm(s_.ranks[r].steps[i].kind)) continue;
      if (!posted(base_[r] + i)) return i;
    }
    return -1;
  };
  while (unfinished > 0) {
    bool progress = false;
    for (int r = 0; r < n_; r++) {
      while (cur[r] < s_.ranks[r].nstages && blocker(r) < 0) {
        if (!completeStage(r, cur[r])) return false;
        cur[r]++;
        progress = true;
        if (cur[r] < s_.ranks[r].nstages) {
          if (!enterStage(r, cur[r])) return false;
        } else {
          unfinished--;
        }
      }
    }
    if (!progress) return deadlock(cur, blocker);
  }
  return true;
}

}  // namespace verifier
}  // namespace flagcx
