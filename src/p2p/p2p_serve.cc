// The target's side of a lane: each request is read, checked and answered
// before the next one is read.  What is checked (docs/P2P.md, "Security"):
//   - the frame: magic, operation, segment count, lengths adding up to the
//     header's (without wrapping), CMA only where the handshake agreed;
//   - every remote piece lies inside ONE region of this engine, with that
//     region's key, offset and length overflow-safe (findRegion);
//   - CMA moves the peer's own bytes only: its pid comes from the kernel
//     (SO_PEERCRED at the local door), the process must still be alive
//     (pidfd), and a same-process peer's addresses must lie in a region of
//     its engine;
//   - messages are allocated only within FLAGCX_P2P_RECV_QUEUE_BYTES of
//     unreceived bytes per connection; notifications within a fixed count.
// Segment lists are read as they arrive: memory grows with the bytes a
// peer really sends, never with the count its header claims.
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>

#include "base/base.h"
#include "p2p/p2p_internal.h"

using namespace flagcx;
using namespace flagcx::p2p;

namespace {

constexpr int kIovBatch = 512;          // below IOV_MAX (1024)
constexpr uint32_t kSegChunk = 4096;    // segments read per step (128 KiB)

bool reply(int fd, int32_t status, uint64_t bytes, Clock::time_point dl) {
  RespHdr r{kRespMagic, status, bytes};
  return io1(fd, &r, sizeof(r), true, dl);
}

// Has the kernel-proven peer process exited?  (Its pid could then name
// another process.)
bool cmaPeerGone(const FlagcxP2pConn *c) {
  if (c->cmaPidFd < 0) return false;
  pollfd p{c->cmaPidFd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

// Cross-memory attach of a whole list: local[i] <-> remote[i] in `pid` (our
// own pid too: the kernel then reports a bad address instead of a crash).
// Up to kIovBatch pieces per call.  The kernel moves at most about 2 GiB per
// call and stops early at a fault: go on after a short count; a fault then
// reports itself on the next call.
bool cmaMove(pid_t pid, const std::vector<iovec> &local, const std::vector<iovec> &remote,
             bool write) {
  std::vector<iovec> l(local), r(remote);
  size_t i = 0;
  while (i < l.size()) {
    if (l[i].iov_len == 0) {
      i++;
      continue;
    }
    size_t n = std::min<size_t>(kIovBatch, l.size() - i);
    ssize_t got = write ? process_vm_writev(pid, &l[i], n, &r[i], n, 0)
                        : process_vm_readv(pid, &l[i], n, &r[i], n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    for (size_t left = static_cast<size_t>(got); left > 0;) {
      size_t take = std::min(left, l[i].iov_len);
      l[i].iov_base = static_cast<char *>(l[i].iov_base) + take;
      r[i].iov_base = static_cast<char *>(r[i].iov_base) + take;
      l[i].iov_len -= take;
      r[i].iov_len -= take;
      left -= take;
      if (l[i].iov_len == 0) i++;
    }
  }
  return true;
}

bool readSegs(int fd, uint32_t n, std::vector<WireSeg> *segs, Clock::time_point dl) {
  segs->clear();
  for (uint32_t got = 0; got < n;) {
    uint32_t k = std::min(kSegChunk, n - got);
    segs->resize(got + k);
    if (!io1(fd, segs->data() + got, k * sizeof(WireSeg), false, dl)) return false;
    got += k;
  }
  return true;
}

// The pieces of a Write or Read, checked: kOk with the iovecs (ours: in a
// region; theirs: the peer's addresses), kRange (logged), or kBad: the frame
// is malformed (*why).
int32_t checkSegs(FlagcxP2pConn *c, const ReqHdr &h, const std::vector<WireSeg> &segs,
                  std::vector<iovec> *mine, std::vector<iovec> *theirs, bool *device,
                  const char **why) {
  uint64_t sum = 0;
  for (auto &s : segs) {
    if (s.len > h.bytes - sum) {
      *why = "a request's segments add up to more than its header says";
      return kBad;
    }
    sum += s.len;
  }
  if (sum != h.bytes) {
    *why = "a request's segments add up to less than its header says";
    return kBad;
  }
  if (h.cma && !c->cmaIn) {
    *why = "a request asks for cross-memory attach, which the handshake did not agree";
    return kBad;
  }
  *device = false;
  for (auto &s : segs) {
    // A peer's piece names its region's key: 0 (findRegion's "any key")
    // never matches, as on the verbs path.
    const Region *r = s.rkey ? findRegion(c->engine, s.remote, s.len, s.rkey) : nullptr;
    bool localOk = !(h.cma && c->sameProcess) || inEngineRegion(c->engine, c->peerEngineId, s.local, s.len);
    if (!r || !localOk) {
      INFO(kP2P, "P2P: refused a %s of [0x%lx, +%lu) from %s: %s",
           h.op == static_cast<uint8_t>(Op::Write) ? "write" : "read",
           static_cast<unsigned long>(r ? s.local : s.remote), static_cast<unsigned long>(s.len),
           c->peerHost.c_str(),
           r ? "its own side is not inside a region of its engine"
             : "not inside a registered region with that key (or the region was deregistered)");
      return kRange;
    }
    *device |= r->device;
    mine->push_back(iovec{reinterpret_cast<void *>(s.remote), s.len});
    theirs->push_back(iovec{reinterpret_cast<void *>(s.local), s.len});
  }
  return kOk;
}

// A Notif or Send: the payload is taken only if there is room for it.
bool serveMessage(FlagcxP2pConn *c, const ReqHdr &h, int fd, Clock::time_point dl) {
  Op op = static_cast<Op>(h.op);
  if (h.nseg != 0 || (op == Op::Notif && h.bytes != sizeof(FlagcxP2pNotifyMsg))) {
    connMarkDead(c, "a malformed notification or message arrived");
    return false;
  }
  bool room;
  const uint64_t cap = recvQueueCap();
  if (op == Op::Send) {
    std::lock_guard<std::mutex> lk(c->recvMu);
    room = !c->orphan.load() && h.bytes <= cap && c->recvBytes <= cap - h.bytes;
    if (room) c->recvBytes += h.bytes;  // reserved before the allocation
  } else {
    room = notifRoom();
  }
  if (!room) {
    WARN(kP2P, "P2P: refused a %s of %lu bytes from %s: %s", op == Op::Send ? "message" : "notification",
         static_cast<unsigned long>(h.bytes), c->peerHost.c_str(),
         op != Op::Send     ? "too many notifications wait for flagcxP2pEngineGetNotifs"
         : c->orphan.load() ? "the RPC server took the connection: nothing receives on it"
                            : "its unreceived messages would exceed FLAGCX_P2P_RECV_QUEUE_BYTES");
    return drain(fd, h.bytes, dl) && reply(fd, kFull, 0, dl);
  }
  std::vector<char> data;
  bool got = false;
  try {
    data.resize(h.bytes);
    got = io1(fd, data.data(), data.size(), false, dl);
  } catch (const std::bad_alloc &) {
    WARN(kP2P, "P2P: no memory for a message of %lu bytes from %s",
         static_cast<unsigned long>(h.bytes), c->peerHost.c_str());
  }
  if (!got) {
    if (op == Op::Send) {
      std::lock_guard<std::mutex> lk(c->recvMu);
      c->recvBytes -= h.bytes;
    }
    return false;
  }
  // Answer first: once the receiver sees it, it may close the engine.
  if (!reply(fd, kOk, 0, dl)) return false;
  if (op == Op::Notif) {
    FlagcxP2pNotifyMsg m;
    memcpy(&m, data.data(), sizeof(m));
    m.name[sizeof(m.name) - 1] = m.msg[sizeof(m.msg) - 1] = '\0';
    pushNotif(m);
  } else {
    std::lock_guard<std::mutex> lk(c->recvMu);
    if (c->orphan.load()) {  // taken by the RPC server meanwhile: kept by nobody
      c->recvBytes -= data.size();
      return true;
    }
    c->recvQ.push_back(RecvMsg{std::move(data)});
    c->recvCv.notify_all();
  }
  return true;
}

// Move the bytes of a checked Write or Read, under the region lock `lk`
// (dropped before a bare answer); false when the lane is lost.
bool moveBytes(FlagcxP2pConn *c, const ReqHdr &h, int fd, const std::vector<iovec> &mine,
               const std::vector<iovec> &theirs, bool device,
               std::shared_lock<std::shared_mutex> &lk, Clock::time_point dl) {
  Staging st;
  if (device) st.make(mine);
  const std::vector<iovec> &hostSide = device ? st.iov : mine;
  const bool write = h.op == static_cast<uint8_t>(Op::Write);
  bool ok = true;
  if (h.cma && cmaPeerGone(c)) {
    connMarkDead(c, "the peer process has exited");
    ok = false;
  }
  if (write) {
    ok = ok && (h.cma ? cmaMove(c->cmaPid, hostSide, theirs, false) : ioVec(fd, hostSide, false, dl));
    if (!h.cma && !ok) return false;  // the stream is lost
    if (ok && device) ok = st.copy(mine, false);
    lk.unlock();
    return reply(fd, ok ? kOk : kIo, 0, dl);
  }
  if (device) ok = ok && st.copy(mine, true);
  if (h.cma) {
    ok = ok && cmaMove(c->cmaPid, hostSide, theirs, true);
    lk.unlock();
    return reply(fd, ok ? kOk : kIo, 0, dl);
  }
  if (!ok) {
    lk.unlock();
    return reply(fd, kIo, 0, dl);
  }
  return reply(fd, kOk, h.bytes, dl) && ioVec(fd, hostSide, true, dl);
}

bool serveReadWrite(FlagcxP2pConn *c, const ReqHdr &h, int fd, Clock::time_point dl) {
  std::vector<WireSeg> segs;
  if (!readSegs(fd, h.nseg, &segs, dl)) return false;
  const bool payload = h.op == static_cast<uint8_t>(Op::Write) && !h.cma;
  // Every access is checked, and the bytes moved, under the engine's region
  // lock: a region cannot go while its bytes are being written.
  std::shared_lock<std::shared_mutex> lk(c->engine->mrMu);
  std::vector<iovec> mine, theirs;
  bool device = false;
  const char *why = "";
  int32_t st = checkSegs(c, h, segs, &mine, &theirs, &device, &why);
  if (st == kBad) {
    connMarkDead(c, why);
    return false;
  }
  if (st != kOk) {
    lk.unlock();
    if (payload && !drain(fd, h.bytes, dl)) return false;
    return reply(fd, st, 0, dl);
  }
  return moveBytes(c, h, fd, mine, theirs, device, lk, dl);
}

// One request on an incoming lane; false when the lane is finished.
bool serveOne(FlagcxP2pConn *c, Lane *l, const ReqHdr &h, Clock::time_point dl) {
  Op op = static_cast<Op>(h.op);
  if (h.magic != kReqMagic || h.nseg > kMaxSegsPerReq) {
    connMarkDead(c, "a malformed request arrived (not a flagcx P2P peer?)");
    return false;
  }
  switch (op) {
    case Op::Notif:
    case Op::Send: return serveMessage(c, h, l->fd, dl);
    case Op::Write:
    case Op::Read: return serveReadWrite(c, h, l->fd, dl);
    case Op::Bye:
      connMarkDead(c, "the peer closed the connection", true);
      return false;
    case Op::Table: {
      if (h.nseg != 0 || h.bytes != 0) break;
      std::vector<WireRegion> t = regionTable(c->engine);
      return reply(l->fd, kOk, t.size() * sizeof(WireRegion), dl) &&
             (t.empty() || io1(l->fd, t.data(), t.size() * sizeof(WireRegion), true, dl));
    }
  }
  connMarkDead(c, "a request with an unknown operation arrived");
  return false;
}

}  // namespace

namespace flagcx::p2p {

void serviceLoop(FlagcxP2pConn *c, Lane *l) {
  while (!l->stop) {
    pollfd p{l->fd, POLLIN, 0};
    int n = poll(&p, 1, 200);
    if (n == 0 || (n < 0 && errno == EINTR)) continue;
    ReqHdr h{};
    auto dl = deadlineFromTimeout();
    if (n < 0 || !io1(l->fd, &h, sizeof(h), false, dl) || !serveOne(c, l, h, dl)) {
      if (!l->stop) connMarkDead(c, "the peer closed the connection (process gone?)");
      return;
    }
  }
}

bool cmaProbe(FlagcxP2pConn *c, pid_t pid, uint64_t addr, uint64_t want) {
  if (pid <= 0) return false;
  if (pid != getpid()) {
    uint64_t got = 0;
    iovec l{&got, sizeof(got)}, r{reinterpret_cast<void *>(addr), sizeof(got)};
    ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n != static_cast<ssize_t>(sizeof(got)) || got != want) {
      INFO(kP2P, "P2P: cross-memory attach to pid %d is not permitted (%s); bytes go through TCP",
           pid, n < 0 ? strerror(errno) : "cookie differs");
      return false;
    }
  }
  long fd = syscall(SYS_pidfd_open, pid, 0);
  c->cmaPidFd = fd >= 0 ? static_cast<int>(fd) : -1;
  return true;
}

}  // namespace flagcx::p2p
