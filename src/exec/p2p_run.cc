// A group of sends and receives: every message posted at once, so that
// grouped operations cannot deadlock whatever their order.  Sends to self
// meet receives from self in order.
#include <cstring>
#include <vector>

#include "base/base.h"
#include "exec/state.h"
#include "net/net.h"

namespace flagcx {

flagcxResult_t runP2P(ExecState *s, std::vector<P2PItem> &items) {
  // Sends and receives to oneself pair up in order.
  std::vector<P2PItem *> selfSends, selfRecvs;
  if (!s->allConnected) {
    std::vector<int> peers;
    for (const auto &it : items) peers.push_back(it.peer);
    FLAGCX_CHECK(connectFor(s, peers));
  }
  std::vector<Xfer> &xs = s->sched->scratchXfers;
  xs.clear();
  for (auto &it : items) {
    if (it.peer == s->rank) {
      (it.isSend ? selfSends : selfRecvs).push_back(&it);
      continue;
    }
    Xfer x{};
    x.conn = s->conn(it.peer, 0);
    x.isSend = it.isSend;
    x.buf = static_cast<char *>(it.buf);
    x.bytes = it.bytes;
    x.tag = kP2PTag;
    x.peer = it.peer;
    xs.push_back(x);
  }
  if (selfSends.size() != selfRecvs.size()) {
    WARN(kP2P, "rank %d: %zu send(s) to self but %zu receive(s) from self in one group",
         s->rank, selfSends.size(), selfRecvs.size());
    return flagcxInvalidUsage;
  }
  for (size_t i = 0; i < selfSends.size(); i++) {
    if (selfSends[i]->bytes != selfRecvs[i]->bytes) {
      WARN(kP2P, "rank %d: send to self of %zu bytes meets a receive of %zu bytes", s->rank,
           selfSends[i]->bytes, selfRecvs[i]->bytes);
      return flagcxInvalidUsage;
    }
    if (!selfSends[i]->bytes || selfSends[i]->buf == selfRecvs[i]->buf) continue;
    if (s->direct())
      FLAGCX_CHECK(s->dev->copyAsync(selfRecvs[i]->buf, selfSends[i]->buf, selfSends[i]->bytes));
    else if (gateWait(s, static_cast<const char *>(selfSends[i]->buf), selfSends[i]->bytes) == flagcxSuccess)
      memmove(selfRecvs[i]->buf, selfSends[i]->buf, selfSends[i]->bytes);
    else
      return flagcxSystemError;
  }
  if (s->direct()) {
    FLAGCX_CHECK(s->dev->flush());
    return runDirectXfers(s, xs, flagcxUint8, flagcxSum, "send/recv");
  }
  return runXfers(s, xs, flagcxUint8, flagcxSum, "send/recv");
}

}  // namespace flagcx
