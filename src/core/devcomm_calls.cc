// The unified device calls of flagcx_device_unified.h for host ranks: plain
// functions that read the device communicator's view.  A peer whose memory
// is mapped here gets direct stores and loads (a release fence orders the
// data before the signal that follows it); any other, and any call while the
// proxy still has this rank's earlier descriptors (so that nothing overtakes
// them), goes as a descriptor to the proxy (devcomm_proxy.cc).  A host rank
// is one thread for the whole cooperative group: coopKind, contextId and
// scope change nothing here.  Bad use (a handle of another communicator, a
// range past a window, a slot not requested) is logged once, kept as the
// device communicator's error (flagcxDevCommDestroy returns it) and the call
// does nothing.
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "base/base.h"
#include "flagcx_device_unified.h"

namespace {

using View = flagcxDevCommView;
using Mem = flagcxDevMemView;
constexpr uint32_t kNone = FLAGCX_DEV_NONE;

void bad(const View *v, flagcxResult_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void bad(const View *v, flagcxResult_t code, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  WARN(flagcx::kP2P, "rank %d: %s", v ? v->rank : -1, msg);
  int32_t none = flagcxSuccess;
  if (v) __atomic_compare_exchange_n(v->error, &none, static_cast<int32_t>(code), false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

const View *viewOf(const void *comm, const char *fn) {
  const View *v = static_cast<const View *>(comm);
  if (!v || v->magic != FLAGCX_DEV_COMM_MAGIC) {
    bad(nullptr, flagcxInvalidArgument, "%s: comm is not a device communicator", fn);
    return nullptr;
  }
  return v;
}

const Mem *memOf(const View *v, const void *m, const char *fn, const char *what) {
  const Mem *x = static_cast<const Mem *>(m);
  if (!x || x->magic != FLAGCX_DEV_MEM_MAGIC) {
    bad(v, flagcxInvalidArgument, "%s: %s is not a device memory handle", fn, what);
    return nullptr;
  }
  if (x->commId != v->commId) {
    bad(v, flagcxInvalidArgument, "%s: %s belongs to another communicator", fn, what);
    return nullptr;
  }
  return x;
}

// The world rank of team member `peer`, or -1 (logged).
int worldOf(const View *v, flagcxDevTeamKind_t team, int peer, const char *fn) {
  if (team < FLAGCX_TEAM_INTRA || team > FLAGCX_TEAM_WORLD) {
    bad(v, flagcxInvalidArgument, "%s: team kind %d is not INTRA, INTER or WORLD", fn, team);
    return -1;
  }
  if (peer < 0 || peer >= v->teamSize[team]) {
    bad(v, flagcxInvalidArgument, "%s: peer %d is not in the team (kind %d, %d rank(s))", fn, peer,
        team, v->teamSize[team]);
    return -1;
  }
  return v->teamWorld[team][peer];
}

bool inRange(const View *v, const char *fn, const char *what, uint64_t off, uint64_t len,
             uint64_t size, int rank) {
  if (off <= size && len <= size - off) return true;
  bad(v, flagcxInvalidArgument, "%s: %s range [%llu, +%llu) lies past rank %d's %llu bytes", fn,
      what, static_cast<unsigned long long>(off), static_cast<unsigned long long>(len), rank,
      static_cast<unsigned long long>(size));
  return false;
}

bool slotOk(const View *v, const char *fn, uint32_t signal, uint32_t counter) {
  if (signal != kNone && signal >= static_cast<uint32_t>(v->nSignals)) {
    bad(v, flagcxInvalidArgument, "%s: signal %u, but %d requested (interSignalCount)", fn, signal,
        v->nSignals);
    return false;
  }
  if (counter != kNone && counter >= static_cast<uint32_t>(v->nCounters)) {
    bad(v, flagcxInvalidArgument, "%s: counter %u, but %d requested (interCounterCount)", fn,
        counter, v->nCounters);
    return false;
  }
  return true;
}

bool pending(const View *v) {
  return __atomic_load_n(&v->queue->head, __ATOMIC_ACQUIRE) !=
         __atomic_load_n(&v->queue->done, __ATOMIC_ACQUIRE);
}

void enqueue(const View *v, flagcxDevDesc d) {
  flagcxDevQueue *q = v->queue;
  uint64_t t = __atomic_fetch_add(&q->head, 1, __ATOMIC_ACQ_REL);
  flagcxDevDesc &s = q->slot[t & (q->capacity - 1)];
  flagcx::Backoff bo;
  while (__atomic_load_n(&s.seq, __ATOMIC_ACQUIRE) != t) bo.idle();  // the ring is full
  d.seq = 0;
  uint64_t seq = t + 1;
  memcpy(&s, &d, offsetof(flagcxDevDesc, seq));
  __atomic_store_n(&s.seq, seq, __ATOMIC_RELEASE);
}

flagcxDevDesc desc(uint32_t op, int peer) {
  flagcxDevDesc d{};
  d.op = op;
  d.peer = peer;
  d.signal = d.counter = kNone;
  return d;
}

// Adds `add` to `row` at world rank w: directly when its words are mapped
// and nothing of this rank waits in the queue, else through the proxy.
void signalRow(const View *v, int w, uint32_t row, uint64_t add) {
  uint64_t *words = v->peerWords[w];
  if (!words || pending(v)) {
    flagcxDevDesc d = desc(flagcxDevOpSignal, w);
    d.signal = row;
    d.add = add;
    enqueue(v, d);
    return;
  }
  size_t at = static_cast<size_t>(row) * static_cast<size_t>(v->nRanks) + static_cast<size_t>(v->rank);
  __atomic_fetch_add(&words[at], add, __ATOMIC_RELEASE);
}

uint64_t rowSum(const View *v, uint32_t row) {
  const uint64_t *r = v->words + static_cast<size_t>(row) * static_cast<size_t>(v->nRanks);
  uint64_t s = 0;
  for (int i = 0; i < v->nRanks; i++) s += __atomic_load_n(&r[i], __ATOMIC_ACQUIRE);
  return s;
}

uint64_t masked(uint64_t x, int bits) { return bits >= 64 ? x : x & ((1ull << bits) - 1); }

bool bitsOk(const View *v, const char *fn, int bits) {
  if (bits == 32 || bits == 64) return true;
  bad(v, flagcxInvalidArgument, "%s: bits is %d, not 32 or 64", fn, bits);
  return false;
}

// Waits until get() >= least; false (logged) on an error or FLAGCX_TIMEOUT.
template <typename Get>
bool waitUntil(const View *v, const char *fn, uint64_t least, Get get) {
  flagcx::Backoff bo;
  while (get() < least) {
    if (__atomic_load_n(v->error, __ATOMIC_ACQUIRE) != flagcxSuccess) return false;
    if (bo.expired()) {
      bad(v, flagcxSystemError, "%s: waited FLAGCX_TIMEOUT for %llu", fn,
          static_cast<unsigned long long>(least));
      return false;
    }
    bo.idle();
  }
  return true;
}

struct PutArgs {
  const void *comm, *dst, *src;
  size_t dstOff, srcOff, bytes;
  flagcxDevTeamKind_t team;
  int peer;
  uint32_t signal = kNone, counter = kNone;
  uint64_t add = 0;
};

void put(const PutArgs &a, const char *fn) {
  const View *v = viewOf(a.comm, fn);
  if (!v) return;
  int w = worldOf(v, a.team, a.peer, fn);
  const Mem *d = w < 0 ? nullptr : memOf(v, a.dst, fn, "dst");
  const Mem *s = d ? memOf(v, a.src, fn, "src") : nullptr;
  if (!s || !slotOk(v, fn, a.signal, a.counter) ||
      !inRange(v, fn, "dst", a.dstOff, a.bytes, d->peerSize[w], w) ||
      !inRange(v, fn, "src", a.srcOff, a.bytes, s->size, v->rank))
    return;
  char *to = d->peerBase[w];
  if (!to || (a.signal != kNone && !v->peerWords[w]) || pending(v)) {
    flagcxDevDesc x = desc(flagcxDevOpPut, w);
    x.dstMem = d->id, x.srcMem = s->id, x.dstOff = a.dstOff, x.srcOff = a.srcOff;
    x.bytes = a.bytes, x.signal = a.signal, x.add = a.add, x.counter = a.counter;
    enqueue(v, x);
    return;
  }
  memmove(to + a.dstOff, s->base + a.srcOff, a.bytes);
  if (a.signal != kNone) signalRow(v, w, a.signal, a.add);
  else __atomic_thread_fence(__ATOMIC_RELEASE);
  if (a.counter != kNone) __atomic_fetch_add(&v->counters[a.counter], 1, __ATOMIC_RELEASE);
}

void putValue(const void *comm, const void *dst, size_t dstOff, uint64_t value,
              flagcxDevTeamKind_t team, int peer, uint32_t signal, uint64_t add, const char *fn) {
  const View *v = viewOf(comm, fn);
  if (!v) return;
  int w = worldOf(v, team, peer, fn);
  const Mem *d = w < 0 ? nullptr : memOf(v, dst, fn, "dst");
  if (!d || !slotOk(v, fn, signal, kNone) || !inRange(v, fn, "dst", dstOff, 8, d->peerSize[w], w))
    return;
  char *to = d->peerBase[w];
  if (!to || (signal != kNone && !v->peerWords[w]) || pending(v) ||
      reinterpret_cast<uintptr_t>(to + dstOff) % 8 != 0) {
    flagcxDevDesc x = desc(flagcxDevOpValue, w);
    x.dstMem = d->id, x.dstOff = dstOff, x.value = value, x.signal = signal, x.add = add;
    enqueue(v, x);
    return;
  }
  __atomic_store_n(reinterpret_cast<uint64_t *>(to + dstOff), value, __ATOMIC_RELEASE);
  if (signal != kNone) signalRow(v, w, signal, add);
}

void signal(const void *comm, flagcxDevTeamKind_t team, int peer, uint32_t sig, uint64_t add,
            const char *fn) {
  const View *v = viewOf(comm, fn);
  if (!v) return;
  int w = worldOf(v, team, peer, fn);
  if (w < 0 || !slotOk(v, fn, sig, kNone)) return;
  signalRow(v, w, sig, add);
}

// The barrier row of (team, index), or -1 (logged).
int barrierRow(const View *v, flagcxDevTeamKind_t team, uint32_t index, const char *fn) {
  if (team < FLAGCX_TEAM_INTRA || team > FLAGCX_TEAM_WORLD) {
    bad(v, flagcxInvalidArgument, "%s: team kind %d is not INTRA, INTER or WORLD", fn, team);
    return -1;
  }
  if (index >= static_cast<uint32_t>(v->nBarriers[team])) {
    bad(v, flagcxInvalidArgument, "%s: barrier %u of team kind %d, but %d requested", fn, index,
        team, v->nBarriers[team]);
    return -1;
  }
  return v->barrierRow[team] + static_cast<int>(index);
}

void arrive(const View *v, flagcxDevTeamKind_t team, int row) {
  __atomic_fetch_add(&v->epoch[row], 1, __ATOMIC_RELAXED);
  for (int i = 0; i < v->teamSize[team]; i++)
    if (i != v->teamRank[team]) signalRow(v, v->teamWorld[team][i], static_cast<uint32_t>(row), 1);
}

// Waits for the arrivals of the team's other members, and for this rank's
// own operations queued before (a put to itself through the proxy is
// visible after the barrier, as one to any member is).
void barrierWait(const View *v, flagcxDevTeamKind_t team, int row, const char *fn) {
  uint64_t upTo = __atomic_load_n(&v->queue->head, __ATOMIC_ACQUIRE);
  if (!waitUntil(v, fn, upTo, [v] { return __atomic_load_n(&v->queue->done, __ATOMIC_ACQUIRE); }))
    return;
  uint64_t target = __atomic_load_n(&v->epoch[row], __ATOMIC_RELAXED);
  const uint64_t *r = v->words + static_cast<size_t>(row) * static_cast<size_t>(v->nRanks);
  for (int i = 0; i < v->teamSize[team]; i++) {
    if (i == v->teamRank[team]) continue;
    const uint64_t *word = &r[v->teamWorld[team][i]];
    if (!waitUntil(v, fn, target, [word] { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }))
      return;
  }
}

}  // namespace

// ---- The entry points (FlagCX's argument order) ----

#define FLAGCX_PUT_PARAMS                                                                   \
  const void *comm, const void *dst, size_t dstOffset, const void *src, size_t srcOffset,  \
      size_t bytes, flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t,             \
      flagcxDevCoopKind_t, flagcxDevMemoryScope_t, flagcxDevMemoryOrder_t
#define FLAGCX_PUT_ARGS comm, dst, src, dstOffset, srcOffset, bytes, teamKind, peer

extern "C" {

void flagcxDevPut(FLAGCX_PUT_PARAMS) { put(PutArgs{FLAGCX_PUT_ARGS}, __func__); }

void flagcxDevPut_RSigInc(FLAGCX_PUT_PARAMS, flagcxDevSignal_t remoteSignal) {
  PutArgs a{FLAGCX_PUT_ARGS};
  a.signal = remoteSignal, a.add = 1;
  put(a, __func__);
}

void flagcxDevPut_RSigAdd(FLAGCX_PUT_PARAMS, flagcxDevSignal_t remoteSignal,
                          uint64_t signalValue) {
  PutArgs a{FLAGCX_PUT_ARGS};
  a.signal = remoteSignal, a.add = signalValue;
  put(a, __func__);
}

void flagcxDevPut_LCtrInc(FLAGCX_PUT_PARAMS, flagcxDevCounter_t localCounter) {
  PutArgs a{FLAGCX_PUT_ARGS};
  a.counter = localCounter;
  put(a, __func__);
}

void flagcxDevPut_RSigInc_LCtrInc(FLAGCX_PUT_PARAMS, flagcxDevSignal_t remoteSignal,
                                  flagcxDevCounter_t localCounter) {
  PutArgs a{FLAGCX_PUT_ARGS};
  a.signal = remoteSignal, a.add = 1, a.counter = localCounter;
  put(a, __func__);
}

void flagcxDevPut_RSigAdd_LCtrInc(FLAGCX_PUT_PARAMS, flagcxDevSignal_t remoteSignal,
                                  uint64_t signalValue, flagcxDevCounter_t localCounter) {
  PutArgs a{FLAGCX_PUT_ARGS};
  a.signal = remoteSignal, a.add = signalValue, a.counter = localCounter;
  put(a, __func__);
}

void flagcxDevGet(const void *comm, const void *src, size_t srcOffset, const void *dst,
                  size_t dstOffset, size_t bytes, flagcxDevTeamKind_t teamKind, int peer,
                  flagcxDevContext_t, flagcxDevCoopKind_t, flagcxDevMemoryScope_t,
                  flagcxDevMemoryOrder_t) {
  const char *fn = __func__;
  const View *v = viewOf(comm, fn);
  if (!v) return;
  int w = worldOf(v, teamKind, peer, fn);
  const Mem *s = w < 0 ? nullptr : memOf(v, src, fn, "src");
  const Mem *d = s ? memOf(v, dst, fn, "dst") : nullptr;
  if (!d || !inRange(v, fn, "src", srcOffset, bytes, s->peerSize[w], w) ||
      !inRange(v, fn, "dst", dstOffset, bytes, d->size, v->rank))
    return;
  if (s->peerBase[w] && !pending(v)) {
    memmove(d->base + dstOffset, s->peerBase[w] + srcOffset, bytes);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return;
  }
  flagcxDevDesc x = desc(flagcxDevOpGet, w);
  x.dstMem = d->id, x.srcMem = s->id, x.dstOff = dstOffset, x.srcOff = srcOffset, x.bytes = bytes;
  enqueue(v, x);
}

void flagcxDevPutValue(const void *comm, const void *dst, size_t dstOffset, uint64_t value,
                       flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t,
                       flagcxDevCoopKind_t, flagcxDevMemoryScope_t, flagcxDevMemoryOrder_t) {
  putValue(comm, dst, dstOffset, value, teamKind, peer, kNone, 0, __func__);
}

void flagcxDevPutValue_RSigInc(const void *comm, const void *dst, size_t dstOffset,
                               uint64_t value, flagcxDevTeamKind_t teamKind, int peer,
                               flagcxDevContext_t, flagcxDevCoopKind_t, flagcxDevMemoryScope_t,
                               flagcxDevMemoryOrder_t, flagcxDevSignal_t remoteSignal) {
  putValue(comm, dst, dstOffset, value, teamKind, peer, remoteSignal, 1, __func__);
}

void flagcxDevPutValue_RSigAdd(const void *comm, const void *dst, size_t dstOffset,
                               uint64_t value, flagcxDevTeamKind_t teamKind, int peer,
                               flagcxDevContext_t, flagcxDevCoopKind_t, flagcxDevMemoryScope_t,
                               flagcxDevMemoryOrder_t, flagcxDevSignal_t remoteSignal,
                               uint64_t signalValue) {
  putValue(comm, dst, dstOffset, value, teamKind, peer, remoteSignal, signalValue, __func__);
}

void flagcxDevSignalInc(const void *comm, flagcxDevTeamKind_t teamKind, int peer,
                        flagcxDevSignal_t sig, flagcxDevContext_t, flagcxDevCoopKind_t,
                        flagcxDevMemoryScope_t) {
  signal(comm, teamKind, peer, sig, 1, __func__);
}

void flagcxDevSignalAdd(const void *comm, flagcxDevTeamKind_t teamKind, int peer,
                        flagcxDevSignal_t sig, uint64_t value, flagcxDevContext_t,
                        flagcxDevCoopKind_t, flagcxDevMemoryScope_t) {
  signal(comm, teamKind, peer, sig, value, __func__);
}

uint64_t flagcxDevReadSignal(const void *comm, flagcxDevSignal_t sig, int bits,
                             flagcxDevContext_t, flagcxDevMemoryOrder_t) {
  const View *v = viewOf(comm, __func__);
  if (!v || !slotOk(v, __func__, sig, kNone) || !bitsOk(v, __func__, bits)) return 0;
  return masked(rowSum(v, sig) - v->signalBase[sig], bits);
}

uint64_t flagcxDevReadCounter(const void *comm, flagcxDevCounter_t counter, int bits,
                              flagcxDevContext_t, flagcxDevMemoryOrder_t) {
  const View *v = viewOf(comm, __func__);
  if (!v || !slotOk(v, __func__, kNone, counter) || !bitsOk(v, __func__, bits)) return 0;
  return masked(__atomic_load_n(&v->counters[counter], __ATOMIC_ACQUIRE), bits);
}

void flagcxDevWaitSignal(const void *comm, flagcxDevSignal_t sig, uint64_t least, int bits,
                         flagcxDevContext_t ctx, flagcxDevCoopKind_t, flagcxDevMemoryOrder_t o) {
  const View *v = viewOf(comm, __func__);
  if (!v || !slotOk(v, __func__, sig, kNone) || !bitsOk(v, __func__, bits)) return;
  waitUntil(v, __func__, masked(least, bits),
            [&] { return flagcxDevReadSignal(comm, sig, bits, ctx, o); });
}

void flagcxDevWaitCounter(const void *comm, flagcxDevCounter_t counter, uint64_t least, int bits,
                          flagcxDevContext_t ctx, flagcxDevCoopKind_t, flagcxDevMemoryOrder_t o) {
  const View *v = viewOf(comm, __func__);
  if (!v || !slotOk(v, __func__, kNone, counter) || !bitsOk(v, __func__, bits)) return;
  waitUntil(v, __func__, masked(least, bits),
            [&] { return flagcxDevReadCounter(comm, counter, bits, ctx, o); });
}

void flagcxDevFlush(const void *comm, flagcxDevContext_t, flagcxDevCoopKind_t,
                    flagcxDevMemoryOrder_t) {
  const View *v = viewOf(comm, __func__);
  if (!v) return;
  uint64_t upTo = __atomic_load_n(&v->queue->head, __ATOMIC_ACQUIRE);
  waitUntil(v, __func__, upTo, [v] { return __atomic_load_n(&v->queue->done, __ATOMIC_ACQUIRE); });
}

void flagcxDevResetSignal(const void *comm, flagcxDevContext_t, flagcxDevSignal_t slot) {
  const View *v = viewOf(comm, __func__);
  if (!v || !slotOk(v, __func__, slot, kNone)) return;
  v->signalBase[slot] = rowSum(v, slot);
  v->shadow[slot] = 0;
}

void flagcxDevResetCounter(const void *comm, flagcxDevContext_t, flagcxDevCounter_t slot) {
  const View *v = viewOf(comm, __func__);
  if (!v || !slotOk(v, __func__, kNone, slot)) return;
  __atomic_store_n(&v->counters[slot], 0, __ATOMIC_RELEASE);
}

void flagcxDevIncreaseSignalShadow(const void *comm, flagcxDevContext_t, flagcxDevSignal_t slot,
                                   uint64_t delta) {
  const View *v = viewOf(comm, __func__);
  if (!v || !slotOk(v, __func__, slot, kNone)) return;
  v->shadow[slot] += delta;
}

void flagcxDevWaitSignalMeetShadow(const void *comm, flagcxDevContext_t ctx,
                                   flagcxDevSignal_t slot, int bits, flagcxDevCoopKind_t coop,
                                   flagcxDevMemoryOrder_t o) {
  const View *v = viewOf(comm, __func__);
  if (!v || !slotOk(v, __func__, slot, kNone)) return;
  flagcxDevWaitSignal(comm, slot, v->shadow[slot], bits, ctx, coop, o);
}

void flagcxDevBarrierArrive(const void *comm, flagcxDevTeamKind_t teamKind, uint32_t index,
                            flagcxDevContext_t, flagcxDevCoopKind_t, flagcxDevMemoryOrder_t,
                            flagcxDevMemoryScope_t) {
  const View *v = viewOf(comm, __func__);
  int row = v ? barrierRow(v, teamKind, index, __func__) : -1;
  if (row >= 0) arrive(v, teamKind, row);
}

void flagcxDevBarrierWait(const void *comm, flagcxDevTeamKind_t teamKind, uint32_t index,
                          flagcxDevContext_t, flagcxDevCoopKind_t, flagcxDevMemoryOrder_t,
                          flagcxDevMemoryScope_t) {
  const View *v = viewOf(comm, __func__);
  int row = v ? barrierRow(v, teamKind, index, __func__) : -1;
  if (row >= 0) barrierWait(v, teamKind, row, __func__);
}

void flagcxDevBarrierSync(const void *comm, flagcxDevTeamKind_t teamKind, uint32_t index,
                          flagcxDevContext_t, flagcxDevCoopKind_t, flagcxDevMemoryOrder_t,
                          flagcxDevMemoryScope_t) {
  const View *v = viewOf(comm, __func__);
  int row = v ? barrierRow(v, teamKind, index, __func__) : -1;
  if (row < 0) return;
  arrive(v, teamKind, row);
  barrierWait(v, teamKind, row, __func__);
}

}  // extern "C"
