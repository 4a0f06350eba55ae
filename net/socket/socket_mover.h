// A helper thread that moves one direction of one TCP lane with blocking
// calls (FLAGCX_SOCKET_HELPERS): the engine thread hands it a stripe and
// polls for completion, and the kernel parks the helper while the connection
// is full (send) or empty (receive).  Each lane's kernel copies then run on
// a core of their own: on 16 cores, 4 lanes with helpers moved a loopback
// exchange ~3.5x faster than one thread (docs/DECISIONS.md, "Sockets").
//
// Ownership: while a job runs, the helper is the only user of its direction
// of the socket; the engine thread must not read (receive mover) or write
// (send mover) that socket until poll() says the job finished.
#pragma once
#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

#include "net/common/framed_conn.h"

namespace flagcx {

class SocketMover {
 public:
  // Each finished job adds 1 to the eventfd `notify`.
  SocketMover(int fd, bool sending, int notify);
  ~SocketMover();  // stops the thread (unblocking a job in flight) and joins it
  SocketMover(const SocketMover &) = delete;
  SocketMover &operator=(const SocketMover &) = delete;

  // Start one job: send every byte of iov[0..n) (n <= 2), or receive
  // iov[0].iov_len bytes into iov[0].iov_base, folding them as they come
  // when `fold` is given (receive only; see BgFold: the job ends once the
  // fold reached the end of the buffer).  Only while no job runs.
  void start(const iovec *iov, int n, const BgFold *fold = nullptr);
  struct Status {
    size_t moved = 0;      // bytes of the current job moved so far
    bool finished = false;  // the job ended: all moved, or closed/err set
    bool closed = false;    // EOF, or the socket was shut down under the job
    int err = 0;            // the errno a call failed with (the pipe classifies it)
  };
  Status poll() const;
  bool busy() const { return started_ != done_.load(std::memory_order_acquire); }

  // Helper threads alive in this process (each mover has one).
  static int live();

 private:
  void loop();
  void run(iovec *iov, int n, const BgFold *fold);

  int fd_;
  bool send_;
  int notify_;
  std::mutex mu_;
  std::condition_variable cv_;
  iovec iov_[2]{};
  int n_ = 0;
  bool folds_ = false;
  BgFold fold_{};
  uint64_t posted_ = 0;   // jobs handed over (under mu_)
  uint64_t started_ = 0;  // engine side copy of posted_
  bool stop_ = false;
  std::atomic<uint64_t> done_{0};
  std::atomic<size_t> moved_{0};
  std::atomic<bool> closed_{false};
  std::atomic<int> err_{0};
  std::thread th_;
};

}  // namespace flagcx
