// FLAGCX_DEVICE: which device adapter this process's ranks drive.
//   auto  CUDA when this build has the CUDA adapter and a GPU is usable, else host
//   host  plain CPU memory
//   cuda  the CUDA adapter, or an error when it cannot be had
#include <cctype>
#include <string>

#include "adapters/device/adapter.h"
#include "base/base.h"
#include "flagcx_config.h"

namespace flagcx {

namespace {
// The CUDA adapter when this build has one and a GPU is usable.
DeviceAdapter *usableCuda() {
#if FLAGCX_HAVE_CUDA
  return cudaAdapter();
#else
  return nullptr;
#endif
}
}  // namespace

DeviceAdapter *selectedAdapter() {
  std::string v = paramStr(Param::DEVICE);
  for (char &c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v.empty() || v == "auto") {
    DeviceAdapter *c = usableCuda();
    return c ? c : hostAdapter();
  }
  if (v == "host") return hostAdapter();
  if (v == "cuda") {
    if (DeviceAdapter *c = usableCuda()) return c;
    (void)argError(flagcxInvalidUsage, kInit,
                   FLAGCX_HAVE_CUDA ? "FLAGCX_DEVICE=cuda but no CUDA device is usable"
                                    : "FLAGCX_DEVICE=cuda but this build of flagcx has no CUDA "
                                      "adapter (use FLAGCX_DEVICE=host or auto)");
    return nullptr;
  }
  (void)argError(flagcxInvalidUsage, kInit, "FLAGCX_DEVICE=%s is not one of auto, host, cuda",
                 paramStr(Param::DEVICE).c_str());
  return nullptr;
}

}  // namespace flagcx
