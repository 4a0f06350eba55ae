// One lane of a P2P connection: the initiator's worker thread sends each
// job as one request and waits for its answer; the target's service thread
// checks every request against its engine's registered regions (out of
// range: the request fails and nothing is written) and moves the bytes —
// through the socket, or by cross-memory attach (process_vm_readv/writev)
// when both ends are on one host and the kernel allows it.
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <climits>
#include <cstring>

#include "adapters/device/adapter.h"
#include "base/log.h"
#include "p2p/p2p_internal.h"

using namespace flagcx;
using namespace flagcx::p2p;

namespace {

constexpr size_t kMaxSend = 1ull << 32;  // a Send/Recv message, at most
constexpr int kIovBatch = 512;           // below IOV_MAX (1024)

uint64_t g_cookie = 0;  // read by peers' CMA probes

// Vectored exact-length I/O with a deadline; false when the peer is gone or
// the deadline passed.
bool ioVec(int fd, std::vector<iovec> iov, bool out, Clock::time_point dl) {
  size_t first = 0;
  while (first < iov.size()) {
    if (iov[first].iov_len == 0) {
      first++;
      continue;
    }
    msghdr m{};
    m.msg_iov = &iov[first];
    m.msg_iovlen = std::min<size_t>(iov.size() - first, kIovBatch);
    ssize_t n = out ? sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(fd, &m, MSG_DONTWAIT);
    if (n > 0) {
      size_t left = static_cast<size_t>(n);
      while (left > 0) {
        size_t take = std::min(left, iov[first].iov_len);
        iov[first].iov_base = static_cast<char *>(iov[first].iov_base) + take;
        iov[first].iov_len -= take;
        left -= take;
        if (iov[first].iov_len == 0) first++;
      }
      continue;
    }
    if (n == 0 && !out) return false;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    auto now = Clock::now();
    if (now >= dl) return false;
    pollfd p{fd, static_cast<short>(out ? POLLOUT : POLLIN), 0};
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(dl - now).count();
    poll(&p, 1, static_cast<int>(std::min<long long>(ms + 1, 1000)));
  }
  return true;
}

bool io1(int fd, void *p, size_t n, bool out, Clock::time_point dl) {
  return ioVec(fd, {iovec{p, n}}, out, dl);
}

bool drain(int fd, uint64_t bytes, Clock::time_point dl) {
  std::vector<char> sink(std::min<uint64_t>(bytes, 1 << 20));
  while (bytes > 0) {
    size_t n = std::min<uint64_t>(bytes, sink.size());
    if (!io1(fd, sink.data(), n, false, dl)) return false;
    bytes -= n;
  }
  return true;
}

// Cross-memory attach of a whole list: local[i] <-> remote[i] in `pid`.
bool cmaMove(pid_t pid, const std::vector<iovec> &local, const std::vector<iovec> &remote,
             bool write) {
  if (pid == getpid()) {
    for (size_t i = 0; i < local.size(); i++)
      write ? memcpy(remote[i].iov_base, local[i].iov_base, local[i].iov_len)
            : memcpy(local[i].iov_base, remote[i].iov_base, local[i].iov_len);
    return true;
  }
  // Up to kIovBatch pieces per call.  The kernel moves at most about 2 GiB
  // per call, and stops early at a fault: go on after a short count; a
  // fault then reports itself on the next call.
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

// Host bytes for a list that touches device memory: one staging buffer.
struct Staging {
  std::vector<char> buf;
  std::vector<iovec> iov;  // into buf, one per segment
  void make(const std::vector<iovec> &real) {
    size_t total = 0;
    for (auto &v : real) total += v.iov_len;
    buf.resize(total);
    iov.clear();
    size_t off = 0;
    for (auto &v : real) {
      iov.push_back(iovec{buf.data() + off, v.iov_len});
      off += v.iov_len;
    }
  }
  // device/host -> staging, or staging -> device/host
  bool copy(const std::vector<iovec> &real, bool toStaging) {
    DeviceAdapter *dev = deviceAdapter();
    for (size_t i = 0; i < real.size(); i++) {
      void *d = toStaging ? iov[i].iov_base : real[i].iov_base;
      const void *s = toStaging ? real[i].iov_base : iov[i].iov_base;
      if (dev) {
        if (dev->copy(d, s, real[i].iov_len, nullptr) != flagcxSuccess) return false;
      } else {
        memcpy(d, s, real[i].iov_len);
      }
    }
    return true;
  }
};

// ---- target --------------------------------------------------------------

bool reply(int fd, int32_t status, uint64_t bytes, Clock::time_point dl) {
  RespHdr r{kRespMagic, status, bytes};
  return io1(fd, &r, sizeof(r), true, dl);
}

// One request on an incoming lane; false when the lane is finished.
bool serveOne(FlagcxP2pConn *c, Lane *l, const ReqHdr &h, Clock::time_point dl) {
  FlagcxP2pEngine *e = c->engine;
  int fd = l->fd;
  Op op = static_cast<Op>(h.op);
  if (h.magic != kReqMagic || h.nseg > kMaxSegsPerReq) {
    connMarkDead(c, "a malformed request arrived (not a flagcx P2P peer?)");
    return false;
  }
  if (op == Op::Notif || op == Op::Send) {
    if (h.nseg != 0 || h.bytes > kMaxSend ||
        (op == Op::Notif && h.bytes != sizeof(FlagcxP2pNotifyMsg))) {
      connMarkDead(c, "a malformed notification or message arrived");
      return false;
    }
    std::vector<char> data(h.bytes);
    if (!io1(fd, data.data(), data.size(), false, dl)) return false;
    // Answer first: once the receiver sees it, it may close the engine.
    if (!reply(fd, kOk, 0, dl)) return false;
    if (op == Op::Notif) {
      FlagcxP2pNotifyMsg m;
      memcpy(&m, data.data(), sizeof(m));
      pushNotif(m);
    } else {
      std::lock_guard<std::mutex> lk(c->recvMu);
      c->recvQ.push_back(RecvMsg{std::move(data)});
      c->recvCv.notify_all();
    }
    return true;
  }
  if (op == Op::Bye) {
    connMarkDead(c, "the peer closed the connection", true);
    return false;
  }
  if (op == Op::Table) {
    std::vector<WireRegion> t = regionTable(e);
    return reply(fd, kOk, t.size() * sizeof(WireRegion), dl) &&
           (t.empty() || io1(fd, t.data(), t.size() * sizeof(WireRegion), true, dl));
  }
  if (op != Op::Write && op != Op::Read) {
    connMarkDead(c, "a request with an unknown operation arrived");
    return false;
  }
  std::vector<WireSeg> segs(h.nseg);
  if (h.nseg && !io1(fd, segs.data(), segs.size() * sizeof(WireSeg), false, dl)) return false;
  uint64_t sum = 0;
  for (auto &s : segs) sum += s.len;
  if (sum != h.bytes || (h.cma && !c->cmaIn)) {
    connMarkDead(c, "a request's segments do not add up (or ask for CMA not agreed)");
    return false;
  }
  bool payload = op == Op::Write && !h.cma;
  // Every access is checked, and the bytes moved, under the engine's region
  // lock: a region cannot go while its bytes are being written.
  std::shared_lock<std::shared_mutex> lk(e->mrMu);
  std::vector<iovec> mine, theirs;
  bool device = false;
  for (auto &s : segs) {
    // A peer's piece names its region's key: 0 (findRegion's "any key")
    // never matches, as on the verbs path.
    const Region *r = s.rkey ? findRegion(e, s.remote, s.len, s.rkey) : nullptr;
    if (!r) {
      lk.unlock();
      INFO(kP2P, "P2P: refused a %s of [0x%lx, +%lu) from %s: not inside a registered region "
                 "(or the region was deregistered)", op == Op::Write ? "write" : "read",
           static_cast<unsigned long>(s.remote), static_cast<unsigned long>(s.len),
           c->peerHost.c_str());
      if (payload && !drain(fd, h.bytes, dl)) return false;
      return reply(fd, kRange, 0, dl);
    }
    device |= r->device;
    mine.push_back(iovec{reinterpret_cast<void *>(s.remote), s.len});
    theirs.push_back(iovec{reinterpret_cast<void *>(s.local), s.len});
  }
  Staging st;
  if (device) st.make(mine);
  const std::vector<iovec> &hostSide = device ? st.iov : mine;
  bool ok = true;
  if (op == Op::Write) {
    ok = h.cma ? cmaMove(c->remotePid, hostSide, theirs, false)
               : ioVec(fd, hostSide, false, dl);
    if (!h.cma && !ok) return false;  // the stream is lost
    if (ok && device) ok = st.copy(mine, false);
    lk.unlock();
    return reply(fd, ok ? kOk : kIo, 0, dl);
  }
  if (device) ok = st.copy(mine, true);
  if (h.cma) {
    ok = ok && cmaMove(c->remotePid, hostSide, theirs, true);
    lk.unlock();
    return reply(fd, ok ? kOk : kIo, 0, dl);
  }
  if (!ok) return reply(fd, kIo, 0, dl);
  return reply(fd, kOk, h.bytes, dl) && ioVec(fd, hostSide, true, dl);
}

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

// ---- initiator -----------------------------------------------------------

void failOnce(Xfer &x, const char *what, FlagcxP2pConn *c) {
  if (x.logged.exchange(true)) return;  // one line per transfer
  WARN(kP2P, "P2P: transfer %lu to %s failed: %s", static_cast<unsigned long>(x.id),
       c->peerHost.c_str(), what);
}

// Run one job; false with *why set when it failed.  *lost: the lane is
// unusable afterwards.
bool runJob(FlagcxP2pConn *c, Lane *l, Job &j, const char **why, bool *lost) {
  int fd = l->fd;
  auto dl = deadlineFromTimeout();
  *lost = true;
  *why = "the peer is gone or did not answer within FLAGCX_TIMEOUT";
  ReqHdr h{kReqMagic, static_cast<uint8_t>(j.op), 0, 0, 0, 0, 0};
  if (j.op == Op::Notif || j.op == Op::Send) {
    h.bytes = j.data.size();
    if (!io1(fd, &h, sizeof(h), true, dl) || !io1(fd, j.data.data(), j.data.size(), true, dl))
      return false;
  } else if (j.op == Op::Table) {
    if (!io1(fd, &h, sizeof(h), true, dl)) return false;
  } else {
    std::vector<WireSeg> ws;
    std::vector<iovec> local;
    for (auto &s : j.segs) {
      ws.push_back(WireSeg{s.local, s.remote, s.len, s.rkey, 0});
      local.push_back(iovec{reinterpret_cast<void *>(s.local), s.len});
      h.bytes += s.len;
    }
    h.nseg = static_cast<uint32_t>(ws.size());
    bool device = j.xfer->localDevice;
    h.cma = c->cmaOut && !device;
    Staging st;
    if (device) {
      st.make(local);
      if (j.op == Op::Write && !st.copy(local, true)) {
        *lost = false;
        *why = "copying the device source to host staging failed";
        return false;
      }
    }
    const std::vector<iovec> &hostSide = device ? st.iov : local;
    std::vector<iovec> out{iovec{&h, sizeof(h)}, iovec{ws.data(), ws.size() * sizeof(WireSeg)}};
    if (j.op == Op::Write && !h.cma) out.insert(out.end(), hostSide.begin(), hostSide.end());
    if (!ioVec(fd, out, true, dl)) return false;
    RespHdr r{};
    if (!io1(fd, &r, sizeof(r), false, dl) || r.magic != kRespMagic) return false;
    *lost = false;
    if (r.status == kRange) {
      *why = "the remote range is not inside a region registered at the target (or that region "
             "was deregistered)";
      return false;
    }
    if (r.status != kOk) {
      *why = "the target could not move the bytes";
      return false;
    }
    if (j.op == Op::Read && !h.cma) {
      *lost = true;
      if (r.bytes != h.bytes || !ioVec(fd, hostSide, false, dl)) return false;
      *lost = false;
    }
    if (j.op == Op::Read && device && !st.copy(local, false)) {
      *why = "copying host staging to the device destination failed";
      return false;
    }
    return true;
  }
  RespHdr r{};
  if (!io1(fd, &r, sizeof(r), false, dl) || r.magic != kRespMagic) return false;
  *lost = false;
  if (r.status != kOk) {
    *why = "the target refused the request";
    return false;
  }
  if (j.op == Op::Table) {
    if (r.bytes % sizeof(WireRegion) || r.bytes / sizeof(WireRegion) > kMaxRegions) {
      *lost = true;
      return false;
    }
    std::vector<WireRegion> t(r.bytes / sizeof(WireRegion));
    if (!t.empty() && !io1(fd, t.data(), r.bytes, false, dl)) {
      *lost = true;
      return false;
    }
    std::lock_guard<std::mutex> lk(c->regionMu);
    c->remoteRegions.swap(t);
  }
  return true;
}

void workerLoop(FlagcxP2pConn *c, Lane *l) {
  while (true) {
    Job j;
    {
      std::unique_lock<std::mutex> lk(l->mu);
      l->cv.wait(lk, [&] { return l->stop || !l->q.empty(); });
      if (l->q.empty()) break;
      j = std::move(l->q.front());
      l->q.pop_front();
    }
    if (j.op == Op::Bye) {  // best effort, no answer
      ReqHdr h{kReqMagic, static_cast<uint8_t>(Op::Bye), 0, 0, 0, 0, 0};
      if (!c->dead.load())
        io1(l->fd, &h, sizeof(h), true, Clock::now() + std::chrono::milliseconds(500));
      continue;
    }
    const char *why = "the connection has failed";
    bool lost = false;
    bool ok = !c->dead.load() && !l->stop && runJob(c, l, j, &why, &lost);
    // The transfer's line says why; the connection is marked without another.
    if (!ok && lost) connMarkDead(c, why, true);
    finish(c, j, ok, why);
  }
}

}  // namespace

namespace flagcx::p2p {

void finish(FlagcxP2pConn *c, Job &j, bool ok, const char *why) {
  if (!ok) {
    failOnce(*j.xfer, why, c);
    j.xfer->task.failedCount.fetch_add(1, std::memory_order_release);
  }
  j.xfer->task.doneSliceCount.fetch_add(1, std::memory_order_release);
  if (j.xfer->task.isAllDone()) {
    std::lock_guard<std::mutex> lk(c->doneMu);
    c->doneCv.notify_all();
  }
}

uint64_t cmaCookieAddr() { return reinterpret_cast<uint64_t>(&g_cookie); }

uint64_t cmaCookie() {
  static std::once_flag once;
  std::call_once(once, [] {
    uint64_t v = 0;
    while (v == 0) randomBytes(&v, sizeof(v));
    g_cookie = v;
  });
  return g_cookie;
}

bool cmaProbe(pid_t pid, uint64_t addr, uint64_t want) {
  uint64_t got = 0;
  iovec l{&got, sizeof(got)}, r{reinterpret_cast<void *>(addr), sizeof(got)};
  if (pid == getpid()) return true;
  ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
  if (n != static_cast<ssize_t>(sizeof(got)) || got != want) {
    INFO(kP2P, "P2P: cross-memory attach to pid %d is not permitted (%s); bytes go through TCP",
         pid, n < 0 ? strerror(errno) : "cookie differs");
    return false;
  }
  return true;
}

void startLane(FlagcxP2pConn *c, Lane *l) {
  l->th = l->initiator ? std::thread(workerLoop, c, l) : std::thread(serviceLoop, c, l);
}

void sayBye(FlagcxP2pConn *c) {
  for (auto &l : c->out) {
    std::lock_guard<std::mutex> lk(l->mu);
    if (l->stop || c->dead.load()) continue;
    l->q.push_back(Job{std::make_shared<Xfer>(), Op::Bye, {}, {}});
    l->cv.notify_one();
  }
}

void stopLane(Lane *l) {
  {
    std::lock_guard<std::mutex> lk(l->mu);
    l->stop = true;
  }
  l->cv.notify_all();
  // A worker ends its request in flight (within FLAGCX_TIMEOUT), fails what
  // is queued and sends the goodbye; a service thread is woken now.
  if (!l->initiator && l->fd >= 0) shutdown(l->fd, SHUT_RDWR);
  if (l->th.joinable()) l->th.join();
  if (l->fd >= 0) {
    shutdown(l->fd, SHUT_RDWR);
    close(l->fd);
  }
  l->fd = -1;
}

bool postJob(FlagcxP2pConn *c, Lane *l, Job &&job) {
  {
    std::lock_guard<std::mutex> lk(l->mu);
    if (!l->stop && !c->dead.load()) {
      l->q.push_back(std::move(job));
      l->cv.notify_one();
      return true;
    }
  }
  finish(c, job, false, "the connection has failed");
  return false;
}

}  // namespace flagcx::p2p
