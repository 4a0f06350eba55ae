// The CUDA adapter's ordered fold (DeviceAdapter::foldAsync, cuda_fold.cu)
// against hostFold, bit for bit: every dtype (the four floats, both FP8
// types, integers) x Sum/Prod/Avg/Max/Min x 1..8 sources x counts around the
// kernel's vectors and blocks (1, 255, 256, 257, 2^20 + 3), in place,
// sources without a common 16-byte offset (the element path), and lists
// longer than the kernel's parameters (65 to 3000 sources, two such folds in
// flight at once).  hostFold itself is checked against a left fold computed
// by a test in tests/adapters/fold_test.cc.  Values mix magnitudes and
// cancel, so that another order or an extra rounding shows.  Exits 77
// (skipped) without a usable GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "adapters/device/cuda/cuda_kernels.h"
#include "gpu_common.h"
#include "tests/common/float_elems.h"

using namespace flagcx;
namespace {

DeviceAdapter *A() { return cudaAdapter(); }

#define OK(call) ASSERT_EQ((call), flagcxSuccess) << #call << ": " << flagcxGetLastError(nullptr)
#define CU(call) ASSERT_EQ((call), cudaSuccess) << #call

const float kPool[] = {1.0f, -1.0f, 3.0f, 0.0625f, 100.0f, -100.0f, 0.3f, -0.7f, 7.5f, 200.0f, 1e-3f};

// One element of dtype dt from v (integers: a small integer from it).
void put(double v, uint8_t *p, flagcxDataType_t dt) {
  if (dt > flagcxUint64) return testelems::narrow(v, p, dt);
  int64_t i = static_cast<int64_t>(v) % 10;
  memcpy(p, &i, getFlagcxDataTypeSize(dt));  // little-endian: the low bytes
}

// n sources of `count` elements each, laid out `stride` bytes apart in one
// buffer (host copy); mixed magnitudes (1e8 for the wide floats) and signs.
std::vector<uint8_t> inputs(int n, size_t count, size_t stride, flagcxDataType_t dt, uint32_t seed) {
  std::mt19937 rng(seed);
  size_t es = getFlagcxDataTypeSize(dt);
  std::vector<uint8_t> x(static_cast<size_t>(n) * stride);
  for (int k = 0; k < n; k++)
    for (size_t i = 0; i < count; i++) {
      double big = (dt == flagcxFloat32 || dt == flagcxFloat64) && rng() % 3 == 0 ? 1e8 : 1.0;
      put(kPool[rng() % 11] * big * (rng() % 2 ? 1.0 : 0.375), &x[k * stride + i * es], dt);
    }
  return x;
}

struct Sources {
  std::vector<uint8_t> host;  // n sources, stride apart
  uint8_t *dev = nullptr;     // the same on the GPU
  size_t stride = 0;
};

// Device fold into dd (+ od elements) of sources at element offsets
// `offs` (0 for all when empty) against hostFold of the host copies.
void compare(const Sources &s, int n, size_t count, flagcxDataType_t dt, flagcxRedOp_t op,
             uint8_t *dd, size_t od, const std::vector<size_t> &offs) {
  size_t es = getFlagcxDataTypeSize(dt);
  std::vector<const void *> hs(n), ds(n);
  for (int k = 0; k < n; k++) {
    size_t o = (offs.empty() ? 0 : offs[k % offs.size()]) * es;
    hs[k] = s.host.data() + k * s.stride + o;
    ds[k] = s.dev + k * s.stride + o;
  }
  std::vector<uint8_t> want(count * es), got(count * es, 0xcd);
  OK(hostFold(want.data(), hs.data(), n, count, dt, op));
  OK(A()->foldAsync(dd + od * es, ds.data(), n, count, dt, op));
  OK(A()->flush());
  CU(cudaMemcpy(got.data(), dd + od * es, count * es, cudaMemcpyDeviceToHost));
  ASSERT_EQ(memcmp(got.data(), want.data(), count * es), 0)
      << "dtype " << dt << " op " << op << " n " << n << " count " << count << " dst offset " << od
      << (offs.empty() ? "" : " (sources at differing offsets)");
}

const flagcxDataType_t kAll[] = {flagcxFloat32, flagcxFloat64, flagcxFloat16, flagcxBfloat16,
                                 flagcxFloat8e4m3, flagcxFloat8e5m2, flagcxInt8, flagcxUint8,
                                 flagcxInt32, flagcxUint32, flagcxInt64, flagcxUint64};
const flagcxRedOp_t kOps[] = {flagcxSum, flagcxProd, flagcxAvg, flagcxMax, flagcxMin};

TEST(CudaFold, EveryTypeOpSourceCountMatchesHostFold) {
  const size_t counts[] = {1, 255, 256, 257, (1u << 20) + 3};
  int checked = 0;
  for (flagcxDataType_t dt : kAll) {
    size_t es = getFlagcxDataTypeSize(dt);
    Sources s;
    s.stride = ((counts[4] + 64) * es + 255) / 256 * 256;
    s.host = inputs(8, counts[4] + 64, s.stride, dt, 11 + dt);
    uint8_t *dd = nullptr;
    CU(cudaMalloc(reinterpret_cast<void **>(&s.dev), s.host.size()));
    CU(cudaMalloc(reinterpret_cast<void **>(&dd), s.stride));
    CU(cudaMemcpy(s.dev, s.host.data(), s.host.size(), cudaMemcpyHostToDevice));
    for (flagcxRedOp_t op : kOps)
      for (int n = 1; n <= 8; n++)
        for (size_t count : counts) {
          compare(s, n, count, dt, op, dd, 0, {});
          if (HasFatalFailure()) return;
          checked++;
        }
    // The element path: dst and sources at differing offsets.
    for (flagcxRedOp_t op : kOps)
      for (size_t count : {size_t{257}, counts[4]}) {
        compare(s, 5, count, dt, op, dd, 1, {0, 3, 2});
        if (HasFatalFailure()) return;
        compare(s, 3, count, dt, op, dd, 1, {1});  // common offset, not 16-byte aligned
        if (HasFatalFailure()) return;
        checked += 2;
      }
    CU(cudaFree(s.dev));
    CU(cudaFree(dd));
  }
  printf("fold cases checked: %d\n", checked);
}

// dst is one of the sources (each rank's own chunk, folded in place).
TEST(CudaFold, InPlaceIntoEachSource) {
  for (flagcxDataType_t dt : {flagcxFloat32, flagcxBfloat16, flagcxFloat8e4m3, flagcxFloat64}) {
    size_t es = getFlagcxDataTypeSize(dt);
    const size_t count = 4099;
    const int n = 5;
    Sources s;
    s.stride = (count * es + 255) / 256 * 256;
    s.host = inputs(n, count, s.stride, dt, 3);
    CU(cudaMalloc(reinterpret_cast<void **>(&s.dev), s.host.size()));
    std::vector<const void *> hs(n), ds(n);
    for (int k = 0; k < n; k++) {
      hs[k] = s.host.data() + k * s.stride;
      ds[k] = s.dev + k * s.stride;
    }
    for (flagcxRedOp_t op : kOps)
      for (int into = 0; into < n; into++) {
        CU(cudaMemcpy(s.dev, s.host.data(), s.host.size(), cudaMemcpyHostToDevice));
        std::vector<uint8_t> want(count * es), got(count * es);
        OK(hostFold(want.data(), hs.data(), n, count, dt, op));
        OK(A()->foldAsync(s.dev + into * s.stride, ds.data(), n, count, dt, op));
        OK(A()->flush());
        CU(cudaMemcpy(got.data(), s.dev + into * s.stride, count * es, cudaMemcpyDeviceToHost));
        ASSERT_EQ(memcmp(got.data(), want.data(), count * es), 0)
            << "in place into source " << into << ", dtype " << dt << " op " << op;
      }
    CU(cudaFree(s.dev));
  }
}

// More sources than the kernel's parameters hold (a communicator of
// thousands of ranks): the list goes through device memory.  Two such folds
// are issued before either is waited for, so the second list's upload must
// not disturb the first fold.
TEST(CudaFold, LongSourceListsInFlightTogether) {
  ASSERT_EQ(cuda::kFoldParamSources, 64);
  const size_t count = 1000;
  for (flagcxDataType_t dt : {flagcxFloat32, flagcxBfloat16, flagcxFloat8e4m3, flagcxFloat8e5m2}) {
    size_t es = getFlagcxDataTypeSize(dt);
    for (int n : {65, 300, 3000}) {
      Sources s;
      s.stride = (count * es + 255) / 256 * 256;
      s.host = inputs(n, count, s.stride, dt, 17 + n);
      uint8_t *dd = nullptr;
      CU(cudaMalloc(reinterpret_cast<void **>(&s.dev), s.host.size()));
      CU(cudaMalloc(reinterpret_cast<void **>(&dd), 2 * s.stride));
      CU(cudaMemcpy(s.dev, s.host.data(), s.host.size(), cudaMemcpyHostToDevice));
      for (flagcxRedOp_t op : {flagcxSum, flagcxAvg, flagcxMax}) {
        // Fold 1: sources in order; fold 2: the same sources reversed.
        std::vector<const void *> h1(n), d1(n), h2(n), d2(n);
        for (int k = 0; k < n; k++) {
          h1[k] = s.host.data() + k * s.stride;
          d1[k] = s.dev + k * s.stride;
          h2[n - 1 - k] = h1[k];
          d2[n - 1 - k] = d1[k];
        }
        std::vector<uint8_t> w1(count * es), w2(count * es), g1(count * es), g2(count * es);
        OK(hostFold(w1.data(), h1.data(), n, count, dt, op));
        OK(hostFold(w2.data(), h2.data(), n, count, dt, op));
        OK(A()->foldAsync(dd, d1.data(), n, count, dt, op));
        d1.assign(n, nullptr);  // the adapter must have taken the list already
        OK(A()->foldAsync(dd + s.stride, d2.data(), n, count, dt, op));
        OK(A()->flush());
        CU(cudaMemcpy(g1.data(), dd, count * es, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(g2.data(), dd + s.stride, count * es, cudaMemcpyDeviceToHost));
        ASSERT_EQ(memcmp(g1.data(), w1.data(), count * es), 0) << "dtype " << dt << " op " << op << " n " << n;
        ASSERT_EQ(memcmp(g2.data(), w2.data(), count * es), 0)
            << "reversed, dtype " << dt << " op " << op << " n " << n;
      }
      CU(cudaFree(s.dev));
      CU(cudaFree(dd));
    }
  }
}

TEST(CudaFold, BadArguments) {
  void *d = nullptr;
  CU(cudaMalloc(&d, 4096));
  const void *srcs[] = {d, nullptr};
  EXPECT_EQ(A()->foldAsync(d, srcs, 0, 16, flagcxFloat32, flagcxSum), flagcxInvalidArgument);
  EXPECT_EQ(A()->foldAsync(d, srcs, 2, 16, flagcxFloat32, flagcxSum), flagcxInvalidArgument);
  EXPECT_EQ(A()->foldAsync(d, srcs, 1, 16, flagcxNumTypes, flagcxSum), flagcxInvalidArgument);
  EXPECT_EQ(A()->foldAsync(d, srcs, 1, 16, flagcxFloat32, flagcxRedNoOp), flagcxInvalidArgument);
  EXPECT_EQ(A()->foldAsync(nullptr, srcs, 1, 16, flagcxFloat32, flagcxSum), flagcxInvalidArgument);
  EXPECT_EQ(A()->foldAsync(d, srcs, 1, 0, flagcxFloat32, flagcxSum), flagcxSuccess);
  CU(cudaFree(d));
}

}  // namespace

int main(int argc, char **argv) {
  if (int rc = gputest::skipUnlessGpu("cuda_fold_test")) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
