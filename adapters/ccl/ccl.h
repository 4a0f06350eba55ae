// Whole-collective back ends.  On a homogeneous communicator whose devices
// have a vendor library (NCCL on CUDA), every operation passes straight to it;
// otherwise (or with FLAGCX_USE_HETERO_COMM=1) the flagcx engine runs it.
#pragma once
#include <memory>

#include "base/base.h"
#include "flagcx.h"

namespace flagcx {

class Bootstrap;
class DeviceAdapter;

// A vendor library's own entry points and communicator, for a caller that
// already speaks that library's ABI (the NCCL drop-in, plugins/nccl): its
// arguments need no translation, so it may call straight through instead of
// paying flagcx's API layer on every operation.  Plain pointers to functions
// with nccl.h's signatures; null where the library lacks one.
struct VendorDirect {
  void *comm;  // the vendor's communicator (ncclComm_t)
  void *allReduce, *reduce, *broadcast, *allGather, *reduceScatter;
  void *alltoAll, *gather, *scatter, *send, *recv;
  void *getLastError;  // const char *(ncclComm_t)
  void *groupStart, *groupEnd;  // ncclResult_t (void)
};

class CclAdapter {
 public:
  // The direct entry points of this back end, or null (the default).
  virtual const VendorDirect *direct() const { return nullptr; }
  virtual ~CclAdapter() = default;
  virtual const char *name() const = 0;
  // All collectives of CollArgs (barrier included); stream-ordered.
  virtual flagcxResult_t coll(const CollArgs &a, flagcxStream_t stream) = 0;
  virtual flagcxResult_t send(const void *buf, size_t count, flagcxDataType_t dt, int peer,
                              flagcxStream_t stream) = 0;
  virtual flagcxResult_t recv(void *buf, size_t count, flagcxDataType_t dt, int peer,
                              flagcxStream_t stream) = 0;
  // Must not block: called from flagcxCommDestroy/Abort.
  virtual flagcxResult_t destroy(bool abort) = 0;
};

// What a vendor back end is given: who this rank is, the bootstrap network
// to agree and exchange the vendor's own id over, and this rank's device.
struct CclContext {
  int rank = 0, nranks = 0;
  Bootstrap *bs = nullptr;
  DeviceAdapter *dev = nullptr;
  bool homogeneous = false;  // every rank drives the same kind of device
};

// Create the vendor pass-through when it applies (homogeneous, vendor
// library loadable, FLAGCX_USE_HETERO_COMM unset).  *out stays null when it
// does not apply; an error is returned only when it applies but fails.
// Collective over the communicator (uses ctx.bs).
flagcxResult_t makeVendorCcl(const CclContext &ctx, std::unique_ptr<CclAdapter> *out);
// The vendor pass-through of `comm` when it offers direct entry points
// (FLAGCX_NCCL_DROPIN_DIRECT=1 and a vendor back end), else null.
const VendorDirect *commVendorDirect(flagcxComm_t comm);
// Thread-wide group brackets for the vendor library (no-ops when none is loaded).
void vendorGroupStart();
void vendorGroupEnd();

}  // namespace flagcx
