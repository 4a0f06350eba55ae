// Socket transport internals visible to tests.
#pragma once
#include <functional>

#include "rendezvous/rendezvous.h"

namespace flagcx {

// Test hook: called by connectAll (in the calling thread) right after this
// rank's data listener is up and before any connection is accepted.  Lets a
// test aim a foreign client at the port.  Process-wide; empty by default.
void socketTransportSetListenHook(std::function<void(const SockAddr &)> hook);

}  // namespace flagcx
