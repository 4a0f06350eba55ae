// The P2P engine's listener: accepted connections run their handshakes
// (ServerHandshake) side by side, each as far as its socket allows, so a
// stranger that connects and goes quiet, or stops part-way through its
// hello or proof, delays no real peer.  One that has not finished after
// kPatience is logged and dropped.  Handshakes still under way when an
// accept returns are kept in the engine for the next one.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "p2p/p2p_internal.h"

namespace flagcx::p2p {

namespace {

constexpr auto kPatience = std::chrono::seconds(10);
constexpr size_t kMaxPending = 64;  // more strangers than that: the oldest go first

void drop(std::vector<PendingHello> &v, size_t i, bool log) {
  if (log) v[i].hs->giveUp();
  close(v[i].fd);
  v.erase(v.begin() + static_cast<long>(i));
}

}  // namespace

int nextAuthenticated(FlagcxP2pEngine *e, uint32_t kind, Clock::time_point until, Hello *hello) {
  std::vector<PendingHello> &w = e->pendingHellos;
  std::vector<pollfd> pf;
  while (!e->stopAccept.load()) {
    auto now = Clock::now();
    for (size_t i = 0; i < w.size();) {
      if (now - w[i].since > kPatience) drop(w, i, true);
      else i++;
    }
    if (now >= until) return -1;
    pf.assign({{e->listenFd, POLLIN, 0}, {e->acceptWake.fd(), POLLIN, 0}});
    for (auto &p : w) pf.push_back({p.fd, p.hs->events(), 0});
    auto slice = std::min(until, now + std::chrono::milliseconds(200));
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(slice - now).count();
    int rc = poll(pf.data(), pf.size(), static_cast<int>(std::max<long long>(ms, 0)));
    if (rc < 0 && errno != EINTR) {
      WARN(kP2P, "P2P accept: poll failed: %s", strerror(errno));
      return -1;
    }
    if (rc <= 0) continue;
    // Handshakes first, from the back (erasing shifts the later ones).
    for (size_t k = pf.size(); k-- > 2;) {
      if (pf[k].revents == 0) continue;
      size_t i = k - 2;
      flagcxResult_t hrc = w[i].hs->step();
      if (hrc == flagcxInProgress) continue;
      if (hrc != flagcxSuccess) {  // rejected, and logged by the handshake
        drop(w, i, false);
        continue;
      }
      *hello = w[i].hs->hello();
      int fd = w[i].fd;
      w.erase(w.begin() + static_cast<long>(i));
      return fd;
    }
    if (pf[0].revents == 0) continue;
    for (;;) {  // the backlog
      int fd = -1;
      if (acceptOne(e->listenFd, Clock::now(), &fd) != flagcxSuccess) return -1;
      if (fd < 0) break;
      if (w.size() >= kMaxPending) drop(w, 0, true);
      w.push_back({fd, Clock::now(), std::make_unique<ServerHandshake>(fd, e->secret, kind, "FLAGCX_P2P_SECRET")});
    }
  }
  return -1;
}

void dropPendingHellos(FlagcxP2pEngine *e) {
  std::lock_guard<std::mutex> lk(e->acceptMu);
  for (auto &p : e->pendingHellos) close(p.fd);
  e->pendingHellos.clear();
}

}  // namespace flagcx::p2p
