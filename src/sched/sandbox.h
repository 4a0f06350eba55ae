// A sandboxed LuaJIT state: what algorithm scripts (script.h) and the tuning
// policy (tuner.h) run in.
//
// A private lua_State with a memory cap (custom allocator), the JIT off (so
// the hooks always fire), and only base/table/string/math/bit opened, less
// every base function that reaches files or compiles code (dofile, load,
// loadfile, loadstring, require, module, collectgarbage, getfenv, setfenv,
// string.dump) and Lua patterns (string.find/match/gmatch/gsub: their time
// is spent in C, out of reach of the budget).  Each entry into the script is
// bounded in instructions, wall-clock time and C stack (recursion through C
// functions such as coroutine.wrap or a table.sort comparator is an error,
// never a crash; sandbox.cc says how).  `print` writes to the log (TRACE,
// INIT).  Errors are returned as text: Lua errors read "path:line: message".
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
  // C stack per entry: recursion through C functions stops here.  Real
  // scripts nest a few C calls of under 1 KiB each.  A chain of nested
  // coroutines takes about 80 bytes a level: it stops near 800 deep, where
  // the message coroutine.wrap lengthens at every level (by "path:line: ")
  // still fits the memory cap (at 3000 deep it did not).
  size_t cStackBytes = size_t(64) << 10;
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
