/* Two processes, one message: cc sendrecv.c $(pkg-config --cflags --libs flagcx) */
#include <flagcx.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
  flagcxUniqueId id;
  if (flagcxGetUniqueId(&id) != flagcxSuccess) return 1;
  int rank = fork() == 0 ? 1 : 0; /* two real processes share the id */
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
