// One lane of a P2P connection: its socket I/O, its life (start, stop, the
// goodbye), and the initiator's side: the worker thread sends each job as
// one request and waits for its answer.  The target's side, which checks
// every request, is p2p_serve.cc.
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "adapters/adapters.h"
#include "base/base.h"
#include "p2p/p2p_internal.h"

using namespace flagcx;
using namespace flagcx::p2p;

namespace {

constexpr int kIovBatch = 512;  // below IOV_MAX (1024)
uint64_t g_cookie = 0;  // read by peers' CMA probes

// ---- initiator -----------------------------------------------------------

void failOnce(Xfer &x, const char *what, FlagcxP2pConn *c) {
  if (x.logged.exchange(true)) return;  // one line per transfer
  WARN(kP2P, "P2P: transfer %lu to %s failed: %s", static_cast<unsigned long>(x.id),
       c->peerHost.c_str(), what);
}

// Send a request and read its answer's header; false: the lane is lost.
bool exchange(int fd, const std::vector<iovec> &out, RespHdr *r, Clock::time_point dl) {
  return ioVec(fd, out, true, dl) && io1(fd, r, sizeof(*r), false, dl) && r->magic == kRespMagic;
}

const char *refusal(int32_t status) {
  switch (status) {
    case kRange:
      return "the remote range is not inside a region registered at the target with that key "
             "(or that region was deregistered)";
    case kFull:
      return "the receiver holds too many unreceived messages or notifications (its "
             "FLAGCX_P2P_RECV_QUEUE_BYTES)";
    case kIo: return "the target could not move the bytes";
    default: return "the target refused the request";
  }
}

// A Write or Read: the request, the payload or the answer's bytes (over
// the socket, or moved by the target with CMA).
bool runReadWrite(FlagcxP2pConn *c, int fd, Job &j, const char **why, bool *lost,
                  Clock::time_point dl) {
  ReqHdr h{kReqMagic, static_cast<uint8_t>(j.op), 0, 0, 0, 0, 0};
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
  RespHdr r{};
  if (!exchange(fd, out, &r, dl)) return false;
  *lost = false;
  if (r.status != kOk) {
    *why = refusal(r.status);
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

// The answer to a table request: the peer's regions, sorted by base (the
// order lookups need; the target checks every access anyway).
bool takeTable(FlagcxP2pConn *c, int fd, const RespHdr &r, Clock::time_point dl) {
  if (r.bytes % sizeof(WireRegion) || r.bytes / sizeof(WireRegion) > kMaxRegions) return false;
  std::vector<WireRegion> t(r.bytes / sizeof(WireRegion));
  if (!t.empty() && !io1(fd, t.data(), r.bytes, false, dl)) return false;
  std::sort(t.begin(), t.end(), [](const WireRegion &a, const WireRegion &b) { return a.base < b.base; });
  std::lock_guard<std::mutex> lk(c->regionMu);
  c->remoteRegions.swap(t);
  return true;
}

// Run one job; false with *why set when it failed.  *lost: the lane is
// unusable afterwards.
bool runJob(FlagcxP2pConn *c, Lane *l, Job &j, const char **why, bool *lost) {
  int fd = l->fd;
  auto dl = deadlineFromTimeout();
  *lost = true;
  *why = "the peer is gone or did not answer within FLAGCX_TIMEOUT";
  if (j.op == Op::Write || j.op == Op::Read) return runReadWrite(c, fd, j, why, lost, dl);
  ReqHdr h{kReqMagic, static_cast<uint8_t>(j.op), 0, 0, 0, 0, j.data.size()};
  RespHdr r{};
  if (!exchange(fd, {iovec{&h, sizeof(h)}, iovec{j.data.data(), j.data.size()}}, &r, dl))
    return false;
  *lost = false;
  if (r.status != kOk) {
    *why = refusal(r.status);
    return false;
  }
  if (j.op == Op::Table && !takeTable(c, fd, r, dl)) {
    *lost = true;
    return false;
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

void Staging::make(const std::vector<iovec> &real) {
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

bool Staging::copy(const std::vector<iovec> &real, bool toStaging) {
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
