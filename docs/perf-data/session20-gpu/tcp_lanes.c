// Session 20: how fast can two processes exchange S bytes each way over loopback TCP when
// spare cores are there?  The bound a threaded socket engine could reach on the 16-core host.
//   ./tcp_lanes BYTES ITERS MODE LANES
// MODE poll : one thread per rank, non-blocking send/recv over LANES connections, busy loop
//             (what the engine does today with FLAGCX_NSOCKS_PERTHREAD=LANES)
//      spin : LANES persistent threads per rank, each busy-polling its own connection (both
//             directions, non-blocking) for its stripe; the main thread hands work over and
//             waits through atomics (no sleeping anywhere)
//      spin2: as spin with two threads per connection (one sends, one receives)
//      block2: two persistent threads per connection making blocking calls, woken by a
//             condition variable per exchange, the main thread spinning on a counter
// Every exchange is checked at the end (a stamp per 4 KiB page and iteration).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static size_t S; static int nl, mode;  // 0 poll 1 spin 2 spin2 3 block2
static int fds[16]; static char *sb, *rb;

struct worker { int lane, dir; pthread_t th; atomic_int go, done; pthread_mutex_t m; pthread_cond_t c; };
static struct worker W[32];
static void stripe(int lane, size_t *off, size_t *len) { size_t per = (S / nl + 4095) & ~(size_t)4095; *off = per * lane; if (*off > S) *off = S; *len = S - *off < per ? S - *off : per; }
static void die(const char *w) { perror(w); exit(1); }

static void lane_xchg(int lane, int dirs, int blocking) {  // dirs: 1 send 2 recv 3 both
  size_t off, len; stripe(lane, &off, &len);
  size_t so = (dirs & 1) ? 0 : len, ro = (dirs & 2) ? 0 : len; int fl = blocking ? 0 : MSG_DONTWAIT;
  while (so < len || ro < len) {
    if (so < len) { ssize_t k = send(fds[lane], sb + off + so, len - so, fl | MSG_NOSIGNAL); if (k > 0) so += k; else if (errno != EAGAIN) die("send"); }
    if (ro < len) { ssize_t k = recv(fds[lane], rb + off + ro, len - ro, fl); if (k > 0) ro += k; else if (k == 0 || errno != EAGAIN) die("recv"); }
  }
}
static void *wmain(void *p) {
  struct worker *w = p; int seen = 0;
  for (;;) {
    if (mode == 3) { pthread_mutex_lock(&w->m); while (atomic_load(&w->go) == seen) pthread_cond_wait(&w->c, &w->m); pthread_mutex_unlock(&w->m); }
    else while (atomic_load_explicit(&w->go, memory_order_acquire) == seen) __builtin_ia32_pause();
    seen = atomic_load(&w->go); if (seen < 0) return 0;
    lane_xchg(w->lane, mode == 1 ? 3 : w->dir, mode == 3);
    atomic_store_explicit(&w->done, seen, memory_order_release);
  }
}
static int nworkers(void) { return mode == 1 ? nl : 2 * nl; }
static void start(void) {
  for (int i = 0; i < nworkers(); i++) { W[i].lane = mode == 1 ? i : i / 2; W[i].dir = mode == 1 ? 3 : 1 + (i & 1);
    pthread_mutex_init(&W[i].m, 0); pthread_cond_init(&W[i].c, 0); pthread_create(&W[i].th, 0, wmain, &W[i]); }
}
static void xchg(int it) {
  if (mode == 0) {  // one thread, all lanes, non-blocking
    size_t so[16] = {0}, ro[16] = {0}, off[16], len[16]; int left = 2 * nl;
    for (int l = 0; l < nl; l++) stripe(l, &off[l], &len[l]);
    while (left) { left = 0;
      for (int l = 0; l < nl; l++) {
        if (so[l] < len[l]) { ssize_t k = send(fds[l], sb + off[l] + so[l], len[l] - so[l], MSG_DONTWAIT | MSG_NOSIGNAL); if (k > 0) so[l] += k; else if (errno != EAGAIN) die("send"); left += so[l] < len[l]; }
        if (ro[l] < len[l]) { ssize_t k = recv(fds[l], rb + off[l] + ro[l], len[l] - ro[l], MSG_DONTWAIT); if (k > 0) ro[l] += k; else if (k == 0 || errno != EAGAIN) die("recv"); left += ro[l] < len[l]; }
      } }
    return;
  }
  int n = nworkers();
  for (int i = 0; i < n; i++) { if (mode == 3) pthread_mutex_lock(&W[i].m); atomic_store_explicit(&W[i].go, it, memory_order_release); if (mode == 3) { pthread_cond_signal(&W[i].c); pthread_mutex_unlock(&W[i].m); } }
  for (int i = 0; i < n; i++) while (atomic_load_explicit(&W[i].done, memory_order_acquire) != it) __builtin_ia32_pause();
}
static void stamp(char *b, int rank, int it) { for (size_t o = 0; o < S; o += 4096) { uint32_t v = (uint32_t)(rank * 1000003 + it * 7919 + o / 4096); memcpy(b + o, &v, 4); } }
static int check(char *b, int rank, int it) { for (size_t o = 0; o < S; o += 4096) { uint32_t v = (uint32_t)(rank * 1000003 + it * 7919 + o / 4096), g; memcpy(&g, b + o, 4); if (g != v) return 0; } return 1; }

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: %s BYTES ITERS poll|spin|spin2|block2 LANES\n", argv[0]); return 2; }
  S = strtoull(argv[1], 0, 0); int iters = atoi(argv[2]); nl = atoi(argv[4]);
  mode = !strcmp(argv[3], "poll") ? 0 : !strcmp(argv[3], "spin") ? 1 : !strcmp(argv[3], "spin2") ? 2 : !strcmp(argv[3], "block2") ? 3 : -1;
  if (mode < 0 || nl < 1 || nl > 16 || S < 4096) { fprintf(stderr, "bad args\n"); return 2; }
  int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1; setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)}; socklen_t al = sizeof a;
  if (bind(ls, (void *)&a, sizeof a) || listen(ls, 16) || getsockname(ls, (void *)&a, &al)) die("listen");
  pid_t child = fork(); int rank = child == 0;
  for (int l = 0; l < nl; l++) {
    if (rank) { fds[l] = socket(AF_INET, SOCK_STREAM, 0); if (connect(fds[l], (void *)&a, sizeof a)) die("connect"); }
    else { fds[l] = accept(ls, 0, 0); if (fds[l] < 0) die("accept"); }
    setsockopt(fds[l], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  sb = aligned_alloc(4096, S); rb = aligned_alloc(4096, S); memset(sb, 1, S); memset(rb, 2, S);
  if (mode) start();
  double best = 1e9, tot = 0; int ok = 1, warm = iters / 5;
  for (int it = 1; it <= iters; it++) {
    stamp(sb, rank, it); char c = 0;  // a byte each way: both ranks start together
    if (send(fds[0], &c, 1, 0) != 1 || recv(fds[0], &c, 1, MSG_WAITALL) != 1) die("sync");
    double t = now(); xchg(it); t = now() - t;
    ok &= check(rb, !rank, it);
    if (it > warm) { tot += t; if (t < best) best = t; }
  }
  if (child) { int st; wait(&st); printf("%s lanes %d S %zu best %.1f us mean %.1f us %s\n", argv[3], nl, S, best * 1e6, tot / (iters - warm) * 1e6, ok && WIFEXITED(st) && !WEXITSTATUS(st) ? "ok" : "BAD"); }
  else if (!ok) return 1;
  fflush(stdout); _exit(0);
}
