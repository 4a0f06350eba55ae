// A hostile peer against a real P2P engine (docs/P2P.md, "Security"): the
// engine runs in a victim process of its own, serving its RPC port, with two
// registered regions between canary pages and a secret string outside every
// region; this process speaks the engine's wire format over real sockets
// (hostile_peer.h) -- spoofed identities, addresses outside regions, one
// region's key for another, wrapping lengths, giant and unreceived
// messages, stalls after every handshake step, churn -- and after each
// attack asks the victim for its canaries, its secret, its fds, threads and
// memory, and checks that an honest client (another process, through the
// public API) is still served.
#include "hostile_victim.h"

using namespace hostile;

namespace {

TEST_F(Hostile, HelloWithoutTheKeyIsRefused) {
  Secret zero{}, wrong = key_;
  wrong[3] ^= 1;
  for (const Secret *k : {&zero, &wrong}) {
    int fd = tcpTo(loopback(s_.port));
    ASSERT_GE(fd, 0);
    EXPECT_FALSE(tcpHello(fd, *k));
    close(fd);
  }
  Session s;
  EXPECT_TRUE(s.connect(s_.port, &key_, false));
  // The engine proved the key back on our challenge.
  EXPECT_NE(s.theirs.proof, 0u);
}

// Over TCP nothing a peer says makes it "the same process" or a CMA peer:
// a copy of the engine's own Info (pid, host id, engine id, cookie) gets no
// cross-memory attach, and a request that asks for it ends the connection.
TEST_F(Hostile, SpoofedIdentityGetsNoCma) {
  auto first = tcpSession();
  Session s;
  s.mine = first->theirs;
  s.mine.lanes = 1;
  s.mine.nregions = 0;
  ASSERT_TRUE(s.connect(s_.port, &key_, false));
  EXPECT_EQ(s.canOut, 0) << "the engine would move a spoofing peer's bytes by CMA";
  for (Op op : {Op::Write, Op::Read}) {
    Session t;
    t.mine = s.mine;
    ASSERT_TRUE(t.connect(s_.port, &key_, false));
    Answer a = request(t.out[0], op, 1, {seg(s_.a, 32, s_.rkeyA, s_.secret)}, 32);
    EXPECT_TRUE(a.lost) << "a CMA request over TCP was served";
  }
}

// At the door the kernel names the peer: a claim to be the engine itself
// makes it move bytes of the claimant's memory (this process), never its own.
TEST_F(Hostile, AtTheDoorTheKernelNamesThePeer) {
  auto spy = tcpSession();
  Session s;
  s.mine = spy->theirs;  // pid, engine id, cookie of the victim
  s.mine.lanes = 1;
  s.mine.nregions = 0;
  s.mine.cookieAddr = uintptr_t(g_secret);  // probed in this process: present
  memcpy(&s.mine.cookie, g_secret, 8);
  ASSERT_TRUE(s.connect(s_.port, nullptr, true));
  ASSERT_EQ(s.canOut, 1) << "root may read this process: the engine should use CMA";
  Answer a = request(s.out[0], Op::Read, 1, {seg(s_.a, 32, s_.rkeyA, s_.secret)}, 32);
  EXPECT_FALSE(a.lost);
  EXPECT_EQ(a.status, kOk);
  EXPECT_NE(strcmp(g_secret, kSecretText), 0) << "the engine did not write into this process";
  a = request(s.out[0], Op::Write, 1, {seg(s_.a, 32, s_.rkeyA, s_.secret)}, 32);
  EXPECT_EQ(a.status, kOk);
  // An address that is the engine's region there is unmapped here.
  a = request(s.out[0], Op::Write, 1, {seg(s_.b, 32, s_.rkeyB, s_.a)}, 32);
  EXPECT_EQ(a.status, kIo);
  strcpy(g_secret, kSecretText);
}

TEST_F(Hostile, AddressesOutsideRegionsAreRefused) {
  auto s = tcpSession();
  int fd = s->out[0];
  std::vector<char> pay(64, 'x');
  const uint64_t end = s_.a + kRegion;
  struct Case {
    Op op;
    WireSeg seg;
    const char *what;
  } cases[] = {
      {Op::Write, seg(end - 8, 64, s_.rkeyA), "past the region's end"},
      {Op::Write, seg(s_.a - 16, 32, s_.rkeyA), "before its start"},
      {Op::Write, seg(s_.secret, 32, s_.rkeyA), "the secret"},
      {Op::Read, seg(s_.secret, 32, s_.rkeyA), "the secret"},
      {Op::Read, seg(end, 16, s_.rkeyA), "the canary after it"},
      {Op::Write, seg(s_.a, 32, s_.rkeyB), "region A with B's key"},
      {Op::Write, seg(s_.a, 32, 0), "key 0"},
      {Op::Read, seg(UINT64_MAX - 8, 16, s_.rkeyA), "the top of the address space"},
      {Op::Read, seg(s_.a + 8, UINT64_MAX - 4, s_.rkeyA), "a length that wraps"},
  };
  for (auto &c : cases) {
    bool write = c.op == Op::Write;
    Answer a = request(fd, c.op, 0, {c.seg}, c.seg.len, write ? pay.data() : nullptr, write ? c.seg.len : 0);
    EXPECT_FALSE(a.lost) << c.what;
    EXPECT_EQ(a.status, kRange) << c.what;
    EXPECT_TRUE(a.payload.empty()) << c.what << ": bytes leaked";
  }
  // Malformed frames end the connection (and touch nothing).
  auto wrap = tcpSession();
  EXPECT_TRUE(request(wrap->out[0], Op::Write, 0,
                      {seg(s_.a, 1ull << 63, s_.rkeyA), seg(s_.a, (1ull << 63) + 16, s_.rkeyA)}, 16)
                  .lost) << "segments whose sum wraps";
  auto many = tcpSession();
  ReqHdr h{kReqMagic, uint8_t(Op::Read), 0, 0, kMaxSegsPerReq + 1, 0, 0};
  EXPECT_TRUE(sendRaw(many->out[0], &h, sizeof(h)) && closedByPeer(many->out[0]));
  auto bad = tcpSession();
  h = ReqHdr{0x1234, uint8_t(Op::Read), 0, 0, 0, 0, 0};
  EXPECT_TRUE(sendRaw(bad->out[0], &h, sizeof(h)) && closedByPeer(bad->out[0]));
}

// Messages are allocated only within the receiver's queue (1 MiB here): a
// bigger one is refused once its bytes are read off, a 4 GiB header costs
// nothing; a connection the RPC server took keeps none (nothing can Recv
// on it; p2p_engine_test caps one that Accept handed out).
TEST_F(Hostile, GiantAndUnreceivedSendsAreBounded) {
  VictimStatus before = status();
  auto s = tcpSession();
  std::vector<char> big(2 << 20, 'm');
  Answer a = request(s->out[0], Op::Send, 0, {}, big.size(), big.data(), big.size());
  EXPECT_EQ(a.status, kFull);
  for (int i = 0; i < 8; i++) {
    a = request(s->out[0], Op::Send, 0, {}, 256 << 10, big.data(), 256 << 10);
    EXPECT_EQ(a.status, kFull) << "message " << i;
  }
  auto giant = tcpSession();
  ReqHdr h{kReqMagic, uint8_t(Op::Send), 0, 0, 0, 0, 4ull << 30};
  EXPECT_TRUE(sendRaw(giant->out[0], &h, sizeof(h)));
  giant->closeAll();
  s->closeAll();
  VictimStatus after = status();
  EXPECT_LT(after.rssKb - before.rssKb, 16 << 10) << "KiB grown";
}

}  // namespace
