// An algorithm script (algos/<op>/<name>.lua) loaded in a LuaJIT sandbox,
// and the compiler that runs its build(s) into the IR of ir.h.
//
// Sandbox: a private lua_State per script with a memory cap (custom
// allocator), the JIT off (so the count hook that enforces the instruction
// budget always fires), and only base/table/string/math/bit opened, less
// every base function that reaches files or compiles code (dofile, load,
// loadfile, loadstring, require, module, collectgarbage, getfenv, setfenv,
// string.dump).  `print` writes to the log (TRACE, INIT).
//
// Errors are returned as text: Lua errors read "path:line: message".
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "sched/ir.h"

struct lua_State;

namespace flagcx {

struct ScriptLimits {
  size_t memoryBytes = size_t(64) << 20;    // per script state
  uint64_t instructions = 200'000'000;      // per entry into the script
  double seconds = 5.0;                     // wall clock per entry into the script
};

// What a schedule is compiled for.  ranksPerHost is exposed to scripts as
// s.ranks_per_host (ranks numbered host by host).
struct Topo {
  int nranks = 1;
  int ranksPerHost = 1;
};

// A bare sandboxed Lua state (also used for the tuning policy).
class Sandbox {
 public:
  static bool create(const std::string &path, const ScriptLimits &limits,
                     std::unique_ptr<Sandbox> *out, std::string *err);
  ~Sandbox();
  lua_State *L() const { return L_; }
  const std::string &path() const;
  // Loads Lua source (never bytecode) as chunk "@path" and runs it, leaving
  // `nresults` values on the stack.
  bool run(const std::string &text, int nresults, std::string *err);
  // lua_pcall with a fresh instruction budget; errors read "path:line: msg".
  bool pcall(int nargs, int nresults, std::string *err);

  struct State;  // allocator accounting and budget, shared with the hooks

 private:
  Sandbox() = default;
  std::unique_ptr<State> state_;
  lua_State *L_ = nullptr;
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

  // Whether the script applies at this topology; `why` says why not.  Lua
  // errors inside a requires function return false with the error in `why`.
  bool supports(const Topo &t, std::string *why);
  // chunks(nranks): N, the number of data-space chunks.
  bool chunks(const Topo &t, int *n, std::string *err);
  // The cost hint: sequential steps and bytes moved per rank, as a fraction
  // of the message.  Missing hints default to steps = nranks-1, bytes = 1.
  bool cost(const Topo &t, double *steps, double *bytes, std::string *err);

  // This rank's schedule.  out->op/algo/nranks/root/chunks are set and
  // out->ranks holds one RankSchedule.
  bool compileRank(const Topo &t, int rank, int root, Schedule *out, std::string *err);
  // Every rank's schedule (out->ranks[r] for rank r), for the verifier.
  bool compileAll(const Topo &t, int root, Schedule *out, std::string *err);


 private:
  Script() = default;
  bool init(const std::string &chunkName, const std::string &text, std::string *err);
  bool callField(const char *field, const Topo &t, int nresults, std::string *err);
  bool buildRank(const Topo &t, int nchunks, int rank, int root, RankSchedule *out,
                 std::string *err);
  bool numberField(const char *table, const char *field, const Topo &t, double def, double *v,
                   std::string *err);

  std::unique_ptr<Sandbox> sb_;
  lua_State *L_ = nullptr;
  int tableRef_ = -1;
  std::string path_, name_, description_, requirements_;
  OpKind op_ = OpKind::Count;
};

}  // namespace flagcx
