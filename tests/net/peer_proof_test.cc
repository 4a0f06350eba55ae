// Who a same-host peer is, on the kernel's word (net/shm/peer_proof.h), and
// the shm Conn built on it: the pid under which a peer's memory is read is
// the process that connected with the nonce as that rank, never one a peer
// states; a stranger's connection, junk, a wrong nonce, another job's MAC
// or another rank presenting the offer proves nothing; provePeers and a
// shm Conn's peerPid() give the peer's real pid.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "net/net.h"
#include "net/shm/peer_proof.h"
#include "tests/common/bootstrap.h"
#include "tests/common/harness.h"

using flagcx::PeerProof;

namespace {

// Runs `fn` in a child process and returns the child's pid once it exited.
template <class F>
pid_t inChild(F fn) {
  pid_t p = fork();
  if (p == 0) _exit(fn() ? 0 : 1);
  int st = 0;
  waitpid(p, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  return p;
}

// A stranger: connects to the offer's socket and writes `bytes`.
bool stranger(const PeerProof::Offer &o, const void *bytes, size_t n) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  size_t len = strnlen(o.sock, sizeof o.sock);
  memcpy(a.sun_path + 1, o.sock, len);
  bool ok = connect(fd, reinterpret_cast<sockaddr *>(&a),
                    static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len)) == 0 &&
            write(fd, bytes, n) == static_cast<ssize_t>(n);
  close(fd);
  return ok;
}

}  // namespace

const flagcx::Secret kSecret{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};

TEST(PeerProof, ThePidIsTheProcessThatPresentedTheNonce) {
  PeerProof proof(kSecret, 0);
  ASSERT_TRUE(proof.listen({10, 11, 12}));
  PeerProof::Offer o10 = proof.offer(0), o11 = proof.offer(1);
  // Junk, a wrong nonce, another job's MAC, and rank 11 presenting what
  // rank 10 was sent (a member lending its offer): none proves rank 10.
  pid_t junk = inChild([&] { return stranger(o10, "hello", 5); });
  PeerProof::Offer wrong = o10;
  wrong.nonce[0] ^= 1;
  pid_t liar = inChild([&] { return PeerProof(kSecret, 10).present(wrong); });
  flagcx::Secret other = kSecret;
  other[0] ^= 1;
  pid_t foreign = inChild([&] { return PeerProof(other, 10).present(o10); });
  pid_t relay = inChild([&] { return PeerProof(kSecret, 11).present(o10); });
  // Rank 11's own offer, presented by whatever process runs rank 11: the
  // kernel names that process.
  pid_t p11 = inChild([&] { return PeerProof(kSecret, 11).present(o11); });
  pid_t p10 = inChild([&] { return PeerProof(kSecret, 10).present(o10); });
  EXPECT_EQ(proof.collect(0), p10);
  EXPECT_EQ(proof.collect(1), p11);
  EXPECT_EQ(proof.collect(2), 0) << "nobody presented rank 12's nonce";
  for (pid_t bad : {junk, liar, foreign, relay}) EXPECT_NE(proof.collect(0), bad);
}

TEST(PeerProof, AFloodOfStrangersLeavesThePeerUnprovenNotStuck) {
  PeerProof proof(kSecret, 0);
  ASSERT_TRUE(proof.listen({1}));
  PeerProof::Offer o = proof.offer(0);
  // More strangers than the listener looks at: the peer's connection is
  // refused (full backlog) or never reached; collect answers at once.
  std::vector<int> fds;
  for (int i = 0; i < 64; i++) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    fds.push_back(fd);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    size_t len = strnlen(o.sock, sizeof o.sock);
    memcpy(a.sun_path + 1, o.sock, len);
    connect(fd, reinterpret_cast<sockaddr *>(&a),
            static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len));
    (void)!write(fd, "x", 1);  // kept open: they occupy the queue
  }
  inChild([&] {
    PeerProof(kSecret, 1).present(o);
    return true;
  });
  EXPECT_EQ(proof.collect(0), 0);
  for (int fd : fds) close(fd);
}

TEST(NetShmProof, ConnPeerPidIsThePeersRealPid) {
  auto res = harness::run(2, [](int rank, int nranks, flagcxUniqueId *id) {
    auto bs = harness::makeBootstrap(rank, nranks, *id);
    if (!bs) return 2;
    pid_t me = getpid(), other = 0;
    // The harness's own channel for the truth: the forked pids, exchanged
    // over the bootstrap by the ranks themselves (honest here).
    std::vector<int32_t> pids(2);
    pids[static_cast<size_t>(rank)] = me;
    if (bs->allgather(pids.data(), sizeof(int32_t)) != flagcxSuccess) return 3;
    other = pids[static_cast<size_t>(1 - rank)];
    std::vector<std::unique_ptr<flagcx::Conn>> conns;
    if (flagcx::makeShmTransport()->connectAll(*bs, {1 - rank}, 1, &conns) != flagcxSuccess) return 4;
    int failures = 0;
    RANK_EXPECT(conns[0]->peerPid() == other, "peerPid %d, the peer is %d", conns[0]->peerPid(),
                other);
    return failures;
  });
  EXPECT_TRUE(res.allOk()) << res.failures();
}

// A member that states this rank's own host and pid (so that the bootstrap's
// PeerInfo says "same process") is still proven to be the process it is.
TEST(NetShmProof, AStatedPidIsNotTheProof) {
  auto res = harness::run(2, [](int rank, int nranks, flagcxUniqueId *id) {
    auto bs = harness::makeBootstrap(rank, nranks, *id);
    if (!bs) return 2;
    // Rank 0's pid, and a second job's id, through the first bootstrap.
    struct {
      int32_t pid;
      flagcxUniqueId id;
    } m{};
    if (rank == 0) {
      m.pid = getpid();
      if (flagcxGetUniqueId(&m.id) != flagcxSuccess) return 3;
    }
    if (bs->bcast(&m, sizeof m, 0) != flagcxSuccess) return 4;
    flagcx::PeerInfo self = bs->peers()[static_cast<size_t>(rank)];
    if (rank == 1) self.pid = m.pid;  // "I am rank 0's process"
    std::unique_ptr<flagcx::Bootstrap> bs2;
    if (flagcx::Bootstrap::create(m.id, rank, nranks, self, &bs2) != flagcxSuccess) return 5;
    int failures = 0;
    const auto &peers = bs2->peers();
    RANK_EXPECT(flagcx::sameProcess(peers[0], peers[1]), "the stated pid did not take");
    std::vector<pid_t> pids;
    if (flagcx::provePeers(*bs2, {1 - rank}, &pids) != flagcxSuccess) return 6;
    RANK_EXPECT(pids[0] > 0 && pids[0] != getpid(), "rank %d proven as pid %d (its own: %d)",
                1 - rank, pids[0], getpid());
    return failures;
  });
  EXPECT_TRUE(res.allOk()) << res.failures();
}
