// One core's copy rate at 16-128 MiB (the bound docs/PERFORMANCE.md compares the host
// allreduce with): glibc memcpy and a copy with non-temporal stores, best of 10 each.
// gcc -O2 -mavx2 memcpy_rate.c -o memcpy_rate && ./memcpy_rate
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static void nt_copy(char *d, const char *s, size_t n) {
  for (size_t i = 0; i < n; i += 32)
    _mm256_stream_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
  _mm_sfence();
}
int main(void) {
  for (size_t mib = 16; mib <= 128; mib *= 2) {
    size_t n = mib << 20;
    char *s = aligned_alloc(4096, n), *d = aligned_alloc(4096, n);
    memset(s, 1, n);
    memset(d, 2, n);
    double bm = 1e9, bn = 1e9;
    for (int i = 0; i < 10; i++) {
      double t = now();
      memcpy(d, s, n);
      t = now() - t;
      if (t < bm) bm = t;
      t = now();
      nt_copy(d, s, n);
      t = now() - t;
      if (t < bn) bn = t;
    }
    printf("%4zu MiB: memcpy %.2f GB/s, non-temporal copy %.2f GB/s\n", mib, n / bm / 1e9, n / bn / 1e9);
    free(s);
    free(d);
  }
  return 0;
}
