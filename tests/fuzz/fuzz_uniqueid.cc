// The unique-id decoder.  Mode 0: the input is the 256 id bytes as received
// (random bytes fail the checksum, so this mostly tests the early checks).
// Mode 1: the input fills the fields (address bytes, length, secret) that
// encodeUniqueId then seals with a valid checksum, so the decoder's checks
// of the address family, length and port are reached.  A decoded id must
// re-encode to an id that decodes to the same thing.
#include <cstdint>
#include <cstring>

#include "rendezvous/uniqueid.h"
#include "fuzz_common.h"

using namespace flagcx;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::quietLibrary();
  return 0;
}

static void roundTrip(const DecodedId &d) {
  flagcxUniqueId again;
  encodeUniqueId(d, &again);
  DecodedId d2;
  if (decodeUniqueId(again, &d2) != flagcxSuccess) __builtin_trap();
  if (d2.root.len != d.root.len || d2.secret != d.secret || d2.fromEnv != d.fromEnv || d2.keyed != d.keyed ||
      memcmp(&d2.root.u, &d.root.u, sizeof d.root.u) != 0)
    __builtin_trap();
  (void)d2.root.str();
  (void)d2.root.port();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  flagcxUniqueId id;
  memset(&id, 0, sizeof id);
  if (data[0] % 2 == 0) {
    memcpy(id.internal, data + 1, size - 1 < sizeof id ? size - 1 : sizeof id);
  } else {
    fuzz::Reader in{data + 1, size - 1};
    DecodedId d;
    uint8_t raw[sizeof d.root.u];
    for (auto &b : raw) b = in.byte();
    memcpy(&d.root.u, raw, sizeof raw);
    d.root.len = in.u32();
    for (auto &b : d.secret) b = in.byte();
    uint8_t flags = in.byte();
    d.fromEnv = flags & 1;
    d.keyed = d.fromEnv && (flags & 2);
    encodeUniqueId(d, &id);
  }
  DecodedId out;
  if (decodeUniqueId(id, &out) == flagcxSuccess) roundTrip(out);
  return 0;
}
