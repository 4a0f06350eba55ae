// The communicator's view of the schedule engine: every schedule this rank
// may run, compiled once at init, and an allocation-free choice per call.
//
//   std::unique_ptr<flagcx::AlgoSet> algos;
//   FLAGCX_CHECK(flagcx::AlgoSet::create(rank, nranks, ranksPerHost, &algos));
//   ...
//   const flagcx::Schedule *s = algos->select(OpKind::AllReduce, count * typeSize, dtype, 0);
//   // s->ranks.size() == 1; s->ranks[0] holds this rank's steps (see ir.h).
//
// create() reads the registry (algos/registry.yaml plus FLAGCX_ALGO_PATH), the
// tuning rules (config/tuning.yaml or FLAGCX_TUNING_FILE), the optional Lua
// policy (FLAGCX_TUNING_POLICY) and FLAGCX_ALGO, decides an algorithm for every
// (op, dtype, power-of-two size bucket), and compiles each algorithm so chosen
// for this rank, and, for deterministic mode, the fold_order algorithm of
// allreduce, reducescatter and reduce (selectOrdered).  Rooted ops are
// compiled for root 0 only; another root's
// schedule is compiled on its first use (script.h: built for root 0 as rank
// (rank - root) mod n, relabelled) and kept in a small per-algorithm cache
// (kRootSlots roots, least recently used replaced), so init costs one compile
// per algorithm whatever nranks.  User scripts (FLAGCX_ALGO_PATH) that may be
// chosen (by the tuner or as a fold_order algorithm) are first verified for
// all ranks; shipped scripts are verified by the tests.  Any failure is logged
// once (file:line for Lua errors, op/algo/nranks/rank/step for the verifier)
// and returns flagcxInvalidUsage.
//
// Ranks are assumed to be numbered host by host: ranks [h*ranksPerHost,
// (h+1)*ranksPerHost) share host h.  Pass ranksPerHost = nranks on one host,
// and 1 when it is unknown or the hosts hold different numbers of ranks.
//
// Buffers: schedules assume that input and output are distinct buffers; an
// in-place call is the executor's to handle (e.g. by copying the input aside).
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "flagcx.h"
#include "sched/ir.h"

namespace flagcx {

// Size buckets used for decisions: bucket 0 holds 0 bytes, bucket b >= 1 holds
// [2^(b-1), 2^b).  A decision is made once per bucket at its lower bound.
constexpr int kSizeBuckets = 65;
inline int sizeBucket(size_t bytes) {
  return bytes == 0 ? 0 : 64 - __builtin_clzll(static_cast<unsigned long long>(bytes));
}

class Script;
class ScriptCache;
struct AlgoInfo;
struct Topo;

class AlgoSet {
 public:
  // Roots of a rooted algorithm kept compiled besides root 0.
  static constexpr int kRootSlots = 8;

  static flagcxResult_t create(int rank, int nranks, int ranksPerHost,
                               std::unique_ptr<AlgoSet> *out);
  ~AlgoSet();

  // Per call: no Lua, no YAML, no allocation, no lock (rooted ops: see
  // below).  `bytes` is the size of the call's count argument (count * type
  // size: the per-rank block for allgather/reducescatter/gather/scatter/
  // alltoall, the whole buffer for allreduce/reduce/broadcast; the sum of send
  // counts for alltoallv; 0 for barrier).  `root` is ignored for unrooted ops.
  // Never null after a successful create() for a valid op, dtype and root,
  // unless a rooted op's compile at a new root fails (it logs why).
  // Rooted ops at a root other than 0 take a mutex, and on the first use of
  // that root (or once it left the cache) run the script (Lua, allocation):
  // about as long as one init compile of that algorithm.  The schedule
  // returned for such a root stays valid until kRootSlots other roots of the
  // same algorithm have been selected: the executor runs one collective of a
  // communicator at a time, so a call's schedule outlives its use.
  const Schedule *select(OpKind op, size_t bytes, flagcxDataType_t dtype, int root) const;

  // Deterministic mode: the schedule of a fold_order algorithm for `op`
  // (allreduce, reducescatter, reduce), whose verified folds make every
  // output chunk ((x0 op x1) op x2) ... in rank order, whatever the size and
  // dtype.  It is FLAGCX_ALGO's algorithm for `op` when that declares
  // fold_order (a user script too, verified at init), else the registry's
  // `ordered`, else another fold_order script that applies.  When FLAGCX_ALGO
  // names one without fold_order, the first call logs one INFO line saying
  // that the order guarantee overrides it.  nullptr for other ops, or when no
  // fold_order script applies at this nranks.  Per call as select(): no
  // allocation, no lock, except a rooted op at a new root (same root cache).
  const Schedule *selectOrdered(OpKind op, int root) const;

  // The algorithm name select() picks, for logs and tools.
  const std::string &selectName(OpKind op, size_t bytes, flagcxDataType_t dtype) const;

  // A compiled schedule by name (nullptr when that algorithm was not compiled).
  const Schedule *find(OpKind op, const std::string &algo, int root) const;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

  // The peers this rank's compiled schedules name, sorted, without this rank:
  // for every algorithm the tuner may pick for `op`, or for every op (not the
  // fold_order schedules only selectOrdered returns: their peers connect on
  // first use).  Rooted
  // ops count root 0 and the roots compiled so far; at another root they may
  // name other peers.  What a communicator must connect to before it runs
  // that op's schedules (at root 0 for rooted ops); anything else (send/recv,
  // other roots) can be connected on first use.
  std::vector<int> peers(OpKind op) const;
  std::vector<int> peers() const;
  // The same over every op for which `op` says yes, e.g. every op but
  // alltoall/alltoallv (whose pairwise schedules name every rank).
  std::vector<int> schedulePeers(bool (*op)(OpKind)) const;

  // What init kept: compiled steps, bytes of the step lists, bytes of the
  // scripts kept for rooted ops (Lua state and step buffer; flagcx-algo scale
  // reports these).
  struct Footprint {
    size_t steps = 0, scheduleBytes = 0, luaBytes = 0;
    int algorithms = 0;
  };
  Footprint footprint() const;

  struct Compiled {
    OpKind op;
    std::string algo;
    Schedule root0;                  // the schedule (rooted ops: at root 0)
    std::unique_ptr<Script> script;  // rooted ops: compiles other roots
    std::vector<Schedule> slots;     // rooted ops: other roots, on first use
    std::vector<uint64_t> lastUse;   // per slot, for least-recently-used
    bool tuned = true;               // false: only selectOrdered returns it
    Compiled();
    Compiled(Compiled &&) noexcept;
    ~Compiled();
  };

 private:
  AlgoSet() = default;
  const Schedule *atRoot(Compiled &c, int root) const;
  bool addAlgo(const AlgoInfo &a, ScriptCache &cache, const Topo &t,
               std::map<const AlgoInfo *, uint8_t> *index, uint8_t *idx, std::string *err);
  int rank_ = 0, nranks_ = 0, ranksPerHost_ = 1;
  mutable std::mutex rootMu_;  // the root slots and their scripts
  mutable uint64_t useClock_ = 0;
  // Mutable: atRoot() fills root slots inside const select().
  mutable std::vector<Compiled> compiled_;
  // choice_[op][dtype][bucket] = index into compiled_
  std::array<std::array<std::array<uint8_t, kSizeBuckets>, flagcxNumTypes>,
             static_cast<size_t>(OpKind::Count)> choice_{};
  mutable std::array<std::array<std::atomic<uint8_t>, kSizeBuckets>,
                     static_cast<size_t>(OpKind::Count)> logged_{};
  // Deterministic mode, per op: the compiled fold_order entry (kNone: none),
  // the FLAGCX_ALGO name it overrides ("" if none) and whether that was logged.
  std::array<uint8_t, static_cast<size_t>(OpKind::Count)> ordered_{};
  std::array<std::string, static_cast<size_t>(OpKind::Count)> orderOverrides_;
  mutable std::array<std::atomic<uint8_t>, static_cast<size_t>(OpKind::Count)> orderLogged_{};
};

}  // namespace flagcx
