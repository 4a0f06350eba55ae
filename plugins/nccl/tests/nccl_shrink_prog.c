/* A program written to NCCL's fault-tolerance recipe (nccl.h and the user
 * guide's "Shrinking a communicator"), linked against the drop-in: three
 * processes loop allreduces, one of them dies (SIGKILL, by its own hand, in
 * the middle of the loop); the survivors see the error (the call's result or
 * ncclCommGetAsyncError), call ncclCommShrink with NCCL_SHRINK_ABORT
 * excluding the dead rank, abort the parent and go on with the new
 * communicator, whose results must be right.  Exit status 0 only if the
 * survivors pass and the victim died of SIGKILL. */
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_check.h"

enum { R = 3, DEAD = 1, N = 1 << 18 };

/* Allreduces until one fails; the dead rank dies in its 20th. */
static ncclResult_t loopUntilFailure(ncclComm_t comm, float *a, float *b) {
  for (int it = 0; it < 100000; it++) {
    if (g_rank == DEAD && it == 20) raise(SIGKILL);
    ncclResult_t r = ncclAllReduce(a, b, N, ncclFloat, ncclSum, comm, NULL);
    ncclResult_t async = ncclSuccess;
    if (r == ncclSuccess) r = ncclCommGetAsyncError(comm, &async);
    if (r == ncclSuccess) r = async;
    if (r != ncclSuccess) return r;
    CHECK(b[N - 1] == 6.0f, "allreduce before the failure = %g", b[N - 1]);
  }
  return ncclSuccess;
}

static int run(int rank, ncclUniqueId id) {
  g_rank = rank;
  ncclComm_t comm = NULL, newcomm = NULL;
  OK(ncclCommInitRank(&comm, R, id, rank));
  if (g_fail) return 1;
  float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) a[i] = (float)(rank + 1);
  ncclResult_t r = loopUntilFailure(comm, a, b);
  CHECK(r != ncclSuccess, "the allreduces never failed");
  int excluded = DEAD;
  OK(ncclCommShrink(comm, &excluded, 1, &newcomm, NULL, NCCL_SHRINK_ABORT));
  OK(ncclCommAbort(comm));
  if (g_fail) return 1;
  int nr = -1, nn = 0;
  OK(ncclCommUserRank(newcomm, &nr));
  OK(ncclCommCount(newcomm, &nn));
  CHECK(nn == R - 1 && nr == (rank < DEAD ? rank : rank - 1), "new rank %d of %d", nr, nn);
  for (int it = 0; it < 10; it++) {
    OK(ncclAllReduce(a, b, N, ncclFloat, ncclSum, newcomm, NULL));
    CHECK(b[0] == 4.0f && b[N - 1] == 4.0f, "allreduce after the shrink = %g", b[N - 1]);
  }
  OK(ncclCommDestroy(newcomm));
  free(a);
  free(b);
  return g_fail != 0;
}

int main(void) {
  /* Fork before making the id (see nccl_prog.c). */
  int fds[R][2];
  pid_t pids[R];
  for (int r = 0; r < R; r++) {
    if (pipe(fds[r]) != 0) return 1;
    pids[r] = fork();
    if (pids[r] < 0) return 1;
    if (pids[r] == 0) {
      alarm(120);
      ncclUniqueId id;
      close(fds[r][1]);
      if (read(fds[r][0], &id, sizeof id) != (ssize_t)sizeof id) _exit(3);
      _exit(run(r, id));
    }
    close(fds[r][0]);
  }
  ncclUniqueId id;
  int bad = ncclGetUniqueId(&id) != ncclSuccess;
  for (int r = 0; r < R; r++) {
    if (!bad && write(fds[r][1], &id, sizeof id) != (ssize_t)sizeof id) bad = 1;
    close(fds[r][1]);
  }
  for (int r = 0; r < R; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    int ok = r == DEAD ? WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL
                       : WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok) {
      fprintf(stderr, "rank %d: status 0x%x\n", r, st);
      bad = 1;
    }
  }
  printf("%s: shrink after a killed rank on the drop-in (%d processes)\n", bad ? "FAIL" : "OK", R);
  return bad;
}
