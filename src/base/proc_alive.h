// Is a process of this host gone?  Used by same-host transports (shm, and the
// software RDMA device of the tests) and by one-sided operations to notice a
// peer that was killed.
#pragma once
#include <sys/types.h>

namespace flagcx {

// True when `pid` no longer exists or is a zombie nobody reaped yet.  Never
// allocates (it runs from progress loops).
bool processGone(pid_t pid);

}  // namespace flagcx
