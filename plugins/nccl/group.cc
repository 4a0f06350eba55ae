// Groups: ncclGroupStart/End and what a group holds back until its end
// (deferred creations, working buffers to free, private streams to wait for).
//
// ncclGroupStart only counts.  flagcx's group is opened by the first call
// inside it that goes through flagcx's API (enter, exports.h), NVIDIA's by
// the first call that goes to NVIDIA's library directly (coll.cc), and the
// outermost ncclGroupEnd closes what was opened: a group of direct calls
// costs what it costs with NVIDIA's library alone (sendrecv at one rank on
// the H200: +0.2-0.5 us per group when every group also opened flagcx's,
// docs/NCCL-DROPIN.md).
#include <algorithm>

#include "dropin.h"
#include "exports.h"

using namespace ncclx;

namespace ncclx {

namespace {
struct GroupState {
  std::vector<Deferred> deferred;
  std::vector<std::pair<void *, flagcxStream_t>> frees;  // PreMulSum working buffers
  std::vector<ncclComm *> streams;  // communicators whose group stream was used
};
thread_local GroupState t_group;
}  // namespace

__thread GroupTls t_g = {0, false, false, nullptr};

ncclResult_t openFlagcxGroup(const char *fn) {
  flagcxResult_t r = flagcxGroupStart(nullptr);
  if (r != flagcxSuccess) return fromFlagcx(fn, r);
  t_g.flagcxOpen = true;
  return ncclSuccess;
}

bool vendorGroupOpenSlow(ncclResult_t (*start)(), ncclResult_t (*end)()) {
  if (!start || !end || start() != ncclSuccess) return false;
  t_g.vendorEnd = end;
  return true;
}

bool inGroup() { return t_g.depth > 0; }

void groupStreamsUsed(ncclComm *c) {
  t_g.work = true;
  if (std::find(t_group.streams.begin(), t_group.streams.end(), c) == t_group.streams.end())
    t_group.streams.push_back(c);
}

void releaseLater(void *p, flagcxStream_t fs) {
  if (t_g.depth > 0) {
    t_g.work = true;
    t_group.frees.emplace_back(p, fs);
  } else
    device()->deviceFree(p, flagcxMemDevice, fs);
}

ncclResult_t groupStreamsWait() {
  ncclResult_t res = ncclSuccess;
  for (ncclComm *c : t_group.streams) {
    flagcxResult_t r = device()->streamSynchronize(c->groupStream);
    if (r != flagcxSuccess && res == ncclSuccess) res = fromFlagcx("ncclGroupEnd", r);
  }
  t_group.streams.clear();
  return res;
}
void defer(Deferred d) {
  t_g.work = true;
  t_group.deferred.push_back(std::move(d));
}

}  // namespace ncclx

extern "C" {

ncclResult_t ncclGroupStart() {
  t_g.depth++;
  return ncclSuccess;
}

// The end of a group that held only direct calls (a send/recv pair, the
// usual case) is NVIDIA's ncclGroupEnd as a tail call: its result reaches
// the caller unchanged, as for a direct collective (coll.cc).
ncclResult_t ncclGroupEnd() {
  const char *fn = "ncclGroupEnd";
  GroupTls &g = t_g;
  if (g.depth == 0) return fail(ncclInvalidUsage, fn, "no group is open (ncclGroupStart)");
  if (--g.depth > 0) return ncclSuccess;  // the outermost end launches
  auto end = g.vendorEnd;
  g.vendorEnd = nullptr;
  if (__builtin_expect(!g.flagcxOpen && !g.work, 1)) return end ? end() : ncclSuccess;
  ncclResult_t r = ncclSuccess;
  if (end) {
    r = end();
    if (r != ncclSuccess && r != ncclInProgress)
      r = fail(r, fn, "NVIDIA's ncclGroupEnd: %s", ncclGetErrorString(r));
  }
  if (g.flagcxOpen) {
    g.flagcxOpen = false;
    ncclResult_t f = fromFlagcx(fn, flagcxGroupEnd(nullptr));
    if (r == ncclSuccess) r = f;
  }
  if (g.work) {
    g.work = false;
    if (!t_group.streams.empty()) {
      ncclResult_t w = groupStreamsWait();
      if (r == ncclSuccess) r = w;
    }
    if (!t_group.frees.empty()) {
      for (auto &f : t_group.frees) device()->deviceFree(f.first, flagcxMemDevice, f.second);
      t_group.frees.clear();
    }
    if (!t_group.deferred.empty()) {
      std::vector<Deferred> items;
      items.swap(t_group.deferred);
      ncclResult_t c = runAll(items);
      if (r == ncclSuccess) r = c;
    }
  }
  return r;
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *) {
  return fail(ncclInvalidUsage, "ncclGroupSimulateEnd",
              "not supported by flagcx (no cost model to simulate with); the group stays open");
}

}  // extern "C"

NCCLX_PNAME(ncclGroupStart)
NCCLX_PNAME(ncclGroupEnd)
NCCLX_PNAME(ncclGroupSimulateEnd)
