// A Conn built from byte pipes: the message framing, request slots and error
// handling shared by the shm and socket transports.
//
// Wire format, per message and per lane that carries a part of it:
//   FrameHeader {magic, version, lane, seq, tag, length} then `stripe` bytes.
// `length` is the whole message; the stripe a lane carries is a pure function
// of (length, lane count), so every lane's header is self-describing and the
// receiver checks it (magic, lane, sequence, tag, length against the posted
// buffer) before one payload byte is read into user memory.  Lane 0 carries a
// header for every message (zero-byte messages are a header alone); lane j > 0
// carries only the stripes of messages large enough to be split j+1 ways
// (at least 512 KiB, and 64 KiB a stripe: stripeCount()).
// One lane (shm) is the common case; the socket transport uses several TCP
// connections per Conn as lanes.
//
// Never hang: test()/progress() never block.  While requests are pending and
// the caller keeps polling, a Conn that moves no byte for FLAGCX_TIMEOUT
// seconds fails with flagcxRemoteError (a stopped or wedged peer); gaps of
// more than a second between polls restart that clock, since the caller was
// not waiting then.  Pipes report dead peers sooner (EOF/RST, or the shm
// liveness check every 50 ms).  Any error is sticky: the Conn stays failed.
#pragma once
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/net.h"

namespace flagcx {

// Who is at the other end, for log lines.
struct PeerDesc {
  int self = -1;
  int peer = -1;
  int channel = 0;
  std::string host;
};

// What a rendezvous frame (kFrameVersionPull) carries after its header.
struct PullNote {
  uint64_t addr;        // the sender's buffer, in its address space
  uint8_t pipe[64];     // Pipe::describePull's, opaque to the engine
};
static_assert(sizeof(PullNote) == 72);

// A helper's fold (Conn::irecvFold): the bytes from `src` on, up to the end
// of the job's buffer, are folded as they arrive, in whole elements:
// f.dst[i] = f.base[i] op src[i] (f.dst and f.base point at src's first
// byte's place, f.base never null).  src is element-aligned within the
// message and at most the job's first byte; the bytes between are there
// before the job starts.
struct BgFold {
  RecvFold f;
  RecvFold::Fn fn = nullptr;  // the Conn's reduction (Transport::setReduce)
  const char *src = nullptr;
};

// What a Pipe is, fixed when it is made and read without a virtual call.
struct PipeCaps {
  // Single copy for large messages (shm): instead of streaming the bytes the
  // sender announces its buffer, the receiver reads it straight out of the
  // sender's memory and then acknowledges.  Only pipes that can read the
  // peer's memory say yes.
  bool canPull = false;
  // The peer's process as the kernel identified it at set-up (in this PID
  // namespace), 0 when not established (see ConnCaps::peerPid).
  pid_t peerPid = 0;
  // Whether this pipe has helper threads configured (offload() may say yes).
  bool hasHelpers = false;
  // The descriptor to poll for this pipe's readiness (-1: none, poll the pipe).
  int pollFd = -1;
};

// A non-blocking, ordered byte stream to one peer, both directions.
class Pipe {
 public:
  virtual ~Pipe() = default;
  bool canPull() const { return caps_.canPull; }
  pid_t peerPid() const { return caps_.peerPid; }
  bool hasHelpers() const { return caps_.hasHelpers; }
  int pollFd() const { return caps_.pollFd; }

  // Copy out as many of the iov bytes as fit now; *moved = bytes taken (0 when
  // the pipe is full).  *closed is set when the peer has gone away.
  virtual flagcxResult_t write(const iovec *iov, int iovcnt, size_t *moved, bool *closed) = 0;
  // Copy in up to n bytes; *moved = bytes copied (0 when nothing is there).
  // *closed is set once the peer has gone and every byte it sent was read.
  virtual flagcxResult_t read(void *dst, size_t n, size_t *moved, bool *closed) = 0;
  // Called at most every ~50 ms while requests wait without progress: a
  // transport whose stream cannot report a dead peer by itself (shm) checks
  // here.  Returns flagcxRemoteError (after logging) when the peer is dead.
  virtual flagcxResult_t idleCheck() { return flagcxSuccess; }
  // Why the pipe reported *closed, when it knows more than "end of stream"
  // (a reset connection, a broken pipe): added to the Conn's warning when
  // requests were still pending.  Null when nothing is known.
  virtual const char *closeCause() const { return nullptr; }

  // Single copy, where canPull().  Sender: what the pipe tells the receiver
  // about the announced buffer, beside its address (PullNote::pipe, zeroed
  // before; nothing by default).
  virtual void describePull(const void * /*buf*/, size_t /*len*/, uint8_t * /*note*/) {}
  // Receiver: read n bytes at `offset` of the announced buffer into dst.
  virtual flagcxResult_t pull(void *dst, const PullNote &note, uint64_t offset, size_t n) {
    return flagcxInternalError;
  }
  virtual void ackPull() {}                     // receiver: one announced message consumed
  virtual uint64_t pullsAcked() { return 0; }   // sender: how many the peer consumed

  // Background moves (socket helper threads): the engine asks before it
  // moves a stripe of a message split over several lanes; yes means a helper
  // thread of this pipe moves it with blocking calls (writeBg/readBg), so the
  // lanes' kernel copies run on several cores at once.  While a job runs, that
  // direction of the pipe belongs to the helper: no read()/write() on it
  // until pollBg() reports it finished.
  virtual bool offload() { return false; }
  // A descriptor that becomes readable when a helper finishes a job (-1: none).
  virtual int bgFd() const { return -1; }
  // Before sleeping on bgFd(): clear its signal, then say whether the
  // helper of that direction is still at work (false: poll it now).
  virtual void bgDrain() {}
  virtual bool bgBusy(bool send) const { return false; }
  virtual flagcxResult_t writeBg(const iovec *iov, int iovcnt) { return flagcxInternalError; }
  // Bytes already buffered in the pipe are copied at once (*pre of them);
  // a helper receives the rest, if any.
  // With `fold`, the helper also folds what it receives (see BgFold); the
  // *pre bytes it did not receive are folded by it too, from fold->src on.
  virtual flagcxResult_t readBg(void *dst, size_t n, size_t *pre, const BgFold *fold) {
    return flagcxInternalError;
  }
  // *moved: bytes of the job moved so far (not counting *pre).
  virtual flagcxResult_t pollBg(bool send, size_t *moved, bool *finished, bool *closed) {
    return flagcxInternalError;
  }
  // The Conn failed: end any helper job now (the connection is shut down to
  // unblock it) and return once no helper touches a caller's buffer again.
  // The pipe moves nothing afterwards.
  virtual void cancelBg() {}
  // End the connection at once in both directions, so that the peer reads
  // its end (mid-frame, if a frame was half sent) instead of waiting for
  // bytes that will not come.  False where the transport cannot (then
  // nothing changed).  The pipe moves nothing afterwards.
  virtual bool cut() { return false; }

 protected:
  PipeCaps caps_;  // filled by the implementation's constructor, then fixed
};

struct FrameHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t lane;
  uint64_t seq;
  uint64_t tag;
  uint64_t length;
};
static_assert(sizeof(FrameHeader) == 32);
constexpr uint32_t kFrameMagic = 0x46434d31;  // "FCM1"
constexpr uint16_t kFrameVersion = 1;
// A rendezvous frame: the header is followed by a PullNote (the sender's
// buffer address and what its pipe adds) and no payload; the receiver pulls
// the `length` bytes itself.
constexpr uint16_t kFrameVersionPull = 2;
// An error frame (lane 0, between messages, no payload): the sender gave up.
// seq = the sender's call (a tag), tag = the call it received (or 0),
// length = the flagcxResult_t the receiver fails with.
constexpr uint16_t kFrameVersionError = 3;
// Messages at least this long go by rendezvous where the pipe can pull.
constexpr uint64_t kPullThreshold = 64 * 1024;

// How a message of `length` bytes is striped over `nlanes` lanes.
int stripeCount(uint64_t length, int nlanes);
void stripeOf(uint64_t length, int nstripes, int lane, uint64_t *offset, uint64_t *size);

class FramedConn final : public Conn {
 public:
  // `reduce`: what irecvFold folds with; null: this Conn never folds.
  FramedConn(const char *kind, PeerDesc desc, std::vector<std::unique_ptr<Pipe>> lanes,
             RecvFold::Fn reduce = nullptr);
  ~FramedConn() override;

  flagcxResult_t isend(const void *buf, size_t bytes, uint64_t tag, int *req) override;
  flagcxResult_t irecv(void *buf, size_t bytes, uint64_t tag, int *req) override;
  flagcxResult_t test(int req, bool *done, size_t *bytes) override;
  flagcxResult_t progress() override;
  void poison(flagcxResult_t code, uint64_t mine, uint64_t theirs) override;
  Status status() const override;
  flagcxResult_t checkAlive() override;
  int waitFds(struct pollfd *fds, int max) override;
  flagcxResult_t irecvFold(void *buf, size_t bytes, uint64_t tag, const RecvFold &f,
                           int *req) override;
  // The pipes, for a transport handing an idle Conn's pipes on (Transport::adopt).
  size_t laneCount() const { return lanes_.size(); }
  Pipe *lanePipe(size_t i) const { return lanes_[i].pipe.get(); }

 private:
  enum class Kind : uint8_t { Free, Send, Recv };
  struct Req {
    Kind kind = Kind::Free;
    bool done = false;
    bool queued = false;    // still in sendQ_/recvQ_
    bool released = false;  // test() reported it done
    uint32_t gen = 0;
    char *buf = nullptr;
    uint64_t size = 0;    // send: length; recv: capacity
    uint64_t length = 0;  // bytes of the message (recv: from the header)
    uint64_t tag = 0;
    uint64_t seq = 0;
    int stripes = 0;      // 0 until known (recv: first header seen)
    int stripesLeft = 0;
    bool pull = false;    // send by rendezvous (see kFrameVersionPull)
    PullNote note{};      // what the rendezvous frame announces (send side)
    bool folds = false;   // recv: irecvFold's fold into `fold.dst`
    RecvFold fold{};      // fold.base set (dst when the caller gave none)
  };
  // Posted requests of one direction in sequence order (slot indices).
  struct Queue {
    int slots[kMaxPosted];
    int head = 0, count = 0;
    uint64_t frontSeq = 0;  // seq of slots[head]
    uint64_t nextSeq = 0;   // seq the next post gets
    int at(uint64_t seq) const { return slots[(head + (seq - frontSeq)) % kMaxPosted]; }
    int nth(int k) const { return slots[(head + k) % kMaxPosted]; }  // k-th posted, k < count
  };
  struct Lane {
    std::unique_ptr<Pipe> pipe;
    // send side
    bool sActive = false;
    uint64_t sSeq = 0;
    FrameHeader sHdr{};
    size_t sHdrDone = 0;
    const char *sData = nullptr;
    uint64_t sLen = 0, sDone = 0;
    int sSlot = -1;
    bool sBg = false;      // the frame is with the pipe's helper (writeBg)
    // receive side
    FrameHeader rHdr{};
    size_t rHdrGot = 0;
    bool rHdrReady = false;
    bool rAny = false;   // a header was ever taken on this lane
    uint64_t rLastSeq = 0;
    int rSlot = -1;
    char *rData = nullptr;
    uint64_t rLen = 0, rDone = 0;
    PullNote rNote{};     // rendezvous: the sender's buffer
    size_t rNoteGot = 0;
    bool rPull = false;
    bool rBg = false;      // the payload is with the pipe's helper (readBg)
    uint64_t rBgBase = 0;  // rDone when the helper took over
    uint64_t rFolded = 0;  // irecvFold: bytes of the stripe folded so far (a prefix)
    bool closed = false;
  };

  flagcxResult_t post(Kind kind, void *buf, size_t bytes, uint64_t tag, int *req);
  flagcxResult_t progressSend(Lane &l, int li, bool *moved);
  flagcxResult_t progressRecv(Lane &l, int li, bool *moved);
  // progressRecv's parts (framed_recv.cc): a frame header, what can follow
  // it, and a stripe's payload.
  flagcxResult_t readHeader(Lane &l, int li, bool *moved, bool *ready);
  flagcxResult_t closedInHeader(Lane &l, int li, bool *moved);
  flagcxResult_t takeErrorFrame(Lane &l, bool *moved);
  flagcxResult_t readPullNote(Lane &l, int li, bool *moved);
  flagcxResult_t readPayload(Lane &l, int li, bool *moved, bool *whole);
  flagcxResult_t startBgRecv(Lane &l, bool *moved);
  flagcxResult_t takeHeader(Lane &l, int li);
  flagcxResult_t foldUpTo(Lane &l, uint64_t end);  // fold [rFolded, end) of the lane's stripe
  flagcxResult_t closedInPayload(Lane &l, int li);  // log, mark, fail
  flagcxResult_t closedInSend(Lane &l, int li);
  // ": <cause>" from the first lane whose pipe knows why it closed, or "".
  std::string closeCause() const;
  flagcxResult_t peerGaveUp(const FrameHeader &h);
  void popDone(Queue &q);
  void collectPullAcks(bool *moved);
  void freeSlot(int slot);
  flagcxResult_t fail(flagcxResult_t code);
  bool cancelBg();  // every lane's helper job ended (Pipe::cancelBg); any were
  flagcxResult_t idle();
  flagcxResult_t lanesAlive();  // every lane's pipe: its peer still there (one WARN if not)
  flagcxResult_t closedLanesCheck();  // a closed lane that pending work still needs: fail
  const char *dirName(Kind k) const { return k == Kind::Send ? "send" : "recv"; }

  const char *kind_;
  PeerDesc desc_;
  std::vector<Lane> lanes_;
  Req reqs_[kMaxPosted];
  int freeSlots_[kMaxPosted];
  int nfree_ = 0;
  int pending_ = 0;  // requests not yet done
  Queue sendQ_, recvQ_;
  // Rendezvous sends waiting for the peer's acknowledgement, in order.
  int pullSlots_[kMaxPosted];
  int pullHead_ = 0, pullCount_ = 0;
  uint64_t pullsDone_ = 0;
  bool canPull_ = false;
  RecvFold::Fn reduce_ = nullptr;
  flagcxResult_t error_ = flagcxSuccess;
  bool peerClosed_ = false;
  bool poisoned_ = false;  // an error frame went out (see poison())
  bool anyLaneClosed_ = false;
  // A peer's error frame read on lane 0 of a several-lane Conn, not yet in
  // effect: messages numbered below gaveUpBefore_ may still be completing.
  bool gaveUpPending_ = false;
  FrameHeader gaveUpHdr_{};
  uint64_t gaveUpBefore_ = 0;
  uint64_t peerGaveUpOn_ = 0;  // the peer's call named in its error frame
  Mismatch mismatch_;          // set when this Conn found mismatched calls
  // Stall and liveness tracking (see idle()).
  using Clock = std::chrono::steady_clock;
  Clock::time_point lastMove_{}, lastIdleCall_{}, lastLiveCheck_{}, gaveUpAt_{};
  bool moveStamped_ = false;
  int64_t timeoutSec_ = 600;
};

}  // namespace flagcx
