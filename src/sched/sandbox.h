// A sandboxed LuaJIT state: what algorithm scripts (script.h) and the tuning
// policy (tuner.h) run in.
//
// A private lua_State with a memory cap (custom allocator), the JIT off (so
// the count hook that enforces the instruction budget always fires), and only
// base/table/string/math/bit opened, less every base function that reaches
// files or compiles code (dofile, load, loadfile, loadstring, require, module,
// collectgarbage, getfenv, setfenv, string.dump).  `print` writes to the log
// (TRACE, INIT).  Errors are returned as text: Lua errors read
// "path:line: message".
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

struct lua_State;

namespace flagcx {

struct ScriptLimits {
  size_t memoryBytes = size_t(64) << 20;    // per script state
  uint64_t instructions = 200'000'000;      // per entry into the script
  double seconds = 5.0;                     // wall clock per entry into the script
};

class Sandbox {
 public:
  static bool create(const std::string &path, const ScriptLimits &limits,
                     std::unique_ptr<Sandbox> *out, std::string *err);
  ~Sandbox();
  lua_State *L() const { return L_; }
  const std::string &path() const;
  // Bytes the Lua state holds now, and the most it has held.
  size_t memoryBytes() const;
  size_t peakMemoryBytes() const;
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

// t[k] without metamethods (idx may be relative): a script's table with an
// __index that raises would otherwise make LuaJIT panic outside a protected
// call and exit the whole process (found by the script fuzzer).
void rawField(lua_State *L, int idx, const char *k);

}  // namespace flagcx
