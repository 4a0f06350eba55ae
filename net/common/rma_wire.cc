// The target's checks of one-sided messages (rma_wire.h).
#include "net/common/rma_wire.h"

namespace flagcx::rma {

const char *opName(uint32_t op) {
  switch (op) {
    case kPut: return "put";
    case kGet: return "get";
    case kValue: return "put-value";
    case kSignal: return "signal";
    case kAck: return "ack";
    case kData: return "data";
    case kNop: return "no-op";
    case kBye: return "goodbye";
    default: return "unknown message";
  }
}

namespace {
Verdict malformed(const char *why) {
  Verdict v;
  v.kind = Verdict::Malformed;
  v.why = why;
  return v;
}
}  // namespace

Verdict checkRequest(const Hdr &h, const Regions &regions) {
  Verdict v;
  switch (h.op) {
    case kPut:
    case kGet:
    case kValue: {
      // A put-value is always 8 bytes; the requester says so.
      if (h.op == kValue && h.len != 8) return malformed("a put-value that is not 8 bytes");
      auto it = regions.find(h.key);
      if (it == regions.end()) {
        v.kind = Verdict::Refuse;
        v.why = "key not exposed";
        return v;
      }
      const Region &r = it->second;
      v.regionSize = r.size;
      // off <= size and len <= size - off: no sum that could wrap.
      if (h.off > r.size || h.len > r.size - h.off) {
        v.kind = Verdict::Refuse;
        v.why = "bytes outside the exposed region";
        return v;
      }
      v.kind = Verdict::Apply;
      v.at = r.base + h.off;
      v.len = h.len;
      return v;
    }
    case kSignal:
    case kAck:
    case kData:
    case kNop:
    case kBye:
      v.kind = Verdict::Apply;
      return v;
    default:
      return malformed("unknown message kind");
  }
}

Verdict checkAnswer(const Hdr &h, const Hdr *sent) {
  if (!sent) return malformed("an answer to no request of this rank");
  Verdict v;
  if (h.op == kData) {
    if (sent->op != kGet) return malformed("data answering a request that is not a get");
    if (h.len != sent->len) return malformed("data of another length than the get asked for");
    v.kind = Verdict::Apply;
    v.len = h.len;
    return v;
  }
  if (h.op != kAck) return malformed("not an answer");
  if (sent->op == kGet) return malformed("an ack answering a get (it needs data)");
  v.kind = Verdict::Apply;
  return v;
}

}  // namespace flagcx::rma
