/* What a user reads when a call goes wrong: one program, written to the
 * public API only, whose modes each provoke one message; run_messages.sh
 * checks the text and the returned code.
 *   messages uniqueid     flagcxGetUniqueId alone (the environment's lines)
 *   messages MODE         two forked ranks:
 *     mismatch   allreduce of 8 against 16 elements
 *     late       rank 1 sleeps past FLAGCX_TIMEOUT while rank 0 reduces
 *     gone       rank 1 exits while rank 0 reduces
 *     badop      an allreduce with op 77
 *     nullbuf    an allreduce from a NULL buffer
 * Prints "rank R: <error string> | <flagcxGetLastError>" per rank. */
#include <flagcx.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static flagcxResult_t call(const char *mode, int rank, flagcxComm_t comm) {
  float x[16] = {0};
  if (strcmp(mode, "mismatch") == 0)
    return flagcxAllReduce(x, x, rank ? 16 : 8, flagcxFloat, flagcxSum, comm, NULL);
  if (strcmp(mode, "late") == 0 && rank == 1) {
    sleep(4);
    return flagcxSuccess;
  }
  if (strcmp(mode, "gone") == 0 && rank == 1) _exit(0);
  if (strcmp(mode, "gone") == 0) sleep(1);
  if (strcmp(mode, "nullbuf") == 0)
    return flagcxAllReduce(NULL, x, 8, flagcxFloat, flagcxSum, comm, NULL);
  if (strcmp(mode, "badop") == 0)
    return flagcxAllReduce(x, x, 8, flagcxFloat, (flagcxRedOp_t)77, comm, NULL);
  return flagcxAllReduce(x, x, 8, flagcxFloat, flagcxSum, comm, NULL);
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  flagcxUniqueId id;
  flagcxResult_t r;
  if (strcmp(argv[1], "uniqueid") == 0) {
    r = flagcxGetUniqueId(&id);
    printf("uniqueid: %s\n", flagcxGetErrorString(r));
    return 0;
  }
  /* Fork first, then rank 0 makes the id and pipes it over: the id's
   * rendezvous thread must not exist at fork time (a child could inherit a
   * lock it held, e.g. the allocator's under ASan). */
  int pipefd[2];
  if (pipe(pipefd) != 0) return 1;
  int rank = fork() == 0 ? 1 : 0;
  if (rank == 0) {
    if (flagcxGetUniqueId(&id) != flagcxSuccess) return 1;
    if (write(pipefd[1], &id, sizeof(id)) != (ssize_t)sizeof(id)) return 1;
  } else if (read(pipefd[0], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
    return 1;
  }
  flagcxComm_t comm;
  if (flagcxCommInitRank(&comm, 2, &id, rank) != flagcxSuccess) return 1;
  r = call(argv[1], rank, comm);
  printf("rank %d: %s | %s\n", rank, flagcxGetErrorString(r), flagcxGetLastError(comm));
  fflush(stdout);
  if (rank == 0) {
    int st;
    wait(&st);
  }
  _exit(0);
}
