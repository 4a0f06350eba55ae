// Two processes exchange S bytes over loopback TCP, both directions at once, one thread each
// polling non-blocking sockets (what the engine does).  mode 0: send()/recv().  mode 1: the
// sender hands its pages to the socket (vmsplice into a pipe, splice into the socket), so the
// kernel copies each byte once (into the receiver) instead of twice.  Pages handed over stay
// referenced until the receiver has read them, so after its last byte each side sends an
// 8-byte "consumed" word and a side reuses its send buffer only once the peer's word came.
// Every iteration stamps each 4 KiB page of the send buffer and the receiver checks the
// stamps (a reuse before the peer read would show as a wrong stamp).
// usage: splice_exchange BYTES ITERS MODE [PIPE_BYTES]
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static void die(const char *w) { perror(w); exit(1); }

static size_t S, PIPE = 1 << 20;
static int mode;

// Pushes up to `left` bytes from p without blocking; returns bytes the socket took.
static size_t pushSplice(int s, int pr, int pw, size_t *inPipe, const char *p, size_t left) {
  size_t took = 0;
  if (*inPipe == 0 && left > 0) {  // refill the pipe with references to our pages
    struct iovec v = {(void *)p, left < PIPE ? left : PIPE};
    ssize_t k = vmsplice(pw, &v, 1, SPLICE_F_NONBLOCK);
    if (k < 0 && errno != EAGAIN) die("vmsplice");
    if (k > 0) *inPipe = (size_t)k;
  }
  if (*inPipe > 0) {
    ssize_t k = splice(pr, NULL, s, NULL, *inPipe, SPLICE_F_NONBLOCK | SPLICE_F_MOVE | SPLICE_F_MORE);
    if (k < 0 && errno != EAGAIN) die("splice");
    if (k > 0) { *inPipe -= (size_t)k; took = (size_t)k; }
  }
  return took;
}

static void exchange(int s, int pr, int pw, char *sb, char *rb, uint64_t it) {
  for (size_t o = 0; o < S; o += 4096) memcpy(sb + o, &it, sizeof it);
  size_t so = 0, ro = 0, inPipe = 0;
  uint64_t ackIn = 0, ackOut = it;
  size_t ackGot = 0, ackSent = 0;
  while (so < S || ro < S || ackGot < 8 || ackSent < 8) {
    if (so < S) {
      if (mode == 0) {
        ssize_t k = send(s, sb + so, S - so, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k > 0) so += (size_t)k;
        else if (errno != EAGAIN) die("send");
      } else {
        // The bytes still in the pipe were taken from sb + so already.
        so += pushSplice(s, pr, pw, &inPipe, sb + so + inPipe, S - so - inPipe);
      }
    } else if (ro == S && ackSent < 8) {
      ssize_t k = send(s, (char *)&ackOut + ackSent, 8 - ackSent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k > 0) ackSent += (size_t)k;
    }
    if (ro < S) {
      ssize_t k = recv(s, rb + ro, S - ro, MSG_DONTWAIT);
      if (k > 0) ro += (size_t)k;
      else if (k == 0 || errno != EAGAIN) die("recv");
    } else if (ackGot < 8) {
      ssize_t k = recv(s, (char *)&ackIn + ackGot, 8 - ackGot, MSG_DONTWAIT);
      if (k > 0) ackGot += (size_t)k;
      else if (k == 0 || errno != EAGAIN) die("recv ack");
    }
    if (ro == S && ackSent < 8 && so == S) {
      ssize_t k = send(s, (char *)&ackOut + ackSent, 8 - ackSent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k > 0) ackSent += (size_t)k;
    }
  }
  for (size_t o = 0; o < S; o += 4096) {
    uint64_t v;
    memcpy(&v, rb + o, sizeof v);
    if (v != it) { fprintf(stderr, "iteration %lu: page at %zu has stamp %lu\n", (unsigned long)it, o, (unsigned long)v); exit(2); }
  }
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: %s BYTES ITERS MODE [PIPE_BYTES]\n", argv[0]); return 1; }
  S = strtoull(argv[1], NULL, 0);
  int iters = atoi(argv[2]);
  mode = atoi(argv[3]);
  if (argc > 4) PIPE = strtoull(argv[4], NULL, 0);
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) || getsockname(ls, (struct sockaddr *)&a, &al)) die("listen");
  pid_t kid = fork();
  int s;
  if (kid == 0) {
    s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, (struct sockaddr *)&a, sizeof a)) die("connect");
  } else {
    s = accept(ls, NULL, NULL);
  }
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);  // splice's SPLICE_F_NONBLOCK covers only the pipe
  int p[2];
  if (pipe(p)) die("pipe");
  if (fcntl(p[1], F_SETPIPE_SZ, (int)PIPE) < 0) die("F_SETPIPE_SZ");
  PIPE = (size_t)fcntl(p[1], F_GETPIPE_SZ);
  char *sb = aligned_alloc(4096, S), *rb = aligned_alloc(4096, S);
  memset(sb, 1, S);
  memset(rb, 0, S);
  for (int i = 0; i < 3; i++) exchange(s, p[0], p[1], sb, rb, (uint64_t)i + 1);  // warm-up
  double best = 1e9, sum = 0;
  for (int r = 0; r < 5; r++) {
    double t0 = now();
    for (int i = 0; i < iters; i++) exchange(s, p[0], p[1], sb, rb, (uint64_t)(100 + r * iters + i));
    double t = (now() - t0) / iters;
    sum += t;
    if (t < best) best = t;
  }
  if (kid != 0) {
    printf("mode %d bytes %zu pipe %zu: best %.1f us, mean %.1f us (5 x %d exchanges), %.2f GB/s each way\n",
           mode, S, PIPE, best * 1e6, sum / 5 * 1e6, iters, S / best / 1e9);
    waitpid(kid, NULL, 0);
  }
  return 0;
}
