// The host device adapter through the public flagcxDeviceHandle table.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "adapters/device/adapter.h"
#include "base/host_memory.h"
#include "adapters/device/host/host_stream.h"

using namespace flagcx;
using namespace std::chrono_literals;

namespace {

flagcxDeviceHandle *H() { return hostAdapter()->handle(); }

StreamTask task(flagcxResult_t (*fn)(void *), void *arg) { return StreamTask{fn, arg}; }

// Waits (bounded) for a condition that a stream worker makes true.
template <class F>
bool eventually(F f, std::chrono::milliseconds limit = 5000ms) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return f();
}

struct Sleeper {
  std::atomic<bool> started{false};
  std::atomic<bool> finished{false};
  std::chrono::milliseconds ms{200};
  static flagcxResult_t run(void *p) {
    auto *s = static_cast<Sleeper *>(p);
    s->started = true;
    std::this_thread::sleep_for(s->ms);
    s->finished = true;
    return flagcxSuccess;
  }
};

}  // namespace

TEST(HostDevice, DeviceQueries) {
  int n = -1, d = -1;
  EXPECT_EQ(H()->getDeviceCount(&n), flagcxSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(H()->setDevice(0), flagcxSuccess);
  EXPECT_EQ(H()->setDevice(1), flagcxInvalidArgument);
  EXPECT_EQ(H()->getDevice(&d), flagcxSuccess);
  EXPECT_EQ(d, 0);
  char vendor[128];
  EXPECT_EQ(H()->getVendor(vendor), flagcxSuccess);
  EXPECT_STREQ(vendor, "host");
  int x;
  void *p = nullptr;
  EXPECT_EQ(H()->hostGetDevicePointer(&p, &x), flagcxSuccess);
  EXPECT_EQ(p, &x);
  EXPECT_EQ(H()->deviceSynchronize(), flagcxSuccess);
  EXPECT_STREQ(hostAdapter()->name(), "host");
}

TEST(HostDevice, MallocFreeEveryMemType) {
  for (flagcxMemType_t t : {flagcxMemHost, flagcxMemDevice, flagcxMemManaged}) {
    for (size_t size : {size_t{1}, size_t{100}, size_t{4096}, size_t{64 << 10}, size_t{3 << 20}}) {
      void *p = nullptr;
      ASSERT_EQ(H()->deviceMalloc(&p, size, t, nullptr), flagcxSuccess);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
      EXPECT_TRUE(host::memIsOurs(p));
      memset(p, 0x5a, size);
      EXPECT_EQ(static_cast<uint8_t *>(p)[size - 1], 0x5a);
      ASSERT_EQ(H()->deviceFree(p, t, nullptr), flagcxSuccess);
      EXPECT_FALSE(host::memIsOurs(p));
    }
  }
  // Small pinned memory fits RLIMIT_MEMLOCK (64 KiB at least everywhere).
  void *p = nullptr;
  ASSERT_EQ(H()->deviceMalloc(&p, 4096, flagcxMemHost, nullptr), flagcxSuccess);
  EXPECT_TRUE(host::memIsLocked(p));
  ASSERT_EQ(H()->deviceFree(p, flagcxMemHost, nullptr), flagcxSuccess);

  void *z = &p;
  EXPECT_EQ(H()->deviceMalloc(&z, 0, flagcxMemDevice, nullptr), flagcxSuccess);
  EXPECT_EQ(z, nullptr);
  EXPECT_EQ(H()->deviceFree(nullptr, flagcxMemDevice, nullptr), flagcxSuccess);
  int notOurs;
  EXPECT_EQ(H()->deviceFree(&notOurs, flagcxMemDevice, nullptr), flagcxInvalidArgument);
  EXPECT_EQ(H()->deviceMalloc(nullptr, 8, flagcxMemDevice, nullptr), flagcxInvalidArgument);
  EXPECT_EQ(H()->deviceMalloc(&z, 8, static_cast<flagcxMemType_t>(7), nullptr),
            flagcxInvalidArgument);
}

TEST(HostDevice, MemcpyMemsetSynchronous) {
  std::vector<uint8_t> a(1000), b(1000);
  ASSERT_EQ(H()->deviceMemset(a.data(), 7, a.size(), flagcxMemDevice, nullptr), flagcxSuccess);
  EXPECT_EQ(a[999], 7);
  ASSERT_EQ(H()->deviceMemcpy(b.data(), a.data(), a.size(), flagcxMemcpyDeviceToHost, nullptr),
            flagcxSuccess);
  EXPECT_EQ(b, a);
  EXPECT_EQ(H()->deviceMemcpy(nullptr, a.data(), 4, flagcxMemcpyDeviceToHost, nullptr),
            flagcxInvalidArgument);
  EXPECT_EQ(H()->deviceMemcpy(nullptr, nullptr, 0, flagcxMemcpyDeviceToHost, nullptr),
            flagcxSuccess);
}

TEST(HostStream, MemcpyMemsetInStreamOrder) {
  flagcxStream_t s;
  ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
  void *a, *b;
  const size_t n = 1 << 20;
  ASSERT_EQ(H()->deviceMalloc(&a, n, flagcxMemDevice, nullptr), flagcxSuccess);
  ASSERT_EQ(H()->deviceMalloc(&b, n, flagcxMemDevice, nullptr), flagcxSuccess);
  for (int round = 0; round < 20; round++) {
    ASSERT_EQ(H()->deviceMemset(a, round, n, flagcxMemDevice, s), flagcxSuccess);
    ASSERT_EQ(H()->deviceMemcpy(b, a, n, flagcxMemcpyDeviceToDevice, s), flagcxSuccess);
    ASSERT_EQ(H()->deviceMemset(a, 0xff, n / 2, flagcxMemDevice, s), flagcxSuccess);
    ASSERT_EQ(H()->streamSynchronize(s), flagcxSuccess);
    ASSERT_EQ(static_cast<uint8_t *>(b)[n - 1], round);
    ASSERT_EQ(static_cast<uint8_t *>(b)[0], round);
    ASSERT_EQ(static_cast<uint8_t *>(a)[0], 0xff);
    ASSERT_EQ(static_cast<uint8_t *>(a)[n - 1], round);
  }
  // A stream-ordered free happens after the work before it.
  ASSERT_EQ(H()->deviceMemset(a, 1, n, flagcxMemDevice, s), flagcxSuccess);
  ASSERT_EQ(H()->deviceFree(a, flagcxMemDevice, s), flagcxSuccess);
  ASSERT_EQ(H()->streamSynchronize(s), flagcxSuccess);
  EXPECT_FALSE(host::memIsOurs(a));
  ASSERT_EQ(H()->deviceFree(b, flagcxMemDevice, nullptr), flagcxSuccess);
  ASSERT_EQ(H()->streamDestroy(s), flagcxSuccess);
}

namespace {
struct Appender {
  std::vector<int> *out;
  int value;
  static flagcxResult_t run(void *p) {
    auto *a = static_cast<Appender *>(p);
    a->out->push_back(a->value);
    return flagcxSuccess;
  }
};
}  // namespace

TEST(HostStream, TasksRunInOrder) {
  flagcxStream_t s;
  ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
  std::vector<int> out;
  std::vector<Appender> apps(100);
  for (int i = 0; i < 100; i++) {
    apps[i] = {&out, i};
    ASSERT_EQ(hostAdapter()->enqueue(s, task(Appender::run, &apps[i])), flagcxSuccess);
  }
  ASSERT_EQ(H()->streamSynchronize(s), flagcxSuccess);
  ASSERT_EQ(out.size(), 100u);
  for (int i = 0; i < 100; i++) EXPECT_EQ(out[i], i);
  ASSERT_EQ(H()->streamDestroy(s), flagcxSuccess);
}

namespace {
struct Seq {
  std::atomic<int> running{0};
  std::atomic<bool> overlap{false};
  std::mutex mu;
  std::vector<std::pair<int, int>> seen;  // (thread, index)
};
struct SeqTask {
  Seq *seq;
  int thread, index;
  static flagcxResult_t run(void *p) {
    auto *t = static_cast<SeqTask *>(p);
    if (t->seq->running.fetch_add(1) != 0) t->seq->overlap = true;
    {
      std::lock_guard<std::mutex> g(t->seq->mu);
      t->seq->seen.emplace_back(t->thread, t->index);
    }
    t->seq->running.fetch_sub(1);
    return flagcxSuccess;
  }
};
}  // namespace

TEST(HostStream, ConcurrentEnqueueAndSync) {
  flagcxStream_t s;
  ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
  constexpr int kThreads = 4, kPer = 2000;
  Seq seq;
  std::vector<std::vector<SeqTask>> tasks(kThreads, std::vector<SeqTask>(kPer));
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; t++) {
    th.emplace_back([&, t] {
      for (int i = 0; i < kPer; i++) {
        tasks[t][i] = {&seq, t, i};
        ASSERT_EQ(hostAdapter()->enqueue(s, task(SeqTask::run, &tasks[t][i])), flagcxSuccess);
        if (i % 97 == 0) {
          ASSERT_EQ(H()->streamSynchronize(s), flagcxSuccess);
        }
      }
    });
  }
  for (auto &t : th) t.join();
  ASSERT_EQ(H()->streamSynchronize(s), flagcxSuccess);
  EXPECT_FALSE(seq.overlap.load());  // one runner at a time
  ASSERT_EQ(seq.seen.size(), static_cast<size_t>(kThreads * kPer));
  std::vector<int> next(kThreads, 0);
  for (auto [t, i] : seq.seen) {
    ASSERT_EQ(i, next[t]) << "thread " << t;
    next[t]++;
  }
  ASSERT_EQ(H()->streamDestroy(s), flagcxSuccess);
}

namespace {
flagcxResult_t setFlag(void *p) {
  static_cast<std::atomic<int> *>(p)->fetch_add(1);
  return flagcxSuccess;
}
}  // namespace

TEST(HostStream, ProgressesWithoutSynchronize) {
  flagcxStream_t s;
  ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
  std::atomic<int> hits{0};
  ASSERT_EQ(hostAdapter()->enqueue(s, task(setFlag, &hits)), flagcxSuccess);
  EXPECT_TRUE(eventually([&] { return hits.load() == 1; }));
  // After a long idle period the worker parks; an enqueue must still wake it.
  std::this_thread::sleep_for(150ms);
  ASSERT_EQ(hostAdapter()->enqueue(s, task(setFlag, &hits)), flagcxSuccess);
  EXPECT_TRUE(eventually([&] { return hits.load() == 2; }));
  ASSERT_EQ(H()->streamDestroy(s), flagcxSuccess);
}

TEST(HostStream, QueryInProgressWhileBusy) {
  flagcxStream_t s;
  ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
  EXPECT_EQ(H()->streamQuery(s), flagcxSuccess);
  Sleeper sl;
  ASSERT_EQ(hostAdapter()->enqueue(s, task(Sleeper::run, &sl)), flagcxSuccess);
  ASSERT_TRUE(eventually([&] { return sl.started.load(); }));  // the worker took it
  EXPECT_EQ(H()->streamQuery(s), flagcxInProgress);
  EXPECT_EQ(H()->streamSynchronize(s), flagcxSuccess);
  EXPECT_TRUE(sl.finished.load());
  EXPECT_EQ(H()->streamQuery(s), flagcxSuccess);
  // A destroy drains queued work first.
  Sleeper sl2;
  sl2.ms = 20ms;
  ASSERT_EQ(hostAdapter()->enqueue(s, task(Sleeper::run, &sl2)), flagcxSuccess);
  ASSERT_EQ(H()->streamDestroy(s), flagcxSuccess);
  EXPECT_TRUE(sl2.finished.load());
}

namespace {
flagcxResult_t failTask(void *) { return flagcxSystemError; }
}  // namespace

TEST(HostStream, ErrorsAreStickyAndSkipLaterWork) {
  flagcxStream_t s;
  ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
  std::atomic<int> hits{0};
  ASSERT_EQ(hostAdapter()->enqueue(s, task(setFlag, &hits)), flagcxSuccess);
  ASSERT_EQ(hostAdapter()->enqueue(s, task(failTask, nullptr)), flagcxSuccess);
  ASSERT_EQ(hostAdapter()->enqueue(s, task(setFlag, &hits)), flagcxSuccess);
  EXPECT_EQ(H()->streamSynchronize(s), flagcxSystemError);
  EXPECT_EQ(hits.load(), 1);
  EXPECT_EQ(H()->streamSynchronize(s), flagcxSystemError);
  ASSERT_EQ(hostAdapter()->enqueue(s, task(setFlag, &hits)), flagcxSuccess);
  EXPECT_EQ(H()->streamSynchronize(s), flagcxSystemError);
  EXPECT_EQ(hits.load(), 1);
  EXPECT_EQ(H()->streamQuery(s), flagcxSystemError);
  // Events recorded after the failure still complete.
  flagcxEvent_t e;
  ASSERT_EQ(H()->eventCreate(&e, flagcxEventDefault), flagcxSuccess);
  ASSERT_EQ(H()->eventRecord(e, s), flagcxSuccess);
  EXPECT_EQ(H()->eventSynchronize(e), flagcxSuccess);
  EXPECT_EQ(H()->eventDestroy(e), flagcxSuccess);
  EXPECT_EQ(H()->streamDestroy(s), flagcxSuccess);
  // A fresh stream starts clean; a NULL-stream task error returns at once.
  EXPECT_EQ(hostAdapter()->enqueue(nullptr, task(failTask, nullptr)), flagcxSystemError);
  EXPECT_EQ(hostAdapter()->enqueue(nullptr, task(setFlag, &hits)), flagcxSuccess);
  EXPECT_EQ(hits.load(), 2);
}

TEST(HostStream, CopyAndFree) {
  flagcxStream_t s, c = nullptr;
  ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
  ASSERT_EQ(H()->streamCopy(&c, s), flagcxSuccess);
  EXPECT_EQ(c, s);
  std::atomic<int> hits{0};
  ASSERT_EQ(hostAdapter()->enqueue(c, task(setFlag, &hits)), flagcxSuccess);
  ASSERT_EQ(H()->streamSynchronize(s), flagcxSuccess);
  EXPECT_EQ(hits.load(), 1);
  EXPECT_EQ(H()->streamFree(c), flagcxSuccess);
  EXPECT_EQ(H()->streamFree(s), flagcxInvalidUsage);  // not a copy
  flagcxStream_t n = s;
  EXPECT_EQ(H()->streamCopy(&n, nullptr), flagcxSuccess);
  EXPECT_EQ(n, nullptr);
  EXPECT_EQ(H()->streamDestroy(s), flagcxSuccess);
}

TEST(HostStream, AdapterReduceDivideCopyOnStream) {
  flagcxStream_t s;
  ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
  std::vector<float> a(1000, 2.0f), b(1000, 4.0f), d(1000), e(1000);
  DeviceAdapter *dev = hostAdapter();
  ASSERT_EQ(dev->reduce(d.data(), a.data(), b.data(), d.size(), flagcxFloat32, flagcxAvg, s),
            flagcxSuccess);
  ASSERT_EQ(dev->divide(d.data(), d.data(), d.size(), flagcxFloat32, 2, s), flagcxSuccess);
  ASSERT_EQ(dev->copy(e.data(), d.data(), d.size() * sizeof(float), s), flagcxSuccess);
  ASSERT_EQ(H()->streamSynchronize(s), flagcxSuccess);
  for (float v : e) ASSERT_EQ(v, 3.0f);
  EXPECT_EQ(dev->reduce(d.data(), a.data(), b.data(), 1, flagcxFloat32, flagcxRedNoOp, s),
            flagcxInvalidArgument);
  EXPECT_EQ(dev->divide(d.data(), a.data(), 1, flagcxFloat32, 0, s), flagcxInvalidArgument);
  EXPECT_EQ(dev->enqueue(s, StreamTask{nullptr, nullptr}), flagcxInvalidArgument);
  EXPECT_EQ(H()->streamSynchronize(s), flagcxSuccess);
  ASSERT_EQ(H()->streamDestroy(s), flagcxSuccess);
}

TEST(HostStream, DeviceSynchronizeDrainsAllStreams) {
  flagcxStream_t s1, s2;
  ASSERT_EQ(H()->streamCreate(&s1), flagcxSuccess);
  ASSERT_EQ(H()->streamCreate(&s2), flagcxSuccess);
  Sleeper a, b;
  a.ms = b.ms = 30ms;
  ASSERT_EQ(hostAdapter()->enqueue(s1, task(Sleeper::run, &a)), flagcxSuccess);
  ASSERT_EQ(hostAdapter()->enqueue(s2, task(Sleeper::run, &b)), flagcxSuccess);
  ASSERT_EQ(H()->deviceSynchronize(), flagcxSuccess);
  EXPECT_TRUE(a.finished.load());
  EXPECT_TRUE(b.finished.load());
  ASSERT_EQ(H()->streamDestroy(s1), flagcxSuccess);
  ASSERT_EQ(H()->streamDestroy(s2), flagcxSuccess);
}

TEST(HostEvent, RecordQuerySynchronizeElapsed) {
  flagcxStream_t s;
  ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
  flagcxEvent_t start, stop;
  ASSERT_EQ(H()->eventCreate(&start, flagcxEventDefault), flagcxSuccess);
  ASSERT_EQ(H()->eventCreate(&stop, flagcxEventDefault), flagcxSuccess);
  EXPECT_EQ(H()->eventQuery(start), flagcxSuccess);  // never recorded: complete
  Sleeper sl;
  sl.ms = 100ms;
  ASSERT_EQ(H()->eventRecord(start, s), flagcxSuccess);
  ASSERT_EQ(hostAdapter()->enqueue(s, task(Sleeper::run, &sl)), flagcxSuccess);
  ASSERT_EQ(H()->eventRecord(stop, s), flagcxSuccess);
  ASSERT_TRUE(eventually([&] { return sl.started.load(); }));
  EXPECT_EQ(H()->eventQuery(stop), flagcxInProgress);
  float ms = -1;
  EXPECT_EQ(hostEventElapsedMs(start, stop, &ms), flagcxInProgress);
  EXPECT_EQ(H()->eventSynchronize(stop), flagcxSuccess);
  EXPECT_TRUE(sl.finished.load());
  EXPECT_EQ(H()->eventQuery(stop), flagcxSuccess);
  ASSERT_EQ(hostEventElapsedMs(start, stop, &ms), flagcxSuccess);
  EXPECT_GE(ms, 0.0f);
  EXPECT_GE(ms, 90.0f);  // the task slept 100 ms between the two markers

  // The NULL stream completes at once; re-recording works.
  ASSERT_EQ(H()->eventRecord(start, nullptr), flagcxSuccess);
  EXPECT_EQ(H()->eventQuery(start), flagcxSuccess);
  ASSERT_EQ(H()->eventRecord(stop, nullptr), flagcxSuccess);
  ASSERT_EQ(hostEventElapsedMs(start, stop, &ms), flagcxSuccess);
  EXPECT_GE(ms, 0.0f);

  flagcxEvent_t nt;
  ASSERT_EQ(H()->eventCreate(&nt, flagcxEventDisableTiming), flagcxSuccess);
  ASSERT_EQ(H()->eventRecord(nt, s), flagcxSuccess);
  ASSERT_EQ(H()->eventSynchronize(nt), flagcxSuccess);
  EXPECT_EQ(hostEventElapsedMs(start, nt, &ms), flagcxInvalidUsage);
  EXPECT_EQ(H()->eventDestroy(nt), flagcxSuccess);
  EXPECT_EQ(H()->eventDestroy(start), flagcxSuccess);
  EXPECT_EQ(H()->eventDestroy(stop), flagcxSuccess);
  EXPECT_EQ(H()->streamDestroy(s), flagcxSuccess);
}

namespace {
struct Reader {
  std::atomic<int> *src;
  int seen = -1;
  static flagcxResult_t run(void *p) {
    auto *r = static_cast<Reader *>(p);
    r->seen = r->src->load();
    return flagcxSuccess;
  }
};
struct SlowWriter {
  std::atomic<int> *dst;
  static flagcxResult_t run(void *p) {
    std::this_thread::sleep_for(50ms);
    static_cast<SlowWriter *>(p)->dst->store(42);
    return flagcxSuccess;
  }
};
}  // namespace

namespace {
// A task that holds the stream's runner until released (at most 5 s).
struct Gate {
  std::atomic<bool> release{false};
  std::atomic<bool> timedOut{false};
  static flagcxResult_t run(void *p) {
    auto *g = static_cast<Gate *>(p);
    auto end = std::chrono::steady_clock::now() + 5s;
    while (!g->release.load() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(1ms);
    g->timedOut = !g->release.load();
    return flagcxSuccess;
  }
};
}  // namespace

// A thread synchronizing on an event in the middle of a queue that the
// worker runs gets woken once the event's entries are done, while the work
// after it still runs: the runner wakes a waiter when its target is reached,
// not only when it gives the stream up.  (The runner wakes waiters after a
// batch of 16 entries, so the event ends a batch here: the worker claims
// the sleeper alone, then the 15 tasks and the event.)
TEST(HostEvent, SynchronizeReturnsWhileLaterWorkRuns) {
  flagcxStream_t s;
  ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
  flagcxEvent_t ev;
  ASSERT_EQ(H()->eventCreate(&ev, flagcxEventDisableTiming), flagcxSuccess);
  Sleeper sl;
  sl.ms = 100ms;
  ASSERT_EQ(hostAdapter()->enqueue(s, task(Sleeper::run, &sl)), flagcxSuccess);
  ASSERT_TRUE(eventually([&] { return sl.started.load(); }));  // the worker runs the stream
  std::atomic<int> hits{0};
  for (int i = 0; i < 15; i++) ASSERT_EQ(hostAdapter()->enqueue(s, task(setFlag, &hits)), flagcxSuccess);
  ASSERT_EQ(H()->eventRecord(ev, s), flagcxSuccess);
  Gate gate;
  ASSERT_EQ(hostAdapter()->enqueue(s, task(Gate::run, &gate)), flagcxSuccess);
  EXPECT_EQ(H()->eventSynchronize(ev), flagcxSuccess);
  EXPECT_EQ(hits.load(), 15);
  EXPECT_FALSE(gate.timedOut.load()) << "the waiter was woken only when the gate gave up";
  gate.release = true;
  EXPECT_EQ(H()->streamSynchronize(s), flagcxSuccess);
  EXPECT_FALSE(gate.timedOut.load());
  ASSERT_EQ(H()->eventDestroy(ev), flagcxSuccess);
  ASSERT_EQ(H()->streamDestroy(s), flagcxSuccess);
}

TEST(HostEvent, StreamWaitEventOrdersAcrossStreams) {
  flagcxStream_t a, b;
  ASSERT_EQ(H()->streamCreate(&a), flagcxSuccess);
  ASSERT_EQ(H()->streamCreate(&b), flagcxSuccess);
  flagcxEvent_t e;
  ASSERT_EQ(H()->eventCreate(&e, flagcxEventDisableTiming), flagcxSuccess);
  std::atomic<int> x{0};
  SlowWriter w{&x};
  Reader r{&x};
  ASSERT_EQ(hostAdapter()->enqueue(a, task(SlowWriter::run, &w)), flagcxSuccess);
  ASSERT_EQ(H()->eventRecord(e, a), flagcxSuccess);
  ASSERT_EQ(H()->streamWaitEvent(b, e), flagcxSuccess);
  ASSERT_EQ(hostAdapter()->enqueue(b, task(Reader::run, &r)), flagcxSuccess);
  ASSERT_EQ(H()->streamSynchronize(b), flagcxSuccess);
  EXPECT_EQ(r.seen, 42);
  // The NULL stream waits on the spot.
  ASSERT_EQ(H()->eventRecord(e, a), flagcxSuccess);
  ASSERT_EQ(H()->streamWaitEvent(nullptr, e), flagcxSuccess);
  EXPECT_EQ(H()->eventQuery(e), flagcxSuccess);
  ASSERT_EQ(H()->eventDestroy(e), flagcxSuccess);
  ASSERT_EQ(H()->streamDestroy(a), flagcxSuccess);
  ASSERT_EQ(H()->streamDestroy(b), flagcxSuccess);
}

// A quick task that runs inline on a stream whose worker is parked must not
// use up the worker's wake-up: work queued after it still starts without a
// synchronize.  (It stayed queued until someone synchronized the stream.)
TEST(HostStream, QuickTaskInlineLeavesParkedWorkerWakeable) {
  flagcxStream_t s;
  ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
  std::this_thread::sleep_for(150ms);  // the worker parks
  std::atomic<int> hits{0};
  StreamTask quick = task(setFlag, &hits);
  quick.quick = true;
  ASSERT_EQ(hostAdapter()->enqueue(s, quick), flagcxSuccess);
  EXPECT_EQ(hits.load(), 1) << "a quick task on an idle stream runs on the caller's thread";
  ASSERT_EQ(hostAdapter()->enqueue(s, task(setFlag, &hits)), flagcxSuccess);
  EXPECT_TRUE(eventually([&] { return hits.load() == 2; })) << "queued work never started";
  ASSERT_EQ(H()->streamDestroy(s), flagcxSuccess);
}

// Work queued on a parked stream and synchronized at once is usually run by
// the synchronizing thread before the notified worker gets the CPU; that
// worker must stay wakeable, or work queued next (not synchronized) waits.
TEST(HostStream, SynchronizeBeforeTheWorkerWakesLeavesItWakeable) {
  flagcxStream_t s;
  ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
  std::atomic<int> hits{0};
  for (int round = 1; round <= 10; round++) {
    std::this_thread::sleep_for(50ms);  // the worker parks
    ASSERT_EQ(hostAdapter()->enqueue(s, task(setFlag, &hits)), flagcxSuccess);
    ASSERT_EQ(H()->streamSynchronize(s), flagcxSuccess);
    std::this_thread::sleep_for(5ms);  // the worker wakes, finds nothing, sleeps again
    ASSERT_EQ(hostAdapter()->enqueue(s, task(setFlag, &hits)), flagcxSuccess);
    ASSERT_TRUE(eventually([&] { return hits.load() == 2 * round; }))
        << "round " << round << ": queued work never started";
  }
  ASSERT_EQ(H()->streamDestroy(s), flagcxSuccess);
}

// An event recorded on a busy stream, then re-recorded on another and
// destroyed once that one completes: the first marker runs later and must
// not touch freed memory (ASan builds report it; CUDA allows the sequence).
TEST(HostEvent, DestroyWithAnEarlierRecordStillQueued) {
  flagcxStream_t a, b;
  ASSERT_EQ(H()->streamCreate(&a), flagcxSuccess);
  ASSERT_EQ(H()->streamCreate(&b), flagcxSuccess);
  flagcxEvent_t e;
  ASSERT_EQ(H()->eventCreate(&e, flagcxEventDefault), flagcxSuccess);
  Gate gate;
  ASSERT_EQ(hostAdapter()->enqueue(a, task(Gate::run, &gate)), flagcxSuccess);
  ASSERT_EQ(H()->eventRecord(e, a), flagcxSuccess);
  ASSERT_EQ(H()->eventRecord(e, b), flagcxSuccess);
  ASSERT_EQ(H()->streamSynchronize(b), flagcxSuccess);
  ASSERT_EQ(H()->eventDestroy(e), flagcxSuccess);
  gate.release = true;
  EXPECT_EQ(H()->streamSynchronize(a), flagcxSuccess);
  EXPECT_FALSE(gate.timedOut.load());
  ASSERT_EQ(H()->streamDestroy(a), flagcxSuccess);
  ASSERT_EQ(H()->streamDestroy(b), flagcxSuccess);
}

// A stream whose last entries another stream's worker ran (it waits on an
// event recorded there), destroyed the moment a synchronize says they are
// done: that worker still has to release the runner role and leave its
// wait, and the destroy must wait for it (it freed the stream under it;
// ASan and TSan builds report the use after free, when the timing hits).
TEST(HostStream, DestroyWhileAnotherStreamFinishesRunningIt) {
  std::vector<char> from(1 << 16, 7), to(1 << 16);
  flagcxStream_t other;
  ASSERT_EQ(H()->streamCreate(&other), flagcxSuccess);
  flagcxEvent_t e;
  ASSERT_EQ(H()->eventCreate(&e, flagcxEventDisableTiming), flagcxSuccess);
  for (int i = 0; i < 1000; i++) {
    flagcxStream_t s;
    ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
    for (int k = 0; k < 4; k++)
      ASSERT_EQ(H()->deviceMemcpy(to.data(), from.data(), from.size(), flagcxMemcpyDeviceToDevice,
                                  s), flagcxSuccess);
    ASSERT_EQ(H()->eventRecord(e, s), flagcxSuccess);
    ASSERT_EQ(H()->streamWaitEvent(other, e), flagcxSuccess);
    ASSERT_EQ(H()->streamSynchronize(s), flagcxSuccess);
    ASSERT_EQ(H()->streamDestroy(s), flagcxSuccess);
  }
  ASSERT_EQ(H()->streamSynchronize(other), flagcxSuccess);
  EXPECT_EQ(to[12345], 7);
  ASSERT_EQ(H()->eventDestroy(e), flagcxSuccess);
  ASSERT_EQ(H()->streamDestroy(other), flagcxSuccess);
}

// One thread destroys the stream an event was recorded on while another
// queries the event, synchronizes it and makes a third stream wait on it
// (legal on CUDA): the event's reference to its stream keeps the stream
// valid for them (they read it freed; ASan and TSan builds report it).
TEST(HostEvent, UsedWhileAnotherThreadDestroysItsStream) {
  std::vector<char> from(1 << 14, 3), to(1 << 14);
  flagcxStream_t other;
  ASSERT_EQ(H()->streamCreate(&other), flagcxSuccess);
  flagcxEvent_t e;
  ASSERT_EQ(H()->eventCreate(&e, flagcxEventDisableTiming), flagcxSuccess);
  for (int i = 0; i < 300; i++) {
    flagcxStream_t s;
    ASSERT_EQ(H()->streamCreate(&s), flagcxSuccess);
    ASSERT_EQ(H()->deviceMemcpy(to.data(), from.data(), from.size(), flagcxMemcpyDeviceToDevice, s),
              flagcxSuccess);
    ASSERT_EQ(H()->eventRecord(e, s), flagcxSuccess);
    std::thread destroyer([s] { H()->streamDestroy(s); });
    ASSERT_EQ(H()->streamWaitEvent(other, e), flagcxSuccess);
    while (H()->eventQuery(e) != flagcxSuccess) {
    }
    ASSERT_EQ(H()->eventSynchronize(e), flagcxSuccess);
    destroyer.join();
  }
  ASSERT_EQ(H()->streamSynchronize(other), flagcxSuccess);
  EXPECT_EQ(to[100], 3);
  ASSERT_EQ(H()->eventDestroy(e), flagcxSuccess);
  ASSERT_EQ(H()->streamDestroy(other), flagcxSuccess);
}

// One thread re-records an event on two streams in turn while another
// synchronizes it: a synchronize must never pair the stream of one record
// with the ticket of the other (stream a is thousands of entries ahead of
// b, so b would not reach a's ticket and the waiter would hang).
TEST(HostEvent, SynchronizeDuringReRecordsOnAnotherStream) {
  flagcxStream_t a, b;
  ASSERT_EQ(H()->streamCreate(&a), flagcxSuccess);
  ASSERT_EQ(H()->streamCreate(&b), flagcxSuccess);
  flagcxEvent_t e;
  ASSERT_EQ(H()->eventCreate(&e, flagcxEventDisableTiming), flagcxSuccess);
  std::atomic<int> hits{0};
  for (int i = 0; i < 4000; i++) ASSERT_EQ(hostAdapter()->enqueue(a, task(setFlag, &hits)), flagcxSuccess);
  ASSERT_EQ(H()->streamSynchronize(a), flagcxSuccess);
  std::atomic<bool> stop{false}, waiterDone{false};
  std::atomic<int> syncs{0};
  std::thread waiter([&] {
    while (!stop.load()) {
      H()->eventSynchronize(e);
      syncs++;
    }
    waiterDone = true;
  });
  for (int i = 0; i < 3000; i++) ASSERT_EQ(H()->eventRecord(e, i % 2 ? a : b), flagcxSuccess);
  stop = true;
  bool finished = eventually([&] { return waiterDone.load(); }, 10000ms);
  EXPECT_TRUE(finished) << "eventSynchronize hung after " << syncs.load() << " calls";
  if (finished) waiter.join();
  else waiter.detach();  // stuck for good: leave it, the test has failed
  EXPECT_EQ(H()->eventSynchronize(e), flagcxSuccess);
  EXPECT_EQ(H()->eventQuery(e), flagcxSuccess);
  if (!finished) return;
  ASSERT_EQ(H()->eventDestroy(e), flagcxSuccess);
  ASSERT_EQ(H()->streamDestroy(a), flagcxSuccess);
  ASSERT_EQ(H()->streamDestroy(b), flagcxSuccess);
}

// ---- IPC across processes ----

namespace {
const char *kChildEnv = "UNIT_HOST_IPC_CHILD";

std::string toHex(const void *p, size_t n) {
  static const char *d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; i++) {
    uint8_t b = static_cast<const uint8_t *>(p)[i];
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

std::vector<uint8_t> fromHex(const std::string &s) {
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); i++) out[i] = static_cast<uint8_t>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return out;
}
}  // namespace

// The child half of HostIpc.TwoProcesses (runs only when exec'd by it): maps
// the parent's buffer from the handle, checks the parent's pattern, writes its own.
TEST(HostIpcChild, OpenAndWrite) {
  const char *hex = getenv(kChildEnv);
  if (!hex) GTEST_SKIP() << "run by HostIpc.TwoProcesses";
  std::vector<uint8_t> bytes = fromHex(hex);
  void *p = nullptr;
  ASSERT_EQ(H()->ipcMemHandleOpen(reinterpret_cast<flagcxIpcMemHandle_t>(bytes.data()), &p),
            flagcxSuccess);
  auto *u = static_cast<uint32_t *>(p);
  const size_t n = (1 << 20) / 4 - 16;  // the handle points 64 bytes into the buffer
  for (size_t i = 0; i < n; i++) ASSERT_EQ(u[i], i + 16) << i;
  for (size_t i = 0; i < n; i++) u[i] = static_cast<uint32_t>(i * 3);
  ASSERT_EQ(H()->ipcMemHandleClose(p), flagcxSuccess);
  EXPECT_EQ(H()->ipcMemHandleClose(p), flagcxInvalidArgument);
}

TEST(HostIpc, TwoProcesses) {
  void *buf = nullptr;
  ASSERT_EQ(H()->deviceMalloc(&buf, 1 << 20, flagcxMemDevice, nullptr), flagcxSuccess);
  auto *u = static_cast<uint32_t *>(buf);
  for (size_t i = 0; i < (1 << 20) / 4; i++) u[i] = static_cast<uint32_t>(i);
  flagcxIpcMemHandle_t h = nullptr;
  size_t hsize = 0;
  ASSERT_EQ(H()->ipcMemHandleCreate(&h, &hsize), flagcxSuccess);
  ASSERT_GT(hsize, 0u);
  ASSERT_EQ(H()->ipcMemHandleGet(h, u + 16), flagcxSuccess);  // an interior pointer
  std::string hex = toHex(h, hsize);

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // A fresh process image: only the serialized handle crosses over.
    setenv(kChildEnv, hex.c_str(), 1);
    execl("/proc/self/exe", "unit_host_adapter", "--gtest_filter=HostIpcChild.OpenAndWrite",
          static_cast<char *>(nullptr));
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  for (size_t i = 0; i < (1 << 20) / 4 - 16; i++) ASSERT_EQ(u[16 + i], i * 3) << i;

  // In-process open maps the same memory a second time.
  void *alias = nullptr;
  ASSERT_EQ(H()->ipcMemHandleOpen(h, &alias), flagcxSuccess);
  static_cast<uint32_t *>(alias)[0] = 0xabcdef;
  EXPECT_EQ(u[16], 0xabcdefu);
  ASSERT_EQ(H()->ipcMemHandleClose(alias), flagcxSuccess);

  // Once the buffer is freed the handle no longer opens.
  ASSERT_EQ(H()->deviceFree(buf, flagcxMemDevice, nullptr), flagcxSuccess);
  EXPECT_NE(H()->ipcMemHandleOpen(h, &alias), flagcxSuccess);
  ASSERT_EQ(H()->ipcMemHandleFree(h), flagcxSuccess);
}

TEST(HostIpc, OnlyShareableMemory) {
  flagcxIpcMemHandle_t h;
  ASSERT_EQ(H()->ipcMemHandleCreate(&h, nullptr), flagcxSuccess);
  int local;
  EXPECT_EQ(H()->ipcMemHandleGet(h, &local), flagcxInvalidArgument);
  void *small = nullptr;
  ASSERT_EQ(H()->deviceMalloc(&small, 256, flagcxMemHost, nullptr), flagcxSuccess);
  EXPECT_EQ(H()->ipcMemHandleGet(h, small), flagcxInvalidArgument);
  ASSERT_EQ(H()->deviceFree(small, flagcxMemHost, nullptr), flagcxSuccess);
  void *dev = nullptr;
  ASSERT_EQ(H()->deviceMalloc(&dev, 256, flagcxMemDevice, nullptr), flagcxSuccess);
  EXPECT_EQ(H()->ipcMemHandleGet(h, dev), flagcxSuccess);  // device memory always shares
  ASSERT_EQ(H()->deviceFree(dev, flagcxMemDevice, nullptr), flagcxSuccess);
  void *pinned = nullptr;
  ASSERT_EQ(H()->deviceMalloc(&pinned, 256 << 10, flagcxMemHost, nullptr), flagcxSuccess);
  EXPECT_EQ(H()->ipcMemHandleGet(h, pinned), flagcxSuccess);
  ASSERT_EQ(H()->deviceFree(pinned, flagcxMemHost, nullptr), flagcxSuccess);
  uint8_t junk[128] = {};
  void *p;
  EXPECT_EQ(H()->ipcMemHandleOpen(reinterpret_cast<flagcxIpcMemHandle_t>(junk), &p),
            flagcxInvalidArgument);
  ASSERT_EQ(H()->ipcMemHandleFree(h), flagcxSuccess);
}
