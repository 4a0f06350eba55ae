// copyBytes (copy.h): the AVX2 copy loop and its memcpy fallback.
#include "base/copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace flagcx {

namespace {

constexpr size_t kMemcpyBelow = 2048;  // glibc's own small-copy paths are fine

#if defined(__x86_64__)
// 128 bytes a round of unaligned 32-byte loads; the stores ordinary, or
// non-temporal (Stream: the destination lines are written without being read
// first — no ownership request to a cache that holds them — and end in
// memory rather than in this core's cache; dst aligned to 32 first, and an
// sfence orders them before any later store).
template <bool Stream>
__attribute__((target("avx2"))) void copyAvx2(char *d, const char *s, size_t n) {
  size_t i = 0;
  if (Stream) {
    i = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
    if (i > n) i = n;
    memcpy(d, s, i);
  }
  for (; i + 128 <= n; i += 128) {
    __m256i v[4];
    for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + i + 32 * k));
    for (int k = 0; k < 4; k++) {
      auto *p = reinterpret_cast<__m256i *>(d + i + 32 * k);
      if (Stream) _mm256_stream_si256(p, v[k]);
      else _mm256_storeu_si256(p, v[k]);
    }
  }
  if (Stream) _mm_sfence();
  if (i < n) memcpy(d + i, s + i, n - i);  // under 128 bytes: no rep movsb
}

// Asked once, on first use (__builtin_cpu_init: this may run before the
// library's own constructors).
bool haveAvx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}
#endif

// Above kMemcpyBelow the AVX2 loop, ordinary or streaming; glibc below.
template <bool Stream>
void copyWith(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
  if (n >= kMemcpyBelow && haveAvx2()) {
    copyAvx2<Stream>(static_cast<char *>(dst), static_cast<const char *>(src), n);
    return;
  }
#endif
  memcpy(dst, src, n);
}

}  // namespace

void copyBytes(void *dst, const void *src, size_t n) { copyWith<false>(dst, src, n); }

void copyBytesStreaming(void *dst, const void *src, size_t n) { copyWith<true>(dst, src, n); }

}  // namespace flagcx
