// TCP transport.  Each Conn (peer, channel) owns `lanes` TCP connections,
// lanes = FLAGCX_SOCKET_NTHREADS x FLAGCX_NSOCKS_PERTHREAD (at most 16);
// the framing engine (net/common) stripes messages of 512 KiB or more across
// them.
//
// Progress runs in the caller's thread (test()/progress()), all lanes of a
// Conn in turn.  With FLAGCX_SOCKET_HELPERS on (auto: 4+ cores per rank),
// each lane also has a send and a receive thread (SocketMover, started on
// first use): the stripes of a message split over several lanes go through
// them with blocking calls, so the kernel's copies of the lanes run on
// several cores at once -- one TCP connection moves ~3 GB/s each way on
// loopback whatever threads serve it, four with their own threads ~3.5x that
// (docs/DECISIONS.md, "Sockets").  Everything else (headers,
// unsplit messages) stays with the engine thread's non-blocking calls.  On
// 2 cores the helpers measured 0.6-0.8x of polling, hence auto.
// Lending the sender's pages to the kernel instead of copying them (vmsplice
// + splice, the receiver acknowledging on a control connection) measured
// 1.4-1.8x slower on loopback (docs/DECISIONS.md, "Sockets").
//
// Set-up: each rank listens on findLocalAddress() (FLAGCX_SOCKET_IFNAME /
// FAMILY) port 0 and sends its address to each peer through the bootstrap.
// The lower rank of a pair connects, the higher accepts; every data
// connection proves the unique id's secret (handshake kind 3) and names
// (rank, channel*lanes + lane) in its hello.  Accepted connections run
// their handshakes side by side (HandshakeQueue, src/rendezvous/socket.h),
// so a foreign client that is silent, or stops part-way through its hello
// or its proof, never delays the real ones; it is logged (by its address)
// and dropped after 10 s, and at most 64 wait, on the caller's thread.  The
// listener is closed once every expected connection has arrived, and the
// handshakes still under way with it.
#include "net/socket/socket_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <mutex>

#include "rendezvous/rendezvous.h"
#include "base/base.h"
#include "net/common/framed_conn.h"
#include "net/net.h"
#include "net/socket/socket_mover.h"

namespace flagcx {

namespace {

constexpr uint32_t kTagAddr = 0x736f6b01;  // bootstrap tag "sok" 1
constexpr uint64_t kAddrMagic = 0x464c4147534f4b31ull;
constexpr uint32_t kHelloKindTransport = 3;
constexpr int kMaxLanes = 16;
constexpr size_t kStage = 64 * 1024;  // read-ahead buffer for headers and small messages
// Helper threads per process, at most (two per lane that moved a large
// payload); lanes beyond that keep the engine thread's polling.
constexpr int kMaxHelpers = 256;

std::mutex g_hookMu;
std::function<void(const SockAddr &)> g_listenHook;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd &&o) noexcept : fd_(o.release()) {}
  Fd &operator=(Fd &&o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

class SocketPipe final : public Pipe {
 public:
  SocketPipe(PeerDesc desc, int lane, Fd fd, SockAddr addr, bool helpers)
      : desc_(std::move(desc)), lane_(lane), fd_(std::move(fd)), addr_(addr),
        stage_(new char[kStage]), helpers_(helpers) {
    caps_.hasHelpers = helpers;
    caps_.pollFd = fd_.get();
  }

  flagcxResult_t write(const iovec *iov, int iovcnt, size_t *moved, bool *closed) override {
    *moved = 0;
    *closed = false;
    msghdr mh{};
    mh.msg_iov = const_cast<iovec *>(iov);
    mh.msg_iovlen = static_cast<size_t>(iovcnt);
    for (;;) {
      ssize_t n = sendmsg(fd_.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) {
        *moved = static_cast<size_t>(n);
        return flagcxSuccess;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return flagcxSuccess;
      return ioError("send", closed);
    }
  }

  bool offload() override {
    if (!helpers_) return false;
    if (!sendMover_) {
      if (SocketMover::live() + 2 > kMaxHelpers) return false;  // keep polling this lane
      int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (efd < 0) return false;
      bgFd_ = Fd(efd);
      sendMover_ = std::make_unique<SocketMover>(fd_.get(), true, efd);
      recvMover_ = std::make_unique<SocketMover>(fd_.get(), false, efd);
    }
    return true;
  }

  int bgFd() const override { return bgFd_.get(); }
  void bgDrain() override {
    uint64_t v;
    (void)!::read(bgFd_.get(), &v, sizeof v);
  }
  bool bgBusy(bool send) const override { return (send ? sendMover_ : recvMover_)->busy(); }

  flagcxResult_t writeBg(const iovec *iov, int iovcnt) override {
    sendMover_->start(iov, iovcnt);
    return flagcxSuccess;
  }

  flagcxResult_t readBg(void *dst, size_t n, size_t *pre, const BgFold *fold) override {
    *pre = 0;
    if (stBeg_ < stEnd_) {  // what the header read brought in comes first
      size_t k = std::min(n, stEnd_ - stBeg_);
      memcpy(dst, stage_.get() + stBeg_, k);
      stBeg_ += k;
      *pre = k;
    }
    if (*pre < n) {
      iovec v{static_cast<char *>(dst) + *pre, n - *pre};
      recvMover_->start(&v, 1, fold);
    }
    return flagcxSuccess;
  }

  flagcxResult_t pollBg(bool send, size_t *moved, bool *finished, bool *closed) override {
    SocketMover::Status st = (send ? sendMover_ : recvMover_)->poll();
    *moved = st.moved;
    *finished = st.finished;
    *closed = false;
    if (!st.finished) return flagcxSuccess;
    if (st.err != 0) {  // classified like the engine's own calls (a lost peer: *closed)
      errno = st.err;
      return ioError(send ? "send" : "recv", closed);
    }
    if (st.closed) {
      INFO(kNet, "socket rank %d: helper %s to peer %d (%s, %s) lane %d: connection closed",
           desc_.self, send ? "send" : "recv", desc_.peer, desc_.host.c_str(),
           addr_.str().c_str(), lane_);
      *closed = true;
    }
    return flagcxSuccess;
  }

  void cancelBg() override {
    auto busy = [&] {
      return (sendMover_ && sendMover_->busy()) || (recvMover_ && recvMover_->busy());
    };
    if (!busy()) return;
    // Both directions: a blocked send or receive returns at once.
    shutdown(fd_.get(), SHUT_RDWR);
    while (busy()) usleep(100);
  }

  bool cut() override {
    cancelBg();
    shutdown(fd_.get(), SHUT_RDWR);
    return true;
  }

  flagcxResult_t read(void *dst, size_t n, size_t *moved, bool *closed) override {
    *moved = 0;
    *closed = false;
    if (stBeg_ < stEnd_) {
      size_t k = std::min(n, stEnd_ - stBeg_);
      memcpy(dst, stage_.get() + stBeg_, k);
      stBeg_ += k;
      *moved = k;
      return flagcxSuccess;
    }
    // Big reads go straight to the user's buffer; small ones (headers, small
    // messages) pull in whatever is queued so the next ones cost no syscall.
    bool direct = n >= kStage / 2;
    char *to = direct ? static_cast<char *>(dst) : stage_.get();
    size_t cap = direct ? n : kStage;
    for (;;) {
      ssize_t got = recv(fd_.get(), to, cap, MSG_DONTWAIT);
      if (got > 0) {
        if (direct) {
          *moved = static_cast<size_t>(got);
        } else {
          stBeg_ = 0;
          stEnd_ = static_cast<size_t>(got);
          size_t k = std::min(n, stEnd_);
          memcpy(dst, stage_.get(), k);
          stBeg_ = k;
          *moved = k;
        }
        return flagcxSuccess;
      }
      if (got == 0) {
        *closed = true;
        return flagcxSuccess;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return flagcxSuccess;
      return ioError("recv", closed);
    }
  }

  const char *closeCause() const override { return cause_.empty() ? nullptr : cause_.c_str(); }

 private:
  flagcxResult_t ioError(const char *op, bool *closed) {
    int err = errno;
    if (err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ETIMEDOUT ||
        err == EHOSTUNREACH || err == ENETUNREACH) {
      // A peer gone.  Not a warning by itself: a peer that finished and
      // closed while this side still polled (an engine reading ahead for the
      // next header at teardown) is normal.  The Conn warns when requests
      // were pending, naming this cause (closeCause).
      char buf[256];
      snprintf(buf, sizeof(buf), "%s failed with %s on lane %d, %s %s", op, strerror(err), lane_,
               desc_.host.c_str(), addr_.str().c_str());
      if (cause_.empty()) cause_ = buf;
      INFO(kNet, "socket rank %d: connection to peer %d channel %d: %s", desc_.self, desc_.peer,
           desc_.channel, buf);
      *closed = true;
      return flagcxSuccess;
    }
    WARN(kNet, "socket rank %d: %s to peer %d (%s, %s) lane %d failed: %s", desc_.self, op,
         desc_.peer, desc_.host.c_str(), addr_.str().c_str(), lane_, strerror(err));
    return flagcxSystemError;
  }

  PeerDesc desc_;
  int lane_;
  std::string cause_;  // the first loss (closeCause)
  Fd fd_;
  SockAddr addr_;
  std::unique_ptr<char[]> stage_;
  size_t stBeg_ = 0, stEnd_ = 0;
  bool helpers_;  // large stripes go through this lane's two helper threads
  // Declared after fd_ and bgFd_: they stop (and unblock) before those close.
  Fd bgFd_;
  std::unique_ptr<SocketMover> sendMover_, recvMover_;
};

// Lanes per Conn and whether they get helper threads, from FLAGCX_SOCKET_*
// and, for "auto", the cores this process may use per rank on its host.
// Helper threads lose where they compete with the ranks for cores (2 cores,
// 2 ranks: 0.6-0.8x of polling) and win where cores are spare:
// on 16 cores, 2 ranks, 4 lanes with helpers took allreduce from 1.2-1.4x
// MPICH to 1.6-2.2x at 1-16 MiB, while 8 lanes (16 helpers a rank on 8 cores
// a rank) lost (docs/DECISIONS.md, "Sockets").  Without helpers, extra
// lanes do not help on one host: one thread does every kernel copy anyway.
struct LanePlan {
  int lanes;
  bool helpers;
  int coresPerRank;
};
LanePlan planLanes(const Bootstrap &bs) {
  LanePlan plan{};
  plan.coresPerRank = coresPerLocalRank(bs);
  int64_t h = paramInt(Param::SOCKET_HELPERS);
  plan.helpers = h == -2 ? plan.coresPerRank >= 4 : h == 1;
  int64_t nt = paramInt(Param::SOCKET_NTHREADS);
  if (nt < 1) nt = plan.helpers ? std::clamp(plan.coresPerRank / 2, 2, 4) : 1;  // -2: auto
  int64_t ns = std::max<int64_t>(1, paramInt(Param::NSOCKS_PERTHREAD));
  plan.lanes = static_cast<int>(std::min<int64_t>(kMaxLanes, nt * ns));
  return plan;
}

struct AddrMsg {
  uint64_t magic;
  SockAddr addr;
  int32_t lanes;
  int32_t nchannels;
};

bool addrValid(const SockAddr &a) {
  if (a.u.sa.sa_family == AF_INET) return a.len == sizeof(sockaddr_in);
  if (a.u.sa.sa_family == AF_INET6) return a.len == sizeof(sockaddr_in6);
  return false;
}

class SocketTransport final : public Transport {
 public:
  const char *name() const override { return "socket"; }

  flagcxResult_t connectAll(Bootstrap &bs, const std::vector<int> &peers, int nchannels,
                            std::vector<std::unique_ptr<Conn>> *out) override {
    out->clear();
    if (peers.empty()) return flagcxSuccess;  // nothing collective happens here
    const int me = bs.rank();
    if (nchannels < 1 || nchannels > 64) {
      WARN(kNet, "socket connectAll: %d channels requested (1..64 supported)", nchannels);
      return flagcxInvalidArgument;
    }
    for (int p : peers) {
      if (p < 0 || p >= bs.nranks() || p == me) {
        WARN(kNet, "socket connectAll: rank %d cannot connect to peer %d (nranks %d)", me, p,
             bs.nranks());
        return flagcxInvalidArgument;
      }
    }
    const LanePlan plan = planLanes(bs);
    const int myLanes = plan.lanes;
    auto deadline = deadlineFromTimeout();

    // 1. Listen and tell each peer where.
    SockAddr addr;
    std::string ifname;
    FLAGCX_CHECK(findLocalAddress(&addr, &ifname));
    addr.setPort(0);
    int lfdRaw = -1;
    FLAGCX_CHECK(listenOn(&addr, &lfdRaw));
    Fd lfd(lfdRaw);
    AddrMsg mine{};
    mine.magic = kAddrMagic;
    mine.addr = addr;
    mine.lanes = myLanes;
    mine.nchannels = nchannels;
    for (int p : peers) FLAGCX_CHECK(bs.send(p, kTagAddr, &mine, sizeof mine));
    std::vector<AddrMsg> theirs(peers.size());
    int lanes = myLanes;
    for (size_t i = 0; i < peers.size(); i++) {
      AddrMsg &m = theirs[i];
      FLAGCX_CHECK(bs.recv(peers[i], kTagAddr, &m, sizeof m));
      if (m.magic != kAddrMagic || !addrValid(m.addr) || m.nchannels != nchannels ||
          m.lanes < 1 || m.lanes > kMaxLanes) {
        WARN(kNet, "socket connectAll: rank %d got a bad address record from peer %d (channels %d, lanes %d)",
             me, peers[i], m.nchannels, m.lanes);
        return flagcxInvalidUsage;
      }
    }
    // Lanes per Conn must agree on both ends; the smallest offer wins per
    // pair (so a rank with a different setting still connects).
    std::vector<int> pairLanes(peers.size());
    for (size_t i = 0; i < peers.size(); i++) pairLanes[i] = std::min(lanes, theirs[i].lanes);
    INFO(kNet, "socket: rank %d listening on %s (%s), %d lane(s) per connection, helper threads %s (%d core(s) per rank here)",
         me, addr.str().c_str(), ifname.c_str(), myLanes, plan.helpers ? "on" : "off",
         plan.coresPerRank);
    {
      std::lock_guard<std::mutex> lk(g_hookMu);
      if (g_listenHook) g_listenHook(addr);
    }

    // fds[i][c * lanes + l]
    std::vector<std::vector<Fd>> fds(peers.size());
    for (size_t i = 0; i < peers.size(); i++)
      fds[i].resize(static_cast<size_t>(nchannels * pairLanes[i]));

    // 2. Connect to higher peers.
    for (size_t i = 0; i < peers.size(); i++) {
      if (peers[i] < me) continue;
      for (size_t k = 0; k < fds[i].size(); k++) {
        int fd = -1;
        flagcxResult_t rc = connectTo(theirs[i].addr, deadline, &fd);
        if (rc != flagcxSuccess) {
          WARN(kNet, "socket connectAll: rank %d cannot connect to peer %d (%s) at %s", me,
               peers[i], hostOf(bs, peers[i]), theirs[i].addr.str().c_str());
          return rc;
        }
        fds[i][k] = Fd(fd);
        Hello h{kHelloMagic, kHelloKindTransport, me, static_cast<int32_t>(k), bs.nranks()};
        rc = clientHandshake(fd, bs.secret(), h, deadline);
        if (rc != flagcxSuccess) {
          WARN(kNet, "socket connectAll: rank %d: handshake with peer %d (%s) at %s failed", me,
               peers[i], hostOf(bs, peers[i]), theirs[i].addr.str().c_str());
          return rc;
        }
      }
    }

    // 3. Accept from lower peers.
    FLAGCX_CHECK(acceptLower(bs, peers, pairLanes, nchannels, lfd.get(), deadline, &fds));
    lfd.reset();

    for (size_t i = 0; i < peers.size(); i++) {
      for (int c = 0; c < nchannels; c++) {
        PeerDesc d;
        d.self = me;
        d.peer = peers[i];
        d.channel = c;
        d.host = hostOf(bs, peers[i]);
        std::vector<std::unique_ptr<Pipe>> pipes;
        for (int l = 0; l < pairLanes[i]; l++) {
          Fd &fd = fds[i][static_cast<size_t>(c * pairLanes[i] + l)];
          // With helpers the socket blocks: the engine thread's calls pass
          // MSG_DONTWAIT, the helpers' calls wait in the kernel.
          setNonBlocking(fd.get(), !plan.helpers);
          setNoDelay(fd.get());
          pipes.push_back(
              std::make_unique<SocketPipe>(d, l, std::move(fd), theirs[i].addr, plan.helpers));
        }
        out->push_back(std::make_unique<FramedConn>("socket", d, std::move(pipes), reduce_));
      }
    }
    INFO(kNet, "socket: rank %d connected to %zu peer(s), %d channel(s)", me, peers.size(),
         nchannels);
    return flagcxSuccess;
  }

 private:
  static const char *hostOf(Bootstrap &bs, int rank) {
    if (rank >= 0 && static_cast<size_t>(rank) < bs.peers().size()) return bs.peers()[rank].host;
    return "?";
  }

  flagcxResult_t acceptLower(Bootstrap &bs, const std::vector<int> &peers,
                             const std::vector<int> &pairLanes, int nchannels, int lfd,
                             Clock::time_point deadline, std::vector<std::vector<Fd>> *fds) {
    const int me = bs.rank();
    size_t missing = 0;
    for (size_t i = 0; i < peers.size(); i++)
      if (peers[i] < me) missing += static_cast<size_t>(nchannels * pairLanes[i]);
    HandshakeQueue queue(lfd, bs.secret(), kHelloKindTransport);
    while (missing > 0) {
      HandshakeQueue::Accepted a;
      FLAGCX_CHECK(queue.next(deadline, &a));
      const Hello &h = a.hello;
      if (a.fd < 0) {  // the deadline
        std::string who;
        for (size_t i = 0; i < peers.size(); i++) {
          if (peers[i] >= me) continue;
          size_t have = 0;
          for (auto &f : (*fds)[i]) have += f.get() >= 0;
          if (have < (*fds)[i].size())
            who += " " + std::to_string(peers[i]) + "(" + hostOf(bs, peers[i]) + ", " +
                   std::to_string(have) + "/" + std::to_string((*fds)[i].size()) + ")";
        }
        WARN(kNet, "socket connectAll: rank %d timed out (FLAGCX_TIMEOUT) waiting for connections from rank(s):%s",
             me, who.c_str());
        return flagcxRemoteError;
      }
      Fd fd(a.fd);
      size_t i = std::find(peers.begin(), peers.end(), h.rank) - peers.begin();
      if (h.nranks != bs.nranks() || i == peers.size() || h.rank >= me || h.channel < 0 ||
          static_cast<size_t>(h.channel) >= (*fds)[i].size() ||
          (*fds)[i][static_cast<size_t>(h.channel)].get() >= 0) {
        WARN(kNet, "socket rank %d: rejected an authenticated connection from %s claiming rank %d channel %d (nranks %d): not expected",
             me, a.peer.c_str(), h.rank, h.channel, h.nranks);
        continue;  // fd closes here
      }
      (*fds)[i][static_cast<size_t>(h.channel)] = std::move(fd);
      missing--;
    }
    return flagcxSuccess;
  }
};

}  // namespace

void socketTransportSetListenHook(std::function<void(const SockAddr &)> hook) {
  std::lock_guard<std::mutex> lk(g_hookMu);
  g_listenHook = std::move(hook);
}

std::unique_ptr<Transport> makeSocketTransport() { return std::make_unique<SocketTransport>(); }

}  // namespace flagcx
