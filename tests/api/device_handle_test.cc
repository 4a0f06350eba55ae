// flagcxDeviceHandleInit/Free, the deprecated handler group, and the small
// library-wide queries (dtype sizes, versions, result strings).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "adapters/device/adapter.h"
#include "base/params.h"
#include "flagcx.h"

namespace {
class DeviceHandleTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("FLAGCX_DEVICE");
    flagcx::paramsReload();
  }
};
}  // namespace

TEST_F(DeviceHandleTest, NullArgumentIsNamed) {
  EXPECT_EQ(flagcxDeviceHandleInit(nullptr), flagcxInvalidArgument);
  std::string err = flagcxGetLastError(nullptr);
  EXPECT_NE(err.find("devHandle"), std::string::npos) << err;
  EXPECT_EQ(flagcxDeviceHandleFree(nullptr), flagcxInvalidArgument);
  EXPECT_EQ(flagcxHandleInit(nullptr), flagcxInvalidArgument);
  EXPECT_NE(std::string(flagcxGetLastError(nullptr)).find("handler"), std::string::npos);
}

TEST_F(DeviceHandleTest, InitFreeRoundTrip) {
  for (const char *dev : {"auto", "host", "HOST"}) {
    setenv("FLAGCX_DEVICE", dev, 1);
    flagcx::paramsReload();
    flagcxDeviceHandle_t h = nullptr;
    ASSERT_EQ(flagcxDeviceHandleInit(&h), flagcxSuccess) << dev;
    ASSERT_NE(h, nullptr);
    // Every entry of the table is filled.
    void *const *fields = reinterpret_cast<void *const *>(h);
    for (size_t i = 0; i < sizeof(*h) / sizeof(void *); i++) EXPECT_NE(fields[i], nullptr) << i;
    char vendor[128] = {};
    ASSERT_EQ(h->getVendor(vendor), flagcxSuccess);
    if (std::string(dev) != "auto") {
      EXPECT_STREQ(vendor, "host");
    }
    void *p = nullptr;
    ASSERT_EQ(h->deviceMalloc(&p, 1024, flagcxMemDevice, nullptr), flagcxSuccess);
    ASSERT_EQ(h->deviceMemset(p, 1, 1024, flagcxMemDevice, nullptr), flagcxSuccess);
    ASSERT_EQ(h->deviceFree(p, flagcxMemDevice, nullptr), flagcxSuccess);
    ASSERT_EQ(flagcxDeviceHandleFree(h), flagcxSuccess);
  }
}

TEST_F(DeviceHandleTest, UnavailableDeviceIsInvalidUsage) {
  setenv("FLAGCX_DEVICE", "cuda", 1);
  flagcx::paramsReload();
  flagcxDeviceHandle_t h = nullptr;
  flagcxResult_t r = flagcxDeviceHandleInit(&h);
  if (r == flagcxSuccess) {
    flagcxDeviceHandleFree(h);
    GTEST_SKIP() << "a CUDA adapter is built and usable here";
  }
  EXPECT_EQ(r, flagcxInvalidUsage);
  EXPECT_EQ(h, nullptr);
  EXPECT_NE(std::string(flagcxGetLastError(nullptr)).find("FLAGCX_DEVICE"), std::string::npos);

  setenv("FLAGCX_DEVICE", "abacus", 1);
  flagcx::paramsReload();
  EXPECT_EQ(flagcxDeviceHandleInit(&h), flagcxInvalidUsage);
  EXPECT_NE(std::string(flagcxGetLastError(nullptr)).find("abacus"), std::string::npos);
  EXPECT_EQ(flagcx::selectedAdapter(), nullptr);
}

TEST_F(DeviceHandleTest, DeprecatedHandlerGroup) {
  flagcxHandlerGroup_t g = nullptr;
  ASSERT_EQ(flagcxHandleInit(&g), flagcxSuccess);
  ASSERT_NE(g, nullptr);
  EXPECT_NE(g->uniqueId, nullptr);
  EXPECT_EQ(g->comm, nullptr);
  ASSERT_NE(g->devHandle, nullptr);
  int n = 0;
  EXPECT_EQ(g->devHandle->getDeviceCount(&n), flagcxSuccess);
  EXPECT_GE(n, 1);
  memset(g->uniqueId->internal, 1, sizeof(g->uniqueId->internal));  // caller-writable storage
  ASSERT_EQ(flagcxHandleFree(g), flagcxSuccess);
  // A second init works too (the deprecation warning is printed once).
  ASSERT_EQ(flagcxHandleInit(&g), flagcxSuccess);
  ASSERT_EQ(flagcxHandleFree(g), flagcxSuccess);
}

TEST(Misc, DataTypeSizes) {
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxInt8), 1u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxChar), 1u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxUint8), 1u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxInt32), 4u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxUint32), 4u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxInt64), 8u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxUint64), 8u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxFloat16), 2u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxFloat32), 4u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxFloat64), 8u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxBfloat16), 2u);
  EXPECT_EQ(getFlagcxDataTypeSize(flagcxNumTypes), 0u);
  EXPECT_EQ(getFlagcxDataTypeSize(static_cast<flagcxDataType_t>(-1)), 0u);
  EXPECT_EQ(getFlagcxDataTypeSize(static_cast<flagcxDataType_t>(1000)), 0u);
}

TEST(Misc, Version) {
  int v = -1;
  ASSERT_EQ(flagcxGetVersion(&v), flagcxSuccess);
  EXPECT_EQ(v, FLAGCX_VERSION_CODE);
  EXPECT_EQ(flagcxGetVersion(nullptr), flagcxInvalidArgument);
}

TEST(Misc, ErrorStrings) {
  std::set<std::string> seen;
  for (int r = flagcxSuccess; r < flagcxNumResults; r++) {
    const char *s = flagcxGetErrorString(static_cast<flagcxResult_t>(r));
    ASSERT_NE(s, nullptr);
    EXPECT_GT(strlen(s), 0u);
    EXPECT_STRNE(s, "unknown result") << r;
    EXPECT_TRUE(seen.insert(s).second) << "duplicate string for " << r;
  }
  EXPECT_STREQ(flagcxGetErrorString(flagcxNumResults), "unknown result");
  EXPECT_STREQ(flagcxGetErrorString(static_cast<flagcxResult_t>(-1)), "unknown result");
  EXPECT_STREQ(flagcxGetErrorString(static_cast<flagcxResult_t>(77)), "unknown result");
}
