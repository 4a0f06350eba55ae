// The 256-byte unique id: magic, flags, the root's address, a 128-bit secret.
// flagcxGetUniqueId draws the secret from the kernel's random source; the
// user passes the id to every rank out of band (MPI_Bcast, a file), and
// holding it is what lets a process join.  With FLAGCX_COMM_ID every rank
// derives the id itself, from the address and FLAGCX_COMM_SECRET.
#pragma once
#include "rendezvous/socket.h"
#include "flagcx.h"

namespace flagcx {

struct DecodedId {
  SockAddr root;
  Secret secret{};
  bool fromEnv = false;  // built from FLAGCX_COMM_ID: rank 0 starts the root
  bool keyed = false;    // fromEnv, and the secret comes from FLAGCX_COMM_SECRET(_FILE)
  int growFrom = 0;      // an id for flagcxCommGrow: the parent's size (0: any other id)
};

// Fill `id`; starts a rendezvous root in this process unless FLAGCX_COMM_ID
// is set.  flagcxInvalidArgument (logged) for a malformed FLAGCX_COMM_ID or
// a FLAGCX_COMM_SECRET(_FILE) that is too short or unsafe to read.
flagcxResult_t makeUniqueId(flagcxUniqueId *id);
// An id with its own root in this process and a random secret, whatever
// FLAGCX_COMM_ID says: the id of a communicator made from a parent (split,
// shrink, grow; `growFrom` as in DecodedId).
flagcxResult_t makeFreshId(flagcxUniqueId *id, int growFrom);
// Validate and decode; flagcxInvalidArgument (with a log line) when malformed.
flagcxResult_t decodeUniqueId(const flagcxUniqueId &id, DecodedId *out);
// Encode without side effects (for tests and makeUniqueId).
void encodeUniqueId(const DecodedId &d, flagcxUniqueId *id);

}  // namespace flagcx
