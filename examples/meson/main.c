/* Built by meson.build with dependency('flagcx'): a communicator of one rank
 * and a broadcast on it, enough to show that the header, the library and its
 * data files (the algorithm scripts) were found. */
#include <flagcx.h>
#include <stdio.h>

int main(void) {
  flagcxUniqueId id;
  flagcxComm_t comm;
  if (flagcxGetUniqueId(&id) != flagcxSuccess || flagcxCommInitRank(&comm, 1, &id, 0) != flagcxSuccess) {
    fprintf(stderr, "flagcx init failed: %s\n", flagcxGetLastError(NULL));
    return 1;
  }
  double x[2] = {0.5, 2.0}, y[2] = {0, 0};
  flagcxResult_t r = flagcxBroadcast(x, y, 2, flagcxDouble, 0, comm, NULL);
  printf("flagcx through meson: broadcast on one rank: %g %g (%s)\n", y[0], y[1],
         flagcxGetErrorString(r));
  flagcxCommDestroy(comm);
  return r != flagcxSuccess || y[0] != x[0] || y[1] != x[1];
}
