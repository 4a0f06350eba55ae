// Which process a same-host peer is, on the kernel's word (provePeers in
// net/net.h is the door).  Code that reaches a peer's memory by pid
// (process_vm_readv, /proc/<pid>/fd) or treats a peer as a thread of this
// process (its addresses used as ours) must not take the pid from the peer:
// a stated pid could name any process this one may read, or this process
// itself.  So:
//
//   each rank listens on an abstract Unix socket (its network namespace)
//   and sends each peer, through the job's bootstrap, the socket's name and
//   a fresh 16-byte nonce; the peer connects and presents the nonce with its
//   rank and a MAC of both under the job's secret; the kernel's SO_PEERCRED
//   on that connection names the process that connected, with its pid as
//   this PID namespace sees it (0 when that process is not visible here)
//   and its uid, which must be ours.
//
// Only the process the bootstrap spoke to learns its nonce.  A stranger
// that connects (the name is visible in /proc/net/unix) proves nothing; nor
// does a member that hands its offer to another rank to present (the
// presenter states its own rank, and a rank of another job cannot make the
// MAC).  A peer that cannot connect (another network namespace, a full
// backlog) stays unproven: pid 0, so nothing of its memory is reached by
// pid.  At most npeers + kSpareAccepts connections are looked at, each read
// without waiting (its bytes were written before the peer said so through
// the bootstrap).
#pragma once
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "flagcx.h"
#include "rendezvous/rendezvous.h"

namespace flagcx {

class PeerProof {
 public:
  // What one peer is sent: where to connect, and its nonce.
  struct Offer {
    char sock[48];  // abstract socket name, without the leading NUL
    uint8_t nonce[16];
  };
  // What the peer writes on the connection.
  struct Presentation {
    uint8_t nonce[16];
    int32_t rank;  // the presenter's
    uint32_t pad;
    uint64_t mac;  // macOf(job secret, nonce and rank)
  };
  static_assert(sizeof(Offer) == 64 && sizeof(Presentation) == 32);

  PeerProof(const Secret &secret, int myRank) : secret_(secret), myRank_(myRank) {}
  ~PeerProof();
  // Listen for the given peers' ranks; false (one INFO line) where no Unix
  // socket can be made: every peer then stays unproven.
  bool listen(const std::vector<int> &peerRanks);
  Offer offer(size_t i) const;
  // Connect to a peer's listener and present its offer as this rank.  True
  // when the bytes went out whole.
  bool present(const Offer &theirs) const;
  // After peer i said it presented: the pid the kernel gave for the
  // connection that carried its nonce, rank and MAC, or 0 (unproven).
  pid_t collect(size_t i);

 private:
  void acceptSome();
  uint64_t macFor(const uint8_t *nonce, int32_t rank) const;
  Secret secret_;
  int myRank_;
  int fd_ = -1;
  std::string name_;
  std::vector<int> ranks_;
  std::vector<std::array<uint8_t, 16>> nonces_;
  std::vector<pid_t> proven_;  // [peer]: 0 until proven
  int accepted_ = 0;
};

}  // namespace flagcx
