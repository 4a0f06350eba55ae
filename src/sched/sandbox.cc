// The Lua sandbox: allocator with a cap, instruction and wall-clock budget,
// the libraries a script may use.
#include "sched/sandbox.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>
}

#include "base/log.h"

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
  if (nsize > osize && st->used - osize + nsize > st->cap) return nullptr;
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

void countHook(lua_State *L, lua_Debug *ar) {
  void *ud = nullptr;
  lua_getallocf(L, &ud);
  auto *st = static_cast<Sandbox::State *>(ud);
  st->count += kHookEvery;
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
  lua_getfield(L, LUA_GLOBALSINDEX, "string");
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  lua_pop(L, 1);
  lua_pushcfunction(L, luaPrint);
  lua_setfield(L, LUA_GLOBALSINDEX, "print");
}

// Lua shortens long chunk names to "...tail"; put the full path back.
std::string fixMessage(const std::string &msg, const std::string &path) {
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
  sb->L_ = lua_newstate(sandboxAlloc, sb->state_.get());
  if (!sb->L_) {
    *err = path + ": cannot create a Lua state";
    return false;
  }
  luaJIT_setmode(sb->L_, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
  openSandbox(sb->L_);
  lua_sethook(sb->L_, countHook, LUA_MASKCOUNT, kHookEvery);
  *out = std::move(sb);
  return true;
}

bool Sandbox::pcall(int nargs, int nresults, std::string *err) {
  State *st = state_.get();
  st->count = 0;
  st->deadline = std::chrono::steady_clock::now() +
                 std::chrono::microseconds(static_cast<int64_t>(st->seconds * 1e6));
  int rc = lua_pcall(L_, nargs, nresults, 0);
  if (rc == 0) return true;
  if (rc == LUA_ERRMEM) {
    *err = st->path + ": script memory limit exceeded (" + std::to_string(st->cap >> 20) + " MiB)";
  } else {
    const char *m = lua_tostring(L_, -1);
    *err = fixMessage(m ? m : "error object is not a string", st->path);
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
