// An in-process loopback network for executor unit tests: every pair of
// ranks (threads of this process) is joined by real FramedConns (the
// transports' framing: tags, mismatch detection, error frames) over pipes
// in memory (tests/common/mem_pipe.h) that move at most `cap` bytes a call.
#pragma once
#include <memory>
#include <vector>

#include "net/common/framed_conn.h"
#include "tests/common/mem_pipe.h"

namespace loopback {

// conns[r][p * nchannels + ch]: rank r's Conn to rank p on channel ch (null
// for p == r), the layout the executor's ExecEnv::conns expects.
using Conns = std::vector<std::vector<std::unique_ptr<flagcx::Conn>>>;

inline Conns connectAll(int nranks, int nchannels = 1, size_t cap = 48 << 10) {
  Conns c(static_cast<size_t>(nranks));
  for (auto &v : c) v.resize(static_cast<size_t>(nranks * nchannels));
  for (int a = 0; a < nranks; a++)
    for (int b = a + 1; b < nranks; b++)
      for (int ch = 0; ch < nchannels; ch++) {
        auto ab = std::make_shared<harness::Bytes>(), ba = std::make_shared<harness::Bytes>();
        std::vector<std::unique_ptr<flagcx::Pipe>> pa, pb;
        pa.push_back(std::make_unique<harness::MemPipe>(ab, ba, cap));
        pb.push_back(std::make_unique<harness::MemPipe>(ba, ab, cap));
        c[static_cast<size_t>(a)][static_cast<size_t>(b * nchannels + ch)] =
            std::make_unique<flagcx::FramedConn>("loop", flagcx::PeerDesc{a, b, ch, "loop"},
                                                 std::move(pa));
        c[static_cast<size_t>(b)][static_cast<size_t>(a * nchannels + ch)] =
            std::make_unique<flagcx::FramedConn>("loop", flagcx::PeerDesc{b, a, ch, "loop"},
                                                 std::move(pb));
      }
  return c;
}

}  // namespace loopback
