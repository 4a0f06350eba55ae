// How commInit picks the verbs transport: FLAGCX_NET, the software device
// (FLAGCX_IB_SOFTWARE_DEVICE, tests only), both ends of a pair agreeing, and
// the FLAGCX_DEBUG=INFO line that says which transport and why.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "base/log.h"
#include "tests/common/harness.h"

namespace {

std::string logDir() {
  static std::string d = [] {
    char tmpl[] = "/tmp/flagcx-ibsel-XXXXXX";
    return std::string(mkdtemp(tmpl));
  }();
  return d;
}

// The parent removes the logs at exit (ranks leave with _exit()).
struct RemoveLogs {
  pid_t owner = getpid();
  std::string dir = logDir();
  ~RemoveLogs() {
    std::error_code ec;
    if (getpid() == owner) std::filesystem::remove_all(dir, ec);
  }
} g_removeLogs;

// This rank's log so far (FLAGCX_DEBUG_FILE names one file per pid).
std::string myLog() {
  std::ifstream f(logDir() + "/log." + std::to_string(getpid()));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

harness::Env logEnv(std::vector<std::pair<std::string, std::string>> more) {
  harness::Env env;
  env.vars = {{"FLAGCX_DEBUG", "INFO"}, {"FLAGCX_DEBUG_SUBSYS", "INIT"},
              {"FLAGCX_DEBUG_FILE", logDir() + "/log.%p"}, {"FLAGCX_TIMEOUT", "20"},
              {"FLAGCX_NET", ""}, {"FLAGCX_IB_SOFTWARE_DEVICE", "0"}, {"FLAGCX_SHM_DISABLE", "0"},
              {"FLAGCX_IB_HCA", ""}};
  for (auto &kv : more) env.vars.push_back(kv);
  return env;
}

// Init, one allreduce (checked), destroy; then the log must contain `want`.
int initAllreduce(int rank, int nranks, flagcxUniqueId *id, const std::string &want) {
  flagcx::logReinit();  // this process's own FLAGCX_DEBUG_FILE
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
  std::vector<float> v(100000, static_cast<float>(rank + 1));
  RANK_OK(flagcxAllReduce(v.data(), v.data(), v.size(), flagcxFloat, flagcxSum, comm, nullptr));
  float sum = static_cast<float>(nranks * (nranks + 1) / 2);
  for (float x : v) RANK_CHECK(x == sum, "allreduce gave %f, expected %f", x, sum);
  RANK_OK(flagcxCommDestroy(comm));
  std::string log = myLog();
  RANK_CHECK(log.find(want) != std::string::npos, "log lacks '%s':\n%s", want.c_str(), log.c_str());
  return 0;
}

// Same-host peers use shm; with shm disabled they are network peers and the
// software device carries them.
TEST(IbSelect, NetworkPeersUseVerbsWhenEveryEndHasAPort) {
  auto env = logEnv({{"FLAGCX_IB_SOFTWARE_DEVICE", "1"}, {"FLAGCX_SHM_DISABLE", "1"}});
  auto res = harness::run(3, [](int rank, int nranks, flagcxUniqueId *id) {
    return initAllreduce(rank, nranks, id,
                         "2 peer(s) over verbs on soft0 port 1 (software device; FLAGCX_IB_SOFTWARE_DEVICE=1");
  }, env, 120);
  EXPECT_TRUE(res.allOk()) << res.describe();
  auto env2 = logEnv({{"FLAGCX_IB_SOFTWARE_DEVICE", "1"}});
  res = harness::run(2, [](int rank, int nranks, flagcxUniqueId *id) {
    return initAllreduce(rank, nranks, id, "1 shm peer(s), 0 socket peer(s), 0 verbs peer(s)");
  }, env2, 120);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

// FLAGCX_NET=Socket wins over an available device.
TEST(IbSelect, NetSocketForcesSockets) {
  auto env = logEnv({{"FLAGCX_IB_SOFTWARE_DEVICE", "2"}, {"FLAGCX_NET", "Socket"}, {"FLAGCX_SHM_DISABLE", "1"}});
  auto res = harness::run(2, [](int rank, int nranks, flagcxUniqueId *id) {
    return initAllreduce(rank, nranks, id, "1 network peer(s) over sockets: FLAGCX_NET=Socket");
  }, env, 120);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

// Only rank 0 has a device: both ends of every pair must agree, so every
// pair uses sockets, and rank 0 says why.
TEST(IbSelect, OneEndWithoutDeviceMeansSockets) {
  auto env = logEnv({{"FLAGCX_SHM_DISABLE", "1"}});
  auto res = harness::run(2, [](int rank, int nranks, flagcxUniqueId *id) {
    if (rank == 0) {
      setenv("FLAGCX_IB_SOFTWARE_DEVICE", "1", 1);
      flagcx::paramsReload();
      flagcx::logReinit();
    }
    return initAllreduce(rank, nranks, id,
                         rank == 0 ? "over sockets: the peers have no usable RDMA device"
                                   : "over sockets: ");
  }, env, 120);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

// FLAGCX_NET=IB without a usable device (none exists on our machines, and no
// software device) fails init with a line naming the variable; a bad value
// is an invalid argument.
TEST(IbSelect, NetIbWithoutDeviceFails) {
  auto env = logEnv({{"FLAGCX_NET", "IB"}, {"FLAGCX_SHM_DISABLE", "1"}, {"FLAGCX_IB_HCA", "=no_such_hca"}});
  auto res = harness::run(2, [](int rank, int nranks, flagcxUniqueId *id) {
    flagcx::logReinit();
    flagcxComm_t comm = nullptr;
    flagcxResult_t r = flagcxCommInitRank(&comm, nranks, id, rank);
    RANK_CHECK(r == flagcxSystemError, "init returned %d", r);
    std::string log = myLog();
    RANK_CHECK(log.find("FLAGCX_NET=IB but rank") != std::string::npos, "log:\n%s", log.c_str());
    return 0;
  }, env, 120);
  EXPECT_TRUE(res.allOk()) << res.describe();
  auto bad = logEnv({{"FLAGCX_NET", "carrier-pigeon"}});
  res = harness::run(2, [](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm = nullptr;
    flagcxResult_t r = flagcxCommInitRank(&comm, nranks, id, rank);
    RANK_CHECK(r == flagcxInvalidArgument, "init returned %d", r);
    return 0;
  }, bad, 120);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

}  // namespace
