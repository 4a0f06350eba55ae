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

__thread int t_groupDepth = 0;
__thread bool t_flagcxGroupOpen = false;
namespace {
__thread ncclResult_t (*t_vendorGroupEnd)() = nullptr;  // NVIDIA's group, when opened
}  // namespace

ncclResult_t openFlagcxGroup(const char *fn) {
  flagcxResult_t r = flagcxGroupStart(nullptr);
  if (r != flagcxSuccess) return fromFlagcx(fn, r);
  t_flagcxGroupOpen = true;
  return ncclSuccess;
}

bool vendorGroupOpen(ncclResult_t (*start)(), ncclResult_t (*end)()) {
  if (t_vendorGroupEnd) return true;
  if (!start || !end || start() != ncclSuccess) return false;
  t_vendorGroupEnd = end;
  return true;
}

bool inGroup() { return t_groupDepth > 0; }

void groupStreamsUsed(ncclComm *c) {
  if (std::find(t_group.streams.begin(), t_group.streams.end(), c) == t_group.streams.end())
    t_group.streams.push_back(c);
}

void releaseLater(void *p, flagcxStream_t fs) {
  if (t_groupDepth > 0)
    t_group.frees.emplace_back(p, fs);
  else
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
void defer(Deferred d) { t_group.deferred.push_back(std::move(d)); }

}  // namespace ncclx

extern "C" {

ncclResult_t ncclGroupStart() {
  t_groupDepth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  const char *fn = "ncclGroupEnd";
  if (t_groupDepth == 0) return fail(ncclInvalidUsage, fn, "no group is open (ncclGroupStart)");
  if (--t_groupDepth > 0) return ncclSuccess;  // the outermost end launches
  ncclResult_t r = ncclSuccess;
  if (auto end = t_vendorGroupEnd) {
    t_vendorGroupEnd = nullptr;
    r = end();
    if (r != ncclSuccess && r != ncclInProgress)
      r = fail(r, fn, "NVIDIA's ncclGroupEnd: %s", ncclGetErrorString(r));
  }
  if (t_flagcxGroupOpen) {
    t_flagcxGroupOpen = false;
    ncclResult_t f = fromFlagcx(fn, flagcxGroupEnd(nullptr));
    if (r == ncclSuccess) r = f;
  }
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
