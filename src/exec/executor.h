// The executor: it runs one communicator's collectives and point-to-point
// operations on the flagcx engine.  An API call becomes a job on the
// caller's stream; the thread that drains the stream runs it when the
// communicator's issue order says so — collectives step by step through
// their compiled schedules, point-to-point operations all posted at once so
// that grouped sends and receives cannot deadlock whatever their order.
//
// The communicator (src/core) lends it the transports' Conns, the compiled
// schedules and the device adapter, and owns it; everything the executor
// needs while running (working buffers, mappings, the job pool, the flight
// recorder) it owns itself and frees when it goes.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/base.h"
#include "flagcx.h"

namespace flagcx {

class AlgoSet;
class Bootstrap;
class Conn;
class DeviceAdapter;
struct ExecState;

// How bytes move (see src/exec/state.h).
enum class ExecMode { Host, Staged, Direct };

// What the communicator lends the executor; it outlives the executor.
struct ExecEnv {
  int rank = 0, nranks = 0, nchannels = 1;
  DeviceAdapter *dev = nullptr;
  Bootstrap *bs = nullptr;                         // peer host names; direct-mode set-up
  std::vector<std::unique_ptr<Conn>> *conns = nullptr;  // [peer * nchannels + ch]; null for self
  const AlgoSet *algos = nullptr;
  bool sameHostShm = false;  // one host, every peer over shared memory
  // Connect to these peers (those of `conns` still null); each of them makes
  // the same call for this rank when it runs the same operation.
  std::function<flagcxResult_t(const std::vector<int> &)> connect;
};

class Executor {
 public:
  explicit Executor(const ExecEnv &env);
  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  // Collective over the communicator, once at init: pick the mode.  Direct
  // mode needs every rank to be able to map its peers' device memory
  // (`canDirect`: this rank's view, from the communicator); the ranks vote.
  // `known`: each rank's pid as the kernel proved it for another
  // communicator of the same processes (a shrink's parent), else proved here.
  flagcxResult_t setup(bool canDirect, const std::vector<pid_t> *known = nullptr);
  pid_t provenPid(int rank) const;  // as proved at setup; 0: another host, unproven
  ExecMode mode() const;
  // Deterministic mode (docs/DETERMINISM.md): the calls foldsInOrder names
  // give the rank-ordered left fold on every path.  Set before the first
  // collective (the communicator checks that).
  void setDeterministic(bool on);
  bool deterministic() const;
  // Whether this call folds in rank order here.
  bool ordered(const CollArgs &a) const;

  // Called by the API after validation: queue in the thread's open group
  // or run now.
  flagcxResult_t enqueueColl(const CollArgs &args, flagcxStream_t stream);
  flagcxResult_t enqueueP2P(bool isSend, void *buf, size_t bytes, int peer,
                            flagcxStream_t stream);

  // Collectives whose share per rank is at most this many bytes go through
  // the shared block of a one-host communicator (src/exec/small.cc); 0 when
  // none is used.
  size_t smallBytes() const;
  uint64_t smallCalls() const;  // collectives that took the shared block (tests)
  uint64_t asyncCalls() const;  // staged calls that returned at once, stream-ordered (tests)
  uint64_t shmDirectCalls() const;  // collectives done straight between buffers (tests)
  uint64_t shmDirectOverlaps() const;  // ... where peers started before a staged input was down (tests)
  int inFlight() const;                  // jobs enqueued and not finished
  flagcxResult_t asyncError() const;     // the first failure of a job
  std::string lastError() const;         // its log line
  // Fail running and queued work fast (abort); never blocks.
  void abort();
  bool aborting() const;
  // An error frame on every connection, so that peers waiting on this rank
  // fail now (revoke); only while no job runs.
  void poisonPeers();
  // Wait for every enqueued job: until FLAGCX_TIMEOUT, or 2 s after abort().
  // false when some are still running (the caller must then not free what
  // they use).
  bool drain();

 private:
  std::unique_ptr<ExecState> s_;
};

// Thread-wide group brackets (flagcxGroupStart/End): the jobs of every
// communicator used inside a group are launched together at the end.
flagcxResult_t groupStart();
flagcxResult_t groupEnd();
int groupDepth();

}  // namespace flagcx
