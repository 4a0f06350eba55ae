// Reading the FLAGCX_* variables of param_list.h (params.h): parsing, the
// XCHECK value checks and their warnings, unknown names, and the table that
// paramsReload() swaps.
#include "base/params.h"

#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/log.h"

extern char **environ;

namespace flagcx {
namespace {

// The XCHECK specs, by variable.
struct Checks {
  const char *spec[paramCount()] = {};
  constexpr Checks() {
#define X(name, kind, def, doc)
#define XCHECK(name, s) spec[static_cast<int>(Param::name)] = s;
#include "base/param_list.h"
#undef X
#undef XCHECK
  }
};
constexpr Checks kChecks;
constexpr const char *checkOf(Param p) {
  return kChecks.spec[static_cast<int>(p)] ? kChecks.spec[static_cast<int>(p)] : "";
}

constexpr ParamInfo kInfo[] = {
#define X(name, kind, def, doc) {"FLAGCX_" #name, #kind, def, doc, checkOf(Param::name)},
#define XCHECK(name, spec)
#include "base/param_list.h"
#undef X
#undef XCHECK
};

struct Values {
  std::string str[paramCount()];
  int64_t num[paramCount()] = {};
  bool set[paramCount()] = {};
  std::vector<ParamNote> notes;
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

std::string upper(std::string s) {
  for (auto &c : s) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> splitOn(const std::string &s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t at = s.find(sep, pos);
    out.push_back(s.substr(pos, at == std::string::npos ? std::string::npos : at - pos));
    if (at == std::string::npos) return out;
    pos = at + 1;
  }
}

// "MIN..MAX" (either end optional) or a single value; alternatives joined by |.
bool inRange(const std::string &spec, int64_t v) {
  for (const std::string &alt : splitOn(spec, '|')) {
    size_t dots = alt.find("..");
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    if (dots == std::string::npos) {
      if (parseInt(alt.c_str(), &lo) && v == lo) return true;
      continue;
    }
    if (dots > 0) parseInt(alt.substr(0, dots).c_str(), &lo);
    if (dots + 2 < alt.size()) parseInt(alt.substr(dots + 2).c_str(), &hi);
    if (v >= lo && v <= hi) return true;
  }
  return false;
}

// A variable's default as a warning names it: "-2 (auto)" where -2 is the
// auto value (every variable whose doc says "-2 (auto)").
std::string defaultText(const ParamInfo &pi) {
  std::string d = pi.def;
  if (d == "-2" && strstr(pi.doc, "-2 (auto)")) d += " (auto)";
  return d;
}

// "1..|-2" as "1 or more, or -2".
std::string rangeText(const std::string &spec) {
  std::string out;
  for (const std::string &alt : splitOn(spec, '|')) {
    size_t dots = alt.find("..");
    std::string t = dots == std::string::npos ? alt
                    : dots + 2 == alt.size()  ? alt.substr(0, dots) + " or more"
                    : dots == 0               ? alt.substr(2) + " or less"
                                              : alt.substr(0, dots) + " to " + alt.substr(dots + 2);
    out += (out.empty() ? "" : ", or ") + t;
  }
  return out;
}

void warnNote(Values *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void warnNote(Values *v, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  v->notes.push_back({true, buf});
}

// A Str value against "A|B|C" or "list:A|B|C"; returns the value to use.
std::string checkStr(Values *v, const ParamInfo &pi, const std::string &given) {
  std::string spec = pi.check;
  bool list = spec.rfind("list:", 0) == 0;
  if (list) spec = spec.substr(5);
  std::vector<std::string> names = splitOn(spec, '|');
  auto known = [&](const std::string &t) {
    for (const auto &n : names)
      if (upper(t) == n) return true;
    return false;
  };
  if (!list) {
    if (known(given)) return given;
    std::string shown;
    for (const auto &n : names) shown += (shown.empty() ? "" : ", ") + (n.empty() ? "(empty)" : n);
    warnNote(v, "%s=\"%s\" is not one of %s; using \"%s\"", pi.name, given.c_str(),
             shown.c_str(), pi.def);
    return pi.def;
  }
  bool negate = !given.empty() && given[0] == '^';
  std::string kept, dropped;
  for (const std::string &t : splitOn(given.substr(negate ? 1 : 0), ',')) {
    if (t.empty()) continue;
    std::string &to = known(t) ? kept : dropped;
    to += (to.empty() ? "" : ",") + t;
  }
  if (dropped.empty()) return given;
  std::string use = (negate ? "^" : "") + kept;
  if (kept.empty()) use = pi.def;
  warnNote(v, "%s=\"%s\": unknown name(s) %s; using \"%s\"", pi.name, given.c_str(),
           dropped.c_str(), use.c_str());
  return use;
}

Values *load() {
  auto *v = new Values();
  for (size_t i = 0; i < paramCount(); i++) {
    const ParamInfo &pi = kInfo[i];
    const char *env = getenv(pi.name);
    v->set[i] = env != nullptr;
    v->str[i] = env ? env : pi.def;
    if (strcmp(pi.kind, "Ack") == 0) {
      if (env) v->notes.push_back({false, std::string(pi.name) + "=" + env +
                                   " has no effect in flagcx: " + pi.doc});
      continue;
    }
    if (strcmp(pi.kind, "Int") == 0) {
      int64_t n = 0;
      parseInt(pi.def, &n);
      if (env && *env) {
        int64_t parsed;
        if (!parseInt(env, &parsed)) {
          warnNote(v, "%s=\"%s\" is not an integer; using %s", pi.name, env,
                   defaultText(pi).c_str());
          v->str[i] = pi.def;
        } else if (*pi.check && !inRange(pi.check, parsed)) {
          warnNote(v, "%s=%s is not accepted (%s); using %s", pi.name, env,
                   rangeText(pi.check).c_str(), defaultText(pi).c_str());
          v->str[i] = pi.def;
        } else {
          n = parsed;
        }
      }
      v->num[i] = n;
    } else if (env && *pi.check) {
      v->str[i] = checkStr(v, pi, env);
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

const std::vector<ParamNote> &paramsNotes() { return values().notes; }

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
