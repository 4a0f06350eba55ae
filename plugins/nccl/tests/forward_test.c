/* The drop-in's forwarding of calls made by NVIDIA's library (forward.h):
 * with two copies of a stand-in "NVIDIA" libnccl.so.2 loaded by path, each
 * copy's call to ncclGetVersion (bound to the drop-in, which the program
 * links) must reach that copy's own definition, and the program's own call
 * must stay in the drop-in.  argv[1]: the stand-in library.  Exit 0 when
 * every check holds. */
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int copyTo(const char *src, const char *dir, char *out, size_t outLen) {
  snprintf(out, outLen, "%s/libnccl.so.2", dir);
  FILE *in = fopen(src, "rb"), *o = fopen(out, "wb");
  if (!in || !o) return -1;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), in)) > 0) fwrite(buf, 1, n, o);
  fclose(in);
  return fclose(o);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: nccl_dropin_forward_test STAND_IN_LIBRARY\n");
    return 2;
  }
  int fails = 0, v = 0;
  if (ncclGetVersion(&v) != ncclSuccess || v != NCCL_VERSION_CODE) {
    fprintf(stderr, "FAIL: the program's ncclGetVersion gave %d, want the drop-in's %d\n", v,
            NCCL_VERSION_CODE);
    fails++;
  }
  char tmpl[2][64] = {"/tmp/flagcx-fwd-a-XXXXXX", "/tmp/flagcx-fwd-b-XXXXXX"};
  char path[2][128];
  void *h[2];
  for (int i = 0; i < 2; i++) {
    if (!mkdtemp(tmpl[i]) || copyTo(argv[1], tmpl[i], path[i], sizeof(path[i])) != 0) {
      perror("copying the stand-in library");
      return 1;
    }
    h[i] = dlopen(path[i], RTLD_NOW | RTLD_LOCAL);
    if (!h[i]) {
      fprintf(stderr, "dlopen %s: %s\n", path[i], dlerror());
      return 1;
    }
    void (*setId)(int) = (void (*)(int))dlsym(h[i], "fakeNcclSetId");
    if (!setId) return 1;
    setId(1000 + i);
  }
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 2; i++) {
      int (*ask)(void) = (int (*)(void))dlsym(h[i], "fakeNcclAskVersion");
      int got = ask ? ask() : -4;
      if (got != 1000 + i) {
        fprintf(stderr, "FAIL: copy %d's own call of ncclGetVersion answered %d, want %d\n", i,
                got, 1000 + i);
        fails++;
      }
    }
  }
  v = 0;
  if (ncclGetVersion(&v) != ncclSuccess || v != NCCL_VERSION_CODE) {
    fprintf(stderr, "FAIL: after the loads the program's ncclGetVersion gave %d\n", v);
    fails++;
  }
  for (int i = 0; i < 2; i++) {
    unlink(path[i]);
    rmdir(tmpl[i]);
  }
  if (!fails) printf("forwarding: each stand-in copy answered itself; the program got the drop-in\n");
  return fails ? 1 : 0;
}
