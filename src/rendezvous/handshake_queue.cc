// HandshakeQueue (socket.h): one poll over the listener, the caller's wake
// fd and every handshake under way.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/base.h"
#include "rendezvous/socket.h"

namespace flagcx {

namespace {
// A real peer is through its handshake in a few round trips; 10 s leaves a
// loaded host ample room while a stranger holds a slot for little time.
// Independent of FLAGCX_TIMEOUT, which may be minutes.
constexpr auto kPatience = std::chrono::seconds(10);
// Handshakes under way at once: 64 fds and about 64 x 300 bytes.
constexpr size_t kMaxWaiting = 64;
// Connections accepted per pass before the handshakes get their turn.
constexpr int kAcceptsPerPass = 16;
// Poll slice: how late a handshake past its patience can be dropped.
constexpr auto kSlice = std::chrono::milliseconds(200);
}  // namespace

struct HandshakeQueue::Waiting {
  int fd;
  Clock::time_point since;
  ServerHandshake hs;
};

HandshakeQueue::HandshakeQueue(int listenFd, const Secret &secret, uint32_t expectKind,
                               const char *secretName, size_t trailerLen)
    : listenFd_(listenFd), secret_(secret), kind_(expectKind), secretName_(secretName),
      trailerLen_(trailerLen) {
  pf_.reserve(kMaxWaiting + 2);
}

HandshakeQueue::~HandshakeQueue() {
  for (auto &w : waiting_) close(w->fd);
}

void HandshakeQueue::drop(size_t i, bool log) {
  if (log) waiting_[i]->hs.giveUp();  // names the peer and how far it got
  close(waiting_[i]->fd);
  waiting_.erase(waiting_.begin() + static_cast<long>(i));
}

// A new connection takes a slot; when all are taken, the one that got least
// far (the oldest of those) gives up its own.
void HandshakeQueue::admit(int fd) {
  if (waiting_.size() >= kMaxWaiting) {
    size_t victim = 0;
    for (size_t i = 1; i < waiting_.size(); i++)
      if (waiting_[i]->hs.progress() < waiting_[victim]->hs.progress()) victim = i;
    drop(victim, true);
  }
  waiting_.push_back(std::unique_ptr<Waiting>(new Waiting{
      fd, Clock::now(), ServerHandshake(fd, secret_, kind_, secretName_, trailerLen_)}));
}

flagcxResult_t HandshakeQueue::next(Clock::time_point until, int *fd, Hello *hello, int wakeFd) {
  Accepted a;
  flagcxResult_t rc = next(until, &a, wakeFd);
  *fd = a.fd;
  if (a.fd >= 0) *hello = a.hello;
  return rc;
}

flagcxResult_t HandshakeQueue::next(Clock::time_point until, Accepted *out, int wakeFd) {
  out->fd = -1;
  std::vector<pollfd> &pf = pf_;
  for (;;) {
    auto now = Clock::now();
    for (size_t i = 0; i < waiting_.size();) {
      if (now - waiting_[i]->since > kPatience) drop(i, true);
      else i++;
    }
    if (now >= until) return flagcxSuccess;
    pf.assign({{listenFd_, POLLIN, 0}, {wakeFd, POLLIN, 0}});  // poll skips a negative fd
    for (auto &w : waiting_) pf.push_back({w->fd, w->hs.events(), 0});
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::min(until, now + kSlice) - now);
    int rc = poll(pf.data(), pf.size(), static_cast<int>(std::max<long long>(ms.count(), 0)));
    if (rc < 0 && errno != EINTR) {
      WARN(kBootstrap, "accepting on %d: poll failed: %s", listenFd_, strerror(errno));
      return flagcxSystemError;
    }
    if (rc <= 0) continue;
    if (pf[1].revents != 0) return flagcxSuccess;
    // Handshakes first, from the back (erasing shifts the later ones).
    for (size_t k = pf.size(); k-- > 2;) {
      if (pf[k].revents == 0) continue;
      size_t i = k - 2;
      flagcxResult_t hrc = waiting_[i]->hs.step();
      if (hrc == flagcxInProgress) continue;
      if (hrc != flagcxSuccess) {  // rejected, and logged by the handshake
        drop(i, false);
        continue;
      }
      Waiting &w = *waiting_[i];
      out->fd = w.fd;
      out->hello = w.hs.hello();
      out->peer = w.hs.peer();
      out->trailer = w.hs.trailer();
      waiting_.erase(waiting_.begin() + static_cast<long>(i));
      return flagcxSuccess;
    }
    if (pf[0].revents == 0) continue;
    for (int n = 0; n < kAcceptsPerPass; n++) {  // the rest of the backlog waits for the next pass
      int s = -1;
      FLAGCX_CHECK(acceptOne(listenFd_, Clock::now(), &s));
      if (s < 0) break;
      admit(s);
    }
  }
}

}  // namespace flagcx
