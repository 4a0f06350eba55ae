// The copy thread (src/exec/copy_worker.h, FLAGCX_COPY_THREAD): a stage's
// host copies of >= 1 MiB that none of its messages needs go to a thread of
// the communicator's own while the engine moves the messages.  Forced on
// here (auto needs 4 cores per rank), over sockets with their helper threads
// forced on too (so 2 MiB slices, FLAGCX_NET_CHUNK_SIZE auto), every result
// checked, and the thread's batch counter proving which way each call went.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "exec/copy_worker.h"
#include "tests/common/harness.h"

namespace {

float val(int r, size_t i, int round) { return static_cast<float>(r * 7 + static_cast<int>(i % 1013) + round); }

harness::Env env(const char *copyThread) {
  return {{{"FLAGCX_SHM_DISABLE", "1"}, {"FLAGCX_SOCKET_HELPERS", "1"},
           {"FLAGCX_COPY_THREAD", copyThread}, {"FLAGCX_TIMEOUT", "60"}}};
}

// Out-of-place broadcasts from every root, then an allreduce and an
// allgather of the same size; `wantBatches`: whether the root's broadcasts
// must have used the thread.
void run(int nranks, size_t count, const char *copyThread, bool wantBatches) {
  auto res = harness::run(nranks, [&](int rank, int n, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, n, id, rank));
    int failures = 0;
    std::vector<float> in(count * static_cast<size_t>(n)), out(count * static_cast<size_t>(n));
    for (int root = 0; root < n && failures == 0; root++) {
      for (size_t i = 0; i < count; i++) in[i] = val(rank, i, root);
      std::fill(out.begin(), out.end(), -1.0f);
      uint64_t before = flagcx::copyThreadBatches();
      RANK_OK(flagcxBroadcast(in.data(), out.data(), count, flagcxFloat32, root, comm, nullptr));
      uint64_t batches = flagcx::copyThreadBatches() - before;
      if (rank == root)
        RANK_EXPECT((batches > 0) == wantBatches, "root %d: %llu copy-thread batch(es)", root,
                    static_cast<unsigned long long>(batches));
      for (size_t i = 0; i < count && failures < 5; i++)
        RANK_EXPECT(out[i] == val(root, i, root), "broadcast root %d [%zu] = %g, want %g", root, i,
                    static_cast<double>(out[i]), static_cast<double>(val(root, i, root)));
    }
    for (size_t i = 0; i < count; i++) in[i] = val(rank, i, 0);
    RANK_OK(flagcxAllReduce(in.data(), out.data(), count, flagcxFloat32, flagcxSum, comm, nullptr));
    for (size_t i = 0; i < count && failures < 5; i++) {
      float want = 0;
      for (int r = 0; r < n; r++) want += val(r, i, 0);
      RANK_EXPECT(out[i] == want, "allreduce [%zu] = %g, want %g", i, static_cast<double>(out[i]),
                  static_cast<double>(want));
    }
    RANK_OK(flagcxAllGather(in.data(), out.data(), count, flagcxFloat32, comm, nullptr));
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count && failures < 5; i++)
        RANK_EXPECT(out[static_cast<size_t>(r) * count + i] == val(r, i, 0), "allgather block %d [%zu]", r, i);
    RANK_OK(flagcxCommDestroy(comm));
    return failures ? 1 : 0;
  }, env(copyThread), 240);
  EXPECT_TRUE(res.allOk()) << nranks << " ranks: " << res.failures();
}

// 3 MiB + 20 bytes: not a whole number of 2 MiB slices or 128 KiB pieces.
constexpr size_t kLarge = (3u << 20) / 4 + 5;

// From 3 ranks large broadcasts go down a chain of 8 chunks, the root's copy
// of each with its send (algos/broadcast/chain.lua): 9 MiB + 20 bytes makes
// each chunk's copy at least 1 MiB.
constexpr size_t kChain = (9u << 20) / 4 + 5;

TEST(CopyThread, OutOfPlaceBroadcastRootsCopyOnTheThread) {
  run(2, kLarge, "1", true);
  run(3, kChain, "1", true);
}
// Chain chunks below 1 MiB: the engine thread copies each with its send.
TEST(CopyThread, SmallChainChunksStayOnTheEngineThread) { run(3, kLarge, "1", false); }
// Below 1 MiB the engine thread copies, as with the thread off.
TEST(CopyThread, SmallCopiesStayOnTheEngineThread) { run(2, (1u << 20) / 4 - 1, "1", false); }
TEST(CopyThread, OffWhenZero) { run(2, kLarge, "0", false); }

}  // namespace
