// FlagCX 0.13's binary layouts: a program or a ctypes wrapper built against
// FlagCX reads these structs by offset, so every slot must sit where FlagCX
// puts it.  The expected offsets are FlagCX 0.13's slot order (its
// flagcx.h), written out here rather than derived from our header.
#include <gtest/gtest.h>

#include <cstddef>

#include "flagcx.h"
#include "flagcx_kernel.h"
#include "flagcx_p2p.h"

namespace {

TEST(Layout, DeviceHandleSlotsSitWhereFlagcx013PutsThem) {
  constexpr size_t p = sizeof(void *);
#define SLOT(name, index) EXPECT_EQ(offsetof(flagcxDeviceHandle, name), (index) * p) << #name
  SLOT(deviceSynchronize, 0);
  SLOT(deviceMemcpy, 1);
  SLOT(deviceMemset, 2);
  SLOT(deviceMalloc, 3);
  SLOT(deviceFree, 4);
  SLOT(setDevice, 5);
  SLOT(getDevice, 6);
  SLOT(getDeviceCount, 7);
  SLOT(getVendor, 8);
  SLOT(hostGetDevicePointer, 9);
  SLOT(streamCreate, 10);
  SLOT(streamDestroy, 11);
  SLOT(streamCopy, 12);
  SLOT(streamFree, 13);
  SLOT(streamSynchronize, 14);
  SLOT(streamQuery, 15);
  SLOT(streamWaitEvent, 16);
  SLOT(eventCreate, 17);
  SLOT(eventDestroy, 18);
  SLOT(eventRecord, 19);
  SLOT(eventSynchronize, 20);
  SLOT(eventQuery, 21);
  SLOT(eventElapsedTime, 22);
  SLOT(ipcMemHandleCreate, 23);
  SLOT(ipcMemHandleGet, 24);
  SLOT(ipcMemHandleOpen, 25);
  SLOT(ipcMemHandleClose, 26);
  SLOT(ipcMemHandleFree, 27);
#undef SLOT
  EXPECT_EQ(sizeof(flagcxDeviceHandle), 28 * p);
}

// The table flagcxDeviceHandleInit hands out fills every slot.
TEST(Layout, EverySlotOfTheHostTableIsSet) {
  setenv("FLAGCX_DEVICE", "host", 1);
  flagcxDeviceHandle_t h = nullptr;
  ASSERT_EQ(flagcxDeviceHandleInit(&h), flagcxSuccess);
  auto *slots = reinterpret_cast<void *const *>(h);
  for (size_t i = 0; i < sizeof(flagcxDeviceHandle) / sizeof(void *); i++)
    EXPECT_NE(slots[i], nullptr) << "slot " << i;
  EXPECT_EQ(flagcxDeviceHandleFree(h), flagcxSuccess);
}

TEST(Layout, PublicStructsAndValues) {
  EXPECT_EQ(sizeof(flagcxUniqueId), 256u);
  EXPECT_EQ(sizeof(flagcxRedOp_t), sizeof(int));
  EXPECT_EQ(static_cast<int>(flagcxMemCCL), 0);
  EXPECT_EQ(static_cast<int>(flagcxMemSHMEM), 1);
  EXPECT_EQ(FLAGCX_VERSION_CODE, FLAGCX_VERSION_MAJOR * 10000 + FLAGCX_VERSION_MINOR * 100 +
                                     FLAGCX_VERSION_PATCH);
  EXPECT_GE(FLAGCX_VERSION_CODE, 1300);
  EXPECT_EQ(offsetof(flagcxWaitSignalDesc_t, opCnt), 0u);
  EXPECT_EQ(offsetof(flagcxWaitSignalDesc_t, peer), 8u);
  EXPECT_EQ(sizeof(flagcxWaitSignalDesc_t), 16u);
  EXPECT_EQ(sizeof(flagcxHandlerGroup), 3 * sizeof(void *));
  EXPECT_EQ(sizeof(flagcxFuncArgs), 3 * sizeof(void *));
  // flagcx_kernel.h
  EXPECT_EQ(sizeof(flagcxDeviceTrigger), 24u);
  EXPECT_EQ(sizeof(flagcxReduceTrigger), 32u);
  EXPECT_EQ(alignof(flagcxReduceTrigger), 16u);
  EXPECT_EQ(offsetof(flagcxDevCommRequirements, barrierCount), 4u);
  EXPECT_EQ(offsetof(flagcxDevCommRequirements, interForceEnable), 24u);
  EXPECT_EQ(offsetof(flagcxDevCommRequirements, interCounterCount), 36u);
  EXPECT_EQ(sizeof(flagcxDevCommRequirements), 40u);
  EXPECT_EQ(offsetof(flagcxCommProperties, netType), 16u);
  EXPECT_EQ(static_cast<int>(flagcxNetTypeGdaki), 3);
  EXPECT_EQ(static_cast<int>(flagcxDevicePrimGet), 10);
  // flagcx_p2p.h
  EXPECT_EQ(sizeof(FlagcxP2pRdmaDesc), static_cast<size_t>(FLAGCX_P2P_DESC_SIZE));
  EXPECT_EQ(offsetof(FlagcxP2pRdmaDesc, size), 8u);
  EXPECT_EQ(offsetof(FlagcxP2pRdmaDesc, rkey), 12u);
  EXPECT_EQ(offsetof(FlagcxP2pRdmaDesc, nmsgs), 16u);
  EXPECT_EQ(offsetof(FlagcxP2pRdmaDesc, rid), 20u);
  EXPECT_EQ(offsetof(FlagcxP2pRdmaDesc, idx), 24u);
  EXPECT_EQ(offsetof(FlagcxP2pRdmaDesc, padding), 32u);
  EXPECT_EQ(sizeof(FlagcxP2pNotifyMsg), 2u * FLAGCX_P2P_MSG_SIZE);
  EXPECT_EQ(FLAGCX_P2P_IPC_INFO_SIZE, 128);
}

}  // namespace
