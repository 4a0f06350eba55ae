// The connection handshake (socket.h): the connector's side in one blocking
// call, the listener's side as a state machine that never blocks.  A
// rejection is logged once, naming the client's address as it was when the
// connection was accepted.
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "base/base.h"
#include "rendezvous/socket.h"

namespace flagcx {

namespace {
// What the MAC covers: the listener's nonce, then the connector's hello.
struct Proof {
  uint8_t nonce[16];
  Hello hello;
};
}  // namespace

flagcxResult_t clientHandshake(int fd, const Secret &secret, const Hello &hello,
                               Clock::time_point deadline) {
  FLAGCX_CHECK(sendAll(fd, &hello, sizeof(hello), deadline));
  Proof pr{};
  if (recvAll(fd, pr.nonce, sizeof(pr.nonce), deadline) != flagcxSuccess) {
    WARN(kBootstrap, "handshake: peer closed before sending its nonce (wrong secret or peer gone)");
    return flagcxRemoteError;
  }
  pr.hello = hello;
  uint64_t mac = macOf(secret, &pr, sizeof(pr));
  FLAGCX_CHECK(sendAll(fd, &mac, sizeof(mac), deadline));
  uint8_t ok = 0;
  if (recvAll(fd, &ok, 1, deadline) != flagcxSuccess || ok != 1) {
    WARN(kBootstrap, "handshake rejected by peer (does it hold the same unique id?)");
    return flagcxRemoteError;
  }
  return flagcxSuccess;
}

ServerHandshake::ServerHandshake(int fd, const Secret &secret, uint32_t expectKind,
                                 const char *secretName, size_t trailerLen)
    : fd_(fd), secret_(secret), kind_(expectKind), secretName_(secretName), peer_(peerOf(fd)),
      trailer_(trailerLen) {}

short ServerHandshake::events() const {
  return phase_ == Phase::Nonce || phase_ == Phase::Ok ? POLLOUT : POLLIN;
}

int ServerHandshake::progress() const {
  if (phase_ == Phase::Hello && done_ == 0) return 0;
  return 1 + static_cast<int>(phase_);
}

flagcxResult_t ServerHandshake::reject(const char *why) const {
  uint64_t skipped = 0;
  if (strangerLogAllowed(&skipped)) {
    if (skipped)
      WARN(kBootstrap, "rejected a connection from %s: %s (and %llu more since the last such line)",
           peer_.c_str(), why, static_cast<unsigned long long>(skipped));
    else
      WARN(kBootstrap, "rejected a connection from %s: %s", peer_.c_str(), why);
  }
  return flagcxRemoteError;
}

flagcxResult_t ServerHandshake::rejectProof(const char *how) const {
  char why[200];
  snprintf(why, sizeof why, "it did not prove %s%s", secretName_, how);
  return reject(why);
}

void ServerHandshake::giveUp() const {
  switch (phase_) {
    case Phase::Hello: (void)reject("bad hello (incomplete)"); break;
    case Phase::Trailer: (void)reject("it stopped after the handshake, before its whole record"); break;
    default: (void)rejectProof(" (no answer)"); break;
  }
}

// The current phase moved all its bytes: check them and go on.
flagcxResult_t ServerHandshake::advance() {
  done_ = 0;
  switch (phase_) {
    case Phase::Hello:
      if (hello_.magic != kHelloMagic || hello_.kind != kind_) return reject("bad hello");
      randomBytes(nonce_, sizeof nonce_);
      phase_ = Phase::Nonce;
      break;
    case Phase::Nonce: phase_ = Phase::Mac; break;
    case Phase::Mac: {
      Proof pr{};
      memcpy(pr.nonce, nonce_, sizeof nonce_);
      pr.hello = hello_;
      if (mac_ != macOf(secret_, &pr, sizeof pr)) return rejectProof("");
      phase_ = Phase::Ok;
      break;
    }
    case Phase::Ok: phase_ = trailer_.empty() ? Phase::Done : Phase::Trailer; break;
    case Phase::Trailer: phase_ = Phase::Done; break;
    case Phase::Done: break;
  }
  return flagcxInProgress;
}

flagcxResult_t ServerHandshake::step() {
  static const uint8_t kOk = 1;
  for (;;) {
    char *buf = nullptr;
    size_t len = 0;
    bool out = false;
    switch (phase_) {
      case Phase::Hello: buf = reinterpret_cast<char *>(&hello_), len = sizeof hello_; break;
      case Phase::Nonce: buf = reinterpret_cast<char *>(nonce_), len = sizeof nonce_, out = true; break;
      case Phase::Mac: buf = reinterpret_cast<char *>(&mac_), len = sizeof mac_; break;
      case Phase::Ok: buf = const_cast<char *>(reinterpret_cast<const char *>(&kOk)), len = 1, out = true; break;
      case Phase::Trailer: buf = reinterpret_cast<char *>(trailer_.data()), len = trailer_.size(); break;
      case Phase::Done: return flagcxSuccess;
    }
    while (done_ < len) {
      ssize_t n = out ? send(fd_, buf + done_, len - done_, MSG_DONTWAIT | MSG_NOSIGNAL)
                      : recv(fd_, buf + done_, len - done_, MSG_DONTWAIT);
      if (n > 0) {
        done_ += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return flagcxInProgress;
      const char *how = n == 0 ? " (it closed the connection)" : "";
      if (phase_ == Phase::Hello)
        return reject(n == 0 ? "it closed the connection before a whole hello" : "bad hello");
      if (phase_ == Phase::Trailer)
        return reject("it closed the connection after the handshake, before its whole record");
      return rejectProof(how);
    }
    flagcxResult_t rc = advance();
    if (rc != flagcxInProgress) return rc;
  }
}

}  // namespace flagcx
