// The device proxy's descriptor ring (flagcxDevQueue of
// flagcx_device_unified.h) as CUDA kernels fill it (flagcx_device_cuda.h),
// for tests that play the kernels' role from host threads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>

#include "flagcx_device_unified.h"

namespace devring {

// One descriptor in: take a ticket, wait until the slot's seq equals it,
// write the bytes before seq, release, store seq = ticket + 1.
inline void enqueue(flagcxDevQueue *q, const flagcxDevDesc &d) {
  uint64_t t = __atomic_fetch_add(&q->head, 1, __ATOMIC_RELAXED);
  flagcxDevDesc *s = &q->slot[t & (q->capacity - 1)];
  while (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != t) std::this_thread::yield();
  memcpy(s, &d, offsetof(flagcxDevDesc, seq));
  __atomic_store_n(&s->seq, t + 1, __ATOMIC_RELEASE);
}

// A descriptor of `op` to world rank `peer`, without signal or counter.
inline flagcxDevDesc desc(uint32_t op, int peer) {
  flagcxDevDesc d{};
  d.op = op;
  d.peer = peer;
  d.signal = d.counter = FLAGCX_DEV_NONE;
  return d;
}

}  // namespace devring
