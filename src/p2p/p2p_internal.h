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
#include <sys/uio.h>
#include <unistd.h>

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

#include "adapters/adapters.h"
#include "flagcx_p2p.h"
#include "net/net.h"
#include "p2p/p2p_wire.h"
#include "rendezvous/rendezvous.h"

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


// ---- transfers -----------------------------------------------------------
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
  ~Lane() {  // a lane whose thread never started (a failed handshake)
    if (fd >= 0) close(fd);
  }
};

struct RecvMsg {
  std::vector<char> bytes;
};

struct VerbsPath;  // p2p_verbs.cc
struct Door;       // p2p_door.cc

// Who is at the other end of a control connection, as the kernel says.
struct PeerId {
  bool local = false;  // came through an engine's Unix socket (same host, same network namespace)
  pid_t pid = 0;       // SO_PEERCRED pid there (0: not visible in this PID namespace)
  uid_t uid = 0;
  std::string name;    // for log lines: "10.0.0.5:40312" or "local pid 1234"
  std::string ip;      // its numeric address ("127.0.0.1" for the door: this host)
};

}  // namespace flagcx::p2p

struct FlagcxP2pConn {
  FlagcxP2pEngine *engine = nullptr;
  uint64_t serial = 0;   // which connection of its engine, for log lines
  std::string peerHost;  // the peer in log lines: "ip:port" or "local pid N"
  std::string peerIp;    // its numeric address (Accept's ipAddrBuf)
  int remoteGpuIdx = -1;
  int remotePid = 0;         // as the peer says: log lines only
  bool isLocal = false;      // through the local door: same host, as the kernel says
  bool sameProcess = false;  // the kernel says the peer's pid is ours
  pid_t cmaPid = 0;          // the peer's pid from the kernel, for CMA (0: no CMA)
  int cmaPidFd = -1;         // a pidfd of cmaPid: no CMA once that process has exited
  uint64_t peerEngineId = 0; // same process: the engine whose regions hold the peer's addresses
  bool cmaOut = false;       // the peer moves our requests' bytes by CMA
  bool cmaIn = false;        // we move the peer's requests' bytes by CMA
  std::atomic<bool> dead{false};
  std::atomic<bool> closing{false};
  std::string deadWhy;  // first cause, under xferMu

  // Life, under the engine's connMu: userOwned once an API call returned
  // it (it stays, released, until ConnDestroy or the engine's end); ready
  // while it waits in the engine's ready queue for Accept.
  bool userOwned = false;
  bool ready = false;
  // Taken by the RPC server: no call can ever Recv on it, so its messages
  // are refused (and none is kept).
  std::atomic<bool> orphan{false};
  std::mutex releaseMu;   // release(): threads joined and fds closed, once
  bool released = false;

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
  uint64_t recvBytes = 0;  // in recvQ and being received (FLAGCX_P2P_RECV_QUEUE_BYTES)

  ~FlagcxP2pConn() {
    if (cmaPidFd >= 0) close(cmaPidFd);
  }
};

struct FlagcxP2pEngine {
  // The RDMA device (verbs, or the software device in tests), if any;
  // declared before `regions`, whose memory registrations it outlives.
  std::shared_ptr<flagcx::rdma::Device> rdma;
  uint64_t id = 0;        // random; names this engine to same-process peers
  flagcx::SockAddr addr;  // where the engine listens (FLAGCX_SOCKET_IFNAME)
  std::string ifname;
  int gpuIdx = -1;
  flagcx::Secret secret{};  // FLAGCX_P2P_SECRET's key, or one made at creation ...
  bool keyMade = false;     // ... which then travels in the metadata ("KEY@ip:port")
  std::atomic<bool> stopAccept{false};
  flagcx::WakeFd acceptWake;  // signalled with stopAccept and when a handshake ends
  std::mutex acceptMu;  // one accept loop at a time (Accept and the RPC server)
  flagcx::p2p::Door *door = nullptr;  // listeners and handshakes under way (p2p_door.cc)

  std::atomic<bool> rpcActive{false};
  std::thread rpcThread;

  std::mutex connMu;
  std::vector<std::shared_ptr<FlagcxP2pConn>> conns;  // every live connection
  std::deque<std::shared_ptr<FlagcxP2pConn>> ready;   // accepted, not yet returned by Accept
  std::unordered_map<std::string, FlagcxP2pConn *> sessions;
  std::atomic<uint64_t> serials{0};

  // The janitor releases failed connections at once (threads and fds) and
  // joins the handshake threads that ended.
  std::thread janitor;
  std::mutex janMu;
  std::condition_variable janCv;
  bool janWork = false, janStop = false;

  std::shared_mutex mrMu;  // shared by every access to registered memory
  std::map<uint64_t, flagcx::p2p::Region> regions;  // by base address
  std::unordered_map<uint64_t, uint64_t> mrBase;    // mr id -> base
};

namespace flagcx::p2p {

// p2p_engine.cc
int lanesPerConn();
// The first failure of a connection: one WARN (none when quiet: the peer
// closed it on purpose); the janitor then releases it.
void connMarkDead(FlagcxP2pConn *c, const std::string &why, bool quiet = false);
void pokeJanitor(FlagcxP2pEngine *e);
// Threads joined, fds closed (once; bye: tell the peer first).
void releaseConn(FlagcxP2pConn *c, bool bye);
// A connection the handshake made: its threads start and the engine keeps it.
void adopt(FlagcxP2pEngine *e, const std::shared_ptr<FlagcxP2pConn> &c, bool toReady);
// Same-process peers: is [addr, addr+len) inside a region of engine `id` of
// this process?  Checked, then moved by the kernel (CMA on ourselves).
// The caller holds self->mrMu (shared).
bool inEngineRegion(const FlagcxP2pEngine *self, uint64_t id, uint64_t addr, uint64_t len);
int64_t handshakeSeconds();  // FLAGCX_P2P_HANDSHAKE_TIMEOUT
uint64_t recvQueueCap();      // FLAGCX_P2P_RECV_QUEUE_BYTES

// p2p_door.cc: the engine's listeners (its address, loopback, the local
// door) and the accepting side's handshakes.
bool doorOpen(FlagcxP2pEngine *e);  // false: logged
void doorClose(FlagcxP2pEngine *e);
void doorReap(FlagcxP2pEngine *e);  // joins handshake threads that ended
// The next accepted connection, until `until` or StopAccept; forUser: it
// is handed to the caller (Accept), who may hold it until ConnDestroy.
std::shared_ptr<FlagcxP2pConn> acceptNext(FlagcxP2pEngine *e, Clock::time_point until, bool forUser);
std::string doorName(int port);  // the abstract Unix socket's name
// Where the lanes of a door connection listen: loopback (else the main address).
SockAddr doorLoopback(const FlagcxP2pEngine *e);

// p2p_handshake.cc: the handshake after the hello, both sides.
std::shared_ptr<FlagcxP2pConn> acceptSide(FlagcxP2pEngine *e, int fd, const PeerId &who,
                                          Clock::time_point dl);
// key: what the connecting side proved (TCP), to check the engine's answer.
std::shared_ptr<FlagcxP2pConn> connectSide(FlagcxP2pEngine *e, int fd, const PeerId &who,
                                           const SockAddr &peer, const Secret *key,
                                           Clock::time_point dl);
Secret keyFromEnv(bool *set);

// p2p_dial.cc: the connecting side's way in (the local door, else TCP).
// target: "[KEY@]host:port" (KEY: 32 hex digits, the engine's key).
std::shared_ptr<FlagcxP2pConn> dial(FlagcxP2pEngine *e, const std::string &target);
std::string keyHex(const Secret &key);
std::string ipOf(const SockAddr &a);  // numeric, without port or brackets
// A TCP connection within dl (a refused one is tried again until then);
// -1 when none (logged, naming the address).
int tcpConnect(const SockAddr &a, Clock::time_point dl);

// p2p_mr.cc
// The region holding [addr, addr+len) with key rkey (rkey 0: any key);
// caller holds e->mrMu (shared).  nullptr when there is none.
const Region *findRegion(FlagcxP2pEngine *e, uint64_t addr, uint64_t len, uint32_t rkey);
// The peer's region holding [addr, addr+len), from c's copy of its table
// (sorted by base); caller holds c->regionMu.  nullptr when there is none.
const WireRegion *findRemoteRegion(const FlagcxP2pConn *c, uint64_t addr, uint64_t len);
std::vector<WireRegion> regionTable(FlagcxP2pEngine *e);
DeviceAdapter *deviceAdapter();  // CUDA adapter when usable, else nullptr

// p2p_lane.cc: lanes, their I/O and the initiator's side.
// Vectored exact-length I/O with a deadline; false when the peer is gone or
// the deadline passed.
bool ioVec(int fd, std::vector<iovec> iov, bool out, Clock::time_point dl);
bool io1(int fd, void *p, size_t n, bool out, Clock::time_point dl);
bool drain(int fd, uint64_t bytes, Clock::time_point dl);  // read and drop
// A job ended: its transfer counts it, failed ones log once.
void finish(FlagcxP2pConn *c, Job &j, bool ok, const char *why);
void startLane(FlagcxP2pConn *c, Lane *l);
void sayBye(FlagcxP2pConn *c);  // tell the peer we close, on every lane we initiate
void stopLane(Lane *l);  // ends the lane's thread and closes its socket
bool postJob(FlagcxP2pConn *c, Lane *l, Job &&job);
uint64_t cmaCookieAddr();
uint64_t cmaCookie();
// Host bytes for a list that touches device memory: one staging buffer.
struct Staging {
  std::vector<char> buf;
  std::vector<iovec> iov;  // into buf, one per segment
  void make(const std::vector<iovec> &real);
  bool copy(const std::vector<iovec> &real, bool toStaging);  // device/host <-> staging
};

// p2p_serve.cc: the target's side of a lane.
void serviceLoop(FlagcxP2pConn *c, Lane *l);
// May this process move bytes of kernel-proven `pid` by CMA (probe of
// its cookie)?  Also opens c->cmaPidFd.
bool cmaProbe(FlagcxP2pConn *c, pid_t pid, uint64_t addr, uint64_t want);

// Where the device memory an IPC info names is mapped here (imported once).
struct IpcLast {
  char id[DeviceAdapter::kIpcRefBytes];
  void *base = nullptr;
  size_t bytes = 0;  // the imported allocation's size (0: unknown)
};
int ipcRemote(const char *ipcBuf, size_t len, char **remote, IpcLast *last);
// Queue copies on the device adapter: `kernel` pieces have both ends in
// device memory (one batched launch), `other` pieces one copy each.
int ipcCopyBatch(const std::vector<DeviceAdapter::CopyPiece> &kernel,
                 const std::vector<DeviceAdapter::CopyPiece> &other);
int ipcFlush();  // waits for the queued copies

// p2p_xfer.cc
void pushNotif(const FlagcxP2pNotifyMsg &m);
bool notifRoom();  // fewer than kMaxNotifs wait for GetNotifs
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

}  // namespace flagcx::p2p
