// The entry points of elastic communicators (split, shrink, grow, revoke):
// argument checks, one log line naming the argument, then src/core/elastic.
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "api/checks.h"
#include "base/base.h"
#include "core/core.h"
#include "rendezvous/rendezvous.h"

using namespace flagcx;

namespace {

flagcxResult_t checkNotInGroup(const char *fn) {
  if (commGroupDepth() > 0)
    return argError(flagcxInvalidUsage, kInit, "%s: cannot be called inside a group", fn);
  return flagcxSuccess;
}

// The exclude list: in range, no duplicates, not every rank, not this one.
flagcxResult_t checkExclude(const char *fn, const flagcxComm *comm, const int *list, int count,
                            std::vector<int> *out) {
  if (count < 0)
    return argError(flagcxInvalidArgument, kInit, "%s: excludeRanksCount %d is negative", fn,
                    count);
  if (count > 0 && list == nullptr)
    return argError(flagcxInvalidArgument, kInit, "%s: excludeRanksList is NULL but "
                    "excludeRanksCount is %d", fn, count);
  std::vector<bool> seen(static_cast<size_t>(comm->nranks));
  for (int i = 0; i < count; i++) {
    int r = list[i];
    if (r < 0 || r >= comm->nranks)
      return argError(flagcxInvalidArgument, kInit, "%s: excludeRanksList[%d] = %d is out of "
                      "range [0, %d)", fn, i, r, comm->nranks);
    if (seen[static_cast<size_t>(r)])
      return argError(flagcxInvalidArgument, kInit, "%s: excludeRanksList names rank %d twice",
                      fn, r);
    seen[static_cast<size_t>(r)] = true;
    out->push_back(r);
  }
  if (count >= comm->nranks)
    return argError(flagcxInvalidArgument, kInit, "%s: excludeRanksList excludes every one of "
                    "the %d rank(s)", fn, comm->nranks);
  if (seen[static_cast<size_t>(comm->rank)])
    return argError(flagcxInvalidUsage, kInit, "%s: excludeRanksList names this rank (%d); only "
                    "the ranks that stay call flagcxCommShrink", fn, comm->rank);
  return flagcxSuccess;
}

// Grow ids used by this process: an id makes one communicator.
std::mutex g_usedMu;
std::set<std::string> g_usedIds;

flagcxResult_t takeGrowId(const char *fn, const flagcxUniqueId &id) {
  std::lock_guard<std::mutex> lk(g_usedMu);
  if (!g_usedIds.insert(std::string(id.internal, sizeof id.internal)).second)
    return argError(flagcxInvalidUsage, kInit, "%s: uniqueId was used by an earlier grow; each "
                    "grow needs a new id from flagcxCommGetUniqueId", fn);
  return flagcxSuccess;
}

// The id of a grow, and the sizes and rank against the parent size it names.
flagcxResult_t checkGrow(const char *fn, const flagcxComm *comm, int nranks,
                         const flagcxUniqueId *id, int rank) {
  int parentSize = comm ? comm->nranks : 0;
  if (id) {
    DecodedId d;
    API_CHECK(decodeUniqueId(*id, &d));
    if (d.growFrom == 0 || (comm && d.growFrom != comm->nranks))
      return argError(flagcxInvalidArgument, kInit, "%s: uniqueId was not made by "
                      "flagcxCommGetUniqueId on this communicator", fn);
    parentSize = d.growFrom;
  }
  if (nranks <= parentSize)
    return argError(flagcxInvalidArgument, kInit, "%s: nranks %d must be larger than the "
                    "parent's size %d", fn, nranks, parentSize);
  if (comm && rank != -1)
    return argError(flagcxInvalidArgument, kInit, "%s: rank %d: existing ranks pass -1 (they "
                    "keep their ranks)", fn, rank);
  if (!comm && (rank < parentSize || rank >= nranks))
    return argError(flagcxInvalidArgument, kInit, "%s: rank %d of a new rank must be in [%d, "
                    "%d) (the parent's size up to nranks)", fn, rank, parentSize, nranks);
  return id ? takeGrowId(fn, *id) : flagcxSuccess;
}

}  // namespace

extern "C" flagcxResult_t flagcxCommSplit(flagcxComm_t comm, int color, int key,
                                          flagcxComm_t *newcomm) {
  const char *fn = "flagcxCommSplit";
  API_CHECK(checkPtr(fn, "newcomm", newcomm));
  *newcomm = nullptr;
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkNotInGroup(fn));
  if (color < 0 && color != FLAGCX_SPLIT_NOCOLOR)
    return argError(flagcxInvalidArgument, kInit, "%s: color %d must be >= 0 or "
                    "FLAGCX_SPLIT_NOCOLOR", fn, color);
  return commSplit(comm, color, key, newcomm);
}

extern "C" flagcxResult_t flagcxCommShrink(flagcxComm_t comm, int *excludeRanksList,
                                           int excludeRanksCount, flagcxComm_t *newcomm,
                                           int shrinkFlags) {
  const char *fn = "flagcxCommShrink";
  API_CHECK(checkPtr(fn, "newcomm", newcomm));
  *newcomm = nullptr;
  API_CHECK(checkHandle(fn, comm));
  API_CHECK(checkNotInGroup(fn));
  if (shrinkFlags != FLAGCX_SHRINK_DEFAULT && shrinkFlags != FLAGCX_SHRINK_ABORT)
    return argError(flagcxInvalidArgument, kInit, "%s: shrinkFlags 0x%x is neither "
                    "FLAGCX_SHRINK_DEFAULT nor FLAGCX_SHRINK_ABORT", fn, shrinkFlags);
  std::vector<int> exclude;
  API_CHECK(checkExclude(fn, comm, excludeRanksList, excludeRanksCount, &exclude));
  return commShrink(comm, exclude, shrinkFlags == FLAGCX_SHRINK_ABORT, newcomm);
}

extern "C" flagcxResult_t flagcxCommGetUniqueId(flagcxComm_t comm, flagcxUniqueId *uniqueId) {
  const char *fn = "flagcxCommGetUniqueId";
  API_CHECK(checkComm(fn, comm));
  API_CHECK(checkPtr(fn, "uniqueId", uniqueId));
  return commGrowId(comm, uniqueId);
}

extern "C" flagcxResult_t flagcxCommGrow(flagcxComm_t comm, int nranks,
                                         const flagcxUniqueId *uniqueId, int rank,
                                         flagcxComm_t *newcomm) {
  const char *fn = "flagcxCommGrow";
  API_CHECK(checkPtr(fn, "newcomm", newcomm));
  *newcomm = nullptr;
  if (comm) API_CHECK(checkComm(fn, comm));
  if (!comm) API_CHECK(checkPtr(fn, "uniqueId (a new rank's)", uniqueId));
  API_CHECK(checkNotInGroup(fn));
  API_CHECK(checkGrow(fn, comm, nranks, uniqueId, rank));
  return commGrow(comm, nranks, uniqueId, rank, newcomm);
}

extern "C" flagcxResult_t flagcxCommRevoke(flagcxComm_t comm, int revokeFlags) {
  const char *fn = "flagcxCommRevoke";
  API_CHECK(checkHandle(fn, comm));
  if (revokeFlags != 0)
    return argError(flagcxInvalidArgument, kInit, "%s: revokeFlags %d must be 0", fn,
                    revokeFlags);
  return commRevoke(comm);
}
