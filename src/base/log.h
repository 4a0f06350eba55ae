// Logging: FLAGCX_DEBUG (level), FLAGCX_DEBUG_SUBSYS (mask), FLAGCX_DEBUG_FILE.
// Every line: "host:pid:tid [rank] flagcx LEVEL SUBSYS message".
#pragma once
#include <cstdint>
#include <string>

#include "flagcx.h"

namespace flagcx {

enum class LogLevel : int { None = 0, Version = 1, Warn = 2, Info = 3, Trace = 4 };

enum Subsys : uint32_t {
  kInit = 1u << 0,
  kColl = 1u << 1,
  kP2P = 1u << 2,
  kNet = 1u << 3,
  kShm = 1u << 4,
  kBootstrap = 1u << 5,
  kEnv = 1u << 6,
  kTuning = 1u << 7,
  kAlloc = 1u << 8,
  kAll = ~0u,
};

// Parsers, exposed for the unit tests.
LogLevel parseLogLevel(const std::string &s);
uint32_t parseSubsysMask(const std::string &s);
std::string expandLogFileName(const std::string &pattern);  // %h host, %p pid

bool logEnabled(LogLevel level, uint32_t subsys);
void logMessage(LogLevel level, uint32_t subsys, const char *file, int line, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));
void logReinit();  // after paramsReload()

// The rank shown on log lines written by this thread (-1: none yet).
void logSetRank(int rank);
int logRank();

// The text of the last WARN, kept per thread and globally for
// flagcxGetLastError(NULL) and per communicator by the caller.
const char *lastErrorText();

// Log a WARN naming the offending argument and return `code`.
flagcxResult_t argError(flagcxResult_t code, uint32_t subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace flagcx

#define FLAGCX_LOG(level, sub, ...)                                        \
  do {                                                                     \
    if (::flagcx::logEnabled(level, sub))                                  \
      ::flagcx::logMessage(level, sub, __FILE__, __LINE__, __VA_ARGS__);   \
  } while (0)
#define WARN(sub, ...) FLAGCX_LOG(::flagcx::LogLevel::Warn, sub, __VA_ARGS__)
#define INFO(sub, ...) FLAGCX_LOG(::flagcx::LogLevel::Info, sub, __VA_ARGS__)
#define TRACE(sub, ...) FLAGCX_LOG(::flagcx::LogLevel::Trace, sub, __VA_ARGS__)

// Propagate a failing flagcxResult_t.
#define FLAGCX_CHECK(call)                         \
  do {                                             \
    flagcxResult_t _r = (call);                    \
    if (_r != flagcxSuccess) return _r;            \
  } while (0)
