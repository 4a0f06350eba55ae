// The socket lanes' helper threads (socket_mover.h): the send and receive
// loops that move stripes with blocking calls, and their hand-off to the
// engine thread.
#include "net/socket/socket_mover.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace flagcx {

namespace {
std::atomic<int> g_live{0};
std::atomic<uint64_t> g_folded{0};
}  // namespace

uint64_t socketFoldedBytes() { return g_folded.load(std::memory_order_relaxed); }

int SocketMover::live() { return g_live.load(std::memory_order_relaxed); }

SocketMover::SocketMover(int fd, bool sending, int notify)
    : fd_(fd), send_(sending), notify_(notify) {
  g_live.fetch_add(1, std::memory_order_relaxed);
  th_ = std::thread([this] { loop(); });
}

SocketMover::~SocketMover() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  // A job still in flight (the communicator is being torn down after an
  // error) may sit in a blocking call: shutting the socket wakes it.
  if (busy()) shutdown(fd_, SHUT_RDWR);
  th_.join();
  g_live.fetch_sub(1, std::memory_order_relaxed);
}

void SocketMover::start(const iovec *iov, int n, const BgFold *fold) {
  moved_.store(0, std::memory_order_relaxed);
  closed_.store(false, std::memory_order_relaxed);
  err_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk(mu_);
    n_ = n;
    for (int i = 0; i < n; i++) iov_[i] = iov[i];
    folds_ = fold != nullptr && !send_;
    if (folds_) fold_ = *fold;
    posted_++;
    started_ = posted_;
  }
  cv_.notify_one();
}

SocketMover::Status SocketMover::poll() const {
  Status s;
  s.finished = done_.load(std::memory_order_acquire) == started_;
  s.moved = moved_.load(std::memory_order_acquire);
  if (s.finished) {
    s.closed = closed_.load(std::memory_order_relaxed);
    s.err = err_.load(std::memory_order_relaxed);
  }
  return s;
}

void SocketMover::loop() {
  uint64_t seen = 0;
  for (;;) {
    iovec iov[2];
    int n;
    BgFold fold;
    bool folds;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || posted_ != seen; });
      if (stop_) return;
      seen = posted_;
      n = n_;
      for (int i = 0; i < n; i++) iov[i] = iov_[i];
      folds = folds_;
      fold = fold_;
    }
    run(iov, n, folds ? &fold : nullptr);
    done_.store(seen, std::memory_order_release);
    uint64_t one = 1;
    (void)!::write(notify_, &one, sizeof one);
  }
}

namespace {
// A folding receive takes at most this much per call, then folds what came
// while it is still in this core's cache.
constexpr size_t kFoldPiece = size_t{256} << 10;
}  // namespace

void SocketMover::run(iovec *iov, int n, const BgFold *fold) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += iov[i].iov_len;
  size_t moved = 0;
  int first = 0;
  const char *foldAt = fold ? fold->src : nullptr;  // folded up to here
  char *foldDst = fold ? fold->f.dst : nullptr;
  const char *foldBase = fold ? fold->f.base : nullptr;
  while (moved < total) {
    ssize_t k;
    if (send_) {
      msghdr mh{};
      mh.msg_iov = iov + first;
      mh.msg_iovlen = static_cast<size_t>(n - first);
      k = sendmsg(fd_, &mh, MSG_NOSIGNAL);
    } else {
      size_t want = iov[0].iov_len;
      if (fold && want > kFoldPiece) want = kFoldPiece;
      k = recv(fd_, iov[0].iov_base, want, 0);
    }
    if (k > 0 && fold) {
      // Whole elements from foldAt up to what has now arrived.
      const char *end = static_cast<const char *>(iov[0].iov_base) + k;
      size_t bytes = static_cast<size_t>(end - foldAt);
      bytes -= bytes % fold->f.elem;
      if (bytes > 0) {
        if (fold->fn(foldDst, foldBase, foldAt, bytes / fold->f.elem, fold->f.dt, fold->f.op) !=
            flagcxSuccess) {
          err_.store(EINVAL, std::memory_order_relaxed);
          return;
        }
        foldAt += bytes;
        foldDst += bytes;
        foldBase += bytes;
        g_folded.fetch_add(bytes, std::memory_order_relaxed);
      }
    }
    if (k > 0) {
      moved += static_cast<size_t>(k);
      moved_.store(moved, std::memory_order_release);
      // Advance the vector past what went.
      size_t left = static_cast<size_t>(k);
      while (left > 0) {
        size_t take = left < iov[first].iov_len ? left : iov[first].iov_len;
        iov[first].iov_base = static_cast<char *>(iov[first].iov_base) + take;
        iov[first].iov_len -= take;
        left -= take;
        if (iov[first].iov_len == 0 && first + 1 < n) first++;
      }
      continue;
    }
    if (k == 0 && !send_) {
      closed_.store(true, std::memory_order_relaxed);
      return;
    }
    int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      // The socket was shut down under us (teardown): this job cannot finish.
      closed_.store(true, std::memory_order_relaxed);
      return;
    }
    err_.store(e, std::memory_order_relaxed);  // a lost peer too: pollBg's ioError says which
    return;
  }
}

}  // namespace flagcx
