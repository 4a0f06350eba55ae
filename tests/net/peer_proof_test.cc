// Who a same-host peer is, on the kernel's word (net/shm/peer_proof.h), and
// the shm Conn built on it: the pid under which a peer's memory is read is
// the process that connected with the nonce, never one a peer states; a
// stranger's connection, a wrong nonce or junk proves nothing; a shm Conn's
// peerPid() is the peer's real pid.
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

TEST(PeerProof, ThePidIsTheProcessThatPresentedTheNonce) {
  PeerProof proof;
  ASSERT_TRUE(proof.listen(3));
  PeerProof::Offer o0 = proof.offer(0), o1 = proof.offer(1), o2 = proof.offer(2);
  // Junk and a wrong nonce first: each is read once and proves nothing.
  pid_t junk = inChild([&] { return stranger(o0, "hello", 5); });
  PeerProof::Offer wrong = o0;
  wrong.nonce[0] ^= 1;
  pid_t liar = inChild([&] { return PeerProof::present(wrong); });
  // Peer 1's nonce presented by the process meant as peer 2: the kernel
  // names that process for peer 1 (whatever it would say about itself).
  pid_t p2 = inChild([&] { return PeerProof::present(o1); });
  pid_t p0 = inChild([&] { return PeerProof::present(o0); });
  EXPECT_EQ(proof.collect(0), p0);
  EXPECT_EQ(proof.collect(1), p2);
  EXPECT_EQ(proof.collect(2), 0) << "nobody presented peer 2's nonce";
  EXPECT_NE(proof.collect(0), junk);
  EXPECT_NE(proof.collect(0), liar);
  (void)o2;
}

TEST(PeerProof, AFloodOfStrangersLeavesThePeerUnprovenNotStuck) {
  PeerProof proof;
  ASSERT_TRUE(proof.listen(1));
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
  inChild([&] { PeerProof::present(o); return true; });
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
