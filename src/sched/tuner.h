// Algorithm selection.  Precedence, per op:
//   1. FLAGCX_ALGO=op:name,...  forces one algorithm (unknown name, or one
//      whose `requires` fails, is an error);
//   2. the Lua policy FLAGCX_TUNING_POLICY (a file returning
//      function(op, bytes, dtype, nranks, ranks_per_host) -> name or nil);
//   3. the rules of config/tuning.yaml (or FLAGCX_TUNING_FILE): the first
//      rule that matches and whose algorithm applies at this nranks;
//   4. the algorithm with the lowest alpha-beta estimate, among those that do
//      not declare fold_order (those are for the deterministic mode,
//      AlgoSet::selectOrdered; 1-3 may still name them).
// Everything is decided at init for each (op, dtype, power-of-two size
// bucket) so that nothing is evaluated per call.
#pragma once
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flagcx.h"
#include "sched/algo_set.h"
#include "sched/ir.h"
#include "sched/registry.h"

namespace flagcx {

struct TuneRule {
  int line = 0;  // in the rules file, for messages
  uint64_t minBytes = 0, maxBytes = UINT64_MAX;  // [min, max)
  int minRanks = 1, maxRanks = INT_MAX;          // inclusive
  int minRanksPerHost = 1, maxRanksPerHost = INT_MAX;
  int minHosts = 1, maxHosts = INT_MAX;  // hosts = nranks / ranks_per_host
  std::string algo;
};

struct TuningRules {
  std::string file;
  std::array<std::vector<TuneRule>, static_cast<size_t>(OpKind::Count)> byOp;
};

// Parses a rules file; errors read "file:line: message".
bool parseTuningRules(const std::string &file, TuningRules *out, std::string *err);
bool parseTuningText(const std::string &name, const std::string &text, TuningRules *out,
                     std::string *err);
// "allreduce:ring,alltoall:bruck" -> forced[op] = name.
bool parseForcedAlgos(const std::string &spec,
                      std::array<std::string, static_cast<size_t>(OpKind::Count)> *forced,
                      std::string *err);
// "64K" -> 65536 (K, M, G, T binary; an optional trailing B or iB).
bool parseByteSize(const std::string &s, uint64_t *out);

// The alpha-beta model: steps * alpha + bytesFraction * messageBytes * beta.
constexpr double kDefaultAlpha = 4e-6;     // seconds per sequential step
constexpr double kDefaultBeta = 0.5e-9;    // seconds per byte (2 GB/s)
double alphaBetaSeconds(double steps, double bytesFraction, double messageBytes,
                        double alpha = kDefaultAlpha, double beta = kDefaultBeta);
// The op's data-space size for a call of `bytes` (see AlgoSet::select):
// bytes * nranks for the block ops, bytes otherwise.
double messageBytes(OpKind op, uint64_t bytes, int nranks);

uint64_t bucketLowBytes(int bucket);         // smallest size in the bucket

using DecisionTable = std::array<std::array<std::array<const AlgoInfo *, kSizeBuckets>, flagcxNumTypes>,
                                 static_cast<size_t>(OpKind::Count)>;

// Decides an algorithm for every (op, dtype, bucket) at this topology, from
// FLAGCX_ALGO, FLAGCX_TUNING_POLICY and FLAGCX_TUNING_FILE (or the shipped
// config/tuning.yaml).  Ops with no applicable algorithm are left null.
bool decideAll(const Registry &reg, ScriptCache &scripts, const Topo &t, DecisionTable *out,
               std::string *err);

}  // namespace flagcx
