// One-sided operations in software, over any transport's Conns: remote
// write, read, 8-byte store and signal (an atomic add on a counter the target
// keeps per source rank) into memory a peer exposed under a key.
//
// The target never calls anything: each rank runs one service thread that
// owns its one-sided Conns (a set made for this purpose, apart from the
// executor's), sends the requests the rank's callers submit, and applies the
// requests that arrive — a write lands straight in the exposed memory, after
// the target checked key and range; a read is answered from it; a signal is
// an atomic add.  Every request is acknowledged, so a completed write's bytes
// are in the target's memory.  Requests to one peer are applied in posting
// order.  Same-host peers with mapped memory skip all this (src/core).
//
// Wire: each message is a 40-byte header (rma::Hdr, net/common/rma_wire.h),
// followed for a write or a read's answer by its payload as a second message.
// An idle Conn carries a no-op now and then, so that its always-posted header
// receive never trips the FLAGCX_TIMEOUT stall check; a rank closing its
// engine says goodbye first.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "net/net.h"

namespace flagcx {

// Completion of a group of operations.  `left` counts the operations not
// complete; the engine decrements it (release) and records the first
// failure in `error`.  Two kinds: a waiter's object (not `owned`), which the
// engine never touches after the decrement that takes `left` to 0 (its
// waiter may be gone by then), and an `owned` one, which the engine deletes
// then, first growing `counter` by one (a batch is one operation) when it
// is set and nothing failed.  `counter` is only honoured with `owned`.
struct RmaDone {
  std::atomic<int64_t> left{0};
  std::atomic<int> error{flagcxSuccess};
  std::atomic<uint64_t> *counter = nullptr;
  std::atomic<int> *errorSink = nullptr;  // also gets the first failure
  bool owned = false;
};

// Record one operation of `d` as complete with `rc` (what the engine does;
// callers use it for the guard count they add while posting a batch).
void rmaComplete(RmaDone *d, int rc);

class IbRma;

// Where an operation lands in a peer reached by native RDMA (verbs): the
// address and remote key the peer published at registration.
struct RmaRemote {
  uint64_t addr = 0;
  uint32_t rkey = 0;
};

class RmaEngine {
 public:
  // conns[peer]: the Conn to each peer served by this engine (null for self
  // and unserved peers).  signals[r] counts the signals received from rank r.
  // `native` (may be null) carries operations to the peers it serves as
  // RDMA WRITE / READ / FETCH_ADD when the caller passes an RmaRemote.
  static std::unique_ptr<RmaEngine> create(int rank, int nranks,
                                           std::vector<std::unique_ptr<Conn>> conns,
                                           std::atomic<uint64_t> *signals, size_t signalStride,
                                           std::unique_ptr<IbRma> native);
  virtual ~RmaEngine() = default;

  // Memory that peers may write and read under `key` (withdraw before it is
  // freed; requests for a withdrawn key fail the requesting peer).
  // *rkey: the remote key native peers need (0 without native peers).
  virtual flagcxResult_t expose(uint32_t key, void *base, uint64_t size, uint32_t *rkey) = 0;
  virtual void withdraw(uint32_t key) = 0;

  // Post one operation (the caller counted it in done->left, and checked the
  // range against the size the peer registered).  src/dst stay valid until
  // the operation completes.
  // `remote` (native peers only; null = as a message): where it lands.
  virtual void put(int peer, const void *src, uint64_t len, uint32_t key, uint64_t off,
                   RmaDone *done, const RmaRemote *remote = nullptr) = 0;
  virtual void get(int peer, void *dst, uint64_t len, uint32_t key, uint64_t off,
                   RmaDone *done, const RmaRemote *remote = nullptr) = 0;
  virtual void putValue(int peer, uint64_t value, uint32_t key, uint64_t off, RmaDone *done) = 0;
  virtual void signal(int peer, uint64_t add, RmaDone *done,
                      const RmaRemote *remote = nullptr) = 0;
  // Whether operations to `peer` can go as native RDMA.
  virtual bool native(int peer) const = 0;

  // Whether the peer is unreachable (its Conn failed, or it closed its
  // engine); operations to it fail at once.
  virtual bool peerGone(int peer) const = 0;
  virtual bool serves(int peer) const = 0;
};

// How device memory is named for the NIC: a dma-buf fd covering [p, p+len)
// with p's offset in it; -1 for device memory without one (then the NIC
// registers it as peer memory); -2 for host memory (IbRma::dmabuf).
using RmaDmabuf = std::function<int(const void *p, size_t len, uint64_t *offset)>;

// The engine of a communicator: RmaEngine::create over `conns`, with native
// RDMA (RDMA WRITE / READ / FETCH_ADD) to `ibPeers` when `ib` is the verbs
// transport ibSplitPeers made; without one, or with no such peers, all goes
// through the Conns.  Collective among `ibPeers` (each lists this rank).
flagcxResult_t makeRmaEngine(int rank, int nranks, std::vector<std::unique_ptr<Conn>> conns,
                             std::atomic<uint64_t> *signals, size_t signalStride, Transport *ib,
                             Bootstrap &bs, const std::vector<int> &ibPeers, RmaDmabuf dmabuf,
                             std::unique_ptr<RmaEngine> *out);

}  // namespace flagcx
