/* One rank of the two-host recovery test (elastic_two_hosts.sh): ranks loop
 * 1 MiB allreduces; the victim dies of SIGKILL in its 20th; the survivors
 * get an error, shrink with FLAGCX_SHRINK_ABORT excluding it, destroy the
 * parent and go on with correct results on the new communicator.
 * usage: elastic_prog RANK NRANKS VICTIM   (FLAGCX_COMM_ID names the root) */
#include <flagcx.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

enum { N = 1 << 18 };

static int fail(int rank, const char *what, flagcxResult_t r) {
  fprintf(stderr, "rank %d: FAIL %s: %s (%s)\n", rank, what, flagcxGetErrorString(r),
          flagcxGetLastError(NULL));
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  int rank = atoi(argv[1]), nranks = atoi(argv[2]), victim = atoi(argv[3]);
  float *in = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) in[i] = (float)(rank + 1);
  flagcxUniqueId id;
  flagcxComm_t comm = NULL, child = NULL;
  flagcxResult_t r = flagcxGetUniqueId(&id);
  if (r == flagcxSuccess) r = flagcxCommInitRank(&comm, nranks, &id, rank);
  if (r != flagcxSuccess) return fail(rank, "init", r);
  for (int it = 0; it < 100000 && r == flagcxSuccess; it++) {
    if (rank == victim && it == 20) raise(SIGKILL);
    r = flagcxAllReduce(in, out, N, flagcxFloat, flagcxSum, comm, NULL);
  }
  if (r == flagcxSuccess) return fail(rank, "the allreduces never failed", r);
  printf("rank %d: the allreduce failed as expected: %s\n", rank, flagcxGetErrorString(r));
  r = flagcxCommShrink(comm, &victim, 1, &child, FLAGCX_SHRINK_ABORT);
  if (r != flagcxSuccess) return fail(rank, "shrink", r);
  flagcxCommDestroy(comm); /* may report the failure */
  float want = (float)(nranks * (nranks + 1) / 2 - (victim + 1));
  for (int it = 0; it < 10; it++) {
    r = flagcxAllReduce(in, out, N, flagcxFloat, flagcxSum, child, NULL);
    if (r != flagcxSuccess) return fail(rank, "allreduce after the shrink", r);
    if (out[0] != want || out[N - 1] != want) {
      fprintf(stderr, "rank %d: FAIL allreduce after the shrink gave %g, want %g\n", rank,
              out[N - 1], want);
      return 1;
    }
  }
  int cn = 0;
  flagcxCommCount(child, &cn);
  printf("rank %d: recovered on %d ranks\n", rank, cn);
  flagcxCommDestroy(child);
  free(in);
  free(out);
  return 0;
}
