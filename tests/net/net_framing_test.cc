// The framing engine over in-memory pipes: partial reads/writes, striping
// over several lanes, and hostile headers, without processes or sockets.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "base/log.h"
#include "base/params.h"
#include "net/common/framed_conn.h"
#include "tests/common/mem_pipe.h"

using namespace flagcx;

namespace {

using harness::Bytes;
using harness::MemPipe;

struct Pair {
  std::unique_ptr<FramedConn> a, b;
  std::vector<std::shared_ptr<Bytes>> ab, ba;  // per lane
};

Pair makePair(int lanes, size_t cap = 70000) {
  Pair p;
  std::vector<std::unique_ptr<Pipe>> pa, pb;
  for (int l = 0; l < lanes; l++) {
    auto x = std::make_shared<Bytes>(), y = std::make_shared<Bytes>();
    p.ab.push_back(x);
    p.ba.push_back(y);
    pa.push_back(std::make_unique<MemPipe>(x, y, cap, 1 + l));
    pb.push_back(std::make_unique<MemPipe>(y, x, cap, 100 + l));
  }
  p.a = std::make_unique<FramedConn>("mem", PeerDesc{0, 1, 0, "a"}, std::move(pa));
  p.b = std::make_unique<FramedConn>("mem", PeerDesc{1, 0, 0, "b"}, std::move(pb));
  return p;
}

flagcxResult_t drive(Pair &p, std::vector<std::pair<Conn *, int>> reqs, std::vector<size_t> *bytes) {
  bytes->assign(reqs.size(), 0);
  std::vector<bool> done(reqs.size(), false);
  for (int iter = 0; iter < 1000000; iter++) {
    bool all = true;
    for (size_t i = 0; i < reqs.size(); i++) {
      if (done[i]) continue;
      bool d = false;
      flagcxResult_t rc = reqs[i].first->test(reqs[i].second, &d, &(*bytes)[i]);
      if (rc != flagcxSuccess) return rc;
      done[i] = d;
      all = all && d;
    }
    if (all) return flagcxSuccess;
    p.a->progress();
    p.b->progress();
  }
  return flagcxInternalError;
}

TEST(NetFraming, StripedMessagesAnyLaneCount) {
  for (int lanes : {1, 2, 3, 5}) {
    Pair p = makePair(lanes);
    std::vector<size_t> sizes = {0, 1, 4095, 600 * 1024, 3 * 1024 * 1024 + 17, 0, 5};
    std::vector<std::vector<uint8_t>> src(sizes.size()), dst(sizes.size());
    std::vector<std::pair<Conn *, int>> reqs;
    for (size_t k = 0; k < sizes.size(); k++) {
      src[k].resize(sizes[k]);
      for (size_t i = 0; i < sizes[k]; i++) src[k][i] = static_cast<uint8_t>(i * 7 + k);
      dst[k].assign(sizes[k] + 8, 0xcc);
      int r;
      ASSERT_EQ(p.b->irecv(dst[k].data(), dst[k].size(), k, &r), flagcxSuccess);
      reqs.push_back({p.b.get(), r});
      ASSERT_EQ(p.a->isend(src[k].data(), sizes[k], k, &r), flagcxSuccess);
      reqs.push_back({p.a.get(), r});
    }
    std::vector<size_t> bytes;
    ASSERT_EQ(drive(p, reqs, &bytes), flagcxSuccess) << lanes << " lanes";
    for (size_t k = 0; k < sizes.size(); k++) {
      EXPECT_EQ(bytes[2 * k], sizes[k]);
      EXPECT_TRUE(std::equal(src[k].begin(), src[k].end(), dst[k].begin())) << k;
      EXPECT_EQ(dst[k][sizes[k]], 0xcc) << "wrote past message " << k;
    }
  }
}

TEST(NetFraming, StripeLayoutCoversMessage) {
  for (int lanes : {1, 2, 3, 4, 16}) {
    for (uint64_t len : {0ull, 1ull, 524287ull, 524288ull, 3000001ull, 5ull << 30}) {
      int n = stripeCount(len, lanes);
      ASSERT_GE(n, 1);
      if (len < 512 * 1024) {
        EXPECT_EQ(n, 1) << len << " bytes are sent whole";
      } else {  // 64 KiB a stripe at least
        EXPECT_EQ(n, static_cast<int>(std::min<uint64_t>(len / 65536, lanes))) << len << " bytes, " << lanes << " lanes";
      }
      ASSERT_LE(n, lanes);
      uint64_t next = 0;
      for (int l = 0; l < n; l++) {
        uint64_t off, size;
        stripeOf(len, n, l, &off, &size);
        EXPECT_EQ(off, next);
        next = off + size;
      }
      EXPECT_EQ(next, len);
    }
  }
}

// Hand-made headers injected into the wire.
void inject(Pair &p, const FrameHeader &h, size_t payload) {
  const uint8_t *b = reinterpret_cast<const uint8_t *>(&h);
  p.ab[0]->q.insert(p.ab[0]->q.end(), b, b + sizeof h);
  p.ab[0]->q.insert(p.ab[0]->q.end(), payload, 0x77);
}

flagcxResult_t recvOne(Pair &p, std::vector<uint8_t> &buf, uint64_t tag) {
  int r;
  flagcxResult_t rc = p.b->irecv(buf.data(), buf.size(), tag, &r);
  if (rc != flagcxSuccess) return rc;
  std::vector<size_t> bytes;
  return drive(p, {{p.b.get(), r}}, &bytes);
}

TEST(NetFraming, HostileHeadersRejectedBeforeTouchingBuffer) {
  struct Case {
    const char *what;
    FrameHeader h;
    flagcxResult_t want;
  } cases[] = {
      {"bad magic", {0xdeadbeef, kFrameVersion, 0, 0, 1, 10}, flagcxRemoteError},
      {"bad version", {kFrameMagic, 99, 0, 0, 1, 10}, flagcxRemoteError},
      {"bad lane", {kFrameMagic, kFrameVersion, 3, 0, 1, 10}, flagcxRemoteError},
      {"sequence gap", {kFrameMagic, kFrameVersion, 0, 5, 1, 10}, flagcxRemoteError},
      {"huge length", {kFrameMagic, kFrameVersion, 0, 0, 1, ~0ull}, flagcxInvalidUsage},
      {"wrong tag", {kFrameMagic, kFrameVersion, 0, 0, 2, 10}, flagcxInvalidUsage},
  };
  for (const auto &c : cases) {
    Pair p = makePair(1);
    inject(p, c.h, 10);
    std::vector<uint8_t> buf(64, 0);
    EXPECT_EQ(recvOne(p, buf, 1), c.want) << c.what;
    EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](uint8_t x) { return x == 0; })) << c.what;
    int r;
    EXPECT_NE(p.b->irecv(buf.data(), buf.size(), 1, &r), flagcxSuccess) << c.what << ": not sticky";
  }
}

TEST(NetFraming, PeerClosedWithPendingReceive) {
  Pair p = makePair(1);
  std::vector<uint8_t> buf(64);
  int r;
  ASSERT_EQ(p.b->irecv(buf.data(), buf.size(), 1, &r), flagcxSuccess);
  p.a.reset();  // closes a's side of every lane
  bool done = false;
  EXPECT_EQ(p.b->test(r, &done, nullptr), flagcxRemoteError);
}

// The Conn's warning names what the pipe knows of the loss (a socket: the
// reset or broken pipe, its lane and address); the pipe itself only logs it
// at INFO, since a peer closing after the last message is normal.
namespace {
// Sets logging variables for one scope and puts back what was there, also
// when an assertion leaves the scope early.
struct LogEnv {
  std::vector<std::pair<std::string, std::string>> saved;
  std::vector<std::string> unset;
  explicit LogEnv(std::vector<std::pair<std::string, std::string>> vars) {
    for (auto &v : vars) {
      const char *old = getenv(v.first.c_str());
      if (old) saved.emplace_back(v.first, old);
      else unset.push_back(v.first);
      setenv(v.first.c_str(), v.second.c_str(), 1);
    }
    paramsReload();
  }
  ~LogEnv() {
    for (auto &v : saved) setenv(v.first.c_str(), v.second.c_str(), 1);
    for (auto &n : unset) unsetenv(n.c_str());
    paramsReload();
  }
};
}  // namespace

TEST(NetFraming, PeerClosedWarningNamesTheCause) {
  char dir[] = "/tmp/flagcx-framing-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/log";
  {
    LogEnv env({{"FLAGCX_DEBUG_FILE", path}, {"FLAGCX_DEBUG", "WARN"}});
    Pair p = makePair(1);
    std::vector<uint8_t> buf(64);
    int r;
    EXPECT_EQ(p.b->irecv(buf.data(), buf.size(), 1, &r), flagcxSuccess);
    p.a.reset();
    bool done = false;
    EXPECT_EQ(p.b->test(r, &done, nullptr), flagcxRemoteError);
  }  // the log file is closed here
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("pending (receive #0): the test pipe was reset"), std::string::npos)
      << ss.str();
  unlink(path.c_str());
  rmdir(dir);
}

// A peer that finished a message and then gave up (an error frame): the
// message is delivered, only the requests after the frame fail, and the
// Conn names the peer's call.
TEST(NetFraming, MessageBeforeErrorFrameIsDelivered) {
  Pair p = makePair(1, 64);
  std::vector<uint8_t> src(1000, 7), dst(1000, 0), more(16);
  int s, r1, r2;
  ASSERT_EQ(p.b->irecv(dst.data(), dst.size(), 5, &r1), flagcxSuccess);
  ASSERT_EQ(p.b->irecv(more.data(), more.size(), 6, &r2), flagcxSuccess);
  ASSERT_EQ(p.a->isend(src.data(), src.size(), 5, &s), flagcxSuccess);
  bool sent = false;
  for (int i = 0; i < 100000 && !sent; i++) ASSERT_EQ(p.a->test(s, &sent, nullptr), flagcxSuccess);
  ASSERT_TRUE(sent);
  const uint64_t theirCall = 0xC000000000000006ull;
  p.a->poison(flagcxInvalidUsage, theirCall, 0);
  // Read everything, the frame included: the Conn is failed from now on.
  flagcxResult_t rc = flagcxSuccess;
  for (int i = 0; i < 100000 && rc == flagcxSuccess; i++) rc = p.b->progress();
  EXPECT_EQ(rc, flagcxInvalidUsage);
  EXPECT_EQ(p.b->peerGaveUpOn(), theirCall);
  bool done = false;
  size_t got = 0;
  EXPECT_EQ(p.b->test(r1, &done, &got), flagcxSuccess);
  EXPECT_TRUE(done);
  EXPECT_EQ(got, src.size());
  EXPECT_EQ(dst, src);
  done = false;
  EXPECT_EQ(p.b->test(r2, &done, nullptr), flagcxInvalidUsage);
  EXPECT_FALSE(done);
}

// The sender gives up while its frame is half written: no error frame can
// follow, so it ends the connection, and the receiver fails at once (before
// this, it waited for the rest of the frame until FLAGCX_TIMEOUT).
TEST(NetFraming, PoisonMidFrameEndsTheConnection) {
  for (int lanes : {1, 2}) {
    Pair p = makePair(lanes, 64);
    std::vector<uint8_t> src(100000, 3), dst(100000, 0);
    int s, r;
    ASSERT_EQ(p.b->irecv(dst.data(), dst.size(), 5, &r), flagcxSuccess);
    ASSERT_EQ(p.a->isend(src.data(), src.size(), 5, &s), flagcxSuccess);
    for (int i = 0; i < 1000 && p.ab[0]->q.empty(); i++) ASSERT_EQ(p.a->progress(), flagcxSuccess);
    ASSERT_FALSE(p.ab[0]->q.empty());
    ASSERT_LT(p.ab[0]->q.size(), src.size());  // mid-frame
    p.a->poison(flagcxInvalidUsage, 0xC000000000000006ull, 0);
    EXPECT_NE(p.a->progress(), flagcxSuccess) << lanes << " lanes: the sender's Conn failed";
    flagcxResult_t rc = flagcxSuccess;
    bool done = false;
    for (int i = 0; i < 100000 && rc == flagcxSuccess && !done; i++) rc = p.b->test(r, &done, nullptr);
    EXPECT_EQ(rc, flagcxRemoteError) << lanes << " lanes";
    EXPECT_FALSE(done) << lanes << " lanes";
  }
}

// Several lanes: a message striped over all of them, then the sender's error
// frame on lane 0.  The frame may be read before the other lanes' stripes;
// the message was sent whole and is still delivered, then the Conn fails
// with the peer's code.
TEST(NetFraming, StripedMessageBeforeErrorFrameIsDelivered) {
  for (int lanes : {2, 3}) {
    Pair p = makePair(lanes);
    const size_t n = 768 * 1024 + 5;
    std::vector<uint8_t> src(n), dst(n, 0), more(16);
    for (size_t i = 0; i < n; i++) src[i] = static_cast<uint8_t>(i * 7 + (i >> 9));
    int s, r1, r2;
    ASSERT_EQ(p.b->irecv(dst.data(), dst.size(), 5, &r1), flagcxSuccess);
    ASSERT_EQ(p.b->irecv(more.data(), more.size(), 6, &r2), flagcxSuccess);
    ASSERT_EQ(p.a->isend(src.data(), src.size(), 5, &s), flagcxSuccess);
    bool sent = false;
    for (int i = 0; i < 100000 && !sent; i++) ASSERT_EQ(p.a->test(s, &sent, nullptr), flagcxSuccess);
    ASSERT_TRUE(sent);
    const uint64_t theirCall = 0xC000000000000006ull;
    p.a->poison(flagcxInvalidUsage, theirCall, 0);
    flagcxResult_t rc = flagcxSuccess;
    bool done = false;
    size_t got = 0;
    for (int i = 0; i < 100000 && rc == flagcxSuccess && !done; i++) rc = p.b->test(r1, &done, &got);
    EXPECT_EQ(rc, flagcxSuccess) << lanes << " lanes";
    EXPECT_TRUE(done) << lanes << " lanes";
    EXPECT_EQ(got, n);
    EXPECT_TRUE(dst == src) << lanes << " lanes";
    rc = flagcxSuccess;
    for (int i = 0; i < 100000 && rc == flagcxSuccess; i++) rc = p.b->progress();
    EXPECT_EQ(rc, flagcxInvalidUsage);
    EXPECT_EQ(p.b->peerGaveUpOn(), theirCall);
    EXPECT_EQ(p.b->test(r2, &done, nullptr), flagcxInvalidUsage);
  }
}

// Several lanes: the sender completes a striped message and closes.  Lanes
// see their end one by one; one that closes while another still carries the
// message's stripe is no error, and a message whose receive is posted only
// after some lanes closed is still delivered.  Afterwards receives fail.
TEST(NetFraming, PeerClosedAfterStripedMessages) {
  for (int lanes : {2, 3}) {
    Pair p = makePair(lanes);
    const size_t n = (1u << 20) + 3;
    std::vector<uint8_t> big(n), dst(n, 0), small(100, 9), dst2(100, 0), dst3(8);
    for (size_t i = 0; i < n; i++) big[i] = static_cast<uint8_t>(i * 13 + (i >> 10));
    int s1, s2, r1, r2, r3;
    ASSERT_EQ(p.b->irecv(dst.data(), n, 1, &r1), flagcxSuccess);
    ASSERT_EQ(p.a->isend(big.data(), n, 1, &s1), flagcxSuccess);
    ASSERT_EQ(p.a->isend(small.data(), small.size(), 2, &s2), flagcxSuccess);
    bool d1 = false, d2 = false;
    for (int i = 0; i < 100000 && !(d1 && d2); i++) {
      if (!d1) {
        ASSERT_EQ(p.a->test(s1, &d1, nullptr), flagcxSuccess);
      }
      if (!d2) {
        ASSERT_EQ(p.a->test(s2, &d2, nullptr), flagcxSuccess);
      }
    }
    ASSERT_TRUE(d1 && d2);
    p.a.reset();  // every lane of the sender closes
    bool done = false;
    flagcxResult_t rc = flagcxSuccess;
    for (int i = 0; i < 100000 && rc == flagcxSuccess && !done; i++) rc = p.b->test(r1, &done, nullptr);
    EXPECT_EQ(rc, flagcxSuccess) << lanes << " lanes";
    EXPECT_TRUE(done && dst == big) << lanes << " lanes";
    for (int i = 0; i < 50; i++) p.b->progress();  // the lanes that carry nothing more see their end
    ASSERT_EQ(p.b->irecv(dst2.data(), dst2.size(), 2, &r2), flagcxSuccess) << lanes << " lanes";
    done = false;
    rc = flagcxSuccess;
    for (int i = 0; i < 100000 && rc == flagcxSuccess && !done; i++) rc = p.b->test(r2, &done, nullptr);
    EXPECT_EQ(rc, flagcxSuccess) << lanes << " lanes";
    EXPECT_TRUE(done && dst2 == small) << lanes << " lanes";
    rc = p.b->irecv(dst3.data(), dst3.size(), 3, &r3);
    for (int i = 0; i < 100000 && rc == flagcxSuccess; i++) rc = p.b->test(r3, &done, nullptr);
    EXPECT_EQ(rc, flagcxRemoteError) << lanes << " lanes";
  }
}

TEST(NetFraming, RequestLimitAndBadHandles) {
  Pair p = makePair(1);
  char c;
  int r;
  std::vector<int> reqs;
  for (int i = 0; i < Conn::kMaxPosted; i++) {
    ASSERT_EQ(p.b->irecv(&c, 1, 0, &r), flagcxSuccess);
    reqs.push_back(r);
  }
  EXPECT_EQ(p.b->irecv(&c, 1, 0, &r), flagcxInternalError);
  EXPECT_EQ(p.b->test(-1, nullptr, nullptr), flagcxInvalidUsage);
  EXPECT_EQ(p.b->test(reqs[0] + (1 << 8) * 5, nullptr, nullptr), flagcxInvalidUsage);
  // Complete one and check its handle is released afterwards.
  int s;
  ASSERT_EQ(p.a->isend(&c, 1, 0, &s), flagcxSuccess);
  std::vector<size_t> bytes;
  ASSERT_EQ(drive(p, {{p.b.get(), reqs[0]}, {p.a.get(), s}}, &bytes), flagcxSuccess);
  EXPECT_EQ(p.b->test(reqs[0], nullptr, nullptr), flagcxInvalidUsage);
  EXPECT_EQ(p.b->irecv(&c, 1, 0, &r), flagcxSuccess);  // a slot is free again
}

}  // namespace
