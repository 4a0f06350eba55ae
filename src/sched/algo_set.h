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
// for this rank (every root of a rooted op).  User scripts (FLAGCX_ALGO_PATH)
// that may be chosen are first verified for all ranks.  Any failure is logged
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
#include <memory>
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

class AlgoSet {
 public:
  static flagcxResult_t create(int rank, int nranks, int ranksPerHost,
                               std::unique_ptr<AlgoSet> *out);
  ~AlgoSet();

  // Per call: no Lua, no YAML, no allocation, no lock.  `bytes` is the size of
  // the call's count argument (count * type size: the per-rank block for
  // allgather/reducescatter/gather/scatter/alltoall, the whole buffer for
  // allreduce/reduce/broadcast; the sum of send counts for alltoallv; 0 for
  // barrier).  `root` is ignored for unrooted ops.  Never null after a
  // successful create() for a valid op, dtype and root.
  const Schedule *select(OpKind op, size_t bytes, flagcxDataType_t dtype, int root) const;

  // The algorithm name select() picks, for logs and tools.
  const std::string &selectName(OpKind op, size_t bytes, flagcxDataType_t dtype) const;

  // A compiled schedule by name (nullptr when that algorithm was not compiled).
  const Schedule *find(OpKind op, const std::string &algo, int root) const;

  // The ranks this rank's compiled schedules exchange messages with, in
  // ascending order, over every op for which `op` says yes (the communicator
  // connects to these at init and to the others on first use).
  std::vector<int> schedulePeers(bool (*op)(OpKind)) const;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

  struct Compiled {
    OpKind op;
    std::string algo;
    std::vector<Schedule> byRoot;  // one per root for rooted ops, else one
  };

 private:
  AlgoSet() = default;
  int rank_ = 0, nranks_ = 0;
  std::vector<Compiled> compiled_;
  // choice_[op][dtype][bucket] = index into compiled_
  std::array<std::array<std::array<uint8_t, kSizeBuckets>, flagcxNumTypes>,
             static_cast<size_t>(OpKind::Count)> choice_{};
  mutable std::array<std::array<std::atomic<uint8_t>, kSizeBuckets>,
                     static_cast<size_t>(OpKind::Count)> logged_{};
};

}  // namespace flagcx
