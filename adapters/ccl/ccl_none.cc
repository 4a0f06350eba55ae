// Builds without a vendor CCL: every communicator runs on the flagcx engine.
#include "adapters/ccl/ccl.h"

namespace flagcx {
flagcxResult_t makeVendorCcl(const CclContext &, std::unique_ptr<CclAdapter> *out) {
  out->reset();
  return flagcxSuccess;
}
void vendorGroupStart() {}
void vendorGroupEnd() {}
}  // namespace flagcx
