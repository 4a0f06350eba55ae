// Built where infiniband/verbs.h was missing: no libibverbs binding.
#include "net/ibverbs/rdma_device.h"

namespace flagcx::rdma {

static const char *kWhy = "built without infiniband/verbs.h (install libibverbs-dev)";

int verbsDeviceCount(std::string *why, std::vector<std::string> *) {
  if (why) *why = kWhy;
  return -1;
}

flagcxResult_t openVerbsDevice(std::unique_ptr<Device> *out, std::string *why) {
  out->reset();
  *why = kWhy;
  return flagcxSuccess;
}

}  // namespace flagcx::rdma
