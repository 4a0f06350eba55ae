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
#include "sched/ir_names.h"
#include "sched/registry.h"
#include "sched/script.h"
#include "sched/tuner.h"
#include "sched/verify.h"
#include "tests/sched/sched_env.h"

namespace fs = std::filesystem;
using namespace flagcx;
using namespace schedtest;

namespace {

const std::string kScripts = kSrc + "/tests/sched/scripts/";

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
        if (skipped.empty() && n > 1) {
          // The hint against the schedule it describes.  steps is the
          // critical path in messages: at least one, at most every message
          // of the schedule.  bytes is per rank, as a fraction of the
          // message: a message carries at most the whole message, so it is
          // at most the busiest rank's number of messages sent and received;
          // only a barrier moves nothing.
          ASSERT_TRUE(s->cost(Topo{n, g}, &steps, &bytes, &err)) << err;
          Schedule all;
          ASSERT_TRUE(s->compileAll(Topo{n, g}, 0, &all, &err)) << err;
          int messages = 0, busiest = 0;
          for (const auto &rs : all.ranks) {
            int sends = 0, recvs = 0;
            for (const auto &step : rs.steps) {
              sends += step.kind == StepKind::Send;
              recvs += step.kind == StepKind::Recv || step.kind == StepKind::RecvReduce;
            }
            messages += sends;
            busiest = std::max(busiest, sends + recvs);
          }
          std::string where = a.path + " n=" + std::to_string(n) + " g=" + std::to_string(g);
          EXPECT_GE(steps, 1) << where;
          EXPECT_LE(steps, messages) << where;
          if (a.op == OpKind::Barrier) EXPECT_EQ(bytes, 0) << where;
          else EXPECT_GT(bytes, 0) << where;
          EXPECT_LE(bytes, busiest) << where;
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
  y = d.write("algos/registry.yaml", "allreduce:\n  - name: ring\n    summary: fast\n");
  EXPECT_FALSE(Registry::loadFrom(y, "", &reg, &err));
  EXPECT_TRUE(contains(err, y + ":3: unknown key 'summary'")) << err;
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

// Rooted ops run every root from the root-0 build, relabelled: every root of
// every shipped rooted script verifies, and one rank's compile at a root is
// that rank's part of the whole relabelled schedule.
TEST(SchedRooted, EveryRootVerifiesAfterRelabel) {
  Registry reg;
  std::string err;
  ASSERT_TRUE(Registry::loadFrom(kSrc + "/algos/registry.yaml", "", &reg, &err)) << err;
  int checked = 0;
  for (const AlgoInfo &a : reg.all()) {
    if (!opIsRooted(a.op)) continue;
    std::unique_ptr<Script> s;
    ASSERT_TRUE(Script::load(a.path, &s, &err)) << err;
    for (int n = 1; n <= 9; n++) {
      for (int root = 0; root < n; root++) {
        Schedule all;
        ASSERT_TRUE(s->compileAll(Topo{n, 1}, root, &all, &err)) << err;
        EXPECT_EQ(all.root, root);
        ASSERT_TRUE(verifySchedule(all, &err)) << err;
        for (int r = 0; r < n; r++) {
          Schedule one;
          ASSERT_TRUE(s->compileRank(Topo{n, 1}, r, root, &one, &err)) << err;
          ASSERT_EQ(one.ranks[0].steps.size(), all.ranks[r].steps.size());
          for (size_t i = 0; i < one.ranks[0].steps.size(); i++)
            ASSERT_EQ(stepText(one.ranks[0].steps[i], &one.ranks[0]),
                      stepText(all.ranks[r].steps[i], &all.ranks[r]))
                << a.path << " n=" << n << " root=" << root << " rank=" << r << " step " << i;
        }
        checked++;
      }
    }
  }
  EXPECT_EQ(checked, 9 * 45);  // 9 rooted scripts, every root of n = 1..9
}

// A relabelled gather moves blocks with the root: rank r's block stays block r.
TEST(SchedRooted, RelabelMovesBlocksAndPeers) {
  std::unique_ptr<Script> s;
  std::string err;
  ASSERT_TRUE(Script::load(kSrc + "/algos/gather/linear.lua", &s, &err)) << err;
  Schedule one;
  ASSERT_TRUE(s->compileRank(Topo{4, 1}, 2, 2, &one, &err)) << err;  // rank 2 is the root
  EXPECT_EQ(one.root, 2);
  bool sawRecvFrom0 = false;
  for (const Step &x : one.ranks[0].steps) {
    if (x.kind == StepKind::Copy) {
      EXPECT_EQ(x.src.buf, BufKind::Input);
      EXPECT_EQ(x.dst.chunk, 2) << stepText(x);  // its own block, in place 2
    }
    if (x.kind == StepKind::Recv && x.peer == 0) {
      sawRecvFrom0 = true;
      EXPECT_EQ(x.dst.chunk, 0) << stepText(x);
    }
  }
  EXPECT_TRUE(sawRecvFrom0);
  ASSERT_TRUE(s->compileRank(Topo{4, 1}, 3, 2, &one, &err)) << err;
  ASSERT_EQ(one.ranks[0].steps.size(), 1u);
  EXPECT_EQ(stepText(one.ranks[0].steps[0]), "send input[0] -> rank 2");
}

TEST(SchedAlgoSet, RootsCompiledOnFirstUseAndEvicted) {
  Env env;
  env.set("FLAGCX_ALGO", "broadcast:chain,gather:binomial");
  const int n = 13, rank = 5;
  std::unique_ptr<AlgoSet> set;
  ASSERT_EQ(AlgoSet::create(rank, n, 1, &set), flagcxSuccess) << lastErrorText();
  std::unique_ptr<Script> chain, gather;
  std::string err;
  ASSERT_TRUE(Script::load(kSrc + "/algos/broadcast/chain.lua", &chain, &err)) << err;
  ASSERT_TRUE(Script::load(kSrc + "/algos/gather/binomial.lua", &gather, &err)) << err;
  // More roots than the cache keeps, twice over, in an order that evicts.
  for (int pass = 0; pass < 2; pass++) {
    for (int k = 0; k < n; k++) {
      int root = (k * 5 + pass) % n;
      for (auto [op, script] : {std::pair{OpKind::Broadcast, chain.get()},
                                std::pair{OpKind::Gather, gather.get()}}) {
        const Schedule *s = set->select(op, 1 << 20, flagcxFloat32, root);
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(s->root, root);
        Schedule want;
        ASSERT_TRUE(script->compileRank(Topo{n, 1}, rank, root, &want, &err)) << err;
        ASSERT_EQ(s->ranks[0].steps.size(), want.ranks[0].steps.size());
        for (size_t i = 0; i < want.ranks[0].steps.size(); i++)
          ASSERT_EQ(stepText(s->ranks[0].steps[i]), stepText(want.ranks[0].steps[i]));
      }
    }
  }
  EXPECT_EQ(set->select(OpKind::Broadcast, 4, flagcxFloat32, n), nullptr);
  EXPECT_EQ(set->select(OpKind::Broadcast, 4, flagcxFloat32, -1), nullptr);
}

TEST(SchedAlgoSet, PeersAreWhatSchedulesName) {
  Env env;
  env.set("FLAGCX_ALGO",
          "allreduce:ring,allgather:ring,reducescatter:ring,broadcast:chain,reduce:chain,"
          "gather:linear,scatter:linear,alltoall:pairwise,alltoallv:pairwise");
  const int n = 16;
  std::unique_ptr<AlgoSet> set;
  ASSERT_EQ(AlgoSet::create(5, n, 1, &set), flagcxSuccess) << lastErrorText();
  EXPECT_EQ(set->peers(OpKind::AllReduce), (std::vector<int>{4, 6}));
  EXPECT_EQ(set->peers(OpKind::Broadcast), (std::vector<int>{4, 6}));
  EXPECT_EQ(set->peers(OpKind::Gather), (std::vector<int>{0}));  // root 0 so far
  EXPECT_EQ(set->peers(OpKind::Barrier), (std::vector<int>{1, 3, 4, 6, 7, 9, 13}));
  EXPECT_EQ(set->peers().size(), size_t(n - 1));  // alltoall names everybody
  EXPECT_EQ(set->schedulePeers([](OpKind op) {
    return op != OpKind::AlltoAll && op != OpKind::AlltoAllv && op != OpKind::Gather &&
           op != OpKind::Scatter;
  }),
            (std::vector<int>{1, 3, 4, 6, 7, 9, 13}));  // ring/chain neighbours, barrier distances
  ASSERT_NE(set->select(OpKind::Gather, 4, flagcxFloat32, 9), nullptr);
  EXPECT_EQ(set->peers(OpKind::Gather), (std::vector<int>{0, 9}));  // and root 9 now
  AlgoSet::Footprint f = set->footprint();
  EXPECT_GT(f.steps, 0u);
  EXPECT_GE(f.scheduleBytes, f.steps * sizeof(Step));
  EXPECT_GT(f.luaBytes, 0u);  // rooted ops keep their scripts
}

TEST(SchedCompile, RanksPerHostReadIsNoticed) {
  std::unique_ptr<Script> ring, hier;
  std::string err;
  ASSERT_TRUE(Script::load(kSrc + "/algos/allreduce/ring.lua", &ring, &err)) << err;
  ASSERT_TRUE(Script::load(kSrc + "/algos/allreduce/hierarchical.lua", &hier, &err)) << err;
  Schedule s;
  ASSERT_TRUE(ring->compileAll(Topo{4, 2}, 0, &s, &err)) << err;
  ASSERT_TRUE(hier->compileAll(Topo{4, 2}, 0, &s, &err)) << err;
  EXPECT_FALSE(ring->readsRanksPerHost());
  EXPECT_TRUE(hier->readsRanksPerHost());
}

TEST(SchedCompile, ChunkReferencesAreOpaque) {
  std::unique_ptr<Script> s;
  std::string err;
  ASSERT_TRUE(Script::loadText("ref.lua", R"(
return { name = "ref", op = "allreduce", chunks = 1,
  build = function(s)
    local r = s.output(0)
    assert(tostring(r) == "output[0]", tostring(r))
    assert(getmetatable(r) == "chunk")
    assert(type(r) == "userdata")
    s:copy(s.input(0), r)
    s:send(s.rank, { buf = "output", chunk = 0 })
  end })",
                               &s, &err))
      << err;
  Schedule sch;
  EXPECT_FALSE(s->compileRank(Topo{2, 1}, 0, 0, &sch, &err));
  EXPECT_TRUE(contains(err, "ref.lua:9:")) << err;
}

// Registry entries name scripts only; every shipped script describes itself
// (flagcx-algo list shows it).
TEST(SchedRegistry, ScriptsDescribeThemselves) {
  Registry reg;
  std::string err;
  ASSERT_TRUE(Registry::loadFrom(kSrc + "/algos/registry.yaml", "", &reg, &err)) << err;
  for (const AlgoInfo &a : reg.all()) {
    std::unique_ptr<Script> s;
    ASSERT_TRUE(Script::load(a.path, &s, &err)) << err;
    EXPECT_FALSE(s->description().empty()) << a.path;
  }
}
