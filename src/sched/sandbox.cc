// The Lua sandbox: allocator with a cap, instruction, wall-clock and C-stack
// bounds, the libraries a script may use.
#include "sched/sandbox.h"

#include <pthread.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>
}

#include "base/base.h"

namespace flagcx {

void rawField(lua_State *L, int idx, const char *k) {
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;
  lua_pushstring(L, k);
  lua_rawget(L, idx);
}

struct Sandbox::State {
  size_t used = 0;
  size_t peak = 0;
  size_t cap = 0;
  uint64_t budget = 0;
  uint64_t count = 0;
  double seconds = 5.0;
  std::chrono::steady_clock::time_point deadline;
  std::string path;  // full path, to undo Lua's shortening of long chunk names
  size_t cstack = 0;         // C stack one entry into the script may use
  size_t allowed = 0;        // what the running entry got (less on a small thread)
  uintptr_t stackFloor = 0;  // no function may start below this address (0: idle)
  bool refused = false;      // the allocator said no during this entry
  int lastLine = 0;          // where the count hook last found the script
};

namespace {

constexpr int kHookEvery = 1000;

void *sandboxAlloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  auto *st = static_cast<Sandbox::State *>(ud);
  if (nsize == 0) {
    std::free(ptr);
    st->used -= osize;
    return nullptr;
  }
  if (nsize > osize && st->used - osize + nsize > st->cap) {
    st->refused = true;
    return nullptr;
  }
  void *p = std::realloc(ptr, nsize);
  if (p) {
    st->used = st->used - osize + nsize;
    if (st->used > st->peak) st->peak = st->used;
  }
  return p;
}

// Raises "path:line: <what>" (or "<what>" when no line is known).
[[noreturn]] void hookError(lua_State *L, lua_Debug *ar, const char *what) {
  lua_getinfo(L, "Sl", ar);
  if (ar->currentline > 0) lua_pushfstring(L, "%s:%d: %s", ar->short_src, ar->currentline, what);
  else lua_pushstring(L, what);
  lua_error(L);
  __builtin_unreachable();
}

Sandbox::State *stateOf(lua_State *L) {
  void *ud = nullptr;
  lua_getallocf(L, &ud);
  return static_cast<Sandbox::State *>(ud);
}

void countHook(lua_State *L, lua_Debug *ar, Sandbox::State *st) {
  st->count += kHookEvery;
  if (lua_getinfo(L, "l", ar) && ar->currentline > 0) st->lastLine = ar->currentline;
  char what[96];
  if (st->count <= st->budget) {
    // Instructions are cheap to count; builder calls (C) between them are
    // not, so the wall clock bounds an entry as well.
    if (std::chrono::steady_clock::now() < st->deadline) return;
    snprintf(what, sizeof(what), "ran for more than %d s: endless work?",
             static_cast<int>(st->seconds));
    hookError(L, ar, what);
  }
  snprintf(what, sizeof(what),
           "instruction budget exceeded (%d million instructions): endless loop?",
           static_cast<int>(st->budget / 1000000));
  hookError(L, ar, what);
}

// The C stack.  Plain Lua recursion never grows it (LuaJIT keeps Lua frames,
// metamethod calls and pcall on the Lua stack, whose size LuaJIT bounds: "stack
// overflow").  What grows it is a C function that calls back into Lua: a
// table.sort comparator or __lt, string.format's __tostring, coroutine.resume
// and coroutine.wrap (each nested resume is a C frame), s:group, an xpcall
// handler.  Unchecked, recursion through those runs off the end of the
// thread's stack (SIGSEGV).  Every such cycle enters a function at each turn,
// so a call hook sees each turn and compares the frame address with a floor
// set when the entry began (Sandbox::pcall): no list of dangerous functions
// to keep up to date, and no thread switch per call (running scripts on a
// thread of their own would cost one per build call, thousands per init).
// The floor is ScriptLimits::cStackBytes below the entry, less when the
// calling thread has less room, leaving kStackReserve (half the room on a
// small thread) for what may follow the last check: one library function's
// frame (a luaL_Buffer is 8 KiB), raising the error, the unwinder, the
// message handler.
constexpr size_t kStackReserve = size_t(128) << 10;

uintptr_t frameAddress() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }

// The lowest address of this thread's stack (0 when unknown), read once.
uintptr_t threadStackLow() {
  thread_local uintptr_t low = [] {
    uintptr_t r = 0;
    pthread_attr_t a;
    if (pthread_getattr_np(pthread_self(), &a) != 0) return r;
    void *addr = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&a, &addr, &size) == 0) r = reinterpret_cast<uintptr_t>(addr);
    pthread_attr_destroy(&a);
    return r;
  }();
  return low;
}

// How much C stack an entry starting at `here` may use (stacks grow down on
// every target we build for).  A thread short of room (a 128 KiB musl thread)
// splits what it has in half rather than refusing every call.
size_t stackAllowance(uintptr_t here, size_t want) {
  uintptr_t low = threadStackLow();
  size_t room = low && low < here ? here - low : want + kStackReserve;
  return std::min(want, room >= 2 * kStackReserve ? room - kStackReserve : room / 2);
}

// "path:line: C stack limit ...", the line of the innermost Lua frame that
// has one (tail calls leave only the C frames of a recursion), else the
// function being entered (a coroutine's first function).
[[noreturn]] void stackError(lua_State *L, lua_Debug *ar, Sandbox::State *st) {
  lua_Debug d;
  char where[300] = "";
  for (int level = 1; !where[0] && lua_getstack(L, level, &d); level++)
    if (lua_getinfo(L, "Sl", &d) && d.currentline > 0)
      snprintf(where, sizeof(where), "%s:%d: ", d.short_src, d.currentline);
  if (!where[0] && lua_getinfo(L, "Sl", ar)) {
    int line = ar->currentline > 0 ? ar->currentline : ar->linedefined;
    if (line > 0) snprintf(where, sizeof(where), "%s:%d: ", ar->short_src, line);
  }
  char what[512];
  snprintf(what, sizeof(what),
           "%sC stack limit reached (%zu KiB): recursion through C functions "
           "(coroutine.wrap/resume, table.sort, string.format of a __tostring, s:group) "
           "is too deep",
           where, st->allowed >> 10);
  lua_pushstring(L, what);
  lua_error(L);
  __builtin_unreachable();
}

// lua_pcall's message handler.  It runs where the error was raised, so it
// can still name the script's line when LuaJIT did not: an error raised inside
// a library function ("stack overflow" entering one), error(msg, 0) passed
// up, an error value that is not a string (never converted through its
// metatable: that would run script code here).
int placeError(lua_State *L) {
  const char *m = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : nullptr;
  lua_Debug d;
  for (int level = 1; lua_getstack(L, level, &d); level++) {
    if (!lua_getinfo(L, "Sl", &d) || d.currentline <= 0) continue;
    size_t n = std::strlen(d.short_src);
    if (m && !std::strncmp(m, d.short_src, n) && m[n] == ':') return 1;  // placed already
    if (m) lua_pushfstring(L, "%s:%d: %s", d.short_src, d.currentline, m);
    else
      lua_pushfstring(L, "%s:%d: error value is a %s, not a string", d.short_src,
                      d.currentline, luaL_typename(L, 1));
    return 1;
  }
  if (!m) lua_pushfstring(L, "error value is a %s, not a string", luaL_typename(L, 1));
  return 1;
}

void sandboxHook(lua_State *L, lua_Debug *ar) {
  Sandbox::State *st = stateOf(L);
  if (ar->event != LUA_HOOKCALL) return countHook(L, ar, st);
  if (frameAddress() >= st->stackFloor) return;
  // The message handler may start below the floor: it reports the error
  // that brought the script there, and calls nothing (kStackReserve).
  lua_getinfo(L, "f", ar);
  bool handler = lua_tocfunction(L, -1) == placeError;
  lua_pop(L, 1);
  if (!handler) stackError(L, ar, st);
}

// string.rep that refuses, with the script's line, a result that cannot fit
// the memory limit (LuaJIT builds it in a buffer, then copies it: twice the
// size at once) instead of failing inside the allocator without one.
int luaRep(lua_State *L) {
  size_t len = 0, seplen = 0;
  luaL_checklstring(L, 1, &len);
  lua_Number n = luaL_checknumber(L, 2);
  luaL_optlstring(L, 3, "", &seplen);
  Sandbox::State *st = stateOf(L);
  double bytes = n > 0 ? len * n + seplen * (n - 1) : 0;
  if (2 * bytes > static_cast<double>(st->cap - st->used)) {
    char what[128];
    snprintf(what, sizeof(what),
             "script memory limit exceeded (%zu MiB): string.rep of %.0f bytes does not fit",
             st->cap >> 20, bytes);
    return luaL_error(L, "%s", what);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

int luaPrint(lua_State *L) {
  std::string line;
  int n = lua_gettop(L);
  for (int i = 1; i <= n; i++) {
    size_t len = 0;
    const char *s = lua_tolstring(L, i, &len);
    if (i > 1) line += '\t';
    line += s ? std::string(s, len) : std::string(luaL_typename(L, i));
  }
  TRACE(kInit, "script: %s", line.c_str());
  return 0;
}

void openSandbox(lua_State *L) {
  static const struct {
    const char *name;
    lua_CFunction fn;
  } libs[] = {{"", luaopen_base},
              {LUA_TABLIBNAME, luaopen_table},
              {LUA_STRLIBNAME, luaopen_string},
              {LUA_MATHLIBNAME, luaopen_math},
              {LUA_BITLIBNAME, luaopen_bit}};
  for (const auto &lib : libs) {
    lua_pushcfunction(L, lib.fn);
    lua_pushstring(L, lib.name);
    lua_call(L, 1, 0);
  }
  static const char *const banned[] = {"dofile",  "load",    "loadfile",       "loadstring",
                                       "require", "module",  "collectgarbage", "getfenv",
                                       "setfenv", "newproxy", "gcinfo",        "io",
                                       "os",      "debug",   "package",        "jit",
                                       "ffi"};
  for (const char *name : banned) {
    lua_pushnil(L);
    lua_setfield(L, LUA_GLOBALSINDEX, name);
  }
  // Lua patterns go too: one call of find/match/gmatch/gsub can backtrack in
  // C for hours (string.find(string.rep("a", 2000), "a*a*a*a*a*a*a*a*b")),
  // out of reach of the instruction budget and the wall clock, which are
  // checked between instructions; plain find is O(n*m) in C as well.
  // Schedules and policies compare names with == and take pieces with
  // string.sub/byte.
  lua_getfield(L, LUA_GLOBALSINDEX, "string");
  for (const char *name : {"dump", "find", "match", "gmatch", "gsub"}) {
    lua_pushnil(L);
    lua_setfield(L, -2, name);
  }
  lua_getfield(L, -1, "rep");
  lua_pushcclosure(L, luaRep, 1);
  lua_setfield(L, -2, "rep");
  lua_pop(L, 1);
  lua_pushcfunction(L, luaPrint);
  lua_setfield(L, LUA_GLOBALSINDEX, "print");
}

// coroutine.wrap adds its caller's "place: " to an error at every level it
// passes through: keep one.
std::string dropRepeatedPlace(std::string msg) {
  size_t i = msg.find(':');
  for (; i != std::string::npos; i = msg.find(':', i + 1)) {
    size_t d = i + 1;
    while (d < msg.size() && std::isdigit(static_cast<unsigned char>(msg[d]))) d++;
    if (d > i + 1 && msg.compare(d, 2, ": ") == 0) break;
  }
  if (i == std::string::npos) return msg;
  size_t n = msg.find(": ", i) + 2;
  size_t k = n;
  while (msg.compare(k, n, msg, 0, n) == 0) k += n;
  return msg.erase(n, k - n);
}

// Lua shortens long chunk names to "...tail"; put the full path back.
std::string fixMessage(const std::string &raw, const std::string &path) {
  std::string msg = dropRepeatedPlace(raw);
  if (msg.rfind("...", 0) == 0) {
    size_t colon = msg.find(':', 3);
    if (colon != std::string::npos) {
      std::string tail = msg.substr(3, colon - 3);
      if (path.size() >= tail.size() &&
          path.compare(path.size() - tail.size(), tail.size(), tail) == 0)
        return path + msg.substr(colon);
    }
  }
  return msg;
}

}  // namespace

Sandbox::~Sandbox() {
  if (L_) lua_close(L_);
}

const std::string &Sandbox::path() const { return state_->path; }
size_t Sandbox::memoryBytes() const { return state_->used; }
size_t Sandbox::peakMemoryBytes() const { return state_->peak; }

bool Sandbox::create(const std::string &path, const ScriptLimits &limits,
                     std::unique_ptr<Sandbox> *out, std::string *err) {
  std::unique_ptr<Sandbox> sb(new Sandbox());
  sb->state_ = std::make_unique<State>();
  sb->state_->cap = limits.memoryBytes;
  sb->state_->budget = limits.instructions;
  sb->state_->seconds = limits.seconds;
  sb->state_->path = path;
  sb->state_->cstack = limits.cStackBytes;
  sb->L_ = lua_newstate(sandboxAlloc, sb->state_.get());
  if (!sb->L_) {
    *err = path + ": cannot create a Lua state";
    return false;
  }
  luaJIT_setmode(sb->L_, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
  openSandbox(sb->L_);
  lua_sethook(sb->L_, sandboxHook, LUA_MASKCOUNT | LUA_MASKCALL, kHookEvery);
  *out = std::move(sb);
  return true;
}

bool Sandbox::pcall(int nargs, int nresults, std::string *err) {
  State *st = state_.get();
  st->count = 0;
  st->refused = false;
  st->lastLine = 0;
  st->deadline = std::chrono::steady_clock::now() +
                 std::chrono::microseconds(static_cast<int64_t>(st->seconds * 1e6));
  bool outer = st->stackFloor == 0;  // an entry from inside keeps the outer floor
  if (outer) {
    uintptr_t here = frameAddress();
    st->allowed = stackAllowance(here, st->cstack);
    st->stackFloor = here - st->allowed;
  }
  int base = lua_gettop(L_) - nargs;  // the function's slot
  lua_pushcfunction(L_, placeError);
  lua_insert(L_, base);
  int rc = lua_pcall(L_, nargs, nresults, base);
  lua_remove(L_, base);
  if (outer) st->stackFloor = 0;
  if (rc == 0) return true;
  const char *m = lua_tostring(L_, -1);
  // A memory error re-raised by coroutine.wrap arrives as a runtime error,
  // one in the message handler (no room left for the message) as LUA_ERRERR.
  static const char kNoMem[] = "not enough memory";
  size_t mlen = m ? std::strlen(m) : 0;
  bool noMem = mlen >= sizeof(kNoMem) - 1 && !std::strcmp(m + mlen - (sizeof(kNoMem) - 1), kNoMem);
  if (rc == LUA_ERRMEM || (st->refused && (noMem || rc == LUA_ERRERR))) {
    *err = st->path + ": script memory limit exceeded (" + std::to_string(st->cap >> 20) + " MiB)";
    if (st->lastLine > 0) *err += ", last seen running line " + std::to_string(st->lastLine);
  } else {
    *err = fixMessage(m ? m : "error value is not a string", st->path);
    if (err->compare(0, st->path.size(), st->path) != 0) *err = st->path + ": " + *err;
  }
  lua_pop(L_, 1);
  return false;
}

bool Sandbox::run(const std::string &text, int nresults, std::string *err) {
  const std::string &path = state_->path;
  if (!text.empty() && text[0] == LUA_SIGNATURE[0]) {
    *err = path + ": precompiled bytecode is not accepted; give Lua source";
    return false;
  }
  std::string at = "@" + path;
  int rc = luaL_loadbuffer(L_, text.data(), text.size(), at.c_str());
  if (rc != 0) {
    const char *m = lua_tostring(L_, -1);
    *err = rc == LUA_ERRMEM ? path + ": script memory limit exceeded"
                            : fixMessage(m ? m : "syntax error", path);
    lua_pop(L_, 1);
    return false;
  }
  return pcall(0, nresults, err);
}

}  // namespace flagcx
