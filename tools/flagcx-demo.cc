// flagcx-demo: N real processes on this host exchange data through flagcx
// (a ring of send/recv, then allreduce) and rank 0 prints a result table
// (kUsage: the command line).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "flagcx.h"

namespace {

struct Row {
  const char *op;
  size_t bytes;
  double us;
  bool ok;
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static_assert(sizeof(flagcxUniqueId) <= PIPE_BUF, "one id is one atomic pipe write");

bool readId(int fd, flagcxUniqueId *id) {
  char *p = reinterpret_cast<char *>(id);
  for (size_t got = 0; got < sizeof(*id);) {
    ssize_t n = read(fd, p + got, sizeof(*id) - got);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

int runRank(int rank, int nranks, flagcxUniqueId *id, int pipeFd) {
  flagcxDeviceHandle_t dev;
  flagcxComm_t comm;
  if (flagcxDeviceHandleInit(&dev) != flagcxSuccess) return 1;
  if (flagcxCommInitRank(&comm, nranks, id, rank) != flagcxSuccess) return 1;
  flagcxStream_t stream;
  dev->streamCreate(&stream);
  std::vector<Row> rows;
  int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
  for (size_t bytes : {size_t(8), size_t(64) << 10, size_t(4) << 20}) {
    size_t n = bytes / sizeof(float);
    std::vector<float> a(n), b(n);
    for (size_t i = 0; i < n; i++) a[i] = static_cast<float>(rank + 1) + static_cast<float>(i % 7);
    const int iters = 20;
    double t0 = now();
    bool ok = true;
    for (int it = 0; it < iters; it++) {
      flagcxGroupStart(comm);
      flagcxSend(a.data(), n, flagcxFloat, right, comm, stream);
      flagcxRecv(b.data(), n, flagcxFloat, left, comm, stream);
      flagcxGroupEnd(comm);
    }
    ok = dev->streamSynchronize(stream) == flagcxSuccess;
    double t1 = now();
    for (size_t i = 0; i < n && ok; i++)
      ok = b[i] == static_cast<float>(left + 1) + static_cast<float>(i % 7);
    rows.push_back({"sendrecv ring", bytes, (t1 - t0) / iters * 1e6, ok});
    t0 = now();
    for (int it = 0; it < iters; it++)
      flagcxAllReduce(a.data(), b.data(), n, flagcxFloat, flagcxSum, comm, stream);
    ok = dev->streamSynchronize(stream) == flagcxSuccess;
    t1 = now();
    for (size_t i = 0; i < n && ok; i++) {
      float want = static_cast<float>(nranks * (nranks + 1) / 2) +
                   static_cast<float>(nranks) * static_cast<float>(i % 7);
      ok = b[i] == want;
    }
    rows.push_back({"allreduce", bytes, (t1 - t0) / iters * 1e6, ok});
  }
  if (rank == 0) {
    if (write(pipeFd, rows.data(), rows.size() * sizeof(Row)) < 0) return 1;
  }
  dev->streamDestroy(stream);
  flagcxCommDestroy(comm);
  flagcxDeviceHandleFree(dev);
  for (auto &r : rows)
    if (!r.ok) return 1;
  return 0;
}

}  // namespace

const char *kUsage =
    "usage: flagcx-demo [-n NRANKS]\n"
    "  -n NRANKS   processes to start on this host, 1..64 (default 4): a ring of\n"
    "              send/recv, then allreduce; rank 0 prints time, bandwidth and check\n"
    "  -h, --help  this help\n"
    "Exit status: 0 every rank ok, 1 a rank failed, 2 a bad command line.\n";

int main(int argc, char **argv) {
  int nranks = 4;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(kUsage, stdout);
      return 0;
    }
    char *end = nullptr;
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      nranks = static_cast<int>(strtol(argv[++i], &end, 10));
      if (*end || end == argv[i] || nranks < 1 || nranks > 64) {
        fprintf(stderr, "flagcx-demo: -n %s: a number of ranks from 1 to 64\n", argv[i]);
        return 2;
      }
    } else {
      fprintf(stderr, "flagcx-demo: unknown argument %s\n%s", argv[i], kUsage);
      return 2;
    }
  }
  // Fork every rank first, then make the id and hand it down a pipe:
  // flagcxGetUniqueId starts the rendezvous root's thread, and a child forked
  // while that thread holds a lock (the allocator's, under a sanitizer) hangs.
  int fds[2], idPipe[2];
  if (pipe(fds) != 0 || pipe(idPipe) != 0) return 1;
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; r++) {
    pid_t p = fork();
    if (p == 0) {
      close(fds[0]);
      close(idPipe[1]);
      flagcxUniqueId id;
      if (!readId(idPipe[0], &id)) _exit(1);  // the parent could not make one
      _exit(runRank(r, nranks, &id, fds[1]));
    }
    pids.push_back(p);
  }
  close(idPipe[0]);
  flagcxUniqueId id;
  bool haveId = flagcxGetUniqueId(&id) == flagcxSuccess;
  for (int r = 0; r < nranks && haveId; r++)  // each write is atomic: under PIPE_BUF
    haveId = write(idPipe[1], &id, sizeof(id)) == static_cast<ssize_t>(sizeof(id));
  close(idPipe[1]);
  close(fds[1]);
  std::vector<Row> rows(16);
  ssize_t got = read(fds[0], rows.data(), rows.size() * sizeof(Row));
  rows.resize(got > 0 ? static_cast<size_t>(got) / sizeof(Row) : 0);
  int failed = 0;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed++;
  }
  printf("flagcx demo: %d ranks (processes) on this host, host device adapter\n", nranks);
  printf("%-16s %12s %12s %10s %6s\n", "operation", "bytes", "time(us)", "GB/s", "check");
  for (auto &r : rows)
    printf("%-16s %12zu %12.1f %10.3f %6s\n", r.op, r.bytes, r.us, r.bytes / r.us / 1e3,
           r.ok ? "ok" : "WRONG");
  if (failed) printf("%d rank(s) failed\n", failed);
  return failed ? 1 : 0;
}
