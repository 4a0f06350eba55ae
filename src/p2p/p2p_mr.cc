// Registered regions of a P2P engine, descriptors, and the same-host IPC
// helpers for device memory (flagcx_p2p.h, "Memory registration",
// "Descriptors", "Same-node IPC helpers").
#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "adapters/adapters.h"
#include "base/base.h"
#include "flagcx_config.h"
#include "p2p/p2p_internal.h"

using namespace flagcx;
using namespace flagcx::p2p;

namespace {

std::atomic<uint64_t> g_nextMr{1};

// The 128-byte IPC info: the adapter's reference to the allocation, then
// where the addressed bytes start in it and how many there are.
struct IpcInfo {
  char ref[DeviceAdapter::kIpcRefBytes];
  uint64_t regionBase;
  uint64_t offset;  // from the allocation's base
  uint64_t size;
  uint32_t flags;  // 1: CUDA
  uint32_t pad;
};
static_assert(sizeof(IpcInfo) == FLAGCX_P2P_IPC_INFO_SIZE);

}  // namespace

namespace flagcx::p2p {

DeviceAdapter *deviceAdapter() {
#if FLAGCX_HAVE_CUDA
  static DeviceAdapter *a = cudaAdapter();
  return a;
#else
  return nullptr;
#endif
}

const Region *findRegion(FlagcxP2pEngine *e, uint64_t addr, uint64_t len, uint32_t rkey) {
  auto it = e->regions.upper_bound(addr);
  if (it == e->regions.begin()) return nullptr;
  --it;
  const Region &r = it->second;
  if (addr < r.base || addr - r.base > r.size || len > r.size - (addr - r.base)) return nullptr;
  if (rkey != 0 && rkey != r.rkey) return nullptr;
  return &r;
}

const WireRegion *findRemoteRegion(const FlagcxP2pConn *c, uint64_t addr, uint64_t len) {
  const auto &t = c->remoteRegions;
  auto it = std::upper_bound(t.begin(), t.end(), addr,
                             [](uint64_t a, const WireRegion &w) { return a < w.base; });
  if (it == t.begin()) return nullptr;
  const WireRegion &r = *--it;
  if (addr - r.base > r.size || len > r.size - (addr - r.base)) return nullptr;
  return &r;
}

std::vector<WireRegion> regionTable(FlagcxP2pEngine *e) {
  std::shared_lock<std::shared_mutex> lk(e->mrMu);
  std::vector<WireRegion> t;
  t.reserve(e->regions.size());
  for (auto &[base, r] : e->regions)
    t.push_back(WireRegion{r.base, r.size, r.rkey, r.device, r.vmr ? r.vmr->rkey : 0, 0});
  return t;
}

}  // namespace flagcx::p2p

int flagcxP2pEngineReg(FlagcxP2pEngine *engine, uintptr_t data, size_t size, FlagcxP2pMr &mrId) {
  if (!engine || data == 0 || size == 0 || data + size < data) {
    WARN(kP2P, "flagcxP2pEngineReg: %s", !engine ? "engine is NULL"
                                         : data == 0 ? "data is NULL"
                                                     : "size is 0 or wraps the address space");
    return -1;
  }
  // Host memory is also registered with the RDMA device (remote write and
  // read) for peers on other hosts (p2p_verbs.cc) — before the region lock,
  // since pinning a large buffer takes time and every access waits on that
  // lock.  Device memory is not (that would need dma-buf, docs/RDMA.md): its
  // pieces keep to the lanes.
  DeviceAdapter *dev = deviceAdapter();
  const bool devMem = dev && dev->isDeviceMemory(reinterpret_cast<void *>(data));
  std::unique_ptr<rdma::Mr> vmr;
  if (engine->rdma && !devMem &&
      engine->rdma->regMr(reinterpret_cast<void *>(data), size,
                          rdma::kLocalWrite | rdma::kRemoteWrite | rdma::kRemoteRead,
                          &vmr) != flagcxSuccess) {
    WARN(kP2P, "flagcxP2pEngineReg: the RDMA device could not register [0x%lx, +%zu); peers "
               "on other hosts reach it over the TCP lanes", static_cast<unsigned long>(data), size);
    vmr.reset();
  }
  std::unique_lock<std::shared_mutex> lk(engine->mrMu);
  auto same = engine->regions.find(data);
  if (same != engine->regions.end() && same->second.size == size) {
    mrId = same->second.mrId;  // FlagCX's: registering a base again returns its region
    return 0;
  }
  // Regions of one engine never overlap: a remote address names one region.
  auto next = engine->regions.lower_bound(data);
  bool overlap = (next != engine->regions.end() && next->first < data + size);
  if (!overlap && next != engine->regions.begin()) {
    auto prev = std::prev(next);
    overlap = prev->second.base + prev->second.size > data;
  }
  if (overlap) {
    WARN(kP2P, "flagcxP2pEngineReg: [0x%lx, +%zu) overlaps a region already registered",
         static_cast<unsigned long>(data), size);
    return -1;
  }
  Region r;
  r.mrId = g_nextMr.fetch_add(1);
  r.base = data;
  r.size = size;
  do randomBytes(&r.rkey, sizeof(r.rkey));
  while (r.rkey == 0);
  r.vmr = std::move(vmr);
  if (devMem) {
    r.device = true;
    r.ipcRef.assign(DeviceAdapter::kIpcRefBytes, 0);
    if (!dev->ipcSupported() ||
        dev->ipcExport(reinterpret_cast<void *>(data), r.ipcRef.data()) != flagcxSuccess)
      r.ipcRef.clear();  // still usable through host staging
  }
  engine->mrBase[r.mrId] = data;
  mrId = r.mrId;
  INFO(kP2P, "P2P: registered %s region %lu [0x%lx, +%zu)", r.device ? "device" : "host",
       static_cast<unsigned long>(r.mrId), static_cast<unsigned long>(data), size);
  engine->regions.emplace(data, std::move(r));
  return 0;
}

void flagcxP2pEngineMrDestroy(FlagcxP2pEngine *engine, FlagcxP2pMr mr) {
  if (!engine) {
    WARN(kP2P, "flagcxP2pEngineMrDestroy: engine is NULL");
    return;
  }
  // The exclusive lock waits for every access in flight to this engine's
  // memory (targets hold it shared while they move bytes).
  std::unique_lock<std::shared_mutex> lk(engine->mrMu);
  auto it = engine->mrBase.find(mr);
  if (it == engine->mrBase.end()) {
    WARN(kP2P, "flagcxP2pEngineMrDestroy: %lu is not a registered region of this engine",
         static_cast<unsigned long>(mr));
    return;
  }
  engine->regions.erase(it->second);
  engine->mrBase.erase(it);
}

int flagcxP2pEnginePrepareDesc(FlagcxP2pEngine *engine, FlagcxP2pMr mr, const void *data,
                               size_t size, char *descBuf) {
  if (!engine || !data || !descBuf) {
    WARN(kP2P, "flagcxP2pEnginePrepareDesc: %s is NULL",
         !engine ? "engine" : !data ? "data" : "descBuf");
    return -1;
  }
  std::shared_lock<std::shared_mutex> lk(engine->mrMu);
  auto it = engine->mrBase.find(mr);
  const Region *r = it == engine->mrBase.end()
                        ? nullptr
                        : findRegion(engine, reinterpret_cast<uint64_t>(data), size, 0);
  if (!r || r->mrId != mr || size > UINT32_MAX) {
    WARN(kP2P, "flagcxP2pEnginePrepareDesc: [%p, +%zu) is not inside region %lu", data, size,
         static_cast<unsigned long>(mr));
    return -1;
  }
  FlagcxP2pRdmaDesc d{};
  d.addr = reinterpret_cast<uint64_t>(data);
  d.size = static_cast<uint32_t>(size);
  d.rkey = r->rkey;
  flagcxP2pSerializeRdmaDesc(d, descBuf);
  return 0;
}

int flagcxP2pEngineUpdateDesc(FlagcxP2pRdmaDesc &desc, uint64_t remoteAddr, uint32_t size) {
  desc.addr = remoteAddr;
  desc.size = size;
  return 0;
}

int flagcxP2pEngineGetIpcInfo(FlagcxP2pEngine *engine, uintptr_t addr, char *ipcBuf,
                              bool *hasIpc) {
  if (hasIpc) *hasIpc = false;
  if (!engine || !ipcBuf || !hasIpc) {
    WARN(kP2P, "flagcxP2pEngineGetIpcInfo: %s is NULL",
         !engine ? "engine" : !ipcBuf ? "ipcBuf" : "hasIpc");
    return -1;
  }
  std::shared_lock<std::shared_mutex> lk(engine->mrMu);
  const Region *r = findRegion(engine, addr, 1, 0);
  if (!r) {
    WARN(kP2P, "flagcxP2pEngineGetIpcInfo: 0x%lx is not in a registered region",
         static_cast<unsigned long>(addr));
    return -1;
  }
  if (!r->device || r->ipcRef.empty()) return 0;  // host memory: no IPC info
  IpcInfo in{};
  memcpy(in.ref, r->ipcRef.data(), sizeof(in.ref));
  in.regionBase = r->base;
  in.offset = deviceAdapter()->ipcOffset(in.ref) + (addr - r->base);
  in.size = r->base + r->size - addr;
  in.flags = 1;
  memcpy(ipcBuf, &in, sizeof(in));
  *hasIpc = true;
  return 0;
}

int flagcxP2pEngineUpdateIpcInfo(char *ipcBuf, uintptr_t addr, uintptr_t baseAddr, size_t size) {
  if (!ipcBuf || addr < baseAddr) {
    WARN(kP2P, "flagcxP2pEngineUpdateIpcInfo: %s",
         !ipcBuf ? "ipcBuf is NULL" : "addr is below baseAddr");
    return -1;
  }
  IpcInfo in;
  memcpy(&in, ipcBuf, sizeof(in));
  if (in.flags != 1) {
    WARN(kP2P, "flagcxP2pEngineUpdateIpcInfo: ipcBuf holds no IPC info");
    return -1;
  }
  in.offset += addr - baseAddr;
  in.size = size;
  memcpy(ipcBuf, &in, sizeof(in));
  return 0;
}

namespace flagcx::p2p {

// The address in this process of the device memory an IPC info names (len
// bytes from its start).  Imported allocations are kept for the life of the
// process: a KV cache is read and written many times.  `last` remembers the
// allocation of the previous call: the pieces of one vector mostly lie in
// one allocation, and the lookup below (a lock, a string, a map) cost about
// as much per piece as the copy of a 32 KiB block.
int ipcRemote(const char *ipcBuf, size_t len, char **remote, IpcLast *last) {
  static std::mutex mu;
  struct Imported {
    void *base;
    size_t bytes;  // the allocation's size (0: unknown)
  };
  static std::map<std::string, Imported> imported;  // by the adapter's allocation id
  DeviceAdapter *dev = deviceAdapter();
  const auto *in = reinterpret_cast<const IpcInfo *>(ipcBuf);
  uint32_t flags;
  uint64_t size, offset;
  memcpy(&flags, &in->flags, sizeof(flags));
  memcpy(&size, &in->size, sizeof(size));
  memcpy(&offset, &in->offset, sizeof(offset));
  if (!dev || flags != 1 || len > size) {
    WARN(kP2P, "P2P IPC: %s", !dev ? "no usable CUDA device in this process"
                              : flags != 1 ? "an ipcBufs entry holds no IPC info"
                                           : "transfer longer than the IPC range");
    return -1;
  }
  size_t idLen = dev->ipcIdBytes();
  if (!last->base || idLen > sizeof(last->id) || memcmp(last->id, in->ref, idLen) != 0) {
    Imported got{};
    {
      std::lock_guard<std::mutex> lk(mu);
      std::string id(in->ref, idLen);
      auto it = imported.find(id);
      if (it != imported.end()) {
        got = it->second;
      } else {
        if (dev->ipcImportBase(in->ref, &got.base) != flagcxSuccess) return -1;
        got.bytes = dev->ipcMappedBytes(got.base);
        imported.emplace(id, got);
      }
    }
    last->base = got.base;
    last->bytes = got.bytes;
    memcpy(last->id, in->ref, std::min(idLen, sizeof(last->id)));
  }
  // The peer's info names the offset: it must stay inside the allocation
  // mapped here (where its size is known), whatever the info's own size says.
  if (last->bytes && (offset > last->bytes || len > last->bytes - offset)) {
    WARN(kP2P, "P2P IPC: an ipcBufs entry names [+%lu, +%zu) past its allocation's %zu bytes",
         static_cast<unsigned long>(offset), len, last->bytes);
    return -1;
  }
  *remote = static_cast<char *>(last->base) + offset;
  return 0;
}

int ipcCopyBatch(const std::vector<DeviceAdapter::CopyPiece> &kernel,
                 const std::vector<DeviceAdapter::CopyPiece> &other) {
  DeviceAdapter *dev = deviceAdapter();
  if (!dev) return -1;
  for (auto &p : other)
    if (dev->copyAsync(p.dst, p.src, p.bytes) != flagcxSuccess) return -1;
  return dev->copyBatchAsync(kernel.data(), kernel.size()) == flagcxSuccess ? 0 : -1;
}

int ipcFlush() {
  DeviceAdapter *dev = deviceAdapter();
  return dev && dev->flush() == flagcxSuccess ? 0 : -1;
}

}  // namespace flagcx::p2p
