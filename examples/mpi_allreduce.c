/* An allreduce across MPI processes: rank 0 makes the unique id, MPI_Bcast
 * hands it to the others, each rank sums its vector into everyone's.
 * Buffers come from the device handle, so the same program runs on the
 * host adapter and on a GPU (FLAGCX_DEVICE).
 *   mpicc mpi_allreduce.c $(pkg-config --cflags --libs flagcx) -o mpi_allreduce
 *   mpiexec -n 2 ./mpi_allreduce     (MPICH over UCX on one host: UCX_NET_DEVICES=lo) */
#include <flagcx.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define N 1024

#define CHECK(call)                                                                   \
  do {                                                                                \
    flagcxResult_t r_ = (call);                                                       \
    if (r_ != flagcxSuccess) {                                                        \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, flagcxGetErrorString(r_));   \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
    }                                                                                 \
  } while (0)

int main(int argc, char **argv) {
  int rank = 0, nranks = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  flagcxUniqueId id;
  memset(&id, 0, sizeof(id));
  if (rank == 0) CHECK(flagcxGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);

  flagcxDeviceHandle_t dev;
  flagcxComm_t comm;
  flagcxStream_t stream;
  CHECK(flagcxDeviceHandleInit(&dev));
  CHECK(flagcxCommInitRank(&comm, nranks, &id, rank));
  CHECK(dev->streamCreate(&stream));

  float host[N];
  void *buf;
  for (int i = 0; i < N; i++) host[i] = (float)(rank + 1) * (float)i;
  CHECK(dev->deviceMalloc(&buf, sizeof(host), flagcxMemDevice, NULL));
  CHECK(dev->deviceMemcpy(buf, host, sizeof(host), flagcxMemcpyHostToDevice, NULL));
  /* In place: buf holds this rank's input, then the sum over all ranks. */
  CHECK(flagcxAllReduce(buf, buf, N, flagcxFloat, flagcxSum, comm, stream));
  CHECK(dev->streamSynchronize(stream));
  CHECK(dev->deviceMemcpy(host, buf, sizeof(host), flagcxMemcpyDeviceToHost, NULL));

  int wrong = 0;
  float ranksSum = (float)nranks * (float)(nranks + 1) / 2; /* 1 + 2 + ... + nranks */
  for (int i = 0; i < N; i++) wrong += host[i] != ranksSum * (float)i;
  printf("rank %d of %d: allreduce of %d floats %s\n", rank, nranks, N, wrong ? "WRONG" : "ok");

  CHECK(dev->deviceFree(buf, flagcxMemDevice, NULL));
  CHECK(dev->streamDestroy(stream));
  CHECK(flagcxCommDestroy(comm));
  CHECK(flagcxDeviceHandleFree(dev));
  int anyWrong = 0;
  MPI_Allreduce(&wrong, &anyWrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return anyWrong != 0;
}
