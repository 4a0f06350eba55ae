// One-sided operations on device memory (docs/ONESIDED.md, "CUDA"): two
// CUDA ranks of one host register flagcxMemAlloc device windows and regions
// (mapped by CUDA IPC), exchange PutSignal / WaitSignal on CUDA streams and
// Put / Get with the counter, and check every byte on the host.  The
// communicator runs on the engine (FLAGCX_USE_HETERO_COMM=1: a vendor
// pass-through has no one-sided path).  Exits 77 without a usable GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gpu_common.h"
#include "tests/common/harness.h"

namespace {

unsigned char pat(int from, size_t i, int round) {
  return static_cast<unsigned char>(from * 41 + static_cast<int>(i % 253) + round * 5 + 1);
}

int body(int rank, int nranks, flagcxUniqueId *id) {
  flagcxDeviceHandle_t dev;
  RANK_OK(flagcxDeviceHandleInit(&dev));
  int ndev = 0;
  RANK_OK(dev->getDeviceCount(&ndev));
  RANK_OK(dev->setDevice(rank % (ndev > 0 ? ndev : 1)));
  flagcxComm_t comm;
  RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
  flagcxStream_t s;
  RANK_OK(dev->streamCreate(&s));
  const size_t chunk = (4 << 20) + 4099;  // per rank, odd on purpose
  const size_t winBytes = chunk * static_cast<size_t>(nranks);
  void *win = nullptr, *src = nullptr, *reg = nullptr;
  RANK_OK(flagcxMemAlloc(&win, winBytes, flagcxMemCCL));
  RANK_OK(flagcxMemAlloc(&src, chunk, flagcxMemCCL));
  RANK_OK(flagcxMemAlloc(&reg, winBytes, flagcxMemCCL));
  RANK_OK(dev->deviceMemset(win, 0, winBytes, flagcxMemDevice, nullptr));
  flagcxWindow_t w = nullptr;
  RANK_OK(flagcxCommWindowRegister(comm, win, winBytes, &w, FLAGCX_WIN_COLL_SYMMETRIC, flagcxMemCCL));
  RANK_OK(flagcxOneSideRegister(comm, reg, winBytes));
  std::vector<unsigned char> host(winBytes);
  int peer = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < chunk; i++) host[i] = pat(rank, i, round);
    RANK_OK(dev->deviceMemcpy(src, host.data(), chunk, flagcxMemcpyHostToDevice, nullptr));
    RANK_OK(flagcxPutSignal(src, chunk, flagcxUint8, peer, w, static_cast<size_t>(rank) * chunk, 0,
                            comm, s));
    flagcxWaitSignalDesc_t d{1, prev};
    RANK_OK(flagcxWaitSignal(1, &d, comm, s));
    RANK_OK(dev->streamSynchronize(s));
    RANK_OK(dev->deviceMemcpy(host.data(), win, winBytes, flagcxMemcpyDeviceToHost, nullptr));
    for (size_t i = 0; i < chunk; i++)
      RANK_CHECK(host[static_cast<size_t>(prev) * chunk + i] == pat(prev, i, round),
                 "round %d: window byte %zu from rank %d is %d", round, i, prev,
                 host[static_cast<size_t>(prev) * chunk + i]);
    RANK_OK(flagcxBarrier(comm, s));
    RANK_OK(dev->streamSynchronize(s));
  }
  // Regions: put my block (at rank * chunk of my region) to the same offset
  // of the next rank's region; the counter says when it is done.  Sources and
  // destinations never overlap: the first GPU run put from offset 0 to
  // (rank + 1) * chunk, and at 2 ranks rank 1 overwrote rank 0's source while
  // rank 0 was still reading it (rank 1 then found its own bytes).
  for (size_t i = 0; i < chunk; i++) host[i] = pat(rank, i, 9);
  const size_t mine = static_cast<size_t>(rank) * chunk;
  RANK_OK(dev->deviceMemcpy(static_cast<char *>(reg) + mine, host.data(), chunk,
                            flagcxMemcpyHostToDevice, nullptr));
  RANK_OK(flagcxBarrier(comm, s));
  RANK_OK(dev->streamSynchronize(s));
  RANK_OK(flagcxPut(comm, peer, mine, mine, chunk, 0, 0));
  RANK_OK(flagcxWaitCounter(comm, 1));
  RANK_OK(flagcxBarrier(comm, s));
  RANK_OK(dev->streamSynchronize(s));
  RANK_OK(dev->deviceMemcpy(host.data(), reg, winBytes, flagcxMemcpyDeviceToHost, nullptr));
  size_t at = static_cast<size_t>(prev) * chunk;
  for (size_t i = 0; i < chunk; i++)
    RANK_CHECK(host[at + i] == pat(prev, i, 9), "Put from rank %d: byte %zu is %d", prev, i,
               host[at + i]);
  RANK_OK(flagcxBarrier(comm, s));
  RANK_OK(dev->streamSynchronize(s));
  RANK_OK(flagcxCommWindowDeregister(comm, w, flagcxMemCCL));
  RANK_OK(dev->streamDestroy(s));
  RANK_OK(flagcxCommDestroy(comm));
  RANK_OK(flagcxMemFree(win, flagcxMemCCL));
  RANK_OK(flagcxMemFree(src, flagcxMemCCL));
  RANK_OK(flagcxMemFree(reg, flagcxMemCCL));
  RANK_OK(flagcxDeviceHandleFree(dev));
  return 0;
}

TEST(CudaOneSided, DeviceWindowsTwoRanks) {
  harness::Env env{{{"FLAGCX_DEVICE", "cuda"}, {"FLAGCX_USE_HETERO_COMM", "1"},
                    {"FLAGCX_TIMEOUT", "60"}}};
  auto r = harness::run(2, body, env, 240);
  EXPECT_TRUE(r.allOk()) << r.failures();
}

}  // namespace

int main(int argc, char **argv) {
  if (int rc = gputest::skipUnlessGpu("cuda_onesided_test")) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
