// Algorithm scripts: the table a script returns, and the builder that turns
// build(s) into IR steps.
#include "sched/script.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
}

#include "base/base.h"
#include "sched/in_place.h"
#include "sched/ir_names.h"

namespace flagcx {

namespace {

constexpr int kMaxChunks = 1 << 20;
// A runaway script is stopped before it spends seconds appending (a fuzzer's
// slow unit).  Real schedules stay far below this: a few steps per chunk and
// per peer (alltoall/bruck at 16384 ranks adds 229k).
size_t maxStepsPerRank(int nranks, int nchunks) {
  return (size_t(1) << 16) + size_t(16) * (static_cast<size_t>(nranks) + nchunks);
}

// The builder behind one call of build(s).
struct BuildCtx {
  OpKind op;
  int nranks, rank, rph, nchunks, scratchCopies;
  int refMeta;  // registry reference of the chunk-reference metatable
  size_t maxSteps;
  RankSchedule *out;
  int stage = 0;
  size_t foldSources = 0;  // stored so far, counted with the steps
  bool stageUsed = false;
  bool readRph = false;
};

BuildCtx *ctxOf(lua_State *L) {
  return static_cast<BuildCtx *>(lua_touserdata(L, lua_upvalueindex(1)));
}

// A chunk reference is a full userdata holding a ChunkRef, marked by the
// script's own metatable.
const ChunkRef *refAt(lua_State *L, BuildCtx *c, int idx) {
  void *p = lua_touserdata(L, idx);
  if (!p || lua_islightuserdata(L, idx) || !lua_getmetatable(L, idx)) return nullptr;
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->refMeta);
  bool eq = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return eq ? static_cast<const ChunkRef *>(p) : nullptr;
}

// Methods accept both s:f(...) and s.f(...): skip a leading builder table.
int firstArg(lua_State *L) { return lua_istable(L, 1) ? 2 : 1; }

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
  int n = bufChunks(c->op, b, c->nchunks, c->nranks, c->scratchCopies);
  if (k < 0 || k >= n) return luaL_error(L, "%s(%d): chunk index out of range 0..%d", fn, k, n - 1);
  auto *r = static_cast<ChunkRef *>(lua_newuserdata(L, sizeof(ChunkRef)));
  *r = ChunkRef{b, k};
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->refMeta);
  lua_setmetatable(L, -2);
  return 1;
}
int luaInput(lua_State *L) { return makeRef(L, BufKind::Input); }
int luaOutput(lua_State *L) { return makeRef(L, BufKind::Output); }
int luaScratch(lua_State *L) { return makeRef(L, BufKind::Scratch); }

// tostring(ref): "output[3]".
int luaRefText(lua_State *L) {
  const auto *r = static_cast<const ChunkRef *>(lua_touserdata(L, 1));
  std::string t = r ? refText(*r) : "?";
  lua_pushlstring(L, t.data(), t.size());
  return 1;
}

ChunkRef toRef(lua_State *L, int idx, const char *fn, const char *what) {
  BuildCtx *c = ctxOf(L);
  const ChunkRef *p = refAt(L, c, idx);
  if (!p)
    luaL_error(L, "%s: %s must be a chunk such as s.output(k), got %s", fn, what,
               luaL_typename(L, idx));
  int n = bufChunks(c->op, p->buf, c->nchunks, c->nranks, c->scratchCopies);
  if (p->chunk >= n)  // a reference kept from a build at another size
    luaL_error(L, "%s: %s %s out of range (%d chunks)", fn, what, refText(*p).c_str(), n);
  return *p;
}

void addStep(lua_State *L, BuildCtx *c, Step st) {
  if (c->out->steps.size() >= c->maxSteps)
    luaL_error(L, "more than %d steps on one rank", static_cast<int>(c->maxSteps));
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

// s:fold(dst, {src1, src2, ...}): dst = the left fold of the sources in the
// listed order.  Each source counts against the step budget (it is stored).
int luaFold(lua_State *L) {
  BuildCtx *c = ctxOf(L);
  int a = firstArg(L);
  ChunkRef dst = toRef(L, a, "fold", "destination");
  if (!lua_istable(L, a + 1))
    return luaL_error(L, "fold: sources must be a list of chunks such as {s.input(0), s.scratch(1)}, got %s",
                      luaL_typename(L, a + 1));
  int n = static_cast<int>(lua_objlen(L, a + 1));
  if (n < 1) return luaL_error(L, "fold: needs at least one source");
  if (c->out->steps.size() + c->foldSources + n >= c->maxSteps)
    return luaL_error(L, "more than %d steps and fold sources on one rank", static_cast<int>(c->maxSteps));
  // Built in place: nothing of ours needs freeing when toRef raises an error.
  Step st{StepKind::Fold, -1, {}, dst, 0};
  st.fold = static_cast<int32_t>(c->out->folds.size());
  c->out->folds.emplace_back();
  c->out->folds.back().reserve(static_cast<size_t>(n));
  char what[32];
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, a + 1, i + 1);
    std::snprintf(what, sizeof(what), "source %d", i + 1);
    c->out->folds.back().push_back(toRef(L, -1, "fold", what));
    lua_pop(L, 1);
  }
  c->foldSources += static_cast<size_t>(n);
  addStep(L, c, st);
  return 0;
}

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

// s.ranks_per_host is read through __index, so that the compiler knows
// whether a schedule depends on it.
int luaBuilderIndex(lua_State *L) {
  BuildCtx *c = ctxOf(L);
  const char *k = lua_tostring(L, 2);
  if (k && !std::strcmp(k, "ranks_per_host")) {
    c->readRph = true;
    lua_pushinteger(L, c->rph);
  } else {
    lua_pushnil(L);
  }
  return 1;
}

void pushBuilder(lua_State *L, BuildCtx *c) {
  lua_createtable(L, 0, 20);
  auto setInt = [&](const char *k, int v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
  };
  setInt("rank", c->rank);
  setInt("nranks", c->nranks);
  setInt("root", 0);  // rooted ops are built for root 0 and relabelled
  setInt("chunks", c->nchunks);
  setInt("block", c->nranks > 0 ? c->nchunks / c->nranks : 0);
  lua_pushstring(L, opName(c->op));
  lua_setfield(L, -2, "op");
  static const struct {
    const char *name;
    lua_CFunction fn;
  } fns[] = {{"input", luaInput},   {"output", luaOutput},
             {"scratch", luaScratch}, {"send", luaSend},
             {"recv", luaRecv},     {"recv_reduce", luaRecvReduce},
             {"copy", luaCopy},     {"reduce", luaReduce},
             {"fold", luaFold},     {"stage", luaStage},
             {"group", luaGroup}};
  for (const auto &f : fns) {
    lua_pushlightuserdata(L, c);
    lua_pushcclosure(L, f.fn, 1);
    lua_setfield(L, -2, f.name);
  }
  lua_createtable(L, 0, 1);
  lua_pushlightuserdata(L, c);
  lua_pushcclosure(L, luaBuilderIndex, 1);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
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
  std::string text;
  if (!readConfigFile(path, &text, err)) return false;
  return loadText(path, text, out, err, limits);
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
  rawField(L_, t, "fold_order");
  if (!lua_isnil(L_, -1)) {
    if (lua_type(L_, -1) != LUA_TSTRING || std::strcmp(lua_tostring(L_, -1), "rank") != 0)
      return fieldErr("field 'fold_order' must be \"rank\" (every reduced output chunk is the "
                      "left fold of the contributions in rank order), or absent");
    foldOrder_ = true;
  }
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
  lua_createtable(L_, 0, 2);
  lua_pushcfunction(L_, luaRefText);
  lua_setfield(L_, -2, "__tostring");
  lua_pushstring(L_, "chunk");  // getmetatable(ref) gives this, not the table
  lua_setfield(L_, -2, "__metatable");
  refMeta_ = luaL_ref(L_, LUA_REGISTRYINDEX);
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

bool Script::scratchCopies(const Topo &t, int nchunks, int *copies, std::string *err) {
  if (!callField("scratch_copies", t, 1, err)) return false;
  int type = lua_type(L_, -1);
  double d = type == LUA_TNUMBER ? lua_tonumber(L_, -1) : 1;
  lua_pop(L_, 1);
  if ((type != LUA_TNUMBER && type != LUA_TNIL) || d != std::floor(d) || d < 1 ||
      d * nchunks > kMaxChunks) {
    *err = path_ + ": scratch_copies(" + std::to_string(t.nranks) +
           ") must be an integer >= 1, at most " + std::to_string(kMaxChunks) +
           " chunks in all";
    return false;
  }
  *copies = static_cast<int>(d);
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

bool Script::buildRank(const Topo &t, int nchunks, int copies, int rank, RankSchedule *out,
                       std::string *err) {
  out->steps.clear();  // keeps what the caller reserved
  out->folds.clear();
  out->nstages = 0;
  BuildCtx c{op_, t.nranks, rank, t.ranksPerHost, nchunks, copies, refMeta_,
             maxStepsPerRank(t.nranks, nchunks), out};
  lua_rawgeti(L_, LUA_REGISTRYINDEX, tableRef_);
  rawField(L_, -1, "build");
  lua_remove(L_, -2);
  pushBuilder(L_, &c);
  bool ok = sb_->pcall(1, 0, err);
  readsRph_ = readsRph_ || c.readRph;
  out->nstages = c.stageUsed ? c.stage + 1 : c.stage;
  return ok;
}

namespace {
std::string where(const Script &s, const Topo &t, int rank) {
  std::string w = std::string("compile ") + opName(s.op()) + "/" + s.name() +
                  " nranks=" + std::to_string(t.nranks);
  if (opIsRooted(s.op())) w += " root=0";
  if (rank >= 0) w += " rank=" + std::to_string(rank);
  return w + ": ";
}
}  // namespace

// Ranks [first, first+count) into out->ranks[0..count).  Rooted ops: rank r
// runs the root-0 build of rank (r - root) mod n, relabelled; errors name
// the rank and root the script saw.
bool Script::compileRanks(const Topo &t, int root, int first, int count, Schedule *out,
                          std::string *err) {
  if (t.nranks < 1 || t.ranksPerHost < 1 || root < 0 || root >= t.nranks || first < 0 ||
      first + count > t.nranks) {
    *err = where(*this, t, -1) + "invalid nranks/ranks_per_host/root/rank";
    return false;
  }
  std::string e;
  int nchunks = 0, copies = 1;
  if (!chunks(t, &nchunks, &e) || !scratchCopies(t, nchunks, &copies, &e)) {
    *err = where(*this, t, -1) + e;
    return false;
  }
  int shift = opIsRooted(op_) ? root : 0;
  out->op = op_;
  out->algo = name_;
  out->nranks = t.nranks;
  out->root = shift;
  out->chunks = nchunks;
  out->scratchCopies = copies;
  out->foldOrder = foldOrder_;
  out->ranks.assign(count, RankSchedule{});
  for (int i = 0; i < count; i++) {
    int v = ((first + i - shift) % t.nranks + t.nranks) % t.nranks;
    // One rank: built in the kept buffer, copied out at its size.  Many:
    // ranks of one schedule add about as many steps each.
    RankSchedule one;
    RankSchedule &rs = count == 1 ? one : out->ranks[i];
    if (count == 1) one.steps.swap(buildBuf_);
    else if (i > 0) rs.steps.reserve(out->ranks[i - 1].steps.size());
    bool ok = buildRank(t, nchunks, copies, v, &rs, &e);
    if (count == 1) {
      out->ranks[0].steps.assign(rs.steps.begin(), rs.steps.end());
      out->ranks[0].folds = std::move(rs.folds);
      out->ranks[0].nstages = rs.nstages;
      buildBuf_.swap(one.steps);
    }
    if (!ok) {
      *err = where(*this, t, v) + e;
      return false;
    }
    if (shift) relabelSteps(op_, t.nranks, nchunks, shift, &out->ranks[i], foldOrder_);
    int inChunks = bufChunks(op_, BufKind::Input, nchunks, t.nranks);
    int outChunks = bufChunks(op_, BufKind::Output, nchunks, t.nranks);
    out->ranks[i].inPlaceNoCopy = inChunks == outChunks &&
                                  inPlaceNeedsNoCopy(out->ranks[i], inChunks, outChunks, 0, 0);
    // The block layouts place this rank's block at its own index (rooted
    // ops' full buffers are relabelled above so that block b is rank b's).
    int me = first + i;
    if (inChunks * t.nranks == outChunks)
      out->ranks[i].inPlaceBlockNoCopy =
          inPlaceNeedsNoCopy(out->ranks[i], inChunks, outChunks, me * inChunks, 0);
    else if (outChunks * t.nranks == inChunks)
      out->ranks[i].inPlaceBlockNoCopy =
          inPlaceNeedsNoCopy(out->ranks[i], inChunks, outChunks, 0, me * outChunks);
  }
  if (count > 1) lua_gc(L_, LUA_GCCOLLECT, 0);
  return true;
}

bool Script::compileRank(const Topo &t, int rank, int root, Schedule *out, std::string *err) {
  return compileRanks(t, root, rank, 1, out, err);
}

bool Script::compileAll(const Topo &t, int root, Schedule *out, std::string *err) {
  return compileRanks(t, root, 0, t.nranks, out, err);
}

}  // namespace flagcx
