// An algorithm script (algos/<op>/<name>.lua) loaded in a LuaJIT sandbox
// (sandbox.h), and the compiler that runs its build(s) into the IR of ir.h.
//
// Rooted ops (broadcast, reduce, gather, scatter) are built for root 0 (the
// script sees s.root == 0) and moved to the call's root by relabelling
// (ir_names.h: relabelRoot): rank r runs what rank (r - root) mod n runs for
// root 0.  One verified root-0 schedule thus stands for every root (for a
// fold_order script too: relabelling turns a fold of n sources listed in
// rank order at root 0 into one listed in rank order at the root).
//
// Cost: compiling one rank runs its build once; time and memory are
// proportional to the steps it adds (each step is a 32-byte Step, built in a
// buffer the script keeps and copied out at its size; chunk references are
// 8-byte userdata the Lua collector reclaims).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sched/ir.h"
#include "sched/sandbox.h"

struct lua_State;

namespace flagcx {

// What a schedule is compiled for.  ranksPerHost is exposed to scripts as
// s.ranks_per_host (ranks numbered host by host).
struct Topo {
  int nranks = 1;
  int ranksPerHost = 1;
};

class Script {
 public:
  // Runs the file in a fresh sandbox and checks the table it returns.
  static bool load(const std::string &path, std::unique_ptr<Script> *out, std::string *err,
                   const ScriptLimits &limits = {});
  // Same from text; `chunkName` is what errors show (e.g. the path).
  static bool loadText(const std::string &chunkName, const std::string &text,
                       std::unique_ptr<Script> *out, std::string *err,
                       const ScriptLimits &limits = {});
  ~Script();
  Script(const Script &) = delete;
  Script &operator=(const Script &) = delete;

  const std::string &path() const { return path_; }
  const std::string &name() const { return name_; }
  OpKind op() const { return op_; }
  const std::string &description() const { return description_; }
  // Human text of `requires` ("pow2, min_ranks=2", "custom", "none").
  const std::string &requirements() const { return requirements_; }
  // The script declares fold_order = "rank" (a field of its table, like
  // name): every reduced output chunk is the left fold of the contributions
  // in rank order.  The verifier proves it (verify.h); compiled schedules
  // carry it as Schedule::foldOrder.
  bool foldOrder() const { return foldOrder_; }

  // Whether the script applies at this topology; `why` says why not.  Lua
  // errors inside a requires function return false with the error in `why`.
  bool supports(const Topo &t, std::string *why);
  // chunks(nranks): N, the number of data-space chunks.
  bool chunks(const Topo &t, int *n, std::string *err);
  // scratch_copies(nranks) (a number or a function; 1 when absent): S, the
  // copies of the data space scratch holds (ir.h).  A schedule whose fold
  // needs several chunk-sized slots of one chunk asks for them this way.
  bool scratchCopies(const Topo &t, int nchunks, int *copies, std::string *err);
  // The cost hint: sequential steps and bytes moved per rank, as a fraction
  // of the message.  Missing hints default to steps = nranks-1, bytes = 1.
  bool cost(const Topo &t, double *steps, double *bytes, std::string *err);

  // This rank's schedule.  out->op/algo/nranks/root/chunks are set and
  // out->ranks holds one RankSchedule.
  bool compileRank(const Topo &t, int rank, int root, Schedule *out, std::string *err);
  // Every rank's schedule (out->ranks[r] for rank r), for the verifier.
  bool compileAll(const Topo &t, int root, Schedule *out, std::string *err);

  // Whether any build so far read s.ranks_per_host.  When none did, and
  // chunks() does not change with ranks_per_host, a schedule compiled at one
  // ranks_per_host is the schedule at every other (flagcx-algo verify uses
  // this to skip repeats).
  bool readsRanksPerHost() const { return readsRph_; }
  // The script's Lua state: memory now and at its peak, in bytes.
  size_t luaBytes() const { return sb_->memoryBytes(); }
  // The step buffer one-rank compiles build into (kept for the next one).
  size_t bufferBytes() const { return buildBuf_.capacity() * sizeof(Step); }
  size_t luaPeakBytes() const { return sb_->peakMemoryBytes(); }

 private:
  Script() = default;
  bool init(const std::string &chunkName, const std::string &text, std::string *err);
  bool callField(const char *field, const Topo &t, int nresults, std::string *err);
  bool compileRanks(const Topo &t, int root, int first, int count, Schedule *out,
                    std::string *err);
  bool buildRank(const Topo &t, int nchunks, int copies, int rank, RankSchedule *out,
                 std::string *err);
  bool numberField(const char *table, const char *field, const Topo &t, double def, double *v,
                   std::string *err);

  std::unique_ptr<Sandbox> sb_;
  lua_State *L_ = nullptr;
  int tableRef_ = -1;
  int refMeta_ = -1;  // the metatable of chunk references
  bool readsRph_ = false;
  bool foldOrder_ = false;
  std::vector<Step> buildBuf_;  // one-rank compiles: built here, copied out at size
  std::string path_, name_, description_, requirements_;
  OpKind op_ = OpKind::Count;
};

}  // namespace flagcx
