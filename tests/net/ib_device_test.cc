// The RDMA-device layer of the verbs transport: the software device's RC
// semantics between two real processes (writes, write-with-immediate,
// reads, atomics, order, key/range checks, the error state, a dead peer),
// the registration cache, FLAGCX_IB_HCA parsing, and the libibverbs binding
// against ibv_get_device_list (skipped, with the reason, without a device).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "base/params.h"
#include "net/ibverbs/hca_list.h"
#include "net/ibverbs/rdma_device.h"
#include "net/ibverbs/reg_cache.h"
#include "tests/common/bootstrap.h"
#include "tests/common/harness.h"
#include "tests/common/inspect.h"

using namespace flagcx::rdma;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kTagInfo = 0x74737401;
constexpr size_t kMem = 1u << 20;

// What one rank tells the other about its queue pairs and memory.
struct Info {
  QpAddr qp[3];
  uint64_t rw, ro;       // a read-write-atomic region, a read-only one
  uint32_t rwKey, roKey;
};

struct Side {
  std::unique_ptr<flagcx::Bootstrap> bs;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Qp> qp[3];
  std::vector<uint64_t> rw = std::vector<uint64_t>(kMem / 8), ro = std::vector<uint64_t>(kMem / 8);
  std::unique_ptr<Mr> rwMr, roMr;
  Info peer{};
};

bool connectSides(Side *s, int rank, int nranks, const flagcxUniqueId &id, int nqp) {
  s->bs = harness::makeBootstrap(rank, nranks, id);
  if (!s->bs || openSoftDevice(&s->dev) != flagcxSuccess) return false;
  Info mine{};
  for (int i = 0; i < nqp; i++)
    if (s->dev->createQp(&s->qp[i]) != flagcxSuccess || s->qp[i]->localAddr(&mine.qp[i]) != flagcxSuccess)
      return false;
  if (s->dev->regMr(s->rw.data(), kMem, kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic, &s->rwMr) ||
      s->dev->regMr(s->ro.data(), kMem, kRemoteRead, &s->roMr))
    return false;
  mine.rw = reinterpret_cast<uint64_t>(s->rw.data());
  mine.ro = reinterpret_cast<uint64_t>(s->ro.data());
  mine.rwKey = s->rwMr->rkey;
  mine.roKey = s->roMr->rkey;
  int peer = 1 - rank;
  if (s->bs->send(peer, kTagInfo, &mine, sizeof mine) || s->bs->recv(peer, kTagInfo, &s->peer, sizeof s->peer))
    return false;
  for (int i = 0; i < nqp; i++)
    if (s->qp[i]->connect(s->peer.qp[i]) != flagcxSuccess) return false;
  if (s->bs->barrier() != flagcxSuccess) return false;
  for (int i = 0; i < nqp; i++) s->qp[i]->connected();
  return true;
}

// Poll until a completion arrives (or 60 s pass: a failure).
bool waitOne(Qp *qp, Completion *c) {
  auto until = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < until)
    if (qp->poll(c, 1) == 1) return true;
  return false;
}

uint8_t pat(size_t i) { return static_cast<uint8_t>(i * 7 + (i >> 9)); }

constexpr uint32_t kImmData = 7, kImmDone = 0xd0de;

// Rank 0 drives; rank 1 only polls (its "NIC" runs in poll) and checks what
// lands in its memory.
TEST(SoftDevice, WritesReadsAtomicsInOrder) {
  auto out = harness::run(2, [](int rank, int nranks, flagcxUniqueId *idp) {
    const flagcxUniqueId &id = *idp;
    int failures = 0;
    Side s;
    if (!connectSides(&s, rank, nranks, id, 1)) return 1;
    Qp *qp = s.qp[0].get();
    char *mem = reinterpret_cast<char *>(s.rw.data());
    const uint32_t kFirst = 64 << 10, kSecond = 300 << 10;  // the second spans several pieces
    if (rank == 1) {
      for (int i = 0; i < 4; i++) RANK_EXPECT(qp->postRecv(100 + i) == flagcxSuccess, "postRecv");
      for (bool done = false; !done;) {
        Completion c;
        RANK_EXPECT(waitOne(qp, &c), "no completion");
        if (failures) break;
        RANK_EXPECT(c.op == Opcode::Recv && c.status == WcStatus::Success, "recv completion: %s",
                 wcStatusName(c.status));
        if (c.imm == kImmDone) {
          done = true;
        } else {
          // RC order: the unsignaled write before this one landed too.
          RANK_EXPECT(c.imm == kImmData && c.length == kSecond && c.wrId == 100, "imm %u length %u", c.imm, c.length);
          for (size_t i = 0; i < kFirst + kSecond && failures == 0; i++)
            RANK_EXPECT(static_cast<uint8_t>(mem[i]) == pat(i), "byte %zu wrong at the receive completion", i);
        }
      }
      RANK_EXPECT(s.rw[kMem / 8 - 1] == 99, "atomics left %llu", static_cast<unsigned long long>(s.rw[kMem / 8 - 1]));
      RANK_EXPECT(s.bs->barrier() == flagcxSuccess, "barrier");
      return failures;
    }
    for (size_t i = 0; i < kFirst + kSecond; i++) mem[i] = static_cast<char>(pat(i));
    uint64_t base = s.peer.rw;
    SendWr w;
    w.op = Opcode::Write;
    w.local = mem;
    w.lkey = s.rwMr->lkey;
    w.length = kFirst;
    w.remote = base;
    w.rkey = s.peer.rwKey;
    w.signaled = false;
    RANK_EXPECT(qp->postSend(w) == flagcxSuccess, "write");
    w.op = Opcode::WriteImm;
    w.wrId = 1;
    w.local = mem + kFirst;
    w.length = kSecond;
    w.remote = base + kFirst;
    w.imm = kImmData;
    w.signaled = true;
    RANK_EXPECT(qp->postSend(w) == flagcxSuccess, "write imm");
    Completion c;
    RANK_EXPECT(waitOne(qp, &c) && c.wrId == 1 && c.status == WcStatus::Success, "write-imm completion");
    // Read it all back into the upper half of local memory.
    char *back = mem + kMem / 2;
    SendWr r;
    r.op = Opcode::Read;
    r.wrId = 2;
    r.local = back;
    r.lkey = s.rwMr->lkey;
    r.length = kFirst + kSecond;
    r.remote = base;
    r.rkey = s.peer.rwKey;
    RANK_EXPECT(qp->postSend(r) == flagcxSuccess, "read");
    RANK_EXPECT(waitOne(qp, &c) && c.wrId == 2 && c.status == WcStatus::Success, "read completion");
    RANK_EXPECT(memcmp(back, mem, kFirst + kSecond) == 0, "read-back differs");
    // Atomics on the peer's last word: +5, +5, then 10 -> 99.
    uint64_t *old = reinterpret_cast<uint64_t *>(mem + kMem / 2 - 64);
    SendWr a;
    a.local = old;
    a.lkey = s.rwMr->lkey;
    a.length = 8;
    a.remote = base + kMem - 8;
    a.rkey = s.peer.rwKey;
    uint64_t expect[3] = {0, 5, 10};
    for (int k = 0; k < 3; k++) {
      a.op = k < 2 ? Opcode::FetchAdd : Opcode::CompSwap;
      a.compareAdd = k < 2 ? 5 : 10;
      a.swap = 99;
      a.wrId = 10 + k;
      RANK_EXPECT(qp->postSend(a) == flagcxSuccess, "atomic");
      RANK_EXPECT(waitOne(qp, &c) && c.wrId == 10u + k && c.status == WcStatus::Success, "atomic completion");
      RANK_EXPECT(*old == expect[k], "atomic %d returned %llu", k, static_cast<unsigned long long>(*old));
    }
    SendWr d;
    d.op = Opcode::WriteImm;
    d.wrId = 3;
    d.remote = base;
    d.rkey = s.peer.rwKey;
    d.imm = kImmDone;
    RANK_EXPECT(qp->postSend(d) == flagcxSuccess, "done");
    RANK_EXPECT(waitOne(qp, &c) && c.wrId == 3 && c.status == WcStatus::Success, "done completion");
    RANK_EXPECT(s.bs->barrier() == flagcxSuccess, "barrier");
    return failures;
  });
  EXPECT_TRUE(out.allOk()) << out.describe();
  EXPECT_TRUE(harness::leftoverShm(out.pids, out.startedNs).empty());
}

// Bad keys, ranges and permissions: the request fails, the queue pair goes to
// the error state, later requests flush, and nothing outside a region is
// written.  One queue pair per case.
TEST(SoftDevice, KeyAndRangeChecks) {
  auto out = harness::run(2, [](int rank, int nranks, flagcxUniqueId *idp) {
    const flagcxUniqueId &id = *idp;
    int failures = 0;
    Side s;
    if (!connectSides(&s, rank, nranks, id, 3)) return 1;
    if (rank == 1) {  // serve until both refused requests arrived (case 2 fails at rank 0)
      auto until = Clock::now() + std::chrono::seconds(60);
      Completion c[8];
      while (Clock::now() < until &&
             (s.qp[0]->state() != QpState::Error || s.qp[1]->state() != QpState::Error))
        for (auto &q : s.qp) q->poll(c, 8);
      RANK_EXPECT(s.qp[0]->state() == QpState::Error, "target queue pair 0 not in error");
      RANK_EXPECT(s.qp[1]->state() == QpState::Error, "target queue pair 1 not in error");
      RANK_EXPECT(s.ro[0] == 0, "the read-only region was written");
      RANK_EXPECT(s.bs->barrier() == flagcxSuccess, "barrier");
      return failures;
    }
    char *mem = reinterpret_cast<char *>(s.rw.data());
    Completion c;
    // 0: one byte past the end of the peer's region.
    SendWr w;
    w.op = Opcode::Write;
    w.wrId = 1;
    w.local = mem;
    w.lkey = s.rwMr->lkey;
    w.length = 16;
    w.remote = s.peer.rw + kMem - 15;
    w.rkey = s.peer.rwKey;
    RANK_EXPECT(s.qp[0]->postSend(w) == flagcxSuccess, "post");
    RANK_EXPECT(waitOne(s.qp[0].get(), &c) && c.status == WcStatus::RemoteAccess, "past the end: %s",
             wcStatusName(c.status));
    RANK_EXPECT(s.qp[0]->state() == QpState::Error, "queue pair not in error");
    w.wrId = 2;
    w.remote = s.peer.rw;
    RANK_EXPECT(s.qp[0]->postSend(w) == flagcxSuccess, "post after error");
    RANK_EXPECT(waitOne(s.qp[0].get(), &c) && c.wrId == 2 && c.status == WcStatus::Flushed, "not flushed: %s",
             wcStatusName(c.status));
    // 1: a write into the read-only region.
    w.wrId = 3;
    w.remote = s.peer.ro;
    w.rkey = s.peer.roKey;
    RANK_EXPECT(s.qp[1]->postSend(w) == flagcxSuccess, "post");
    RANK_EXPECT(waitOne(s.qp[1].get(), &c) && c.status == WcStatus::RemoteAccess, "read-only: %s",
             wcStatusName(c.status));
    // 2: a local buffer outside its lkey's region.
    w.wrId = 4;
    w.local = mem + kMem - 8;
    w.remote = s.peer.rw;
    w.rkey = s.peer.rwKey;
    RANK_EXPECT(s.qp[2]->postSend(w) == flagcxSuccess, "post");
    RANK_EXPECT(waitOne(s.qp[2].get(), &c) && c.status == WcStatus::LocalProtection, "local: %s",
             wcStatusName(c.status));
    RANK_EXPECT(s.bs->barrier() == flagcxSuccess, "barrier");
    return failures;
  });
  EXPECT_TRUE(out.allOk()) << out.describe();
  EXPECT_TRUE(harness::leftoverShm(out.pids, out.startedNs).empty());
}

// Regions registered from a file descriptor (regDmabuf; a memfd stands in
// for a GPU's dma-buf): the peers address them by the iova given at
// registration, which here is a number that is not mapped in either process,
// so every byte must go through the device's own mapping of the fd: a write
// and a read from such a region on one side into one on the other, a
// fetch-add, and a write past the region's end refused.
TEST(SoftDevice, RegionsRegisteredByFd) {
  auto out = harness::run(2, [](int rank, int nranks, flagcxUniqueId *idp) {
    const flagcxUniqueId &id = *idp;
    int failures = 0;
    Side s;
    if (!connectSides(&s, rank, nranks, id, 2)) return 1;
    constexpr size_t kLen = 256 << 10, kOff = 8192 + 40;  // a region that starts mid-page
    int fd = memfd_create("flagcx-dmabuf-test", 0);
    RANK_EXPECT(fd >= 0 && ftruncate(fd, kOff + kLen) == 0, "memfd");
    if (failures) return failures;
    auto *view = static_cast<char *>(mmap(nullptr, kOff + kLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    RANK_EXPECT(view != MAP_FAILED, "mmap");
    if (failures) return failures;
    void *iova = reinterpret_cast<void *>(uintptr_t{0x5a0000000000} + rank * (uintptr_t{1} << 32) + 40);
    std::unique_ptr<Mr> mr;
    RANK_EXPECT(s.dev->regDmabuf(fd, kOff, iova, kLen, kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic,
                                 &mr) == flagcxSuccess, "regDmabuf");
    close(fd);  // the registration keeps its own mapping
    if (failures) return failures;
    uint64_t keys[2] = {reinterpret_cast<uint64_t>(iova), mr->rkey}, peer[2] = {};
    int other = 1 - rank;
    RANK_EXPECT(s.bs->send(other, kTagInfo + 1, keys, sizeof keys) == flagcxSuccess &&
                    s.bs->recv(other, kTagInfo + 1, peer, sizeof peer) == flagcxSuccess, "exchange");
    char *mine = view + kOff;
    if (rank == 1) {  // the target serves (polls) until the refused write ends queue pair 1
      auto until = Clock::now() + std::chrono::seconds(60);
      Completion cs[8];
      while (Clock::now() < until && s.qp[1]->state() != QpState::Error)
        for (int q = 0; q < 2; q++) s.qp[q]->poll(cs, 8);
      RANK_EXPECT(s.qp[1]->state() == QpState::Error, "the write past the end was not refused");
      RANK_EXPECT(s.bs->barrier() == flagcxSuccess, "barrier");
      for (size_t i = 0; i < 128 << 10; i++)
        if (static_cast<uint8_t>(mine[4096 + i]) != pat(i)) {
          RANK_EXPECT(false, "byte %zu of the written range wrong", i);
          break;
        }
      uint64_t word;
      memcpy(&word, mine + 64, 8);
      RANK_EXPECT(word == 1000 + 7, "fetch-add left %llu", static_cast<unsigned long long>(word));
      RANK_EXPECT(static_cast<uint8_t>(mine[kLen - 1]) == 0, "the last byte was written");
      RANK_EXPECT(s.bs->barrier() == flagcxSuccess, "barrier");
      return failures;
    }
    // Rank 0: its source is its own fd region, reached by iova too.
    for (size_t i = 0; i < 128 << 10; i++) mine[i] = static_cast<char>(pat(i));
    Completion c;
    SendWr w;
    w.op = Opcode::Write;
    w.wrId = 1;
    w.local = iova;
    w.lkey = mr->lkey;
    w.length = 128 << 10;
    w.remote = peer[0] + 4096;
    w.rkey = static_cast<uint32_t>(peer[1]);
    RANK_EXPECT(s.qp[0]->postSend(w) == flagcxSuccess, "write");
    RANK_EXPECT(waitOne(s.qp[0].get(), &c) && c.wrId == 1 && c.status == WcStatus::Success, "write: %s",
                wcStatusName(c.status));
    SendWr r = w;  // read it back into the upper half of this region
    r.op = Opcode::Read;
    r.wrId = 2;
    r.local = static_cast<char *>(iova) + (128 << 10);
    RANK_EXPECT(s.qp[0]->postSend(r) == flagcxSuccess, "read");
    RANK_EXPECT(waitOne(s.qp[0].get(), &c) && c.wrId == 2 && c.status == WcStatus::Success, "read: %s",
                wcStatusName(c.status));
    RANK_EXPECT(memcmp(mine + (128 << 10), mine, 128 << 10) == 0, "read-back differs");
    uint64_t seed = 1000;
    memcpy(mine + 64, &seed, 8);  // the peer's word is 0: write 1000 first, then add 7
    SendWr w8 = w;
    w8.wrId = 3;
    w8.local = static_cast<char *>(iova) + 64;
    w8.length = 8;
    w8.remote = peer[0] + 64;
    RANK_EXPECT(s.qp[0]->postSend(w8) == flagcxSuccess, "word");
    RANK_EXPECT(waitOne(s.qp[0].get(), &c) && c.wrId == 3 && c.status == WcStatus::Success, "word");
    SendWr a;
    a.op = Opcode::FetchAdd;
    a.wrId = 4;
    a.local = static_cast<char *>(iova) + 72;
    a.lkey = mr->lkey;
    a.length = 8;
    a.remote = peer[0] + 64;
    a.rkey = static_cast<uint32_t>(peer[1]);
    a.compareAdd = 7;
    RANK_EXPECT(s.qp[0]->postSend(a) == flagcxSuccess, "fetch-add");
    RANK_EXPECT(waitOne(s.qp[0].get(), &c) && c.wrId == 4 && c.status == WcStatus::Success, "fetch-add");
    uint64_t old = 0;
    memcpy(&old, mine + 72, 8);
    RANK_EXPECT(old == 1000, "fetch-add returned %llu", static_cast<unsigned long long>(old));
    // One byte past the end of the peer's region: refused, nothing written.
    w.wrId = 5;
    w.length = 2;
    w.remote = peer[0] + kLen - 1;
    RANK_EXPECT(s.qp[1]->postSend(w) == flagcxSuccess, "post");
    RANK_EXPECT(waitOne(s.qp[1].get(), &c) && c.status == WcStatus::RemoteAccess, "past the end: %s",
                wcStatusName(c.status));
    RANK_EXPECT(s.bs->barrier() == flagcxSuccess, "barrier");
    RANK_EXPECT(s.bs->barrier() == flagcxSuccess, "barrier");
    return failures;
  });
  EXPECT_TRUE(out.allOk()) << out.describe();
  EXPECT_TRUE(harness::leftoverShm(out.pids, out.startedNs).empty());
}

// The peer dies: what it wrote before is delivered, then the queue pair
// reports retry-exceeded and flushes the rest.
TEST(SoftDevice, DeadPeerErrorState) {
  auto out = harness::run(2, [](int rank, int nranks, flagcxUniqueId *idp) {
    const flagcxUniqueId &id = *idp;
    int failures = 0;
    Side s;
    if (!connectSides(&s, rank, nranks, id, 1)) return 1;
    Qp *qp = s.qp[0].get();
    if (rank == 1) {
      SendWr w;
      w.op = Opcode::WriteImm;
      w.imm = 42;
      w.remote = s.peer.rw;
      w.rkey = s.peer.rwKey;
      qp->postSend(w);
      raise(SIGKILL);
    }
    qp->postRecv(1);
    qp->postRecv(2);
    Completion c;
    RANK_EXPECT(waitOne(qp, &c) && c.op == Opcode::Recv && c.imm == 42 && c.status == WcStatus::Success,
             "the write sent before death was lost");
    SendWr w;
    w.op = Opcode::Write;
    w.wrId = 9;
    w.remote = s.peer.rw;
    w.rkey = s.peer.rwKey;
    RANK_EXPECT(qp->postSend(w) == flagcxSuccess, "post");
    auto t0 = Clock::now();
    bool sawRetry = false, sawFlush = false;
    while ((!sawRetry || !sawFlush) && Clock::now() - t0 < std::chrono::seconds(60)) {
      if (qp->poll(&c, 1) != 1) continue;
      sawRetry |= c.wrId == 9 && c.status == WcStatus::RetryExceeded;
      sawFlush |= c.wrId == 2 && c.status == WcStatus::Flushed;
    }
    RANK_EXPECT(sawRetry && sawFlush, "retry-exceeded %d, flushed receive %d", sawRetry, sawFlush);
    RANK_EXPECT(qp->state() == QpState::Error, "not in error");
    return failures;
  });
  EXPECT_EQ(out.signal(1), SIGKILL);
  EXPECT_TRUE(out.ok(0)) << out.describe();
  EXPECT_TRUE(harness::leftoverShm(out.pids, out.startedNs).empty());
}

TEST(RegCache, HitsMissesEvictionInvalidate) {
  std::unique_ptr<Device> dev;
  ASSERT_EQ(openSoftDevice(&dev), flagcxSuccess);
  RegCache cache(dev.get(), 2);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<char> mem(16 * page);
  char *p = mem.data() + page - reinterpret_cast<uintptr_t>(mem.data()) % page;  // page-aligned
  const Mr *a = nullptr, *b = nullptr;
  ASSERT_EQ(cache.get(p, 3 * page, kRemoteWrite, &a), flagcxSuccess);
  ASSERT_EQ(cache.get(p + 100, 200, kRemoteWrite, &b), flagcxSuccess);
  EXPECT_EQ(a, b) << "a range inside a cached region registers again";
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 1u);
  // Wider access or a range that sticks out: a new registration.
  ASSERT_EQ(cache.get(p, 3 * page, kRemoteWrite | kRemoteRead, &b), flagcxSuccess);
  EXPECT_NE(a, b);
  cache.put(b);
  ASSERT_EQ(cache.get(p + 2 * page, 2 * page, kRemoteWrite, &b), flagcxSuccess);
  EXPECT_NE(a, b);
  cache.put(b);
  cache.put(a);
  cache.put(a);
  EXPECT_EQ(cache.stats().misses, 3u);
  // Capacity 2: more unused regions than that are evicted, oldest first.
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(cache.get(p + (8 + i) * page, page, kRemoteWrite, &b), flagcxSuccess);
    cache.put(b);
  }
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_GE(cache.stats().evictions, 2u);
  // Invalidate while in use: the holder keeps its region, the next get misses.
  ASSERT_EQ(cache.get(p + 10 * page, page, kRemoteWrite, &a), flagcxSuccess);
  uint64_t misses = cache.stats().misses;
  cache.invalidate(p + 10 * page, page);
  EXPECT_EQ(a->length, page);
  ASSERT_EQ(cache.get(p + 10 * page, page, kRemoteWrite, &b), flagcxSuccess);
  EXPECT_EQ(cache.stats().misses, misses + 1);
  EXPECT_NE(a, b);
  cache.put(a);
  cache.put(b);
}

TEST(HcaList, FlagcxSyntax) {
  HcaList l;
  std::string err;
  ASSERT_TRUE(HcaList::parse("", &l, &err));
  EXPECT_TRUE(l.allows("mlx5_0", 1));
  ASSERT_TRUE(HcaList::parse("mlx5_0:1,mlx5_1", &l, &err));
  EXPECT_TRUE(l.allows("mlx5_0", 1));
  EXPECT_FALSE(l.allows("mlx5_0", 2));
  EXPECT_TRUE(l.allows("mlx5_1", 2));
  EXPECT_TRUE(l.allows("mlx5_10", 1)) << "names match as prefixes";
  EXPECT_FALSE(l.allows("bnxt_re0", 1));
  ASSERT_TRUE(HcaList::parse("=mlx5_1", &l, &err));
  EXPECT_TRUE(l.allows("mlx5_1", 1));
  EXPECT_FALSE(l.allows("mlx5_10", 1)) << "= asks for exact names";
  ASSERT_TRUE(HcaList::parse("^mlx5_0:1", &l, &err));
  EXPECT_FALSE(l.allows("mlx5_0", 1));
  EXPECT_TRUE(l.allows("mlx5_0", 2));
  EXPECT_TRUE(l.allows("mlx5_1", 1));
  ASSERT_TRUE(HcaList::parse("^=mlx5_1", &l, &err));
  EXPECT_FALSE(l.allows("mlx5_1", 1));
  EXPECT_TRUE(l.allows("mlx5_10", 1));
  EXPECT_FALSE(HcaList::parse("mlx5_0:x", &l, &err));
  EXPECT_NE(err.find("mlx5_0:x"), std::string::npos) << err;
  EXPECT_FALSE(HcaList::parse(":1", &l, &err));
  EXPECT_FALSE(HcaList::parse("mlx5_0:0", &l, &err));
}

// The libibverbs binding against the real library.  No machine of this
// project has an RDMA device: there the test prints why and skips.
TEST(Verbs, DeviceList) {
  std::string why;
  std::vector<std::string> names;
  int n = verbsDeviceCount(&why, &names);
  if (n <= 0) {
    printf("verbs: no RDMA device: %s\n", why.c_str());
    // Without a device the transport must decline, with a reason, not fail.
    std::unique_ptr<Device> dev;
    EXPECT_EQ(openVerbsDevice(&dev, &why), flagcxSuccess);
    EXPECT_EQ(dev, nullptr);
    EXPECT_FALSE(why.empty());
    GTEST_SKIP() << "no RDMA device (" << why << ")";
  }
  for (auto &d : names) printf("verbs: device %s\n", d.c_str());
  std::unique_ptr<Device> dev;
  ASSERT_EQ(openVerbsDevice(&dev, &why), flagcxSuccess);
  if (!dev) GTEST_SKIP() << "devices but no active port: " << why;
  std::unique_ptr<Qp> qp;
  ASSERT_EQ(dev->createQp(&qp), flagcxSuccess);
}

TEST(Verbs, BadHcaListRefused) {
  setenv("FLAGCX_IB_HCA", "mlx5_0:port", 1);
  flagcx::paramsReload();
  std::unique_ptr<Device> dev;
  std::string why;
  EXPECT_EQ(openVerbsDevice(&dev, &why), flagcxInvalidArgument);
  unsetenv("FLAGCX_IB_HCA");
  flagcx::paramsReload();
}

}  // namespace
