// The full-suite variants: every shipped script verifies at nranks 17..40
// (every ranks-per-host that divides nranks; roots 0, 1, n/2, n-1).
#include <gtest/gtest.h>

#include <memory>

#include "flagcx_paths.h"
#include "sched/registry.h"
#include "sched/script.h"
#include "sched/verify.h"

using namespace flagcx;

TEST(SchedScriptsFull, ShippedVerifyAt17To40) {
  Registry reg;
  std::string err;
  ASSERT_TRUE(Registry::loadFrom(std::string(FLAGCX_SOURCE_DIR) + "/algos/registry.yaml", "", &reg, &err))
      << err;
  for (const AlgoInfo &a : reg.all()) {
    std::unique_ptr<Script> s;
    ASSERT_TRUE(Script::load(a.path, &s, &err)) << err;
    for (int n = 17; n <= 40; n++) {
      for (int g = 1; g <= n; g++) {
        if (n % g) continue;
        ASSERT_TRUE(verifyScript(*s, Topo{n, g}, &err)) << err;
      }
    }
  }
}

// At scale: every shipped script at 256 ranks (one and 16 per host) and the
// odd 255, with the verifier's compact contribution sets.
TEST(SchedScriptsFull, ShippedVerifyAt255And256) {
  Registry reg;
  std::string err;
  ASSERT_TRUE(Registry::loadFrom(std::string(FLAGCX_SOURCE_DIR) + "/algos/registry.yaml", "", &reg, &err))
      << err;
  for (const AlgoInfo &a : reg.all()) {
    std::unique_ptr<Script> s;
    ASSERT_TRUE(Script::load(a.path, &s, &err)) << err;
    for (Topo t : {Topo{256, 1}, Topo{256, 16}, Topo{255, 1}, Topo{255, 5}})
      ASSERT_TRUE(verifyScript(*s, t, &err)) << err;
  }
}
