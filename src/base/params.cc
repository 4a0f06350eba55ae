#include "base/params.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/log.h"

extern char **environ;

namespace flagcx {
namespace {

const ParamInfo kInfo[] = {
#define X(name, kind, def, doc) {"FLAGCX_" #name, #kind, def, doc},
#include "base/param_list.h"
#undef X
};

struct Values {
  std::string str[paramCount()];
  int64_t num[paramCount()] = {};
  bool set[paramCount()] = {};
};

// Swapped whole by paramsReload (tests), read without a lock everywhere.
std::atomic<Values *> g_values{nullptr};
std::once_flag g_once;
std::mutex g_reloadMu;

bool parseInt(const char *s, int64_t *out) {
  errno = 0;
  char *end = nullptr;
  long long v = strtoll(s, &end, 0);
  if (errno != 0 || end == s) return false;
  while (*end == ' ') end++;
  if (*end != '\0') return false;
  *out = v;
  return true;
}

Values *load() {
  auto *v = new Values();
  for (size_t i = 0; i < paramCount(); i++) {
    const ParamInfo &pi = kInfo[i];
    const char *env = getenv(pi.name);
    v->set[i] = env != nullptr;
    v->str[i] = env ? env : pi.def;
    if (strcmp(pi.kind, "Int") == 0) {
      int64_t n = 0;
      parseInt(pi.def, &n);
      if (env && *env) {
        int64_t parsed;
        if (parseInt(env, &parsed)) {
          n = parsed;
        } else {
          // Logging itself reads params; print directly to avoid recursion.
          fprintf(stderr, "flagcx WARN %s=\"%s\" is not an integer; using default %s\n",
                  pi.name, env, pi.def);
          v->str[i] = pi.def;
        }
      }
      v->num[i] = n;
    }
  }
  return v;
}

Values &values() {
  std::call_once(g_once, [] { g_values.store(load(), std::memory_order_release); });
  return *g_values.load(std::memory_order_acquire);
}

}  // namespace

int64_t paramInt(Param p) { return values().num[static_cast<int>(p)]; }
const std::string &paramStr(Param p) { return values().str[static_cast<int>(p)]; }
bool paramIsSet(Param p) { return values().set[static_cast<int>(p)]; }
const ParamInfo &paramInfo(Param p) { return kInfo[static_cast<int>(p)]; }

void paramsReload() {
  std::lock_guard<std::mutex> lk(g_reloadMu);
  values();
  // The old table is leaked on purpose: other threads may hold references.
  g_values.store(load(), std::memory_order_release);
  logReinit();
}

std::string paramsUnknownNames() {
  std::string out;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "FLAGCX_", 7) != 0) continue;
    const char *eq = strchr(*e, '=');
    std::string name(*e, eq ? static_cast<size_t>(eq - *e) : strlen(*e));
    bool known = false;
    for (const auto &pi : kInfo) known = known || name == pi.name;
    if (!known) out += (out.empty() ? "" : ",") + name;
  }
  return out;
}

}  // namespace flagcx
