// Bootstrap::view, in real ranks: views of some ranks of a bootstrap carry
// their messages apart from the bootstrap's and from each other's over the
// same connections (one tag in all three at once, two views used from two
// threads at once), number their members in the order given, never reach a
// rank outside them (it is gone), and keep working after the bootstrap they
// were made from is aborted and released.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "tests/common/bootstrap.h"
#include "tests/common/harness.h"

namespace {

using flagcx::Bootstrap;

constexpr uint32_t kTag = 5;

// Each member sends its own rank (in `bs`) plus `mark` to every other one
// under kTag; then checks what arrives.
int sendMarks(Bootstrap &bs, int mark) {
  for (int p = 0; p < bs.nranks(); p++) {
    int v = bs.rank() * 100 + mark;
    if (p != bs.rank()) RANK_OK(bs.send(p, kTag, &v, sizeof v));
  }
  return 0;
}
int recvMarks(Bootstrap &bs, int mark) {
  for (int p = 0; p < bs.nranks(); p++) {
    if (p == bs.rank()) continue;
    int v = -1;
    RANK_OK(bs.recv(p, kTag, &v, sizeof v));
    RANK_CHECK(v == p * 100 + mark, "from %d: %d, want %d", p, v, p * 100 + mark);
  }
  return 0;
}
int exchange(Bootstrap &bs, int mark) {
  if (int rc = sendMarks(bs, mark)) return rc;
  return recvMarks(bs, mark);
}

int allgatherOk(Bootstrap &bs, int mark) {
  std::vector<int> all(static_cast<size_t>(bs.nranks()));
  all[static_cast<size_t>(bs.rank())] = bs.rank() + mark;
  RANK_OK(bs.allgather(all.data(), sizeof(int)));
  for (int r = 0; r < bs.nranks(); r++)
    RANK_CHECK(all[static_cast<size_t>(r)] == r + mark, "slot %d: %d", r, all[static_cast<size_t>(r)]);
  return 0;
}

int rankBody(int rank, int nranks, flagcxUniqueId *id) {
  std::unique_ptr<Bootstrap> bs = harness::makeBootstrap(rank, nranks, *id);
  RANK_CHECK(bs != nullptr, "bootstrap");
  RANK_OK(bs->barrier());
  if (rank == 3) return 0;  // outside the views: gone from here on
  // Members in another order: parent rank 2 is the views' rank 0.
  const std::vector<int> members = {2, 0, 1};
  std::unique_ptr<Bootstrap> a = bs->view(members, 1), b = bs->view(members, 2);
  const int want = rank == 2 ? 0 : rank + 1;
  RANK_CHECK(a->rank() == want && a->nranks() == 3, "view rank %d of %d", a->rank(), a->nranks());
  RANK_CHECK(a->peers()[0].pid == bs->peers()[2].pid, "the view's peers are not the members");
  // One tag in the views and the bootstrap at once; the bootstrap's messages
  // among its first three ranks only.
  // Sent in one order, received in the other.
  int v = rank, got = -1;
  const int next = (rank + 1) % 3, prev = (rank + 2) % 3;
  RANK_OK(bs->send(next, kTag, &v, sizeof v));
  if (int rc = sendMarks(*b, 2)) return rc;
  if (int rc = sendMarks(*a, 1)) return rc;
  if (int rc = recvMarks(*a, 1)) return rc;
  if (int rc = recvMarks(*b, 2)) return rc;
  RANK_OK(bs->recv(prev, kTag, &got, sizeof got));
  RANK_CHECK(got == prev, "bootstrap: %d from %d", got, prev);
  // Two views from two threads at once.
  int ra = 0, rb = 0;
  std::thread t([&] {
    for (int i = 0; i < 50 && !ra; i++) ra = allgatherOk(*a, 10 + i);
  });
  for (int i = 0; i < 50 && !rb; i++) rb = allgatherOk(*b, 20 + i);
  t.join();
  RANK_CHECK(ra == 0 && rb == 0, "concurrent allgathers on two views failed");
  // The bootstrap aborted and released: the views go on.
  bs->abort();
  bs.reset();
  if (int rc = allgatherOk(*a, 7)) return rc;
  b->abort();
  RANK_CHECK(b->barrier() != flagcxSuccess, "an aborted view still works");
  RANK_OK(a->barrier());
  return exchange(*a, 3);
}

TEST(BootstrapView, MessagesApartAndParentReleased) {
  auto res = harness::run(4, rankBody, {}, 60);
  EXPECT_TRUE(res.allOk()) << res.failures();
}

}  // namespace
