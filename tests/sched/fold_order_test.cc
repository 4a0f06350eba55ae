// The fold step and the fold_order property: the ordered scripts verify at
// every rank count and root, the verifier rejects folds in another order,
// folds across chunks and folds that miss a contribution (message text
// checked), the Lua binding reports bad arguments at file:line, and AlgoSet
// compiles the ordered schedules for deterministic calls.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "base/log.h"
#include "sched/algo_set.h"
#include "sched/ir_names.h"
#include "sched/script.h"
#include "sched/verify.h"
#include "tests/sched/sched_env.h"

using namespace flagcx;
using namespace schedtest;

namespace {

bool has(const std::string &s, const std::string &part) { return s.find(part) != std::string::npos; }

std::string readFile(const std::string &path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::unique_ptr<Script> loadOk(const std::string &name, const std::string &text) {
  std::unique_ptr<Script> s;
  std::string err;
  EXPECT_TRUE(Script::loadText(name, text, &s, &err)) << err;
  return s;
}

// The first verifier (or compile) error at nranks 1..maxRanks, or "".
std::string firstError(Script &s, int maxRanks = 8) {
  std::string err;
  for (int n = 1; n <= maxRanks; n++)
    if (!verifyScript(s, Topo{n, 1}, &err)) return err;
  return "";
}

// The shipped reducescatter/ordered.lua with `from` replaced by `to`.
std::string orderedVariant(const std::string &from, const std::string &to) {
  std::string t = readFile(kSrc + "/algos/reducescatter/ordered.lua");
  size_t at = t.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) t.replace(at, from.size(), to);
  return t;
}

const char *const kOrdered[] = {"allreduce", "reducescatter", "reduce"};

}  // namespace

// Every rank count 1..8 and some larger, every root: verified with
// fold_order, and every rank folds exactly once, n sources.
TEST(FoldOrder, OrderedScriptsVerifyAtEveryRankAndRoot) {
  for (const char *op : kOrdered) {
    std::unique_ptr<Script> s;
    std::string err;
    ASSERT_TRUE(Script::load(kSrc + "/algos/" + op + "/ordered.lua", &s, &err)) << err;
    EXPECT_TRUE(s->foldOrder()) << op;
    for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 11, 16}) {
      int roots = opIsRooted(s->op()) ? n : 1;
      for (int root = 0; root < roots; root++) {
        Schedule all;
        ASSERT_TRUE(s->compileAll(Topo{n, 1}, root, &all, &err)) << err;
        EXPECT_TRUE(all.foldOrder);
        ASSERT_TRUE(verifySchedule(all, &err)) << err;
        for (const RankSchedule &rs : all.ranks) {
          int folds = 0;
          for (const Step &x : rs.steps) {
            if (x.kind != StepKind::Fold) continue;
            folds++;
            ASSERT_NE(foldSources(rs, x), nullptr);
            EXPECT_EQ(static_cast<int>(foldSources(rs, x)->size()), n);
          }
          EXPECT_EQ(folds, 1) << op << " n=" << n;
        }
      }
      std::string skipped;
      ASSERT_TRUE(verifyScript(*s, Topo{n, 1}, &err, &skipped)) << err;
      EXPECT_TRUE(skipped.empty()) << skipped;
    }
  }
}

// In place: the ordered schedules need no copy of the input.
TEST(FoldOrder, OrderedSchedulesRunInPlaceWithoutCopy) {
  for (const char *op : {"allreduce", "reducescatter"}) {
    std::unique_ptr<Script> s;
    std::string err;
    ASSERT_TRUE(Script::load(kSrc + "/algos/" + op + "/ordered.lua", &s, &err)) << err;
    for (int n : {1, 2, 5}) {
      for (int r = 0; r < n; r++) {
        Schedule one;
        ASSERT_TRUE(s->compileRank(Topo{n, 1}, r, 0, &one, &err)) << err;
        if (s->op() == OpKind::AllReduce) EXPECT_TRUE(one.ranks[0].inPlaceNoCopy) << n;
        else EXPECT_TRUE(one.ranks[0].inPlaceBlockNoCopy) << n;
      }
    }
  }
}

// (x1 + x2) + x0 at 3 ranks, in one fold and in two.
TEST(FoldOrder, RejectsAnotherOrder) {
  auto one = loadOk("rotated.lua", orderedVariant("    s:fold(s.output(0), src)",
                                                  "    table.insert(src, table.remove(src, 1))\n"
                                                  "    s:fold(s.output(0), src)"));
  EXPECT_EQ(firstError(*one),
            "verify reducescatter/ordered nranks=2 rank=0: output chunk 0 is not a rank-ordered fold");
  auto two = loadOk("two.lua", R"(
return { name = "two", op = "reducescatter", fold_order = "rank", chunks = 3,
  requires = { min_ranks = 3, max_ranks = 3 },
  build = function(s)
    local r = s.rank
    for q = 0, 2 do
      if q ~= r then s:send(q, s.input(q)); s:recv(q, s.scratch(q)) end
    end
    s:stage()
    local x = function(q) return q == r and s.input(r) or s.scratch(q) end
    local tmp = r == 0 and s.scratch(0) or s.scratch(r == 1 and 0 or 1)
    s:fold(tmp, {x(1), x(2)})
    s:stage()
    s:fold(s.output(0), {tmp, x(0)})
  end })");
  EXPECT_EQ(firstError(*two, 3),
            "verify reducescatter/two nranks=3 rank=0: output chunk 0 is not a rank-ordered fold");
}

// A ring allreduce claiming fold_order: its recv_reduce steps are no fold.
TEST(FoldOrder, RejectsRingClaimingFoldOrder) {
  std::string ring = readFile(kSrc + "/algos/allreduce/ring.lua");
  ring.replace(ring.find("op = \"allreduce\","), 17, "op = \"allreduce\", fold_order = \"rank\",");
  auto s = loadOk("ring.lua", ring);
  EXPECT_TRUE(s->foldOrder());
  EXPECT_EQ(firstError(*s),
            "verify allreduce/ring nranks=1 rank=0: output chunk 0 is not a rank-ordered fold");
  // From 2 ranks on it is the reductions that break it.
  std::string err;
  EXPECT_FALSE(verifyScript(*s, Topo{4, 1}, &err));
  EXPECT_TRUE(has(err, "verify allreduce/ring nranks=4 rank=0: output chunk ")) << err;
  EXPECT_TRUE(has(err, " is not a rank-ordered fold")) << err;
}

TEST(FoldOrder, RejectsSourcesOfDifferentChunks) {
  auto s = loadOk("mixed.lua", R"(
return { name = "mixed", op = "reducescatter", chunks = function(n) return n end,
  build = function(s)
    s:fold(s.output(0), {s.input(0), s.input(1)})
  end })");
  std::string err;
  EXPECT_FALSE(verifyScript(*s, Topo{2, 1}, &err));
  EXPECT_EQ(err, "verify reducescatter/mixed nranks=2 rank=0 step=0: (stage 0, fold input[0], "
                 "input[1] -> output[0]) source 2 (input[1]) holds chunk 1, source 1 chunk 0: a "
                 "fold adds up the contributions to one chunk");
}

TEST(FoldOrder, RejectsMissingContribution) {
  auto s = loadOk("missing.lua", orderedVariant("    s:fold(s.output(0), src)",
                                                "    table.remove(src)\n"
                                                "    if #src == 0 then src = {s.input(r)} end\n"
                                                "    s:fold(s.output(0), src)"));
  EXPECT_EQ(firstError(*s),
            "verify reducescatter/ordered nranks=2 rank=0: output[0] ends wrong: rank 1's chunk 0 "
            "is missing");
}

TEST(FoldOrder, FoldStepChecks) {
  // Sizes: chunk 1 of an odd count is one element longer than chunk 0.
  // (the verifier's first count is 1: 0 and 1 elements).
  auto size = loadOk("size.lua", R"(
return { name = "size", op = "allreduce", chunks = 2,
  build = function(s)
    s:fold(s.output(0), {s.input(0)})
    s:fold(s.output(1), {s.input(0)})
  end })");
  std::string err;
  EXPECT_FALSE(verifyScript(*size, Topo{1, 1}, &err));
  EXPECT_TRUE(has(err, "step=1: (stage 0, fold input[0] -> output[1]) source 1 (input[0]) has 0 "
                       "elements, destination 1 (count=1)")) << err;
  // Unwritten source.
  auto unwritten = loadOk("unwritten.lua", R"(
return { name = "unwritten", op = "allreduce", chunks = 1,
  build = function(s) s:fold(s.output(0), {s.input(0), s.scratch(0)}) end })");
  EXPECT_FALSE(verifyScript(*unwritten, Topo{1, 1}, &err));
  EXPECT_TRUE(has(err, "reads scratch[0] before anything was written to it")) << err;
  // Not a reduction.
  auto gather = loadOk("g.lua", R"(
return { name = "g", op = "allgather", chunks = 1,
  build = function(s) s:fold(s.output(0), {s.input(0)}) end })");
  EXPECT_FALSE(verifyScript(*gather, Topo{1, 1}, &err));
  EXPECT_TRUE(has(err, "(stage 0, fold input[0] -> output[0]) reduces, but allgather is not a "
                       "reduction")) << err;
  auto claim = loadOk("c.lua", R"(
return { name = "c", op = "allgather", chunks = 1, fold_order = "rank",
  build = function(s) s:copy(s.input(0), s.output(0)) end })");
  EXPECT_FALSE(verifyScript(*claim, Topo{1, 1}, &err));
  EXPECT_EQ(err, "verify allgather/c nranks=1: declares fold_order, but allgather is not a reduction");
  // A fold may write one of its sources; a concurrent reader of it is a race.
  auto race = loadOk("race.lua", R"(
return { name = "race", op = "allreduce", chunks = 1,
  build = function(s)
    s:copy(s.input(0), s.scratch(0))
    s:stage()
    s:fold(s.scratch(0), {s.scratch(0)})
    s:copy(s.scratch(0), s.output(0))
  end })");
  EXPECT_FALSE(verifyScript(*race, Topo{1, 1}, &err));
  EXPECT_TRUE(has(err, "put s:stage() between them")) << err;
}

TEST(FoldOrder, BadDeclarationsAndArguments) {
  std::unique_ptr<Script> s;
  std::string err;
  EXPECT_FALSE(Script::loadText("decl.lua", R"(
return { name = "d", op = "allreduce", chunks = 1, fold_order = "sorted",
  build = function(s) end })", &s, &err));
  EXPECT_TRUE(has(err, "decl.lua: field 'fold_order' must be \"rank\"")) << err;

  struct Case {
    const char *call, *message;
  } cases[] = {
      {"s:fold(s.output(0), {})", "args.lua:4: fold: needs at least one source"},
      {"s:fold(s.output(0), s.input(0))", "args.lua:4: fold: sources must be a list of chunks"},
      {"s:fold(s.output(0), {s.input(0), 3})",
       "args.lua:4: fold: source 2 must be a chunk such as s.output(k), got number"},
      {"s:fold(7, {s.input(0)})", "args.lua:4: fold: destination must be a chunk"},
      {"s:fold(s.output(0), {s.scratch(1)})", "args.lua:4: scratch(1): chunk index out of range 0..0"},
  };
  for (const Case &c : cases) {
    std::string text = "return { name = \"a\", op = \"allreduce\", chunks = 1,\n"
                       "  build = function(s)\n"
                       "    local unused = 0\n"
                       "    " + std::string(c.call) + "\n"
                       "  end }";
    auto a = loadOk("args.lua", text);
    Schedule sch;
    EXPECT_FALSE(a->compileRank(Topo{1, 1}, 0, 0, &sch, &err)) << c.call;
    EXPECT_TRUE(has(err, c.message)) << c.call << ": " << err;
  }
}

// scratch_copies: copy k's chunks have the data chunks' sizes.
TEST(FoldOrder, ScratchCopies) {
  auto s = loadOk("copies.lua", R"(
return { name = "copies", op = "allreduce", chunks = 2, scratch_copies = 3,
  build = function(s)
    s:copy(s.input(1), s.scratch(5))
    s:stage()
    s:fold(s.output(1), {s.scratch(5)})
    s:copy(s.input(0), s.output(0))
  end })");
  std::string err;
  EXPECT_TRUE(verifyScript(*s, Topo{1, 1}, &err)) << err;
  Schedule sch;
  ASSERT_TRUE(s->compileAll(Topo{1, 1}, 0, &sch, &err)) << err;
  EXPECT_EQ(sch.scratchCopies, 3);
  auto bad = loadOk("bad.lua", R"(
return { name = "bad", op = "allreduce", chunks = 2, scratch_copies = 0,
  build = function(s) end })");
  EXPECT_FALSE(bad->compileAll(Topo{1, 1}, 0, &sch, &err));
  EXPECT_TRUE(has(err, "bad.lua: scratch_copies(1) must be an integer >= 1")) << err;
}

// packScratch: rank r of the ordered allreduce and reduce names n-1 scratch
// chunks, all of data-space chunk r's size, so its scratch is (n-1)/n of the
// message, not n-1 messages; every reference is renumbered into 0..n-2, and
// the packed schedule names the same chunks (old number mod N) as before.
TEST(FoldOrder, PackedScratchHoldsOnlyNamedChunks) {
  for (const char *op : {"allreduce", "reduce"}) {
    std::unique_ptr<Script> s;
    std::string err;
    ASSERT_TRUE(Script::load(kSrc + "/algos/" + op + "/ordered.lua", &s, &err)) << err;
    for (int n : {2, 3, 8}) {
      for (int r = 0; r < n; r++) {
        Schedule one, packed;
        ASSERT_TRUE(s->compileRank(Topo{n, 1}, r, 0, &one, &err)) << err;
        packed = one;
        packScratch(&packed);
        const RankSchedule &a = one.ranks[0], &b = packed.ranks[0];
        ASSERT_TRUE(b.scratchPacked);
        ASSERT_EQ(b.scratchData.size(), static_cast<size_t>(n - 1)) << op << " n=" << n;
        for (int32_t d : b.scratchData) EXPECT_EQ(d, r) << op << " n=" << n;
        ASSERT_EQ(a.steps.size(), b.steps.size());
        auto same = [&](const ChunkRef &x, const ChunkRef &y) {
          ASSERT_EQ(x.buf, y.buf);
          if (x.buf != BufKind::Scratch) {
            EXPECT_EQ(x.chunk, y.chunk);
          } else {
            ASSERT_LT(y.chunk, n - 1);
            EXPECT_EQ(x.chunk % one.chunks, b.scratchData[static_cast<size_t>(y.chunk)]);
          }
        };
        for (size_t i = 0; i < a.steps.size(); i++) {
          if (stepReadsSrc(a.steps[i].kind)) same(a.steps[i].src, b.steps[i].src);
          if (a.steps[i].kind != StepKind::Send) same(a.steps[i].dst, b.steps[i].dst);
        }
        ASSERT_EQ(a.folds.size(), b.folds.size());
        for (size_t f = 0; f < a.folds.size(); f++)
          for (size_t k = 0; k < a.folds[f].size(); k++) same(a.folds[f][k], b.folds[f][k]);
      }
    }
  }
  Schedule ring;  // one copy of the data space, no fold_order: left as it is
  std::unique_ptr<Script> s;
  std::string err;
  ASSERT_TRUE(Script::load(kSrc + "/algos/allreduce/ring.lua", &s, &err)) << err;
  ASSERT_TRUE(s->compileRank(Topo{4, 1}, 1, 0, &ring, &err)) << err;
  packScratch(&ring);
  EXPECT_FALSE(ring.ranks[0].scratchPacked);
}

// AlgoSet: the ordered schedules for deterministic calls, whatever the
// tuner picks; FLAGCX_ALGO's own when it claims fold_order.
TEST(FoldOrder, AlgoSetSelectsOrdered) {
  Env env;
  env.set("FLAGCX_ALGO", "allreduce:ring");
  for (int n : {1, 2, 5}) {
    std::unique_ptr<AlgoSet> set;
    ASSERT_EQ(AlgoSet::create(n - 1, n, 1, &set), flagcxSuccess) << lastErrorText();
    for (const char *op : kOrdered) {
      OpKind k;
      ASSERT_TRUE(opFromName(op, &k));
      for (int root = 0; root < (opIsRooted(k) ? n : 1); root++) {
        const Schedule *s = set->selectOrdered(k, root);
        ASSERT_NE(s, nullptr) << op;
        EXPECT_EQ(s->algo, "ordered");
        EXPECT_TRUE(s->foldOrder);
        EXPECT_EQ(s->root, opIsRooted(k) ? root : 0);
      }
      // The cost model never picks a fold_order script.
      for (size_t bytes : {size_t(4), size_t(1) << 12, size_t(1) << 20, size_t(1) << 30})
        EXPECT_NE(set->selectName(k, bytes, flagcxFloat32), "ordered") << op;
    }
    EXPECT_EQ(set->select(OpKind::AllReduce, 1 << 20, flagcxFloat32, 0)->algo, "ring");
    EXPECT_EQ(set->selectOrdered(OpKind::AllGather, 0), nullptr);
    EXPECT_EQ(set->selectOrdered(OpKind::Broadcast, 0), nullptr);
    // Eager connections follow the tuner's schedules only: ring's neighbours.
    if (n == 5) {
      EXPECT_EQ(set->peers(OpKind::AllReduce), (std::vector<int>{0, 3}));
    }
  }
}

TEST(FoldOrder, AlgoSetTakesUserFoldOrderScript) {
  Env env;
  TempDir d;
  std::string mine = readFile(kSrc + "/algos/allreduce/ordered.lua");
  mine.replace(mine.find("name = \"ordered\""), 16, "name = \"mine\"");
  d.write("allreduce/mine.lua", mine);
  std::string liar = readFile(kSrc + "/algos/allreduce/ring.lua");
  liar.replace(liar.find("name = \"ring\""), 13, "name = \"liar\", fold_order = \"rank\"");
  d.write("allreduce/liar.lua", liar);
  env.set("FLAGCX_ALGO_PATH", d.path.string());
  env.set("FLAGCX_ALGO", "allreduce:mine");
  std::unique_ptr<AlgoSet> set;
  ASSERT_EQ(AlgoSet::create(1, 3, 1, &set), flagcxSuccess) << lastErrorText();
  EXPECT_EQ(set->selectOrdered(OpKind::AllReduce, 0)->algo, "mine");
  EXPECT_EQ(set->select(OpKind::AllReduce, 64, flagcxFloat32, 0)->algo, "mine");
  // A user script whose claim fails the verifier fails the init.
  env.set("FLAGCX_ALGO", "allreduce:liar");
  EXPECT_EQ(AlgoSet::create(0, 3, 1, &set), flagcxInvalidUsage);
  EXPECT_TRUE(has(lastErrorText(), "verify allreduce/liar nranks=3 rank=0: output chunk ")) << lastErrorText();
  EXPECT_TRUE(has(lastErrorText(), "is not a rank-ordered fold")) << lastErrorText();
}
