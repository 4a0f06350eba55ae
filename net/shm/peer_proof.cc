// A same-host peer's pid on the kernel's word (peer_proof.h), and the
// collective that proves a set of peers (provePeers, net/net.h).
#include "net/shm/peer_proof.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/base.h"
#include "net/net.h"
#include "rendezvous/rendezvous.h"

namespace flagcx {

namespace {
// Connections looked at per set-up beyond one per peer: strangers' junk is
// read once and dropped; a flood of them leaves the peers unproven.
constexpr int kSpareAccepts = 16;
constexpr uint32_t kTagOffer = 0x70726f01;  // bootstrap tags: "pro" 1, 2
constexpr uint32_t kTagPresented = 0x70726f02;

socklen_t abstractAddr(const char *name, sockaddr_un *a) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  size_t n = strnlen(name, sizeof a->sun_path - 1);
  memcpy(a->sun_path + 1, name, n);  // sun_path[0] = 0: the abstract namespace
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}
}  // namespace

PeerProof::~PeerProof() {
  if (fd_ >= 0) close(fd_);
}

uint64_t PeerProof::macFor(const uint8_t *nonce, int32_t rank) const {
  uint8_t m[20];
  memcpy(m, nonce, 16);
  memcpy(m + 16, &rank, 4);
  return macOf(secret_, m, sizeof m);
}

bool PeerProof::listen(const std::vector<int> &peerRanks) {
  ranks_ = peerRanks;
  nonces_.assign(peerRanks.size(), {});
  proven_.assign(peerRanks.size(), 0);
  for (auto &n : nonces_) randomBytes(n.data(), n.size());
  uint8_t r[8];
  randomBytes(r, sizeof r);
  char name[48];
  snprintf(name, sizeof name, "flagcx-proof-%d-%02x%02x%02x%02x%02x%02x%02x%02x",
           static_cast<int>(getpid()), r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un a;
  socklen_t len = abstractAddr(name, &a);
  int backlog = static_cast<int>(peerRanks.size()) + kSpareAccepts;
  if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr *>(&a), len) != 0 ||
      ::listen(fd_, backlog) != 0) {
    INFO(kShm, "rank %d: no Unix socket to prove same-host peers' pids (%s): their memory is "
         "not reached by pid", myRank_, strerror(errno));
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return false;
  }
  name_ = name;
  return true;
}

PeerProof::Offer PeerProof::offer(size_t i) const {
  Offer o{};
  if (fd_ < 0) return o;  // an empty name: nothing to present to
  snprintf(o.sock, sizeof o.sock, "%s", name_.c_str());
  memcpy(o.nonce, nonces_[i].data(), sizeof o.nonce);
  return o;
}

bool PeerProof::present(const Offer &theirs) const {
  char name[sizeof theirs.sock + 1] = {};
  memcpy(name, theirs.sock, sizeof theirs.sock);
  if (name[0] == 0) return false;
  Presentation p{};
  memcpy(p.nonce, theirs.nonce, sizeof p.nonce);
  p.rank = myRank_;
  p.mac = macFor(p.nonce, p.rank);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un a;
  socklen_t len = abstractAddr(name, &a);
  // A Unix stream connect either completes at once or fails (a full
  // backlog: EAGAIN); the presentation then fits the socket buffer.
  bool ok = connect(fd, reinterpret_cast<sockaddr *>(&a), len) == 0 &&
            send(fd, &p, sizeof p, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(sizeof p);
  close(fd);  // the connection waits in the listener's queue with its bytes
  return ok;
}

// Take what waits in the accept queue: a connection whose bytes are one
// peer's nonce, that peer's rank and a right MAC proves that peer (by the
// kernel's credentials); anything else is dropped.
void PeerProof::acceptSome() {
  const int maxAccepts = static_cast<int>(nonces_.size()) + kSpareAccepts;
  while (accepted_ < maxAccepts) {
    int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;  // EAGAIN: nothing more queued now
    accepted_++;
    Presentation p{};
    ucred cr{};
    socklen_t crLen = sizeof cr;
    bool whole = recv(c, &p, sizeof p, MSG_DONTWAIT) == static_cast<ssize_t>(sizeof p);
    bool creds = getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &crLen) == 0;
    close(c);
    if (!whole || !creds || cr.uid != geteuid() || cr.pid <= 0 || p.mac != macFor(p.nonce, p.rank))
      continue;
    for (size_t i = 0; i < nonces_.size(); i++)
      if (proven_[i] == 0 && ranks_[i] == p.rank &&
          memcmp(p.nonce, nonces_[i].data(), sizeof p.nonce) == 0)
        proven_[i] = cr.pid;
  }
}

pid_t PeerProof::collect(size_t i) {
  if (fd_ < 0 || i >= proven_.size()) return 0;
  if (proven_[i] == 0) acceptSome();
  return proven_[i];
}

flagcxResult_t provePeers(Bootstrap &bs, const std::vector<int> &peers, std::vector<pid_t> *pids) {
  pids->assign(peers.size(), 0);
  if (peers.empty()) return flagcxSuccess;
  PeerProof proof(bs.secret(), bs.rank());
  proof.listen(peers);
  for (size_t i = 0; i < peers.size(); i++) {
    PeerProof::Offer o = proof.offer(i);
    FLAGCX_CHECK(bs.send(peers[i], kTagOffer, &o, sizeof o));
  }
  for (size_t i = 0; i < peers.size(); i++) {
    PeerProof::Offer theirs{};
    FLAGCX_CHECK(bs.recv(peers[i], kTagOffer, &theirs, sizeof theirs));
    int32_t presented = proof.present(theirs) ? 1 : 0;
    FLAGCX_CHECK(bs.send(peers[i], kTagPresented, &presented, sizeof presented));
  }
  for (size_t i = 0; i < peers.size(); i++) {
    int32_t presented = 0;
    FLAGCX_CHECK(bs.recv(peers[i], kTagPresented, &presented, sizeof presented));
    (*pids)[i] = presented == 1 ? proof.collect(i) : 0;
  }
  return flagcxSuccess;
}

}  // namespace flagcx
