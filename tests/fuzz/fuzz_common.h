// Shared set-up of the fuzz targets: a quiet log (argument errors would
// otherwise print a WARN line per input) and short timeouts.
#pragma once
#include <cstdlib>


namespace fuzz {

// Called from LLVMFuzzerInitialize, before anything reads a parameter (the
// table is loaded once, on first use; paramsReload() would leak the old one
// on purpose, which LeakSanitizer would report).
inline void quietLibrary() {
  setenv("FLAGCX_DEBUG", "NONE", 1);
  setenv("FLAGCX_TIMEOUT", "1", 1);
}

// Consumes bytes from the front of the input.
struct Reader {
  const uint8_t *p;
  size_t n;
  uint8_t byte(uint8_t def = 0) {
    if (n == 0) return def;
    n--;
    return *p++;
  }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v = (v << 8) | byte();
    return v;
  }
};

}  // namespace fuzz
