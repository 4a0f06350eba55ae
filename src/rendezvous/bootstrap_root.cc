// The rendezvous root (bootstrap_root.h): one thread, one poll loop.  The
// handshakes of all clients, with the PeerInfo each sends after its proof,
// run side by side in a HandshakeQueue, so the root holds no thread and at
// most 64 sockets for connections that have not proved the secret, and a
// client that goes quiet at any step delays nobody.  What the ranks sent is
// kept per rank that arrived; the table is built when the last one comes.
#include "rendezvous/bootstrap_root.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <map>
#include <string>
#include <memory>
#include <thread>
#include <vector>

#include "base/base.h"
#include "rendezvous/bootstrap.h"

namespace flagcx {

namespace {

// How long a refused or failed rank's explanation may take to leave.
constexpr auto kReplyGrace = std::chrono::seconds(2);

// Writes buf to every fd side by side (one stalled reader delays no other)
// until each has it all, failed, or the deadline passed; then closes them.
void sendToAll(const std::vector<int> &fds, const std::vector<char> &buf, Clock::time_point deadline) {
  std::vector<size_t> off(fds.size(), 0);
  std::vector<pollfd> pf;
  std::vector<size_t> who;
  for (;;) {
    pf.clear();
    who.clear();
    for (size_t i = 0; i < fds.size(); i++) {
      if (off[i] >= buf.size()) continue;
      pf.push_back({fds[i], POLLOUT, 0});
      who.push_back(i);
    }
    auto now = Clock::now();
    if (pf.empty() || now >= deadline) break;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    if (poll(pf.data(), pf.size(), static_cast<int>(std::min<long long>(ms, 200))) < 0 && errno != EINTR)
      break;
    for (size_t k = 0; k < pf.size(); k++) {
      if (pf[k].revents == 0) continue;
      size_t i = who[k];
      ssize_t n = send(fds[i], buf.data() + off[i], buf.size() - off[i], MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) off[i] += static_cast<size_t>(n);
      else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) off[i] = buf.size();
    }
  }
  for (int fd : fds) close(fd);
}

std::vector<char> failureReply(const std::string &text) {
  RootReply r{};
  r.status = 1;
  snprintf(r.text, sizeof r.text, "%s", text.c_str());
  const char *p = reinterpret_cast<const char *>(&r);
  return std::vector<char>(p, p + sizeof r);
}

class Root {
 public:
  // Everything the loop needs is made here, on the caller's thread: the
  // root's own thread then allocates nothing until a rank connects, so the
  // caller may fork right after flagcxGetUniqueId.
  Root(int listenFd, const Secret &secret, std::string secretName)
      : listenFd_(listenFd), secret_(secret), secretName_(std::move(secretName)),
        queue_(std::make_unique<HandshakeQueue>(listenFd_, secret_, kHelloKindRoot,
                                                secretName_.c_str(), sizeof(PeerInfo))) {}
  void run();

 private:
  struct Member {
    int fd;
    PeerInfo info;
  };
  bool complete() const { return nranks_ >= 0 && static_cast<int>(members_.size()) >= nranks_; }
  void admit(const HandshakeQueue::Accepted &a);
  void answer();
  std::string missing() const;

  int listenFd_;
  Secret secret_;
  std::string secretName_;
  std::map<int, Member> members_;  // by rank: only ranks that arrived
  int nranks_ = -1;                // set by the first authenticated rank
  Clock::time_point deadline_ = Clock::time_point::max();
  std::unique_ptr<HandshakeQueue> queue_;
};

// An authenticated rank: it joins, or is refused (told why, and logged with
// its address) when its hello does not fit the communicator.
void Root::admit(const HandshakeQueue::Accepted &a) {
  const Hello &h = a.hello;
  const char *why = nullptr;
  if (nranks_ < 0 && h.nranks < 1) why = "its communicator size is not positive";
  else if (nranks_ >= 0 && h.nranks != nranks_) why = "its communicator size differs";
  else if (h.rank < 0 || h.rank >= h.nranks) why = "its rank is out of range";
  else if (members_.count(h.rank)) why = "its rank is taken";
  if (why) {
    WARN(kBootstrap, "bootstrap root: refused %s claiming rank %d of %d (communicator of %d): %s",
         a.peer.c_str(), h.rank, h.nranks, nranks_, why);
    char text[200];
    snprintf(text, sizeof text, "the bootstrap root refused rank %d of %d (communicator of %d): %s",
             h.rank, h.nranks, nranks_, why);
    sendToAll({a.fd}, failureReply(text), Clock::now() + kReplyGrace);
    return;
  }
  if (nranks_ < 0) {
    nranks_ = h.nranks;
    deadline_ = deadlineFromTimeout();
  }
  Member m{a.fd, PeerInfo()};
  memcpy(&m.info, a.trailer.data(), sizeof m.info);
  members_[h.rank] = m;
}

// The first few missing ranks and how many more: nranks_ came from a
// peer's hello, so neither the loop nor the text may grow with it (at most
// members + kListed lookups).
std::string Root::missing() const {
  constexpr int kListed = 16;
  std::string s;
  int listed = 0;
  for (int r = 0; r < nranks_ && listed < kListed; r++)
    if (!members_.count(r)) {
      if (!s.empty()) s += ',';
      s += std::to_string(r);
      listed++;
    }
  long more = static_cast<long>(nranks_) - static_cast<long>(members_.size()) - listed;
  if (more > 0) s += " and " + std::to_string(more) + " more";
  return s;
}

void Root::answer() {
  std::vector<int> fds;
  for (auto &kv : members_) fds.push_back(kv.second.fd);
  if (!complete()) {
    std::string who = missing();
    WARN(kBootstrap, "bootstrap root: rank(s) %s never arrived within FLAGCX_TIMEOUT=%lds",
         who.c_str(), static_cast<long>(paramInt(Param::TIMEOUT)));
    sendToAll(fds, failureReply("rank(s) " + who + " never arrived at the bootstrap root within FLAGCX_TIMEOUT"),
              Clock::now() + kReplyGrace);
    return;
  }
  std::vector<char> buf(sizeof(RootReply) + members_.size() * sizeof(PeerInfo), 0);
  char *p = buf.data() + sizeof(RootReply);  // the reply's status 0: all zero bytes
  for (auto &kv : members_) {
    memcpy(p, &kv.second.info, sizeof(PeerInfo));
    p += sizeof(PeerInfo);
  }
  sendToAll(fds, buf, deadlineFromTimeout());
}

void Root::run() {
  while (!complete()) {
    HandshakeQueue::Accepted a;
    if (queue_->next(deadline_, &a) != flagcxSuccess) break;  // logged
    if (a.fd >= 0) admit(a);
    else if (Clock::now() >= deadline_) break;
  }
  queue_.reset();  // the handshakes still under way are closed here
  close(listenFd_);
  answer();
}

}  // namespace

flagcxResult_t startBootstrapRoot(SockAddr *addr, const Secret &secret, const char *secretName) {
  int fd = -1;
  FLAGCX_CHECK(listenOn(addr, &fd));
  std::string name = secretName;
  auto root = std::make_unique<Root>(fd, secret, name);
  std::thread([r = std::move(root)] { r->run(); }).detach();
  return flagcxSuccess;
}

}  // namespace flagcx
