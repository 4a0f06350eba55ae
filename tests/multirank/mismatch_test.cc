// Mismatched calls are detected, not hung on: ranks that call different
// collectives, counts, dtypes or roots at the same sequence number all fail
// with flagcxInvalidUsage, and the error names both sides' calls.  Then the
// flight recorder: its dumps (FLAGCX_FLIGHT_RECORDER_FILE / _SIZE) and
// `flagcx-info --compare-dumps`.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <functional>
#include <thread>

#include "tests/common/harness.h"
#include "tests/common/inspect.h"

namespace {

constexpr int kTimeoutSec = 5;

struct Call {
  enum Kind { AllReduce, Broadcast, Reduce } kind = AllReduce;
  size_t count = 1024;
  flagcxDataType_t dt = flagcxFloat;
  int root = 0;
};

flagcxResult_t issue(const Call &c, flagcxComm_t comm, std::vector<char> &in,
                     std::vector<char> &out) {
  switch (c.kind) {
    case Call::AllReduce:
      return flagcxAllReduce(in.data(), out.data(), c.count, c.dt, flagcxSum, comm, nullptr);
    case Call::Broadcast:
      return flagcxBroadcast(in.data(), out.data(), c.count, c.dt, c.root, comm, nullptr);
    case Call::Reduce:
      return flagcxReduce(in.data(), out.data(), c.count, c.dt, flagcxSum, c.root, comm, nullptr);
  }
  return flagcxInternalError;
}

struct Shared {
  std::atomic<int> done;
  std::atomic<int> result[8];
  std::atomic<int64_t> ns[8];
  char err[8][512];
};

// Every rank does three good allreduces, then calls[rank]; every rank must
// get flagcxInvalidUsage, quickly, with an error naming both calls.
// `mustName` lists words the error should hold (e.g. both op names).
void expectMismatch(const char *what, const std::vector<Call> &calls,
                    const std::vector<std::string> &mustName) {
  int n = static_cast<int>(calls.size());
  Shared *sh = harness::sharedBlock<Shared>();
  constexpr int kNeverReached = -1;  // the rank did not get to its mismatched call
  for (auto &r : sh->result) r = kNeverReached;
  harness::Env env;
  env.vars = {{"FLAGCX_TIMEOUT", std::to_string(kTimeoutSec)}};
  auto res = harness::run(n, [&](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    size_t maxBytes = 0;
    for (auto &c : calls) maxBytes = std::max(maxBytes, c.count * getFlagcxDataTypeSize(c.dt));
    std::vector<char> in(maxBytes + 64, 1), out(maxBytes + 64, 0);
    for (int i = 0; i < 3; i++)
      RANK_OK(flagcxAllReduce(in.data(), out.data(), 256, flagcxFloat, flagcxSum, comm, nullptr));
    int64_t t0 = harness::nowNs();
    flagcxResult_t r = issue(calls[static_cast<size_t>(rank)], comm, in, out);
    if (r == flagcxSuccess) {
      // Stream semantics allow a late report: the next call or the async error.
      flagcxResult_t a = flagcxSuccess;
      flagcxCommGetAsyncError(comm, &a);
      if (a == flagcxSuccess) a = flagcxAllReduce(in.data(), out.data(), 16, flagcxFloat,
                                                  flagcxSum, comm, nullptr);
      r = a;
    }
    sh->ns[rank] = harness::nowNs() - t0;
    sh->result[rank] = r;
    snprintf(sh->err[rank], sizeof(sh->err[rank]), "%s", flagcxGetLastError(comm));
    // Abort only once every rank has its own answer: an early abort would
    // show up at the others as a dead peer, not as the mismatch.
    sh->done++;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeoutSec + 10);
    while (sh->done.load() < nranks && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    flagcxCommAbort(comm);
    return 0;
  }, env, 60);
  EXPECT_TRUE(res.allOk()) << what << ": " << res.describe();
  for (int r = 0; r < n; r++) {
    if (sh->result[r].load() == kNeverReached) {
      ADD_FAILURE() << what << ": rank " << r
                    << " failed before its mismatched call (one of the good calls before it)";
      continue;
    }
    flagcxResult_t got = static_cast<flagcxResult_t>(sh->result[r].load());
    double secs = static_cast<double>(sh->ns[r].load()) / 1e9;
    std::string err = sh->err[r];
    EXPECT_NE(got, flagcxSuccess) << what << ": rank " << r << " did not notice the mismatch";
    EXPECT_EQ(got, flagcxInvalidUsage)
        << what << ": rank " << r << " got " << flagcxGetErrorString(got) << " after " << secs
        << " s: " << err;
    EXPECT_LT(secs, kTimeoutSec + 2.0) << what << ": rank " << r;
    // Detection is meant to be immediate, not a timeout in disguise.
    EXPECT_LT(secs, kTimeoutSec * 0.8) << what << ": rank " << r
                                       << " only failed at about FLAGCX_TIMEOUT: " << err;
    for (auto &w : mustName)
      EXPECT_TRUE(harness::containsCi(err, w))
          << what << ": rank " << r << "'s error does not name '" << w << "': " << err;
  }
  printf("RELIABILITY-FIGURES mismatch %s: ranks=%d caught=%d\n", what, n, [&] {
    int c = 0;
    for (int r = 0; r < n; r++) c += sh->result[r].load() == flagcxInvalidUsage;
    return c;
  }());
  harness::freeShared(sh);
}

TEST(Mismatch, AllreduceCounts) {
  Call a, b;
  a.count = 1000;
  b.count = 2000;
  expectMismatch("allreduce counts", {a, b}, {"1000", "2000"});
}

TEST(Mismatch, AllreduceCountsThreeRanks) {
  Call a, b;
  a.count = 4096;
  b.count = 4095;  // one element short: the same chunking almost
  expectMismatch("allreduce counts (3 ranks)", {a, a, b}, {"4096", "4095"});
}

TEST(Mismatch, AllreduceVsBroadcast) {
  Call a, b;
  b.kind = Call::Broadcast;
  expectMismatch("allreduce vs broadcast", {a, b}, {"allreduce", "broadcast"});
}

TEST(Mismatch, AllreduceVsBroadcastThreeRanks) {
  Call a, b;
  b.kind = Call::Broadcast;
  expectMismatch("allreduce vs broadcast (3 ranks)", {a, b, a}, {"allreduce", "broadcast"});
}

TEST(Mismatch, BroadcastRoots) {
  Call a, b;
  a.kind = b.kind = Call::Broadcast;
  a.root = 0;
  b.root = 1;
  expectMismatch("broadcast roots", {a, b, a}, {"root"});
}

TEST(Mismatch, ReduceRoots) {
  Call a, b;
  a.kind = b.kind = Call::Reduce;
  a.root = 1;
  b.root = 2;
  expectMismatch("reduce roots", {a, b, b}, {"root"});
}

// Same byte count, different dtypes: nothing but the header can tell.
TEST(Mismatch, DtypesSameBytes) {
  Call a, b;
  a.dt = flagcxFloat;
  b.dt = flagcxInt32;
  expectMismatch("dtypes float32 vs int32", {a, b}, {"float", "int32"});
}

TEST(Mismatch, DtypesDifferentBytes) {
  Call a, b;
  a.dt = flagcxFloat;
  b.dt = flagcxFloat64;
  expectMismatch("dtypes float32 vs float64", {a, b}, {"float32", "float64"});
}

// ---------------------------------------------------------------- flight recorder

std::string tmpDir() {
  char tmpl[] = "/tmp/flagcx-fr-XXXXXX";
  char *d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

void rmTree(const std::string &dir) {
  std::string cmd = "rm -rf '" + dir + "'";
  if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", dir.c_str());
}

// Rank 1 stops itself after ten allreduces of distinct sizes; rank 0 times
// out in the eleventh and dumps its last FLAGCX_FLIGHT_RECORDER_SIZE=4
// operations.  Op i moves (1000 + i) floats = 4000 + 4i bytes, so the dump
// must show the byte counts of ops 7..10 and none of ops 0..5.
// Ranks that finished their part, so that the parent releases a stopped rank
// as soon as it is no longer needed.
struct Finished {
  std::atomic<int> n;
};

void releaseWhenDone(Finished *f, int want, pid_t stopped, int maxSec) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(maxSec);
  while (f->n.load() < want && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(stopped, SIGKILL);
  kill(stopped, SIGCONT);
}

void stoppedPeerDump(bool toFile) {
  std::string dir = tmpDir();
  Finished *fin = harness::sharedBlock<Finished>();
  std::string logPath = dir + "/stderr.0";
  harness::Env env;
  // Into the log the dump goes at INFO (COLL), so that the WARN stays the cause.
  env.vars = {{"FLAGCX_TIMEOUT", "3"}, {"FLAGCX_FLIGHT_RECORDER_SIZE", "4"},
              {"FLAGCX_FLIGHT_RECORDER_FILE", toFile ? dir + "/fr.%r" : ""},
              {"FLAGCX_DEBUG", toFile ? "WARN" : "INFO"},
              {"FLAGCX_DEBUG_SUBSYS", toFile ? "INIT,ENV" : "INIT,ENV,COLL"}};
  auto res = harness::run(2, [&](int rank, int nranks, flagcxUniqueId *id) {
    if (rank == 0 && !toFile) {
      if (!freopen(logPath.c_str(), "w", stderr)) return 9;
    }
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    std::vector<float> in(2000, 1.f), out(2000);
    for (int i = 0; i < 10; i++)
      RANK_OK(flagcxAllReduce(in.data(), out.data(), 1000 + static_cast<size_t>(i), flagcxFloat,
                              flagcxSum, comm, nullptr));
    if (rank == 1) {
      raise(SIGSTOP);
      return 0;
    }
    flagcxResult_t r =
        flagcxAllReduce(in.data(), out.data(), 1010, flagcxFloat, flagcxSum, comm, nullptr);
    flagcxCommAbort(comm);
    fflush(stderr);
    fin->n++;
    RANK_CHECK(r != flagcxSuccess, "allreduce with a stopped peer succeeded");
    return 0;
  }, env, 40, [&](std::vector<pid_t> &pids) {
    // Rank 0 gives up after 3 s; then release rank 1 for good.
    releaseWhenDone(fin, 1, pids[1], 20);
  });
  harness::freeShared(fin);
  EXPECT_EQ(res.status[0], 0) << res.describe();
  std::string dump = harness::readFile(toFile ? dir + "/fr.0" : logPath);
  ASSERT_FALSE(dump.empty()) << (toFile ? "no dump at " + dir + "/fr.0" : "empty log");
  EXPECT_TRUE(harness::containsCi(dump, "allreduce")) << dump;
  for (int i = 7; i <= 10; i++)
    EXPECT_TRUE(harness::hasNumberToken(dump, 4000 + 4 * i)) << "op " << i << " missing:\n" << dump;
  for (int i = 0; i <= 5; i++)
    EXPECT_FALSE(harness::hasNumberToken(dump, 4000 + 4 * i))
        << "op " << i << " kept beyond FLAGCX_FLIGHT_RECORDER_SIZE=4:\n" << dump;
  if (toFile) {
    struct stat st;
    EXPECT_NE(stat((dir + "/fr.1").c_str(), &st), 0) << "a stopped rank cannot have dumped";
  }
  rmTree(dir);
}

TEST(FlightRecorder, DumpToFileOnTimeout) { stoppedPeerDump(true); }
TEST(FlightRecorder, DumpToLogOnTimeout) { stoppedPeerDump(false); }

std::string runInfo(const std::vector<std::string> &files, int *rc) {
  // meson passes the tool's path; run by hand, find it in the build tree.
  const char *tool = getenv("FLAGCX_INFO");
  std::string path = tool ? tool : "";
  if (path.empty()) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
      self[n] = '\0';
      std::string dir(self);
      dir = dir.substr(0, dir.rfind('/'));  // <build>/tests/multirank
      path = dir + "/../../tools/flagcx-info";
    }
  }
  std::string cmd = path + " --compare-dumps";
  for (auto &f : files) cmd += " '" + f + "'";
  cmd += " 2>&1";
  std::string out;
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// Does the tool's output blame `rank` (and no other)?
void expectBlames(const std::string &out, int rank, int nranks) {
  std::string lo = harness::lower(out);
  EXPECT_NE(lo.find("rank " + std::to_string(rank)), std::string::npos)
      << "compare-dumps does not name rank " << rank << ":\n" << out;
  // Whatever line names the culprit must not name the healthy ranks instead.
  for (int r = 0; r < nranks; r++) {
    if (r == rank) continue;
    for (const char *verb : {"diverged", "stopped first"}) {
      std::string bad = "rank " + std::to_string(r) + " " + verb;
      EXPECT_EQ(lo.find(bad), std::string::npos) << "blames rank " << r << ":\n" << out;
    }
  }
}

// Three ranks; rank 2 calls broadcast where the others call allreduce (op
// #5).  Every rank fails and dumps; compare-dumps names rank 2 as diverged.
TEST(FlightRecorder, CompareDumpsNamesDivergedRank) {
  std::string dir = tmpDir();
  harness::Env env;
  env.vars = {{"FLAGCX_TIMEOUT", "3"}, {"FLAGCX_FLIGHT_RECORDER_FILE", dir + "/fr.%r"}};
  auto res = harness::run(3, [&](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    std::vector<float> in(4096, 1.f), out(4096);
    for (int i = 0; i < 5; i++)
      RANK_OK(flagcxAllReduce(in.data(), out.data(), 4096, flagcxFloat, flagcxSum, comm, nullptr));
    flagcxResult_t r;
    if (rank == 2)
      r = flagcxBroadcast(in.data(), out.data(), 4096, flagcxFloat, 0, comm, nullptr);
    else
      r = flagcxAllReduce(in.data(), out.data(), 4096, flagcxFloat, flagcxSum, comm, nullptr);
    RANK_CHECK(r != flagcxSuccess, "mismatched call succeeded");
    flagcxCommAbort(comm);
    return 0;
  }, env, 40);
  EXPECT_TRUE(res.allOk()) << res.describe();
  std::vector<std::string> files;
  for (int r = 0; r < 3; r++) {
    files.push_back(dir + "/fr." + std::to_string(r));
    struct stat st;
    EXPECT_EQ(stat(files.back().c_str(), &st), 0) << "rank " << r << " wrote no dump";
  }
  int rc = 0;
  std::string out = runInfo(files, &rc);
  EXPECT_TRUE(harness::containsCi(out, "diverge")) << out;
  expectBlames(out, 2, 3);
  rmTree(dir);
}

// Three ranks; rank 2 hangs (stops itself) before op #6, so only ranks 0
// and 1 time out and dump.  Handed all three paths, compare-dumps must name
// rank 2: its dump is missing while the others wait in #6.
TEST(FlightRecorder, CompareDumpsNamesStoppedRank) {
  std::string dir = tmpDir();
  Finished *fin = harness::sharedBlock<Finished>();
  harness::Env env;
  env.vars = {{"FLAGCX_TIMEOUT", "3"}, {"FLAGCX_FLIGHT_RECORDER_FILE", dir + "/fr.%r"}};
  auto res = harness::run(3, [&](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    std::vector<float> in(4096, 1.f), out(4096);
    for (int i = 0; i < 6; i++)
      RANK_OK(flagcxAllReduce(in.data(), out.data(), 4096, flagcxFloat, flagcxSum, comm, nullptr));
    if (rank == 2) {
      raise(SIGSTOP);
      return 0;
    }
    flagcxResult_t r =
        flagcxAllReduce(in.data(), out.data(), 4096, flagcxFloat, flagcxSum, comm, nullptr);
    flagcxCommAbort(comm);
    fin->n++;
    RANK_CHECK(r != flagcxSuccess, "allreduce with a stopped peer succeeded");
    return 0;
  }, env, 60, [&](std::vector<pid_t> &pids) { releaseWhenDone(fin, 2, pids[2], 30); });
  harness::freeShared(fin);
  EXPECT_EQ(res.status[0], 0) << res.describe();
  EXPECT_EQ(res.status[1], 0) << res.describe();
  std::vector<std::string> files;
  for (int r = 0; r < 3; r++) files.push_back(dir + "/fr." + std::to_string(r));
  int rc = 0;
  std::string out = runInfo(files, &rc);
  EXPECT_TRUE(harness::containsCi(out, "stopped")) << out;
  expectBlames(out, 2, 3);
  rmTree(dir);
}

}  // namespace
