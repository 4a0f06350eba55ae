// The log: levels, subsystems, FLAGCX_DEBUG_FILE, the last error text.
#include "base/log.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "base/params.h"

namespace flagcx {
namespace {

struct LogState {
  LogLevel level = LogLevel::Warn;
  uint32_t mask = kInit | kEnv;
  FILE *out = stderr;
  std::string fileName;  // FLAGCX_DEBUG_FILE expanded, while `out` is that file
  char host[64] = "?";
};

std::mutex g_mu;
LogState g_state;
std::atomic<bool> g_ready{false};
thread_local int t_rank = -1;
// The "[rank]" field of a line: "-" on threads that act for no rank
// (process-wide messages: the environment, the unique id).
struct RankField {
  char text[16];
  RankField() {
    if (t_rank < 0) snprintf(text, sizeof(text), "-");
    else snprintf(text, sizeof(text), "%d", t_rank);
  }
};
thread_local char t_lastError[1024];
char g_lastError[1024];

const struct {
  const char *name;
  uint32_t bit;
} kSubsys[] = {{"INIT", kInit}, {"COLL", kColl},   {"P2P", kP2P},
               {"NET", kNet},   {"SHM", kShm},     {"BOOTSTRAP", kBootstrap},
               {"ENV", kEnv},   {"TUNING", kTuning}, {"ALLOC", kAlloc}};

const char *subsysName(uint32_t s) {
  for (const auto &e : kSubsys)
    if (s & e.bit) return e.name;
  return "ALL";
}

std::string upper(std::string s) {
  for (auto &c : s) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  return s;
}

// Opens the log file for appending.  O_NONBLOCK only for the open: a FIFO
// with no reader is refused (ENXIO) instead of blocking the first log line.
FILE *openLogFile(const std::string &name) {
  int fd = open(name.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                0644);
  if (fd < 0) return nullptr;
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  FILE *f = fdopen(fd, "a");
  if (!f) close(fd);
  return f;
}

// One log line to the log's destination (g_mu held).  A file that stops
// taking lines (/dev/full, a full disk, an I/O error) is given up for stderr
// with one warning there, and the line goes to stderr too.
void writeLocked(const char *line, size_t n) {
  if (fwrite(line, 1, n, g_state.out) == n && fflush(g_state.out) == 0) return;
  if (g_state.out == stderr) return;  // nowhere else to go
  int e = errno;
  fclose(g_state.out);
  g_state.out = stderr;
  fprintf(stderr, "flagcx WARN cannot write FLAGCX_DEBUG_FILE=%s (%s); logging to stderr\n",
          g_state.fileName.c_str(), strerror(e));
  fwrite(line, 1, n, stderr);
}

void initLocked() {
  if (g_ready.load(std::memory_order_acquire)) return;
  gethostname(g_state.host, sizeof(g_state.host) - 1);
  char *dot = strchr(g_state.host, '.');
  if (dot) *dot = '\0';
  g_state.level = parseLogLevel(paramStr(Param::DEBUG));
  g_state.mask = parseSubsysMask(paramStr(Param::DEBUG_SUBSYS));
  const std::string &file = paramStr(Param::DEBUG_FILE);
  if (!file.empty()) {
    std::string name = expandLogFileName(file);
    if (FILE *f = openLogFile(name)) {
      setvbuf(f, nullptr, _IOLBF, 0);
      g_state.out = f;
      g_state.fileName = name;
    } else {
      fprintf(stderr, "flagcx WARN cannot open FLAGCX_DEBUG_FILE=%s (%s); logging to stderr\n",
              name.c_str(), strerror(errno));
    }
  }
  g_ready.store(true, std::memory_order_release);
  char line[1400];
  for (const ParamNote &n : paramsNotes()) {
    if (g_state.level < (n.warn ? LogLevel::Warn : LogLevel::Info)) continue;
    if (!n.warn && !(g_state.mask & kEnv)) continue;
    int len = snprintf(line, sizeof(line), "%s:%d:%ld [%s] flagcx %s ENV %s\n", g_state.host,
                       getpid(), static_cast<long>(syscall(SYS_gettid)), RankField().text,
                       n.warn ? "WARN" : "INFO", n.text.c_str());
    writeLocked(line, std::min(static_cast<size_t>(len), sizeof(line) - 1));
  }
  std::string unknown = paramsUnknownNames();
  if (!unknown.empty() && g_state.level >= LogLevel::Warn) {
    int len = snprintf(line, sizeof(line),
                       "%s:%d:%ld [%s] flagcx WARN ENV unknown variable(s) %s ignored; "
                       "`flagcx-info --env` lists the known ones\n",
                       g_state.host, getpid(), static_cast<long>(syscall(SYS_gettid)), RankField().text,
                       unknown.c_str());
    writeLocked(line, std::min(static_cast<size_t>(len), sizeof(line) - 1));
  }
}

void ensureInit() {
  if (g_ready.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lk(g_mu);
  initLocked();
}

}  // namespace

LogLevel parseLogLevel(const std::string &s) {
  std::string u = upper(s);
  if (u == "NONE") return LogLevel::None;
  if (u == "VERSION") return LogLevel::Version;
  if (u == "INFO") return LogLevel::Info;
  if (u == "TRACE") return LogLevel::Trace;
  return LogLevel::Warn;
}

uint32_t parseSubsysMask(const std::string &s) {
  std::string u = upper(s);
  bool negate = !u.empty() && u[0] == '^';
  if (negate) u.erase(0, 1);
  uint32_t mask = 0;
  size_t pos = 0;
  while (pos <= u.size()) {
    size_t comma = u.find(',', pos);
    if (comma == std::string::npos) comma = u.size();
    std::string tok = u.substr(pos, comma - pos);
    if (tok == "ALL") mask = kAll;
    for (const auto &e : kSubsys)
      if (tok == e.name) mask |= e.bit;
    pos = comma + 1;
  }
  return negate ? ~mask : mask;
}

std::string expandLogFileName(const std::string &pattern) {
  std::string out;
  char host[64] = "";
  gethostname(host, sizeof(host) - 1);
  for (size_t i = 0; i < pattern.size(); i++) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'h') { out += host; i++; continue; }
      if (c == 'p') { out += std::to_string(getpid()); i++; continue; }
    }
    out += pattern[i];
  }
  return out;
}

bool logEnabled(LogLevel level, uint32_t subsys) {
  ensureInit();
  if (level > g_state.level) return false;
  // Warnings are always shown; the subsystem mask filters INFO and TRACE.
  return level <= LogLevel::Warn || (g_state.mask & subsys) != 0;
}

static void vlog(LogLevel level, uint32_t subsys, const char *file, int line, const char *fmt,
                 va_list ap) {
  char msg[1024];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  if (level == LogLevel::Warn) {
    snprintf(t_lastError, sizeof(t_lastError), "%s", msg);
    std::lock_guard<std::mutex> lk(g_mu);
    snprintf(g_lastError, sizeof(g_lastError), "%s", msg);
  }
  if (!logEnabled(level, subsys)) return;
  const char *lv = level == LogLevel::Warn ? "WARN" : level == LogLevel::Info ? "INFO"
                   : level == LogLevel::Trace ? "TRACE" : "VERSION";
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  // Argument errors carry no source location (line 0): the message names
  // the function and the argument.
  char where[160] = "";
  if (line > 0) snprintf(where, sizeof(where), " (%s:%d)", base, line);
  char lineBuf[1400];
  int n = snprintf(lineBuf, sizeof(lineBuf), "%s:%d:%ld [%s] flagcx %s %s %s%s\n",
                   g_state.host, getpid(), static_cast<long>(syscall(SYS_gettid)),
                   RankField().text, lv, subsysName(subsys), msg, where);
  if (n >= static_cast<int>(sizeof(lineBuf))) {  // cut, but still one line
    n = sizeof(lineBuf) - 1;
    lineBuf[n - 1] = '\n';
  }
  std::lock_guard<std::mutex> lk(g_mu);
  writeLocked(lineBuf, static_cast<size_t>(n));
}

void logMessage(LogLevel level, uint32_t subsys, const char *file, int line, const char *fmt,
                ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, subsys, file, line, fmt, ap);
  va_end(ap);
}

void logReinit() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_state.out != stderr) fclose(g_state.out);
  g_state = LogState();
  g_ready.store(false, std::memory_order_release);
  initLocked();
}

void logSetRank(int rank) { t_rank = rank; }
int logRank() { return t_rank; }

const char *lastErrorText() { return t_lastError[0] ? t_lastError : g_lastError; }

namespace {
// The tag of an argument error is the family of the entry point its message
// names ("flagcxAllReduce: ..."), whichever check found it: one kind of
// call, one tag.  Messages that name no entry point keep the caller's tag.
uint32_t entryFamily(const char *msg, uint32_t fallback) {
  static const struct {
    const char *prefix;
    uint32_t tag;
  } kFamilies[] = {
      {"flagcxP2pEngine", kP2P}, {"flagcxPut", kP2P}, {"flagcxGet", kP2P},
      {"flagcxSignal", kP2P},    {"flagcxWaitSignal", kP2P}, {"flagcxOneSide", kP2P},
      {"flagcxCommWindow", kP2P}, {"flagcxReadCounter", kP2P}, {"flagcxWaitCounter", kP2P},
      {"flagcxMem", kAlloc},      {"flagcxComm", kInit},  {"flagcxGetUniqueId", kInit},
      {"flagcxDeviceHandle", kInit}, {"flagcxHandle", kInit}, {"flagcxGroup", kColl},
      {"flagcx", kColl},
  };
  for (const auto &f : kFamilies)
    if (strncmp(msg, f.prefix, strlen(f.prefix)) == 0) return f.tag;
  return fallback;
}
}  // namespace

flagcxResult_t argError(flagcxResult_t code, uint32_t subsys, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  // Always recorded as the last error, even when WARN lines are filtered.
  logMessage(LogLevel::Warn, entryFamily(msg, subsys), "api", 0, "%s", msg);
  return code;
}

}  // namespace flagcx
