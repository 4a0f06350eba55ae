// The checks of tests/gpu/cuda_devapi_test.cu, written once for both kinds
// of rank: CUDA kernels (included by the .cu under nvcc: device functions,
// the block as the cooperative group) and host ranks of a mixed job
// (cuda_devapi_host.cc: host functions, one thread).  The includer defines
// DEVAPI_FN, DEVAPI_TID, DEVAPI_NT, DEVAPI_SYNC(), DEVAPI_COOP and
// DCHECK(cond) (records the first failed line).
#pragma once
#include <stdint.h>

#include "flagcx_device_unified.h"

namespace devapi {

constexpr size_t kChunk = 4096;
constexpr size_t kBig = 256 * 1024;
constexpr int kRounds = 8;
constexpr size_t kWin = kChunk * 8 + kBig * kRounds;
constexpr auto W = FLAGCX_TEAM_WORLD;
constexpr auto B = DEVAPI_COOP;  // the cooperative group
constexpr auto kSys = FLAGCX_MEMORY_SCOPE_SYSTEM;
constexpr auto kRel = FLAGCX_MEMORY_ORDER_RELEASE;
constexpr auto kAcq = FLAGCX_MEMORY_ORDER_ACQUIRE;

DEVAPI_FN char *local(const void *m, size_t off) {
  return ((const flagcxDevMemView *)m)->base + off;
}

DEVAPI_FN void putsAndSignals(const void *c, const void *m, int rank, int n) {
  for (size_t i = DEVAPI_TID; i < 64; i += DEVAPI_NT) local(m, kChunk * 7)[i] = 'a' + rank;
  DEVAPI_SYNC();
  for (int p = 0; p < n; p++) {
    flagcxDevPut_RSigInc(c, m, rank * 64, m, kChunk * 7, 64, W, p, 0, B, kSys, kRel, 0);
    flagcxDevPut_RSigAdd(c, m, kChunk + rank * 64, m, kChunk * 7, 64, W, p, 0, B, kSys, kRel, 1, 5);
    flagcxDevPut_LCtrInc(c, m, kChunk * 2 + rank * 64, m, kChunk * 7, 64, W, p, 0, B, kSys, kRel, 0);
    flagcxDevPut_RSigInc_LCtrInc(c, m, kChunk * 3 + rank * 64, m, kChunk * 7, 64, W, p, 0, B,
                                 kSys, kRel, 2, 1);
    flagcxDevPut_RSigAdd_LCtrInc(c, m, kChunk * 4 + rank * 64, m, kChunk * 7, 64, W, p, 0, B,
                                 kSys, kRel, 2, 10, 1);
    flagcxDevSignalInc(c, W, p, 3, 0, B, kSys);
    flagcxDevSignalAdd(c, W, p, 3, 100, 0, B, kSys);
  }
  flagcxDevWaitSignal(c, 0, n, 64, 0, B, kAcq);
  flagcxDevWaitSignal(c, 1, 5u * n, 32, 0, B, kAcq);
  flagcxDevWaitSignal(c, 2, 11u * n, 64, 0, B, kAcq);
  flagcxDevWaitSignal(c, 3, 101u * n, 64, 0, B, kAcq);
  flagcxDevWaitCounter(c, 0, n, 64, 0, B, kAcq);
  flagcxDevWaitCounter(c, 1, 2u * n, 64, 0, B, kAcq);
  if (DEVAPI_TID == 0) {
    for (int p = 0; p < n; p++) {
      DCHECK(*local(m, p * 64) == 'a' + p && *local(m, p * 64 + 63) == 'a' + p);
      DCHECK(*local(m, kChunk + p * 64 + 9) == 'a' + p);
      DCHECK(*local(m, kChunk * 4 + p * 64 + 5) == 'a' + p);
    }
    DCHECK(flagcxDevReadCounter(c, 1, 64, 0, kAcq) == 2u * n);
  }
  flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
  if (DEVAPI_TID == 0) {
    DCHECK(flagcxDevReadSignal(c, 3, 64, 0, kAcq) == 101u * n);
    flagcxDevResetSignal(c, 0, 3);
    flagcxDevResetCounter(c, 0, 1);
    DCHECK(flagcxDevReadSignal(c, 3, 64, 0, kAcq) == 0);
    DCHECK(flagcxDevReadCounter(c, 1, 64, 0, kAcq) == 0);
    flagcxDevIncreaseSignalShadow(c, 0, 3, 7u * n);
  }
  flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
  for (int p = 0; p < n; p++) flagcxDevSignalAdd(c, W, p, 3, 7, 0, B, kSys);
  flagcxDevWaitSignalMeetShadow(c, 0, 3, 64, B, kAcq);
  flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
}

DEVAPI_FN void valuesGetsBarriers(const void *c, const void *m, int rank, int n) {
  const flagcxDevCommView *v = (const flagcxDevCommView *)c;
  for (int p = 0; p < n; p++) {
    uint64_t x = 1000u * (uint64_t)rank + (uint64_t)p;
    flagcxDevPutValue(c, m, kChunk * 5 + rank * 8, x, W, p, 0, B, kSys, kRel);
    flagcxDevPutValue_RSigInc(c, m, kChunk * 5 + 512 + rank * 8, x + 1, W, p, 0, B, kSys, kRel, 0);
    flagcxDevPutValue_RSigAdd(c, m, kChunk * 5 + 1024 + rank * 8, x + 2, W, p, 0, B, kSys, kRel,
                              1, 3);
  }
  flagcxDevWaitSignal(c, 0, 2u * n, 64, 0, B, kAcq);
  flagcxDevWaitSignal(c, 1, 8u * n, 64, 0, B, kAcq);
  flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
  for (int p = 0; p < n && DEVAPI_TID == 0; p++)
    for (int k = 0; k < 3; k++)
      DCHECK(*(volatile uint64_t *)local(m, kChunk * 5 + 512 * k + p * 8) ==
             1000u * (uint64_t)p + (uint64_t)rank + (uint64_t)k);
  for (int p = 0; p < n; p++)
    flagcxDevGet(c, m, p * 64, m, kChunk * 6 + p * 64, 64, W, p, 0, B, kSys, kAcq);
  flagcxDevFlush(c, 0, B, kAcq);
  for (int p = 0; p < n && DEVAPI_TID == 0; p++) DCHECK(*local(m, kChunk * 6 + p * 64 + 17) == 'a' + p);
  for (int kind = 0; kind < 3; kind++) {
    auto team = (flagcxDevTeamKind_t)kind;
    size_t slot = kChunk * 5 + 2048 + (size_t)kind * 256;
    for (int round = 1; round <= 3; round++) {
      for (int i = 0; i < v->teamSize[kind]; i++)
        flagcxDevPutValue(c, m, slot + rank * 8, 10u * rank + round, team, i, 0, B, kSys, kRel);
      if (round == 2) {
        flagcxDevBarrierArrive(c, team, 1, 0, B, kRel, kSys);
        flagcxDevBarrierWait(c, team, 1, 0, B, kAcq, kSys);
      } else {
        flagcxDevBarrierSync(c, team, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
      }
      for (int i = 0; i < v->teamSize[kind] && DEVAPI_TID == 0; i++) {
        int w = v->teamWorld[kind][i];
        DCHECK(*(volatile uint64_t *)local(m, slot + w * 8) >= 10u * w + round);
      }
      flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, kSys);
    }
  }
}

// Data before signal: rank 0 puts kRounds rounds to rank n-1, which checks
// each round as soon as its signal says so; at system scope, then at device
// scope (GPU-scope fences and signals where the ranks share a GPU), with
// other values.
DEVAPI_FN void ordering(const void *c, const void *m, int rank, int n) {
  for (int pass = 0; pass < 2; pass++) {
    auto scope = pass ? FLAGCX_MEMORY_SCOPE_DEVICE : kSys;
    if (DEVAPI_TID == 0) flagcxDevResetSignal(c, 0, 0);
    flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, scope);
    size_t base = kChunk * 8;
    for (int k = 0; k < kRounds; k++) {
      char mark = (char)(k + 1 + 16 * pass);
      if (rank == 0) {
        for (size_t i = DEVAPI_TID; i < kBig; i += DEVAPI_NT) local(m, base + kBig * k)[i] = mark;
        DEVAPI_SYNC();
        flagcxDevPut_RSigInc(c, m, base + kBig * k, m, base + kBig * k, kBig, W, n - 1, 0, B,
                             scope, kRel, 0);
      } else if (rank == n - 1) {
        flagcxDevWaitSignal(c, 0, k + 1, 64, 0, B, kAcq);
        for (size_t i = DEVAPI_TID; i < kBig; i += DEVAPI_NT)
          DCHECK(((volatile char *)local(m, base + kBig * k))[i] == mark);
      }
    }
    flagcxDevBarrierSync(c, W, 0, 0, B, FLAGCX_MEMORY_ORDER_ACQ_REL, scope);
  }
}

}  // namespace devapi
