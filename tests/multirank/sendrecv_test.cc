// Send/recv between real processes over shm and over sockets.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/common/harness.h"

namespace {

uint8_t pattern(int from, int to, size_t i) {
  return static_cast<uint8_t>(from * 131 + to * 17 + i * 7 + 1 + (i >> 12));
}

struct Param {
  int nranks;
  bool shm;
};

std::string name(const testing::TestParamInfo<Param> &p) {
  return std::to_string(p.param.nranks) + "ranks_" + (p.param.shm ? "shm" : "socket");
}

harness::Env envFor(bool shm) {
  harness::Env e;
  e.vars = {{"FLAGCX_SHM_DISABLE", shm ? "0" : "1"}, {"FLAGCX_TIMEOUT", "60"}};
  return e;
}

class P2P : public testing::TestWithParam<Param> {};

TEST_P(P2P, InitDestroy) {
  auto res = harness::run(GetParam().nranks, [](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    int n = -1, r = -1;
    RANK_OK(flagcxCommCount(comm, &n));
    RANK_OK(flagcxCommUserRank(comm, &r));
    RANK_CHECK(n == nranks && r == rank, "count %d rank %d", n, r);
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, envFor(GetParam().shm));
  EXPECT_TRUE(res.allOk()) << res.describe();
}

// Each rank sends to rank+1 and receives from rank-1, in one group, for
// every size; then the same with the receive posted first.
TEST_P(P2P, RingAllSizes) {
  auto res = harness::run(GetParam().nranks, [](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    const size_t sizes[] = {0, 1, 4095, (1u << 20) + 3, 64u << 20};
    int right = (rank + 1) % nranks, left = (rank - 1 + nranks) % nranks;
    for (size_t sz : sizes) {
      std::vector<uint8_t> out(sz), in(sz, 0xEE);
      for (size_t i = 0; i < sz; i++) out[i] = pattern(rank, right, i);
      for (int order = 0; order < 2; order++) {
        std::fill(in.begin(), in.end(), 0xEE);
        RANK_OK(flagcxGroupStart(comm));
        if (order == 0) {
          RANK_OK(flagcxSend(out.data(), sz, flagcxUint8, right, comm, nullptr));
          RANK_OK(flagcxRecv(in.data(), sz, flagcxUint8, left, comm, nullptr));
        } else {
          RANK_OK(flagcxRecv(in.data(), sz, flagcxUint8, left, comm, nullptr));
          RANK_OK(flagcxSend(out.data(), sz, flagcxUint8, right, comm, nullptr));
        }
        RANK_OK(flagcxGroupEnd(comm));
        for (size_t i = 0; i < sz; i++)
          RANK_CHECK(in[i] == pattern(left, rank, i), "size %zu byte %zu: %d != %d", sz, i, in[i],
                     pattern(left, rank, i));
      }
    }
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, envFor(GetParam().shm), 300);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

// Every rank exchanges with every other rank (and itself) in one group, on a
// stream, posting in a rank-dependent order.
TEST_P(P2P, AllPairsGroupOnStream) {
  auto res = harness::run(GetParam().nranks, [](int rank, int nranks, flagcxUniqueId *id) {
    harness::CommOnStream cs;
    RANK_OK(cs.open(rank, nranks, id));
    flagcxComm_t comm = cs.comm;
    flagcxStream_t stream = cs.stream;
    const size_t sz = 100000 + static_cast<size_t>(rank);  // sizes differ per sender
    std::vector<std::vector<uint8_t>> out(static_cast<size_t>(nranks)), in(static_cast<size_t>(nranks));
    for (int p = 0; p < nranks; p++) {
      out[static_cast<size_t>(p)].resize(sz);
      for (size_t i = 0; i < sz; i++) out[static_cast<size_t>(p)][i] = pattern(rank, p, i);
      in[static_cast<size_t>(p)].assign(100000 + static_cast<size_t>(p), 0);
    }
    RANK_OK(flagcxGroupStart(comm));
    for (int k = 0; k < nranks; k++) {
      int p = (rank % 2) ? (nranks - 1 - k) : k;  // odd ranks post in reverse
      RANK_OK(flagcxRecv(in[static_cast<size_t>(p)].data(), in[static_cast<size_t>(p)].size(),
                         flagcxUint8, p, comm, stream));
      RANK_OK(flagcxSend(out[static_cast<size_t>(p)].data(), sz, flagcxUint8, p, comm, stream));
    }
    RANK_OK(flagcxGroupEnd(comm));
    RANK_OK(cs.sync());
    for (int p = 0; p < nranks; p++)
      for (size_t i = 0; i < in[static_cast<size_t>(p)].size(); i++)
        RANK_CHECK(in[static_cast<size_t>(p)][i] == pattern(p, rank, i), "from %d byte %zu", p, i);
    RANK_OK(cs.close());
    return 0;
  }, envFor(GetParam().shm));
  EXPECT_TRUE(res.allOk()) << res.describe();
}

// More messages to one peer than a Conn takes at once, every send posted
// before any receive on both sides: posting must not starve the receives.
TEST_P(P2P, ManyMessagesSendsFirst) {
  auto res = harness::run(GetParam().nranks, [](int rank, int nranks, flagcxUniqueId *id) {
    flagcxComm_t comm;
    RANK_OK(flagcxCommInitRank(&comm, nranks, id, rank));
    const int kMsgs = 600;
    const size_t sz = 70000;  // above the single-copy threshold
    int peer = rank ^ 1;
    if (peer >= nranks) peer = rank;
    std::vector<uint8_t> out(sz * kMsgs), in(sz * kMsgs, 0);
    for (size_t i = 0; i < out.size(); i++) out[i] = pattern(rank, peer, i);
    RANK_OK(flagcxGroupStart(comm));
    for (int m = 0; m < kMsgs; m++)
      RANK_OK(flagcxSend(out.data() + m * sz, sz, flagcxUint8, peer, comm, nullptr));
    for (int m = 0; m < kMsgs; m++)
      RANK_OK(flagcxRecv(in.data() + m * sz, sz, flagcxUint8, peer, comm, nullptr));
    RANK_OK(flagcxGroupEnd(comm));
    for (size_t i = 0; i < in.size(); i++)
      RANK_CHECK(in[i] == pattern(peer, rank, i), "byte %zu", i);
    RANK_OK(flagcxCommDestroy(comm));
    return 0;
  }, envFor(GetParam().shm), 300);
  EXPECT_TRUE(res.allOk()) << res.describe();
}

INSTANTIATE_TEST_SUITE_P(Ranks, P2P,
                         testing::Values(Param{2, true}, Param{3, true}, Param{4, true},
                                         Param{8, true}, Param{2, false}, Param{3, false},
                                         Param{4, false}, Param{8, false}),
                         name);

}  // namespace
