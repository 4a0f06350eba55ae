// A bare bootstrap network for transport-level tests (no communicator): this
// rank's PeerInfo from its host name, pid and PID namespace.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "flagcx.h"
#include "base/proc_ns.h"
#include "rendezvous/bootstrap.h"

namespace harness {

inline std::unique_ptr<flagcx::Bootstrap> makeBootstrap(int rank, int nranks,
                                                        const flagcxUniqueId &id) {
  flagcx::PeerInfo self;
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  self.hostHash = std::hash<std::string>()(host);
  self.pid = getpid();
  self.pidNs = flagcx::pidNamespaceId();
  snprintf(self.host, sizeof self.host, "%s", host);
  std::unique_ptr<flagcx::Bootstrap> bs;
  if (flagcx::Bootstrap::create(id, rank, nranks, self, &bs) != flagcxSuccess) return nullptr;
  return bs;
}

}  // namespace harness
