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

// The worker thread of one connection's queue pair (run() until stop).
class Worker {
 public:
  Worker(FlagcxP2pConn *c, VerbsPath *v)
      : c_(c),
        v_(v),
        cap_(static_cast<size_t>(std::max(1, v->qp->maxSendWr()))),
        batch_(std::clamp<size_t>(flagcxP2pGlobalConfig().batchPollSize, 1, 512)),
        wc_(batch_),
        soft_(rdmaKind(v->dev.get()) == 2) {
    const int64_t t = paramInt(Param::TIMEOUT);
    timeout_ = std::chrono::seconds(t > 0 ? t : 600);
  }

  void run() {
    while (!v_->stop.load(std::memory_order_acquire)) {
      bool progressed = takeJobs();
      // A failed connection: the queue pair goes to the error state, so that
      // what is still outstanding is flushed (and touches no memory later);
      // its jobs end when their pieces have come back.
      if (c_->dead.load() && !aborted_) abortQp();
      const bool usable = v_->qp->state() == rdma::QpState::Ready && !v_->broken.load();
      if (!usable) failAll("the queue pair failed", true);
      progressed |= postPieces(usable);
      progressed |= pollCompletions();
      checkStall();
      endJobs();
      if (progressed) {
        bo_.progressed();
      } else {
        if (outstanding_ > 0) v_->qp->checkPeer();
        bo_.idle();
      }
    }
    stopping();
  }

 private:
  // New jobs from the queue; waits a little when fully idle.
  bool takeJobs() {
    bool took = false;
    std::unique_lock<std::mutex> lk(v_->mu);
    // Fully idle: a hardware queue pair needs no polling; the software
    // device serves the peer's requests inside poll(), so keep polling.
    if (!soft_ && active_.empty() && v_->q.empty())
      v_->cv.wait_for(lk, std::chrono::milliseconds(1));
    while (!v_->q.empty()) {
      active_.push_back(Pending{std::move(v_->q.front())});
      v_->q.pop_front();
      took = true;
    }
    return took;
  }

  void abortQp() {
    aborted_ = true;
    v_->broken.store(true);
    v_->qp->abort();
  }

  // retry: the jobs did nothing wrong (the queue pair broke under them);
  // they are done again over the lanes when the connection still stands.
  void failAll(const char *why, bool retry) {
    for (auto &p : active_)
      if (!p.failed) {
        p.failed = true;
        p.retry = retry;
        p.why = why;
      }
  }

  // Post the jobs' next pieces, in order, up to the queue pair's depth.
  bool postPieces(bool usable) {
    bool posted = false;
    for (auto &p : active_) {
      while (usable && !p.failed && p.next < p.job.segs.size() && outstanding_ < cap_) {
        const Seg &s = p.job.segs[p.next];
        rdma::SendWr wr;
        wr.op = p.job.op == Op::Write ? rdma::Opcode::Write : rdma::Opcode::Read;
        wr.wrId = reinterpret_cast<uint64_t>(&p);
        wr.local = reinterpret_cast<void *>(s.local);
        wr.lkey = s.lkey;
        wr.length = static_cast<uint32_t>(s.len);
        wr.remote = s.remote;
        wr.rkey = s.rkey;  // the remote verbs key (verbsSubmit put it there)
        if (v_->qp->postSend(wr) != flagcxSuccess) {
          p.failed = true;
          p.why = "the RDMA device refused a request";
          break;
        }
        if (outstanding_ == 0) heard_ = Clock::now();
        p.next++;
        p.inflight++;
        outstanding_++;
        posted = true;
      }
      if (outstanding_ >= cap_) break;
    }
    return posted;
  }

  // One completion; *dead when it shows the peer gone.
  void complete(const rdma::Completion &w, bool *dead) {
    auto *p = reinterpret_cast<Pending *>(w.wrId);
    p->inflight--;
    outstanding_--;
    heard_ = Clock::now();
    rdma::WcStatus st = w.status;
    if (st == rdma::WcStatus::Success) {
      v_->anyOk = true;
      return;
    }
    // The peer is gone only if this queue pair ever worked: one that never
    // completed a request may just not reach the peer (another fabric, a
    // wrong GID), and the lanes still do.
    if ((st == rdma::WcStatus::RetryExceeded || st == rdma::WcStatus::Fatal) && v_->anyOk)
      *dead = true;
    // Flushed: the queue pair failed because of another request; no
    // answer from a queue pair that never worked: the NICs may not reach
    // each other.  Neither is this transfer's fault: the lanes redo it.
    const bool collateral = st == rdma::WcStatus::Flushed ||
                            (st == rdma::WcStatus::RetryExceeded && !v_->anyOk);
    if (!p->failed || (p->retry && !collateral)) {
      p->retry = collateral && !p->failed;
      p->failed = true;
      p->why = rdma::wcStatusName(st);
    }
  }

  bool pollCompletions() {
    int n = v_->qp->poll(wc_.data(), static_cast<int>(batch_));
    bool dead = false;
    for (int i = 0; i < n; i++) complete(wc_[static_cast<size_t>(i)], &dead);
    if (v_->qp->state() == rdma::QpState::Error && !v_->broken.exchange(true))
      WARN(kP2P, "P2P: the queue pair to %s failed%s; this connection's later transfers take its "
                 "TCP lanes", c_->peerHost.c_str(), v_->anyOk ? "" : " before completing any request");
    if (dead) connMarkDead(c_, "the peer's RDMA queue pair stopped answering (process gone?)");
    return n > 0;
  }

  // Requests in flight and nothing heard for FLAGCX_TIMEOUT: the peer is
  // stuck.  The queue pair is aborted: its requests come back flushed.
  void checkStall() {
    if (outstanding_ == 0 || aborted_ || Clock::now() - heard_ <= timeout_) return;
    connMarkDead(c_, "an RDMA request was not answered within FLAGCX_TIMEOUT");
    failAll("the peer did not answer within FLAGCX_TIMEOUT", false);
    abortQp();
  }

  void report(Pending &p) {
    if (p.reported) return;
    p.reported = true;
    finish(c_, p.job, !p.failed, p.why);
  }

  // A job ends once nothing of it is in flight (a failed one's pieces come
  // back flushed from the failed queue pair).
  void endJobs() {
    for (auto it = active_.begin(); it != active_.end();) {
      bool over = it->failed || it->next == it->job.segs.size();
      if (!over || it->inflight != 0) {
        ++it;
        continue;
      }
      if (it->failed && it->retry && !c_->dead.load() && !v_->stop.load()) {
        it->reported = true;  // the lanes end it now
        postOnLanes(c_, it->job.op, it->job.orig, it->job.xfer);
      } else {
        report(*it);
      }
      it = active_.erase(it);
    }
  }

  // Stopping: everything not over fails (the connection is closing); the
  // queue pair is aborted and its requests drained before it is destroyed.
  void stopping() {
    failAll("the connection was closed", false);
    for (auto &p : active_) p.retry = false;
    v_->qp->abort();
    for (auto until = Clock::now() + std::chrono::seconds(1);
         outstanding_ > 0 && Clock::now() < until;) {
      int n = v_->qp->poll(wc_.data(), static_cast<int>(batch_));
      for (int i = 0; i < n; i++) {
        reinterpret_cast<Pending *>(wc_[static_cast<size_t>(i)].wrId)->inflight--;
        outstanding_--;
      }
      if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    for (auto &p : active_) report(p);
    std::lock_guard<std::mutex> lk(v_->mu);
    for (auto &j : v_->q) finish(c_, j, false, "the connection was closed");
    v_->q.clear();
  }

  FlagcxP2pConn *const c_;
  VerbsPath *const v_;
  std::list<Pending> active_;
  size_t outstanding_ = 0;
  const size_t cap_;
  const size_t batch_;
  std::vector<rdma::Completion> wc_;
  std::chrono::seconds timeout_{600};
  const bool soft_;
  Backoff bo_;
  bool aborted_ = false;
  Clock::time_point heard_ = Clock::now();  // the last completion, or when requests went out
};

void worker(FlagcxP2pConn *c, VerbsPath *v) { Worker(c, v).run(); }

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
