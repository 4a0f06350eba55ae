/* Two processes, one message: cc sendrecv.c $(pkg-config --cflags --libs flagcx)
 * The process forks first and rank 0 then hands the unique id to rank 1
 * through a pipe: flagcxGetUniqueId starts a thread, and a process with
 * threads should not fork (a child may inherit a lock another thread held). */
#include <flagcx.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return 1;
  int rank = fork() == 0 ? 1 : 0;
  flagcxUniqueId id;
  if (rank == 0) {
    if (flagcxGetUniqueId(&id) != flagcxSuccess) return 1;
    if (write(pipefd[1], &id, sizeof(id)) != (ssize_t)sizeof(id)) return 1;
  } else if (read(pipefd[0], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
    return 1; /* rank 0 could not make the id */
  }
  flagcxDeviceHandle_t dev;
  flagcxComm_t comm;
  flagcxDeviceHandleInit(&dev);
  if (flagcxCommInitRank(&comm, 2, &id, rank) != flagcxSuccess) return 1;
  double x[4] = {1, 2, 3, 4};
  flagcxResult_t r = rank == 0 ? flagcxSend(x, 4, flagcxDouble, 1, comm, NULL)
                               : flagcxRecv(x, 4, flagcxDouble, 0, comm, NULL);
  if (rank == 1) printf("rank 1 got %g %g %g %g (%s)\n", x[0], x[1], x[2], x[3], flagcxGetErrorString(r));
  flagcxCommDestroy(comm);
  flagcxDeviceHandleFree(dev);
  if (rank == 0) { int st; wait(&st); return r != flagcxSuccess || st != 0; }
  return r != flagcxSuccess;
}
