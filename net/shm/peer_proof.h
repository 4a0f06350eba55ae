// Which process a same-host peer is, on the kernel's word.  The shm
// transport reads a peer's memory (process_vm_readv, /proc/<pid>/fd) by pid;
// a pid the peer merely states could name any process this one may read
// (another rank, any process of the user), which would make this rank read
// a third process's memory on a peer's say-so.  So the pid comes from here:
//
//   this rank listens on an abstract Unix socket (its network namespace)
//   and sends each peer, through the job's bootstrap, the socket's name and
//   a fresh 16-byte nonce; the peer connects and writes the nonce back; the
//   kernel's SO_PEERCRED on that connection names the process that
//   connected, with its pid as this PID namespace sees it (0 when the peer's
//   process is not visible here), and its uid, which must be ours.
//
// Only the process the bootstrap spoke to learns its nonce, so a stranger
// that connects (the name is visible in /proc/net/unix) proves nothing; a
// peer that cannot connect (another network namespace, a full backlog)
// stays unproven: no pid, so no reading of its memory and no pid liveness
// check (its rings still work).  At most kMaxAccepts connections are looked
// at per set-up, each read without waiting (its bytes were written before
// the peer said so through the bootstrap).
#pragma once
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "flagcx.h"

namespace flagcx {

class PeerProof {
 public:
  // What goes to one peer inside the shm set-up message.
  struct Offer {
    char sock[48];      // abstract socket name, without the leading NUL
    uint8_t nonce[16];
  };
  static_assert(sizeof(Offer) == 64);

  ~PeerProof();
  // Listen for npeers peers; false (one INFO line) where no Unix socket can
  // be made: every peer then stays unproven.
  bool listen(size_t npeers);
  Offer offer(size_t i) const;
  // The peer's side: connect to its listener and present the nonce it sent.
  // True when the bytes went out whole.
  static bool present(const Offer &theirs);
  // After peer i said it presented: the pid the kernel gave for the
  // connection that carried its nonce, or 0 (unproven).
  pid_t collect(size_t i);

 private:
  void acceptSome();
  int fd_ = -1;
  std::string name_;
  std::vector<std::array<uint8_t, 16>> nonces_;
  std::vector<pid_t> proven_;  // [peer]: 0 until proven
  int accepted_ = 0;
};

}  // namespace flagcx
