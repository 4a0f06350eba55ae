// Recovery by flagcxCommShrink, in real ranks over shm and over sockets: the
// ranks loop large allreduces, a victim is SIGKILLed, SIGSTOPped, stops
// calling (alive, idle) or aborts its communicator mid-loop; every survivor
// gets an error within FLAGCX_TIMEOUT + 2 s of that, shrinks with
// FLAGCX_SHRINK_ABORT excluding the victim(s) (over shm the child takes the
// parent's rings to the other survivors), goes on with correct results
// on the new communicator, and finds the buffers of its failed call as it
// left them (a stopped victim is woken first).  Then each survivor releases
// the parent (flagcxCommDestroy or flagcxCommAbort), which must return within
// FLAGCX_TIMEOUT whatever the victim does.
// ELASTIC_FULL=1 (the `full` suite) adds 8 ranks and 2 of 8 killed;
// REL_SEED=s replays a run.
// MR_DEVICE=cuda: every rank on the CUDA adapter with its buffers in device
// memory; MR_DEVICE=mixed: odd ranks so, even ranks on the host adapter with
// host buffers.  Without a usable CUDA adapter those runs are skipped.  On a
// GPU machine (B = a build with -Dcuda=enabled), SIGKILL recovery at 3 and 4
// ranks over shm and over sockets:
//   MR_DEVICE=cuda FLAGCX_USE_HETERO_COMM=1 $B/tests/multirank/elastic_shrink_test
//       --gtest_filter='Shrink.AfterKill'     (and MR_DEVICE=mixed)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/params.h"
#include "net/net.h"
#include "tests/common/device_mirror.h"
#include "tests/common/harness.h"
#include "tests/common/in_child.h"
#include "tests/common/inspect.h"

namespace {

constexpr int kTimeoutSec = 10;  // FLAGCX_TIMEOUT here: 2 cores shared with other work
constexpr double kErrorBound = kTimeoutSec + 2.0;
constexpr int kMaxRanks = 8;

// What happens to the victim(s).
enum class Fate { Kill, Stop, Idle, Abort };
// How the survivors release the parent after the shrink.
enum class Release { Destroy, Abort };

struct Shared {
  std::atomic<int> ready;       // ranks past init
  std::atomic<int> act;         // the victims' cue (Idle, Abort)
  std::atomic<int64_t> eventNs; // when the victims were signalled or acted
  std::atomic<int> shrunk;      // survivors done with the new communicator's work
  std::atomic<int> woken;       // a stopped victim was continued
  std::atomic<int> finished;    // survivors that returned
};

struct Config {
  int nranks;
  std::vector<int> victims;
  bool shm;
  Fate fate;
  Release release;
  size_t count;  // floats per allreduce
};

// MR_DEVICE=cuda: every rank on CUDA; MR_DEVICE=mixed: odd ranks.
bool onDevice(int rank) {
  if (!testdev::deviceRun()) return false;
  return std::strcmp(std::getenv("MR_DEVICE"), "mixed") != 0 || rank % 2 == 1;
}

// MR_DEVICE set: why no CUDA adapter works here ("" when one does), probed
// once in a child so that this process never starts CUDA before it forks.
const std::string &noDevice() {
  static const std::string why = [] {
    harness::ChildResult r = harness::inChild([] {
      setenv("FLAGCX_DEVICE", "cuda", 1);
      flagcx::paramsReload();
      flagcxDeviceHandle_t h = nullptr;
      if (flagcxDeviceHandleInit(&h) != flagcxSuccess)
        return std::string("no CUDA adapter: ") + flagcxGetLastError(nullptr);
      char vendor[128] = {};
      int n = 0;
      std::string v = h->getVendor(vendor) == flagcxSuccess ? vendor : "?";
      if (h->getDeviceCount(&n) != flagcxSuccess || n < 1 || v == "host")
        return "the CUDA adapter reports " + std::to_string(n) + " devices, vendor " + v;
      flagcxDeviceHandleFree(h);
      return std::string();
    });
    if (!r.clean) return "the CUDA probe " + r.how;
    return r.text.empty() ? r.text : "MR_DEVICE is set but " + r.text;
  }();
  return why;
}
#define SKIP_WITHOUT_DEVICE()                                           \
  if (testdev::deviceRun() && !noDevice().empty()) GTEST_SKIP() << noDevice()

// A rank's two buffers of floats: host vectors, and on a device rank device
// copies of them that the calls use (read back for the checks).
struct Buffers {
  std::vector<char> in, out;
  testdev::DeviceMirror mirror;
  flagcxDeviceHandle_t dev = nullptr;
  int init(int rank, size_t count) {
    std::vector<float> v(count, static_cast<float>(rank + 1));
    in.assign(reinterpret_cast<char *>(v.data()), reinterpret_cast<char *>(v.data() + count));
    out.assign(count * sizeof(float), 0);
    if (!onDevice(rank)) return 0;
    RANK_OK(flagcxDeviceHandleInit(&dev));
    RANK_CHECK(mirror.init(dev, in, out) == 0, "device buffers");
    return 0;
  }
  void *send() { return dev ? mirror.map(in.data()) : in.data(); }
  void *recv() { return dev ? mirror.map(out.data()) : out.data(); }
  flagcxResult_t allReduce(size_t count, flagcxComm_t comm) {
    return flagcxAllReduce(send(), recv(), count, flagcxFloat, flagcxSum, comm, nullptr);
  }
  // Element k of the output, from the device on a device rank.
  float outAt(size_t k) {
    float v = -1;
    if (!dev) return reinterpret_cast<const float *>(out.data())[k];
    dev->deviceMemcpy(&v, static_cast<char *>(recv()) + k * sizeof(float), sizeof(float),
                      flagcxMemcpyDeviceToHost, nullptr);
    return v;
  }
  // Both buffers as they are now (read back from the device).
  int snapshot(std::vector<char> *a, std::vector<char> *b) {
    if (dev) RANK_CHECK(mirror.back() == 0, "copying device buffers back");
    *a = in;
    *b = out;
    return 0;
  }
};

bool isVictim(const Config &c, int r) {
  return std::find(c.victims.begin(), c.victims.end(), r) != c.victims.end();
}

void waitFor(const std::atomic<int> &v, int want, int secs) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(secs);
  while (v.load() < want && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// A victim that stays alive: loops until its cue, then stops calling (Idle)
// or aborts (Abort), and leaves once the survivors are done.
int victimBody(const Config &c, flagcxComm_t comm, Buffers &b, Shared *sh) {
  while (!sh->act.load())
    if (b.allReduce(c.count, comm) != flagcxSuccess) return 3;
  sh->eventNs = harness::nowNs();
  if (c.fate == Fate::Abort) flagcxCommAbort(comm);
  waitFor(sh->finished, c.nranks - static_cast<int>(c.victims.size()), 120);
  if (c.fate == Fate::Idle) flagcxCommAbort(comm);
  return 0;
}

// The survivors' loop on the new communicator: correct sums of the
// survivors' parent ranks.
int continueOn(int rank, const Config &c, flagcxComm_t child) {
  Buffers b;
  if (int rc = b.init(rank, c.count)) return rc;
  float want = 0;
  for (int r = 0; r < c.nranks; r++)
    if (!isVictim(c, r)) want += static_cast<float>(r + 1);
  for (int i = 0; i < 5; i++) {
    RANK_OK(b.allReduce(c.count, child));
    for (size_t k : {size_t(0), c.count / 3, c.count - 1})
      RANK_CHECK(b.outAt(k) == want, "new communicator: elem %zu = %g, want %g", k, b.outAt(k),
                 want);
  }
  return 0;
}

int survivorBody(int rank, const Config &c, flagcxComm_t comm, Buffers &b, Shared *sh) {
  flagcxResult_t r = flagcxSuccess;
  float want = static_cast<float>(c.nranks * (c.nranks + 1) / 2);
  for (int i = 0; r == flagcxSuccess && i < 100000; i++) {
    r = b.allReduce(c.count, comm);
    RANK_CHECK(r != flagcxSuccess || b.outAt(c.count / 2) == want, "allreduce gave %g, want %g",
               b.outAt(c.count / 2), want);
  }
  RANK_CHECK(r != flagcxSuccess, "the allreduces never failed");
  int64_t ev = sh->eventNs.load();
  RANK_CHECK(ev != 0, "an error before the victim was harmed: %s", flagcxGetLastError(comm));
  double secs = static_cast<double>(harness::nowNs() - ev) / 1e9;
  RANK_CHECK(secs <= kErrorBound, "the error came %.2f s after the event", secs);
  std::vector<char> inAfter, outAfter, inEnd, outEnd;
  if (int rc = b.snapshot(&inAfter, &outAfter)) return rc;
  flagcxComm_t child = nullptr;
  std::vector<int> exclude = c.victims;
  const uint64_t adopted = flagcx::shmAdoptedConns();
  RANK_OK(flagcxCommShrink(comm, exclude.data(), static_cast<int>(exclude.size()), &child,
                           FLAGCX_SHRINK_ABORT));
  // Over shm the child took its parent's rings to the other survivors.
  RANK_CHECK(!c.shm || flagcx::shmAdoptedConns() > adopted, "the child made every shm "
             "connection anew");
  if (int rc = continueOn(rank, c, child)) return rc;
  sh->shrunk++;
  if (c.fate == Fate::Stop) {
    // The stopped victim runs again: give it a moment with the parent alive.
    waitFor(sh->woken, 1, 60);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (int rc = continueOn(rank, c, child)) return rc;
  }
  if (int rc = b.snapshot(&inEnd, &outEnd)) return rc;
  RANK_CHECK(inEnd == inAfter && outEnd == outAfter, "a buffer of the failed call changed after it "
             "returned");
  int64_t t0 = harness::nowNs();
  if (c.release == Release::Destroy) flagcxCommDestroy(comm);  // may report the failure
  else RANK_OK(flagcxCommAbort(comm));
  RANK_CHECK(harness::secsSince(t0) < kTimeoutSec, "releasing the parent took %.2f s",
             harness::secsSince(t0));
  RANK_OK(flagcxCommDestroy(child));
  return 0;
}

int rankBody(int rank, const Config &c, flagcxUniqueId *id, Shared *sh) {
  if (testdev::deviceRun()) {
    setenv("FLAGCX_DEVICE", onDevice(rank) ? "cuda" : "host", 1);
    flagcx::paramsReload();
  }
  Buffers b;
  if (int rc = b.init(rank, c.count)) return rc;
  flagcxComm_t comm = nullptr;
  RANK_OK(flagcxCommInitRank(&comm, c.nranks, id, rank));
  sh->ready++;
  if (isVictim(c, rank) && (c.fate == Fate::Idle || c.fate == Fate::Abort))
    return victimBody(c, comm, b, sh);
  if (isVictim(c, rank)) {  // killed or stopped by the harness
    for (;;) b.allReduce(c.count, comm);
  }
  int rc = survivorBody(rank, c, comm, b, sh);
  sh->finished++;
  return rc;
}

std::mt19937 &rng() { return harness::relRng(); }

// The harness's side: wait for the ranks, harm the victims, wake a stopped
// one once the survivors have shrunk, and make sure none stays behind.
void harm(const Config &c, Shared *sh, std::vector<pid_t> &pids) {
  int survivors = c.nranks - static_cast<int>(c.victims.size());
  waitFor(sh->ready, c.nranks, 60);
  std::this_thread::sleep_for(std::chrono::milliseconds(rng()() % 500));
  if (c.fate == Fate::Idle || c.fate == Fate::Abort) {
    sh->act = 1;
    return;
  }
  sh->eventNs = harness::nowNs();
  for (int v : c.victims) kill(pids[static_cast<size_t>(v)], c.fate == Fate::Kill ? SIGKILL : SIGSTOP);
  if (c.fate != Fate::Stop) return;
  waitFor(sh->shrunk, survivors, 90);
  for (int v : c.victims) kill(pids[static_cast<size_t>(v)], SIGCONT);
  sh->woken = 1;
  waitFor(sh->finished, survivors, 90);
  for (int v : c.victims) kill(pids[static_cast<size_t>(v)], SIGKILL);
}

std::string runOnce(const Config &c) {
  Shared *sh = harness::sharedBlock<Shared>();
  harness::Env env;
  env.vars = {{"FLAGCX_SHM_DISABLE", c.shm ? "0" : "1"},
              {"FLAGCX_TIMEOUT", std::to_string(kTimeoutSec)}};
  auto res = harness::run(c.nranks, [&](int rank, int, flagcxUniqueId *id) {
    return rankBody(rank, c, id, sh);
  }, env, 180, [&](std::vector<pid_t> &pids) { harm(c, sh, pids); });
  harness::freeShared(sh);
  std::string why;
  for (int r = 0; r < c.nranks; r++) {
    int st = res.status[static_cast<size_t>(r)];
    bool killed = isVictim(c, r) && (c.fate == Fate::Kill || c.fate == Fate::Stop);
    if (st != (killed ? 128 + SIGKILL : 0))
      why += "rank " + std::to_string(r) + ": status " + std::to_string(st) + "; ";
  }
  if (why.empty()) return why;
  std::string v;
  for (int x : c.victims) v += std::to_string(x) + " ";
  return std::to_string(c.nranks) + " ranks over " + (c.shm ? "shm" : "sockets") +
         ", victim(s) " + v + ": " + why;
}

Config make(int n, int nvictims, bool shm, Fate fate, Release rel = Release::Destroy) {
  Config c{n, {}, shm, fate, rel, size_t(1) << 20};
  while (static_cast<int>(c.victims.size()) < nvictims) {
    int v = static_cast<int>(rng()() % static_cast<unsigned>(n));
    if (!isVictim(c, v)) c.victims.push_back(v);
  }
  return c;
}

bool full() { return harness::envIs("ELASTIC_FULL", "1"); }

TEST(Shrink, AfterKill) {
  SKIP_WITHOUT_DEVICE();
  std::vector<int> sizes = full() ? std::vector<int>{3, 4, 8} : std::vector<int>{3, 4};
  for (int n : sizes)
    for (bool shm : {true, false}) {
      std::string why = runOnce(make(n, 1, shm, Fate::Kill));
      EXPECT_TRUE(why.empty()) << why;
    }
}

TEST(Shrink, TwoKilled) {
  SKIP_WITHOUT_DEVICE();
  int n = full() ? kMaxRanks : 4;
  for (bool shm : {true, false}) {
    std::string why = runOnce(make(n, 2, shm, Fate::Kill));
    EXPECT_TRUE(why.empty()) << why;
  }
}

TEST(Shrink, AfterStop) {
  SKIP_WITHOUT_DEVICE();
  for (bool shm : {true, false}) {
    std::string why = runOnce(make(full() ? 4 : 3, 1, shm, Fate::Stop));
    EXPECT_TRUE(why.empty()) << why;
  }
}

// Every order of the parent's release: the victim gone, alive and idle, or
// aborting; the survivors destroy or abort the parent.
TEST(Shrink, ReleaseMatrix) {
  SKIP_WITHOUT_DEVICE();
  std::vector<bool> transports = full() ? std::vector<bool>{true, false} : std::vector<bool>{true};
  for (bool shm : transports)
    for (Fate f : {Fate::Kill, Fate::Idle, Fate::Abort})
      for (Release rel : {Release::Destroy, Release::Abort}) {
        std::string why = runOnce(make(3, 1, shm, f, rel));
        EXPECT_TRUE(why.empty()) << "fate " << static_cast<int>(f) << ", release "
                                 << static_cast<int>(rel) << ": " << why;
      }
}

}  // namespace
