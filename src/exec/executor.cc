// The executor's frame: issue order (tickets), the job pool, groups, and
// running one job.  The parts that move bytes are in the files state.h lists.
#include "exec/executor.h"

#include <algorithm>

#include "base/base.h"
#include "exec/copy_worker.h"
#include "exec/shm_stage.h"
#include "exec/state.h"
#include "rendezvous/rendezvous.h"
#include "net/net.h"

namespace flagcx {

// --- Working buffers ---

GrowBuf::~GrowBuf() {
  auto release = [&](void *p) {
    if (mem_ == Mem::Pinned) {
      dev_->freePinned(p);
    } else if (mem_ == Mem::Shared) {
      dev_->hostUnregister(p);  // (a no-op where hostRegister failed)
      host::memFree(p);
    } else {
      dev_->freeDevice(p);
    }
  };
  if (p_.load()) release(p_.load());
  for (void *p : retired_) release(p);
}

char *GrowBuf::grow(size_t bytes) {
  if (char *p = ifFits(bytes)) return p;
  std::lock_guard<std::mutex> lk(mu_);
  size_t cap = cap_.load();
  if (cap >= bytes) return p_.load();
  cap = std::max<size_t>(cap, 2 << 20);
  while (cap < bytes) cap *= 2;
  void *p = nullptr;
  flagcxResult_t r = mem_ == Mem::Pinned   ? dev_->allocPinned(&p, cap)
                     : mem_ == Mem::Device ? dev_->allocDevice(&p, cap)
                                           : host::memAlloc(&p, cap, flagcxMemDevice);
  if (r != flagcxSuccess || !p) return nullptr;
  if (mem_ == Mem::Shared) (void)dev_->hostRegister(p, cap);
  if (p_.load()) retired_.push_back(p_.load());
  p_.store(static_cast<char *>(p), std::memory_order_release);
  cap_.store(cap, std::memory_order_release);
  return static_cast<char *>(p);
}

SchedulePath::SchedulePath(ExecState *s)
    : staged(s->dev), direct(s->dev), s_(s) {
  int64_t ct = paramInt(Param::COPY_THREAD);
  if (ct == 1 || (ct == -2 && s->env.bs && coresPerLocalRank(*s->env.bs) >= 4))
    copyThread = std::make_unique<CopyWorker>();
}

SchedulePath::~SchedulePath() = default;

flagcxResult_t SchedulePath::run(CollItem &ci) {
  return s_->mode == ExecMode::Host || ci.hostBufs ? runColl(s_, ci) : runCollStaged(s_, ci);
}

ExecState::ExecState(const ExecEnv &e)
    : rank(e.rank), nranks(e.nranks), nchannels(e.nchannels), dev(e.dev), env(e) {
  flight.init(rank, nranks,
              static_cast<size_t>(std::max<int64_t>(1, paramInt(Param::FLIGHT_RECORDER_SIZE))));
  allConnected = everyPeerConnected(this);
  sched = std::make_unique<SchedulePath>(this);
}

ExecState::~ExecState() {
  releaseDirect(this);
  dev->releaseLane(this);  // the communicator drained every job first
}

namespace {

struct GroupState {
  int depth = 0;
  std::vector<Job *> jobs;
};
thread_local GroupState t_group;

Job *takeJob(ExecState *s) {
  Job *j = nullptr;
  {
    std::lock_guard<std::mutex> lk(s->mu);
    if (!s->freeJobs.empty()) {
      j = s->freeJobs.back();
      s->freeJobs.pop_back();
    } else {
      s->jobs.push_back(std::make_unique<Job>());
      j = s->jobs.back().get();
    }
  }
  j->ex = s;
  j->ncolls = 0;
  j->p2p.clear();
  j->stream = nullptr;
  return j;
}

void returnJob(Job *j) {
  std::lock_guard<std::mutex> lk(j->ex->mu);
  j->ex->freeJobs.push_back(j);
}

// Wait until it is `ticket`'s turn (bounded by FLAGCX_TIMEOUT).
flagcxResult_t waitTurn(ExecState *s, uint64_t ticket) {
  if (s->doneTicket.load(std::memory_order_acquire) == ticket) return flagcxSuccess;
  Backoff wait;
  while (s->doneTicket.load(std::memory_order_acquire) != ticket) {
    if (s->aborting) return flagcxRemoteError;
    if (wait.expired()) {
      WARN(kColl, "rank %d: operation #%llu waited FLAGCX_TIMEOUT for operation #%llu (on "
           "another stream) to finish", s->rank, static_cast<unsigned long long>(ticket),
           static_cast<unsigned long long>(s->doneTicket.load()));
      return flagcxSystemError;
    }
    wait.idle();
  }
  return flagcxSuccess;
}

void finishTurn(ExecState *s, uint64_t ticket, flagcxResult_t res) {
  if (res != flagcxSuccess) {
    int expected = flagcxSuccess;
    s->asyncError.compare_exchange_strong(expected, res);
    std::lock_guard<std::mutex> lk(s->mu);
    s->lastError = lastErrorText();
  }
  s->doneTicket.store(ticket + 1, std::memory_order_release);
}

// This rank gave up on an operation: tell every peer at once (an error frame
// on each connection), so that ranks waiting on it fail now, naming the
// cause, instead of at FLAGCX_TIMEOUT.  Mismatches keep their code.
void poisonPeers(ExecState *s, flagcxResult_t res) {
  Conn::Mismatch note;
  if (s->block) std::swap(note, s->block->note);
  for (auto &c : *s->env.conns)
    if (!note.mine && c && c->mismatch().mine) {
      note = c->mismatch();
      break;
    }
  flagcxResult_t code = res == flagcxInvalidUsage ? flagcxInvalidUsage : flagcxRemoteError;
  uint64_t mine = note.mine ? note.mine : s->curTag;
  for (auto &c : *s->env.conns)
    if (c) c->poison(code, mine, note.theirs);
  smallPoison(s);
}

// The one-host paths that may take calls (none without a block), then the
// schedule path; the block hears of every call it does not take.
flagcxResult_t runCollIn(ExecState *s, CollItem &c) {
  for (CollPath *p : s->oneHost)
    if (p->fits(c)) return p->run(c);
  if (s->block) s->block->passOver(c);
  return s->sched->run(c);
}

flagcxResult_t runP2PIn(ExecState *s, std::vector<P2PItem> &items) {
  if (s->block) s->block->ringsUsed = true;
  switch (s->mode) {
    case ExecMode::Host: return runP2P(s, items);
    case ExecMode::Staged: return runP2PStaged(s, items);
    case ExecMode::Direct: return runP2PDirect(s, items);
  }
  return flagcxInternalError;
}

flagcxResult_t runJob(void *arg) {
  Job *j = static_cast<Job *>(arg);
  ExecState *s = j->ex;
  logSetRank(s->rank);
  TRACE(kColl, "rank %d: job #%llu starts (%zu collective(s), %zu p2p)", s->rank,
        static_cast<unsigned long long>(j->ticket), j->ncolls, j->p2p.size());
  s->curTag = kP2PTag;
  flagcxResult_t res = waitTurn(s, j->ticket);
  for (size_t k = 0; k < j->ncolls && res == flagcxSuccess; k++) {
    CollItem &c = j->colls[k];
    c.flight = nullptr;
    res = runCollIn(s, c);
    s->flight.end(c.flight, res == flagcxSuccess);
  }
  if (res == flagcxSuccess && !j->p2p.empty()) {
    size_t bytes = 0;
    for (auto &p : j->p2p) bytes += p.bytes;
    FlightEntry *fe = s->flight.begin(j->ticket, "p2p", "-", bytes, -1, -1);
    res = runP2PIn(s, j->p2p);
    s->flight.end(fe, res == flagcxSuccess);
  }
  if (res != flagcxSuccess) {
    s->flight.dump(flagcxGetErrorString(res));
    poisonPeers(s, res);
  }
  finishTurn(s, j->ticket, res);
  returnJob(j);
  s->inFlight.fetch_sub(1);
  return res;
}

// Grow what the job will need on this (the caller's) thread, then hand it
// to its stream.
flagcxResult_t launch(Job *j) {
  ExecState *s = j->ex;
  TRACE(kColl, "rank %d: launching job (%zu collective(s))", s->rank, j->ncolls);
  flagcxResult_t res = flagcxSuccess;
  if (asyncLaunch(j, runJob, &res)) return res;  // a staged rank's small call: returns at once
  if (s->mode == ExecMode::Direct) {
    flagcxResult_t r = reserveDirect(j);
    if (r != flagcxSuccess) {
      returnJob(j);
      return r;
    }
  } else if (s->mode == ExecMode::Staged) {
    reserveStaged(j);
  }
  j->ticket = s->nextTicket.fetch_add(1);
  s->inFlight.fetch_add(1);
  // Only small-block collectives are quick (no schedule, no transport).
  bool quick = s->blockTakesCalls && j->p2p.empty() && j->ncolls > 0;
  for (size_t k = 0; quick && k < j->ncolls; k++) quick = s->block->fits(j->colls[k]);
  return s->dev->enqueue(j->stream, StreamTask{runJob, j, s, quick});
}

Job *groupJob(ExecState *s, flagcxStream_t stream) {
  for (Job *j : t_group.jobs)
    if (j->ex == s) {
      if (j->stream != stream) {
        // One job runs on one stream; the group's first stream carries it.
        WARN(kP2P, "rank %d: a group uses several streams on one communicator; all its "
             "operations run on the first one", s->rank);
      }
      return j;
    }
  Job *j = takeJob(s);
  j->stream = stream;
  t_group.jobs.push_back(j);
  return j;
}

}  // namespace

int groupDepth() { return t_group.depth; }

flagcxResult_t groupStart() {
  t_group.depth++;
  return flagcxSuccess;
}

flagcxResult_t groupEnd() {
  if (--t_group.depth > 0) return flagcxSuccess;
  flagcxResult_t res = flagcxSuccess;
  // One adapter per process: its batch lets every job of the group start
  // before any is waited for or run inline (ranks of this process in one
  // group wait for each other).  A single job needs none.
  DeviceAdapter *dev = t_group.jobs.size() > 1 ? t_group.jobs.front()->ex->dev : nullptr;
  if (dev) dev->batchBegin();
  for (Job *j : t_group.jobs) {
    if (res != flagcxSuccess) {
      returnJob(j);
      continue;
    }
    res = launch(j);
  }
  t_group.jobs.clear();
  if (dev) {
    flagcxResult_t r = dev->batchEnd();
    if (res == flagcxSuccess) res = r;
  }
  return res;
}

Executor::Executor(const ExecEnv &env) : s_(std::make_unique<ExecState>(env)) {}
Executor::~Executor() = default;

pid_t Executor::provenPid(int rank) const { return s_->provenPid[static_cast<size_t>(rank)]; }

flagcxResult_t Executor::setup(bool canDirect, const std::vector<pid_t> *known) {
  // A host rank runs as a staged one under the emulated copy engine (tests).
  bool host = s_->dev->kind() == DeviceKind::Host && paramInt(Param::HOST_COPY_ENGINE_NS) == 0;
  s_->mode = host ? ExecMode::Host : ExecMode::Staged;
  // Which ranks of this host are which process, on the kernel's word: what
  // a peer says about its host and pid only chooses whom to ask.
  const auto &peers = s_->env.bs->peers();
  std::vector<int> local;
  for (int r = 0; r < s_->nranks; r++)
    if (r != s_->rank && peers[static_cast<size_t>(r)].hostHash == peers[static_cast<size_t>(s_->rank)].hostHash)
      local.push_back(r);
  std::vector<pid_t> pids;
  if (known) {
    for (int r : local) pids.push_back((*known)[static_cast<size_t>(r)]);
  } else {
    FLAGCX_CHECK(provePeers(*s_->env.bs, local, &pids));
  }
  s_->provenPid.assign(static_cast<size_t>(s_->nranks), 0);
  s_->provenPid[static_cast<size_t>(s_->rank)] = getpid();
  for (size_t i = 0; i < local.size(); i++) s_->provenPid[static_cast<size_t>(local[i])] = pids[i];
  // Every rank votes, even one that cannot: the vote is collective.
  FLAGCX_CHECK(setupDirect(s_.get(), canDirect));
  if (s_->mode == ExecMode::Staged && paramInt(Param::STAGE_SLICE_SIZE) <= 0) probeStaging(s_.get());
  return setupSmall(s_.get(), s_->env.sameHostShm);
}

ExecMode Executor::mode() const { return s_->mode; }
void Executor::setDeterministic(bool on) { s_->deterministic = on; }
bool Executor::deterministic() const { return s_->deterministic; }
bool Executor::ordered(const CollArgs &a) const { return s_->deterministic && foldsInOrder(a); }

flagcxResult_t Executor::enqueueP2P(bool isSend, void *buf, size_t bytes, int peer,
                                    flagcxStream_t stream) {
  bool implicit = t_group.depth == 0;
  if (implicit) groupStart();
  groupJob(s_.get(), stream)->p2p.push_back({isSend, buf, bytes, peer});
  return implicit ? groupEnd() : flagcxSuccess;
}

flagcxResult_t Executor::enqueueColl(const CollArgs &args, flagcxStream_t stream) {
  bool implicit = t_group.depth == 0;
  if (implicit) groupStart();
  Job *j = groupJob(s_.get(), stream);
  // Reuse a pooled item (and its vector's capacity): no allocation per call.
  if (j->ncolls == j->colls.size()) j->colls.emplace_back();
  CollItem &ci = j->colls[j->ncolls++];
  ci.a = args;
  ci.seq = s_->collSeq++;
  ci.flight = nullptr;
  ci.ordered = ordered(args);
  ci.hostBufs = false;
  if (args.op == OpKind::AlltoAllv) {
    size_t n = static_cast<size_t>(s_->nranks);
    ci.v.resize(4 * n);
    std::copy(args.sendcounts, args.sendcounts + n, ci.v.begin());
    std::copy(args.sdispls, args.sdispls + n, ci.v.begin() + static_cast<long>(n));
    std::copy(args.recvcounts, args.recvcounts + n, ci.v.begin() + static_cast<long>(2 * n));
    std::copy(args.rdispls, args.rdispls + n, ci.v.begin() + static_cast<long>(3 * n));
  }
  return implicit ? groupEnd() : flagcxSuccess;
}

size_t Executor::smallBytes() const { return smallMaxBytes(s_.get()); }
uint64_t Executor::smallCalls() const { return flagcx::smallCalls(s_.get()); }
uint64_t Executor::asyncCalls() const { return flagcx::asyncCalls(s_.get()); }
uint64_t Executor::shmDirectCalls() const { return flagcx::shmDirectCalls(s_.get()); }
uint64_t Executor::shmDirectOverlaps() const { return flagcx::stageOverlaps(s_.get()); }
int Executor::inFlight() const { return s_->inFlight.load(); }
flagcxResult_t Executor::asyncError() const {
  return static_cast<flagcxResult_t>(s_->asyncError.load());
}
std::string Executor::lastError() const {
  std::lock_guard<std::mutex> lk(s_->mu);
  return s_->lastError;
}
void Executor::abort() { s_->aborting = true; }
bool Executor::aborting() const { return s_->aborting.load(); }
void Executor::poisonPeers() { flagcx::poisonPeers(s_.get(), flagcxRemoteError); }

bool Executor::drain() {
  Backoff wait;
  auto abortDeadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (s_->inFlight.load() > 0) {
    if (s_->aborting ? std::chrono::steady_clock::now() > abortDeadline : wait.expired())
      return false;
    wait.idle();
  }
  return true;
}

}  // namespace flagcx
