// Configuration and script files: regular, bounded, read whole.
#include "base/config_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace flagcx {

namespace {

const char *kindOf(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a plain file";
}

std::string tooBig(const std::string &path, unsigned long long bytes, size_t maxBytes) {
  return path + ": " + std::to_string(bytes) + " bytes, more than the " +
         std::to_string(maxBytes >> 20) + " MiB a configuration or script file may have";
}

}  // namespace

bool readConfigFile(const std::string &path, std::string *text, std::string *err,
                    size_t maxBytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused
  // below like any other non-regular file.  No effect on regular files.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    *err = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  struct stat st;
  bool ok = false;
  if (fstat(fd, &st) != 0) {
    *err = path + ": cannot stat: " + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    *err = path + ": " + kindOf(st.st_mode) + ", not a regular file";
  } else if (static_cast<unsigned long long>(st.st_size) > maxBytes) {
    *err = tooBig(path, static_cast<unsigned long long>(st.st_size), maxBytes);
  } else {
    // Read to the end, not to st_size: the file may change meanwhile.  One
    // byte past the cap tells a file that grew beyond it.
    std::string buf(static_cast<size_t>(st.st_size) + 1, '\0');
    size_t got = 0;
    ok = true;
    while (ok) {
      if (got == buf.size()) {
        if (buf.size() > maxBytes) {
          *err = tooBig(path, got, maxBytes);
          ok = false;
          break;
        }
        buf.resize(std::min(buf.size() * 2, maxBytes + 1));
      }
      ssize_t n = read(fd, &buf[got], buf.size() - got);
      if (n == 0) break;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        *err = path + ": cannot read: " + std::strerror(errno);
        ok = false;
        break;
      }
      got += static_cast<size_t>(n);
    }
    if (ok) {
      buf.resize(got);
      *text = std::move(buf);
    }
  }
  close(fd);
  return ok;
}

}  // namespace flagcx
