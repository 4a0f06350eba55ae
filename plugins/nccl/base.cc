// Logging, the device table, and running deferred communicator creation.
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>

#include "dropin.h"

namespace ncclx {

namespace {
thread_local std::string t_lastError;
}

Level logLevel() {
  static const Level lv = [] {
    const char *e = getenv("FLAGCX_DEBUG");
    if (!e || !*e) return Level::Warn;
    if (!strcasecmp(e, "NONE")) return Level::None;
    if (!strcasecmp(e, "INFO") || !strcasecmp(e, "TRACE")) return Level::Info;
    return Level::Warn;
  }();
  return lv;
}

static void vlogLine(Level lv, const char *fmt, va_list ap) {
  if (lv > logLevel()) return;
  static char host[64] = "";
  if (!host[0]) {
    gethostname(host, sizeof(host) - 1);
    if (char *dot = strchr(host, '.')) *dot = '\0';
  }
  char msg[1024];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  // One write per line, in flagcx's format, so lines of several threads never mix.
  fprintf(stderr, "%s:%d:%ld [-] flagcx %s NCCL %s\n", host, getpid(),
          static_cast<long>(syscall(SYS_gettid)), lv == Level::Warn ? "WARN" : "INFO", msg);
}

void logLine(Level lv, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlogLine(lv, fmt, ap);
  va_end(ap);
}

ncclResult_t fail(ncclResult_t r, const char *fn, const char *fmt, ...) {
  char why[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  t_lastError = std::string(fn) + ": " + why;
  logLine(Level::Warn, "%s", t_lastError.c_str());
  return r;
}

void clearLastError() {
  if (!t_lastError.empty()) t_lastError.clear();
}
const char *lastError() { return t_lastError.empty() ? nullptr : t_lastError.c_str(); }

flagcxDeviceHandle_t device() {
  static flagcxDeviceHandle_t h = [] {
    flagcxDeviceHandle_t d = nullptr;
    if (flagcxDeviceHandleInit(&d) != flagcxSuccess) d = nullptr;
    return d;  // kept for the life of the process
  }();
  return h;
}

ncclResult_t runAll(std::vector<Deferred> &items) {
  std::vector<ncclResult_t> res(items.size(), ncclSuccess);
  auto one = [&](size_t i) {
    Deferred &d = items[i];
    if (d.device >= 0 && device() && device()->setDevice(d.device) != flagcxSuccess) {
      res[i] = fail(ncclInvalidArgument, "ncclGroupEnd", "cannot select device %d", d.device);
    } else {
      res[i] = d.run();
    }
    if (d.comm) {
      d.comm->initResult = res[i];
      d.comm->state.store(res[i] == ncclSuccess ? ncclComm::kReady : ncclComm::kFailed,
                          std::memory_order_release);
    }
  };
  if (items.size() == 1) {
    // One creation: its own thread anyway, because the caller may still be
    // inside a flagcx group (creation refuses to run in one).
    std::thread t(one, 0);
    t.join();
  } else {
    std::vector<std::thread> ts;
    ts.reserve(items.size());
    for (size_t i = 0; i < items.size(); i++) ts.emplace_back(one, i);
    for (auto &t : ts) t.join();
  }
  for (ncclResult_t r : res)
    if (r != ncclSuccess) return r;
  return ncclSuccess;
}

}  // namespace ncclx
