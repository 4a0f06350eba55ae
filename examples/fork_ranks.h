/* Runs a function as ranks 0..n-1 of one job on this host: ranks 1..n-1 are
 * forked children, rank 0 is the calling process.  The children are forked
 * before flagcxGetUniqueId starts any flagcx thread, and get the id through a
 * pipe.  Returns 0 when every rank returned 0, else the first nonzero code
 * (77, "no GPU", is passed on without a message). */
#ifndef FLAGCX_EXAMPLES_FORK_RANKS_H_
#define FLAGCX_EXAMPLES_FORK_RANKS_H_

#include <flagcx.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define FORK_RANKS_MAX 8

typedef int (*forkRankFn)(int rank, int n, flagcxUniqueId *id, void *arg);

static int forkRanks(int n, forkRankFn fn, void *arg) {
  int fds[FORK_RANKS_MAX][2];
  pid_t kids[FORK_RANKS_MAX];
  flagcxUniqueId id;
  if (n < 1 || n > FORK_RANKS_MAX) return 2;
  for (int r = 1; r < n; r++) {
    if (pipe(fds[r]) != 0) return 1;
    kids[r] = fork();
    if (kids[r] == 0) {
      size_t got = 0;
      while (got < sizeof id) {
        ssize_t k = read(fds[r][0], (char *)&id + got, sizeof id - got);
        if (k <= 0) _exit(3);
        got += (size_t)k;
      }
      _exit(fn(r, n, &id, arg));
    }
    close(fds[r][0]);
  }
  if (flagcxGetUniqueId(&id) != flagcxSuccess) return 1;
  for (int r = 1; r < n; r++) {
    if (write(fds[r][1], &id, sizeof id) != (ssize_t)sizeof id) return 1;
    close(fds[r][1]);
  }
  int rc = fn(0, n, &id, arg);
  for (int r = 1; r < n; r++) {
    int st = 0;
    if (waitpid(kids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 77)
        fprintf(stderr, "rank %d failed (status %d)\n", r, st);
      if (rc == 0) rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    }
  }
  return rc;
}

#endif /* FLAGCX_EXAMPLES_FORK_RANKS_H_ */
