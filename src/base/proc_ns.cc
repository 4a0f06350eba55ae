// This process's PID namespace and which peers' pids are comparable
// (proc_ns.h).
#include "base/proc_ns.h"

#include <sys/stat.h>

namespace flagcx {

// Not cached: a forked child may live in a namespace its parent made after
// the parent's last look (unshare(CLONE_NEWPID) moves only later children).
uint32_t pidNamespaceId() {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint32_t>(st.st_ino) : 0u;
}

}  // namespace flagcx
