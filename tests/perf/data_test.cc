// The perf tools' test data for the 8-bit floats (tools/perf/data.h): its
// own conversions agree with the library's (the host kernels' scalar
// conversions, checked against the formats' definitions by unit-fp8), and
// the values its sums and averages use make every partial sum, in any order
// of up to 32 ranks, a value the format holds exactly, so that a path
// rounding each step gives the reference's bits.
#include <gtest/gtest.h>

#include <cmath>

#include "adapters/device/host/host_reduce_kernels.h"
#include "tools/perf/data.h"

namespace rk = flagcx::reduce_kernels;

namespace {

TEST(PerfData, Float8ConversionsMatchTheLibrary) {
  for (unsigned c = 0; c < 256; c++) {
    uint8_t b = static_cast<uint8_t>(c);
    double e4 = perf::toDouble(perf::F8e4m3{b}), e5 = perf::toDouble(perf::F8e5m2{b});
    if (std::isnan(e4)) EXPECT_TRUE(std::isnan(rk::e4m3ToFloat(b))) << c;
    else EXPECT_EQ(e4, rk::e4m3ToFloat(b)) << c;
    if (std::isnan(e5)) EXPECT_TRUE(std::isnan(rk::e5m2ToFloat(b))) << c;
    else EXPECT_EQ(e5, rk::e5m2ToFloat(b)) << c;
  }
  // Values, midpoints and points near them, both signs, below the largest
  // finite values (the tool's values stay there).
  for (double v = 1.0 / 1024; v < 400; v *= 1.0 + 1.0 / 64)
    for (double x : {v, -v, std::nextafter(v, 0.0), std::nextafter(v, 1e9)}) {
      float f = static_cast<float>(x);
      EXPECT_EQ(perf::fromDouble<perf::F8e4m3>(f).bits, rk::floatToE4m3(f)) << x;
      EXPECT_EQ(perf::fromDouble<perf::F8e5m2>(f).bits, rk::floatToE5m2(f)) << x;
    }
}

// Every partial sum of the values ranks 0..n-1 send, from any starting rank
// around the ring, is exact in the format; so is the reference.
TEST(PerfData, Float8SumsExactInAnyOrder) {
  for (flagcxDataType_t dt : {flagcxFloat8e4m3, flagcxFloat8e5m2})
    for (int n = 1; n <= 32; n++) {
      double ref[perf::kKeys];
      perf::reducedTable(n, dt, flagcxSum, ref);
      for (unsigned k = 0; k < perf::kKeys; k++) {
        double total = 0;
        for (int start = 0; start < n; start++) {
          double acc = 0;
          for (int j = 0; j < n; j++) {
            double table[perf::kKeys];
            perf::sourceTable((start + j) % n, dt, flagcxSum, table);
            acc += table[k];
            ASSERT_EQ(perf::dispatch<perf::Store>(dt, acc), acc)
                << "dtype " << dt << " n " << n << " key " << k << " from rank " << start;
          }
          total = acc;
        }
        EXPECT_EQ(ref[k], total) << "dtype " << dt << " n " << n << " key " << k;
        EXPECT_LE(total, 8) << "n " << n;
      }
    }
}

}  // namespace
