// The YAML tuning loader (FLAGCX_TUNING_FILE's parser) and the small text
// parsers next to it.  First byte: 0-5 parseTuningText on the rest, 6
// parseForcedAlgos (FLAGCX_ALGO), 7 parseByteSize.  No input may crash or
// throw; a rejected file must come with a "file:line: message" error.
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "sched/tuner.h"

using namespace flagcx;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::quietLibrary();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  std::string text(reinterpret_cast<const char *>(data + 1), size - 1);
  std::string err;
  switch (data[0] % 8) {
    case 6: {
      std::array<std::string, static_cast<size_t>(OpKind::Count)> forced;
      if (!parseForcedAlgos(text, &forced, &err) && err.empty()) __builtin_trap();
      break;
    }
    case 7: {
      uint64_t v = 0;
      parseByteSize(text, &v);
      break;
    }
    default: {
      TuningRules rules;
      if (!parseTuningText("fuzz.yaml", text, &rules, &err)) {
        if (err.empty()) __builtin_trap();  // a rejection must say why
        if (err.rfind("fuzz.yaml", 0) != 0) __builtin_trap();  // and where
      } else {
        for (auto &rs : rules.byOp)
          for (auto &r : rs)
            if (r.algo.empty() || r.minBytes > r.maxBytes) {
              // Accepted rules must be usable; an empty algo name is not.
              if (r.algo.empty()) __builtin_trap();
            }
      }
      break;
    }
  }
  return 0;
}
