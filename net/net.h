// The transport interface.  A Conn is an ordered, bidirectional message
// channel to one peer: the k-th send posted on one side matches the k-th
// receive posted on the other.  Every message carries a header (length, tag)
// that the receiver checks before a byte reaches the user's buffer.
//
// A Conn is a small door: nine virtual operations (post a send or receive,
// a receive that folds, test, progress, poison, checkAlive, waitFds, status)
// and a capability record (ConnCaps: kind, peer, the peer's proven pid, the
// slice it moves best, from which size it folds on receive) filled once when
// the Conn is made and read without a virtual call.  The reduction a folding
// receive applies is registered once per Transport (setReduce), not passed
// with each receive.  A Transport builds Conns collectively (connectAll).
#pragma once
#include <poll.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flagcx.h"
#include "net/ibverbs/rdma_device.h"
#include "net/tags.h"

namespace flagcx {

class Bootstrap;

// A receive whose bytes are also folded into another buffer (a collective's
// receive-and-reduce step): once the receive is done, dst[i] = base[i] op
// buf[i] for each of its elements (base: dst itself when null).  The
// reduction is the transport's (Transport::setReduce), not the caller's.
struct RecvFold {
  // The host reduction (hostReduce's signature; the transports do not link
  // the device adapters).
  using Fn = flagcxResult_t (*)(void *dst, const void *a, const void *b, size_t count,
                                flagcxDataType_t dt, flagcxRedOp_t op);
  char *dst = nullptr;
  const char *base = nullptr;
  size_t elem = 1;  // bytes per element
  flagcxDataType_t dt = flagcxUint8;
  flagcxRedOp_t op = flagcxSum;
};

// What a Conn is, fixed when it is made and read without a virtual call.
struct ConnCaps {
  const char *kind = "";  // "shm", "socket", "ib"
  int peer = -1;
  // The peer's process id as the kernel established it when the Conn was
  // made (shm: SO_PEERCRED, net/shm/peer_proof.h), in this PID namespace;
  // 0 when nothing established it (other transports, an unproven peer).
  // Memory of a peer is only ever reached through this pid, never one the
  // peer states.
  pid_t peerPid = 0;
  // The slice of a large message this Conn moves best, for the engine when
  // FLAGCX_NET_CHUNK_SIZE is auto; 0: the engine's default (512 KiB).
  size_t sliceHint = 0;
  // irecvFold of a message of at least this many bytes does the fold itself
  // (the socket lanes' helper threads fold each piece of a stripe as it
  // arrives, on their own cores, while it is still in cache); 0: never, the
  // caller reduces the landed bytes after test() reports the receive done.
  size_t foldFrom = 0;
};

class Conn {
 public:
  virtual ~Conn() = default;

  // Post a send of `bytes` from buf (kept valid until done).  `req` receives a
  // handle for test(); at most kMaxPosted requests are outstanding per Conn.
  virtual flagcxResult_t isend(const void *buf, size_t bytes, uint64_t tag, int *req) = 0;
  // Post a receive of at most `bytes`.  A message with another tag, or longer
  // than `bytes`, fails the Conn with flagcxInvalidUsage and a log line.
  virtual flagcxResult_t irecv(void *buf, size_t bytes, uint64_t tag, int *req) = 0;
  // irecv, and the fold of the received bytes into f.dst before test()
  // reports it done; only where foldsOnReceive(bytes).  `bytes` is a whole
  // number of f.elem-byte elements.
  virtual flagcxResult_t irecvFold(void *buf, size_t bytes, uint64_t tag, const RecvFold &f,
                                   int *req) = 0;
  // Advance both directions as far as possible without blocking; report
  // whether `req` is complete and, for receives, how many bytes arrived.  A
  // completed request's handle is released by this call.
  virtual flagcxResult_t test(int req, bool *done, size_t *bytes) = 0;
  // Advance without asking about a request.
  virtual flagcxResult_t progress() = 0;
  // Tell the peer that this rank gave up on its current operation (best
  // effort, never blocks): the peer's pending and future requests on this
  // Conn then fail with `code`, and its log names `mine` (this rank's call,
  // a tag) and `theirs` (the call this rank received, or 0).  The Conn is
  // unusable afterwards.
  virtual void poison(flagcxResult_t code, uint64_t mine, uint64_t theirs) = 0;
  // Is the peer still there (its process alive, its end not closed)?  For
  // callers that wait outside this Conn: progress() looks only while
  // requests are pending.  An error comes with one log line.
  virtual flagcxResult_t checkAlive() = 0;
  // For a caller with nothing to do: append up to `max` pollfd entries whose
  // readiness means this Conn can move again (its sockets, its helper
  // threads' completion signal) and return how many; -1 when it cannot be
  // waited on that way (shm: poll it).  Only meaningful right after test()
  // or progress() moved nothing.
  virtual int waitFds(struct pollfd *fds, int max) = 0;

  // What went wrong with the peer, and what waits: one call for the three.
  struct Mismatch {
    uint64_t mine = 0, theirs = 0;
  };
  struct Status {
    // The call the peer named when it gave up (its `mine`, a tag), or 0 when
    // the peer sent no error frame.  A peer that gave up on a later call than
    // this rank's current one still delivered everything it sent before.
    uint64_t peerGaveUpOn = 0;
    // The calls (tags) named when this Conn found mismatched calls: `mine` is
    // what this rank posted, `theirs` what arrived; both 0 when it found none.
    // The executor passes them on to the other peers when it gives up.
    Mismatch mismatch;
    // The tag of a message that has arrived (its header read by progress())
    // and waits for a receive to be posted; 0 when none does.
    uint64_t inboundTag = 0;
  };
  virtual Status status() const = 0;

  // The facts, read without a virtual call.
  const ConnCaps &caps() const { return caps_; }
  const char *kind() const { return caps_.kind; }
  int peer() const { return caps_.peer; }
  pid_t peerPid() const { return caps_.peerPid; }
  size_t sliceHint() const { return caps_.sliceHint; }
  bool foldsOnReceive(size_t bytes) const { return caps_.foldFrom && bytes >= caps_.foldFrom; }
  uint64_t peerGaveUpOn() const { return status().peerGaveUpOn; }
  Mismatch mismatch() const { return status().mismatch; }
  uint64_t inboundTag() const { return status().inboundTag; }

  static constexpr int kMaxPosted = 256;

 protected:
  ConnCaps caps_;  // filled by the implementation's constructor, then fixed
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char *name() const = 0;
  // The reduction irecvFold folds with, for the Conns connectAll makes from
  // now on; without one they never fold (ConnCaps::foldFrom is 0).
  void setReduce(RecvFold::Fn fn) { reduce_ = fn; }
  // Collective over the communicator: every rank calls it once with the
  // ranks it will reach through this transport (ascending; symmetric: if a
  // lists b then b lists a).  Produces nchannels Conns per peer, in
  // out[i * nchannels + c] order.  All waits are bounded by FLAGCX_TIMEOUT.
  virtual flagcxResult_t connectAll(Bootstrap &bs, const std::vector<int> &peers,
                                    int nchannels, std::vector<std::unique_ptr<Conn>> *out) = 0;
  // An abortive shrink's child taking over its parent's Conn to a surviving
  // peer (src/core/elastic.cc).  adoptable: whether this transport can hand
  // `old` (one of its Conns, idle) on; no by default.  adopt (only after
  // both ends' parents drained and both found their Conn adoptable, told
  // over the bootstrap): empties what this rank owns of the Conn's rings and
  // returns them in a fresh Conn to child rank `peer` (this rank is `self`),
  // which neither end uses before both adopted; `old` no longer touches
  // them.
  virtual bool adoptable(Conn & /*old*/) const { return false; }
  virtual std::unique_ptr<Conn> adopt(Conn & /*old*/, int /*self*/, int /*peer*/) { return nullptr; }

 protected:
  RecvFold::Fn reduce_ = nullptr;
};

// Collective among `peers` (symmetric lists, as connectAll): the pid of
// each peer's process as the kernel establishes it (net/shm/peer_proof.h),
// in this PID namespace; 0 where it cannot (another host, network or PID
// namespace, another user).  A peer whose pid is getpid() is a thread of
// this process.  The only pids under which a peer's memory may be reached.
flagcxResult_t provePeers(Bootstrap &bs, const std::vector<int> &peers, std::vector<pid_t> *pids);
std::unique_ptr<Transport> makeShmTransport();
// Rendezvous messages this process's shm pipes copied out of a mapping of the
// sender's shareable allocation instead of with process_vm_readv (tests).
uint64_t shmMappedPulls();
// Conns this process's shm transport made of a parent's (Transport::adopt; tests).
uint64_t shmAdoptedConns();
std::unique_ptr<Transport> makeSocketTransport();
// Bytes this process's socket helper threads reduced as they received them
// (Conn::irecvFold; tests).
uint64_t socketFoldedBytes();
// Collective over the bootstrap (every rank calls it once, in commInit):
// decides which peers this rank reaches over verbs (net/ibverbs).  `netPeers`
// are the peers that would otherwise use sockets; with
// FLAGCX_IB_SOFTWARE_DEVICE=2, `shmPeers` join them.  A pair uses verbs when
// both ends have a usable device and FLAGCX_NET allows it; those peers move
// to *ibPeers and *ib is the transport for them (null when there are none).
// FLAGCX_NET=IB makes a missing device an error.  Logs the choice and the
// reason at INFO.
flagcxResult_t ibSplitPeers(Bootstrap &bs, std::vector<int> *shmPeers, std::vector<int> *netPeers,
                            std::vector<int> *ibPeers, std::unique_ptr<Transport> *ib);

}  // namespace flagcx

// The one-sided engine (rma.h) is part of this door.
#include "net/rma.h"
