// Helpers shared by the exported entry points: the per-call fast path.
#pragma once
#include "dropin.h"

#define NCCLX_CHECK(x)                  \
  do {                                  \
    ncclResult_t _r = (x);              \
    if (_r != ncclSuccess) return _r;   \
  } while (0)

namespace ncclx {

ncclResult_t enterSlow(const char *fn, ncclComm *c, flagcxComm_t *fc);
ncclResult_t settle(const char *fn, ncclComm *c);

// Groups (comm.cc): ncclGroupStart only counts; flagcx's group is opened
// by the first call inside it that goes through flagcx (enter), NVIDIA's by
// the first direct call (coll.cc), and ncclGroupEnd closes what was opened.
// The calling thread's group, one plain __thread struct: no C++ wrapper per
// access and one TLS lookup for all of it (a send/recv group reads it in
// each of its four calls).  The drop-in is compiled with TLS descriptors
// (-mtls-dialect=gnu2, meson.build): a lookup is then a load, not a call to
// __tls_get_addr, even when the library is dlopen'ed.
struct GroupTls {
  int depth;                       // ncclGroupStart minus ncclGroupEnd
  bool flagcxOpen;                 // flagcx's group was opened (enter)
  bool work;                       // t_group (group.cc) holds something to do at the end
  ncclResult_t (*vendorEnd)();     // NVIDIA's group, when the first direct call opened it
};
extern __thread GroupTls t_g;
ncclResult_t openFlagcxGroup(const char *fn);
bool vendorGroupOpenSlow(ncclResult_t (*start)(), ncclResult_t (*end)());
inline bool vendorGroupOpen(ncclResult_t (*start)(), ncclResult_t (*end)()) {
  return t_g.vendorEnd || vendorGroupOpenSlow(start, end);
}

// A usable communicator: one compare on the fast path.
inline ncclResult_t enter(const char *fn, ncclComm *c, flagcxComm_t *fc) {
  if (__builtin_expect(t_g.depth > 0, 0) && !t_g.flagcxOpen)
    if (ncclResult_t r = openFlagcxGroup(fn); r != ncclSuccess) return r;
  if (c && c->magic == ncclComm::kMagic &&
      c->state.load(std::memory_order_acquire) == ncclComm::kReady) {
    *fc = c->fc;
    return ncclSuccess;
  }
  return enterSlow(fn, c, fc);
}

// flagcx logged the reason already; drop the drop-in's older text so that
// ncclGetLastError returns flagcx's.
inline ncclResult_t fromFlagcx(const char *, flagcxResult_t r) {
  if (r == flagcxSuccess) return ncclSuccess;
  clearLastError();
  return toNccl(r);
}

// The flagcx stream that stands for a cudaStream_t on the communicator's
// device (made once per pair: the legacy NULL stream differs per device, and
// the wrapper must know the stream's device).
// One exception, on the host adapter only: there a NULL stream means "now"
// in flagcx, which would run a group's operations one communicator after
// the other on the calling thread; ranks of one process driven by one thread
// (ncclCommInitAll) would wait for each other forever.  Inside a group, a
// NULL stream therefore becomes a private stream of the communicator, and
// ncclGroupEnd waits for those streams.
ncclResult_t mapStreamSlow(ncclComm *c, cudaStream_t s, flagcxStream_t *out);
struct StreamHit {
  cudaStream_t native = nullptr;
  int device = -1;
  flagcxStream_t mapped = nullptr;
  bool valid = false;
};
extern thread_local StreamHit t_stream;
bool hostAdapter();
inline ncclResult_t mapStream(ncclComm *c, cudaStream_t s, flagcxStream_t *out) {
  if (t_stream.valid && t_stream.native == s && t_stream.device == c->device &&
      (s || t_g.depth == 0)) {
    *out = t_stream.mapped;
    return ncclSuccess;
  }
  return mapStreamSlow(c, s, out);
}
// Free a working buffer behind the work on `fs`; inside a group only after
// ncclGroupEnd has launched that work.
void releaseLater(void *p, flagcxStream_t fs);
// The private streams used by the calling thread's open group.
void groupStreamsUsed(ncclComm *c);
ncclResult_t groupStreamsWait();

// ncclCommSplit's work on one rank: exchange (color, key) over the parent,
// create `c` (NULL: this rank takes no part in a new communicator).
// Look up NVIDIA's direct entry points for c->fc (none: c->direct stays empty).
void setDirect(ncclComm *c);

ncclResult_t splitNow(ncclComm *parent, ncclComm *c, int color, int key);

// A communicator record not yet created (comm.cc); startCreate runs `run`
// as NCCL schedules a creation: at ncclGroupEnd inside a group, on a thread
// of its own when not blocking (ncclInProgress until done), else now.
ncclComm *newComm(int nranks, int rank, int dev, const Config &cfg);
ncclResult_t startCreate(const char *fn, ncclComm *c, std::function<ncclResult_t()> run);

}  // namespace ncclx

// NCCL's profiling names: pnccl<X> is the same function as nccl<X>.
#define NCCLX_PNAME(name) extern "C" __attribute__((alias(#name))) decltype(name) p##name;
