// The 256-byte unique id: magic, flags, the root's address, a 128-bit secret.
#pragma once
#include "rendezvous/socket.h"
#include "flagcx.h"

namespace flagcx {

struct DecodedId {
  SockAddr root;
  Secret secret{};
  bool fromEnv = false;  // built from FLAGCX_COMM_ID: rank 0 starts the root
};

// Fill `id`; starts a rendezvous root in this process unless FLAGCX_COMM_ID is set.
flagcxResult_t makeUniqueId(flagcxUniqueId *id);
// Validate and decode; flagcxInvalidArgument (with a log line) when malformed.
flagcxResult_t decodeUniqueId(const flagcxUniqueId &id, DecodedId *out);
// Encode without side effects (for tests and makeUniqueId).
void encodeUniqueId(const DecodedId &d, flagcxUniqueId *id);

flagcxResult_t startBootstrapRoot(SockAddr *addr, const Secret &secret);

}  // namespace flagcx
