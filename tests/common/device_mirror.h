// MR_DEVICE=cuda runs of the multi-rank tests: the switch, and device copies
// of a call's two host buffers (pointers into either map across, so that an
// in-place call stays in place), copied back for the host-side checks.
#pragma once
#include <cstdlib>
#include <vector>

#include "flagcx.h"

namespace testdev {

// MR_DEVICE set (tools/gpu-check.sh sets it to cuda): buffers in device memory.
inline bool deviceRun() { return std::getenv("MR_DEVICE") && *std::getenv("MR_DEVICE"); }

// Device copies of two host buffers, allocated by the handle's deviceMalloc
// (what flagcxMemAlloc gives on that adapter) and filled from the host.
struct DeviceMirror {
  flagcxDeviceHandle_t h = nullptr;
  std::vector<char> *hb[2] = {nullptr, nullptr};
  char *db[2] = {nullptr, nullptr};
  int init(flagcxDeviceHandle_t handle, std::vector<char> &a, std::vector<char> &b) {
    h = handle;
    hb[0] = &a;
    hb[1] = &b;
    for (int k = 0; k < 2; k++) {
      void *p = nullptr;
      if (h->deviceMalloc(&p, hb[k]->size() + 16, flagcxMemDevice, nullptr) != flagcxSuccess) return 1;
      db[k] = static_cast<char *>(p);
      if (h->deviceMemcpy(db[k], hb[k]->data(), hb[k]->size(), flagcxMemcpyHostToDevice, nullptr) !=
          flagcxSuccess)
        return 1;
    }
    return 0;
  }
  char *map(char *p) const {
    for (int k = 0; k < 2; k++)
      if (p >= hb[k]->data() && p <= hb[k]->data() + hb[k]->size()) return db[k] + (p - hb[k]->data());
    return p;
  }
  char *unmap(char *p) const {
    for (int k = 0; k < 2; k++)
      if (db[k] && p >= db[k] && p <= db[k] + hb[k]->size()) return hb[k]->data() + (p - db[k]);
    return p;
  }
  int back() {
    for (int k = 0; k < 2; k++)
      if (h->deviceMemcpy(hb[k]->data(), db[k], hb[k]->size(), flagcxMemcpyDeviceToHost, nullptr) !=
          flagcxSuccess)
        return 1;
    return 0;
  }
  ~DeviceMirror() {
    for (char *p : db)
      if (p) h->deviceFree(p, flagcxMemDevice, nullptr);
  }
};

}  // namespace testdev
