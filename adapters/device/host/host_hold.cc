// The host adapter's stream holds (stream_hold.h): a queued entry that waits
// for the word, bounded by FLAGCX_TIMEOUT (then it fails like any task, and
// the failure is the stream's).  Host streams are drained by their own
// worker or by a synchronizing caller, so a hold blocks only its stream.
// It lets the stream-ordered small-call path run on CPU (a host rank
// staged by FLAGCX_HOST_COPY_ENGINE_NS, tests).
#include <cstdlib>

#include "adapters/device/host/host_stream.h"
#include "adapters/device/stream_hold.h"
#include "base/base.h"

namespace flagcx {
namespace {

// Has the word reached k (the driver's cyclic ">=")?
bool reachedWord(const HoldPoint *p) {
  uint32_t v = __atomic_load_n(p->word, __ATOMIC_ACQUIRE);
  return static_cast<int32_t>(v - p->k) >= 0;
}

flagcxResult_t waitWord(void *arg) {
  const auto *p = static_cast<const HoldPoint *>(arg);
  Backoff wait;
  while (!reachedWord(p)) {
    if (wait.expired()) {
      WARN(kColl, "a stream hold was not released within FLAGCX_TIMEOUT=%llds",
           static_cast<long long>(paramInt(Param::TIMEOUT)));
      return flagcxSystemError;
    }
    wait.idle();
  }
  return flagcxSuccess;
}

class HostHold final : public StreamHold {
 public:
  bool usable() override { return true; }
  bool canHold(flagcxStream_t stream) override { return stream && host::streamValid(stream); }
  bool streamOrdered(const void *) override { return true; }  // every copy is a queued entry
  flagcxResult_t allocWords(int n, HoldPoint *words) override {
    auto *w = static_cast<uint32_t *>(calloc(static_cast<size_t>(n), 64));
    if (!w) return flagcxSystemError;
    for (int i = 0; i < n; i++) {
      words[i].word = w + 16 * i;  // one per cache line
      words[i].devAddr = reinterpret_cast<uintptr_t>(words[i].word);
      words[i].k = 0;
    }
    return flagcxSuccess;
  }
  void freeWords(int, HoldPoint *words) override { free(const_cast<uint32_t *>(words[0].word)); }
  flagcxResult_t hold(flagcxStream_t stream, const HoldPoint *p) override {
    host::Entry e{};
    e.kind = host::Entry::Task;
    e.task = StreamTask{waitWord, const_cast<HoldPoint *>(p), nullptr, false};
    return host::streamEnqueue(stream, e);
  }
  void noteError(flagcxStream_t stream, flagcxResult_t r) override {
    int expected = flagcxSuccess;
    stream->error.compare_exchange_strong(expected, r);
  }
};

}  // namespace

StreamHold *hostStreamHold() {
  static HostHold h;
  return &h;
}

}  // namespace flagcx
