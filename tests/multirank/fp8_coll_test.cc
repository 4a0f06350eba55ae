// The 8-bit floats through whole communicators: allreduce, reducescatter and
// reduce (Sum, Max) and allgather of flagcxFloat8e4m3 / flagcxFloat8e5m2 on
// host ranks, at counts from one element (the shared block) to 300000 (the
// schedule path), over shm and over sockets.  Each rank's values are small integers,
// exact in both formats and in every order, so the expected result is known
// whatever path and algorithm run.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "adapters/device/host/host_reduce_kernels.h"
#include "tests/common/harness.h"

namespace {

namespace rk = flagcx::reduce_kernels;

uint8_t enc(flagcxDataType_t dt, float v) {
  return dt == flagcxFloat8e4m3 ? rk::floatToE4m3(v) : rk::floatToE5m2(v);
}
float val(int rank, size_t i) { return static_cast<float>((i + rank) % 3); }  // 0, 1 or 2

int checkAll(const std::vector<uint8_t> &got, const std::vector<uint8_t> &want, const char *what,
             flagcxDataType_t dt, size_t count) {
  for (size_t i = 0; i < want.size(); i++)
    RANK_CHECK(got[i] == want[i], "%s dtype %d count %zu: element %zu is 0x%02x, want 0x%02x", what,
               static_cast<int>(dt), count, i, got[i], want[i]);
  return 0;
}

#define FP8_EXPECT(check) \
  do {                    \
    if (int rc = (check)) return rc; \
  } while (0)

int runRank(int rank, int n, flagcxUniqueId *id) {
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
  for (flagcxDataType_t dt : {flagcxFloat8e4m3, flagcxFloat8e5m2}) {
    for (size_t count : {size_t(1), size_t(1000), size_t(20000), size_t(300000)}) {
      std::vector<uint8_t> in(count * n), out(count * n, 0xcd), sum(count * n), mx(count * n);
      for (size_t i = 0; i < count * n; i++) {
        in[i] = enc(dt, val(rank, i));
        float s = 0, m = 0;
        for (int r = 0; r < n; r++) {
          s += val(r, i);
          m = val(r, i) > m ? val(r, i) : m;
        }
        sum[i] = enc(dt, s);
        mx[i] = enc(dt, m);
      }
      RANK_OK(flagcxAllReduce(in.data(), out.data(), count, dt, flagcxSum, comm, nullptr));
      FP8_EXPECT(checkAll({out.begin(), out.begin() + count}, {sum.begin(), sum.begin() + count},
                       "allreduce sum", dt, count));
      RANK_OK(flagcxAllReduce(in.data(), out.data(), count, dt, flagcxMax, comm, nullptr));
      FP8_EXPECT(checkAll({out.begin(), out.begin() + count}, {mx.begin(), mx.begin() + count},
                       "allreduce max", dt, count));
      RANK_OK(flagcxReduceScatter(in.data(), out.data(), count, dt, flagcxSum, comm, nullptr));
      FP8_EXPECT(checkAll({out.begin(), out.begin() + count},
                       {sum.begin() + rank * count, sum.begin() + (rank + 1) * count},
                       "reducescatter sum", dt, count));
      const int root = n - 1;
      RANK_OK(flagcxReduce(in.data(), out.data(), count, dt, flagcxSum, root, comm, nullptr));
      if (rank == root)
        FP8_EXPECT(checkAll({out.begin(), out.begin() + count}, {sum.begin(), sum.begin() + count},
                         "reduce sum", dt, count));
      RANK_OK(flagcxAllGather(in.data(), out.data(), count, dt, comm, nullptr));
      std::vector<uint8_t> gathered(count * n);
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++) gathered[r * count + i] = enc(dt, val(r, i));
      FP8_EXPECT(checkAll(out, gathered, "allgather", dt, count));
    }
  }
  RANK_OK(flagcxCommDestroy(comm));
  return 0;
}

TEST(Fp8Collectives, OverShm) {
  for (int n : {2, 3}) {
    auto res = harness::run(n, runRank, {}, 240);
    EXPECT_TRUE(res.allOk()) << n << " ranks: " << res.failures();
  }
}

TEST(Fp8Collectives, OverSockets) {
  auto res = harness::run(3, runRank, {{{"FLAGCX_SHM_DISABLE", "1"}}}, 240);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

}  // namespace
