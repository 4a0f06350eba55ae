// The script sandbox and the builder that turns build(s) into IR steps.
#include "sched/script.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>
}

#include "base/log.h"
#include "sched/ir_names.h"

namespace flagcx {

// Field reads outside a protected call must not run metamethods: a script's
// table with an __index that raises would otherwise make LuaJIT panic and
// exit the whole process (found by the script fuzzer).
static void rawField(lua_State *L, int idx, const char *k) {
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;
  lua_pushstring(L, k);
  lua_rawget(L, idx);
}

struct Sandbox::State {
  size_t used = 0;
  size_t cap = 0;
  uint64_t budget = 0;
  uint64_t count = 0;
  double seconds = 5.0;
  std::chrono::steady_clock::time_point deadline;
  std::string path;  // full path, to undo Lua's shortening of long chunk names
};

namespace {

constexpr int kHookEvery = 1000;
constexpr int kMaxChunks = 1 << 20;
// A real schedule has a few thousand steps per rank; more is a runaway
// script, stopped before it spends seconds appending (a fuzzer's slow unit).
constexpr size_t kMaxStepsPerRank = size_t(1) << 16;
const char *kRefMeta = "flagcx.chunkref";

void *sandboxAlloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  auto *st = static_cast<Sandbox::State *>(ud);
  if (nsize == 0) {
    std::free(ptr);
    st->used -= osize;
    return nullptr;
  }
  if (nsize > osize && st->used - osize + nsize > st->cap) return nullptr;
  void *p = std::realloc(ptr, nsize);
  if (p) st->used = st->used - osize + nsize;
  return p;
}

void countHook(lua_State *L, lua_Debug *ar) {
  void *ud = nullptr;
  lua_getallocf(L, &ud);
  auto *st = static_cast<Sandbox::State *>(ud);
  st->count += kHookEvery;
  if (st->count <= st->budget) {
    // Instructions are cheap to count; builder calls (C) between them are
    // not, so the wall clock bounds an entry as well.
    if (std::chrono::steady_clock::now() < st->deadline) return;
    lua_getinfo(L, "Sl", ar);
    if (ar->currentline > 0)
      lua_pushfstring(L, "%s:%d: ran for more than %d s: endless work?", ar->short_src,
                      ar->currentline, static_cast<int>(st->seconds));
    else
      lua_pushfstring(L, "ran for more than %d s: endless work?", static_cast<int>(st->seconds));
    lua_error(L);
  }
  lua_getinfo(L, "Sl", ar);
  if (ar->currentline > 0)
    lua_pushfstring(L, "%s:%d: instruction budget exceeded (%d million instructions): endless loop?",
                    ar->short_src, ar->currentline, static_cast<int>(st->budget / 1000000));
  else
    lua_pushfstring(L, "instruction budget exceeded (%d million instructions): endless loop?",
                    static_cast<int>(st->budget / 1000000));
  lua_error(L);
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
  luaL_newmetatable(L, kRefMeta);
  lua_pop(L, 1);
}

// The builder behind one call of build(s).
struct BuildCtx {
  OpKind op;
  int nranks, rank, root, rph, nchunks;
  RankSchedule *out;
  int stage = 0;
  bool stageUsed = false;
};

BuildCtx *ctxOf(lua_State *L) {
  return static_cast<BuildCtx *>(lua_touserdata(L, lua_upvalueindex(1)));
}

bool isRef(lua_State *L, int idx) {
  if (!lua_istable(L, idx) || !lua_getmetatable(L, idx)) return false;
  luaL_getmetatable(L, kRefMeta);
  bool eq = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return eq;
}

// Methods accept both s:f(...) and s.f(...): skip a leading builder table.
int firstArg(lua_State *L) { return (lua_istable(L, 1) && !isRef(L, 1)) ? 2 : 1; }

int toIndex(lua_State *L, int idx, const char *fn, const char *what) {
  if (lua_type(L, idx) != LUA_TNUMBER)
    return luaL_error(L, "%s: %s must be an integer, got %s", fn, what, luaL_typename(L, idx));
  double d = lua_tonumber(L, idx);
  if (d != std::floor(d) || std::fabs(d) > 2e9)
    return luaL_error(L, "%s: %s must be an integer, got %f", fn, what, d);
  return static_cast<int>(d);
}

int makeRef(lua_State *L, BufKind b) {
  BuildCtx *c = ctxOf(L);
  const char *fn = bufName(b);
  int k = toIndex(L, firstArg(L), fn, "chunk index");
  if (b == BufKind::Scratch && c->op == OpKind::AlltoAllv)
    return luaL_error(L, "scratch: alltoallv has no scratch buffer (its chunks have per-peer sizes)");
  int n = bufChunks(c->op, b, c->nchunks, c->nranks);
  if (k < 0 || k >= n) return luaL_error(L, "%s(%d): chunk index out of range 0..%d", fn, k, n - 1);
  lua_createtable(L, 0, 2);
  lua_pushstring(L, fn);
  lua_setfield(L, -2, "buf");
  lua_pushinteger(L, k);
  lua_setfield(L, -2, "chunk");
  luaL_getmetatable(L, kRefMeta);
  lua_setmetatable(L, -2);
  return 1;
}
int luaInput(lua_State *L) { return makeRef(L, BufKind::Input); }
int luaOutput(lua_State *L) { return makeRef(L, BufKind::Output); }
int luaScratch(lua_State *L) { return makeRef(L, BufKind::Scratch); }

ChunkRef toRef(lua_State *L, int idx, const char *fn, const char *what) {
  if (!isRef(L, idx))
    luaL_error(L, "%s: %s must be a chunk such as s.output(k), got %s", fn, what,
               luaL_typename(L, idx));
  lua_getfield(L, idx, "buf");
  const char *b = lua_tostring(L, -1);
  ChunkRef r{BufKind::Input, 0};
  if (b && !std::strcmp(b, "output")) r.buf = BufKind::Output;
  else if (b && !std::strcmp(b, "scratch")) r.buf = BufKind::Scratch;
  lua_pop(L, 1);
  lua_getfield(L, idx, "chunk");
  r.chunk = static_cast<int32_t>(lua_tointeger(L, -1));
  lua_pop(L, 1);
  BuildCtx *c = ctxOf(L);
  int n = bufChunks(c->op, r.buf, c->nchunks, c->nranks);
  if (r.chunk < 0 || r.chunk >= n)
    luaL_error(L, "%s: %s %s out of range (%d chunks)", fn, what, refText(r).c_str(), n);
  return r;
}

void addStep(lua_State *L, BuildCtx *c, Step st) {
  if (c->out->steps.size() >= kMaxStepsPerRank)
    luaL_error(L, "more than %d steps on one rank", static_cast<int>(kMaxStepsPerRank));
  st.stage = c->stage;
  c->stageUsed = true;
  c->out->steps.push_back(st);
}

int p2p(lua_State *L, StepKind kind) {
  BuildCtx *c = ctxOf(L);
  const char *fn = stepKindName(kind);
  int a = firstArg(L);
  int peer = toIndex(L, a, fn, "peer");
  if (peer < 0 || peer >= c->nranks)
    return luaL_error(L, "%s: peer %d out of range 0..%d", fn, peer, c->nranks - 1);
  if (peer == c->rank)
    return luaL_error(L, "%s: peer is this rank (%d); use s:copy or s:reduce for local data", fn,
                      peer);
  ChunkRef r = toRef(L, a + 1, fn, "chunk");
  Step st{kind, peer, {}, {}, 0};
  if (kind == StepKind::Send) st.src = r;
  else st.dst = r;
  addStep(L, c, st);
  return 0;
}
int luaSend(lua_State *L) { return p2p(L, StepKind::Send); }
int luaRecv(lua_State *L) { return p2p(L, StepKind::Recv); }
int luaRecvReduce(lua_State *L) { return p2p(L, StepKind::RecvReduce); }

int local(lua_State *L, StepKind kind) {
  BuildCtx *c = ctxOf(L);
  const char *fn = stepKindName(kind);
  int a = firstArg(L);
  ChunkRef src = toRef(L, a, fn, "source");
  ChunkRef dst = toRef(L, a + 1, fn, "destination");
  if (src.buf == dst.buf && src.chunk == dst.chunk)
    return luaL_error(L, "%s: source and destination are the same chunk %s", fn,
                      refText(src).c_str());
  addStep(L, c, Step{kind, -1, src, dst, 0});
  return 0;
}
int luaCopy(lua_State *L) { return local(L, StepKind::Copy); }
int luaReduce(lua_State *L) { return local(L, StepKind::Reduce); }

void closeStage(BuildCtx *c) {
  if (c->stageUsed) {
    c->stage++;
    c->stageUsed = false;
  }
}
int luaStage(lua_State *L) {
  closeStage(ctxOf(L));
  return 0;
}
int luaGroup(lua_State *L) {
  BuildCtx *c = ctxOf(L);
  int a = firstArg(L);
  luaL_checktype(L, a, LUA_TFUNCTION);
  closeStage(c);
  lua_pushvalue(L, a);
  lua_call(L, 0, 0);
  closeStage(c);
  return 0;
}

void pushBuilder(lua_State *L, BuildCtx *c) {
  lua_createtable(L, 0, 20);
  auto setInt = [&](const char *k, int v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
  };
  setInt("rank", c->rank);
  setInt("nranks", c->nranks);
  setInt("root", c->root);
  setInt("chunks", c->nchunks);
  setInt("block", c->nranks > 0 ? c->nchunks / c->nranks : 0);
  setInt("ranks_per_host", c->rph);
  lua_pushstring(L, opName(c->op));
  lua_setfield(L, -2, "op");
  static const struct {
    const char *name;
    lua_CFunction fn;
  } fns[] = {{"input", luaInput},   {"output", luaOutput},
             {"scratch", luaScratch}, {"send", luaSend},
             {"recv", luaRecv},     {"recv_reduce", luaRecvReduce},
             {"copy", luaCopy},     {"reduce", luaReduce},
             {"stage", luaStage},   {"group", luaGroup}};
  for (const auto &f : fns) {
    lua_pushlightuserdata(L, c);
    lua_pushcclosure(L, f.fn, 1);
    lua_setfield(L, -2, f.name);
  }
}

bool validName(const std::string &s) {
  if (s.empty() || s.size() > 64) return false;
  for (char ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-')) return false;
  return true;
}

}  // namespace

Script::~Script() = default;

bool Script::load(const std::string &path, std::unique_ptr<Script> *out, std::string *err,
                  const ScriptLimits &limits) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *err = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return loadText(path, ss.str(), out, err, limits);
}

bool Script::loadText(const std::string &chunkName, const std::string &text,
                      std::unique_ptr<Script> *out, std::string *err,
                      const ScriptLimits &limits) {
  std::unique_ptr<Script> s(new Script());
  s->path_ = chunkName;
  if (!Sandbox::create(chunkName, limits, &s->sb_, err)) return false;
  s->L_ = s->sb_->L();
  if (!s->init(chunkName, text, err)) return false;
  *out = std::move(s);
  return true;
}

namespace {
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

bool Script::init(const std::string &chunkName, const std::string &text, std::string *err) {
  if (!sb_->run(text, 1, err)) return false;
  if (!lua_istable(L_, -1)) {
    *err = chunkName + ": the script must return a table (name, op, chunks, build, ...), got " +
           luaL_typename(L_, -1);
    return false;
  }
  int t = lua_gettop(L_);
  auto fieldErr = [&](const std::string &m) {
    *err = chunkName + ": " + m;
    return false;
  };
  rawField(L_, t, "name");
  if (!lua_isstring(L_, -1) || lua_type(L_, -1) != LUA_TSTRING)
    return fieldErr("field 'name' must be a string");
  name_ = lua_tostring(L_, -1);
  if (!validName(name_)) return fieldErr("field 'name' must be letters, digits, '_' or '-'");
  rawField(L_, t, "op");
  if (lua_type(L_, -1) != LUA_TSTRING) return fieldErr("field 'op' must be a string");
  if (!opFromName(lua_tostring(L_, -1), &op_))
    return fieldErr(std::string("unknown op '") + lua_tostring(L_, -1) +
                    "' (allreduce, reduce, broadcast, allgather, gather, reducescatter, "
                    "scatter, alltoall, alltoallv, barrier)");
  rawField(L_, t, "build");
  if (!lua_isfunction(L_, -1)) return fieldErr("field 'build' must be a function build(s)");
  rawField(L_, t, "chunks");
  if (!lua_isfunction(L_, -1) && lua_type(L_, -1) != LUA_TNUMBER)
    return fieldErr("field 'chunks' must be a function chunks(nranks) or a number");
  rawField(L_, t, "description");
  if (lua_type(L_, -1) == LUA_TSTRING) description_ = lua_tostring(L_, -1);
  rawField(L_, t, "cost");
  if (!lua_isnil(L_, -1) && !lua_istable(L_, -1))
    return fieldErr("field 'cost' must be a table {steps=..., bytes=...}");
  rawField(L_, t, "requires");
  if (lua_isnil(L_, -1)) {
    requirements_ = "none";
  } else if (lua_isfunction(L_, -1)) {
    requirements_ = "custom";
  } else if (lua_istable(L_, -1)) {
    int rq = lua_gettop(L_);
    lua_pushnil(L_);
    while (lua_next(L_, rq)) {
      std::string key = lua_type(L_, -2) == LUA_TSTRING ? lua_tostring(L_, -2) : "?";
      if (key == "min_ranks" || key == "max_ranks" || key == "multiple_of") {
        if (lua_type(L_, -1) != LUA_TNUMBER)
          return fieldErr("requires." + key + " must be a number");
      } else if (key != "pow2") {
        return fieldErr("unknown requirement '" + key +
                        "' (pow2, min_ranks, max_ranks, multiple_of, or a function)");
      }
      lua_pop(L_, 1);
    }
    // Described in a fixed order (table iteration order is not).
    for (const char *key : {"pow2", "min_ranks", "max_ranks", "multiple_of"}) {
      rawField(L_, rq, key);
      if (lua_type(L_, -1) == LUA_TNUMBER)
        requirements_ += (requirements_.empty() ? "" : ", ") + std::string(key) + "=" +
                         std::to_string(static_cast<long long>(lua_tonumber(L_, -1)));
      else if (lua_toboolean(L_, -1))
        requirements_ += (requirements_.empty() ? "" : ", ") + std::string(key);
      lua_pop(L_, 1);
    }
    if (requirements_.empty()) requirements_ = "none";
  } else {
    return fieldErr("field 'requires' must be a table or a function(nranks, ranks_per_host)");
  }
  lua_settop(L_, t);
  tableRef_ = luaL_ref(L_, LUA_REGISTRYINDEX);
  return true;
}

// Pushes table[field] and, when it is a function, calls it with (nranks,
// ranks_per_host), leaving `nresults` values.  A plain value is left as is
// (nresults must then be 1).
bool Script::callField(const char *field, const Topo &t, int nresults, std::string *err) {
  lua_rawgeti(L_, LUA_REGISTRYINDEX, tableRef_);
  rawField(L_, -1, field);
  lua_remove(L_, -2);
  if (!lua_isfunction(L_, -1)) return true;
  lua_pushinteger(L_, t.nranks);
  lua_pushinteger(L_, t.ranksPerHost);
  return sb_->pcall(2, nresults, err);
}

bool Script::supports(const Topo &t, std::string *why) {
  lua_rawgeti(L_, LUA_REGISTRYINDEX, tableRef_);
  rawField(L_, -1, "requires");
  lua_remove(L_, -2);
  int top = lua_gettop(L_);
  bool ok = true;
  if (lua_isfunction(L_, -1)) {
    lua_pushinteger(L_, t.nranks);
    lua_pushinteger(L_, t.ranksPerHost);
    if (!sb_->pcall(2, 2, why)) return false;
    ok = lua_toboolean(L_, -2);
    if (!ok)
      *why = lua_isstring(L_, -1) ? lua_tostring(L_, -1) : "its requires function said no";
    lua_settop(L_, top - 1);
    return ok;
  }
  if (lua_istable(L_, -1)) {
    int n = t.nranks;
    rawField(L_, top, "pow2");
    if (lua_toboolean(L_, -1) && (n & (n - 1)) != 0) {
      ok = false;
      *why = "needs a power-of-two number of ranks";
    }
    rawField(L_, top, "min_ranks");
    if (ok && lua_isnumber(L_, -1) && n < lua_tonumber(L_, -1)) {
      ok = false;
      *why = "needs at least " + std::to_string(lua_tointeger(L_, -1)) + " ranks";
    }
    rawField(L_, top, "max_ranks");
    if (ok && lua_isnumber(L_, -1) && n > lua_tonumber(L_, -1)) {
      ok = false;
      *why = "needs at most " + std::to_string(lua_tointeger(L_, -1)) + " ranks";
    }
    rawField(L_, top, "multiple_of");
    if (ok && lua_isnumber(L_, -1) && lua_tointeger(L_, -1) > 0 &&
        n % lua_tointeger(L_, -1) != 0) {
      ok = false;
      *why = "needs a multiple of " + std::to_string(lua_tointeger(L_, -1)) + " ranks";
    }
  }
  lua_settop(L_, top - 1);
  return ok;
}

bool Script::chunks(const Topo &t, int *n, std::string *err) {
  if (!callField("chunks", t, 1, err)) return false;
  bool isNum = lua_type(L_, -1) == LUA_TNUMBER;
  double d = isNum ? lua_tonumber(L_, -1) : 0;
  lua_pop(L_, 1);
  if (!isNum || d != std::floor(d) || d < 1 || d > kMaxChunks) {
    *err = path_ + ": chunks(" + std::to_string(t.nranks) + ") must return an integer in 1.." +
           std::to_string(kMaxChunks);
    return false;
  }
  *n = static_cast<int>(d);
  return true;
}

bool Script::numberField(const char *table, const char *field, const Topo &t, double def,
                         double *v, std::string *err) {
  lua_rawgeti(L_, LUA_REGISTRYINDEX, tableRef_);
  rawField(L_, -1, table);
  lua_remove(L_, -2);
  if (!lua_istable(L_, -1)) {
    lua_pop(L_, 1);
    *v = def;
    return true;
  }
  rawField(L_, -1, field);
  lua_remove(L_, -2);
  if (lua_isnil(L_, -1)) {
    lua_pop(L_, 1);
    *v = def;
    return true;
  }
  if (lua_isfunction(L_, -1)) {
    lua_pushinteger(L_, t.nranks);
    lua_pushinteger(L_, t.ranksPerHost);
    if (!sb_->pcall(2, 1, err)) return false;
  }
  bool isNum = lua_type(L_, -1) == LUA_TNUMBER;
  *v = isNum ? lua_tonumber(L_, -1) : 0;
  lua_pop(L_, 1);
  if (!isNum || !std::isfinite(*v) || *v < 0) {
    *err = path_ + ": " + table + "." + field + " must be a non-negative number";
    return false;
  }
  return true;
}

bool Script::cost(const Topo &t, double *steps, double *bytes, std::string *err) {
  return numberField("cost", "steps", t, t.nranks - 1, steps, err) &&
         numberField("cost", "bytes", t, 1.0, bytes, err);
}

bool Script::buildRank(const Topo &t, int nchunks, int rank, int root, RankSchedule *out,
                       std::string *err) {
  out->steps.clear();
  out->nstages = 0;
  BuildCtx c{op_, t.nranks, rank, root, t.ranksPerHost, nchunks, out};
  lua_rawgeti(L_, LUA_REGISTRYINDEX, tableRef_);
  rawField(L_, -1, "build");
  lua_remove(L_, -2);
  pushBuilder(L_, &c);
  if (!sb_->pcall(1, 0, err)) return false;
  out->nstages = c.stageUsed ? c.stage + 1 : c.stage;
  return true;
}

namespace {
std::string where(const Script &s, const Topo &t, int rank, int root) {
  std::string w = std::string("compile ") + opName(s.op()) + "/" + s.name() +
                  " nranks=" + std::to_string(t.nranks);
  if (opIsRooted(s.op())) w += " root=" + std::to_string(root);
  if (rank >= 0) w += " rank=" + std::to_string(rank);
  return w + ": ";
}

bool checkTopo(const Script &s, const Topo &t, int root, std::string *err) {
  if (t.nranks < 1 || t.ranksPerHost < 1 || root < 0 || root >= t.nranks) {
    *err = where(s, t, -1, root) + "invalid nranks/ranks_per_host/root";
    return false;
  }
  return true;
}
}  // namespace

bool Script::compileRank(const Topo &t, int rank, int root, Schedule *out, std::string *err) {
  if (!checkTopo(*this, t, root, err)) return false;
  std::string e;
  int n = 0;
  if (!chunks(t, &n, &e)) {
    *err = where(*this, t, -1, root) + e;
    return false;
  }
  out->op = op_;
  out->algo = name_;
  out->nranks = t.nranks;
  out->root = opIsRooted(op_) ? root : 0;
  out->chunks = n;
  out->ranks.assign(1, RankSchedule{});
  if (!buildRank(t, n, rank, out->root, &out->ranks[0], &e)) {
    *err = where(*this, t, rank, root) + e;
    return false;
  }
  return true;
}

bool Script::compileAll(const Topo &t, int root, Schedule *out, std::string *err) {
  if (!checkTopo(*this, t, root, err)) return false;
  std::string e;
  int n = 0;
  if (!chunks(t, &n, &e)) {
    *err = where(*this, t, -1, root) + e;
    return false;
  }
  out->op = op_;
  out->algo = name_;
  out->nranks = t.nranks;
  out->root = opIsRooted(op_) ? root : 0;
  out->chunks = n;
  out->ranks.assign(t.nranks, RankSchedule{});
  for (int r = 0; r < t.nranks; r++) {
    if (!buildRank(t, n, r, out->root, &out->ranks[r], &e)) {
      *err = where(*this, t, r, root) + e;
      return false;
    }
  }
  lua_gc(L_, LUA_GCCOLLECT, 0);
  return true;
}

}  // namespace flagcx
