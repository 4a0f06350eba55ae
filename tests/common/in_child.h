// Running a test body that might crash or hang in a forked child, so that a
// crash fails the test instead of killing the runner, and a hang (SIGALRM
// after `alarmSec`) fails it too.  The body returns text (an error message,
// captured output) that the parent asserts on.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

namespace harness {

struct ChildResult {
  bool clean = false;  // exited with status 0 (not killed, no abort)
  std::string how;     // "exit 0", "killed by signal 11 (Segmentation fault)", ...
  std::string text;    // what the body returned
};

inline ChildResult inChild(const std::function<std::string()> &body, unsigned alarmSec = 60) {
  ChildResult r;
  int fds[2];
  if (pipe(fds) != 0) {
    r.how = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(alarmSec);
    std::string t = body();
    for (size_t off = 0; off < t.size();) {
      ssize_t n = write(fds[1], t.data() + off, t.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    std::fflush(nullptr);
    _exit(0);
  }
  close(fds[1]);
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) r.text.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR) break;
  }
  close(fds[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) {
    r.how = "fork/wait failed";
  } else if (WIFSIGNALED(status)) {
    r.how = "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
            strsignal(WTERMSIG(status)) + ")";
  } else {
    r.how = "exit " + std::to_string(WEXITSTATUS(status));
    r.clean = WEXITSTATUS(status) == 0;
  }
  return r;
}

}  // namespace harness
