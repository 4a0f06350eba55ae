// The communicator: ranks, bootstrap, transports, and the order in which
// stream-enqueued operations run.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "adapters/device/adapter.h"
#include "base/backoff.h"
#include "rendezvous/bootstrap.h"
#include "core/flight.h"
#include "flagcx.h"
#include "net/net.h"

namespace flagcx {
class AlgoSet;
class CclAdapter;
struct Job;
struct Xfer;
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
  std::unique_ptr<flagcx::Transport> shm, sock;
  // conns[peer * nchannels + ch]; empty for self.
  std::vector<std::unique_ptr<flagcx::Conn>> conns;
  std::unique_ptr<flagcx::AlgoSet> algos;
  std::unique_ptr<flagcx::CclAdapter> ccl;  // vendor pass-through, when homogeneous

  // Stream-enqueued work runs in issue order across all streams: an
  // operation takes a ticket when enqueued and runs when its turn comes.
  std::atomic<uint64_t> nextTicket{0};
  std::atomic<uint64_t> doneTicket{0};
  std::atomic<int> asyncError{flagcxSuccess};
  std::atomic<bool> aborting{false};
  std::atomic<int> inFlight{0};  // enqueued operations not yet finished
  std::mutex mu;
  std::string lastError;
  flagcx::FlightRecorder flight;
  uint64_t collSeq = 0;  // collectives issued (same sequence on every rank)
  uint64_t curTag = 0;   // tag of the operation the executor runs (for error frames)
  std::vector<flagcx::Job *> freeJobs;  // recycled stream work (under mu)

  // Reused by the executor (only one operation runs at a time).
  std::vector<char> bufScratch, bufLanding, bufInPlace, bufInAlt, bufOutAlt;
  std::vector<char> bufStageIn, bufStageOut;  // host copies of device buffers
  bool staged = false;  // buffers live on a device: stage through host memory
  // Direct mode (src/core/enqueue.cc): every rank on this host with a device
  // adapter that maps peers' memory (CUDA IPC); payloads go device to device,
  // only small control messages through the transports.
  bool direct = false;
  // Device working buffers.  They grow on the caller's thread when work is
  // enqueued (reserveDirect): allocating device memory may wait for every
  // stream, including a user's stream that the engine holds, so the progress
  // thread must not allocate.  Outgrown buffers are freed at destroy.
  struct DevBuf {
    std::atomic<char *> p{nullptr};
    std::atomic<size_t> cap{0};
  };
  DevBuf dScratch, dInPlace, dInAlt, dOutAlt, dStageIn, dStageOut;
  std::mutex dMu;                 // serializes growth (callers' threads)
  std::vector<void *> dRetired;
  // Host staging without direct mode: page-locked copies of device buffers
  // (grown on the caller's thread too: cudaHostAlloc may wait for streams).
  DevBuf pStageIn, pStageOut;
  std::vector<void *> pRetired;
  // Pipelined staging (runCollStaged): the host copy of the input arrives
  // slice by slice; slice k may be read once marks[k] is reached.  Sends
  // from it wait for their slices, not for the whole copy.
  struct StageGate {
    const char *base = nullptr;
    size_t bytes = 0, slice = 1, ready = 0;  // slices [0, ready) are known copied
    std::vector<uint64_t> marks;
  } gate;
  // ... and the output goes back to the device chunk by chunk, as each
  // chunk's last write completes.
  struct StageSink {
    char *host = nullptr, *dev = nullptr;
    size_t bytes = 0;
    bool used = false;  // runColl copied the whole output back
  } sink;
  // Small messages go through each rank's outbox: one device buffer per
  // rank, mapped by every peer at init.  Large ones are read from the
  // sender's own buffer, mapped on first use (ipcImports).
  char *outbox = nullptr;
  size_t outboxBytes = 0;
  std::vector<char *> peerOutbox;  // [peer], mapped at init
  std::unordered_map<std::string, void *> ipcImports;  // peer allocation id -> mapped base
  std::vector<char> directCtrl;
  std::vector<flagcx::Xfer> directXfers;
  std::vector<int> scratchCounts;
  std::vector<char> scratchFlags;
  std::vector<size_t> scratchDispls;
  std::vector<int> scratchLastWrite;
  std::vector<flagcx::Xfer> scratchXfers;

  flagcx::Conn *conn(int peer, int ch = 0) {
    return conns[static_cast<size_t>(peer * nchannels + ch)].get();
  }
};

namespace flagcx {

// Live-communicator registry: catches use of a destroyed or aborted comm.
bool commIsLive(const flagcxComm *comm);
flagcxResult_t commInit(flagcxComm **out, int nranks, const flagcxUniqueId &id, int rank);
flagcxResult_t commDestroy(flagcxComm *comm, bool abort);

// Wait until it is `ticket`'s turn (bounded by FLAGCX_TIMEOUT).
flagcxResult_t commWaitTurn(flagcxComm *comm, uint64_t ticket);
void commFinishTurn(flagcxComm *comm, uint64_t ticket, flagcxResult_t res);

}  // namespace flagcx
