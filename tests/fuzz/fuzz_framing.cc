// The wire-message parser: a FramedConn whose peer's byte stream is the
// fuzz input.  A few receives (and sends) are posted first, sized by the
// input's first bytes; the rest arrives in chunks whose size the input also
// picks, over 1-3 lanes.  Whatever the bytes, the Conn must either deliver
// messages that fit the posted buffers or fail cleanly; ASan catches any
// byte written outside a buffer.
//
// Input: [lanes-1][chunk][nrecv][nsend] then per receive [size hi][size lo]
// [tag], per send [size hi][size lo][tag], then lane streams: the rest split
// evenly across the lanes.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_common.h"
#include "net/common/framed_conn.h"

using namespace flagcx;

namespace {

class FuzzPipe : public Pipe {
 public:
  FuzzPipe(const uint8_t *data, size_t n, size_t chunk) : data_(data), n_(n), chunk_(chunk) {}
  flagcxResult_t write(const iovec *iov, int iovcnt, size_t *moved, bool *closed) override {
    // A sink: our own sends are not the attack surface; take them whole
    // (a cap of 64 KiB per call still exercises partial writes).
    size_t total = 0, budget = 65536;
    for (int i = 0; i < iovcnt && budget > 0; i++) {
      size_t k = iov[i].iov_len < budget ? iov[i].iov_len : budget;
      if (k) sink_ ^= static_cast<const uint8_t *>(iov[i].iov_base)[k - 1];
      total += k;
      budget -= k;
      if (k < iov[i].iov_len) break;
    }
    *moved = total;
    *closed = false;
    return flagcxSuccess;
  }
  flagcxResult_t read(void *dst, size_t n, size_t *moved, bool *closed) override {
    size_t k = n_ - off_;
    if (k > n) k = n;
    if (k > chunk_) k = chunk_;
    if (k) memcpy(dst, data_ + off_, k);
    off_ += k;
    *moved = k;
    *closed = off_ == n_ && k == 0;
    return flagcxSuccess;
  }

 private:
  const uint8_t *data_;
  size_t n_, off_ = 0, chunk_;
  uint8_t sink_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::quietLibrary();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::Reader in{data, size};
  int lanes = 1 + in.byte() % 3;
  size_t chunk = 1 + in.byte() * 17u;
  int nrecv = 1 + in.byte() % 6;
  int nsend = in.byte() % 3;
  struct Post {
    std::unique_ptr<uint8_t[]> buf;
    size_t size;
    uint64_t tag;
    int req = -1;
  };
  std::vector<Post> recvs(static_cast<size_t>(nrecv)), sends(static_cast<size_t>(nsend));
  for (auto *v : {&recvs, &sends})
    for (auto &p : *v) {
      p.size = (static_cast<size_t>(in.byte()) << 8 | in.byte()) * ((v == &sends) ? 7u : 1u);
      p.tag = in.byte() % 4;
      // Exactly sized heap buffers: one byte past the end is an ASan report.
      p.buf.reset(new uint8_t[p.size ? p.size : 1]);
      memset(p.buf.get(), 0xab, p.size ? p.size : 1);
    }
  std::vector<std::unique_ptr<Pipe>> pipes;
  size_t per = in.n / static_cast<size_t>(lanes);
  for (int l = 0; l < lanes; l++) {
    size_t n = l == lanes - 1 ? in.n - per * static_cast<size_t>(lanes - 1) : per;
    pipes.push_back(std::make_unique<FuzzPipe>(in.p + per * static_cast<size_t>(l), n, chunk));
  }
  FramedConn conn("fuzz", PeerDesc{0, 1, 0, "fuzz-peer"}, std::move(pipes));
  bool failed = false;
  for (auto &p : recvs)
    if (conn.irecv(p.buf.get(), p.size, p.tag, &p.req) != flagcxSuccess) failed = true;
  for (auto &p : sends)
    if (conn.isend(p.buf.get(), p.size, p.tag, &p.req) != flagcxSuccess) failed = true;
  for (int round = 0; round < 3000 && !failed; round++) {
    bool all = true;
    for (auto *v : {&recvs, &sends})
      for (auto &p : *v) {
        if (p.req < 0) continue;
        bool done = false;
        size_t bytes = 0;
        if (conn.test(p.req, &done, &bytes) != flagcxSuccess) {
          failed = true;
          break;
        }
        if (done) {
          if (v == &recvs && bytes > p.size) __builtin_trap();  // reported more than fits
          p.req = -1;
        } else {
          all = false;
        }
      }
    if (all || failed) break;
    if (conn.progress() != flagcxSuccess) failed = true;
  }
  // After a failure every call keeps failing (sticky), never crashes.
  if (failed) {
    int r;
    uint8_t b;
    conn.irecv(&b, 1, 0, &r);
    conn.progress();
  }
  return 0;
}
