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
__attribute__((target("avx2"))) void copyAvx2(char *d, const char *s, size_t n) {
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + i + 64));
    __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + i + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(d + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(d + i + 32), b);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(d + i + 64), c);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(d + i + 96), e);
  }
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

}  // namespace

void copyBytes(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
  if (n >= kMemcpyBelow && haveAvx2()) {
    copyAvx2(static_cast<char *>(dst), static_cast<const char *>(src), n);
    return;
  }
#endif
  memcpy(dst, src, n);
}

}  // namespace flagcx
