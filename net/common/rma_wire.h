// The one-sided engine's wire format (net/rma.h) and the target's checks of
// every message a peer sends, as pure functions: no I/O, no locks, no
// allocation (tests/fuzz/fuzz_onesided.cc runs them on arbitrary bytes).
//
// Wire, on a one-sided Conn (the transport's ordinary framed Conn, so the
// framing already checked tag and length against the posted receive):
//   Hdr (40 bytes, tag kTagHdr), then for a put and for a get's answer
//   (kData) the payload as a second message (tag kTagData) of exactly
//   Hdr::len bytes.
// A request (put, get, put-value, signal) names memory by (key, off, len):
// the target applies it only when [off, off+len) lies inside the one region
// it exposed under that key (overflow-safe arithmetic).  An answer (ack,
// data) names the request it answers by the id the requester gave it; it
// must match a request of this rank to that peer, of the right kind and, for
// data, of the same length.
#pragma once
#include <cstdint>
#include <map>

namespace flagcx::rma {

enum Op : uint32_t { kPut = 1, kGet, kValue, kSignal, kAck, kData, kNop, kBye };
struct Hdr {
  uint32_t op, key;
  uint64_t off, len, id, value;
};
static_assert(sizeof(Hdr) == 40);
constexpr uint64_t kTagHdr = 0x0fe5000000000001ull;
constexpr uint64_t kTagData = 0x0fe5000000000002ull;

// Whether a message of kind `op` is a request that the target answers.
inline bool isRequest(uint32_t op) { return op >= kPut && op <= kSignal; }

// Memory exposed under a key.
struct Region {
  char *base = nullptr;
  uint64_t size = 0;
};
using Regions = std::map<uint32_t, Region>;

struct Verdict {
  enum Kind : uint8_t {
    Apply,    // do it: [at, at+len) is inside one exposed region (len 0: no bytes)
    Refuse,   // a request outside what this rank exposed: cut the peer
    Malformed // not something a correct peer sends: cut the peer
  };
  Kind kind = Malformed;
  char *at = nullptr;
  uint64_t len = 0;
  uint64_t regionSize = 0;  // Refuse: the key's exposed size (0: the key is not exposed)
  const char *why = "";     // Refuse / Malformed: for the log line
};

// A message that arrived as a header, checked against this rank's exposed
// regions.  Requests: Apply with where the bytes go (put, put-value) or come
// from (get); a signal or a no-op/goodbye: Apply without bytes.  Answers are
// not decided here (checkAnswer): Apply without bytes.
Verdict checkRequest(const Hdr &h, const Regions &regions);

// An answer (kAck or kData), given the request this rank sent to the same
// peer under h.id (null: none is waiting).  Apply: for kData, len is the
// payload that follows (equal to the request's).
Verdict checkAnswer(const Hdr &h, const Hdr *sent);

const char *opName(uint32_t op);

}  // namespace flagcx::rma
