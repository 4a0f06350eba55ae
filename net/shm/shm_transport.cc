// Same-host transport: one single-producer/single-consumer byte ring per
// direction, channel and peer, in POSIX shared memory.
//
// Set-up (connectAll): each rank creates one segment per peer holding the
// rings it *receives* on (one per channel), sends the segment's name to the
// peer through the bootstrap, opens the peer's segment (the rings it sends
// on), then both sides exchange an acknowledgement and the creator unlinks
// its segment at once: from then on only the mappings keep it alive, so a
// crash cannot leave anything in /dev/shm.
//
// Fast path: the producer copies into the ring and publishes its tail with a
// release store every chunk; the consumer copies out and publishes its head.
// Each side caches the other's counter and re-reads it only when the ring
// looks full/empty, so the cache line of a counter moves between cores once
// per chunk, not per message.  No syscall on the fast path.  A peer that
// vanishes is noticed through a "closed" flag set by its destructor, or, when
// it was killed, through kill(pid, 0) / its /proc state, checked by the
// engine's idle path at most every 50 ms.  The peer's pid is the kernel's
// word, never the peer's (provePeers, net/shm/peer_proof.h): a peer that
// cannot be proven (another network or PID namespace, as containers of one
// pod may be) gets no pid check and no reading of its memory (rings only);
// a killed peer is then noticed by the FLAGCX_TIMEOUT stall check.
//
// Untrusted peer: the ring sizes are fixed at set-up, and every counter read
// from the peer is checked (0 <= tail - head <= size) before it is used, so
// a corrupt or hostile peer cannot make a copy leave the ring or our buffer.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "rendezvous/rendezvous.h"
#include "base/base.h"
#include "net/common/framed_conn.h"
#include "net/net.h"

namespace flagcx {

namespace {

constexpr uint64_t kRingMagic = 0x464c4147525247ull;  // "FLAGRRG"
constexpr size_t kCtlBytes = 4096;                    // control page before each ring
constexpr uint64_t kChunk = 256 * 1024;               // publish the counter this often
constexpr uint32_t kTagName = 0x73686d01;             // bootstrap tags: "shm" 1, 2
constexpr uint32_t kTagAck = 0x73686d02;

struct RingCtl {
  alignas(64) std::atomic<uint64_t> tail;  // bytes produced (producer writes)
  alignas(64) std::atomic<uint64_t> head;  // bytes consumed (consumer writes)
  alignas(64) uint64_t magic;
  uint64_t size;
  std::atomic<int32_t> consumerPid;
  std::atomic<int32_t> producerPid;
  std::atomic<uint32_t> producerClosed;
  std::atomic<uint32_t> consumerClosed;
  uint64_t ownerMagicAddr;               // &magic in the consumer's address space
  std::atomic<uint32_t> pullOk;          // consumer can read the producer's memory (its probe)
  alignas(64) std::atomic<uint64_t> pulls;  // rendezvous messages the consumer pulled
};
static_assert(sizeof(RingCtl) <= kCtlBytes);

// What a sender's pipe adds to a rendezvous frame when the announced buffer
// lies in a shareable allocation (the host adapter's memfd memory): the
// receiver maps that allocation once and copies out of the mapping, at the
// speed of a copy between caches, instead of process_vm_readv, which pins
// every page of every message first (1 MiB: 27 against 61 us on the
// development VM; docs/DECISIONS.md, "Shared memory").
struct SharedNote {
  uint32_t kind;   // kSharedNote, or 0: nothing (heap memory)
  uint32_t pad;
  uint64_t frees;  // the sender's host::memFreeCount()
  ShareRef ref;
};
constexpr uint32_t kSharedNote = 0x53484d31;  // "SHM1"
static_assert(sizeof(SharedNote) <= sizeof(PullNote::pipe));
constexpr size_t kMaxPeerMaps = 8;  // mappings of the peer's allocations kept per pipe (unused ones)
std::atomic<uint64_t> g_mappedPulls{0};
std::atomic<uint64_t> g_adopted{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

class ShmPipe final : public Pipe {
 public:
  // `emptied`: rings both ends just reset (handOver): every counter is 0,
  // whether or not the peer's reset is visible yet.
  ShmPipe(PeerDesc desc, pid_t peerPid, std::shared_ptr<Segment> txSeg, RingCtl *tx,
          std::shared_ptr<Segment> rxSeg, RingCtl *rx, uint64_t ringBytes, bool canPull,
          bool emptied = false)
      : desc_(std::move(desc)),
        txSeg_(std::move(txSeg)),
        rxSeg_(std::move(rxSeg)),
        tx_(tx),
        rx_(rx),
        txData_(reinterpret_cast<char *>(tx) + kCtlBytes),
        rxData_(reinterpret_cast<char *>(rx) + kCtlBytes),
        // The size checked at set-up, never re-read: the peer can write both rings' headers.
        ringSize_(ringBytes) {
    caps_.canPull = canPull;
    caps_.peerPid = peerPid;
    txTail_ = emptied ? 0 : tx_->tail.load(std::memory_order_relaxed);
    txHead_ = emptied ? 0 : tx_->head.load(std::memory_order_acquire);
    rxHead_ = emptied ? 0 : rx_->head.load(std::memory_order_relaxed);
    rxTail_ = emptied ? 0 : rx_->tail.load(std::memory_order_acquire);
  }
  ~ShmPipe() override {
    if (!handedOver_) cut();
  }
  uint64_t ringBytes() const { return ringSize_; }
  const PeerDesc &desc() const { return desc_; }
  // Transport::adopt: empties what this rank owns of the rings (the tail and
  // closed flag of the ring it sends on; the head, pull count and closed
  // flag of the ring it receives on; the peer empties the rest) and returns
  // them in a pipe of the child; this pipe no longer touches them.
  std::unique_ptr<ShmPipe> handOver(int self, int peer) {
    tx_->tail.store(0, std::memory_order_release);
    tx_->producerClosed.store(0, std::memory_order_release);
    rx_->head.store(0, std::memory_order_release);
    rx_->pulls.store(0, std::memory_order_release);
    rx_->consumerClosed.store(0, std::memory_order_release);
    handedOver_ = true;
    PeerDesc d = desc_;
    d.self = self;
    d.peer = peer;
    return std::make_unique<ShmPipe>(d, caps_.peerPid, txSeg_, tx_, rxSeg_, rx_, ringSize_,
                                     caps_.canPull, true);
  }
  // The flags the destructor sets: the peer's reads see the end once the
  // ring is empty, its writes at once.
  bool cut() override {
    tx_->producerClosed.store(1, std::memory_order_release);
    rx_->consumerClosed.store(1, std::memory_order_release);
    return true;
  }

  flagcxResult_t write(const iovec *iov, int iovcnt, size_t *moved, bool *closed) override {
    *moved = 0;
    *closed = false;
    uint64_t space = ringSize_ - (txTail_ - txHead_);
    if (space == 0) {
      txHead_ = tx_->head.load(std::memory_order_acquire);
      if (txHead_ > txTail_ || txTail_ - txHead_ > ringSize_) return corrupt("send", txHead_, txTail_);
      space = ringSize_ - (txTail_ - txHead_);
      if (tx_->consumerClosed.load(std::memory_order_acquire)) {
        *closed = true;
        return flagcxSuccess;
      }
      if (space == 0) return flagcxSuccess;
    }
    // A large send goes into the ring with non-temporal stores: its lines are
    // not in this core's cache anyway, and the other core read them last; an
    // ordinary store first fetches each line from there, which on this VM
    // was sometimes 5-10x slower; off by default (docs/DECISIONS.md).
    static const uint64_t streamMin = static_cast<uint64_t>(paramInt(Param::SHM_STREAM_BYTES));
    bool stream = false;
    if (streamMin > 0) {  // off by default: no extra pass over the iovecs then
      uint64_t want = 0;
      for (int i = 0; i < iovcnt; i++) want += iov[i].iov_len;
      stream = want >= streamMin;
    }
    size_t total = 0;
    for (int i = 0; i < iovcnt && space > 0; i++) {
      const char *src = static_cast<const char *>(iov[i].iov_base);
      uint64_t left = iov[i].iov_len;
      while (left > 0 && space > 0) {
        uint64_t pos = txTail_ % ringSize_;
        uint64_t n = std::min({left, space, ringSize_ - pos, kChunk});
        if (stream) copyBytesStreaming(txData_ + pos, src, n);
        else copyBytes(txData_ + pos, src, n);
        src += n;
        left -= n;
        space -= n;
        total += n;
        txTail_ += n;
        tx_->tail.store(txTail_, std::memory_order_release);
        if (space == 0) {  // the consumer may have freed room meanwhile
          txHead_ = tx_->head.load(std::memory_order_acquire);
          if (txHead_ > txTail_ || txTail_ - txHead_ > ringSize_) return corrupt("send", txHead_, txTail_);
          space = ringSize_ - (txTail_ - txHead_);
        }
      }
      if (left > 0) break;
    }
    *moved = total;
    return flagcxSuccess;
  }

  flagcxResult_t read(void *dst, size_t want, size_t *moved, bool *closed) override {
    *moved = 0;
    *closed = false;
    uint64_t avail = rxTail_ - rxHead_;
    if (avail == 0) {
      // Read the flag before the counter: a producer sets it after its last
      // tail store, so "closed and still empty" means nothing more will come.
      bool gone = rx_->producerClosed.load(std::memory_order_acquire) != 0;
      rxTail_ = rx_->tail.load(std::memory_order_acquire);
      if (rxTail_ < rxHead_ || rxTail_ - rxHead_ > ringSize_) return corrupt("receive", rxHead_, rxTail_);
      avail = rxTail_ - rxHead_;
      if (avail == 0) {
        *closed = gone;
        return flagcxSuccess;
      }
    }
    char *out = static_cast<char *>(dst);
    uint64_t left = want;
    while (left > 0 && avail > 0) {
      uint64_t pos = rxHead_ % ringSize_;
      uint64_t n = std::min({left, avail, ringSize_ - pos, kChunk});
      copyBytes(out, rxData_ + pos, n);
      out += n;
      left -= n;
      avail -= n;
      rxHead_ += n;
      rx_->head.store(rxHead_, std::memory_order_release);
      if (avail == 0 && left > 0) {
        rxTail_ = rx_->tail.load(std::memory_order_acquire);
        if (rxTail_ < rxHead_ || rxTail_ - rxHead_ > ringSize_) return corrupt("receive", rxHead_, rxTail_);
        avail = rxTail_ - rxHead_;
      }
    }
    *moved = want - left;
    return flagcxSuccess;
  }

  void describePull(const void *buf, size_t len, uint8_t *note) override {
    const SharedMemOps *ops = sharedMemOps();
    SharedNote sn{};
    if (!ops || !ops->ref(buf, len, &sn.ref)) return;
    sn.kind = kSharedNote;
    sn.frees = ops->frees();
    memcpy(note, &sn, sizeof sn);
  }

  flagcxResult_t pull(void *dst, const PullNote &note, uint64_t offset, size_t n) override {
    if (offset == 0) pullNo_++;  // one stamp per message for the mappings
    if (const char *src = mappedSource(note, offset, n)) {
      copyBytes(dst, src, n);
      if (offset == 0) g_mappedPulls.fetch_add(1, std::memory_order_relaxed);
      return flagcxSuccess;
    }
    const uint64_t remote = note.addr + offset;
    size_t done = 0;
    while (done < n) {
      iovec local{static_cast<char *>(dst) + done, n - done};
      iovec far{reinterpret_cast<void *>(remote + done), n - done};
      ssize_t got = process_vm_readv(caps_.peerPid, &local, 1, &far, 1, 0);
      if (got <= 0) {
        WARN(kShm, "shm rank %d: reading %zu bytes from peer %d (pid %d) failed: %s", desc_.self,
             n - done, desc_.peer, static_cast<int>(caps_.peerPid), got == 0 ? "nothing read" : strerror(errno));
        return flagcxRemoteError;
      }
      done += static_cast<size_t>(got);
    }
    return flagcxSuccess;
  }
  void ackPull() override { rx_->pulls.fetch_add(1, std::memory_order_release); }
  uint64_t pullsAcked() override { return tx_->pulls.load(std::memory_order_acquire); }

  flagcxResult_t idleCheck() override {
    if (processGone(caps_.peerPid)) {
      WARN(kShm, "shm rank %d: peer %d (pid %d on %s) channel %d has died", desc_.self, desc_.peer,
           static_cast<int>(caps_.peerPid), desc_.host.c_str(), desc_.channel);
      return flagcxRemoteError;
    }
    return flagcxSuccess;
  }

 private:
  flagcxResult_t corrupt(const char *dir, uint64_t head, uint64_t tail) {
    WARN(kShm, "shm rank %d: %s ring shared with peer %d channel %d is corrupt (head %" PRIu64 ", tail %" PRIu64 ", size %" PRIu64 ")",
         desc_.self, dir, desc_.peer, desc_.channel, head, tail, ringSize_);
    return flagcxRemoteError;
  }

  // The peer's bytes [offset, offset+n) of the announced buffer in a mapping
  // of its allocation, or nullptr: process_vm_readv then.  The note comes
  // from the peer: its fd is looked up in the proven peer's process (never
  // the pid the note names), and the bytes stay inside the allocation
  // (shareMap checks the file's identity, seals and length).
  const char *mappedSource(const PullNote &note, uint64_t offset, size_t n) {
    SharedNote sn;
    memcpy(&sn, note.pipe, sizeof sn);
    if (sn.kind != kSharedNote || mapsOff_ || caps_.peerPid <= 0 || sn.ref.offset > sn.ref.mapLen ||
        offset > sn.ref.mapLen - sn.ref.offset || n > sn.ref.mapLen - sn.ref.offset - offset)
      return nullptr;
    sn.ref.pid = caps_.peerPid;
    char *base = maps_.get(sn.ref, pullNo_);
    if (!base) {
      INFO(kShm, "shm rank %d: cannot map peer %d's buffer; reading its memory with "
           "process_vm_readv from now on", desc_.self, desc_.peer);
      mapsOff_ = true;
      return nullptr;
    }
    maps_.dropStale(sn.frees, pullNo_, kMaxPeerMaps);
    return base + sn.ref.offset + offset;
  }

  bool handedOver_ = false;  // handOver: the rings are a child's now
  PeerMaps maps_;        // the peer's allocations, stamped with pullNo_
  uint64_t pullNo_ = 0;  // messages pulled so far
  bool mapsOff_ = false;  // a mapping failed once: process_vm_readv only
  PeerDesc desc_;
  std::shared_ptr<Segment> txSeg_, rxSeg_;
  RingCtl *tx_, *rx_;
  char *txData_, *rxData_;
  const uint64_t ringSize_;  // both directions
  // Local copies of our own counter and cached copies of the peer's.
  uint64_t txTail_, txHead_, rxHead_, rxTail_;
};

// A rank killed inside the short window between creating its segment and
// unlinking it (during connectAll) leaves a name behind; the next set-up on
// this host removes names whose creator (pid and PID namespace in the name)
// is gone.  Names from other namespaces are left alone: their pids mean
// nothing here.
void removeOrphans(unsigned ns) {
  DIR *d = opendir("/dev/shm");
  if (d == nullptr) return;
  while (dirent *e = readdir(d)) {
    int pid = 0;
    unsigned theirNs = 0;
    if (sscanf(e->d_name, "flagcx-shm-%d-%x-", &pid, &theirNs) != 2 || pid <= 0 || theirNs != ns)
      continue;
    if (!processGone(pid)) continue;
    std::string name = std::string("/") + e->d_name;
    if (shm_unlink(name.c_str()) == 0)
      INFO(kShm, "shm: removed %s, left by a process that died during set-up", name.c_str());
  }
  closedir(d);
}

struct NameMsg {
  uint64_t magic;
  uint64_t ringBytes;
  int32_t nchannels;
  int32_t pad;
  char name[64];
};

struct Peer {
  int rank;
  std::shared_ptr<Segment> mine;    // rings I receive on
  std::shared_ptr<Segment> theirs;  // rings I send on
  NameMsg msg{};
  pid_t pid = 0;
};

RingCtl *ringAt(Segment &s, int channel, uint64_t ringBytes) {
  return reinterpret_cast<RingCtl *>(s.base() + static_cast<size_t>(channel) * (kCtlBytes + ringBytes));
}

// What one connectAll agrees on with every peer: each segment holds
// `nchannels` rings of `ringBytes` each, behind their control pages.
struct RingShape {
  int nchannels;
  uint64_t ringBytes;
  size_t segBytes() const { return static_cast<size_t>(nchannels) * (kCtlBytes + ringBytes); }
};

// Step 1, for one peer: create the segment this rank receives on from p,
// make its rings empty and owned by this process, and send p its name.
flagcxResult_t offerRings(Bootstrap &bs, const RingShape &sh, unsigned ns, Peer &p) {
  static std::atomic<uint32_t> counter{0};
  uint32_t rnd;
  randomBytes(&rnd, sizeof rnd);
  char name[64];
  snprintf(name, sizeof name, "/flagcx-shm-%d-%x-%d-%u-%08x", static_cast<int>(getpid()), ns,
           p.rank, counter.fetch_add(1), rnd);
  FLAGCX_CHECK(Segment::create(name, sh.segBytes(), &p.mine));
  for (int c = 0; c < sh.nchannels; c++) {
    RingCtl *r = ringAt(*p.mine, c, sh.ringBytes);
    r->tail.store(0, std::memory_order_relaxed);
    r->head.store(0, std::memory_order_relaxed);
    r->magic = kRingMagic;
    r->size = sh.ringBytes;
    r->consumerPid.store(getpid(), std::memory_order_relaxed);
    r->producerPid.store(0, std::memory_order_relaxed);
    r->producerClosed.store(0, std::memory_order_relaxed);
    r->ownerMagicAddr = reinterpret_cast<uint64_t>(&r->magic);
    r->pullOk.store(0, std::memory_order_relaxed);
    r->pulls.store(0, std::memory_order_relaxed);
    r->consumerClosed.store(0, std::memory_order_release);
  }
  NameMsg m{};
  m.magic = kRingMagic;
  m.ringBytes = sh.ringBytes;
  m.nchannels = sh.nchannels;
  snprintf(m.name, sizeof m.name, "%s", name);
  return bs.send(p.rank, kTagName, &m, sizeof m);
}

// Can this process read the memory of process `pid` (same user, no ptrace
// lock-down)?  Probed by reading the magic of the ring `r` it owns.  Then
// the peer's large messages to this rank go single-copy (FLAGCX_SHM_PULL).
// The answer can differ per direction (one rank non-dumpable, or Yama's
// ptrace_scope=1 and one rank an ancestor of the other).
bool canReadPeer(pid_t pid, const RingCtl *r) {
  uint64_t probe = 0;
  iovec local{&probe, sizeof probe};
  iovec far{reinterpret_cast<void *>(r->ownerMagicAddr), sizeof probe};
  return paramInt(Param::SHM_PULL) != 0 && pid > 0 &&
         process_vm_readv(pid, &local, 1, &far, 1, 0) == sizeof probe && probe == kRingMagic;
}

// Step 2, for one peer: check what p offered (p.msg), map its segment, and
// register as the producer of its rings.  Whether this rank pulls p's large
// messages goes into the ring it receives on, whose producer (p) reads it
// after the acknowledgements.
flagcxResult_t openRings(const RingShape &sh, int me, Peer &p) {
  if (p.msg.magic != kRingMagic || p.msg.nchannels != sh.nchannels ||
      p.msg.ringBytes != sh.ringBytes || strncmp(p.msg.name, "/flagcx-shm-", 12) != 0) {
    WARN(kShm, "shm connectAll: rank %d and peer %d disagree (channels %d/%d, ring bytes %" PRIu64 "/%" PRIu64 "); set FLAGCX_SHM_BUFFER_SIZE alike on every rank",
         me, p.rank, sh.nchannels, p.msg.nchannels, sh.ringBytes, p.msg.ringBytes);
    return flagcxInvalidUsage;
  }
  FLAGCX_CHECK(Segment::open(p.msg.name, sh.segBytes(), &p.theirs));
  for (int c = 0; c < sh.nchannels; c++) {
    RingCtl *r = ringAt(*p.theirs, c, sh.ringBytes);
    if (r->magic != kRingMagic || r->size != sh.ringBytes) {
      WARN(kShm, "shm connectAll: peer %d's segment %s is not a ring", p.rank, p.msg.name);
      return flagcxRemoteError;
    }
    r->producerPid.store(getpid(), std::memory_order_release);
    bool ok = canReadPeer(p.pid, r);
    ringAt(*p.mine, c, sh.ringBytes)->pullOk.store(ok ? 1 : 0, std::memory_order_release);
  }
  return flagcxSuccess;
}

// Steps 2 and 3 for every peer: open each peer's rings, always acknowledging
// (so that no peer waits for an answer that never comes), then collect the
// peers' acknowledgements and unlink this rank's names.  The first failure.
flagcxResult_t mapPeers(Bootstrap &bs, const RingShape &sh, const std::vector<pid_t> &proven,
                        std::vector<Peer> &ps) {
  const int me = bs.rank();
  flagcxResult_t status = flagcxSuccess;
  for (size_t i = 0; i < ps.size(); i++) {
    Peer &p = ps[i];
    FLAGCX_CHECK(bs.recv(p.rank, kTagName, &p.msg, sizeof p.msg));
    p.msg.name[sizeof p.msg.name - 1] = 0;
    p.pid = proven[i];  // 0: unproven (see the top)
    flagcxResult_t rc = openRings(sh, me, p);
    if (rc != flagcxSuccess && status == flagcxSuccess) status = rc;
    if (p.pid == 0)
      INFO(kShm, "shm: rank %d: peer %d's process is not proven by the kernel (another network "
           "or PID namespace?); no pid liveness check, no single-copy pull", me, p.rank);
    int32_t ack = rc == flagcxSuccess ? 1 : 0;
    FLAGCX_CHECK(bs.send(p.rank, kTagAck, &ack, sizeof ack));
  }
  // Both sides mapped: the names are no longer needed.
  for (Peer &p : ps) {
    int32_t ack = 0;
    FLAGCX_CHECK(bs.recv(p.rank, kTagAck, &ack, sizeof ack));
    p.mine->unlink();
    if (ack != 1) {
      WARN(kShm, "shm connectAll: rank %d: peer %d could not map this rank's rings", me, p.rank);
      if (status == flagcxSuccess) status = flagcxRemoteError;
    }
  }
  return status;
}

class ShmTransport final : public Transport {
 public:
  const char *name() const override { return "shm"; }

  flagcxResult_t connectAll(Bootstrap &bs, const std::vector<int> &peers, int nchannels,
                            std::vector<std::unique_ptr<Conn>> *out) override {
    out->clear();
    if (nchannels < 1 || nchannels > 64) {
      WARN(kShm, "shm connectAll: %d channels requested (1..64 supported)", nchannels);
      return flagcxInvalidArgument;
    }
    const RingShape sh{nchannels, ringBytesNow()};
    const int me = bs.rank();
    const unsigned myNs = pidNamespaceId();
    removeOrphans(myNs);
    if (peers.empty()) return flagcxSuccess;

    std::vector<Peer> ps(peers.size());
    // 1. Create the rings this rank receives on and tell each peer their name.
    for (size_t i = 0; i < peers.size(); i++) {
      Peer &p = ps[i];
      p.rank = peers[i];
      if (p.rank < 0 || p.rank >= bs.nranks() || p.rank == me) {
        WARN(kShm, "shm connectAll: rank %d cannot connect to peer %d (nranks %d)", me, p.rank,
             bs.nranks());
        return flagcxInvalidArgument;
      }
      FLAGCX_CHECK(offerRings(bs, sh, myNs, p));
    }
    // Who each peer is (the segments exist first: a peer that never comes
    // leaves a name the next set-up on this host removes).
    std::vector<pid_t> proven;
    FLAGCX_CHECK(provePeers(bs, peers, &proven));
    FLAGCX_CHECK(mapPeers(bs, sh, proven, ps));
    for (Peer &p : ps) addConns(bs, sh, p, out);
    INFO(kShm, "shm: rank %d connected to %zu peer(s), %d channel(s), %" PRIu64 "-byte rings", me,
         ps.size(), nchannels, sh.ringBytes);
    return flagcxSuccess;
  }

  bool adoptable(Conn &old) const override { return pipeOf(old) != nullptr; }
  std::unique_ptr<Conn> adopt(Conn &old, int self, int peer) override {
    ShmPipe *p = pipeOf(old);
    if (!p) return nullptr;
    std::unique_ptr<ShmPipe> fresh = p->handOver(self, peer);
    PeerDesc d = fresh->desc();
    std::vector<std::unique_ptr<Pipe>> lanes;
    lanes.push_back(std::move(fresh));
    g_adopted.fetch_add(1, std::memory_order_relaxed);
    return std::make_unique<FramedConn>("shm", d, std::move(lanes), reduce_);
  }

 private:
  // The rings' size FLAGCX_SHM_BUFFER_SIZE asks for.
  static uint64_t ringBytesNow() {
    int64_t want = paramInt(Param::SHM_BUFFER_SIZE);
    uint64_t ringBytes = static_cast<uint64_t>(std::clamp<int64_t>(want, 64 << 10, int64_t{1} << 30));
    return (ringBytes + 4095) & ~uint64_t{4095};
  }
  // The one pipe of a Conn this transport made with rings of today's size.
  static ShmPipe *pipeOf(Conn &c) {
    auto *fc = dynamic_cast<FramedConn *>(&c);
    if (!fc || fc->laneCount() != 1) return nullptr;
    auto *p = dynamic_cast<ShmPipe *>(fc->lanePipe(0));
    return p && p->ringBytes() == ringBytesNow() ? p : nullptr;
  }

  // One Conn per channel to a mapped peer.
  void addConns(Bootstrap &bs, const RingShape &sh, Peer &p,
                std::vector<std::unique_ptr<Conn>> *out) const {
    for (int c = 0; c < sh.nchannels; c++) {
      PeerDesc d;
      d.self = bs.rank();
      d.peer = p.rank;
      d.channel = c;
      d.host = bs.peers().size() > static_cast<size_t>(p.rank) ? bs.peers()[p.rank].host : "?";
      std::vector<std::unique_ptr<Pipe>> lanes;
      RingCtl *tx = ringAt(*p.theirs, c, sh.ringBytes);
      // tx->pullOk: whether the peer can read this rank's memory (its probe).
      lanes.push_back(std::make_unique<ShmPipe>(d, p.pid, p.theirs, tx, p.mine,
                                                ringAt(*p.mine, c, sh.ringBytes), sh.ringBytes,
                                                tx->pullOk.load(std::memory_order_acquire) != 0));
      out->push_back(std::make_unique<FramedConn>("shm", d, std::move(lanes), reduce_));
    }
  }
};

}  // namespace

uint64_t shmMappedPulls() { return g_mappedPulls.load(std::memory_order_relaxed); }
uint64_t shmAdoptedConns() { return g_adopted.load(std::memory_order_relaxed); }

std::unique_ptr<Transport> makeShmTransport() { return std::make_unique<ShmTransport>(); }

}  // namespace flagcx
