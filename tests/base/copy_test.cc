// copyBytes and copyBytesStreaming (src/base/copy.h): the bytes of memcpy at every size around its
// thresholds and every relative offset of the two buffers that made glibc's
// memcpy slow, and nothing written outside the destination.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/copy.h"

namespace {

using CopyFn = void (*)(void *, const void *, size_t);

class Copies : public ::testing::TestWithParam<CopyFn> {};

TEST_P(Copies, SameBytesAsMemcpyAtEverySizeAndOffset) {
  const CopyFn copy = GetParam();
  constexpr size_t kGuard = 256;
  const size_t sizes[] = {0, 1, 7, 127, 128, 129, 2047, 2048, 2049, 4095, 4096, 4097, 65536 + 3,
                          262144, 262144 + 65, 1 << 20};
  const size_t offsets[] = {0, 1, 8, 16, 31, 64, 100, 4088, 4095};
  std::vector<uint8_t> src((1 << 20) + 2 * 4096), dst((1 << 20) + 2 * 4096 + 2 * kGuard);
  for (size_t i = 0; i < src.size(); i++) src[i] = static_cast<uint8_t>(i * 131 + (i >> 8) * 7 + 1);
  for (size_t n : sizes) {
    for (size_t so : {size_t{0}, size_t{8}, size_t{33}}) {
      for (size_t d : offsets) {
        std::memset(dst.data(), 0xA5, dst.size());
        uint8_t *out = dst.data() + kGuard + d;
        copy(out, src.data() + so, n);
        ASSERT_EQ(std::memcmp(out, src.data() + so, n), 0) << "n " << n << " src+" << so << " dst+" << d;
        for (size_t g = 0; g < kGuard + d; g++)
          ASSERT_EQ(dst[g], 0xA5) << "written before the destination: n " << n << " dst+" << d;
        for (size_t g = kGuard + d + n; g < dst.size(); g++)
          ASSERT_EQ(dst[g], 0xA5) << "written past the destination: n " << n << " dst+" << d;
      }
    }
  }
}

// copyBytes, and copyBytesStreaming (non-temporal stores after an unaligned
// head: the destination offsets cover every alignment to 32).
INSTANTIATE_TEST_SUITE_P(CopyBytes, Copies,
                         ::testing::Values(&flagcx::copyBytes, &flagcx::copyBytesStreaming));

}  // namespace
