// The full-suite variants: every shipped script verifies at nranks 17..40
// (every ranks-per-host that divides nranks; roots 0, 1, n/2, n-1).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "flagcx_paths.h"
#include "sched/registry.h"
#include "sched/script.h"
#include "sched/verify.h"

using namespace flagcx;

namespace {
// Verifies every shipped script at each topology; the first error fails.
void verifyShipped(const std::vector<Topo> &topos) {
  Registry reg;
  std::string err;
  ASSERT_TRUE(Registry::loadFrom(std::string(FLAGCX_SOURCE_DIR) + "/algos/registry.yaml", "", &reg, &err))
      << err;
  for (const AlgoInfo &a : reg.all()) {
    std::unique_ptr<Script> s;
    ASSERT_TRUE(Script::load(a.path, &s, &err)) << err;
    for (const Topo &t : topos) ASSERT_TRUE(verifyScript(*s, t, &err)) << err;
  }
}
}  // namespace

TEST(SchedScriptsFull, ShippedVerifyAt17To40) {
  std::vector<Topo> topos;
  for (int n = 17; n <= 40; n++)
    for (int g = 1; g <= n; g++)
      if (n % g == 0) topos.push_back(Topo{n, g});
  verifyShipped(topos);
}

// At scale: every shipped script at 256 ranks (one and 16 per host) and the
// odd 255, with the verifier's compact contribution sets.
TEST(SchedScriptsFull, ShippedVerifyAt255And256) {
  verifyShipped({Topo{256, 1}, Topo{256, 16}, Topo{255, 1}, Topo{255, 5}});
}
