/* A program written to NCCL's nccl.h, linked against the drop-in
 * (-lnccl from the build tree).  Two processes, host buffers (the test runs
 * it with FLAGCX_DEVICE=host), NULL streams: every collective, send/recv in a
 * group, PreMulSum, split, shrink and revoke, non-blocking creation,
 * registration, and the calls flagcx refuses.  Exit status 0 only if every check holds. */
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_check.h"

enum { N = 64, R = 2 };

static void collectives(ncclComm_t comm, int rank) {
  float a[N], b[N * R], c[N * R];
  for (int i = 0; i < N; i++) a[i] = (float)(rank + 1 + i);

  OK(ncclAllReduce(a, b, N, ncclFloat, ncclSum, comm, NULL));
  for (int i = 0; i < N; i++) CHECK(b[i] == (float)(3 + 2 * i), "allreduce sum [%d] = %g", i, b[i]);

  OK(ncclAllReduce(a, b, N, ncclFloat, ncclAvg, comm, NULL));
  for (int i = 0; i < N; i++) CHECK(b[i] == 1.5f + i, "allreduce avg [%d] = %g", i, b[i]);

  int ia[N], ib[N];
  for (int i = 0; i < N; i++) ia[i] = rank == 0 ? i : N - i;
  OK(ncclAllReduce(ia, ib, N, ncclInt32, ncclMax, comm, NULL));
  for (int i = 0; i < N; i++) CHECK(ib[i] == (i > N - i ? i : N - i), "allreduce max [%d] = %d", i, ib[i]);

  memset(b, 0, sizeof(b));
  OK(ncclReduce(a, b, N, ncclFloat, ncclProd, 0, comm, NULL));
  if (rank == 0)
    for (int i = 0; i < N; i++) CHECK(b[i] == (float)((1 + i) * (2 + i)), "reduce prod [%d] = %g", i, b[i]);

  OK(ncclBroadcast(a, b, N, ncclFloat, 1, comm, NULL));
  for (int i = 0; i < N; i++) CHECK(b[i] == (float)(2 + i), "broadcast [%d] = %g", i, b[i]);
  for (int i = 0; i < N; i++) b[i] = rank == 0 ? -1.0f : (float)(7 * i);
  OK(ncclBcast(b, N, ncclFloat, 1, comm, NULL));
  for (int i = 0; i < N; i++) CHECK(b[i] == (float)(7 * i), "bcast [%d] = %g", i, b[i]);

  OK(ncclAllGather(a, b, N, ncclFloat, comm, NULL));
  for (int r = 0; r < R; r++)
    for (int i = 0; i < N; i++) CHECK(b[r * N + i] == (float)(r + 1 + i), "allgather [%d][%d]", r, i);

  for (int i = 0; i < N * R; i++) c[i] = (float)(rank * 1000 + i);
  OK(ncclReduceScatter(c, b, N, ncclFloat, ncclSum, comm, NULL));
  for (int i = 0; i < N; i++)
    CHECK(b[i] == (float)(1000 + 2 * (rank * N + i)), "reducescatter [%d] = %g", i, b[i]);

  OK(ncclAlltoAll(c, b, N, ncclFloat, comm, NULL));
  for (int r = 0; r < R; r++)
    for (int i = 0; i < N; i++)
      CHECK(b[r * N + i] == (float)(r * 1000 + rank * N + i), "alltoall [%d][%d]", r, i);

  memset(b, 0, sizeof(b));
  OK(ncclGather(a, b, N, ncclFloat, 1, comm, NULL));
  if (rank == 1)
    for (int r = 0; r < R; r++)
      for (int i = 0; i < N; i++) CHECK(b[r * N + i] == (float)(r + 1 + i), "gather [%d][%d]", r, i);

  OK(ncclScatter(c, b, N, ncclFloat, 0, comm, NULL));
  for (int i = 0; i < N; i++) CHECK(b[i] == (float)(rank * N + i), "scatter [%d] = %g", i, b[i]);

  /* Send/recv both ways in one group, plus a send to oneself. */
  float self[N];
  OK(ncclGroupStart());
  OK(ncclSend(a, N, ncclFloat, 1 - rank, comm, NULL));
  OK(ncclRecv(b, N, ncclFloat, 1 - rank, comm, NULL));
  OK(ncclSend(a, N, ncclFloat, rank, comm, NULL));
  OK(ncclRecv(self, N, ncclFloat, rank, comm, NULL));
  OK(ncclGroupEnd());
  for (int i = 0; i < N; i++) CHECK(b[i] == (float)(2 - rank + i), "sendrecv [%d] = %g", i, b[i]);
  for (int i = 0; i < N; i++) CHECK(self[i] == a[i], "self sendrecv [%d]", i);

  /* PreMulSum: each rank scales its own input by its own scalar. */
  ncclRedOp_t op;
  float scalar = (float)(rank + 2); /* 2 and 3 */
  OK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, comm));
  scalar = 100.0f; /* host-immediate: the value was read at creation */
  OK(ncclAllReduce(a, b, N, ncclFloat, op, comm, NULL));
  for (int i = 0; i < N; i++)
    CHECK(b[i] == (float)(2 * (1 + i) + 3 * (2 + i)), "premulsum allreduce [%d] = %g", i, b[i]);
  OK(ncclReduceScatter(c, b, N, ncclFloat, op, comm, NULL));
  for (int i = 0; i < N; i++)
    CHECK(b[i] == (float)(2 * (rank * N + i) + 3 * (1000 + rank * N + i)), "premulsum reducescatter [%d] = %g", i, b[i]);
  memset(b, 0, sizeof(b));
  OK(ncclGroupStart()); /* in a group: the working buffer lives until ncclGroupEnd */
  OK(ncclAllReduce(a, b, N, ncclFloat, op, comm, NULL));
  OK(ncclGroupEnd());
  for (int i = 0; i < N; i++)
    CHECK(b[i] == (float)(2 * (1 + i) + 3 * (2 + i)), "premulsum allreduce in a group [%d] = %g", i, b[i]);
  CHECK(ncclAllReduce(a, b, N, ncclInt32, op, comm, NULL) == ncclInvalidArgument,
        "premulsum op used with another datatype is refused");
  OK(ncclRedOpDestroy(op, comm));
  CHECK(ncclAllReduce(a, b, N, ncclFloat, op, comm, NULL) == ncclInvalidArgument,
        "destroyed op is refused");
  CHECK(ncclAllReduce(a, b, N, ncclFloat, (ncclRedOp_t)77, comm, NULL) == ncclInvalidArgument,
        "unknown op is refused");

  /* float8: moved as bytes, reduced in float32 (1 + 2 on the two ranks). */
  unsigned char f8[N], g8[N * R];
  for (int i = 0; i < N; i++) f8[i] = (unsigned char)(rank * 100 + i);
  OK(ncclAllGather(f8, g8, N, ncclFloat8e4m3, comm, NULL));
  for (int r = 0; r < R; r++)
    for (int i = 0; i < N; i++) CHECK(g8[r * N + i] == (unsigned char)(r * 100 + i), "fp8 allgather");
  memset(f8, rank == 0 ? 0x3c : 0x40, N); /* e5m2: 1.0, 2.0 */
  OK(ncclAllReduce(f8, g8, N, ncclFloat8e5m2, ncclSum, comm, NULL));
  for (int i = 0; i < N; i++) CHECK(g8[i] == 0x42, "fp8 e5m2 allreduce sum [%d] = 0x%02x", i, g8[i]);
  memset(f8, rank == 0 ? 0x38 : 0x40, N); /* e4m3: 1.0, 2.0 */
  OK(ncclAllReduce(f8, g8, N, ncclFloat8e4m3, ncclAvg, comm, NULL));
  for (int i = 0; i < N; i++) CHECK(g8[i] == 0x3c, "fp8 e4m3 allreduce avg [%d] = 0x%02x", i, g8[i]);
  ncclRedOp_t op8;
  unsigned char two = 0x40;
  CHECK(ncclRedOpCreatePreMulSum(&op8, &two, ncclFloat8e4m3, ncclScalarHostImmediate, comm) ==
            ncclInvalidArgument, "fp8 PreMulSum refused");
  CHECK(ncclAllReduce(a, b, N, (ncclDataType_t)12, ncclSum, comm, NULL) == ncclInvalidArgument,
        "unknown datatype refused");
}

static int run(int rank, ncclUniqueId id, ncclUniqueId id2) {
  g_rank = rank;
  ncclComm_t comm = NULL;
  OK(ncclCommInitRank(&comm, R, id, rank));
  if (!comm) return 1;
  int n = 0, me = -1, dev = -1;
  OK(ncclCommCount(comm, &n));
  OK(ncclCommUserRank(comm, &me));
  OK(ncclCommCuDevice(comm, &dev));
  CHECK(n == R && me == rank && dev == 0, "count %d rank %d device %d", n, me, dev);

  collectives(comm, rank);

  /* Split: one communicator per rank (color = rank), reversed keys. */
  ncclComm_t sub = NULL;
  OK(ncclCommSplit(comm, rank, -rank, &sub, NULL));
  if (sub) {
    OK(ncclCommCount(sub, &n));
    OK(ncclCommUserRank(sub, &me));
    CHECK(n == 1 && me == 0, "split: count %d rank %d", n, me);
    float x[4] = {1, 2, 3, (float)rank}, y[4];
    OK(ncclAllReduce(x, y, 4, ncclFloat, ncclSum, sub, NULL));
    CHECK(y[3] == (float)rank && y[0] == 1, "split allreduce");
    OK(ncclCommDestroy(sub));
  } else {
    CHECK(0, "split gave no communicator");
  }
  /* Split with one rank out. */
  OK(ncclCommSplit(comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : 5, 0, &sub, NULL));
  CHECK((rank == 0) == (sub == NULL), "NOCOLOR split: rank %d got %p", rank, (void *)sub);
  if (sub) OK(ncclCommDestroy(sub));

  /* Registration, windows, memory. */
  void *mem = NULL, *handle = NULL;
  OK(ncclMemAlloc(&mem, 1 << 16));
  CHECK(mem != NULL, "ncclMemAlloc gave NULL");
  OK(ncclCommRegister(comm, mem, 1 << 16, &handle));
  OK(ncclCommDeregister(comm, handle));
  ncclWindow_t win = NULL;
  OK(ncclCommWindowRegister(comm, mem, 1 << 16, &win, NCCL_WIN_DEFAULT));
  OK(ncclCommWindowDeregister(comm, win));
  OK(ncclMemFree(mem));

  /* Shrink (nobody excluded) and revoke: the revoked communicator refuses
   * its next call and names it. */
  ncclComm_t shrunk = NULL;
  OK(ncclCommShrink(comm, NULL, 0, &shrunk, NULL, NCCL_SHRINK_DEFAULT));
  float s1 = (float)(rank + 1), s2 = 0;
  OK(ncclAllReduce(&s1, &s2, 1, ncclFloat, ncclSum, shrunk, NULL));
  CHECK(s2 == 3.0f, "allreduce on the shrunk communicator = %g", s2);
  /* A fence on the parent: past it, the peer's allreduce on `shrunk` is over
   * too (a revoke fails what is still in flight, on every rank). */
  OK(ncclAllReduce(&s1, &s2, 1, ncclFloat, ncclSum, comm, NULL));
  OK(ncclCommRevoke(shrunk, NCCL_REVOKE_DEFAULT));
  CHECK(ncclAllReduce(&s1, &s2, 1, ncclFloat, ncclSum, shrunk, NULL) == ncclInvalidUsage,
        "an allreduce on a revoked communicator refused");
  const char *last = ncclGetLastError(shrunk);
  CHECK(last && strstr(last, "revoked"), "last error says why: %s", last ? last : "(null)");
  OK(ncclCommDestroy(shrunk));

  /* What flagcx cannot do: a clear error, never a crash. */
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  OK(ncclGroupStart());
  CHECK(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage, "ncclGroupSimulateEnd refused");
  OK(ncclGroupEnd());
  CHECK(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without a group");
  CHECK(ncclAllReduce(NULL, NULL, 1, ncclFloat, ncclSum, NULL, NULL) == ncclInvalidArgument, "NULL comm");
  CHECK(strlen(ncclGetErrorString(ncclRemoteError)) > 0, "error strings");

  ncclResult_t async = ncclInternalError;
  OK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess, "async error %d", (int)async);

  /* A non-blocking creation: ncclInProgress (or success), then ready. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.commName = "nonblocking";
  ncclComm_t nb = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&nb, R, id2, rank, &cfg);
  CHECK(r == ncclSuccess || r == ncclInProgress, "non-blocking init -> %d", (int)r);
  do {
    OK(ncclCommGetAsyncError(nb, &async));
    if (async == ncclInProgress) usleep(1000);
  } while (async == ncclInProgress);
  CHECK(async == ncclSuccess, "non-blocking init finished with %d", (int)async);
  float p = (float)(rank + 1), q = 0;
  OK(ncclAllReduce(&p, &q, 1, ncclFloat, ncclSum, nb, NULL));
  CHECK(q == 3.0f, "allreduce on the non-blocking communicator = %g", q);
  OK(ncclCommDestroy(nb));

  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  CHECK(ncclCommInitRankConfig(&nb, R, id2, rank, &bad) == ncclInvalidArgument && nb == NULL,
        "config without NCCL_CONFIG_INITIALIZER refused");

  OK(ncclCommFinalize(comm));
  OK(ncclCommDestroy(comm));
  return g_fail != 0;
}

int main(void) {
  /* Linked with -lnccl against the drop-in, or against NVIDIA's library and
   * run with the drop-in in LD_PRELOAD: either way the drop-in must serve it. */
  if (!dlsym(RTLD_DEFAULT, "flagcxNcclDropin")) {
    fprintf(stderr, "FAIL: the NCCL in this process is not flagcx's drop-in\n");
    return 1;
  }
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess || v != NCCL_VERSION_CODE) {
    fprintf(stderr, "FAIL ncclGetVersion %d, header says %d\n", v, NCCL_VERSION_CODE);
    return 1;
  }
  /* Fork before making the ids: ncclGetUniqueId starts the rendezvous root's
   * thread, and a fork while a thread holds an allocator lock (the sanitizers'
   * among them) leaves a child that blocks in its first malloc. */
  int fds[2];
  if (pipe(fds) != 0) return 1;
  pid_t child = fork();
  if (child < 0) return 1;
  ncclUniqueId id, id2;
  if (child == 0) {
    close(fds[1]);
    size_t got = 0;
    char *p = (char *)&id;
    while (got < sizeof id) {
      ssize_t n = read(fds[0], p + got, sizeof id - got);
      if (n <= 0) _exit(3);
      got += (size_t)n;
    }
    got = 0;
    p = (char *)&id2;
    while (got < sizeof id2) {
      ssize_t n = read(fds[0], p + got, sizeof id2 - got);
      if (n <= 0) _exit(3);
      got += (size_t)n;
    }
    _exit(run(1, id, id2));
  }
  close(fds[0]);
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclGetUniqueId(&id2) != ncclSuccess) {
    fprintf(stderr, "FAIL ncclGetUniqueId\n");
    close(fds[1]);
    waitpid(child, NULL, 0);
    return 1;
  }
  if (write(fds[1], &id, sizeof id) != (ssize_t)sizeof id ||
      write(fds[1], &id2, sizeof id2) != (ssize_t)sizeof id2)
    return 1;
  close(fds[1]);
  int bad = run(0, id, id2);
  int st = 0;
  waitpid(child, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "rank 1 failed (status 0x%x)\n", st);
    bad = 1;
  }
  printf("%s: nccl.h program on the drop-in (NCCL %d, 2 processes)\n", bad ? "FAIL" : "OK", v);
  return bad;
}
