/* A program written to FlagCX 0.13's C API, as a FlagCX user would write it:
 * version macros tested with #if, allocator arguments, eventElapsedTime of
 * the device handle timing a collective, flagcxCommRegister with an
 * allocator.  Built through pkg-config against a staged install
 * (run_v013_program.sh); forks NRANKS processes, exits 0 when every rank saw
 * the right results. */
#include <flagcx.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if !defined(FLAGCX_VERSION_CODE) || FLAGCX_VERSION_CODE < 1300
#error "this program needs the FlagCX 0.13 API"
#endif
#if FLAGCX_VERSION_MAJOR == 0 && FLAGCX_VERSION_MINOR >= 13
#define HAVE_ALLOCATOR 1 /* the 0.13 branch */
#else
#define HAVE_ALLOCATOR 0
#endif

#define NRANKS 2
#define COUNT 4096

#define CHECK(call)                                                              \
  do {                                                                           \
    flagcxResult_t r_ = (call);                                                  \
    if (r_ != flagcxSuccess) {                                                   \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, flagcxGetErrorString(r_)); \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

static int runRank(int rank, flagcxUniqueId *id) {
  flagcxDeviceHandle_t dev;
  flagcxComm_t comm;
  CHECK(flagcxDeviceHandleInit(&dev));
  CHECK(flagcxCommInitRank(&comm, NRANKS, id, rank));
  int version = 0;
  CHECK(flagcxGetVersion(&version));
  if (version != FLAGCX_VERSION_CODE) {
    fprintf(stderr, "rank %d: flagcxGetVersion %d, header %d\n", rank, version, FLAGCX_VERSION_CODE);
    return 1;
  }

  float *send = NULL, *recv = NULL;
#if HAVE_ALLOCATOR
  CHECK(flagcxMemAlloc((void **)&send, COUNT * sizeof(float), flagcxMemCCL));
  CHECK(flagcxMemAlloc((void **)&recv, COUNT * sizeof(float), flagcxMemCCL));
  void *sendHandle = NULL, *recvHandle = NULL;
  CHECK(flagcxCommRegister(comm, send, COUNT * sizeof(float), &sendHandle, flagcxMemCCL));
  CHECK(flagcxCommRegister(comm, recv, COUNT * sizeof(float), &recvHandle, flagcxMemCCL));
#endif
  for (int i = 0; i < COUNT; i++) send[i] = (float)(rank + 1) * (float)(i % 7);

  flagcxStream_t stream;
  flagcxEvent_t start, stop;
  CHECK(dev->streamCreate(&stream));
  CHECK(dev->eventCreate(&start, flagcxEventDefault));
  CHECK(dev->eventCreate(&stop, flagcxEventDefault));
  CHECK(dev->eventRecord(start, stream));
  CHECK(flagcxAllReduce(send, recv, COUNT, flagcxFloat, flagcxSum, comm, stream));
  CHECK(dev->eventRecord(stop, stream));
  CHECK(dev->eventSynchronize(stop));
  float ms = -1;
  CHECK(dev->eventElapsedTime(&ms, start, stop));
  if (!(ms >= 0.0f)) {
    fprintf(stderr, "rank %d: eventElapsedTime gave %g ms\n", rank, ms);
    return 1;
  }
  CHECK(dev->streamSynchronize(stream));
  /* Sum over ranks of (r+1) * (i%7) = 3 * (i%7) for two ranks. */
  for (int i = 0; i < COUNT; i++) {
    float want = 3.0f * (float)(i % 7);
    if (recv[i] != want) {
      fprintf(stderr, "rank %d: recv[%d] = %g, want %g\n", rank, i, recv[i], want);
      return 1;
    }
  }
  if (rank == 0) printf("allreduce of %d floats: correct, %.3f ms by eventElapsedTime\n", COUNT, ms);

  CHECK(dev->eventDestroy(start));
  CHECK(dev->eventDestroy(stop));
  CHECK(dev->streamDestroy(stream));
#if HAVE_ALLOCATOR
  CHECK(flagcxCommDeregister(comm, sendHandle, flagcxMemCCL));
  CHECK(flagcxCommDeregister(comm, recvHandle, flagcxMemCCL));
  CHECK(flagcxMemFree(send, flagcxMemCCL));
  CHECK(flagcxMemFree(recv, flagcxMemCCL));
#endif
  CHECK(flagcxCommDestroy(comm));
  CHECK(flagcxDeviceHandleFree(dev));
  return 0;
}

int main(void) {
  int rank = 0;
  /* Fork first, then make the id (its rendezvous thread must not exist at
   * fork time: under ASan a child could block in malloc); ids go by pipe. */
  flagcxUniqueId id;
  int fds[NRANKS][2];
  pid_t kids[NRANKS];
  for (int r = 1; r < NRANKS; r++) {
    if (pipe(fds[r]) != 0) return 1;
    kids[r] = fork();
    if (kids[r] == 0) {
      size_t got = 0;
      while (got < sizeof id) {
        ssize_t n = read(fds[r][0], (char *)&id + got, sizeof id - got);
        if (n <= 0) _exit(3);
        got += (size_t)n;
      }
      _exit(runRank(r, &id));
    }
    close(fds[r][0]);
  }
  CHECK(flagcxGetUniqueId(&id));
  for (int r = 1; r < NRANKS; r++) {
    if (write(fds[r][1], &id, sizeof id) != (ssize_t)sizeof id) return 1;
    close(fds[r][1]);
  }
  int bad = runRank(0, &id);
  for (int r = 1; r < NRANKS; r++) {
    int st = 0;
    if (waitpid(kids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d failed (status %d)\n", r, st);
      bad = 1;
    }
  }
  return bad;
}
