/* Two ranks exchange 64 MiB + 3 bytes both ways; used by the two-host test.
 * usage: pingpong RANK   (FLAGCX_COMM_ID names rank 0's address) */
#include <flagcx.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  int rank = atoi(argv[1]);
  size_t n = (64u << 20) + 3;
  unsigned char *out = malloc(n), *in = malloc(n);
  for (size_t i = 0; i < n; i++) out[i] = (unsigned char)(i * 7 + rank * 13);
  flagcxUniqueId id;
  flagcxComm_t comm;
  if (flagcxGetUniqueId(&id) != flagcxSuccess) return 1;
  if (flagcxCommInitRank(&comm, 2, &id, rank) != flagcxSuccess) return 1;
  int peer = 1 - rank;
  flagcxGroupStart(comm);
  flagcxSend(out, n, flagcxUint8, peer, comm, NULL);
  flagcxRecv(in, n, flagcxUint8, peer, comm, NULL);
  if (flagcxGroupEnd(comm) != flagcxSuccess) return 1;
  for (size_t i = 0; i < n; i++)
    if (in[i] != (unsigned char)(i * 7 + peer * 13)) {
      fprintf(stderr, "rank %d: byte %zu wrong\n", rank, i);
      return 1;
    }
  printf("rank %d: 64 MiB exchange with rank %d ok\n", rank, peer);
  flagcxCommDestroy(comm);
  free(out);
  free(in);
  return 0;
}
