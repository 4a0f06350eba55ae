// The bootstrap: out-of-band TCP rendezvous and small messages between ranks.
// Every rank connects to the root named in the unique id, proves it knows the
// id's secret, and learns every other rank's address and host identity.  The
// rest of the library uses it for set-up exchanges (allgather, broadcast,
// barrier, tagged send/recv); it never carries collective payloads.
#pragma once
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rendezvous/socket.h"
#include "flagcx.h"

namespace flagcx {

struct PeerInfo {
  uint64_t hostHash = 0;   // equal on ranks of one host (FLAGCX_HOSTID overrides)
  int32_t pid = 0;
  int32_t deviceKind = 0;  // 0 host, 1 cuda
  int32_t deviceIndex = 0;
  int32_t deterministic = 0;  // this process's FLAGCX_DETERMINISTIC (core: one value per job)
  uint32_t pidNs = 0;      // pidNamespaceId(): where `pid` means something
  SockAddr bootAddr;       // where this rank's bootstrap listens
  char host[64] = {};      // host name, for messages
};

// Whether a's pid names the same process to b as to a: one host, one PID
// namespace (base/proc_ns.h).  Only then may b use a's pid.
inline bool pidsComparable(const PeerInfo &a, const PeerInfo &b) {
  return a.hostHash == b.hostHash && a.pidNs == b.pidNs;
}
// Two ranks in one process (threads of it).
inline bool sameProcess(const PeerInfo &a, const PeerInfo &b) {
  return pidsComparable(a, b) && a.pid == b.pid;
}

class Bootstrap {
 public:
  ~Bootstrap();
  // Collective over all ranks of the id: blocks until every rank arrived or
  // FLAGCX_TIMEOUT expires (the error then names the missing ranks).
  static flagcxResult_t create(const flagcxUniqueId &id, int rank, int nranks,
                               const PeerInfo &self, std::unique_ptr<Bootstrap> *out);
  // A bootstrap of `members` (ranks of this one, in the new order, this rank
  // among them) over this one's connections: no rendezvous, the same secret
  // and PeerInfo, its messages apart from every other bootstrap's over the
  // same connections (a space named by this one's and `childNo`, which every
  // member passes alike).  The connections are shared: this bootstrap and
  // the view may be released or aborted in any order (abort stops only the
  // caller's own calls), and ranks outside `members` are never reached.
  std::unique_ptr<Bootstrap> view(const std::vector<int> &members, uint32_t childNo) const;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const std::vector<PeerInfo> &peers() const { return peers_; }
  const Secret &secret() const { return secret_; }

  // Tagged point-to-point: a recv takes the oldest message from `peer` with
  // `tag` and requires its size to equal `size`.  Messages that arrive
  // before their recv wait, up to 16 MiB each and 64 MiB or 4096 messages
  // per peer; beyond that the peer's connection fails.
  flagcxResult_t send(int peer, uint32_t tag, const void *data, size_t size);
  flagcxResult_t recv(int peer, uint32_t tag, void *data, size_t size);
  // data holds nranks slots of `size` bytes; slot rank() is this rank's.
  flagcxResult_t allgather(void *data, size_t size);
  flagcxResult_t bcast(void *data, size_t size, int root);
  flagcxResult_t barrier();
  // Unblock and fail every pending and future call (used by abort).
  void abort();

 private:
  Bootstrap() = default;
  // A recv's one step: the message if it is here or can be read now.
  flagcxResult_t tryRecv(int peer, uint32_t tag, void *data, size_t size, Clock::time_point deadline,
                         bool *got, int *fd);
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared by the views over the same connections
  std::vector<int> map_;        // [rank]: the rank in impl_'s network
  uint32_t space_ = 0;          // what this bootstrap's messages carry
  std::atomic<bool> aborted_{false};
  int rank_ = 0, nranks_ = 0;
  Secret secret_{};
  std::vector<PeerInfo> peers_;
};

// Cores this process may use (its affinity mask) divided by the ranks of
// the communicator on its host, at least 1: the budget behind the "auto"
// of the socket helpers and the copy thread (FLAGCX_SOCKET_HELPERS,
// FLAGCX_COPY_THREAD).
int coresPerLocalRank(const Bootstrap &bs);

}  // namespace flagcx
