// Typed access to the FLAGCX_* variables declared in param_list.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace flagcx {

enum class Param : int {
#define X(name, kind, def, doc) name,
#include "base/param_list.h"
#undef X
  Count
};

struct ParamInfo {
  const char *name;  // full name, FLAGCX_ prefix included
  const char *kind;  // "Int" or "Str"
  const char *def;
  const char *doc;
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

}  // namespace flagcx
