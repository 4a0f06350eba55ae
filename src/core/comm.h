// The communicator: who the ranks are and where they live, the clusters,
// the transports and their connections, the compiled schedules, and the
// back end that runs operations (a vendor pass-through or the executor).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "adapters/adapters.h"
#include "base/base.h"
#include "core/onesided.h"
#include "exec/exec.h"
#include "flagcx.h"
#include "net/net.h"
#include "rendezvous/rendezvous.h"

namespace flagcx {
class AlgoSet;
class CclAdapter;
}

struct flagcxComm {
  static constexpr uint64_t kMagic = 0x4d4d4f4358434746ull;
  uint64_t magic = kMagic;
  int rank = 0, nranks = 0;
  int localRank = 0, localRanks = 1, nNodes = 1;
  int nchannels = 1;
  int deviceIndex = 0;
  bool homogeneous = true;
  // Clusters: ranks grouped by device kind, or by FLAGCX_CLUSTER_SPLIT_LIST
  // (consecutive ranks, sizes as listed).  More than one cluster makes the
  // communicator heterogeneous (the engine, never a vendor CCL, runs it).
  std::vector<int> clusterOf;  // [rank]
  int nclusters = 1;
  flagcx::DeviceAdapter *dev = nullptr;
  std::unique_ptr<flagcx::Bootstrap> bs;
  std::unique_ptr<flagcx::Transport> shm, sock, ib;  // ib: null without verbs peers
  std::vector<flagcx::Transport *> via;  // [peer]: the transport that reaches it
  // conns[peer * nchannels + ch]; empty for self.
  std::vector<std::unique_ptr<flagcx::Conn>> conns;
  std::unique_ptr<flagcx::AlgoSet> algos;
  std::unique_ptr<flagcx::CclAdapter> ccl;  // vendor pass-through, when homogeneous

  // The engine: every collective without a vendor CCL; with one, the calls
  // the vendor cannot do our way (commColl).
  std::unique_ptr<flagcx::Executor> exec;
  // A collective was issued: deterministic mode is fixed from then on.
  std::atomic<bool> collIssued{false};
  // flagcxCommRevoke was called here: operations are refused from then on.
  std::atomic<bool> revoked{false};
  uint32_t children = 0;  // communicators made from this one (split, shrink, grow)
  std::mutex mu;          // guards lastError
  std::string lastError;  // what flagcxGetLastError(comm) returns
  // One-sided state, made by the first registration; declared last so that
  // it goes first (it uses the bootstrap, transports and device above).
  std::mutex osMu;
  std::unique_ptr<flagcx::OneSided> os;

  flagcx::Conn *conn(int peer, int ch = 0) {
    return conns[static_cast<size_t>(peer * nchannels + ch)].get();
  }
};

namespace flagcx {

// What a communicator made from a parent by split or shrink may take from
// it (src/core/elastic.cc, docs/ELASTIC.md).
struct ChildOf {
  flagcxComm *parent = nullptr;
  std::vector<int> members;  // parent ranks, in the child's order
  uint32_t childNo = 0;      // the parent's count of children, alike on every member
  bool shrink = false;       // the child's bootstrap is a view of the parent's
  bool takeConns = false;    // an abortive shrink whose parent drained
  // Learnt during the child's init (commChildFacts): whether any member's
  // parent reached a peer over verbs, and the child ranks whose parent's
  // Conns to this rank both ends hand on to the child.
  bool anyVerbs = true;
  std::vector<int> adoptWith;
};

// Live-communicator registry: catches use of a destroyed or aborted comm.
bool commIsLive(const flagcxComm *comm);
flagcxResult_t commInit(flagcxComm **out, int nranks, const flagcxUniqueId &id, int rank,
                        ChildOf *from = nullptr);
flagcxResult_t commDestroy(flagcxComm *comm, bool abort);
// Connect to the listed peers that have no connection yet (each of them
// must make the same call for this rank; bounded by FLAGCX_TIMEOUT).
flagcxResult_t commConnect(flagcxComm *comm, const std::vector<int> &peers);

// Communicators made from a parent (src/core/elastic.cc, docs/ELASTIC.md).
// Split: collective over the parent; color < 0 gives *out = nullptr.
flagcxResult_t commSplit(flagcxComm *parent, int color, int key, flagcxComm **out);
// Shrink: the survivors only, each with the same (checked) exclude list.
flagcxResult_t commShrink(flagcxComm *parent, const std::vector<int> &exclude, bool abort,
                          flagcxComm **out);
flagcxResult_t commGrowId(flagcxComm *parent, flagcxUniqueId *id);
// Existing ranks pass their parent (id may be null but on one of them), new
// ranks a null parent, the id and their rank.
flagcxResult_t commGrow(flagcxComm *parent, int nranks, const flagcxUniqueId *id, int rank,
                        flagcxComm **out);
flagcxResult_t commRevoke(flagcxComm *comm);
// A child's init (commInit with `from`; one allgather over the child): fills
// from->anyVerbs (when no member's parent reached a peer over verbs, no pair
// of the child can, and the verbs probe is left out) and from->adoptWith
// (a shrink: the members whose parent and this rank's drained after
// FLAGCX_SHRINK_ABORT and hold shm Conns to each other).
flagcxResult_t commChildFacts(flagcxComm *child, ChildOf *from);
// Then, its transports chosen: those Conns become the child's.  Neither end
// uses them before commInit's closing barrier, after which both have
// emptied their halves of the rings.
void commAdoptConns(flagcxComm *child, const ChildOf &from);

// The operations, after the API's checks: through the vendor pass-through
// when the communicator has one, except the collectives it cannot do our way
// (deterministic and 8-bit float reductions), else through the executor.
flagcxResult_t commColl(flagcxComm *comm, const CollArgs &args, flagcxStream_t stream);
// Deterministic mode for this communicator, before its first collective.
flagcxResult_t commSetDeterministic(flagcxComm *comm, bool on);
flagcxResult_t commP2P(flagcxComm *comm, bool isSend, void *buf, size_t bytes, int peer,
                       flagcxStream_t stream);

// Thread-wide group brackets (flagcxGroupStart/End): the outermost start opens
// the vendor library's group (when one is loaded) and then the executor's; the
// outermost end closes the vendor's first, then launches the executor's jobs
// of every communicator used inside the group together.
flagcxResult_t commGroupStart();
flagcxResult_t commGroupEnd();
int commGroupDepth();  // brackets open on this thread

// Wait for the operations in flight on `comm`: until FLAGCX_TIMEOUT, or 2 s
// after an abort; false when some still run.
bool commDrain(flagcxComm *comm);
flagcxResult_t commAsyncError(flagcxComm *comm);  // the first failure of an operation
std::string commAsyncErrorText(flagcxComm *comm);  // its log line ("" when none)

}  // namespace flagcx
