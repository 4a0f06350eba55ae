// The verbs data path of the P2P engine (docs/P2P.md, "Verbs"): Write and
// Read between hosts as RDMA WRITE / RDMA READ on one RC queue pair per
// connection, straight between the registered regions of the two engines;
// the target's CPU does nothing (on the software device of the tests its
// connection's worker plays the target NIC inside poll()).
//
// When: both engines have an RDMA device of the same kind (verbs, or both
// the software device), the connection is not within one process, and the
// peer is on another host (or shared memory is off: FLAGCX_SHM_DISABLE=1,
// how the tests reach this path on one host).  Host memory only: a piece in
// device memory at either end keeps to the TCP lanes, as do messages,
// notifications and the region table.
//
// Safety: the target's NIC checks every piece's verbs key and range.  The
// initiator posts only pieces that its copy of the target's region table
// places inside one region with the descriptor's key; any other piece (a
// region registered or replaced since the table was read, a bad descriptor)
// goes over the lanes, whose target checks it against its regions as they
// stand.  A piece the NIC refuses anyway (a region deregistered since) fails
// its transfer, and the queue pair with it: the other transfers in flight
// come back flushed and are done again, whole, over the lanes, which carry
// the connection's later transfers too.  A peer whose queue pair stops
// answering (RetryExceeded after the queue pair worked) or requests
// unanswered for FLAGCX_TIMEOUT fail the connection, as on the lanes; a
// queue pair that fails before it ever completed a request (the NICs may not
// reach each other) sends its transfers and the connection to the lanes.
//
// One worker thread per connection owns the queue pair: it takes jobs,
// posts their pieces (at most the queue pair's depth in flight), polls
// completions and ends transfers.
#include <strings.h>

#include <algorithm>
#include <cstring>
#include <list>

#include "base/base.h"
#include "p2p/p2p_internal.h"

namespace flagcx::p2p {

struct VerbsPath {
  std::shared_ptr<rdma::Device> dev;
  std::unique_ptr<rdma::Qp> qp;
  std::thread th;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> q;
  std::atomic<bool> stop{false};
  std::atomic<bool> broken{false};  // the queue pair failed: the lanes carry transfers
  std::atomic<uint64_t> transfers{0}, bytes{0};  // taken over verbs (logged at the end)
  bool anyOk = false;  // a request completed (worker only)
};

namespace {

constexpr uint64_t kMaxWrBytes = 1ull << 30;

// A job in the worker: its pieces, how many are posted and in flight.
struct Pending {
  Job job;
  size_t next = 0;
  size_t inflight = 0;
  bool failed = false;
  bool retry = false;  // failed only because another request broke the queue pair
  bool reported = false;
  const char *why = "";
};

void worker(FlagcxP2pConn *c, VerbsPath *v) {
  std::list<Pending> active;
  size_t outstanding = 0;
  const size_t cap = static_cast<size_t>(std::max(1, v->qp->maxSendWr()));
  const size_t batch = std::clamp<size_t>(flagcxP2pGlobalConfig().batchPollSize, 1, 512);
  std::vector<rdma::Completion> wc(batch);
  const int64_t t = paramInt(Param::TIMEOUT);
  const auto timeout = std::chrono::seconds(t > 0 ? t : 600);
  const bool soft = rdmaKind(v->dev.get()) == 2;
  Backoff bo;
  bool aborted = false;
  auto heard = Clock::now();  // the last completion, or the moment requests went out
  auto report = [&](Pending &p) {
    if (p.reported) return;
    p.reported = true;
    finish(c, p.job, !p.failed, p.why);
  };
  // retry: the jobs did nothing wrong (the queue pair broke under them);
  // they are done again over the lanes when the connection still stands.
  auto failAll = [&](const char *why, bool retry) {
    for (auto &p : active)
      if (!p.failed) {
        p.failed = true;
        p.retry = retry;
        p.why = why;
      }
  };
  while (!v->stop.load(std::memory_order_acquire)) {
    bool progressed = false;
    {
      std::unique_lock<std::mutex> lk(v->mu);
      // Fully idle: a hardware queue pair needs no polling; the software
      // device serves the peer's requests inside poll(), so keep polling.
      if (!soft && active.empty() && v->q.empty())
        v->cv.wait_for(lk, std::chrono::milliseconds(1));
      while (!v->q.empty()) {
        active.push_back(Pending{std::move(v->q.front())});
        v->q.pop_front();
        progressed = true;
      }
    }
    // A failed connection: the queue pair goes to the error state, so that
    // what is still outstanding is flushed (and touches no memory later);
    // its jobs end when their pieces have come back.
    if (c->dead.load() && !aborted) {
      aborted = true;
      v->broken.store(true);
      v->qp->abort();
    }
    const bool usable = v->qp->state() == rdma::QpState::Ready && !v->broken.load();
    if (!usable) failAll("the queue pair failed", true);
    for (auto &p : active) {
      while (usable && !p.failed && p.next < p.job.segs.size() && outstanding < cap) {
        const Seg &s = p.job.segs[p.next];
        rdma::SendWr wr;
        wr.op = p.job.op == Op::Write ? rdma::Opcode::Write : rdma::Opcode::Read;
        wr.wrId = reinterpret_cast<uint64_t>(&p);
        wr.local = reinterpret_cast<void *>(s.local);
        wr.lkey = s.lkey;
        wr.length = static_cast<uint32_t>(s.len);
        wr.remote = s.remote;
        wr.rkey = s.rkey;  // the remote verbs key (verbsSubmit put it there)
        if (v->qp->postSend(wr) != flagcxSuccess) {
          p.failed = true;
          p.why = "the RDMA device refused a request";
          break;
        }
        if (outstanding == 0) heard = Clock::now();
        p.next++;
        p.inflight++;
        outstanding++;
        progressed = true;
      }
      if (outstanding >= cap) break;
    }
    int n = v->qp->poll(wc.data(), static_cast<int>(batch));
    bool dead = false;
    for (int i = 0; i < n; i++) {
      auto *p = reinterpret_cast<Pending *>(wc[i].wrId);
      p->inflight--;
      outstanding--;
      progressed = true;
      heard = Clock::now();
      rdma::WcStatus st = wc[i].status;
      if (st == rdma::WcStatus::Success) {
        v->anyOk = true;
        continue;
      }
      // The peer is gone only if this queue pair ever worked: one that never
      // completed a request may just not reach the peer (another fabric, a
      // wrong GID), and the lanes still do.
      if ((st == rdma::WcStatus::RetryExceeded || st == rdma::WcStatus::Fatal) && v->anyOk) dead = true;
      // Flushed: the queue pair failed because of another request; no
      // answer from a queue pair that never worked: the NICs may not reach
      // each other.  Neither is this transfer's fault: the lanes redo it.
      const bool collateral = st == rdma::WcStatus::Flushed ||
                              (st == rdma::WcStatus::RetryExceeded && !v->anyOk);
      if (!p->failed || (p->retry && !collateral)) {
        p->retry = collateral && !p->failed;
        p->failed = true;
        p->why = rdma::wcStatusName(st);
      }
    }
    if (v->qp->state() == rdma::QpState::Error && !v->broken.exchange(true))
      WARN(kP2P, "P2P: the queue pair to %s failed%s; this connection's later transfers take its "
                 "TCP lanes", c->peerHost.c_str(), v->anyOk ? "" : " before completing any request");
    if (dead) connMarkDead(c, "the peer's RDMA queue pair stopped answering (process gone?)");
    // Requests in flight and nothing heard for FLAGCX_TIMEOUT: the peer is
    // stuck.  The queue pair is aborted: its requests come back flushed.
    if (outstanding > 0 && !aborted && Clock::now() - heard > timeout) {
      connMarkDead(c, "an RDMA request was not answered within FLAGCX_TIMEOUT");
      failAll("the peer did not answer within FLAGCX_TIMEOUT", false);
      aborted = true;
      v->broken.store(true);
      v->qp->abort();
    }
    // A job ends once nothing of it is in flight (a failed one's pieces come
    // back flushed from the failed queue pair).
    for (auto it = active.begin(); it != active.end();) {
      bool over = it->failed || it->next == it->job.segs.size();
      if (over && it->inflight == 0) {
        if (it->failed && it->retry && !c->dead.load() && !v->stop.load()) {
          it->reported = true;  // the lanes end it now
          postOnLanes(c, it->job.op, it->job.orig, it->job.xfer);
        } else {
          report(*it);
        }
        it = active.erase(it);
      } else {
        ++it;
      }
    }
    if (progressed) {
      bo.progressed();
    } else {
      if (outstanding > 0) v->qp->checkPeer();
      bo.idle();
    }
  }
  // Stopping: everything not over fails (the connection is closing); the
  // queue pair is aborted and its requests drained before it is destroyed.
  failAll("the connection was closed", false);
  for (auto &p : active) p.retry = false;
  v->qp->abort();
  for (auto until = Clock::now() + std::chrono::seconds(1); outstanding > 0 && Clock::now() < until;) {
    int n = v->qp->poll(wc.data(), static_cast<int>(batch));
    for (int i = 0; i < n; i++) {
      reinterpret_cast<Pending *>(wc[i].wrId)->inflight--;
      outstanding--;
    }
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  for (auto &p : active) report(p);
  std::lock_guard<std::mutex> lk(v->mu);
  for (auto &j : v->q) finish(c, j, false, "the connection was closed");
  v->q.clear();
}

}  // namespace

uint32_t rdmaKind(const rdma::Device *d) {
  return !d ? 0 : strcmp(d->kind(), "software") == 0 ? 2 : 1;
}

void openRdma(FlagcxP2pEngine *e) {
  const std::string &net = paramStr(Param::NET);
  int64_t soft = paramInt(Param::IB_SOFTWARE_DEVICE);
  std::unique_ptr<rdma::Device> dev;
  std::string why;
  if (strcasecmp(net.c_str(), "Socket") == 0) {
    why = "FLAGCX_NET=Socket";
  } else if (soft == 1 || soft == 2) {
    if (rdma::openSoftDevice(&dev) != flagcxSuccess) dev.reset();
    why = "cannot open the software device";
  } else if (rdma::openVerbsDevice(&dev, &why) != flagcxSuccess) {
    dev.reset();
  }
  if (!dev) {
    INFO(kP2P, "P2P: no RDMA device (%s): other hosts over the TCP lanes", why.c_str());
    return;
  }
  e->rdma = std::shared_ptr<rdma::Device>(std::move(dev));
  INFO(kP2P, "P2P: RDMA device %s port %d (%s) for peers on other hosts",
       e->rdma->port().device.c_str(), e->rdma->port().port, e->rdma->kind());
}

bool verbsHandshake(FlagcxP2pConn *c, int fd, Clock::time_point dl) {
  FlagcxP2pEngine *e = c->engine;
  auto v = std::make_shared<VerbsPath>();
  v->dev = e->rdma;
  rdma::QpAddr mine{}, theirs{};
  uint8_t okMine = v->dev && v->dev->createQp(&v->qp) == flagcxSuccess &&
                   v->qp->localAddr(&mine) == flagcxSuccess;
  uint8_t okTheirs = 0;
  if (sendAll(fd, &okMine, 1, dl) != flagcxSuccess || sendAll(fd, &mine, sizeof(mine), dl) != flagcxSuccess ||
      recvAll(fd, &okTheirs, 1, dl) != flagcxSuccess || recvAll(fd, &theirs, sizeof(theirs), dl) != flagcxSuccess)
    return false;
  uint8_t connMine = okMine && okTheirs && v->qp->connect(theirs) == flagcxSuccess, connTheirs = 0;
  if (sendAll(fd, &connMine, 1, dl) != flagcxSuccess || recvAll(fd, &connTheirs, 1, dl) != flagcxSuccess)
    return false;
  if (connMine && connTheirs) {
    v->qp->connected();
    c->verbs = std::move(v);
  } else {
    INFO(kP2P, "P2P: no queue pair with %s (%s side failed); its transfers take the TCP lanes",
         c->peerHost.c_str(), connMine ? "the peer's" : "this");
  }
  return true;
}

void verbsStart(FlagcxP2pConn *c) {
  if (VerbsPath *v = c->verbs.get()) v->th = std::thread(worker, c, v);
}

void verbsStop(FlagcxP2pConn *c) {
  VerbsPath *v = c->verbs.get();
  if (!v) return;
  v->stop.store(true, std::memory_order_release);
  v->cv.notify_all();
  if (v->th.joinable()) v->th.join();
  INFO(kP2P, "P2P: connection to %s: %lu transfer(s), %lu bytes over verbs", c->peerHost.c_str(),
       static_cast<unsigned long>(v->transfers.load()), static_cast<unsigned long>(v->bytes.load()));
}

int verbsSubmit(FlagcxP2pConn *c, Op op, const std::vector<Seg> &segs, uint64_t *id) {
  VerbsPath *v = c->verbs.get();
  if (!v || v->broken.load() || (op != Op::Write && op != Op::Read)) return 0;
  Job job;
  job.op = op;
  job.orig = segs;
  const uint64_t cut = std::min<uint64_t>(kMaxWrBytes, flagcxP2pGlobalConfig().sliceSize);
  uint64_t bytes = 0;
  {
    FlagcxP2pEngine *e = c->engine;
    std::shared_lock<std::shared_mutex> lk(e->mrMu);
    std::lock_guard<std::mutex> rk(c->regionMu);
    for (const Seg &s : segs) {
      const Region *l = findRegion(e, s.local, s.len, 0);
      if (!l || !l->vmr) return 0;  // device memory, or not registered with the device
      const WireRegion *r = findRemoteRegion(c, s.remote, s.len);
      // Not in the table this side has (a region registered or replaced
      // since), device memory (staged), or no verbs key: the lanes carry it,
      // and the target checks it against its regions as it stands.
      if (!r || r->rkey != s.rkey || r->device || r->vkey == 0) return 0;
      for (uint64_t off = 0; off < s.len;) {
        uint64_t n = std::min(cut, s.len - off);
        job.segs.push_back(Seg{s.local + off, s.remote + off, n, r->vkey, l->vmr->lkey});
        off += n;
      }
      bytes += s.len;
    }
  }
  v->transfers.fetch_add(1, std::memory_order_relaxed);
  v->bytes.fetch_add(bytes, std::memory_order_relaxed);
  auto x = track(c, 1);
  *id = x->id;
  job.xfer = x;
  if (job.segs.empty()) {
    x->task.doneSliceCount.store(1, std::memory_order_release);
    return 1;
  }
  {
    std::lock_guard<std::mutex> lk(v->mu);
    if (!v->stop.load()) {
      v->q.push_back(std::move(job));
      v->cv.notify_one();
      return 1;
    }
  }
  finish(c, job, false, "the connection is closing");
  return 1;
}

}  // namespace flagcx::p2p
