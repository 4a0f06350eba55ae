// The P2P engine's own state (flagcx_p2p.h): engines, connections, lanes,
// registered regions and transfers.  docs/P2P.md describes the design.
//
// A connection is a set of TCP "lanes" made at handshake: `lanes` on which
// the connecting side initiates and as many on which the accepting side
// does.  On a lane one side (the initiator) sends requests and the other
// (the target) answers each one before reading the next, so no lane can
// deadlock.  The target checks every request against its own registered
// regions (the authority) and moves the bytes: from/to the socket, or, on
// one host, straight between the two address spaces with
// process_vm_readv/writev (cross-memory attach) when the kernel allows it.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "adapters/device/adapter.h"
#include "flagcx_p2p.h"
#include "net/ibverbs/rdma_device.h"
#include "rendezvous/socket.h"

namespace flagcx::p2p {

// ---- regions -------------------------------------------------------------
struct Region {
  uint64_t mrId = 0;
  uint64_t base = 0;
  uint64_t size = 0;
  uint32_t rkey = 0;
  bool device = false;  // device memory (CUDA): IPC-exportable, staged on TCP/CMA
  std::vector<char> ipcRef;  // DeviceAdapter::kIpcRefBytes when device
  std::unique_ptr<rdma::Mr> vmr;  // registered with the engine's RDMA device (host memory)
};

// What a peer learns of a region (wire format).
struct WireRegion {
  uint64_t base;
  uint64_t size;
  uint32_t rkey;
  uint32_t device;
  uint32_t vkey;  // the RDMA device's rkey; 0: not reachable over verbs
  uint32_t pad;
};
static_assert(sizeof(WireRegion) == 32);

// ---- transfers -----------------------------------------------------------
enum class Op : uint8_t { Write = 1, Read = 2, Notif = 3, Send = 4, Table = 5, Bye = 6 };

// One contiguous piece: local bytes <-> remote bytes.
struct Seg {
  uint64_t local;   // initiator's address
  uint64_t remote;  // target's address
  uint64_t len;
  uint32_t rkey;
  uint32_t lkey = 0;  // verbs: the local registration's key
};

struct Xfer {
  uint64_t id = 0;
  FlagcxTransferTask task;  // sliceCount = jobs, done/failed as they end
  bool localDevice = false;
  std::atomic<bool> logged{false};  // its failure has had its one line
};

struct Job {
  std::shared_ptr<Xfer> xfer;
  Op op = Op::Write;
  std::vector<Seg> segs;
  std::vector<char> data;  // Notif / Send payload
  std::vector<Seg> orig;   // verbs: the transfer as asked (P2P keys), to redo on the lanes
};

// ---- connections ---------------------------------------------------------
struct Lane {
  int fd = -1;
  bool initiator = false;  // this side sends requests on it
  std::thread th;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> q;
  std::atomic<bool> stop{false};
};

struct RecvMsg {
  std::vector<char> bytes;
};

struct VerbsPath;  // p2p_verbs.cc

}  // namespace flagcx::p2p

struct FlagcxP2pConn {
  FlagcxP2pEngine *engine = nullptr;
  std::string peerHost;  // numeric address of the peer
  int remoteGpuIdx = -1;
  int remotePid = 0;
  bool isLocal = false;      // same host
  bool sameProcess = false;  // same process (transfers are plain copies)
  bool cmaOut = false;       // the peer moves our requests' bytes by CMA
  bool cmaIn = false;        // we move the peer's requests' bytes by CMA
  std::atomic<bool> dead{false};
  std::atomic<bool> closing{false};
  std::string deadWhy;  // first cause, under xferMu

  std::shared_ptr<flagcx::p2p::VerbsPath> verbs;  // one-sided pieces over verbs, when chosen
  std::vector<std::unique_ptr<flagcx::p2p::Lane>> out;  // we initiate
  std::vector<std::unique_ptr<flagcx::p2p::Lane>> in;   // the peer initiates
  std::atomic<uint64_t> rr{0};  // round-robin over `out`

  std::mutex regionMu;
  std::vector<flagcx::p2p::WireRegion> remoteRegions;

  std::mutex xferMu;
  std::unordered_map<uint64_t, std::shared_ptr<flagcx::p2p::Xfer>> xfers;
  std::mutex doneMu;  // a transfer ended: wakes the waits of WriteVectorSync & co.
  std::condition_variable doneCv;

  std::mutex recvMu;
  std::condition_variable recvCv;
  std::deque<flagcx::p2p::RecvMsg> recvQ;
};

struct FlagcxP2pEngine {
  // The RDMA device (verbs, or the software device in tests), if any;
  // declared before `regions`, whose memory registrations it outlives.
  std::shared_ptr<flagcx::rdma::Device> rdma;
  int listenFd = -1;
  flagcx::SockAddr addr;  // where the engine listens (FLAGCX_SOCKET_IFNAME)
  std::string ifname;
  int gpuIdx = -1;
  flagcx::Secret secret{};
  std::atomic<bool> stopAccept{false};
  flagcx::WakeFd acceptWake;  // signalled with stopAccept: a waiting accept returns at once
  std::mutex acceptMu;  // one accept at a time (Accept and the RPC server)
  // The listener's handshakes under way (under acceptMu): one accept moves
  // them all, so a client that stops part-way holds up nobody; those left
  // when an accept returns wait for the next one.
  std::unique_ptr<flagcx::HandshakeQueue> handshakes;

  std::atomic<bool> rpcActive{false};
  std::thread rpcThread;

  std::mutex connMu;
  std::vector<FlagcxP2pConn *> conns;  // every live connection, owned here
  std::unordered_map<std::string, FlagcxP2pConn *> sessions;

  std::shared_mutex mrMu;  // shared by every access to registered memory
  std::map<uint64_t, flagcx::p2p::Region> regions;  // by base address
  std::unordered_map<uint64_t, uint64_t> mrBase;    // mr id -> base
};

namespace flagcx::p2p {

// p2p_engine.cc
int lanesPerConn();
// The first failure of a connection: one WARN (none when quiet: the peer
// closed it on purpose).
void connMarkDead(FlagcxP2pConn *c, const std::string &why, bool quiet = false);


// p2p_mr.cc
// The region holding [addr, addr+len) with key rkey (rkey 0: any key);
// caller holds e->mrMu (shared).  nullptr when there is none.
const Region *findRegion(FlagcxP2pEngine *e, uint64_t addr, uint64_t len, uint32_t rkey);
// The peer's region holding [addr, addr+len), from c's copy of its table
// (sorted by base); caller holds c->regionMu.  nullptr when there is none.
const WireRegion *findRemoteRegion(const FlagcxP2pConn *c, uint64_t addr, uint64_t len);
std::vector<WireRegion> regionTable(FlagcxP2pEngine *e);
DeviceAdapter *deviceAdapter();  // CUDA adapter when usable, else nullptr

// p2p_lane.cc
// A job ended: its transfer counts it, failed ones log once.
void finish(FlagcxP2pConn *c, Job &j, bool ok, const char *why);
void startLane(FlagcxP2pConn *c, Lane *l);
void sayBye(FlagcxP2pConn *c);  // tell the peer we close, on every lane we initiate
void stopLane(Lane *l);  // ends the lane's thread and closes its socket
bool postJob(FlagcxP2pConn *c, Lane *l, Job &&job);
// CMA probe: can this process read `bytes` at `addr` in `pid`, equal to `want`?
bool cmaProbe(pid_t pid, uint64_t addr, uint64_t want);
uint64_t cmaCookieAddr();
uint64_t cmaCookie();

// Where the device memory an IPC info names is mapped here (imported once).
struct IpcLast {
  char id[DeviceAdapter::kIpcRefBytes];
  void *base = nullptr;
};
int ipcRemote(const char *ipcBuf, size_t len, char **remote, IpcLast *last);
// Queue copies on the device adapter: `kernel` pieces have both ends in
// device memory (one batched launch), `other` pieces one copy each.
int ipcCopyBatch(const std::vector<DeviceAdapter::CopyPiece> &kernel,
                 const std::vector<DeviceAdapter::CopyPiece> &other);
int ipcFlush();  // waits for the queued copies

// p2p_xfer.cc
void pushNotif(const FlagcxP2pNotifyMsg &m);
std::shared_ptr<Xfer> track(FlagcxP2pConn *c, uint64_t jobs);
// Deal `segs` over the connection's lanes as the requests of transfer `x`
// (its slice count becomes the number of requests before the first goes).
void postOnLanes(FlagcxP2pConn *c, Op op, const std::vector<Seg> &segs, const std::shared_ptr<Xfer> &x);

// p2p_verbs.cc: the verbs data path (docs/P2P.md, "Verbs").
void openRdma(FlagcxP2pEngine *e);  // at engine creation: FLAGCX_NET, FLAGCX_IB_SOFTWARE_DEVICE
uint32_t rdmaKind(const rdma::Device *d);  // 0 none, 1 verbs, 2 the software device
// During the handshake, on the control fd, once both Infos are known and
// both sides decided `want` alike: a queue pair each, addresses swapped,
// connected.  false: the fd failed (the handshake fails); otherwise
// c->verbs is set when both ends got a working queue pair.
bool verbsHandshake(FlagcxP2pConn *c, int fd, Clock::time_point dl);
void verbsStart(FlagcxP2pConn *c);
void verbsStop(FlagcxP2pConn *c);
// Take a Write or Read over verbs: 1 taken (*id set), 0 not for verbs (the
// lanes take it).
int verbsSubmit(FlagcxP2pConn *c, Op op, const std::vector<Seg> &segs, uint64_t *id);

// Wire constants.
constexpr uint32_t kReqMagic = 0x50325051;  // "QP2P"
constexpr uint32_t kRespMagic = 0x50325052;
constexpr uint32_t kMaxSegsPerReq = 1u << 20;
constexpr uint32_t kMaxRegions = 1u << 20;
enum Status : int32_t { kOk = 0, kRange = 1, kIo = 2, kBad = 3 };

struct ReqHdr {
  uint32_t magic;
  uint8_t op;
  uint8_t cma;  // the target moves the bytes by CMA (no payload on the socket)
  uint16_t pad;
  uint32_t nseg;
  uint32_t pad2;
  uint64_t bytes;  // sum of seg lengths, or the payload of Notif/Send
};
struct WireSeg {
  uint64_t local;
  uint64_t remote;
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
