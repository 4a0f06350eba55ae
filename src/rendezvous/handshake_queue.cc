// HandshakeQueue (socket.h): one poll over the listener, the caller's wake
// fd and every handshake under way.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "rendezvous/socket.h"

namespace flagcx {

namespace {
constexpr auto kPatience = std::chrono::seconds(10);
constexpr size_t kMaxWaiting = 64;
// Poll slice: how late a handshake past its patience can be dropped.
constexpr auto kSlice = std::chrono::milliseconds(200);
}  // namespace

struct HandshakeQueue::Waiting {
  int fd;
  Clock::time_point since;
  ServerHandshake hs;
};

HandshakeQueue::HandshakeQueue(int listenFd, const Secret &secret, uint32_t expectKind,
                               const char *secretName)
    : listenFd_(listenFd), secret_(secret), kind_(expectKind), secretName_(secretName) {}

HandshakeQueue::~HandshakeQueue() {
  for (auto &w : waiting_) close(w->fd);
}

void HandshakeQueue::drop(size_t i, bool log) {
  if (log) waiting_[i]->hs.giveUp();  // names the peer and how far it got
  close(waiting_[i]->fd);
  waiting_.erase(waiting_.begin() + static_cast<long>(i));
}

flagcxResult_t HandshakeQueue::next(Clock::time_point until, int *fd, Hello *hello, int wakeFd) {
  *fd = -1;
  std::vector<pollfd> pf;
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
      *hello = waiting_[i]->hs.hello();
      *fd = waiting_[i]->fd;
      waiting_.erase(waiting_.begin() + static_cast<long>(i));
      return flagcxSuccess;
    }
    if (pf[0].revents == 0) continue;
    for (;;) {  // the whole backlog
      int s = -1;
      FLAGCX_CHECK(acceptOne(listenFd_, Clock::now(), &s));
      if (s < 0) break;
      if (waiting_.size() >= kMaxWaiting) drop(0, true);
      waiting_.push_back(std::unique_ptr<Waiting>(
          new Waiting{s, Clock::now(), ServerHandshake(s, secret_, kind_, secretName_)}));
    }
  }
}

}  // namespace flagcx
