// NCCL's elastic communicators on flagcx's (docs/ELASTIC.md): ncclCommShrink
// and ncclCommRevoke (nccl.h 2.27+), ncclCommGetUniqueId and ncclCommGrow
// (2.29+, declared here for older headers and exported whatever the header).
// A new communicator is made as ncclCommSplit's are (startCreate: in a group
// at ncclGroupEnd, on a thread of its own when not blocking).
#include <new>

#include "dropin.h"
#include "exports.h"
#include "forward.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 29, 0)
extern "C" {
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                          ncclComm_t *newcomm, ncclConfig_t *config);
}
#endif

using namespace ncclx;

namespace {

// `c` takes the flagcx communicator `make` builds, its rank and size.
template <class Make>
ncclResult_t adopt(const char *fn, ncclComm *c, Make make) {
  flagcxComm_t fc = nullptr;
  flagcxResult_t r = make(&fc);
  if (r != flagcxSuccess) return fromFlagcx(fn, r);
  if (!fc) return ncclSuccess;  // not a member (cannot happen for shrink and grow)
  c->fc = fc;
  flagcxCommUserRank(fc, &c->rank);
  flagcxCommCount(fc, &c->nranks);
  setDirect(c);
  logLine(Level::Info, "%s: rank %d of %d created", fn, c->rank, c->nranks);
  return ncclSuccess;
}

// A new communicator record for `fn` on `dev`, with `config` or, without
// one, the blocking mode of `parent` (NCCL's rule for derived communicators).
ncclResult_t derived(const char *fn, ncclConfig_t *config, const ncclComm *parent, int dev,
                     ncclComm **out) {
  Config cfg;
  std::string why;
  if (parseConfig(config, getenv("NCCL_COMM_BLOCKING"), &cfg, &why) != ncclSuccess)
    return fail(ncclInvalidArgument, fn, "%s", why.c_str());
  if (!config && parent) cfg.blocking = parent->blocking;
  *out = newComm(0, -1, dev, cfg);
  if (!*out) return fail(ncclSystemError, fn, "out of memory");
  return ncclSuccess;
}

// Runs the creation and hands out `c`, or frees it on failure.
ncclResult_t finish(const char *fn, ncclComm *c, std::function<ncclResult_t()> run,
                    ncclComm_t *newcomm) {
  ncclResult_t r = startCreate(fn, c, std::move(run));
  if (r != ncclSuccess && r != ncclInProgress) {
    delete c;
    return r;
  }
  *newcomm = c;
  return r;
}

}  // namespace

extern "C" {

ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                            ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  NCCLX_FOREIGN_COMM(ncclCommShrink, comm, comm, excludeRanksList, excludeRanksCount, newcomm,
                     config, shrinkFlags);
  const char *fn = "ncclCommShrink";
  flagcxComm_t parent;
  NCCLX_CHECK(enter(fn, comm, &parent));
  if (!newcomm) return fail(ncclInvalidArgument, fn, "newcomm is NULL");
  *newcomm = nullptr;
  ncclComm *c = nullptr;
  NCCLX_CHECK(derived(fn, config, comm, comm->device, &c));
  // A copy: a deferred or background creation runs after the call returns.
  std::vector<int> exclude;
  if (excludeRanksList && excludeRanksCount > 0)
    exclude.assign(excludeRanksList, excludeRanksList + excludeRanksCount);
  int *list = excludeRanksList ? exclude.data() : nullptr;
  auto run = [fn, c, parent, exclude = std::move(exclude), list, excludeRanksCount,
              shrinkFlags]() mutable {
    return adopt(fn, c, [&](flagcxComm_t *fc) {
      return flagcxCommShrink(parent, list ? exclude.data() : nullptr, excludeRanksCount, fc,
                              shrinkFlags);
    });
  };
  return finish(fn, c, run, newcomm);
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  NCCLX_FOREIGN_COMM(ncclCommRevoke, comm, comm, revokeFlags);
  const char *fn = "ncclCommRevoke";
  flagcxComm_t fc;
  NCCLX_CHECK(enter(fn, comm, &fc));
  return fromFlagcx(fn, flagcxCommRevoke(fc, revokeFlags));
}

ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId) {
  NCCLX_FOREIGN_COMM(ncclCommGetUniqueId, comm, comm, uniqueId);
  const char *fn = "ncclCommGetUniqueId";
  flagcxComm_t fc;
  NCCLX_CHECK(enter(fn, comm, &fc));
  if (!uniqueId) return fail(ncclInvalidArgument, fn, "uniqueId is NULL");
  flagcxUniqueId id;
  NCCLX_CHECK(fromFlagcx(fn, flagcxCommGetUniqueId(fc, &id)));
  std::string why;
  if (packId(id, uniqueId, &why) != ncclSuccess) return fail(ncclInternalError, fn, "%s", why.c_str());
  return ncclSuccess;
}

// Existing ranks: comm, rank -1, the id on the coordinator (NULL allowed on
// the others); new ranks: comm NULL, the id, their rank.
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                          ncclComm_t *newcomm, ncclConfig_t *config) {
  NCCLX_FOREIGN_COMM(ncclCommGrow, comm, comm, nRanks, uniqueId, rank, newcomm, config);
  const char *fn = "ncclCommGrow";
  flagcxComm_t parent = nullptr;
  if (comm) NCCLX_CHECK(enter(fn, comm, &parent));
  if (!newcomm) return fail(ncclInvalidArgument, fn, "newcomm is NULL");
  *newcomm = nullptr;
  int dev = comm ? comm->device : 0;
  if (!comm && device() && device()->getDevice(&dev) != flagcxSuccess)
    return fail(ncclUnhandledCudaError, fn, "cannot read the current device");
  ncclComm *c = nullptr;
  NCCLX_CHECK(derived(fn, config, comm, dev, &c));
  bool hasId = uniqueId != nullptr;
  flagcxUniqueId id{};
  if (hasId) unpackId(*uniqueId, &id);
  auto run = [fn, c, parent, nRanks, hasId, id, rank] {
    return adopt(fn, c, [&](flagcxComm_t *fc) {
      return flagcxCommGrow(parent, nRanks, hasId ? &id : nullptr, rank, fc);
    });
  };
  return finish(fn, c, run, newcomm);
}

}  // extern "C"

NCCLX_PNAME(ncclCommShrink)
NCCLX_PNAME(ncclCommRevoke)
NCCLX_PNAME(ncclCommGetUniqueId)
NCCLX_PNAME(ncclCommGrow)
