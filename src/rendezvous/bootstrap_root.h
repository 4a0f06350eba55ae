// The rendezvous root: the server every rank of a communicator reaches
// first (at the address in the unique id) to learn every other rank.  Its
// wire: each rank's handshake (kind 1) is followed by its PeerInfo; once all
// ranks arrived, each gets a RootReply and, when its status is 0, the table
// of every rank's PeerInfo in rank order.
#pragma once
#include <cstdint>

#include "flagcx.h"
#include "rendezvous/socket.h"

namespace flagcx {

constexpr uint32_t kHelloKindRoot = 1;

struct RootReply {
  uint32_t status;  // 0 ok, 1 failed (text follows)
  char text[252];
};

// Starts a root listening at *addr (port 0: any; *addr gets the port) on a
// thread of its own that serves one communicator and exits.  secretName is
// what its log lines call the secret.
flagcxResult_t startBootstrapRoot(SockAddr *addr, const Secret &secret, const char *secretName);

}  // namespace flagcx
