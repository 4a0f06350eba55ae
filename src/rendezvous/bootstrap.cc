// The bootstrap network (bootstrap.h): joining at the root, each rank's
// listener for its peers' connections, and the tagged messages over them.
#include "rendezvous/bootstrap.h"

#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <thread>

#include "base/base.h"
#include "rendezvous/bootstrap_root.h"
#include "rendezvous/uniqueid.h"

namespace flagcx {

namespace {

constexpr uint32_t kHelloKindPeer = 2;
// Bounds on what an authenticated peer can make this rank hold.  Every
// message of the library's set-up is at most a few KiB per rank (addresses,
// IPC handles, votes); a receive that matches its tag reads straight into
// the caller's buffer and must have the caller's size.  Only messages that
// arrive before their receive are kept, within these caps per peer.
constexpr uint64_t kMaxMessage = 16u << 20;
constexpr uint64_t kMaxEarlyBytes = 64u << 20;
constexpr size_t kMaxEarlyMessages = 4096;

// What the log calls the secret of a communicator made from `id`.
const char *secretNameOf(const DecodedId &id) {
  return id.fromEnv ? "the secret of FLAGCX_COMM_ID (FLAGCX_COMM_SECRET)" : "the unique id's secret";
}

}  // namespace

struct Bootstrap::Impl {
  int listenFd = -1;
  std::vector<int> out;  // connections we opened, for sending
  std::vector<int> in;   // connections peers opened, for receiving
  struct Msg {
    uint32_t space, tag;
    std::vector<char> data;
  };
  std::vector<std::deque<Msg>> unexpected;  // per peer: arrived before their recv
  std::vector<uint64_t> unexpectedBytes;
  // Per peer: one sender, and one reader of its connection and queue, at a
  // time (views over these connections may be used from several threads).
  std::unique_ptr<std::mutex[]> sendMu, recvMu;
  std::mutex mu;
  std::atomic<bool> stop{false};
  WakeFd stopping;  // signalled with `stop`: the acceptor leaves at once
  std::thread acceptor;
  Secret secret{};
  const char *secretName = "";
  int rank = 0, nranks = 0;

  // Peers connect whenever they first send to us, so a send never waits
  // for the receiver to call recv.  One thread runs every handshake side by
  // side (HandshakeQueue: bounded in number and time, no thread or buffer
  // per connection); strangers are dropped and logged, and so is an
  // authenticated connection no slot is free for.
  void acceptLoop() {
    HandshakeQueue queue(listenFd, secret, kHelloKindPeer, secretName);
    while (!stop.load()) {
      HandshakeQueue::Accepted a;
      if (queue.next(Clock::time_point::max(), &a, stopping.fd()) != flagcxSuccess) return;
      if (a.fd >= 0) registerPeer(a);
    }
  }
  void registerPeer(const HandshakeQueue::Accepted &a) {
    const Hello &h = a.hello;
    std::lock_guard<std::mutex> lk(mu);
    bool fits = h.nranks == nranks && h.rank >= 0 && h.rank < nranks && h.rank != rank;
    if (!fits || in[static_cast<size_t>(h.rank)] >= 0) {
      WARN(kBootstrap, "rank %d: bootstrap refused %s claiming rank %d of %d: %s", rank,
           a.peer.c_str(), h.rank, h.nranks, fits ? "that rank is connected already" : "no such peer");
      close(a.fd);
      return;
    }
    in[static_cast<size_t>(h.rank)] = a.fd;
  }

  ~Impl() {
    stop = true;
    stopping.signal();
    if (acceptor.joinable()) acceptor.join();
    for (int fd : out)
      if (fd >= 0) close(fd);
    for (int fd : in)
      if (fd >= 0) close(fd);
    if (listenFd >= 0) close(listenFd);
  }
};

struct MsgHeader {
  uint32_t tag;
  uint32_t space;  // the bootstrap (view) it belongs to; 0: the one made by create
  uint64_t size;
};

Bootstrap::~Bootstrap() = default;

namespace {

// The root's table comes from ranks that proved the secret; still, what is
// used as a C string or an address is made safe to use.
bool usablePeer(PeerInfo *p) {
  p->host[sizeof p->host - 1] = '\0';
  int fam = p->bootAddr.u.sa.sa_family;
  uint32_t want = fam == AF_INET ? sizeof(sockaddr_in) : fam == AF_INET6 ? sizeof(sockaddr_in6) : 0;
  return want != 0 && p->bootAddr.len == want && p->bootAddr.port() != 0;
}

// Joins the communicator at its root: proves the secret, sends this rank's
// PeerInfo, and reads every rank's.
flagcxResult_t joinRoot(const DecodedId &did, int rank, int nranks, const PeerInfo &self,
                        std::vector<PeerInfo> *peers) {
  auto deadline = deadlineFromTimeout();
  int rootFd = -1;
  if (connectTo(did.root, deadline, &rootFd) != flagcxSuccess) {
    WARN(kBootstrap, "rank %d cannot reach the bootstrap root %s", rank, did.root.str().c_str());
    return flagcxRemoteError;
  }
  Hello h{kHelloMagic, kHelloKindRoot, rank, 0, nranks};
  flagcxResult_t res = clientHandshake(rootFd, did.secret, h, deadline);
  if (res != flagcxSuccess && did.fromEnv)
    WARN(kBootstrap, "rank %d: the bootstrap root %s refused this rank's proof: every rank of a "
         "FLAGCX_COMM_ID job needs the same FLAGCX_COMM_SECRET", rank, did.root.str().c_str());
  if (res == flagcxSuccess) res = sendAll(rootFd, &self, sizeof(self), deadline);
  RootReply reply{};
  // The root answers once all ranks arrived, or after its own timeout; allow
  // a little longer so its explanation reaches us.
  if (res == flagcxSuccess)
    res = recvAll(rootFd, &reply, sizeof(reply), deadline + std::chrono::seconds(3));
  if (res != flagcxSuccess) {
    close(rootFd);
    WARN(kBootstrap, "rank %d: the bootstrap root %s did not answer (timeout or root gone)", rank,
         did.root.str().c_str());
    return flagcxRemoteError;
  }
  if (reply.status != 0) {
    close(rootFd);
    reply.text[sizeof(reply.text) - 1] = '\0';
    WARN(kBootstrap, "rank %d: bootstrap failed: %s", rank, reply.text);
    return flagcxRemoteError;
  }
  peers->resize(static_cast<size_t>(nranks));
  res = recvAll(rootFd, peers->data(), peers->size() * sizeof(PeerInfo), deadline);
  close(rootFd);
  if (res != flagcxSuccess) {
    WARN(kBootstrap, "rank %d: lost the bootstrap root while reading the rank table", rank);
    return flagcxRemoteError;
  }
  for (size_t r = 0; r < peers->size(); r++) {
    if (!usablePeer(&(*peers)[r])) {
      WARN(kBootstrap, "rank %d: the bootstrap root's table has no usable address for rank %zu",
           rank, r);
      return flagcxRemoteError;
    }
  }
  return flagcxSuccess;
}

}  // namespace

flagcxResult_t Bootstrap::create(const flagcxUniqueId &id, int rank, int nranks,
                                 const PeerInfo &selfIn, std::unique_ptr<Bootstrap> *out) {
  DecodedId did;
  FLAGCX_CHECK(decodeUniqueId(id, &did));
  if (did.fromEnv && rank == 0) {
    // FLAGCX_COMM_ID: rank 0 runs the root at the named address.
    if (!did.keyed)
      WARN(kBootstrap, "FLAGCX_COMM_ID=%s without FLAGCX_COMM_SECRET: this job's key comes from "
           "the address alone, so anyone who can reach %s can join it as a rank; set "
           "FLAGCX_COMM_SECRET (or FLAGCX_COMM_SECRET_FILE) to one random value on every rank",
           did.root.str().c_str(), did.root.str().c_str());
    SockAddr a = did.root;
    if (startBootstrapRoot(&a, did.secret, secretNameOf(did)) != flagcxSuccess) {
      WARN(kBootstrap, "rank 0 cannot start the bootstrap root at FLAGCX_COMM_ID=%s",
           did.root.str().c_str());
      return flagcxSystemError;
    }
  }
  std::unique_ptr<Bootstrap> bs(new Bootstrap());
  bs->impl_ = std::make_shared<Impl>();
  Impl &im = *bs->impl_;
  bs->rank_ = rank;
  bs->nranks_ = nranks;
  for (int r = 0; r < nranks; r++) bs->map_.push_back(r);
  im.sendMu = std::make_unique<std::mutex[]>(static_cast<size_t>(nranks));
  im.recvMu = std::make_unique<std::mutex[]>(static_cast<size_t>(nranks));
  bs->secret_ = did.secret;
  im.secret = did.secret;
  im.secretName = secretNameOf(did);
  im.rank = rank;
  im.nranks = nranks;
  im.out.assign(static_cast<size_t>(nranks), -1);
  im.in.assign(static_cast<size_t>(nranks), -1);
  im.unexpected.resize(static_cast<size_t>(nranks));
  im.unexpectedBytes.assign(static_cast<size_t>(nranks), 0);

  PeerInfo self = selfIn;
  // Listen on the same family as the root so every rank can reach us.
  SockAddr local;
  std::string ifname;
  FLAGCX_CHECK(findLocalAddress(&local, &ifname));
  FLAGCX_CHECK(listenOn(&local, &im.listenFd));
  self.bootAddr = local;
  INFO(kBootstrap | kInit, "rank %d bootstrap listens on %s (%s)", rank, local.str().c_str(),
       ifname.c_str());
  // Peers connect once they have the table, which may be before this rank
  // reads its own copy.
  im.acceptor = std::thread([&im] { im.acceptLoop(); });
  FLAGCX_CHECK(joinRoot(did, rank, nranks, self, &bs->peers_));
  *out = std::move(bs);
  return flagcxSuccess;
}

std::unique_ptr<Bootstrap> Bootstrap::view(const std::vector<int> &members, uint32_t childNo) const {
  std::unique_ptr<Bootstrap> v(new Bootstrap());
  v->impl_ = impl_;
  v->secret_ = secret_;
  v->nranks_ = static_cast<int>(members.size());
  for (int m : members) {
    if (m == rank_) v->rank_ = static_cast<int>(v->map_.size());
    v->map_.push_back(map_[static_cast<size_t>(m)]);
    v->peers_.push_back(peers_[static_cast<size_t>(m)]);
  }
  // FNV-1a of the parent's space and the child's number; never 0 (create's).
  uint64_t h = 1469598103934665603ull;
  for (uint32_t x : {space_, childNo}) h = (h ^ x) * 1099511628211ull;
  v->space_ = static_cast<uint32_t>(h ^ (h >> 32)) | 1u;
  return v;
}

flagcxResult_t Bootstrap::send(int peerIn, uint32_t tag, const void *data, size_t size) {
  Impl &im = *impl_;
  if (aborted_) return flagcxRemoteError;
  const int peer = map_[static_cast<size_t>(peerIn)];
  auto deadline = deadlineFromTimeout();
  std::lock_guard<std::mutex> lk(im.sendMu[static_cast<size_t>(peer)]);
  int &fd = im.out[static_cast<size_t>(peer)];
  if (fd < 0) {
    const PeerInfo &pi = peers_[static_cast<size_t>(peerIn)];
    if (connectTo(pi.bootAddr, deadline, &fd) != flagcxSuccess) {
      WARN(kBootstrap, "rank %d cannot connect to rank %d (%s) at %s", rank_, peer, pi.host,
           pi.bootAddr.str().c_str());
      fd = -1;
      return flagcxRemoteError;
    }
    Hello h{kHelloMagic, kHelloKindPeer, map_[static_cast<size_t>(rank_)], 0, im.nranks};
    if (clientHandshake(fd, secret_, h, deadline) != flagcxSuccess) {
      close(fd);
      fd = -1;
      return flagcxRemoteError;
    }
  }
  MsgHeader mh{tag, space_, size};
  flagcxResult_t res = sendAll(fd, &mh, sizeof(mh), deadline);
  if (res == flagcxSuccess && size) res = sendAll(fd, data, size, deadline);
  if (res != flagcxSuccess)
    WARN(kBootstrap, "rank %d: bootstrap send to rank %d (%s) failed (peer gone or timeout)",
         rank_, peerIn, peers_[static_cast<size_t>(peerIn)].host);
  return res;
}

// Waits in slices, the connection's lock released in between, so that
// views sharing the connection each find their messages.
flagcxResult_t Bootstrap::recv(int peer, uint32_t tag, void *data, size_t size) {
  auto deadline = deadlineFromTimeout();
  Backoff wait;
  while (true) {
    bool got = false;
    int fd = -1;
    FLAGCX_CHECK(tryRecv(peer, tag, data, size, deadline, &got, &fd));
    if (got) return flagcxSuccess;
    if (aborted_) return flagcxRemoteError;
    if (Clock::now() >= deadline) {
      const PeerInfo &pi = peers_[static_cast<size_t>(peer)];
      if (fd < 0)
        WARN(kBootstrap, "rank %d: rank %d (%s) never connected within FLAGCX_TIMEOUT", rank_,
             peer, pi.host);
      else
        WARN(kBootstrap, "rank %d: bootstrap receive from rank %d (%s) failed: peer gone or "
             "FLAGCX_TIMEOUT expired", rank_, peer, pi.host);
      return flagcxRemoteError;
    }
    if (fd < 0) {
      wait.idle();
      continue;
    }
    pollfd pf{fd, POLLIN, 0};
    poll(&pf, 1, 50);
  }
}

flagcxResult_t Bootstrap::tryRecv(int peerIn, uint32_t tag, void *data, size_t size,
                                  Clock::time_point deadline, bool *got, int *fdOut) {
  Impl &im = *impl_;
  const int peer = map_[static_cast<size_t>(peerIn)];
  const PeerInfo &pi = peers_[static_cast<size_t>(peerIn)];
  auto deliver = [&](std::vector<char> &bytes) -> flagcxResult_t {
    if (bytes.size() != size) {
      WARN(kBootstrap, "rank %d: bootstrap message from rank %d tag %u has %zu bytes, expected %zu",
           rank_, peerIn, tag, bytes.size(), size);
      return flagcxInternalError;
    }
    if (size) memcpy(data, bytes.data(), size);
    return flagcxSuccess;
  };
  std::lock_guard<std::mutex> reading(im.recvMu[static_cast<size_t>(peer)]);
  auto &q = im.unexpected[static_cast<size_t>(peer)];
  uint64_t &held = im.unexpectedBytes[static_cast<size_t>(peer)];
  for (auto it = q.begin(); it != q.end(); ++it) {
    if (it->space == space_ && it->tag == tag) {
      flagcxResult_t r = deliver(it->data);
      held -= it->data.size();
      q.erase(it);
      *got = true;
      return r;
    }
  }
  int fd;
  {
    std::lock_guard<std::mutex> lk(im.mu);
    fd = im.in[static_cast<size_t>(peer)];
  }
  *fdOut = fd;
  while (fd >= 0 && !aborted_) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, 0) <= 0) return flagcxSuccess;  // nothing to read now
    MsgHeader mh{};
    if (recvAll(fd, &mh, sizeof(mh), deadline) != flagcxSuccess) {
      WARN(kBootstrap, "rank %d: bootstrap receive from rank %d (%s) failed: peer gone or "
           "FLAGCX_TIMEOUT expired", rank_, peerIn, pi.host);
      return flagcxRemoteError;
    }
    // The header is checked before anything is allocated for its payload.
    const bool mine = mh.tag == tag && mh.space == space_;
    const char *bad = mine ? (mh.size != size ? "not the size of the receive for its tag" : nullptr)
                      : mh.size > kMaxMessage ? "larger than any set-up message"
                      : q.size() >= kMaxEarlyMessages || held + mh.size > kMaxEarlyBytes
                          ? "beyond what may wait for its receive"
                          : nullptr;
    if (bad) {
      WARN(kBootstrap, "rank %d: bootstrap message from rank %d (%s) with tag %u and %llu bytes "
           "is %s (waiting for tag %u, %zu bytes; %zu message(s), %llu bytes held)", rank_, peerIn,
           pi.host, mh.tag, static_cast<unsigned long long>(mh.size), bad, tag, size, q.size(),
           static_cast<unsigned long long>(held));
      shutdown(fd, SHUT_RDWR);  // its payload is not read: nothing after it can be
      return mine ? flagcxInternalError : flagcxRemoteError;
    }
    void *dst = data;
    if (!mine) {
      q.push_back({mh.space, mh.tag, std::vector<char>(mh.size)});
      held += mh.size;
      dst = q.back().data.data();
    }
    if (mh.size && recvAll(fd, dst, mh.size, deadline) != flagcxSuccess) {
      WARN(kBootstrap, "rank %d: bootstrap receive from rank %d (%s) broke off", rank_, peerIn,
           pi.host);
      return flagcxRemoteError;
    }
    if (mine) {
      *got = true;
      return flagcxSuccess;
    }
  }
  return flagcxSuccess;
}

flagcxResult_t Bootstrap::allgather(void *data, size_t size) {
  char *base = static_cast<char *>(data);
  int right = (rank_ + 1) % nranks_, left = (rank_ - 1 + nranks_) % nranks_;
  // Ring: in step s, pass on the slot received in step s-1.
  for (int s = 0; s < nranks_ - 1; s++) {
    int sendSlot = (rank_ - s + nranks_) % nranks_;
    int recvSlot = (rank_ - s - 1 + nranks_) % nranks_;
    FLAGCX_CHECK(send(right, 0x7f000000u + static_cast<uint32_t>(s), base + sendSlot * size, size));
    FLAGCX_CHECK(recv(left, 0x7f000000u + static_cast<uint32_t>(s), base + recvSlot * size, size));
  }
  return flagcxSuccess;
}

flagcxResult_t Bootstrap::bcast(void *data, size_t size, int root) {
  if (rank_ == root) {
    for (int p = 0; p < nranks_; p++)
      if (p != root) FLAGCX_CHECK(send(p, 0x7e000000u, data, size));
    return flagcxSuccess;
  }
  return recv(root, 0x7e000000u, data, size);
}

flagcxResult_t Bootstrap::barrier() {
  std::vector<char> slots(static_cast<size_t>(nranks_));
  return allgather(slots.data(), 1);
}

void Bootstrap::abort() {
  Impl &im = *impl_;
  aborted_ = true;
  // Connections a view still uses stay open: only this bootstrap's calls end.
  if (impl_.use_count() > 1) return;
  for (int fd : im.out)
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
  for (int fd : im.in)
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

int coresPerLocalRank(const Bootstrap &bs) {
  int local = 0;
  const uint64_t mine = bs.peers()[static_cast<size_t>(bs.rank())].hostHash;
  for (const PeerInfo &p : bs.peers()) local += p.hostHash == mine;
  cpu_set_t set;
  CPU_ZERO(&set);
  int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                          : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return std::max(1, cores) / std::max(1, local);
}

}  // namespace flagcx
