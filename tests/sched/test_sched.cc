// Schedule engine units: the shipped scripts verify, broken scripts are
// rejected with the right message, the sandbox holds, and the registry,
// tuner and AlgoSet honour FLAGCX_ALGO_PATH, FLAGCX_ALGO, FLAGCX_TUNING_*.
#include <gtest/gtest.h>

#include <chrono>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/log.h"
#include "base/params.h"
#include "flagcx_paths.h"
#include "sched/algo_set.h"
#include "sched/registry.h"
#include "sched/script.h"
#include "sched/tuner.h"
#include "sched/verify.h"

namespace fs = std::filesystem;
using namespace flagcx;

namespace {

const std::string kSrc = FLAGCX_SOURCE_DIR;
const std::string kScripts = kSrc + "/tests/sched/scripts/";

// Sets FLAGCX_* variables for one test and restores a clean environment.
class Env {
 public:
  Env() {
    clear();
    set("FLAGCX_DATA_DIR", kSrc);
  }
  ~Env() {
    clear();
    paramsReload();
  }
  void set(const char *k, const std::string &v) {
    setenv(k, v.c_str(), 1);
    paramsReload();
  }

 private:
  static void clear() {
    for (const char *k : {"FLAGCX_ALGO_PATH", "FLAGCX_ALGO", "FLAGCX_TUNING_FILE",
                          "FLAGCX_TUNING_POLICY", "FLAGCX_DATA_DIR"})
      unsetenv(k);
  }
};

// A fresh temporary folder, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/flagcx-sched-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string &rel, const std::string &text) const {
    fs::path p = path / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
};

std::string loadError(const std::string &file) {
  std::unique_ptr<Script> s;
  std::string err;
  EXPECT_FALSE(Script::load(file, &s, &err)) << file << " loaded";
  return err;
}

// The first verification error of a script at nranks 1..8, or "".
std::string verifyError(const std::string &file, int maxRanks = 8) {
  std::unique_ptr<Script> s;
  std::string err;
  if (!Script::load(file, &s, &err)) return err;
  for (int n = 1; n <= maxRanks; n++)
    if (!verifyScript(*s, Topo{n, 1}, &err)) return err;
  return "";
}

bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

void verifyShipped(int lo, int hi) {
  Registry reg;
  std::string err;
  ASSERT_TRUE(Registry::loadFrom(kSrc + "/algos/registry.yaml", "", &reg, &err)) << err;
  ASSERT_GE(reg.all().size(), 20u);
  for (const AlgoInfo &a : reg.all()) {
    std::unique_ptr<Script> s;
    ASSERT_TRUE(Script::load(a.path, &s, &err)) << err;
    EXPECT_EQ(s->op(), a.op);
    EXPECT_EQ(s->name(), a.name);
    for (int n = lo; n <= hi; n++) {
      int verified = 0;
      for (int g = 1; g <= n; g++) {
        if (n % g != 0) continue;
        std::string skipped;
        ASSERT_TRUE(verifyScript(*s, Topo{n, g}, &err, &skipped)) << err;
        if (skipped.empty()) verified++;
        double steps = -1, bytes = -1;
        if (skipped.empty()) {
          ASSERT_TRUE(s->cost(Topo{n, g}, &steps, &bytes, &err)) << err;
          EXPECT_GE(steps, 0);
          EXPECT_GE(bytes, 0);
        }
      }
      EXPECT_GT(verified, 0) << a.path << " applies at no ranks_per_host for nranks=" << n;
    }
  }
}

}  // namespace

TEST(SchedScripts, ShippedVerifyAt1To16) { verifyShipped(1, 16); }

TEST(SchedBroken, SyntaxErrorGivesFileLine) {
  std::string err = loadError(kScripts + "syntax_error.lua");
  EXPECT_TRUE(contains(err, kScripts + "syntax_error.lua:4:")) << err;
}

TEST(SchedBroken, DeadlockNamesTheCycle) {
  std::string err = verifyError(kScripts + "deadlock.lua");
  EXPECT_TRUE(contains(err, "verify allreduce/deadlock nranks=2 rank=0 step=1: deadlock:")) << err;
  EXPECT_TRUE(contains(err, "rank 0 step 1")) << err;
  EXPECT_TRUE(contains(err, "rank 1 step 1")) << err;
}

TEST(SchedBroken, DoubleContribution) {
  std::string err = verifyError(kScripts + "double_reduce.lua");
  EXPECT_TRUE(contains(err, "verify allreduce/double_reduce nranks=1 rank=0")) << err;
  EXPECT_TRUE(contains(err, "counted more than once")) << err;
}

TEST(SchedBroken, OutputNeverWritten) {
  std::string err = verifyError(kScripts + "missing_output.lua");
  EXPECT_TRUE(contains(err, "verify allgather/missing_output nranks=1 rank=0")) << err;
  EXPECT_TRUE(contains(err, "output[0] is never written")) << err;
}

TEST(SchedBroken, EndlessLoopHitsBudget) {
  std::string err = verifyError(kScripts + "endless_loop.lua");
  EXPECT_TRUE(contains(err, kScripts + "endless_loop.lua:6: instruction budget exceeded")) << err;
}

// Work done in C between instructions (string.rep here, builder calls in a
// real script) is bounded by the wall clock, not by the instruction count.
TEST(SchedBroken, SlowScriptHitsWallClock) {
  const std::string text =
      "local t = 0\n"
      "for i = 1, 100000000 do t = t + #string.rep('x', 1000000) end\n"
      "return {}\n";
  flagcx::ScriptLimits lim;
  lim.seconds = 0.3;
  std::unique_ptr<flagcx::Script> sc;
  std::string err;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(flagcx::Script::loadText("slow.lua", text, &sc, &err, lim));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(contains(err, "slow.lua:2: ran for more than")) << err;
  EXPECT_LT(secs, 60.0) << "the limit did not stop the script";  // unbounded: hours
}

TEST(SchedBroken, MemoryHogHitsCap) {
  std::string err = verifyError(kScripts + "memory_hog.lua");
  EXPECT_TRUE(contains(err, "memory limit exceeded")) << err;
}

TEST(SchedBroken, RaceInsideAStage) {
  std::string err = verifyError(kScripts + "race.lua");
  EXPECT_TRUE(contains(err, "nranks=2 rank=0 step=2")) << err;
  EXPECT_TRUE(contains(err, "put s:stage() between them")) << err;
}

TEST(SchedBroken, PeerOutOfRange) {
  std::string err = verifyError(kScripts + "bad_peer.lua");
  EXPECT_TRUE(contains(err, "bad_peer.lua:6: send: peer 1 out of range")) << err;
}

TEST(SchedBroken, MessageSizeMismatch) {
  std::string err = verifyError(kScripts + "size_mismatch.lua");
  EXPECT_TRUE(contains(err, "receives")) << err;
  EXPECT_TRUE(contains(err, "(count=")) << err;
}

TEST(SchedBroken, ReadBeforeWrite) {
  std::unique_ptr<Script> s;
  std::string err;
  ASSERT_TRUE(Script::loadText("rbw.lua", R"(
return { name = "rbw", op = "allreduce", chunks = 1,
  build = function(s)
    s:reduce(s.input(0), s.output(0))
  end })",
                               &s, &err))
      << err;
  EXPECT_FALSE(verifyScript(*s, Topo{1, 1}, &err));
  EXPECT_TRUE(contains(err, "reads output[0] before anything was written")) << err;
}

TEST(SchedBroken, UnmatchedSend) {
  std::unique_ptr<Script> s;
  std::string err;
  ASSERT_TRUE(Script::loadText("unmatched.lua", R"(
return { name = "unmatched", op = "allreduce", chunks = 1,
  build = function(s)
    s:copy(s.input(0), s.output(0))
    if s.rank == 0 and s.nranks > 1 then s:send(1, s.input(0)) end
  end })",
                               &s, &err))
      << err;
  EXPECT_FALSE(verifyScript(*s, Topo{2, 1}, &err));
  EXPECT_TRUE(contains(err, "rank=0 step=1")) << err;
  EXPECT_TRUE(contains(err, "has no matching receive")) << err;
}

TEST(SchedBroken, BlockOpNeedsMultipleOfRanks) {
  std::unique_ptr<Script> s;
  std::string err;
  ASSERT_TRUE(Script::loadText("blk.lua", R"(
return { name = "blk", op = "allgather", chunks = function(n) return n + 1 end,
  build = function(s) end })",
                               &s, &err));
  EXPECT_FALSE(verifyScript(*s, Topo{2, 1}, &err));
  EXPECT_TRUE(contains(err, "must be a multiple of nranks")) << err;
}

TEST(SchedSandbox, BlocksOsIoRequire) {
  EXPECT_TRUE(contains(loadError(kScripts + "escape_os.lua"), "escape_os.lua:2: attempt to index global 'os'"));
  EXPECT_TRUE(contains(loadError(kScripts + "escape_require.lua"), "attempt to call global 'require'"));
  EXPECT_TRUE(contains(verifyError(kScripts + "escape_io.lua"), "attempt to index global 'io'"));
  EXPECT_FALSE(fs::exists("/tmp/flagcx-sandbox-escaped"));
  std::unique_ptr<Script> s;
  std::string err;
  for (const char *fn : {"dofile", "loadstring", "load", "loadfile", "debug", "package",
                         "collectgarbage", "jit"}) {
    std::string text = std::string("assert(") + fn + " == nil, '" + fn + " is reachable')\n" +
                       "return { name = 'x', op = 'barrier', chunks = 1, build = function(s) end }";
    EXPECT_TRUE(Script::loadText("probe.lua", text, &s, &err)) << err;
  }
  EXPECT_FALSE(Script::loadText("bc.lua", std::string("\x1bLJ\x02", 4), &s, &err));
  EXPECT_TRUE(contains(err, "bytecode")) << err;
}

TEST(SchedSandbox, TableFieldsChecked) {
  std::unique_ptr<Script> s;
  std::string err;
  EXPECT_FALSE(Script::loadText("t.lua", "return 1", &s, &err));
  EXPECT_TRUE(contains(err, "must return a table")) << err;
  EXPECT_FALSE(Script::loadText("t.lua", "return {name='a', op='allfoo', chunks=1, build=function() end}", &s, &err));
  EXPECT_TRUE(contains(err, "unknown op 'allfoo'")) << err;
  EXPECT_FALSE(Script::loadText("t.lua", "return {name='a', op='allreduce', chunks=1}", &s, &err));
  EXPECT_TRUE(contains(err, "'build'")) << err;
  EXPECT_FALSE(Script::loadText("t.lua", "return {name='a', op='allreduce', chunks=1, requires={odd=true}, build=function() end}", &s, &err));
  EXPECT_TRUE(contains(err, "unknown requirement 'odd'")) << err;
}

TEST(SchedSandbox, RequiresTable) {
  std::unique_ptr<Script> s;
  std::string err, why;
  ASSERT_TRUE(Script::loadText("p2.lua",
                               "return {name='p2', op='allreduce', chunks=1, requires={pow2=true, min_ranks=2},"
                               " build=function(s) end}",
                               &s, &err))
      << err;
  EXPECT_FALSE(s->supports(Topo{1, 1}, &why));
  EXPECT_FALSE(s->supports(Topo{6, 1}, &why));
  EXPECT_TRUE(contains(why, "power-of-two")) << why;
  EXPECT_TRUE(s->supports(Topo{8, 1}, &why));
  EXPECT_EQ(s->requirements(), "pow2, min_ranks=2");
}

TEST(SchedCompile, RankMatchesAll) {
  std::unique_ptr<Script> s;
  std::string err;
  ASSERT_TRUE(Script::load(kSrc + "/algos/allreduce/ring.lua", &s, &err)) << err;
  Schedule all, one;
  ASSERT_TRUE(s->compileAll(Topo{5, 1}, 0, &all, &err)) << err;
  ASSERT_TRUE(s->compileRank(Topo{5, 1}, 3, 0, &one, &err)) << err;
  ASSERT_EQ(one.ranks.size(), 1u);
  EXPECT_EQ(one.chunks, 5);
  EXPECT_EQ(one.ranks[0].nstages, all.ranks[3].nstages);
  ASSERT_EQ(one.ranks[0].steps.size(), all.ranks[3].steps.size());
  // 1 copy stage, 4 reduce-scatter stages, 4 allgather stages
  EXPECT_EQ(one.ranks[0].nstages, 9);
}

TEST(SchedRegistry, ShippedParses) {
  Env env;
  Registry reg;
  std::string err;
  ASSERT_TRUE(Registry::load(&reg, &err)) << err;
  ASSERT_NE(reg.find(OpKind::AllReduce, "ring"), nullptr);
  EXPECT_FALSE(reg.find(OpKind::AllReduce, "ring")->user);
  for (size_t o = 0; o < static_cast<size_t>(OpKind::Count); o++)
    EXPECT_FALSE(reg.forOp(static_cast<OpKind>(o)).empty()) << opName(static_cast<OpKind>(o));
  EXPECT_EQ(reg.lookup("allreduce/nope", &err), nullptr);
  EXPECT_TRUE(contains(err, "unknown algorithm 'allreduce/nope'")) << err;
}

TEST(SchedRegistry, YamlErrorHasLine) {
  TempDir d;
  std::string y = d.write("algos/registry.yaml", "allreduce:\n  - name: ring\n  - name: [x\n");
  Registry reg;
  std::string err;
  EXPECT_FALSE(Registry::loadFrom(y, "", &reg, &err));
  EXPECT_TRUE(contains(err, y + ":3:") || contains(err, y + ":4:")) << err;
  y = d.write("algos/registry.yaml", "allreduce:\n  - name: ring\nallfoo:\n  - name: x\n");
  EXPECT_FALSE(Registry::loadFrom(y, "", &reg, &err));
  EXPECT_TRUE(contains(err, y + ":3: unknown op 'allfoo'")) << err;
}

TEST(SchedRegistry, UserPathOverridesAndAdds) {
  Env env;
  TempDir d;
  std::string ring = std::string(std::istreambuf_iterator<char>(std::ifstream(kSrc + "/algos/allreduce/ring.lua").rdbuf()), {});
  d.write("allreduce/ring.lua", ring);
  std::string mine = ring;
  mine.replace(mine.find("name = \"ring\""), 13, "name = \"mine\"");
  d.write("allreduce/mine.lua", mine);
  d.write("loose.lua", "return {name='loose', op='barrier', chunks=1, build=function(s) end}");
  env.set("FLAGCX_ALGO_PATH", d.path.string());
  Registry reg;
  std::string err;
  ASSERT_TRUE(Registry::load(&reg, &err)) << err;
  const AlgoInfo *a = reg.find(OpKind::AllReduce, "ring");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->user);
  EXPECT_EQ(a->path, (d.path / "allreduce/ring.lua").string());
  ASSERT_NE(reg.find(OpKind::AllReduce, "mine"), nullptr);
  ASSERT_NE(reg.find(OpKind::Barrier, "loose"), nullptr);
  EXPECT_NE(reg.find(OpKind::AllReduce, "rabenseifner"), nullptr);
}

TEST(SchedTuner, ShippedRulesParse) {
  TuningRules r;
  std::string err;
  ASSERT_TRUE(parseTuningRules(kSrc + "/config/tuning.yaml", &r, &err)) << err;
  EXPECT_FALSE(r.byOp[static_cast<size_t>(OpKind::AllReduce)].empty());
  EXPECT_EQ(r.byOp[static_cast<size_t>(OpKind::AllReduce)][0].maxBytes, 65536u);
}

TEST(SchedTuner, RuleErrorsHaveLine) {
  TuningRules r;
  std::string err;
  EXPECT_FALSE(parseTuningText("t.yaml", "allreduce:\n  - {algo: ring}\n  - {max_bytes: 12Q, algo: ring}\n", &r, &err));
  EXPECT_TRUE(contains(err, "t.yaml:3: max_bytes")) << err;
  EXPECT_FALSE(parseTuningText("t.yaml", "allreduce:\n  - {algo: ring, colour: red}\n", &r, &err));
  EXPECT_TRUE(contains(err, "t.yaml:2: unknown key 'colour'")) << err;
  EXPECT_FALSE(parseTuningText("t.yaml", "allreduce:\n  - {algo: ring\n", &r, &err));
  EXPECT_TRUE(contains(err, "t.yaml:")) << err;
  uint64_t v;
  EXPECT_TRUE(parseByteSize("64K", &v) && v == 65536);
  EXPECT_TRUE(parseByteSize("1MiB", &v) && v == 1048576);
  EXPECT_FALSE(parseByteSize("1X", &v));
}

TEST(SchedTuner, UnknownRuleAlgoIsInitError) {
  Env env;
  TempDir d;
  env.set("FLAGCX_TUNING_FILE", d.write("t.yaml", "allreduce:\n  - {algo: warp_drive}\n"));
  std::unique_ptr<AlgoSet> set;
  EXPECT_EQ(AlgoSet::create(0, 4, 1, &set), flagcxInvalidUsage);
  EXPECT_TRUE(contains(lastErrorText(), "t.yaml:2: unknown algorithm 'warp_drive'")) << lastErrorText();
}

TEST(SchedAlgoSet, DefaultsCoverEveryOp) {
  Env env;
  for (int n : {1, 2, 3, 8}) {
    std::unique_ptr<AlgoSet> set;
    ASSERT_EQ(AlgoSet::create(n - 1, n, 1, &set), flagcxSuccess) << lastErrorText();
    for (size_t o = 0; o < static_cast<size_t>(OpKind::Count); o++) {
      OpKind op = static_cast<OpKind>(o);
      for (size_t bytes : {size_t(0), size_t(4), size_t(100000), size_t(1) << 30}) {
        const Schedule *s = set->select(op, bytes, flagcxFloat32, n - 1);
        ASSERT_NE(s, nullptr) << opName(op);
        EXPECT_EQ(s->op, op);
        EXPECT_EQ(s->ranks.size(), 1u);
        EXPECT_EQ(s->nranks, n);
        if (opIsRooted(op)) {
          EXPECT_EQ(s->root, n - 1);
        }
      }
    }
    EXPECT_EQ(set->select(OpKind::Reduce, 4, flagcxFloat32, n), nullptr);
  }
  std::unique_ptr<AlgoSet> set;
  ASSERT_EQ(AlgoSet::create(0, 8, 1, &set), flagcxSuccess);
  EXPECT_EQ(set->selectName(OpKind::AllReduce, 1024, flagcxFloat32), "recursive_doubling");
  EXPECT_EQ(set->selectName(OpKind::AllReduce, size_t(1) << 30, flagcxFloat32), "ring");
}

TEST(SchedAlgoSet, ForcedAlgorithm) {
  Env env;
  env.set("FLAGCX_ALGO", "allreduce:ring,alltoall:bruck");
  std::unique_ptr<AlgoSet> set;
  ASSERT_EQ(AlgoSet::create(2, 5, 1, &set), flagcxSuccess) << lastErrorText();
  for (size_t bytes : {size_t(1), size_t(1) << 20, size_t(1) << 34}) {
    EXPECT_EQ(set->select(OpKind::AllReduce, bytes, flagcxInt8, 0)->algo, "ring");
    EXPECT_EQ(set->select(OpKind::AlltoAll, bytes, flagcxInt8, 0)->algo, "bruck");
  }
}

TEST(SchedAlgoSet, ForcedUnknownIsError) {
  Env env;
  env.set("FLAGCX_ALGO", "allreduce:warp_drive");
  std::unique_ptr<AlgoSet> set;
  EXPECT_EQ(AlgoSet::create(0, 4, 1, &set), flagcxInvalidUsage);
  EXPECT_TRUE(contains(lastErrorText(), "FLAGCX_ALGO: unknown algorithm 'warp_drive' for allreduce"))
      << lastErrorText();
  env.set("FLAGCX_ALGO", "allfoo:ring");
  EXPECT_EQ(AlgoSet::create(0, 4, 1, &set), flagcxInvalidUsage);
  EXPECT_TRUE(contains(lastErrorText(), "unknown op 'allfoo'")) << lastErrorText();
}

TEST(SchedAlgoSet, ForcedRequiresFailureIsError) {
  Env env;
  env.set("FLAGCX_ALGO", "allreduce:hierarchical");
  std::unique_ptr<AlgoSet> set;
  EXPECT_EQ(AlgoSet::create(0, 6, 4, &set), flagcxInvalidUsage);
  EXPECT_TRUE(contains(lastErrorText(), "cannot run on 6 ranks")) << lastErrorText();
  EXPECT_EQ(AlgoSet::create(0, 8, 4, &set), flagcxSuccess) << lastErrorText();
}

TEST(SchedAlgoSet, UserScriptVerifiedAndSelected) {
  Env env;
  TempDir d;
  std::string ring = std::string(std::istreambuf_iterator<char>(std::ifstream(kSrc + "/algos/allreduce/ring.lua").rdbuf()), {});
  ring.replace(ring.find("name = \"ring\""), 13, "name = \"mine\"");
  d.write("allreduce/mine.lua", ring);
  env.set("FLAGCX_ALGO_PATH", d.path.string());
  env.set("FLAGCX_ALGO", "allreduce:mine");
  std::unique_ptr<AlgoSet> set;
  ASSERT_EQ(AlgoSet::create(1, 3, 1, &set), flagcxSuccess) << lastErrorText();
  EXPECT_EQ(set->select(OpKind::AllReduce, 4096, flagcxFloat32, 0)->algo, "mine");

  // A broken user script fails the init with the verifier's message.
  fs::copy_file(kScripts + "deadlock.lua", d.path / "allreduce/deadlock.lua");
  env.set("FLAGCX_ALGO", "allreduce:deadlock");
  EXPECT_EQ(AlgoSet::create(0, 3, 1, &set), flagcxInvalidUsage);
  EXPECT_TRUE(contains(lastErrorText(), "verify allreduce/deadlock nranks=3")) << lastErrorText();
  EXPECT_TRUE(contains(lastErrorText(), "deadlock:")) << lastErrorText();
}

TEST(SchedAlgoSet, PolicyOverridesRules) {
  Env env;
  TempDir d;
  env.set("FLAGCX_TUNING_POLICY",
          d.write("p.lua", "return function(op, bytes, dtype, n, g)\n"
                           "  if op == 'allreduce' and dtype == 'float64' then return 'rabenseifner' end\n"
                           "  if op == 'allreduce' then return 'ring' end\nend\n"));
  std::unique_ptr<AlgoSet> set;
  ASSERT_EQ(AlgoSet::create(0, 4, 1, &set), flagcxSuccess) << lastErrorText();
  EXPECT_EQ(set->selectName(OpKind::AllReduce, 8, flagcxFloat32), "ring");
  EXPECT_EQ(set->selectName(OpKind::AllReduce, 8, flagcxFloat64), "rabenseifner");
  EXPECT_EQ(set->selectName(OpKind::Barrier, 0, flagcxFloat32), "dissemination");

  env.set("FLAGCX_TUNING_POLICY", d.write("bad.lua", "return function() return 'nope' end\n"));
  EXPECT_EQ(AlgoSet::create(0, 4, 1, &set), flagcxInvalidUsage);
  EXPECT_TRUE(contains(lastErrorText(), "unknown algorithm 'nope'")) << lastErrorText();
}

TEST(SchedAlgoSet, ShippedPolicyExample) {
  Env env;
  env.set("FLAGCX_TUNING_POLICY", kSrc + "/config/policy.lua");
  std::unique_ptr<AlgoSet> set;
  ASSERT_EQ(AlgoSet::create(0, 8, 4, &set), flagcxSuccess) << lastErrorText();
  EXPECT_EQ(set->selectName(OpKind::AllReduce, size_t(64) << 20, flagcxFloat32), "hierarchical");
}
