// The Lua script loader: Script::loadText in its sandbox (small memory and
// instruction budgets here, so that each input is quick), then, for scripts
// that load, supports/chunks/cost and compileAll at a few sizes, and the
// verifier on whatever compiles.  Scripts are untrusted input: no crash, no
// escape, no unbounded time or memory.
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "sched/script.h"
#include "sched/verify.h"

using namespace flagcx;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::quietLibrary();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  ScriptLimits lim;
  lim.memoryBytes = size_t(16) << 20;
  lim.instructions = 2'000'000;
  std::unique_ptr<Script> s;
  std::string err;
  if (!Script::loadText("fuzz.lua", text, &s, &err, lim)) {
    if (err.rfind("fuzz.lua", 0) != 0) __builtin_trap();  // a rejection names the file
    return 0;
  }
  for (int n : {1, 2, 3, 4, 6}) {
    Topo t;
    t.nranks = n;
    t.ranksPerHost = n % 2 == 0 ? 2 : 1;
    std::string why;
    if (!s->supports(t, &why)) continue;
    int chunks = 0;
    double steps = 0, bytes = 0;
    s->chunks(t, &chunks, &err);
    s->cost(t, &steps, &bytes, &err);
    Schedule sched;
    if (s->compileAll(t, 0, &sched, &err)) verifySchedule(sched, &err);
    Schedule one;
    s->compileRank(t, n - 1, n > 1 ? 1 : 0, &one, &err);
  }
  return 0;
}
