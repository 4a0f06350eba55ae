// Hostile algorithm scripts, tuning policies and configuration files against
// the entry points that read them: the script loader (what `flagcx-algo
// verify` and init use for every script), FLAGCX_TUNING_POLICY,
// FLAGCX_TUNING_FILE, FLAGCX_ALGO_PATH, the registry, and flagcxCommInitRank
// itself.  Every case runs in a forked child (tests/common/in_child.h): a
// crash or a hang fails the case instead of the runner.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "base/log.h"
#include "flagcx.h"
#include "tests/common/in_child.h"
#include "sched/algo_set.h"
#include "sched/registry.h"
#include "sched/script.h"
#include "sched/tuner.h"
#include "sched/verify.h"
#include "tests/sched/sched_env.h"

using namespace flagcx;
using namespace schedtest;

namespace {

const char kTable[] = "return { name = 'evil', op = 'allreduce', chunks = 1,\n"
                      "  build = function(s) s:copy(s.input(0), s.output(0)) end }\n";
const char kPolicyTail[] = "return function() return nil end\n";

// One line of script code (line 1 of the file) and what its error says.
struct LuaCase {
  const char *name;
  const char *code;
  const char *expect;
};

const LuaCase kCases[] = {
    // Recursion through C functions: crashed inside libluajit before.
    {"gsub callback", "local function g(x) return (string.gsub('a', 'a', g)) end g('a')",
     "attempt to call field 'gsub'"},
    {"coroutine.wrap", "local function f() return coroutine.wrap(f)() end f()", "C stack limit"},
    {"coroutine.wrap, result kept",
     "local function f() local r = coroutine.wrap(f)() return r end f()", "C stack limit"},
    {"coroutine.resume",
     "local function f() local ok, e = coroutine.resume(coroutine.create(f)) "
     "if not ok then error(e, 0) end end f()",
     "C stack limit"},
    {"sort comparator", "local function s() table.sort({3, 2, 1}, function(a, b) s() return a < b end) end s()",
     "C stack limit"},
    {"sort through __lt",
     "local mt = {} mt.__lt = function(a, b) table.sort({a, b}) return false end "
     "table.sort({setmetatable({}, mt), setmetatable({}, mt)})",
     "C stack limit"},
    {"sort through a coroutine",
     "local function f() table.sort({1, 2, 3}, coroutine.wrap(function(a, b) f() return a < b end)) end f()",
     "C stack limit"},
    {"string.format of __tostring",
     "local t = setmetatable({}, {__tostring = function(x) return string.format('%s', x) end}) "
     "local s = tostring(t)",
     "C stack limit"},
    {"xpcall handler",
     "local ok, e = xpcall(function() error('x') end, function(m) local function g() "
     "table.sort({1, 2, 3}, function(a, b) g() return a < b end) end g() end) error(e)",
     "error in error handling"},
    // Recursion LuaJIT keeps on the Lua stack: its own limit.
    {"__index chain",
     "local t = setmetatable({}, {}) getmetatable(t).__index = function(t, k) return t[k] end "
     "local x = t.x",
     "stack overflow"},
    {"__call chain",
     "local t = setmetatable({}, {}) getmetatable(t).__call = function(self) return 1 + self() end t()",
     "stack overflow"},
    {"__lt chain",
     "local mt = {} mt.__lt = function(a, b) return not (b < a) end "
     "local x = setmetatable({}, mt) < setmetatable({}, mt)",
     "stack overflow"},
    {"__concat chain",
     "local mt = {} mt.__concat = function(a, b) return a .. b end local x = setmetatable({}, mt) .. 'a'",
     "stack overflow"},
    {"__newindex chain",
     "local t = setmetatable({}, {}) getmetatable(t).__newindex = function(t, k, v) t[k] = v end t.x = 1",
     "stack overflow"},
    {"pcall nesting", "local function p() local ok, e = pcall(p) error(e, 0) end p()", "stack overflow"},
    {"xpcall nesting",
     "local function h(m) return m end local function p() local ok, e = xpcall(p, h) error(e, 0) end p()",
     "stack overflow"},
    {"__tostring through tostring",
     "local t = setmetatable({}, {__tostring = function(x) return '' .. tostring(x) end}) "
     "local s = tostring(t)",
     "stack overflow"},
    // Memory and time bombs in one library call.
    {"string.rep bomb", "local s = string.rep('x', 2^31)", "memory limit exceeded"},
    {"string.rep bomb with separator", "local s = ('ab'):rep(1e8, ',')", "memory limit exceeded"},
    {"pattern backtracking",
     "local i = string.find(string.rep('a', 2000), 'a*a*a*a*a*a*a*a*b')", "attempt to call field 'find'"},
    {"error value with __tostring",
     "error(setmetatable({}, {__tostring = function() error('boom') end}))", "error value is a table"},
};

std::string scriptError(const std::string &path) {
  std::unique_ptr<Script> s;
  std::string err;
  if (!Script::load(path, &s, &err)) return err;
  for (int n = 1; n <= 3; n++)
    if (!verifyScript(*s, Topo{n, 1}, &err)) return err;
  return "loaded and verified";
}

// AlgoSet::create is what flagcxCommInitRank runs to load and choose scripts.
std::string initError(Env &env, const char *var, const std::string &value) {
  env.set(var, value);
  std::unique_ptr<AlgoSet> set;
  if (AlgoSet::create(0, 2, 1, &set) == flagcxSuccess) return "init succeeded";
  return lastErrorText();
}

bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

void expectCase(const LuaCase &c, const std::string &path, const harness::ChildResult &r) {
  EXPECT_TRUE(r.clean) << c.name << ": the child " << r.how;
  EXPECT_TRUE(contains(r.text, path + ":1: ")) << c.name << ": " << r.text;
  EXPECT_TRUE(contains(r.text, c.expect)) << c.name << ": " << r.text;
}

}  // namespace

TEST(SecurityLua, ScriptLoaderGivesFileLineNeverCrashes) {
  TempDir d;
  for (const LuaCase &c : kCases) {
    std::string path = d.write("evil.lua", std::string(c.code) + "\n" + kTable);
    expectCase(c, path, harness::inChild([&] { return scriptError(path); }));
  }
}

TEST(SecurityLua, TuningPolicyGivesFileLineNeverCrashes) {
  TempDir d;
  for (const LuaCase &c : kCases) {
    std::string path = d.write("policy.lua", std::string(c.code) + "\n" + kPolicyTail);
    expectCase(c, path, harness::inChild([&] {
                 Env env;
                 return initError(env, "FLAGCX_TUNING_POLICY", path);
               }));
  }
}

// The two reproducers through the public API, as a user's init meets them: a
// loose script in FLAGCX_ALGO_PATH, a policy.
TEST(SecurityLua, CommInitRankRefusesRecursiveScripts) {
  TempDir d;
  std::string script = d.write("algos/evil.lua", std::string(kCases[0].code) + "\n" + kTable);
  std::string policy = d.write("policy.lua", std::string(kCases[1].code) + "\n" + kPolicyTail);
  for (auto [var, value, expect] :
       {std::tuple{"FLAGCX_ALGO_PATH", (d.path / "algos").string(), script + ":1: attempt to call field 'gsub'"},
        std::tuple{"FLAGCX_TUNING_POLICY", policy, policy + ":1: C stack limit"}}) {
    harness::ChildResult r = harness::inChild([&, var = var, value = value] {
      Env env;
      env.set(var, value);
      flagcxUniqueId id;
      flagcxComm_t comm = nullptr;
      if (flagcxGetUniqueId(&id) != flagcxSuccess) return std::string("no unique id");
      if (flagcxCommInitRank(&comm, 1, &id, 0) == flagcxSuccess) return std::string("init succeeded");
      return std::string(flagcxGetLastError(nullptr));
    });
    EXPECT_TRUE(r.clean) << var << ": the child " << r.how;
    EXPECT_TRUE(contains(r.text, expect)) << var << ": " << r.text;
  }
}

TEST(SecurityLua, RecursionThroughGroupInBuild) {
  TempDir d;
  std::string path = d.write("group.lua",
                             "return { name = 'g', op = 'allreduce', chunks = 1,\n"
                             "  build = function(s) local function g() s:group(g) end g() end }\n");
  harness::ChildResult r = harness::inChild([&] { return scriptError(path); });
  EXPECT_TRUE(r.clean) << r.how;
  EXPECT_TRUE(contains(r.text, path + ":2: C stack limit")) << r.text;
}

// Endless tail calls grow no stack at all: the instruction budget or the
// wall clock stops them, with the line.
TEST(SecurityLua, EndlessTailCallsAreBounded) {
  ScriptLimits lim;
  lim.instructions = 2'000'000;
  lim.seconds = 0.5;
  harness::ChildResult r = harness::inChild([&] {
    std::unique_ptr<Script> s;
    std::string err;
    Script::loadText("tail.lua",
                     "local t = setmetatable({}, {__tostring = function(x) return tostring(x) end})\n"
                     "local s = tostring(t)\n" + std::string(kTable),
                     &s, &err, lim);
    return err;
  });
  EXPECT_TRUE(r.clean) << r.how;
  EXPECT_TRUE(contains(r.text, "tail.lua:1: ") || contains(r.text, "tail.lua:2: ")) << r.text;
}

// The C stack bound follows the room the calling thread has: on a thread
// with a small stack the recursion still ends in an error.
TEST(SecurityLua, SmallThreadStackStillBounded) {
  TempDir d;
  std::string path = d.write("evil.lua", std::string(kCases[1].code) + "\n" + kTable);
  harness::ChildResult r = harness::inChild([&] {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 128 << 10);  // a musl thread
    pthread_t t;
    struct Arg {
      std::string path, out;
    } arg{path, ""};
    auto run = [](void *p) -> void * {
      auto *x = static_cast<Arg *>(p);
      x->out = scriptError(x->path);
      return nullptr;
    };
    if (pthread_create(&t, &a, run, &arg) != 0) return std::string("no thread");
    pthread_join(t, nullptr);
    return arg.out;
  });
  EXPECT_TRUE(r.clean) << r.how;
  EXPECT_TRUE(contains(r.text, path + ":1: C stack limit")) << r.text;
}

// What real scripts do with those functions still works: a comparator, a
// __tostring through string.format, a coroutine generator, nested groups.
TEST(SecurityLua, ShallowNestingStillWorks) {
  std::unique_ptr<Script> s;
  std::string err;
  ASSERT_TRUE(Script::loadText("ok.lua", R"(
local peers = {3, 1, 2}
table.sort(peers, function(a, b) return a > b end)
local named = setmetatable({}, {__tostring = function() return string.format('%d', peers[1]) end})
assert(string.format('%s', named) == '3')
local gen = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i) end end)
assert(gen() + gen() + gen() == 6)
return { name = 'ok', op = 'allreduce', chunks = 1,
  build = function(s) s:group(function() s:group(function() s:copy(s.input(0), s.output(0)) end) end) end }
)",
                               &s, &err))
      << err;
  EXPECT_TRUE(verifyScript(*s, Topo{1, 1}, &err)) << err;
}

namespace {

// What stands where a configuration or script file is expected, and what
// the refusal says about it.
struct BadFile {
  std::string path;
  const char *says;
};

std::vector<BadFile> badFiles(const TempDir &d) {
  std::string fifo = (d.path / "fifo").string();
  std::string dir = (d.path / "dir").string();
  std::string big = (d.path / "big").string();
  EXPECT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  fs::create_directories(dir);
  std::ofstream(big).close();
  fs::resize_file(big, (16u << 20) + 1);  // sparse: no disk, no time
  return {{"/dev/zero", "a character device, not a regular file"},
          {dir, "a directory, not a regular file"},
          {fifo, "a FIFO, not a regular file"},
          {big, "16777217 bytes, more than the 16 MiB"}};
}

}  // namespace

TEST(SecurityFiles, TuningFilesMustBeRegularAndBounded) {
  TempDir d;
  for (const BadFile &f : badFiles(d)) {
    for (const char *var : {"FLAGCX_TUNING_FILE", "FLAGCX_TUNING_POLICY"}) {
      harness::ChildResult r = harness::inChild([&] {
        Env env;
        return initError(env, var, f.path);
      });
      EXPECT_TRUE(r.clean) << var << "=" << f.path << ": the child " << r.how;
      EXPECT_TRUE(contains(r.text, std::string(var) + ": " + f.path + ": " + f.says)) << r.text;
    }
  }
}

TEST(SecurityFiles, ScriptsMustBeRegularAndBounded) {
  TempDir d;
  for (const BadFile &f : badFiles(d)) {
    harness::ChildResult r = harness::inChild([&] { return scriptError(f.path); });
    EXPECT_TRUE(r.clean) << f.path << ": the child " << r.how;
    EXPECT_TRUE(contains(r.text, f.path + ": " + f.says)) << r.text;
  }
  // A FIFO named like a script in a user folder is named, not skipped.
  fs::create_directories(d.path / "algos");
  std::string fifo = (d.path / "algos" / "loose.lua").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  harness::ChildResult r = harness::inChild([&] {
    Env env;
    return initError(env, "FLAGCX_ALGO_PATH", (d.path / "algos").string());
  });
  EXPECT_TRUE(r.clean) << r.how;
  EXPECT_TRUE(contains(r.text, fifo + ": a FIFO, not a regular file")) << r.text;
}

// Links are followed (config kept elsewhere and linked is ordinary); the
// rule holds for what the link leads to.
TEST(SecurityFiles, LinksAreFollowedToRegularFilesOnly) {
  TempDir d;
  std::string rules = d.write("real.yaml", "allreduce:\n  - {algo: ring}\n");
  fs::create_symlink(rules, d.path / "rules.yaml");
  fs::create_symlink("/dev/zero", d.path / "zero.yaml");
  Env env;
  std::string err = initError(env, "FLAGCX_TUNING_FILE", (d.path / "rules.yaml").string());
  EXPECT_EQ(err, "init succeeded");
  harness::ChildResult r = harness::inChild([&] {
    return initError(env, "FLAGCX_TUNING_FILE", (d.path / "zero.yaml").string());
  });
  EXPECT_TRUE(r.clean) << r.how;
  EXPECT_TRUE(contains(r.text, (d.path / "zero.yaml").string() + ": a character device")) << r.text;
}

TEST(SecurityFiles, DuplicateYamlKeysAreErrors) {
  TempDir d;
  TuningRules rules;
  std::string err;
  std::string inRule = d.write("rule.yaml", "allreduce:\n  - algo: ring\n    algo: rabenseifner\n");
  EXPECT_FALSE(parseTuningRules(inRule, &rules, &err));
  EXPECT_EQ(err, inRule + ":3: duplicate key 'algo' (first at line 2)");
  std::string ops = d.write("ops.yaml", "allreduce:\n  - {algo: ring}\nallreduce:\n  - {algo: ring}\n");
  EXPECT_FALSE(parseTuningRules(ops, &rules, &err));
  EXPECT_EQ(err, ops + ":3: duplicate key 'allreduce' (first at line 1)");
  std::string reg = d.write("algos/registry.yaml", "allreduce:\n  - name: ring\n    name: tree\n");
  Registry r;
  EXPECT_FALSE(Registry::loadFrom(reg, "", &r, &err));
  EXPECT_EQ(err, reg + ":3: duplicate key 'name' (first at line 2)");
}

// Aliases of aliases describe 10^9 nodes in a few hundred bytes: each node
// is walked once, so the file is refused at once (its ops are unknown).
TEST(SecurityFiles, YamlAliasBombIsWalkedOnce) {
  std::string text = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; i++) {
    std::string prev = "*l" + std::to_string(i - 1);
    text += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 10; k++) text += (k ? ", " : "") + prev;
    text += "]\n";
  }
  harness::ChildResult r = harness::inChild([&] {
    TuningRules rules;
    std::string err;
    parseTuningText("bomb.yaml", text, &rules, &err);
    return err;
  });
  EXPECT_TRUE(r.clean) << r.how;
  EXPECT_TRUE(contains(r.text, "bomb.yaml:1: unknown op 'l0'")) << r.text;
}
