// Which sanitizer this translation unit is built with: FLAGCX_TSAN and
// FLAGCX_ASAN are defined (as 1) under ThreadSanitizer and AddressSanitizer
// (gcc's __SANITIZE_*__ macros, clang's __has_feature).
#pragma once

#if defined(__SANITIZE_THREAD__)
#define FLAGCX_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FLAGCX_TSAN 1
#endif
#endif

#if defined(__SANITIZE_ADDRESS__)
#define FLAGCX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FLAGCX_ASAN 1
#endif
#endif
