// The P2P engine's wire format: the messages of the handshake and of the
// lanes (docs/P2P.md, "Connections").  Every field a peer sends is checked
// before use; the comments say by whom.  Host byte order: peers are of one
// architecture (as in the rest of flagcx).
#pragma once
#include <cstdint>

namespace flagcx::p2p {

constexpr uint32_t kHelloKindP2p = 4;  // rendezvous/socket's authenticated hello
constexpr uint32_t kInfoVersion = 4;   // 4: identity from the kernel, engine id, proofs

// Each side's description of itself, after the hello (TCP) or the local
// greeting (the engine's Unix socket).  None of it is trusted for access:
// who the peer is comes from the kernel (SO_PEERCRED on the Unix socket),
// never from `pid`.
struct Info {
  uint32_t version;
  int32_t pid;       // log lines only
  int32_t gpuIdx;
  uint32_t lanes;
  uint64_t reserved;
  uint64_t engineId;  // same process (kernel-proven): the engine whose regions hold its local addresses
  uint64_t cookieAddr;  // CMA probe: can the kernel-proven pid be read at all?
  uint64_t cookie;
  uint32_t shmDisable;
  uint32_t nregions;  // a WireRegion table of this many follows
  uint32_t rdmaKind;
  uint32_t lanePort;  // accepting side
  uint8_t laneToken[16];  // accepting side: each lane proves it
  uint8_t challenge[16];  // connecting side: a fresh nonce ...
  uint64_t proof;         // ... the accepting side answers MAC(key, challenge) (TCP)
  uint8_t laneAddr[28];   // accepting side, local door only: loopback address of the lane listener
  uint32_t pad;
};
static_assert(sizeof(Info) == 136);

// What a peer learns of a region.
struct WireRegion {
  uint64_t base;
  uint64_t size;
  uint32_t rkey;
  uint32_t device;
  uint32_t vkey;  // the RDMA device's rkey; 0: not reachable over verbs
  uint32_t pad;
};
static_assert(sizeof(WireRegion) == 32);

// The first bytes on a lane connection, from the connecting side.
struct LaneHello {
  uint8_t token[16];
  uint32_t dir;  // 0: the connecting side initiates on it
  uint32_t idx;  // < lanes
};

// The local door (the engine's abstract Unix socket): the engine greets
// every connection whose SO_PEERCRED uid is its own (or root); the client
// answers with MAC(key, nonce) when needProof (FLAGCX_P2P_SECRET set), else
// 0; the engine answers 1 (in) or 0 (refused).
constexpr uint64_t kDoorMagic = 0x3150324458434c46ull;  // "FLCXD2P1"
struct DoorGreeting {
  uint64_t magic;
  uint32_t needProof;
  uint32_t port;          // the engine's TCP port (the door's name)
  uint32_t loopback;      // the engine also listens on loopback at `port`
  uint32_t pad;
  uint8_t mainAddr[28];   // its main TCP address (sockaddr_in/in6)
  uint32_t pad2;
  uint8_t nonce[16];
};
struct DoorProof {
  uint64_t magic;
  uint64_t mac;
};

// ---- lanes ---------------------------------------------------------------
enum class Op : uint8_t { Write = 1, Read = 2, Notif = 3, Send = 4, Table = 5, Bye = 6 };
constexpr uint32_t kReqMagic = 0x50325051;  // "QP2P"
constexpr uint32_t kRespMagic = 0x50325052;
constexpr uint32_t kMaxSegsPerReq = 1u << 20;
constexpr uint32_t kMaxRegions = 1u << 20;
enum Status : int32_t { kOk = 0, kRange = 1, kIo = 2, kBad = 3, kFull = 4 };

// A request: the header, nseg WireSegs (Write, Read), then the payload
// (Write without CMA: the segments' bytes in order; Notif, Send: `bytes`).
struct ReqHdr {
  uint32_t magic;
  uint8_t op;   // Op
  uint8_t cma;  // the target moves the bytes by CMA (no payload on the socket)
  uint16_t pad;
  uint32_t nseg;
  uint32_t pad2;
  uint64_t bytes;  // sum of seg lengths, or the payload of Notif/Send
};
struct WireSeg {
  uint64_t local;   // initiator's address: touched only by CMA, after the kernel proved the peer
  uint64_t remote;  // target's address: inside one of its regions, with that region's key
  uint64_t len;
  uint32_t rkey;
  uint32_t pad;
};
struct RespHdr {
  uint32_t magic;
  int32_t status;
  uint64_t bytes;  // payload that follows
};

}  // namespace flagcx::p2p
