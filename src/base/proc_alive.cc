// processGone (proc_alive.h): whether a process of this host has exited.
#include "base/proc_alive.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace flagcx {

bool processGone(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  // open/read into a stack buffer: this runs from progress loops, which
  // must not allocate (stdio would).
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  char buf[512];
  ssize_t got = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  size_t n = got > 0 ? static_cast<size_t>(got) : 0;
  buf[n] = 0;
  // "pid (comm) S ...": the state follows the last ')'.
  const char *p = strrchr(buf, ')');
  return p != nullptr && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

}  // namespace flagcx
