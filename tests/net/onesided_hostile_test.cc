// The one-sided engine against a hostile job member.  Rank 0 runs the real
// engine (net/rma.h) over a real socket Conn (the transport's handshake,
// on the job's bootstrap), with two regions exposed inside one buffer
// fenced by canary bytes.  Rank 1 completes the same handshake and then
// speaks the real framing and the real one-sided format (rma_wire.h), but
// sends what it likes: addresses outside the regions, another region's key,
// giant lengths, an offset and length whose sum wraps, payloads longer or
// shorter than their header, answers to requests never made, a flood of
// requests whose answers it never reads, a put whose region is withdrawn
// under it.  Each case asserts that rank 0 is alive, that no canary byte
// and no region byte changed (beyond what a case is allowed to write), that
// rank 0 cut the peer with one WARN naming it, and for the flood that rank
// 0's memory did not grow with the flood.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "net/common/rma_wire.h"
#include "net/ibverbs/ib_rma.h"
#include "net/net.h"
#include "net/rma.h"
#include "tests/common/bootstrap.h"
#include "tests/common/harness.h"

using namespace flagcx;
using rma::Hdr;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kGuard = 64, kSizeA = 8192, kSizeB = 4096;
constexpr uint32_t kKeyA = 1, kKeyB = 2;
constexpr uint8_t kCanary = 0xc5, kFillA = 0x11, kFillB = 0x22, kEvil = 0xee;

// What rank 0 does during a case besides serving.
enum class Victim { Serve, Withdraw, OwnPut, OwnGet, OwnBigPut };

struct Case {
  const char *name;
  Victim victim;
  const char *expect;  // a piece of rank 0's WARN line
  std::function<bool(Conn &, Bootstrap &)> attack;  // false: the attack itself broke
  int writesA = 0;  // bytes of region A the case may write (from offset 0)
};

// Rank 1's side ------------------------------------------------------------

// Send whole messages on c (bounded): false if the Conn failed first.
bool sendMsgs(Conn &c, const std::vector<std::pair<const void *, std::pair<size_t, uint64_t>>> &m) {
  std::vector<int> reqs;
  for (auto &x : m) {
    int r = -1;
    if (c.isend(x.first, x.second.first, x.second.second, &r) != flagcxSuccess) return false;
    reqs.push_back(r);
  }
  auto until = Clock::now() + std::chrono::seconds(10);
  for (int r : reqs) {
    bool done = false;
    while (!done && Clock::now() < until)
      if (c.test(r, &done, nullptr) != flagcxSuccess) return false;
    if (!done) return false;
  }
  return true;
}

bool sendHdr(Conn &c, Hdr h, const void *pay = nullptr, size_t payLen = 0) {
  if (!pay) return sendMsgs(c, {{&h, {sizeof h, rma::kTagHdr}}});
  return sendMsgs(c, {{&h, {sizeof h, rma::kTagHdr}}, {pay, {payLen, rma::kTagData}}});
}

// Receive one header from rank 0 (its own request); false on failure.
bool recvHdr(Conn &c, Hdr *h) {
  int r = -1;
  if (c.irecv(h, sizeof *h, rma::kTagHdr, &r) != flagcxSuccess) return false;
  auto until = Clock::now() + std::chrono::seconds(10);
  for (bool done = false; !done;) {
    if (c.test(r, &done, nullptr) != flagcxSuccess || Clock::now() > until) return false;
  }
  return true;
}

std::vector<uint8_t> evil(size_t n) { return std::vector<uint8_t>(n, kEvil); }

// A flood of gets whose answers are never read: push until nothing moves.
bool flood(Conn &c) {
  constexpr int kCount = 600000, kWindow = 200;
  Hdr h{rma::kGet, kKeyA, 0, 4096, 0, 0};
  std::vector<Hdr> hs(kWindow, h);
  std::vector<int> reqs(kWindow, -1);
  int sent = 0;
  auto lastMove = Clock::now();
  while (sent < kCount && Clock::now() - lastMove < std::chrono::milliseconds(300)) {
    for (int i = 0; i < kWindow && sent < kCount; i++) {
      bool done = reqs[i] < 0;
      if (!done && c.test(reqs[i], &done, nullptr) != flagcxSuccess) return true;  // cut: fine
      if (!done) continue;
      hs[i].id = static_cast<uint64_t>(sent) + 1;
      if (c.isend(&hs[i], sizeof(Hdr), rma::kTagHdr, &reqs[i]) != flagcxSuccess) return true;
      sent++;
      lastMove = Clock::now();
    }
  }
  fprintf(stderr, "[rank 1] flood: %d of %d requests went out before the Conn stopped moving\n",
          sent, kCount);
  return true;
}

std::vector<Case> cases() {
  auto put = [](uint32_t key, uint64_t off, uint64_t len) {
    return [=](Conn &c, Bootstrap &) {
      auto p = evil(len < 65536 ? len : 16);
      return sendHdr(c, Hdr{rma::kPut, key, off, len, 1, 0}, p.data(), p.size()) || true;
    };
  };
  return {
      // Honest first: the channel works, so the refusals below are not vacuous.
      {"HonestPutLands", Victim::Serve, nullptr,
       [](Conn &c, Bootstrap &) {
         auto p = evil(16);
         Hdr ack{};
         return sendHdr(c, Hdr{rma::kPut, kKeyA, 0, 16, 7, 0}, p.data(), 16) && recvHdr(c, &ack) &&
                ack.op == rma::kAck && ack.id == 7;
       },
       16},
      {"PutUnknownKey", Victim::Serve, "key not exposed", put(99, 0, 16)},
      {"PutPastEnd", Victim::Serve, "outside the exposed region", put(kKeyA, kSizeA - 8, 16)},
      {"PutOffsetPastEnd", Victim::Serve, "outside the exposed region", put(kKeyA, kSizeA + 1, 0)},
      {"PutOffsetPlusLengthWraps", Victim::Serve, "outside the exposed region",
       put(kKeyA, UINT64_MAX - 7, 16)},
      {"PutGiantLength", Victim::Serve, "outside the exposed region", put(kKeyA, 0, 1ull << 62)},
      // Key B's region is smaller than A's: the range is checked per key.
      {"OtherRegionsKey", Victim::Serve, "outside the exposed region", put(kKeyB, kSizeB, 4096)},
      {"GetPastEnd", Victim::Serve, "outside the exposed region",
       [](Conn &c, Bootstrap &) {
         Hdr back{};
         // No data may come back: the next thing rank 1 reads is the cut.
         return sendHdr(c, Hdr{rma::kGet, kKeyA, kSizeA - 1024, 4096, 3, 0}) && !recvHdr(c, &back);
       }},
      {"ValuePastEnd", Victim::Serve, "outside the exposed region",
       [](Conn &c, Bootstrap &) { return sendHdr(c, Hdr{rma::kValue, kKeyB, kSizeB - 4, 8, 4, ~0ull}); }},
      {"ValueOfOtherLength", Victim::Serve, "not 8 bytes",
       [](Conn &c, Bootstrap &) { return sendHdr(c, Hdr{rma::kValue, kKeyA, 0, 4096, 4, ~0ull}); }},
      {"PayloadLongerThanHeader", Victim::Serve, "longer than the 16-byte receive posted",
       [](Conn &c, Bootstrap &) {
         auto p = evil(4096);
         sendHdr(c, Hdr{rma::kPut, kKeyA, kSizeA - 16, 16, 5, 0}, p.data(), p.size());
         return true;
       }},
      {"PayloadShorterThanHeader", Victim::Serve, "sent 32 payload bytes for a 64-byte put",
       [](Conn &c, Bootstrap &) {
         auto p = evil(32);
         sendHdr(c, Hdr{rma::kPut, kKeyA, 0, 64, 6, 0}, p.data(), p.size());
         return true;
       },
       32},
      {"DataForNoRequest", Victim::Serve, "an answer to no request",
       [](Conn &c, Bootstrap &) {
         auto p = evil(8);
         sendHdr(c, Hdr{rma::kData, 0, 0, 8, 999, 0}, p.data(), 8);
         return true;
       }},
      {"UnknownKind", Victim::Serve, "unknown message kind",
       [](Conn &c, Bootstrap &) { return sendHdr(c, Hdr{99, kKeyA, 0, 8, 1, 0}); }},
      // Rank 0's own requests, answered wrongly.
      {"PutAnsweredWithData", Victim::OwnPut, "data answering a request that is not a get",
       [](Conn &c, Bootstrap &) {
         Hdr h{};
         if (!recvHdr(c, &h)) return false;
         auto p = evil(h.len < 4096 ? h.len : 4096);
         sendHdr(c, Hdr{rma::kData, 0, 0, h.len, h.id, 0}, p.data(), p.size());
         return true;
       }},
      {"GetAnsweredWithAck", Victim::OwnGet, "an ack answering a get",
       [](Conn &c, Bootstrap &) {
         Hdr h{};
         return recvHdr(c, &h) && sendHdr(c, Hdr{rma::kAck, 0, 0, 0, h.id, 0});
       }},
      // An ack before the payload was read: the put must not complete (its
      // source is still being read); it fails when nothing more moves.
      // (Rank 1 holds the connection open a moment so that rank 0 reads the
      // ack before it sees the close.)
      {"AckBeforeThePayload", Victim::OwnBigPut, "peer 1",
       [](Conn &c, Bootstrap &) {
         Hdr h{};
         bool ok = recvHdr(c, &h) && sendHdr(c, Hdr{rma::kAck, 0, 0, 0, h.id, 0});
         std::this_thread::sleep_for(std::chrono::milliseconds(500));
         return ok;
       }},
      // A put whose header arrived and whose payload waits: the region is
      // withdrawn under it, then the payload comes.
      {"PayloadAfterWithdraw", Victim::Withdraw, "rank 1",
       [](Conn &c, Bootstrap &bs) {
         Hdr h{rma::kPut, kKeyA, 0, 4096, 8, 0};
         if (!sendHdr(c, h)) return false;
         if (bs.barrier() != flagcxSuccess) return false;  // rank 0 withdrew the region
         auto p = evil(4096);
         int r = -1;
         c.isend(p.data(), p.size(), rma::kTagData, &r);
         for (int i = 0; i < 1000; i++) c.progress();
         return bs.barrier() == flagcxSuccess;
       }},
      {"FloodOfUnreadAnswers", Victim::Serve, nullptr,
       [](Conn &c, Bootstrap &) { return flood(c); }},
  };
}

// Rank 0's side ------------------------------------------------------------

struct Memory {
  std::vector<uint8_t> buf = std::vector<uint8_t>(3 * kGuard + kSizeA + kSizeB);
  uint8_t *a() { return buf.data() + kGuard; }
  uint8_t *b() { return buf.data() + 2 * kGuard + kSizeA; }
  void fill(uint8_t fa) {
    memset(buf.data(), kCanary, buf.size());
    memset(a(), fa, kSizeA);
    memset(b(), kFillB, kSizeB);
  }
  // "" when the canaries and regions hold what they should.
  std::string check(uint8_t fa, size_t writesA) {
    for (size_t i = 0; i < buf.size(); i++) {
      uint8_t *p = buf.data() + i;
      uint8_t want = kCanary;
      if (p >= a() && p < a() + kSizeA) want = static_cast<size_t>(p - a()) < writesA ? kEvil : fa;
      if (p >= b() && p < b() + kSizeB) want = kFillB;
      if (*p != want && !(want == kEvil && *p == fa))
        return "byte " + std::to_string(i) + " is " + std::to_string(*p) + ", expected " +
               std::to_string(want);
    }
    return "";
  }
};

long statusKb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, field, strlen(field)) == 0) v = atol(line + strlen(field));
  if (f) fclose(f);
  return v;
}

std::string logSince(const char *path, long from) {
  std::string s;
  FILE *f = fopen(path, "r");
  if (!f) return s;
  fseek(f, from, SEEK_SET);
  char b[4096];
  size_t n;
  while ((n = fread(b, 1, sizeof b, f)) > 0) s.append(b, n);
  fclose(f);
  return s;
}

// Whether a line of `log` holds `piece` and names rank 1 (as "rank 1" or "peer 1").
bool namesPeer(const std::string &log, const char *piece) {
  for (size_t at = log.find(piece); at != std::string::npos; at = log.find(piece, at + 1)) {
    size_t b = log.rfind('\n', at), e = log.find('\n', at);
    std::string line = log.substr(b == std::string::npos ? 0 : b + 1, e == std::string::npos ? e : e - b);
    if (line.find("WARN") != std::string::npos &&
        (line.find("rank 1") != std::string::npos || line.find("peer 1") != std::string::npos))
      return true;
  }
  return false;
}

// Rank 0's own request of `what`, waited for; its result.
int ownRequest(RmaEngine &eng, Victim what) {
  static std::vector<uint8_t> src(32u << 20, 0x5a);  // larger than the socket buffers
  RmaDone d;
  d.left.store(1);
  if (what == Victim::OwnGet) eng.get(1, src.data(), 64, 5, 0, &d);
  else eng.put(1, src.data(), what == Victim::OwnBigPut ? src.size() : 64, 5, 0, &d);
  auto until = Clock::now() + std::chrono::seconds(20);
  while (d.left.load() > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return d.left.load() > 0 ? -1 : d.error.load();
}

int victimCase(Bootstrap &bs, const Case &c, const char *logPath) {
  int failures = 0;
  std::vector<std::unique_ptr<Conn>> got;
  RANK_OK(makeSocketTransport()->connectAll(bs, {1}, 1, &got));
  std::vector<std::unique_ptr<Conn>> conns(2);
  conns[1] = std::move(got[0]);
  static Memory mem;
  mem.fill(kFillA);
  std::vector<std::atomic<uint64_t>> sig(16);
  auto eng = RmaEngine::create(0, 2, std::move(conns), sig.data(), 8, nullptr);
  uint32_t rkey;
  RANK_OK(eng->expose(kKeyA, mem.a(), kSizeA, &rkey));
  RANK_OK(eng->expose(kKeyB, mem.b(), kSizeB, &rkey));
  long mark = lseek(2, 0, SEEK_END);
  int fd = open("/proc/self/clear_refs", O_WRONLY);  // VmHWM := VmRSS now
  if (fd >= 0 && write(fd, "5", 1) != 1) {}
  if (fd >= 0) close(fd);
  long rss0 = statusKb("VmRSS:");
  RANK_OK(bs.barrier());
  uint8_t fa = kFillA;
  int own = 0;
  if (c.victim == Victim::Withdraw) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the header is likely in
    eng->withdraw(kKeyA);
    fa = 0x33;  // the region is ours again: anything rank 1 sends must not land in it
    memset(mem.a(), fa, kSizeA);
    RANK_OK(bs.barrier());
    RANK_OK(bs.barrier());
  } else if (c.victim != Victim::Serve) {
    own = ownRequest(*eng, c.victim);
    RANK_EXPECT(own != flagcxSuccess && own != -1, "case %s: rank 0's own request: %d", c.name, own);
  }
  if (c.expect || c.victim == Victim::Serve) {
    auto until = Clock::now() + std::chrono::seconds(20);
    bool wantCut = c.expect != nullptr || std::string(c.name) == "FloodOfUnreadAnswers";
    while (wantCut && !eng->peerGone(1) && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    RANK_EXPECT(!wantCut || eng->peerGone(1), "case %s: rank 1 was not cut", c.name);
  }
  RANK_OK(bs.barrier());
  long hwm = statusKb("VmHWM:");
  eng.reset();
  std::string bad = mem.check(fa, c.victim == Victim::Withdraw ? 0 : c.writesA);
  RANK_EXPECT(bad.empty(), "case %s: %s", c.name, bad.c_str());
  std::string log = logSince(logPath, mark);
  if (c.expect)
    RANK_EXPECT(namesPeer(log, c.expect), "case %s: no WARN with \"%s\" naming rank 1 in:\n%s",
                c.name, c.expect, log.c_str());
  if (std::string(c.name) == "FloodOfUnreadAnswers")
    RANK_EXPECT(hwm - rss0 < 16 * 1024, "case %s: rank 0 grew by %ld KiB during the flood", c.name,
                hwm - rss0);
  return failures;
}

int hostileCase(Bootstrap &bs, const Case &c) {
  std::vector<std::unique_ptr<Conn>> got;
  RANK_OK(makeSocketTransport()->connectAll(bs, {0}, 1, &got));
  RANK_OK(bs.barrier());
  bool ok = c.attack(*got[0], bs);
  got.clear();  // the connection goes: a rank 0 still waiting sees it close
  RANK_OK(bs.barrier());
  RANK_CHECK(ok, "case %s: the attack did not go as planned", c.name);
  return 0;
}

}  // namespace

TEST(OneSidedHostile, EveryBadRequestIsRefusedAndNothingOutsideTheRegionsChanges) {
  harness::Env env{{{"FLAGCX_TIMEOUT", "3"}, {"FLAGCX_SHM_DISABLE", "1"}}};
  auto res = harness::run(
      2,
      [](int rank, int nranks, flagcxUniqueId *id) {
        auto bs = harness::makeBootstrap(rank, nranks, *id);
        if (!bs) return 50;
        char logPath[] = "/tmp/flagcx-hostile-XXXXXX";
        if (rank == 0) {  // rank 0's log goes to a file the cases read back
          int fd = mkstemp(logPath);
          if (fd < 0 || dup2(fd, 2) < 0) return 51;
          close(fd);
        }
        int failures = 0;
        const char *only = getenv("HOSTILE_ONLY");  // a case name's piece: run just those
        for (const Case &c : cases()) {
          if (only && !strstr(c.name, only)) continue;
          int rc = rank == 0 ? victimCase(*bs, c, logPath) : hostileCase(*bs, c);
          if (rc != 0) failures++;
          if (rc == 2) break;  // a set-up step failed: the ranks are out of step
        }
        if (rank == 0 && failures) {  // show the log on the test's output
          std::string log = logSince(logPath, 0);
          fprintf(stdout, "rank 0's log:\n%s", log.c_str());
        }
        if (rank == 0) unlink(logPath);
        return failures;
      },
      env, 120);
  EXPECT_TRUE(res.allOk()) << res.failures();
}
