/* A program written only to FlagCX v0.13's one-sided C API: windows with
 * PutSignal / Signal / WaitSignal, regions with Put / Get / BatchPut /
 * PutValue and the completion counter, and bad input.  Forks NRANKS ranks
 * (argv[1], default 2); exits 0 when every rank saw the right bytes.  The
 * transport is the environment's choice (shm by default; FLAGCX_SHM_DISABLE=1
 * for sockets; FLAGCX_IB_SOFTWARE_DEVICE=2 for verbs on the software device).
 * Each buffer kind is tried twice: memory from flagcxMemAlloc (mapped by
 * same-host peers) and malloc'ed memory (the target's service thread). */
#include <flagcx.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXRANKS 8
#define CHUNK 300007 /* bytes each rank puts into each peer's window: odd on purpose */
#define BLK 65543    /* region block */
#define BURST 300    /* small puts in flight to each peer */

static int g_rank;

#define CHECK(call)                                                                      \
  do {                                                                                   \
    flagcxResult_t r_ = (call);                                                          \
    if (r_ != flagcxSuccess) {                                                           \
      fprintf(stderr, "rank %d: %s:%d %s failed: %s (%s)\n", g_rank, __FILE__, __LINE__, \
              #call, flagcxGetErrorString(r_), flagcxGetLastError(NULL));                \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

#define EXPECT_CODE(call, code)                                                          \
  do {                                                                                   \
    flagcxResult_t r_ = (call);                                                          \
    if (r_ != (code)) {                                                                  \
      fprintf(stderr, "rank %d: %s:%d %s gave %s, want %s\n", g_rank, __FILE__, __LINE__, \
              #call, flagcxGetErrorString(r_), flagcxGetErrorString(code));              \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

static unsigned char pat(int from, int to, size_t i, int round) {
  return (unsigned char)(from * 37 + to * 11 + (int)(i % 251) + round * 7 + 1);
}

/* Two rounds of "every rank puts CHUNK bytes into every peer's window, then
 * waits for one signal from each", then signals alone. */
static int windowRound(flagcxComm_t comm, flagcxStream_t s, flagcxDeviceHandle_t dev, int n,
                       int useAlloc) {
  int rank = g_rank;
  size_t winSize = (size_t)n * CHUNK;
  unsigned char *win = NULL;
  if (useAlloc) CHECK(flagcxMemAlloc((void **)&win, winSize, flagcxMemCCL));
  else win = malloc(winSize);
  memset(win, 0, winSize);
  flagcxWindow_t w = NULL;
  CHECK(flagcxCommWindowRegister(comm, win, winSize, &w, FLAGCX_WIN_COLL_SYMMETRIC, flagcxMemCCL));
  unsigned char *src = malloc(CHUNK);
  flagcxWaitSignalDesc_t descs[MAXRANKS];
  for (int round = 0; round < 2; round++) {
    for (int p = 0; p < n; p++) {
      if (p == rank) continue;
      for (size_t i = 0; i < CHUNK; i++) src[i] = pat(rank, p, i, round);
      CHECK(flagcxPutSignal(src, CHUNK, flagcxUint8, p, w, (size_t)rank * CHUNK, 0, comm, s));
      CHECK(dev->streamSynchronize(s)); /* src is reused for the next peer */
    }
    int nd = 0;
    for (int p = 0; p < n; p++)
      if (p != rank) descs[nd++] = (flagcxWaitSignalDesc_t){1, p};
    CHECK(flagcxWaitSignal(nd, descs, comm, s));
    CHECK(dev->streamSynchronize(s));
    for (int p = 0; p < n; p++) {
      if (p == rank) continue;
      for (size_t i = 0; i < CHUNK; i++) {
        unsigned char want = pat(p, rank, i, round);
        if (win[(size_t)p * CHUNK + i] != want) {
          fprintf(stderr, "rank %d (%s window) round %d: byte %zu from rank %d is %d, want %d\n",
                  rank, useAlloc ? "flagcxMemAlloc" : "malloc", round, i, p,
                  win[(size_t)p * CHUNK + i], want);
          return 1;
        }
      }
    }
    /* Nobody may overwrite a window before its owner checked it. */
    CHECK(flagcxBarrier(comm, s));
    CHECK(dev->streamSynchronize(s));
  }
  /* Signals alone: three to the next rank, waits consume exactly three. */
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  for (int k = 0; k < 3; k++) CHECK(flagcxSignal(next, 0, comm, s));
  descs[0] = (flagcxWaitSignalDesc_t){2, prev};
  CHECK(flagcxWaitSignal(1, descs, comm, s));
  descs[0] = (flagcxWaitSignalDesc_t){1, prev};
  CHECK(flagcxWaitSignal(1, descs, comm, s));
  CHECK(flagcxWaitSignal(0, NULL, comm, s));
  CHECK(dev->streamSynchronize(s));

  /* Bad input: nothing is enqueued, nothing written. */
  EXPECT_CODE(flagcxPutSignal(src, 1, flagcxUint8, next, w, winSize, 0, comm, s), flagcxInvalidArgument);
  EXPECT_CODE(flagcxPutSignal(src, 2, flagcxUint8, next, w, winSize - 1, 0, comm, s), flagcxInvalidArgument);
  EXPECT_CODE(flagcxPutSignal(src, 1, flagcxUint8, n, w, 0, 0, comm, s), flagcxInvalidArgument);
  EXPECT_CODE(flagcxPutSignal(src, 1, flagcxUint8, next, (flagcxWindow_t)src, 0, 0, comm, s), flagcxInvalidArgument);
  EXPECT_CODE(flagcxSignal(-1, 0, comm, s), flagcxInvalidArgument);
  descs[0] = (flagcxWaitSignalDesc_t){1, n};
  EXPECT_CODE(flagcxWaitSignal(1, descs, comm, s), flagcxInvalidArgument);
  EXPECT_CODE(flagcxWaitSignal(-1, descs, comm, s), flagcxInvalidArgument);
  EXPECT_CODE(flagcxWaitSignal(1, NULL, comm, s), flagcxInvalidArgument);

  CHECK(flagcxBarrier(comm, s));
  CHECK(dev->streamSynchronize(s));
  CHECK(flagcxCommWindowDeregister(comm, w, flagcxMemCCL));
  EXPECT_CODE(flagcxPutSignal(src, 1, flagcxUint8, next, w, 0, 0, comm, s), flagcxInvalidArgument);
  free(src);
  if (useAlloc) CHECK(flagcxMemFree(win, flagcxMemCCL));
  else free(win);
  return 0;
}

/* Regions: 0 from flagcxMemAlloc, 1 from malloc; each of size R laid out as
 * [n blocks written by Put from each rank][n blocks by BatchPut][a source
 * block for Get][n 8-byte PutValue slots]. */
static unsigned char *reg[2];

/* Where things are in a region of size R. */
struct RegionLayout {
  size_t R, srcAt, valAt, burstAt;
};

/* Put, BatchPut, PutValue and a burst of small puts to every peer; *ops
 * counts the operations the completion counter will see. */
static int putToPeers(flagcxComm_t comm, const struct RegionLayout *l, int n, uint64_t *ops) {
  int rank = g_rank;
  for (int p = 0; p < n; p++) {
    if (p == rank) continue;
    /* Put: my source block of region k into block `rank` of the peer's other region. */
    for (int k = 0; k < 2; k++) {
      CHECK(flagcxPut(comm, p, l->srcAt, (size_t)rank * BLK, BLK, k, 1 - k));
      (*ops)++;
    }
    /* BatchPut: three pieces of my region-0 source block into the peer's
     * region 1 BatchPut area, block `rank`, in reverse order. */
    size_t a = BLK / 3, b = BLK / 3, c = BLK - a - b;
    size_t so[3] = {l->srcAt, l->srcAt + a, l->srcAt + a + b};
    size_t dOff = (size_t)(n + rank) * BLK;
    size_t doff[3] = {dOff + b + c, dOff + c, dOff};
    size_t sz[3] = {a, b, c};
    int si[3] = {0, 0, 0}, di[3] = {1, 1, 1};
    CHECK(flagcxBatchPut(comm, p, so, doff, sz, si, di, 3));
    (*ops)++;
    CHECK(flagcxPutValue(comm, p, 0x1122334455667788ull + (uint64_t)rank, l->valAt + (size_t)rank * 8, 0));
    (*ops)++;
    /* A burst of small puts, none waited for, into the peer's region 1. */
    for (size_t j = 0; j < BURST; j++) {
      CHECK(flagcxPut(comm, p, l->srcAt + j % 200, l->burstAt + ((size_t)rank * BURST + j) * 256, 256, 0, 1));
      (*ops)++;
    }
  }
  return 0;
}

/* What every peer's putToPeers left in this rank's regions. */
static int checkPuts(const struct RegionLayout *l, int n) {
  int rank = g_rank;
  for (int p = 0; p < n; p++) {
    if (p == rank) continue;
    for (int k = 0; k < 2; k++)
      for (size_t i = 0; i < BLK; i++) {
        unsigned char want = pat(p, k, i, 9);
        if (reg[1 - k][(size_t)p * BLK + i] != want) {
          fprintf(stderr, "rank %d: Put from rank %d into region %d: byte %zu is %d, want %d\n",
                  rank, p, 1 - k, i, reg[1 - k][(size_t)p * BLK + i], want);
          return 1;
        }
      }
    size_t a = BLK / 3, b = BLK / 3, c = BLK - a - b;
    unsigned char *d = reg[1] + (size_t)(n + p) * BLK;
    for (size_t i = 0; i < BLK; i++) {
      size_t j = i < a ? b + c + i : i < a + b ? c + (i - a) : i - a - b;
      if (d[j] != pat(p, 0, i, 9)) {
        fprintf(stderr, "rank %d: BatchPut from rank %d: source byte %zu wrong\n", rank, p, i);
        return 1;
      }
    }
    for (size_t j = 0; j < BURST; j++)
      for (size_t i = 0; i < 256; i++)
        if (reg[1][l->burstAt + ((size_t)p * BURST + j) * 256 + i] != pat(p, 0, j % 200 + i, 9)) {
          fprintf(stderr, "rank %d: burst put %zu from rank %d: byte %zu wrong\n", rank, j, p, i);
          return 1;
        }
    uint64_t v;
    memcpy(&v, reg[0] + l->valAt + (size_t)p * 8, 8);
    if (v != 0x1122334455667788ull + (uint64_t)p) {
      fprintf(stderr, "rank %d: PutValue from rank %d: %llx\n", rank, p, (unsigned long long)v);
      return 1;
    }
  }
  return 0;
}

/* Bad input: bounds named, nothing written, the counter unchanged. */
static int badRegionInput(flagcxComm_t comm, flagcxStream_t s, flagcxDeviceHandle_t dev,
                          const struct RegionLayout *l, int n) {
  int rank = g_rank;
  size_t R = l->R, srcAt = l->srcAt;
  int next = (rank + 1) % n;
  uint64_t now = 0;
  CHECK(flagcxReadCounter(comm, &now));
  EXPECT_CODE(flagcxPut(comm, next, 0, R - 10, 11, 0, 0), flagcxInvalidArgument);
  EXPECT_CODE(flagcxPut(comm, next, R, 0, 1, 0, 0), flagcxInvalidArgument);
  EXPECT_CODE(flagcxPut(comm, next, 0, 0, 1, 2, 0), flagcxInvalidArgument);
  EXPECT_CODE(flagcxPut(comm, next, 0, 0, 1, 0, -1), flagcxInvalidArgument);
  EXPECT_CODE(flagcxPut(comm, n, 0, 0, 1, 0, 0), flagcxInvalidArgument);
  EXPECT_CODE(flagcxPut(comm, next, 0, SIZE_MAX, 2, 0, 0), flagcxInvalidArgument);
  EXPECT_CODE(flagcxGet(comm, next, R - 1, 0, 2, 0, 0), flagcxInvalidArgument);
  EXPECT_CODE(flagcxPutValue(comm, next, 1, R - 4, 0), flagcxInvalidArgument);
  size_t bo[2] = {srcAt, srcAt}, bd[2] = {R - 64, R}, bs[2] = {1, 1};
  int bi[2] = {0, 0};
  EXPECT_CODE(flagcxBatchPut(comm, next, bo, bd, bs, bi, bi, 2), flagcxInvalidArgument);
  uint64_t after = 0;
  CHECK(flagcxReadCounter(comm, &after));
  if (after != now) {
    fprintf(stderr, "rank %d: rejected calls moved the counter %llu -> %llu\n", rank,
            (unsigned long long)now, (unsigned long long)after);
    return 1;
  }
  CHECK(flagcxBarrier(comm, s));
  CHECK(dev->streamSynchronize(s));
  /* The rejected BatchPut's first (good) entry must not have landed either. */
  for (int k = 0; k < 64; k++)
    if (reg[0][R - 64 + (size_t)k] != 0) {
      fprintf(stderr, "rank %d: a rejected BatchPut wrote byte %d of the unused tail\n", rank, k);
      return 1;
    }
  CHECK(flagcxOneSideStagingDeregister(comm));
  EXPECT_CODE(flagcxPutValue(comm, next, 1, 0, 0), flagcxInvalidArgument);
  return 0;
}

static int regionRound(flagcxComm_t comm, flagcxStream_t s, flagcxDeviceHandle_t dev, int n) {
  int rank = g_rank;
  struct RegionLayout l;
  /* ... then n burst blocks (many small puts in flight), and 64 bytes nobody
   * writes at the end */
  l.valAt = (size_t)(2 * n + 1) * BLK;
  l.burstAt = l.valAt + (size_t)n * 8;
  l.R = l.burstAt + (size_t)n * BURST * 256 + 64;
  l.srcAt = (size_t)2 * n * BLK;
  size_t R = l.R, srcAt = l.srcAt;
  CHECK(flagcxMemAlloc((void **)&reg[0], R, flagcxMemCCL));
  reg[1] = malloc(R);
  for (int k = 0; k < 2; k++) {
    memset(reg[k], 0, R);
    for (size_t i = 0; i < BLK; i++) reg[k][srcAt + i] = pat(rank, k, i, 9);
  }
  CHECK(flagcxOneSideRegister(comm, reg[0], R));
  CHECK(flagcxOneSideRegister(comm, reg[1], R));
  uint64_t *sigbuf = calloc((size_t)n, 8), *staging = calloc(1, 8);
  CHECK(flagcxOneSideSignalRegister(comm, sigbuf, (size_t)n * 8, FLAGCX_PTR_HOST));
  CHECK(flagcxOneSideStagingRegister(comm, staging, 8));
  uint64_t before = 0;
  CHECK(flagcxReadCounter(comm, &before));

  uint64_t ops = 0;
  if (putToPeers(comm, &l, n, &ops)) return 1;
  CHECK(flagcxWaitCounter(comm, before + ops));
  CHECK(flagcxBarrier(comm, s));
  CHECK(dev->streamSynchronize(s));
  if (checkPuts(&l, n)) return 1;
  /* Get: the previous rank's source blocks of both regions. */
  int prev = (rank + n - 1) % n;
  uint64_t now = 0;
  CHECK(flagcxReadCounter(comm, &now));
  CHECK(flagcxGet(comm, prev, srcAt, 0, BLK, 0, 1));
  CHECK(flagcxGet(comm, prev, srcAt, (size_t)n * BLK, BLK, 1, 0));
  CHECK(flagcxWaitCounter(comm, now + 2));
  for (size_t i = 0; i < BLK; i++)
    if (reg[1][i] != pat(prev, 0, i, 9) || reg[0][(size_t)n * BLK + i] != pat(prev, 1, i, 9)) {
      fprintf(stderr, "rank %d: Get from rank %d: byte %zu wrong\n", rank, prev, i);
      return 1;
    }
  if (badRegionInput(comm, s, dev, &l, n)) return 1;
  CHECK(flagcxBarrier(comm, s));
  CHECK(dev->streamSynchronize(s));
  free(sigbuf);
  free(staging);
  return 0;  /* regions stay registered until the communicator goes */
}

static int runRank(int rank, int n, flagcxUniqueId *id) {
  g_rank = rank;
  flagcxDeviceHandle_t dev;
  flagcxComm_t comm;
  flagcxStream_t s;
  CHECK(flagcxDeviceHandleInit(&dev));
  CHECK(flagcxCommInitRank(&comm, n, id, rank));
  CHECK(dev->streamCreate(&s));
  /* Before any registration: a wait is bad input. */
  flagcxWaitSignalDesc_t d = {1, (rank + 1) % n};
  EXPECT_CODE(flagcxWaitSignal(1, &d, comm, s), flagcxInvalidArgument);
  if (windowRound(comm, s, dev, n, 1)) return 1;
  if (windowRound(comm, s, dev, n, 0)) return 1;
  if (regionRound(comm, s, dev, n)) return 1;
  CHECK(dev->streamDestroy(s));
  CHECK(flagcxCommDestroy(comm));
  CHECK(flagcxMemFree(reg[0], flagcxMemCCL));
  free(reg[1]);
  CHECK(flagcxDeviceHandleFree(dev));
  if (rank == 0) printf("one-sided API at %d ranks: correct\n", n);
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  if (n < 2 || n > MAXRANKS) {
    fprintf(stderr, "usage: %s [nranks 2..%d]\n", argv[0], MAXRANKS);
    return 2;
  }
  /* Fork first, then make the id (see tests/common/harness.h). */
  flagcxUniqueId id;
  int fds[MAXRANKS][2];
  pid_t kids[MAXRANKS];
  for (int r = 1; r < n; r++) {
    if (pipe(fds[r]) != 0) return 1;
    kids[r] = fork();
    if (kids[r] == 0) {
      alarm(300);
      size_t got = 0;
      while (got < sizeof id) {
        ssize_t k = read(fds[r][0], (char *)&id + got, sizeof id - got);
        if (k <= 0) _exit(3);
        got += (size_t)k;
      }
      _exit(runRank(r, n, &id));
    }
    close(fds[r][0]);
  }
  g_rank = 0;
  CHECK(flagcxGetUniqueId(&id));
  for (int r = 1; r < n; r++) {
    if (write(fds[r][1], &id, sizeof id) != (ssize_t)sizeof id) return 1;
    close(fds[r][1]);
  }
  int bad = runRank(0, n, &id);
  for (int r = 1; r < n; r++) {
    int st = 0;
    if (waitpid(kids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d failed (status %d)\n", r, st);
      bad = 1;
    }
  }
  return bad;
}
