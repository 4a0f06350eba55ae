// One-sided operations: windows (stream-ordered PutSignal / Signal /
// WaitSignal) and regions (Put / Get / BatchPut / PutValue, counted).
// Arguments were checked by src/api/onesided_api.cc.
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <thread>

#include "base/base.h"
#include "core/comm.h"
#include "core/onesided.h"
#include "net/net.h"

namespace flagcx {

struct OneSided::PutSignalTask {
  OneSided *os;
  const void *src;
  size_t bytes;
  int peer;
  flagcxWindow *win;  // null for a signal alone
  size_t off;
};

struct OneSided::WaitTask {
  OneSided *os;
  std::vector<flagcxWaitSignalDesc_t> descs;
};

namespace {
flagcxResult_t putSignalTrampoline(void *arg) {
  std::unique_ptr<OneSided::PutSignalTask> t(static_cast<OneSided::PutSignalTask *>(arg));
  return t->os->runPutSignal(*t);
}
flagcxResult_t waitTrampoline(void *arg) {
  std::unique_ptr<OneSided::WaitTask> t(static_cast<OneSided::WaitTask *>(arg));
  return t->os->runWait(*t);
}
}  // namespace

// Whether a peer can no longer answer: its engine Conn failed, or (a
// same-host peer whose process the kernel named) its process is gone.
flagcxResult_t OneSided::peerProblem(int peer) {
  if (peer == rank_) return flagcxSuccess;
  if (eng_->serves(peer) && eng_->peerGone(peer)) return flagcxRemoteError;
  size_t p = static_cast<size_t>(peer);
  if (pid_[p] <= 0) return flagcxSuccess;
  Liveness &l = live_[p];
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch()).count();
  if (now >= l.nextNs.load(std::memory_order_relaxed)) {
    l.nextNs.store(now + 20000000, std::memory_order_relaxed);
    if (processGone(pid_[p])) l.dead.store(true);
  }
  return l.dead.load(std::memory_order_relaxed) ? flagcxRemoteError : flagcxSuccess;
}

// Before touching a peer's mapped memory: a dead peer is an error even
// though the copy itself would succeed.
flagcxResult_t OneSided::checkMappedPeer(int peer, const char *fn) {
  flagcxResult_t rc = peerProblem(peer);
  if (rc != flagcxSuccess) {
    WARN(kP2P, "rank %d: %s: rank %d is gone (its process exited)", rank_, fn, peer);
    int ok = flagcxSuccess;
    error_.compare_exchange_strong(ok, rc);
  }
  return rc;
}

// Wait for operations posted to the engine.  The engine completes every
// operation (an answer, a failed peer, or FLAGCX_TIMEOUT without an answer),
// so this wait ends; `d` must not go away before.
flagcxResult_t OneSided::waitDone(RmaDone &d, int peer, const char *what) {
  Backoff bo;
  while (d.left.load(std::memory_order_acquire) > 0) bo.idle();
  int rc = d.error.load();
  if (rc != flagcxSuccess) {
    WARN(kP2P, "rank %d: %s to rank %d failed: %s", rank_, what, peer,
         flagcxGetErrorString(static_cast<flagcxResult_t>(rc)));
    return static_cast<flagcxResult_t>(rc);
  }
  return flagcxSuccess;
}

flagcxResult_t OneSided::runPutSignal(const PutSignalTask &t) {
  flagcxResult_t rc = flagcxSuccess;
  const char *what = t.win ? "flagcxPutSignal" : "flagcxSignal";
  std::atomic<uint64_t> *slot = peerSig_[static_cast<size_t>(t.peer)];
  if (eng_->native(t.peer)) {
    // RDMA WRITE, its completion, then FETCH_ADD on my slot of the peer's
    // signal block (waiting in between keeps the order on any NIC).
    if (t.win && t.bytes > 0) {
      const RegInfo::Remote &rm = t.win->reg.peer[static_cast<size_t>(t.peer)];
      RmaRemote at{rm.addr + t.off, rm.rkey};
      RmaDone d;
      d.left.store(1);
      eng_->put(t.peer, t.src, t.bytes, t.win->reg.key, t.off, &d, &at);
      rc = waitDone(d, t.peer, what);
    }
    if (rc == flagcxSuccess) {
      RmaDone d;
      d.left.store(1);
      eng_->signal(t.peer, 1, &d, &peerSigRemote_[static_cast<size_t>(t.peer)]);
      rc = waitDone(d, t.peer, what);
    }
    if (t.win) t.win->inflight.fetch_sub(1);
    tasks_.fetch_sub(1);
    return rc;
  }
  if (t.win && t.bytes > 0 && !t.win->reg.peer[static_cast<size_t>(t.peer)].mapped &&
      comm_->dev->isDeviceMemory(t.src)) {
    // The engine reads the source with the CPU, and nothing stages device
    // memory through the host on this path: refuse rather than read a device
    // address as host memory (docs/ONESIDED.md; needs GPUs on several hosts).
    WARN(kP2P, "rank %d: %s to rank %d: localbuff is device memory and the peer is reached "
         "through the host engine (sockets); not supported", rank_, what, t.peer);
    t.win->inflight.fetch_sub(1);
    tasks_.fetch_sub(1);
    return flagcxNotSupported;
  }
  if (!slot && t.win && t.bytes > 0 && !t.win->reg.peer[static_cast<size_t>(t.peer)].mapped) {
    // Both through the engine: one round trip (the target applies them in order).
    RmaDone d;
    d.left.store(2);
    eng_->put(t.peer, t.src, t.bytes, t.win->reg.key, t.off, &d);
    eng_->signal(t.peer, 1, &d);
    rc = waitDone(d, t.peer, what);
    t.win->inflight.fetch_sub(1);
    tasks_.fetch_sub(1);
    return rc;
  }
  if (t.win && t.bytes > 0) {
    const RegInfo::Remote &rm = t.win->reg.peer[static_cast<size_t>(t.peer)];
    if (rm.mapped) {
      rc = copyMapped(rm.mapped + t.off, t.src, t.bytes,
                      t.win->reg.device || comm_->dev->isDeviceMemory(t.src));
    } else {
      RmaDone d;
      d.left.store(1);
      eng_->put(t.peer, t.src, t.bytes, t.win->reg.key, t.off, &d);
      rc = waitDone(d, t.peer, what);
    }
  }
  if (rc == flagcxSuccess && closing_.load()) rc = flagcxInvalidUsage;
  if (rc == flagcxSuccess) {
    if (slot) {
      rc = peerProblem(t.peer);
      if (rc != flagcxSuccess)
        WARN(kP2P, "rank %d: %s: rank %d is gone (its process exited)", rank_, what, t.peer);
      else
        slot->fetch_add(1, std::memory_order_release);
    } else {
      RmaDone d;
      d.left.store(1);
      eng_->signal(t.peer, 1, &d);
      rc = waitDone(d, t.peer, what);
    }
  }
  if (t.win) t.win->inflight.fetch_sub(1);
  tasks_.fetch_sub(1);
  return rc;
}

flagcxResult_t OneSided::putSignal(const void *src, size_t bytes, int peer, flagcxWindow *win,
                                   size_t off, bool withData, flagcxStream_t stream) {
  auto *t = new PutSignalTask{this, src, withData ? bytes : 0, peer, win, off};
  if (win) win->inflight.fetch_add(1);
  tasks_.fetch_add(1);
  flagcxResult_t rc = comm_->dev->enqueue(stream, StreamTask{putSignalTrampoline, t, this});
  if (rc != flagcxSuccess && stream != nullptr) {
    // Not queued: nothing will run it.
    if (win) win->inflight.fetch_sub(1);
    tasks_.fetch_sub(1);
    delete t;
  }
  return rc;
}

flagcxResult_t OneSided::runWait(const WaitTask &t) {
  size_t n = static_cast<size_t>(nranks_);
  std::vector<uint64_t> want(consumed_);
  for (auto &d : t.descs) want[static_cast<size_t>(d.peer)] += d.opCnt;
  Backoff bo;
  auto lastCheck = std::chrono::steady_clock::now();
  flagcxResult_t rc = flagcxSuccess;
  for (;;) {
    int missing = -1;
    for (auto &d : t.descs) {
      size_t p = static_cast<size_t>(d.peer);
      if (sig_[p * kStride].load(std::memory_order_acquire) < want[p]) {
        missing = d.peer;
        break;
      }
    }
    if (missing < 0) break;
    if (closing_.load()) {
      WARN(kP2P, "rank %d: flagcxWaitSignal: the communicator is being destroyed", rank_);
      rc = flagcxInvalidUsage;
      break;
    }
    bo.idle();
    auto now = std::chrono::steady_clock::now();
    if (now - lastCheck < std::chrono::milliseconds(50)) continue;
    lastCheck = now;
    size_t p = static_cast<size_t>(missing);
    uint64_t have = sig_[p * kStride].load();
    if (peerProblem(missing) != flagcxSuccess && have < want[p]) {
      WARN(kP2P, "rank %d: flagcxWaitSignal: rank %d is gone with %" PRIu64 " of %" PRIu64
           " signals delivered", rank_, missing, have - consumed_[p], want[p] - consumed_[p]);
      rc = flagcxRemoteError;
      break;
    }
    if (bo.expired()) {
      WARN(kP2P, "rank %d: flagcxWaitSignal: %" PRIu64 " of %" PRIu64 " signals from rank %d "
           "after FLAGCX_TIMEOUT (%" PRId64 " s)", rank_, have - consumed_[p],
           want[p] - consumed_[p], missing, paramInt(Param::TIMEOUT));
      rc = flagcxRemoteError;
      break;
    }
  }
  if (rc == flagcxSuccess)
    for (size_t p = 0; p < n; p++) consumed_[p] = want[p];
  tasks_.fetch_sub(1);
  return rc;
}

flagcxResult_t OneSided::waitSignal(int n, const flagcxWaitSignalDesc_t *descs,
                                    flagcxStream_t stream) {
  auto *t = new WaitTask{this, std::vector<flagcxWaitSignalDesc_t>(descs, descs + n)};
  tasks_.fetch_add(1);
  flagcxResult_t rc = comm_->dev->enqueue(stream, StreamTask{waitTrampoline, t, this});
  if (rc != flagcxSuccess && stream != nullptr) {
    tasks_.fetch_sub(1);
    delete t;
  }
  return rc;
}

flagcxResult_t OneSided::copyMapped(void *dst, const void *src, size_t bytes, bool device) {
  if (!device) {
    copyBytes(dst, src, bytes);
    return flagcxSuccess;
  }
  // Never a synchronous cudaMemcpy here: on the progress thread, with the
  // user's stream held, it could wait for that stream (docs/DECISIONS.md, "GPUs").
  FLAGCX_CHECK(comm_->dev->copyAsync(dst, src, bytes));
  return comm_->dev->flush();
}

// A region operation's completion: counted once when all its parts are done
// (the engine frees it), failures kept for flagcxWaitCounter.
RmaDone *OneSided::countedOp() {
  auto *d = new RmaDone;
  d->owned = true;
  d->counter = &completed_;
  d->errorSink = &error_;
  d->left.store(1);
  return d;
}

// Regions.  A batch is one counted operation: the mapped entries are copied
// now, the others go to the engine; a guard count keeps the batch open until
// every entry was issued.
flagcxResult_t OneSided::batchPut(int peer, const size_t *srcOff, const size_t *dstOff,
                                  const size_t *sizes, const int *srcIdx, const int *dstIdx,
                                  size_t count) {
  int bad = error_.load();
  if (bad != flagcxSuccess) return static_cast<flagcxResult_t>(bad);
  RmaDone *d = countedOp();
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = 0; i < count; i++) {
    const RegInfo &src = regions_[static_cast<size_t>(srcIdx[i])];
    const RegInfo &dst = regions_[static_cast<size_t>(dstIdx[i])];
    const RegInfo::Remote &rm = dst.peer[static_cast<size_t>(peer)];
    if (sizes[i] == 0) continue;
    if (rm.mapped && checkMappedPeer(peer, "flagcxPut") != flagcxSuccess) {
      rmaComplete(d, flagcxRemoteError);
      return flagcxRemoteError;
    }
    if (rm.mapped) {
      flagcxResult_t rc = copyMapped(rm.mapped + dstOff[i], src.base + srcOff[i], sizes[i],
                                     src.device || dst.device);
      if (rc != flagcxSuccess) {
        rmaComplete(d, rc);
        return rc;
      }
    } else {
      d->left.fetch_add(1);
      RmaRemote at{rm.addr + dstOff[i], rm.rkey};
      eng_->put(peer, src.base + srcOff[i], sizes[i], dst.key, dstOff[i], d, &at);
    }
  }
  rmaComplete(d, flagcxSuccess);  // the guard
  return flagcxSuccess;
}

flagcxResult_t OneSided::get(int peer, size_t srcOff, size_t dstOff, size_t size, int srcIdx,
                             int dstIdx) {
  int bad = error_.load();
  if (bad != flagcxSuccess) return static_cast<flagcxResult_t>(bad);
  std::lock_guard<std::mutex> g(mu_);
  const RegInfo &src = regions_[static_cast<size_t>(srcIdx)];
  const RegInfo &dst = regions_[static_cast<size_t>(dstIdx)];
  const RegInfo::Remote &rm = src.peer[static_cast<size_t>(peer)];
  if (rm.mapped || size == 0) {
    FLAGCX_CHECK(checkMappedPeer(peer, "flagcxGet"));
    if (size) FLAGCX_CHECK(copyMapped(dst.base + dstOff, rm.mapped + srcOff, size, src.device || dst.device));
    completed_.fetch_add(1, std::memory_order_release);
    return flagcxSuccess;
  }
  RmaDone *d = countedOp();
  RmaRemote at{rm.addr + srcOff, rm.rkey};
  eng_->get(peer, dst.base + dstOff, size, src.key, srcOff, d, &at);
  return flagcxSuccess;
}

flagcxResult_t OneSided::putValue(int peer, uint64_t value, size_t dstOff, int dstIdx) {
  int bad = error_.load();
  if (bad != flagcxSuccess) return static_cast<flagcxResult_t>(bad);
  std::lock_guard<std::mutex> g(mu_);
  const RegInfo &dst = regions_[static_cast<size_t>(dstIdx)];
  const RegInfo::Remote &rm = dst.peer[static_cast<size_t>(peer)];
  // Through the staging region, as FlagCX does (its first 8 bytes).
  memcpy(staging_, &value, sizeof(value));
  if (rm.mapped) {
    FLAGCX_CHECK(checkMappedPeer(peer, "flagcxPutValue"));
    FLAGCX_CHECK(copyMapped(rm.mapped + dstOff, &value, sizeof(value), dst.device));
    completed_.fetch_add(1, std::memory_order_release);
    return flagcxSuccess;
  }
  RmaDone *d = countedOp();
  eng_->putValue(peer, value, dst.key, dstOff, d);
  return flagcxSuccess;
}

flagcxResult_t OneSided::readCounter(uint64_t *count) {
  *count = completed_.load(std::memory_order_acquire);
  return flagcxSuccess;
}

flagcxResult_t OneSided::waitCounter(uint64_t target) {
  Backoff bo;
  while (completed_.load(std::memory_order_acquire) < target) {
    int bad = error_.load();
    if (bad != flagcxSuccess) {
      WARN(kP2P, "rank %d: flagcxWaitCounter(%" PRIu64 "): a one-sided operation failed (%s); "
           "%" PRIu64 " completed", rank_, target,
           flagcxGetErrorString(static_cast<flagcxResult_t>(bad)), completed_.load());
      return static_cast<flagcxResult_t>(bad);
    }
    if (bo.expired()) {
      WARN(kP2P, "rank %d: flagcxWaitCounter(%" PRIu64 "): only %" PRIu64 " operation(s) "
           "completed after FLAGCX_TIMEOUT", rank_, target, completed_.load());
      return flagcxRemoteError;
    }
    bo.idle();
  }
  return flagcxSuccess;
}

}  // namespace flagcx
