// The one-sided wire checks (net/common/rma_wire.h): the input is a stream
// of 40-byte headers as a peer would send them, checked against three
// exposed regions (exactly sized heap buffers, so ASan reports any byte
// touched outside them) and against the requests this rank "sent".  Every
// header that checkRequest/checkAnswer accepts is then applied the way the
// engine applies it (a put's or a value's bytes written, a get's bytes
// read, data received into the get's destination); a verdict that reaches
// outside a region is caught by ASan or by the explicit range check here.
//
// Input: [key of region 0][key 1][key 2] then 40-byte headers; the first
// bytes also size the regions (size = 1 + key % 4099).
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_common.h"
#include "net/common/rma_wire.h"

using namespace flagcx;

namespace {

struct Buf {
  std::unique_ptr<char[]> p;
  uint64_t size;
};

void mustLieIn(const char *at, uint64_t len, const Buf &b) {
  const char *lo = b.p.get();
  if (at < lo || static_cast<uint64_t>(at - lo) > b.size || len > b.size - (at - lo))
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::quietLibrary();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::Reader in{data, size};
  rma::Regions regions;
  std::vector<Buf> bufs;
  for (int i = 0; i < 3; i++) {
    uint32_t key = in.byte() % 5;
    uint64_t n = 1 + (key * 977u + static_cast<uint32_t>(i) * 131u) % 4099u;
    Buf b{std::unique_ptr<char[]>(new char[n]), n};
    memset(b.p.get(), 0x5a, n);
    regions[key] = rma::Region{b.p.get(), n};  // a later region may replace an earlier key
    bufs.push_back(std::move(b));
  }
  auto owner = [&](uint32_t key) -> const Buf & {
    for (const Buf &b : bufs)
      if (b.p.get() == regions[key].base) return b;
    __builtin_trap();
  };
  // Requests this rank "sent": a get of 64 bytes (id 1), a put (id 2).
  char getDst[64];
  const rma::Hdr sent[2] = {{rma::kGet, 0, 0, sizeof getDst, 1, 0}, {rma::kPut, 0, 0, 16, 2, 0}};
  volatile char sink = 0;
  while (in.n >= sizeof(rma::Hdr)) {
    rma::Hdr h;
    memcpy(&h, in.p, sizeof h);
    in.p += sizeof h;
    in.n -= sizeof h;
    if (h.op == rma::kAck || h.op == rma::kData) {
      const rma::Hdr *s = h.id == 1 ? &sent[0] : h.id == 2 ? &sent[1] : nullptr;
      rma::Verdict v = rma::checkAnswer(h, s);
      if (v.kind == rma::Verdict::Apply && h.op == rma::kData) {
        if (v.len > sizeof getDst) __builtin_trap();
        memset(getDst, 0x11, v.len);
      }
      continue;
    }
    rma::Verdict v = rma::checkRequest(h, regions);
    if (v.kind != rma::Verdict::Apply || v.len == 0) continue;
    mustLieIn(v.at, v.len, owner(h.key));
    if (h.op == rma::kGet) {
      for (uint64_t i = 0; i < v.len; i++) sink = sink ^ v.at[i];
    } else {
      memset(v.at, 0x6b, v.len);  // put, put-value
    }
  }
  (void)sink;
  return 0;
}
