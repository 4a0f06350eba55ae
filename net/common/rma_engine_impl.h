// The software one-sided engine's insides, shared by its two files:
// rma_engine.cc (registration, submission, the service loop, native RDMA)
// and rma_target.cc (what the engine does with the messages peers send).
//
// What a peer can make this rank do (rma_wire.h has the format): write,
// read or add only inside the regions this rank exposed, each request
// checked (rma::checkRequest) before a byte moves; answers count only for
// requests this rank made.  Anything else cuts the peer (one WARN naming
// it).  A region being withdrawn is unreachable once withdraw() returns:
// a peer whose operation still moves its bytes is cut first (pins).
//
// Bounds per peer: at most kMaxOutstanding of this rank's requests wait for
// an answer, and this rank stops reading the peer's requests while more
// than kMaxOutstanding answers to it are queued (the peer does not read
// them).  A correct peer never has more outstanding, so it is never held
// back; a peer that floods requests without reading costs bounded memory
// and then stalls into FLAGCX_TIMEOUT.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "net/common/rma_wire.h"
#include "net/ibverbs/ib_rma.h"
#include "net/rma.h"

namespace flagcx::rma_detail {

using Clock = std::chrono::steady_clock;

constexpr int kMaxSends = 64;  // header+payload pairs in flight per Conn
// 1024 keeps a stream of small operations pipelined (a round trip over
// loopback is ~10 us) with ~100 KiB of queued answers per peer at most.
constexpr size_t kMaxOutstanding = 1024;
constexpr size_t kMaxNative = 64;  // operations posted per queue pair

struct Request {  // submitted by a caller, waiting for an answer
  rma::Hdr hdr;
  const void *src = nullptr;  // put payload
  void *dst = nullptr;        // get destination
  RmaDone *done = nullptr;
  Clock::time_point posted;
  bool native = false;        // as RDMA, to `remote`
  RmaRemote remote;
  // Its message is still with the Conn (a put's payload may still be read
  // from src): an answer that comes first is kept until the send is done.
  bool inConn = false;
  bool answered = false;
  int rc = flagcxSuccess;
};

struct Out {  // a message to send: header, optional payload
  rma::Hdr hdr;
  const void *payload = nullptr;
  int reqHdr = -1, reqPay = -1;
  bool pinned = false;  // payload is exposed memory (a get's answer) pinned under hdr.key
  uint32_t pinKey = 0;
};

struct Peer {
  std::unique_ptr<Conn> conn;  // released once the peer is gone
  bool served = false;         // had a Conn (fixed at creation)
  bool gone = false;
  int err = flagcxSuccess;
  std::deque<std::unique_ptr<Out>> outq;     // this rank's requests, in posting order
  std::deque<std::unique_ptr<Out>> replies;  // answers, no-ops, goodbye
  std::deque<std::unique_ptr<Out>> sending;
  size_t owed = 0;  // answers to the peer not yet handed to the Conn in full
  std::map<uint64_t, Request> waiting;  // by id: sent, answer not yet taken
  std::map<uint32_t, int> pins;         // exposed regions whose bytes its operations move
  int recvReq = -1;
  bool inPayload = false;
  rma::Hdr in{}, cur{};
  Clock::time_point lastSend;
  // Native RDMA: queued, and posted (by id) until their completion.
  std::deque<Request> natQ;
  std::map<uint64_t, Request> natWait;
};

class Engine final : public RmaEngine {
 public:
  Engine(int rank, int nranks, std::vector<std::unique_ptr<Conn>> conns,
         std::atomic<uint64_t> *signals, size_t stride, std::unique_ptr<IbRma> native);
  ~Engine() override;

  flagcxResult_t expose(uint32_t key, void *base, uint64_t size, uint32_t *rkey) override;
  void withdraw(uint32_t key) override;
  void put(int peer, const void *src, uint64_t len, uint32_t key, uint64_t off, RmaDone *done,
           const RmaRemote *remote) override {
    submit(peer, rma::Hdr{rma::kPut, key, off, len, 0, 0}, src, nullptr, done, remote);
  }
  void get(int peer, void *dst, uint64_t len, uint32_t key, uint64_t off, RmaDone *done,
           const RmaRemote *remote) override {
    submit(peer, rma::Hdr{rma::kGet, key, off, len, 0, 0}, nullptr, dst, done, remote);
  }
  void putValue(int peer, uint64_t value, uint32_t key, uint64_t off, RmaDone *done) override {
    submit(peer, rma::Hdr{rma::kValue, key, off, 8, 0, value}, nullptr, nullptr, done);
  }
  void signal(int peer, uint64_t add, RmaDone *done, const RmaRemote *remote) override {
    submit(peer, rma::Hdr{rma::kSignal, 0, 0, 0, 0, add}, nullptr, nullptr, done, remote);
  }
  bool native(int peer) const override { return native_ && native_->serves(peer); }
  bool peerGone(int peer) const override { return goneFlag_[static_cast<size_t>(peer)].load(); }
  bool serves(int peer) const override {
    return peer >= 0 && static_cast<size_t>(peer) < peers_.size() &&
           (peers_[static_cast<size_t>(peer)].served || native(peer));
  }

 private:
  void submit(int peer, rma::Hdr h, const void *src, void *dst, RmaDone *done,
              const RmaRemote *remote = nullptr);
  // rma_engine.cc
  flagcxResult_t postSends(int p, Clock::time_point now, bool *moved);
  flagcxResult_t retireSends(int p, bool *moved);
  flagcxResult_t progressPeer(int p, Clock::time_point now, bool *moved);
  flagcxResult_t progressNative(int p, Clock::time_point now, bool *moved);
  void takeSubmits();
  void loop();
  void shutdown();
  // rma_target.cc
  flagcxResult_t onHeader(int p);
  flagcxResult_t onAnswer(int p, const rma::Hdr &h);
  flagcxResult_t onPayload(int p, size_t bytes);
  void refuse(int p, const rma::Hdr &h, const rma::Verdict &v);
  void reply(Peer &pe, rma::Hdr h, const void *payload = nullptr, bool pinned = false,
             uint32_t pinKey = 0);
  void answer(int p, uint64_t id, int rc);
  void sendDone(int p, Out &o);
  void unpin(Peer &pe, uint32_t key);
  void failPeer(int p, int rc, bool quiet, bool cut = true);
  void cutWithdrawn();  // service thread: cut peers still moving bytes of withdrawn regions

  int rank_;
  std::atomic<uint64_t> *signals_;
  size_t stride_;
  std::vector<Peer> peers_;
  std::unique_ptr<IbRma> native_;
  std::unique_ptr<std::atomic<bool>[]> goneFlag_{new std::atomic<bool>[peers_.size()]()};
  std::map<uint64_t, Request> early_;  // ids queued, not posted yet
  uint64_t nextId_ = 1;
  Clock::duration timeout_, keepalive_;
  std::mutex qMu_;
  std::vector<std::pair<int, Request>> queue_;
  std::atomic<bool> pendingSubmits_{false};
  // Exposed regions; pinned_[key]: operations of peers moving bytes of that
  // region now; withdrawing_: keys whose withdraw() waits for pinned_ to drop.
  std::mutex regMu_;
  std::condition_variable regCv_;
  rma::Regions regions_;
  std::map<uint32_t, int> pinned_;
  std::set<uint32_t> withdrawing_;
  std::atomic<bool> withdrawAsked_{false};
  bool serviceDone_ = false;  // under regMu_: nothing will unpin any more
  std::mutex sleepMu_;
  std::condition_variable sleepCv_;
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace flagcx::rma_detail
