// The schedule verifier's state and steps (verify.h says what it proves).
// Internal to the verifier: verify_static.cc holds the checks that look at
// the steps alone (shape, references, hazards, message matching, sizes),
// verify_sim.cc the simulation of chunk contents stage by stage, and
// verify.cc the op's final checks and the entry points.
//
// Memory is O(total steps): the steps, a partner per message step, chunk
// states and in-flight payloads as ContribSets (a run or two each;
// contrib.h).  A payload is taken when its send's stage starts and dropped
// when its receive completes.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sched/contrib.h"
#include "sched/ir.h"
#include "sched/ir_names.h"

namespace flagcx {
namespace verifier {

struct ChunkState {
  bool valid = false;
  ContribSet items;
  // The value is a rank-ordered fold: made by a fold whose sources held one
  // contribution each, of ranks 0..n-1 in order, of one data-space chunk;
  // copies and messages keep it, reductions clear it.
  bool ordered = false;
};

inline bool isComm(StepKind k) {
  return k == StepKind::Send || k == StepKind::Recv || k == StepKind::RecvReduce;
}

class Verifier {
 public:
  explicit Verifier(const Schedule &s) : s_(s), n_(s.nranks), N_(s.chunks) {}

  bool run(std::string *err) {
    err_ = err;
    return shape() && index() && staticChecks() && hazards() && match() && sizes() &&
           simulate() && finalCheck();
  }

 private:
  const Schedule &s_;
  int n_, N_;
  std::string *err_ = nullptr;
  // Steps are numbered globally: rank r's step i is base_[r] + i.
  std::vector<uint32_t> base_;
  std::vector<uint32_t> partner_;      // global index of the matching message step
  std::vector<int32_t> partnerRank_;  // and its rank
  std::vector<std::vector<ChunkState>> st_;  // per rank: input, output, scratch chunks
  // Per rank: scratch chunks past the first copy (scratch_copies > 1), made
  // on first use: a schedule uses few of them on each rank.
  std::vector<std::unordered_map<int32_t, ChunkState>> extra_;
  std::vector<ContribSet> heard_;            // barrier: per rank, ranks heard from
  // Sends in flight: slot_[global step] indexes pool_; free slots are reused.
  std::vector<uint32_t> slot_;
  std::vector<ChunkState> pool_;
  std::vector<uint32_t> freeSlots_;
  // Steps [begin, end) of rank r's stage `stage`.
  std::vector<std::vector<std::pair<int, int>>> stageRanges_;

  std::string head(int rank = -1, int step = -1) const {
    std::string h = std::string("verify ") + opName(s_.op) + "/" + s_.algo +
                    " nranks=" + std::to_string(n_);
    if (opIsRooted(s_.op)) h += " root=" + std::to_string(s_.root);
    if (rank >= 0) h += " rank=" + std::to_string(rank);
    if (step >= 0) h += " step=" + std::to_string(step);
    return h + ": ";
  }
  bool fail(int rank, int step, const std::string &what) {
    std::string w = what;
    if (rank >= 0 && step >= 0) {
      const Step &x = s_.ranks[rank].steps[step];
      w = "(stage " + std::to_string(x.stage) + ", " + stepText(x, &s_.ranks[rank]) + ") " + what;
    }
    *err_ = head(rank, step) + w;
    return false;
  }
  bool barrier() const { return s_.op == OpKind::Barrier; }
  int nb(BufKind b) const { return bufChunks(s_.op, b, N_, n_, s_.scratchCopies); }
  bool hasInput(int r) const {
    return !((s_.op == OpKind::Broadcast || s_.op == OpKind::Scatter) && r != s_.root);
  }
  bool hasOutput(int r) const {
    return !((s_.op == OpKind::Reduce || s_.op == OpKind::Gather) && r != s_.root);
  }
  // Item of rank q's data-space chunk d (chunk-major, see contrib.h).
  uint64_t item(int q, int d) const { return static_cast<uint64_t>(d) * n_ + q; }

  // verify_static.cc
  bool shape();
  bool index();
  uint32_t total() const { return base_[n_]; }
  bool checkRef(int r, int i, const ChunkRef &c, bool write);
  bool staticChecks();
  bool hazards();
  bool hazardText(int r, size_t b, size_t e);
  bool match();
  const Step &partnerStep(uint32_t g) const {
    int p = partnerRank_[g];
    return s_.ranks[p].steps[partner_[g] - base_[p]];
  }
  int partnerIdx(uint32_t g) const { return static_cast<int>(partner_[g] - base_[partnerRank_[g]]); }
  uint64_t chunkSize(int r, const ChunkRef &c, uint64_t count) const;
  bool sizes();

  // verify_sim.cc
  std::string itemText(uint64_t it) const {
    return "rank " + std::to_string(it % n_) + "'s chunk " + std::to_string(it / n_);
  }
  void initState();
  ChunkState &chunk(int r, const ChunkRef &c) {
    if (c.buf == BufKind::Scratch && c.chunk >= N_) return extra_[r][c.chunk];
    int off = c.buf == BufKind::Input ? 0 : c.buf == BufKind::Output ? nb(BufKind::Input)
                                                                    : nb(BufKind::Input) + nb(BufKind::Output);
    return st_[r][off + c.chunk];
  }
  bool enterStage(int r, int stage);
  bool readable(int r, int i, const ChunkRef &c);
  bool completeStage(int r, int stage);
  int chunkOf(const ContribSet &s) const;
  bool fold(int r, int i, const Step &x);
  bool simulate();
  template <class F>
  bool deadlock(const std::vector<int> &cur, F blocker);

  // verify.cc
  ContribSet expected(int r, int k) const;
  bool finalCheck();
};

}  // namespace verifier
}  // namespace flagcx
