// The P2P engine's request parser and server (src/p2p/p2p_serve.cc): the
// real service loop of one lane reads a byte stream built from the fuzz
// input over a real socket pair.  The target engine has two registered
// regions between canary bytes, and a secret lies outside every region;
// after each input the canaries and the secret must be intact and the
// connection's unreceived-bytes count must match its queue.  With mode bit
// 0 set the connection is a kernel-proven same-process one with CMA, whose
// local addresses must lie in a region of the peer engine (registered too).
//
// Input: [mode] then records, each [kind] and then raw bytes ([n][n bytes],
// kind 0 mod 4) or a request: [op][cma][nseg] then per segment [local base][offset hi][lo]
// [remote base][offset hi][lo][len hi][lo][len mode][key], then, without
// segments, [bytes hi][lo]; then [lie] (0 mod 16: 4 more bytes replace the
// header's byte count) and up to that many bytes of payload.  Bases pick a region, the secret, a canary,
// 0, the top of the address space or 8 raw bytes; so addresses land near
// what matters, and anywhere.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "fuzz_common.h"
#include "p2p/p2p_internal.h"

using namespace flagcx;
using namespace flagcx::p2p;

namespace {

constexpr size_t kRegion = 4096, kGuard = 256;
constexpr uint8_t kCanary = 0xc5;
constexpr char kSecret[] = "SECRET-NOT-REGISTERED";
char g_secret[32] = "SECRET-NOT-REGISTERED";
// [guard][A][guard][B][guard] of the target, [guard][P][guard] of the peer
uint8_t g_arena[3 * kGuard + 2 * kRegion], g_peerArena[2 * kGuard + kRegion];
FlagcxP2pEngine *g_target = nullptr, *g_peer = nullptr;
uint32_t g_keys[3];

uint32_t keyOf(FlagcxP2pEngine *e, FlagcxP2pMr mr, void *at) {
  char d[FLAGCX_P2P_DESC_SIZE];
  FlagcxP2pRdmaDesc desc{};
  if (flagcxP2pEnginePrepareDesc(e, mr, at, 8, d) != 0) __builtin_trap();
  flagcxP2pDeserializeRdmaDesc(d, &desc);
  return desc.rkey;
}

bool intact(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != kCanary) return false;
  return true;
}

uint64_t u16(fuzz::Reader &in) {
  uint64_t hi = in.byte();
  return hi << 8 | in.byte();
}

uint64_t base(uint8_t sel, fuzz::Reader &in) {
  uint8_t *a = g_arena + kGuard, *b = a + kRegion + kGuard;
  switch (sel % 8) {
    case 0: return uintptr_t(a);
    case 1: return uintptr_t(b);
    case 2: return uintptr_t(g_peerArena + kGuard);
    case 3: return uintptr_t(g_secret);
    case 4: return uintptr_t(g_arena);
    case 5: return 0;
    case 6: return UINT64_MAX - 0xffff;
    default: {
      uint64_t hi = in.u32();
      return hi << 32 | in.u32();
    }
  }
}

// A base, then an offset from it (in that order: the reads are sequenced).
uint64_t address(fuzz::Reader &in) {
  uint64_t b = base(in.byte(), in);
  return b + u16(in);
}

// One request of the input, appended to `out` in the wire format.
void request(fuzz::Reader &in, std::vector<uint8_t> *out) {
  ReqHdr h{kReqMagic, 0, 0, 0, 0, 0, 0};
  h.op = uint8_t(1 + in.byte() % 7);
  h.cma = in.byte() & 1;
  h.nseg = in.byte() % 9;
  std::vector<WireSeg> segs(h.nseg);
  for (auto &s : segs) {
    s.local = address(in);
    s.remote = address(in);
    s.len = u16(in);
    if (in.byte() % 8 == 7) s.len = UINT64_MAX - s.len;  // lengths that wrap
    uint8_t k = in.byte();
    s.rkey = k % 4 < 3 ? g_keys[k % 4] : in.u32();
    h.bytes += s.len;
  }
  if (h.nseg == 0) h.bytes = u16(in);                  // Send, Notif
  if (in.byte() % 16 == 0) h.bytes = in.u32();         // a header that lies
  auto put = [&](const void *p, size_t n) {
    out->insert(out->end(), static_cast<const uint8_t *>(p), static_cast<const uint8_t *>(p) + n);
  };
  put(&h, sizeof(h));
  put(segs.data(), segs.size() * sizeof(WireSeg));
  size_t pay = std::min<uint64_t>(h.bytes, in.n);
  put(in.p, pay);
  in.p += pay;
  in.n -= pay;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::quietLibrary();
  setenv("FLAGCX_P2P_RECV_QUEUE_BYTES", "65536", 1);
  memset(g_arena, kCanary, sizeof(g_arena));
  memset(g_peerArena, kCanary, sizeof(g_peerArena));
  g_target = flagcxP2pEngineCreate();
  g_peer = flagcxP2pEngineCreate();
  FlagcxP2pMr ma, mb, mp;
  uint8_t *a = g_arena + kGuard, *b = a + kRegion + kGuard, *p = g_peerArena + kGuard;
  for (uint8_t *r : {a, b, p}) memset(r, 0, kRegion);  // unlike the canaries
  if (!g_target || !g_peer || flagcxP2pEngineReg(g_target, uintptr_t(a), kRegion, ma) != 0 ||
      flagcxP2pEngineReg(g_target, uintptr_t(b), kRegion, mb) != 0 ||
      flagcxP2pEngineReg(g_peer, uintptr_t(p), kRegion, mp) != 0)
    __builtin_trap();
  g_keys[0] = keyOf(g_target, ma, a), g_keys[1] = keyOf(g_target, mb, b), g_keys[2] = 0;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::Reader in{data, size};
  const uint8_t mode = in.byte();
  std::vector<uint8_t> stream;
  while (in.n > 0 && stream.size() < (1u << 20)) {
    if (in.byte() % 4 == 0) {  // raw bytes
      size_t n = std::min<size_t>(in.byte(), in.n);
      stream.insert(stream.end(), in.p, in.p + n);
      in.p += n, in.n -= n;
    } else {
      request(in, &stream);
    }
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) __builtin_trap();
  auto c = std::make_shared<FlagcxP2pConn>();
  c->engine = g_target;
  c->peerHost = "fuzz";
  if (mode & 1) {  // what the door gives a same-process peer
    c->isLocal = c->sameProcess = c->cmaIn = true;
    c->cmaPid = getpid();
    c->peerEngineId = g_peer->id;
  }
  Lane lane;
  lane.fd = sv[0];
  std::thread writer([&] {
    for (size_t off = 0; off < stream.size();) {
      ssize_t n = send(sv[1], stream.data() + off, stream.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += size_t(n);
    }
    shutdown(sv[1], SHUT_WR);
  });
  std::thread reader([&] {  // answers and Read payloads
    char sink[65536];
    while (recv(sv[1], sink, sizeof(sink), 0) > 0) {}
  });
  serviceLoop(c.get(), &lane);
  shutdown(sv[0], SHUT_RDWR);  // the lane's fd closes with `lane`
  writer.join();
  reader.join();
  close(sv[1]);
  uint64_t queued = 0;
  for (auto &m : c->recvQ) queued += m.bytes.size();
  if (queued != c->recvBytes || queued > 65536) __builtin_trap();
  if (!intact(g_arena, kGuard) || !intact(g_arena + kGuard + kRegion, kGuard) ||
      !intact(g_arena + 2 * (kGuard + kRegion), kGuard) || !intact(g_peerArena, kGuard) ||
      !intact(g_peerArena + kGuard + kRegion, kGuard) || strcmp(g_secret, kSecret) != 0)
    __builtin_trap();  // a byte outside every region changed
  (void)flagcxP2pEngineGetNotifs();
  return 0;
}
