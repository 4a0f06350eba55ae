// What the tools print for "which flagcx is this": the library's release
// (meson.build's project version, through flagcx_lib_version.h) and the
// FlagCX API level the loaded library reports (flagcxGetVersion).
#pragma once
#include <cstdio>
#include <string>

#include "flagcx.h"
#include "flagcx_lib_version.h"

// "0.13.0"
inline std::string flagcxApiLevel() {
  int v = 0;
  flagcxGetVersion(&v);
  char text[48];
  snprintf(text, sizeof(text), "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
  return text;
}

// "flagcx 0.2.0, FlagCX API 0.13.0"
inline std::string flagcxVersionLine() {
  return std::string("flagcx ") + FLAGCX_LIB_VERSION + ", FlagCX API " + flagcxApiLevel();
}
