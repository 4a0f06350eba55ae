// Which processes' pids mean anything to this one.  A pid names a process
// only inside one PID namespace: ranks of one host (same hostname, boot id
// and /dev/shm, as containers of one pod are) may sit in different ones,
// where a peer's pid answers ESRCH, or names another process (every
// container's first process is pid 1).  Code that uses a peer's pid --
// kill(pid, 0), /proc/<pid>, process_vm_readv, "same pid, so same process"
// -- must first check that the peer's namespace is this one's.
#pragma once
#include <cstdint>

namespace flagcx {

// This process's PID namespace: the inode of /proc/self/ns/pid (namespace
// inodes are 32-bit), or 0 where it cannot be read (no /proc).  A stat()
// per call: for set-up paths, not progress loops.
uint32_t pidNamespaceId();

}  // namespace flagcx
