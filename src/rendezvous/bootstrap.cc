#include "rendezvous/bootstrap.h"

#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <set>
#include <map>
#include <thread>

#include "base/backoff.h"
#include "base/log.h"
#include "base/params.h"
#include "rendezvous/uniqueid.h"

namespace flagcx {

namespace {

struct RootReply {
  uint32_t status;  // 0 ok, 1 failed (text follows)
  char text[252];
};

// Authenticates accepted connections, each on its own short-lived thread, so
// that a silent or hostile client can neither hold up the real ranks nor
// delay a shutdown: stop() cuts every handshake still in progress.
class Authenticator {
 public:
  // `onHello` runs on the handshake thread after the proof checked out; it
  // owns fd from then on.
  using OnHello = std::function<void(int fd, const Hello &h)>;
  Authenticator(const Secret &secret, uint32_t kind, OnHello onHello)
      : secret_(secret), kind_(kind), onHello_(std::move(onHello)) {}
  ~Authenticator() { stop(); }
  void add(int fd) {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopped_) {
      close(fd);
      return;
    }
    active_.insert(fd);
    threads_.emplace_back([this, fd] {
      Hello h{};
      bool ok = serverHandshake(fd, secret_, kind_, &h, deadlineFromTimeout()) == flagcxSuccess;
      {
        std::lock_guard<std::mutex> lk2(mu_);
        active_.erase(fd);
        if (stopped_) ok = false;
      }
      if (ok) onHello_(fd, h);
      else close(fd);
    });
  }
  void stop() {
    std::vector<std::thread> ts;
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopped_ = true;
      for (int fd : active_) shutdown(fd, SHUT_RDWR);
      ts.swap(threads_);
    }
    for (auto &t : ts) t.join();
  }

 private:
  Secret secret_;
  uint32_t kind_;
  OnHello onHello_;
  std::mutex mu_;
  std::set<int> active_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

// The rendezvous server: started by flagcxGetUniqueId (or by rank 0 when the
// id comes from FLAGCX_COMM_ID); serves one communicator, then exits.
void rootMain(int listenFd, Secret secret) {
  std::mutex mu;
  std::map<int, int> fds;  // rank -> fd
  std::vector<PeerInfo> infos;
  int nranks = -1;
  bool started = false;
  Clock::time_point deadline = Clock::time_point::max();
  WakeFd helloSeen;
  auto reject = [](int fd, const char *fmt, int a, int b, int c) {
    RootReply r{};
    r.status = 1;
    snprintf(r.text, sizeof(r.text), fmt, a, b, c);
    sendAll(fd, &r, sizeof(r), Clock::now() + std::chrono::seconds(2));
    close(fd);
  };
  Authenticator auth(secret, 1, [&](int fd, const Hello &h) {
    PeerInfo pi;
    if (recvAll(fd, &pi, sizeof(pi), Clock::now() + std::chrono::seconds(5)) != flagcxSuccess) {
      close(fd);
      return;
    }
    std::lock_guard<std::mutex> lk(mu);
    if (!started) {
      started = true;
      nranks = h.nranks;
      deadline = deadlineFromTimeout();
      infos.assign(static_cast<size_t>(nranks > 0 ? nranks : 0), PeerInfo());
    }
    if (h.nranks != nranks || h.rank < 0 || h.rank >= nranks || fds.count(h.rank)) {
      WARN(kBootstrap, "bootstrap root: rank %d (nranks %d) conflicts with this communicator "
           "(nranks %d%s)", h.rank, h.nranks, nranks, fds.count(h.rank) ? ", rank taken" : "");
      reject(fd, "rank %d/nranks %d conflicts with the communicator (nranks %d)", h.rank,
             h.nranks, nranks);
      return;
    }
    fds[h.rank] = fd;
    infos[static_cast<size_t>(h.rank)] = pi;
    helloSeen.signal();  // the loop below looks at complete() now
  });
  auto complete = [&] {
    std::lock_guard<std::mutex> lk(mu);
    return nranks >= 0 && static_cast<int>(fds.size()) >= nranks;
  };
  bool timedOut = false;
  while (!complete()) {
    int fd = -1;
    if (acceptOne(listenFd, Clock::now() + std::chrono::milliseconds(100), &fd,
                  helloSeen.fd()) != flagcxSuccess)
      break;
    helloSeen.drain();
    if (fd >= 0) auth.add(fd);
    std::lock_guard<std::mutex> lk(mu);
    if (started && Clock::now() >= deadline) {
      timedOut = true;
      break;
    }
  }
  close(listenFd);
  auth.stop();
  std::lock_guard<std::mutex> lk(mu);
  if (timedOut || static_cast<int>(fds.size()) < nranks) {
    std::string missing;
    for (int r = 0; r < nranks; r++)
      if (!fds.count(r)) missing += (missing.empty() ? "" : ",") + std::to_string(r);
    WARN(kBootstrap, "bootstrap root: rank(s) %s never arrived within FLAGCX_TIMEOUT=%lds",
         missing.c_str(), static_cast<long>(paramInt(Param::TIMEOUT)));
    RootReply r{};
    r.status = 1;
    snprintf(r.text, sizeof(r.text), "rank(s) %s never arrived at the bootstrap root within FLAGCX_TIMEOUT",
             missing.c_str());
    auto dl = Clock::now() + std::chrono::seconds(2);
    for (auto &[rk, fd] : fds) {
      sendAll(fd, &r, sizeof(r), dl);
      close(fd);
    }
    return;
  }
  RootReply ok{};
  auto dl = deadlineFromTimeout();
  for (auto &[rk, fd] : fds) {
    if (sendAll(fd, &ok, sizeof(ok), dl) == flagcxSuccess)
      sendAll(fd, infos.data(), infos.size() * sizeof(PeerInfo), dl);
    close(fd);
  }
}

}  // namespace

flagcxResult_t startBootstrapRoot(SockAddr *addr, const Secret &secret) {
  int fd = -1;
  FLAGCX_CHECK(listenOn(addr, &fd));
  std::thread(rootMain, fd, secret).detach();
  return flagcxSuccess;
}

struct Bootstrap::Impl {
  int listenFd = -1;
  std::vector<int> out;  // connections we opened, for sending
  std::vector<int> in;   // connections peers opened, for receiving
  struct Msg {
    uint32_t tag;
    std::vector<char> data;
  };
  std::vector<std::deque<Msg>> unexpected;
  std::mutex mu;
  std::atomic<bool> aborted{false};
  std::atomic<bool> stop{false};
  WakeFd stopping;  // signalled with `stop`: the acceptor leaves at once
  std::thread acceptor;
  Secret secret{};
  int rank = 0, nranks = 0;

  // Peers connect whenever they first send to us: a small thread accepts
  // them and the authenticator checks each on its own thread, so a send
  // never waits for the receiver to call recv and a stranger cannot stall
  // anyone.  Connections without the secret are dropped (and logged).
  std::unique_ptr<Authenticator> auth;
  void acceptLoop() {
    while (!stop.load()) {
      int fd = -1;
      if (acceptOne(listenFd, Clock::now() + std::chrono::milliseconds(100), &fd,
                    stopping.fd()) != flagcxSuccess)
        return;
      if (fd >= 0) auth->add(fd);
    }
  }
  void registerPeer(int fd, const Hello &h) {
    std::lock_guard<std::mutex> lk(mu);
    if (h.rank < 0 || h.rank >= nranks || in[static_cast<size_t>(h.rank)] >= 0) {
      close(fd);
      return;
    }
    in[static_cast<size_t>(h.rank)] = fd;
  }

  ~Impl() {
    stop = true;
    stopping.signal();
    if (acceptor.joinable()) acceptor.join();
    if (auth) auth->stop();
    for (int fd : out)
      if (fd >= 0) close(fd);
    for (int fd : in)
      if (fd >= 0) close(fd);
    if (listenFd >= 0) close(listenFd);
  }
};

struct MsgHeader {
  uint32_t tag;
  uint32_t pad;
  uint64_t size;
};

Bootstrap::~Bootstrap() = default;

flagcxResult_t Bootstrap::create(const flagcxUniqueId &id, int rank, int nranks,
                                 const PeerInfo &selfIn, std::unique_ptr<Bootstrap> *out) {
  DecodedId did;
  FLAGCX_CHECK(decodeUniqueId(id, &did));
  if (did.fromEnv && rank == 0) {
    // FLAGCX_COMM_ID: rank 0 runs the root at the named address.
    SockAddr a = did.root;
    if (startBootstrapRoot(&a, did.secret) != flagcxSuccess) {
      WARN(kBootstrap, "rank 0 cannot start the bootstrap root at FLAGCX_COMM_ID=%s",
           did.root.str().c_str());
      return flagcxSystemError;
    }
  }
  std::unique_ptr<Bootstrap> bs(new Bootstrap());
  bs->impl_ = std::make_unique<Impl>();
  Impl &im = *bs->impl_;
  bs->rank_ = rank;
  bs->nranks_ = nranks;
  bs->secret_ = did.secret;
  im.secret = did.secret;
  im.rank = rank;
  im.nranks = nranks;
  im.out.assign(static_cast<size_t>(nranks), -1);
  im.in.assign(static_cast<size_t>(nranks), -1);
  im.unexpected.resize(static_cast<size_t>(nranks));

  PeerInfo self = selfIn;
  // Listen on the same family as the root so every rank can reach us.
  SockAddr local;
  std::string ifname;
  FLAGCX_CHECK(findLocalAddress(&local, &ifname));
  FLAGCX_CHECK(listenOn(&local, &im.listenFd));
  self.bootAddr = local;
  INFO(kBootstrap | kInit, "rank %d bootstrap listens on %s (%s)", rank, local.str().c_str(),
       ifname.c_str());

  auto deadline = deadlineFromTimeout();
  int rootFd = -1;
  if (connectTo(did.root, deadline, &rootFd) != flagcxSuccess) {
    WARN(kBootstrap, "rank %d cannot reach the bootstrap root %s", rank, did.root.str().c_str());
    return flagcxRemoteError;
  }
  Hello h{kHelloMagic, 1, rank, 0, nranks};
  flagcxResult_t res = clientHandshake(rootFd, did.secret, h, deadline);
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
  im.auth = std::make_unique<Authenticator>(
      im.secret, 2, [&im](int fd, const Hello &h) { im.registerPeer(fd, h); });
  im.acceptor = std::thread([&im] { im.acceptLoop(); });
  bs->peers_.resize(static_cast<size_t>(nranks));
  res = recvAll(rootFd, bs->peers_.data(), bs->peers_.size() * sizeof(PeerInfo), deadline);
  close(rootFd);
  if (res != flagcxSuccess) {
    WARN(kBootstrap, "rank %d: lost the bootstrap root while reading the rank table", rank);
    return flagcxRemoteError;
  }
  *out = std::move(bs);
  return flagcxSuccess;
}

flagcxResult_t Bootstrap::send(int peer, uint32_t tag, const void *data, size_t size) {
  Impl &im = *impl_;
  if (im.aborted) return flagcxRemoteError;
  auto deadline = deadlineFromTimeout();
  int &fd = im.out[static_cast<size_t>(peer)];
  if (fd < 0) {
    const PeerInfo &pi = peers_[static_cast<size_t>(peer)];
    if (connectTo(pi.bootAddr, deadline, &fd) != flagcxSuccess) {
      WARN(kBootstrap, "rank %d cannot connect to rank %d (%s) at %s", rank_, peer, pi.host,
           pi.bootAddr.str().c_str());
      fd = -1;
      return flagcxRemoteError;
    }
    Hello h{kHelloMagic, 2, rank_, 0, nranks_};
    if (clientHandshake(fd, secret_, h, deadline) != flagcxSuccess) {
      close(fd);
      fd = -1;
      return flagcxRemoteError;
    }
  }
  MsgHeader mh{tag, 0, size};
  flagcxResult_t res = sendAll(fd, &mh, sizeof(mh), deadline);
  if (res == flagcxSuccess && size) res = sendAll(fd, data, size, deadline);
  if (res != flagcxSuccess)
    WARN(kBootstrap, "rank %d: bootstrap send to rank %d (%s) failed (peer gone or timeout)",
         rank_, peer, peers_[static_cast<size_t>(peer)].host);
  return res;
}

flagcxResult_t Bootstrap::recv(int peer, uint32_t tag, void *data, size_t size) {
  Impl &im = *impl_;
  auto deadline = deadlineFromTimeout();
  const PeerInfo &pi = peers_[static_cast<size_t>(peer)];
  auto deliver = [&](std::vector<char> &bytes) -> flagcxResult_t {
    if (bytes.size() != size) {
      WARN(kBootstrap, "rank %d: bootstrap message from rank %d tag %u has %zu bytes, expected %zu",
           rank_, peer, tag, bytes.size(), size);
      return flagcxInternalError;
    }
    if (size) memcpy(data, bytes.data(), size);
    return flagcxSuccess;
  };
  auto &q = im.unexpected[static_cast<size_t>(peer)];
  for (auto it = q.begin(); it != q.end(); ++it) {
    if (it->tag == tag) {
      flagcxResult_t r = deliver(it->data);
      q.erase(it);
      return r;
    }
  }
  // Wait for the peer's connection (the acceptor thread registers it).
  int fd = -1;
  Backoff wait;
  while (true) {
    {
      std::lock_guard<std::mutex> lk(im.mu);
      fd = im.in[static_cast<size_t>(peer)];
    }
    if (fd >= 0) break;
    if (im.aborted) return flagcxRemoteError;
    if (Clock::now() >= deadline) {
      WARN(kBootstrap, "rank %d: rank %d (%s) never connected within FLAGCX_TIMEOUT", rank_, peer,
           pi.host);
      return flagcxRemoteError;
    }
    wait.idle();
  }
  while (true) {
    if (im.aborted) return flagcxRemoteError;
    MsgHeader mh{};
    if (recvAll(fd, &mh, sizeof(mh), deadline) != flagcxSuccess) {
      WARN(kBootstrap, "rank %d: bootstrap receive from rank %d (%s) failed: peer gone or "
           "FLAGCX_TIMEOUT expired", rank_, peer, pi.host);
      return flagcxRemoteError;
    }
    if (mh.size > (1ull << 30)) {
      WARN(kBootstrap, "rank %d: malformed bootstrap message from rank %d (size %llu)", rank_,
           peer, static_cast<unsigned long long>(mh.size));
      return flagcxRemoteError;
    }
    std::vector<char> bytes(mh.size);
    if (mh.size && recvAll(fd, bytes.data(), mh.size, deadline) != flagcxSuccess) {
      WARN(kBootstrap, "rank %d: bootstrap receive from rank %d (%s) broke off", rank_, peer,
           pi.host);
      return flagcxRemoteError;
    }
    if (mh.tag == tag) return deliver(bytes);
    q.push_back({mh.tag, std::move(bytes)});
  }
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
  im.aborted = true;
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
