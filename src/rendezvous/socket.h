// TCP helpers shared by the bootstrap and the socket transport: addresses,
// interface choice (FLAGCX_SOCKET_IFNAME / FLAGCX_SOCKET_FAMILY), sockets with
// deadlines, and the authenticated handshake (a keyed MAC of a fresh nonce,
// never the secret itself, proves a peer holds the unique id's secret).
#pragma once
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flagcx.h"

namespace flagcx {

using Secret = std::array<uint8_t, 16>;
using Clock = std::chrono::steady_clock;

// A socket address that fits IPv4 and IPv6 and can be copied bytewise.
struct SockAddr {
  union {
    sockaddr sa;
    sockaddr_in in4;
    sockaddr_in6 in6;
  } u;
  uint32_t len = 0;
  SockAddr() { u.in6 = {}; }
  std::string str() const;  // "[addr]:port" or "addr:port"
  int port() const;
  void setPort(int port);
};

// "addr:port" of the other end of a connected socket, "?" when unknown.
std::string peerOf(int fd);

// Log lines a stranger can cause (rejected handshakes, failing accepts) are
// rationed, so that a flood of connections cannot flood the log: a burst of
// 20, then one a second, process-wide.  allow() says whether this line may
// be written and, when it may, how many were left out since the last one.
bool strangerLogAllowed(uint64_t *skipped);

// Parse "host:port", "[v6]:port" or "v6addr:port" (numeric or resolvable name).
bool parseHostPort(const std::string &s, SockAddr *out);
// Does interface `name` match the FLAGCX_SOCKET_IFNAME-style filter?
bool ifnameMatches(const std::string &filter, const std::string &name);
// Pick this host's address for listening: honours FLAGCX_SOCKET_IFNAME and
// FLAGCX_SOCKET_FAMILY; prefers non-loopback, falls back to loopback.
flagcxResult_t findLocalAddress(SockAddr *out, std::string *ifname);

// 64-bit SipHash-2-4 keyed by the secret, for connection proofs.
uint64_t macOf(const Secret &key, const void *data, size_t len);
// Random bytes from the kernel.
void randomBytes(void *buf, size_t len);

Clock::time_point deadlineFromTimeout();  // now + FLAGCX_TIMEOUT

// Listening socket bound to addr (port 0 = any; addr updated with the port).
flagcxResult_t listenOn(SockAddr *addr, int *fd);
// Connect with retries until the deadline (the peer may not listen yet).
flagcxResult_t connectTo(const SockAddr &addr, Clock::time_point deadline, int *fd);
// Accept one connection, waiting until the deadline; *fd = -1 on timeout.
// With wakeFd >= 0 it also returns (*fd = -1) as soon as wakeFd is readable,
// so a thread that accepts in slices can be told to look again at once
// instead of at the end of its slice (WakeFd below).  A process out of
// descriptors (EMFILE, ENFILE) or kernel buffers also gets *fd = -1, after
// a pause of 10 ms and a warning at most once a second: the listener
// outlives the moment, instead of its thread failing for good.
flagcxResult_t acceptOne(int listenFd, Clock::time_point deadline, int *fd, int wakeFd = -1);

// An eventfd that one thread signals to cut another's wait short: a
// bootstrap or P2P engine when it stops.  Waiting out an accept slice
// instead cost every communicator's destroy about 100 ms.
class WakeFd {
 public:
  WakeFd();
  ~WakeFd();
  WakeFd(const WakeFd &) = delete;
  WakeFd &operator=(const WakeFd &) = delete;
  int fd() const { return fd_; }
  void signal();  // readable from now until drain()
  void drain();

 private:
  int fd_;
};
// Exact-length I/O with a deadline; flagcxRemoteError when the peer closes.
flagcxResult_t sendAll(int fd, const void *buf, size_t len, Clock::time_point deadline);
flagcxResult_t recvAll(int fd, void *buf, size_t len, Clock::time_point deadline);
void setNoDelay(int fd);
void setNonBlocking(int fd, bool on);

// Handshake (handshake.cc).  The connecting side sends its hello (magic,
// kind, rank, channel); the accepting side answers with a nonce; the
// connector returns MAC(secret, nonce || hello) and gets one byte 1 back.
// A wrong proof closes the connection.
struct Hello {
  uint64_t magic;
  uint32_t kind;     // 1 bootstrap-root, 2 bootstrap-peer, 3 socket-transport
  int32_t rank;
  int32_t channel;
  int32_t nranks;
};
flagcxResult_t clientHandshake(int fd, const Secret &secret, const Hello &hello,
                               Clock::time_point deadline);

// The accepting side of the handshake as a state machine, for accept loops
// that hold many connections at once: step() moves what the socket allows
// now and never blocks, so a client that stops half-way holds up nobody.
// With trailerLen > 0 the connector's first trailerLen bytes after the
// handshake (a fixed-size record the listener expects, e.g. the bootstrap
// root's PeerInfo) are read too before step() reports success.
class ServerHandshake {
 public:
  // secretName: what the log calls the secret (the P2P engine's is
  // FLAGCX_P2P_SECRET, the communicator's comes with the unique id).
  ServerHandshake(int fd, const Secret &secret, uint32_t expectKind,
                  const char *secretName = "the unique id's secret", size_t trailerLen = 0);
  // flagcxInProgress: call again once poll() reports events() on the fd;
  // flagcxSuccess: hello() is authenticated; else rejected (logged), close
  // the fd.
  flagcxResult_t step();
  short events() const;
  const Hello &hello() const { return hello_; }
  const std::vector<uint8_t> &trailer() const { return trailer_; }
  // The client's address, taken when the connection was accepted (so a log
  // line names it even after the client reset the connection).
  const std::string &peer() const { return peer_; }
  // How far the client got: 0 nothing read yet, higher is further.
  int progress() const;
  // The client stopped before it was through (the caller's deadline): log
  // it as step() logs a rejection.
  void giveUp() const;

 private:
  enum class Phase { Hello, Nonce, Mac, Ok, Trailer, Done };
  flagcxResult_t reject(const char *why) const;
  flagcxResult_t rejectProof(const char *how) const;  // "it did not prove <secret><how>"
  flagcxResult_t advance();                           // the current phase is complete
  int fd_;
  const Secret &secret_;
  uint32_t kind_;
  const char *secretName_;
  std::string peer_;
  Phase phase_ = Phase::Hello;
  size_t done_ = 0;  // bytes of the current phase moved
  Hello hello_{};
  uint8_t nonce_[16] = {};
  uint64_t mac_ = 0;
  std::vector<uint8_t> trailer_;  // sized by the listener, never by the client
};

// Accepted connections whose ServerHandshakes run side by side, for the
// listeners that serve many clients from one thread (the bootstrap root and
// each rank's bootstrap listener, the socket transport's connectAll, the P2P
// engine's accept): each handshake moves as far as its socket allows, so a
// stranger that connects and goes quiet, or stops part-way, delays no real
// peer, and no thread or buffer is made per connection.  One not through
// after 10 s (whatever FLAGCX_TIMEOUT says) is logged and dropped; at most
// 64 wait: a 65th drops the one that got least far, oldest first, so a
// flood of silent connections cannot push out a client half-way through.
// Those still under way when next() returns wait for the next call.  The
// listener and the secret belong to the caller and must outlive the queue.
class HandshakeQueue {
 public:
  // trailerLen: see ServerHandshake.
  HandshakeQueue(int listenFd, const Secret &secret, uint32_t expectKind,
                 const char *secretName = "the unique id's secret", size_t trailerLen = 0);
  ~HandshakeQueue();  // closes the connections still under way
  HandshakeQueue(const HandshakeQueue &) = delete;
  HandshakeQueue &operator=(const HandshakeQueue &) = delete;
  // A connection whose handshake proved the secret.
  struct Accepted {
    int fd = -1;                   // the caller owns it; -1: none (see next)
    Hello hello{};
    std::string peer;              // its address, for log lines
    std::vector<uint8_t> trailer;  // trailerLen bytes
  };
  // The next accepted connection.  out->fd = -1 once `until` has passed or,
  // with wakeFd >= 0, as soon as wakeFd is readable.  An error only when
  // poll fails (logged).
  flagcxResult_t next(Clock::time_point until, Accepted *out, int wakeFd = -1);
  // The same, for callers that need only the fd and the hello.
  flagcxResult_t next(Clock::time_point until, int *fd, Hello *hello, int wakeFd = -1);
  size_t waiting() const { return waiting_.size(); }

 private:
  struct Waiting;
  void drop(size_t i, bool log);
  void admit(int fd);
  int listenFd_;
  const Secret &secret_;
  uint32_t kind_;
  const char *secretName_;
  size_t trailerLen_;
  std::vector<std::unique_ptr<Waiting>> waiting_;
  // The poll set, its room reserved at construction: an idle listener's
  // thread allocates nothing, so a program may fork while it runs (a child
  // inherits no allocator lock held by it).
  std::vector<pollfd> pf_;
};

constexpr uint64_t kHelloMagic = 0x464c414743584831ull;  // "FLAGCXH1"

}  // namespace flagcx
