/* Stands in for NVIDIA's libnccl in forward_test.c: the test copies this
 * library to two directories as libnccl.so.2 and loads both, as a process
 * with torch's wheel NCCL and flagcx's pass-through NCCL does.  Its own
 * ncclGetVersion answers the number the test gave this copy; askVersion
 * calls ncclGetVersion the way NVIDIA's library calls its own exports:
 * through the PLT, so the call lands in the drop-in, which must send it back
 * to this copy. */
#include <stdint.h>

static int g_id = -1;

int ncclGetVersion(int *version) {
  *version = g_id;
  return 0;
}

void fakeNcclSetId(int id) { g_id = id; }

int fakeNcclAskVersion(void) {
  int v = -2;
  if (ncclGetVersion(&v) != 0) return -3;
  return v;
}
