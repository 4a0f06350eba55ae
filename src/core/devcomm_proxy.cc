// The device communicator's proxy thread: it takes the descriptors that the
// unified calls queue for peers whose memory is not mapped here (another
// host, shared memory off, a buffer that is not shareable), or that CUDA
// kernels queue into host memory the GPU maps (every call of a device
// communicator via the proxy, flagcx_device_cuda.h), and carries each
// out through the one-sided engine, one at a time in queue order: the data
// completes (acknowledged by the target) before the signal or counter that
// follows it moves.  A failure is logged once, kept as the device
// communicator's error (and flagged in the ring, where kernels' waits see
// it and give up), and the queue goes on.
#include <cstring>

#include "base/base.h"
#include "core/comm.h"
#include "core/devcomm.h"
#include "net/net.h"

namespace flagcx {

namespace {

struct Proxy {
  flagcxDevCommInternal *dc;
  OneSided *os;
  RmaEngine *eng;
  int rank, n;
  uint64_t capacity;  // the ring's, read once at start (kernels may write the ring)

  flagcxResult_t wait(RmaDone &d) {
    Backoff bo;
    while (d.left.load(std::memory_order_acquire) > 0) bo.idle();
    return static_cast<flagcxResult_t>(d.error.load());
  }

  // One engine operation: post it, then wait for it.
  template <typename Post>
  flagcxResult_t once(Post post) {
    RmaDone d;
    d.left.store(1);
    post(&d);
    return wait(d);
  }

  static RmaRemote remoteOf(const RegInfo &reg, int peer, uint64_t off) {
    const RegInfo::Remote &rm = reg.peer[static_cast<size_t>(peer)];
    return RmaRemote{rm.addr + off, rm.rkey};
  }

  // Adds v to `row` at peer: an atomic add in its mapped block, or a store
  // of this rank's running total for that row.
  flagcxResult_t signal(int peer, uint32_t row, uint64_t v) {
    size_t word = static_cast<size_t>(row) * static_cast<size_t>(n) + static_cast<size_t>(rank);
    if (uint64_t *w = dc->peerWords[static_cast<size_t>(peer)]) {
      __atomic_fetch_add(&w[word], v, __ATOMIC_RELEASE);
      return flagcxSuccess;
    }
    uint64_t &total = dc->sent[static_cast<size_t>(row) * static_cast<size_t>(n) +
                               static_cast<size_t>(peer)];
    total += v;
    uint64_t t = total;
    uint32_t key = dc->blockWin->reg.key;
    return once([&](RmaDone *d) { eng->putValue(peer, t, key, word * sizeof(uint64_t), d); });
  }

  flagcxResult_t put(const flagcxDevDesc &d, flagcxDevMemInternal *dst,
                     flagcxDevMemInternal *src) {
    const char *from = src->view.base + d.srcOff;
    size_t p = static_cast<size_t>(d.peer);
    if (char *to = dst->peerBase[p]) {
      memcpy(to + d.dstOff, from, d.bytes);
      return flagcxSuccess;
    }
    uint64_t off = dst->peerRegOff[p] + d.dstOff;
    RmaRemote at = remoteOf(dst->reg, d.peer, off);
    return once([&](RmaDone *x) {
      eng->put(d.peer, from, d.bytes, dst->reg.key, off, x, eng->native(d.peer) ? &at : nullptr);
    });
  }

  flagcxResult_t get(const flagcxDevDesc &d, flagcxDevMemInternal *dst,
                     flagcxDevMemInternal *src) {
    char *to = dst->view.base + d.dstOff;
    size_t p = static_cast<size_t>(d.peer);
    if (const char *from = src->peerBase[p]) {
      memcpy(to, from + d.srcOff, d.bytes);
      return flagcxSuccess;
    }
    uint64_t off = src->peerRegOff[p] + d.srcOff;
    RmaRemote at = remoteOf(src->reg, d.peer, off);
    return once([&](RmaDone *x) {
      eng->get(d.peer, to, d.bytes, src->reg.key, off, x, eng->native(d.peer) ? &at : nullptr);
    });
  }

  flagcxResult_t value(const flagcxDevDesc &d, flagcxDevMemInternal *dst) {
    size_t p = static_cast<size_t>(d.peer);
    if (char *to = dst->peerBase[p]) {
      __atomic_store_n(reinterpret_cast<uint64_t *>(to + d.dstOff), d.value, __ATOMIC_RELEASE);
      return flagcxSuccess;
    }
    uint64_t off = dst->peerRegOff[p] + d.dstOff;
    return once([&](RmaDone *x) { eng->putValue(d.peer, d.value, dst->reg.key, off, x); });
  }

  static bool within(uint64_t off, uint64_t len, uint64_t size) {
    return off <= size && len <= size - off;
  }

  // A descriptor is bytes a kernel wrote into host memory: its peer, rows,
  // counter and ranges must lie in what this rank set up (the calls of host
  // ranks check the same before they queue; kernels only with
  // FLAGCX_DEVICE_CHECKS) before anything is touched.
  bool valid(const flagcxDevDesc &d, const flagcxDevMemInternal *dst,
             const flagcxDevMemInternal *src) const {
    if (d.peer < 0 || d.peer >= n) return false;
    const size_t p = static_cast<size_t>(d.peer);
    const size_t rows = dc->sent.size() / static_cast<size_t>(n);  // signals and barriers
    if (d.signal != FLAGCX_DEV_NONE && d.signal >= rows) return false;
    if (d.counter != FLAGCX_DEV_NONE && d.counter >= static_cast<uint32_t>(dc->view.nCounters))
      return false;
    switch (d.op) {
      case flagcxDevOpPut:
        return within(d.dstOff, d.bytes, dst->peerSize[p]) &&
               within(d.srcOff, d.bytes, src->view.size);
      case flagcxDevOpGet:
        return within(d.srcOff, d.bytes, src->peerSize[p]) &&
               within(d.dstOff, d.bytes, dst->view.size);
      case flagcxDevOpValue: return within(d.dstOff, sizeof(uint64_t), dst->peerSize[p]);
      case flagcxDevOpSignal: return true;
      default: return false;
    }
  }

  flagcxResult_t run(const flagcxDevDesc &d) {
    flagcxDevMemInternal *dst = nullptr, *src = nullptr;
    if (d.op != flagcxDevOpSignal) {
      dst = devMemById(dc->comm, d.dstMem);
      src = d.op == flagcxDevOpValue ? dst : devMemById(dc->comm, d.srcMem);
      if (!dst || !src) {
        WARN(kP2P, "rank %d: device proxy: a descriptor names a destroyed device memory handle",
             rank);
        return flagcxInvalidUsage;
      }
      if (dst->reg.device || src->reg.device) {
        WARN(kP2P, "rank %d: device proxy: a descriptor names device memory, which the proxy "
             "cannot reach (register host memory the GPU maps: flagcxDevCommUsesHostMemory)", rank);
        return flagcxInvalidUsage;
      }
    }
    if (!valid(d, dst, src)) {
      // One line (the first failure): a corrupt kernel may fill the ring.
      if (__atomic_load_n(&dc->errorWord, __ATOMIC_ACQUIRE) == flagcxSuccess)
        WARN(kP2P, "rank %d: device proxy: descriptor (operation %u, rank %d, signal %u, "
             "counter %u, offsets %llu/%llu, %llu bytes) lies outside what this device "
             "communicator and its memory handles hold; not carried out", rank, d.op, d.peer,
             d.signal, d.counter, static_cast<unsigned long long>(d.dstOff),
             static_cast<unsigned long long>(d.srcOff), static_cast<unsigned long long>(d.bytes));
      return flagcxInvalidArgument;
    }
    flagcxResult_t rc = flagcxSuccess;
    switch (d.op) {
      case flagcxDevOpPut: rc = put(d, dst, src); break;
      case flagcxDevOpGet: rc = get(d, dst, src); break;
      case flagcxDevOpValue: rc = value(d, dst); break;
      case flagcxDevOpSignal: break;
      default: break;  // (valid: no other op)
    }
    if (rc == flagcxSuccess && d.signal != FLAGCX_DEV_NONE)
      rc = signal(d.peer, d.signal, d.add);
    if (rc == flagcxSuccess && d.counter != FLAGCX_DEV_NONE)
      __atomic_fetch_add(&dc->view.counters[d.counter], 1, __ATOMIC_RELEASE);
    return rc;
  }

  void fail(const flagcxDevDesc &d, flagcxResult_t rc) {
    __atomic_store_n(&dc->view.queue->failed, 1, __ATOMIC_RELEASE);  // kernels' waits end
    int32_t none = flagcxSuccess;
    if (__atomic_compare_exchange_n(&dc->errorWord, &none, static_cast<int32_t>(rc), false,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      WARN(kP2P, "rank %d: device proxy: operation %u to rank %d failed: %s", rank, d.op, d.peer,
           flagcxGetErrorString(rc));
  }

  void loop() {
    flagcxDevQueue *q = dc->view.queue;
    uint64_t mask = capacity - 1, t = __atomic_load_n(&q->done, __ATOMIC_ACQUIRE);
    Backoff bo;
    while (!dc->abandon.load(std::memory_order_acquire)) {
      flagcxDevDesc &s = q->slot[t & mask];
      if (__atomic_load_n(&s.seq, __ATOMIC_ACQUIRE) != t + 1) {
        // Stopping: host ranks may hold a ticket not yet written; kernels
        // (tickets in device memory) have finished by then.
        if (dc->stop.load(std::memory_order_acquire) &&
            (dc->viaProxy || __atomic_load_n(&q->head, __ATOMIC_ACQUIRE) == t))
          return;
        bo.idle();
        continue;
      }
      flagcxDevDesc d = s;
      __atomic_store_n(&s.seq, t + capacity, __ATOMIC_RELEASE);
      flagcxResult_t rc = run(d);
      if (rc != flagcxSuccess) fail(d, rc);
      __atomic_store_n(&q->done, ++t, __ATOMIC_RELEASE);
      bo.progressed();
    }
  }
};

}  // namespace

void proxyStart(flagcxDevCommInternal *dc) {
  Proxy p{dc, dc->comm->os.get(), dc->comm->os->engine(), dc->comm->rank, dc->comm->nranks,
          dc->view.queue->capacity};  // as devQueueInit wrote it: no kernel ran yet
  dc->proxy = std::thread([p]() mutable { p.loop(); });
}

void proxyStop(flagcxDevCommInternal *dc) {
  dc->stop.store(true, std::memory_order_release);
  if (dc->proxy.joinable()) dc->proxy.join();
}

}  // namespace flagcx
