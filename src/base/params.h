// Typed access to the FLAGCX_* variables declared in param_list.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace flagcx {

enum class Param : int {
#define X(name, kind, def, doc) name,
#define XCHECK(name, spec)
#include "base/param_list.h"
#undef X
#undef XCHECK
  Count
};

struct ParamInfo {
  const char *name;  // full name, FLAGCX_ prefix included
  const char *kind;  // "Int", "Str" or "Ack" (FlagCX's, no effect here)
  const char *def;
  const char *doc;
  const char *check;  // accepted values (param_list.h, XCHECK); "" for any
};

// Values are read from the environment once, on first use, and kept.
int64_t paramInt(Param p);
const std::string &paramStr(Param p);
bool paramIsSet(Param p);  // set in the environment (even to its default)
const ParamInfo &paramInfo(Param p);
constexpr size_t paramCount() { return static_cast<size_t>(Param::Count); }

// Re-read the environment; for tests that change variables in-process.
void paramsReload();

// Names of FLAGCX_* variables in the environment that are not declared.
std::string paramsUnknownNames();

// What reading the environment found worth a line: a value not accepted
// (warn, with the value used instead) or a FlagCX variable with no effect
// here (info).  Printed by the log when it starts (base/log.cc).
struct ParamNote {
  bool warn;
  std::string text;
};
const std::vector<ParamNote> &paramsNotes();

}  // namespace flagcx
