// Communicators: creation (alone, in a group, all at once, non-blocking),
// split, queries, destruction; registration; memory.  Groups: group.cc;
// shrink, grow and revoke: elastic.cc.
#include <algorithm>
#include <cstring>
#include <new>

#include "dropin.h"
#include "exports.h"
#include "forward.h"

using namespace ncclx;

namespace ncclx {

// Wait for a communicator whose creation was deferred or runs in the
// background; fails when it cannot be used.
ncclResult_t settle(const char *fn, ncclComm *c) {
  int s = c->state.load(std::memory_order_acquire);
  if (s == ncclComm::kDeferred)
    return fail(ncclInvalidUsage, fn,
                "the communicator is created by the enclosing group: call ncclGroupEnd first");
  if (s == ncclComm::kRunning) {
    std::lock_guard<std::mutex> lk(c->mu);
    if (c->initThread.joinable()) c->initThread.join();
    s = c->state.load(std::memory_order_acquire);
  }
  if (s == ncclComm::kFailed)
    return fail(ncclInvalidUsage, fn, "the communicator's creation failed (%s)",
                ncclErrorText(c->initResult));
  return ncclSuccess;
}

ncclResult_t enterSlow(const char *fn, ncclComm *c, flagcxComm_t *fc) {
  if (!c) return fail(ncclInvalidArgument, fn, "comm is NULL");
  if (c->magic != ncclComm::kMagic)
    return fail(ncclInvalidArgument, fn, "comm is not a communicator (destroyed?)");
  NCCLX_CHECK(settle(fn, c));
  *fc = c->fc;
  return ncclSuccess;
}

ncclComm *newComm(int nranks, int rank, int dev, const Config &cfg) {
  auto *c = new (std::nothrow) ncclComm();
  if (!c) return nullptr;
  c->nranks = nranks;
  c->rank = rank;
  c->device = dev;
  c->blocking = cfg.blocking;
  c->name = cfg.commName;
  return c;
}

// Creation as NCCL schedules it: inside a group at ncclGroupEnd; when not
// blocking on a thread of its own (ncclInProgress until done); else now.
ncclResult_t startCreate(const char *fn, ncclComm *c, std::function<ncclResult_t()> run) {
  if (inGroup()) {
    c->state.store(ncclComm::kDeferred, std::memory_order_release);
    defer({c, c->device, std::move(run)});
    return ncclSuccess;
  }
  if (!c->blocking) {
    c->state.store(ncclComm::kRunning, std::memory_order_release);
    int dev = c->device;
    std::lock_guard<std::mutex> lk(c->mu);
    c->initThread = std::thread([c, dev, run = std::move(run)] {
      ncclResult_t r = ncclSuccess;
      if (dev >= 0 && device() && device()->setDevice(dev) != flagcxSuccess)
        r = fail(ncclInvalidArgument, "ncclCommInitRankConfig", "cannot select device %d", dev);
      if (r == ncclSuccess) r = run();
      c->initResult = r;
      c->state.store(r == ncclSuccess ? ncclComm::kReady : ncclComm::kFailed,
                     std::memory_order_release);
    });
    return ncclInProgress;
  }
  (void)fn;
  ncclResult_t r = run();
  c->initResult = r;
  if (r != ncclSuccess) c->state.store(ncclComm::kFailed, std::memory_order_release);
  return r;
}

}  // namespace ncclx

namespace {

ncclResult_t currentDevice(int *dev) {
  *dev = 0;
  flagcxDeviceHandle_t h = device();
  if (!h) return fail(ncclUnhandledCudaError, "ncclCommInitRank", "no device adapter");
  if (h->getDevice(dev) != flagcxSuccess)
    return fail(ncclUnhandledCudaError, "ncclCommInitRank", "cannot read the current device");
  return ncclSuccess;
}

// Create the flagcx communicator of `c` on the calling thread (current
// device already selected).
ncclResult_t createNow(ncclComm *c, int nranks, const flagcxUniqueId &id, int rank) {
  flagcxUniqueId copy = id;
  flagcxResult_t r = flagcxCommInitRank(&c->fc, nranks, &copy, rank);
  if (r != flagcxSuccess) {
    c->fc = nullptr;
    // flagcx logged why (one WARN line); this adds which rank, at INFO.
    logLine(Level::Info, "rank %d of %d: flagcxCommInitRank: %s", rank, nranks,
            flagcxGetErrorString(r));
    return fromFlagcx("ncclCommInitRank", r);
  }
  logLine(Level::Info, "rank %d of %d created on device %d%s%s", rank, nranks, c->device,
          c->name.empty() ? "" : ", name ", c->name.c_str());
  setDirect(c);
  return ncclSuccess;
}

ncclResult_t initRank(const char *fn, ncclComm_t *out, int nranks, const ncclUniqueId &nid, int rank,
                      const ncclConfig_t *config) {
  if (!out) return fail(ncclInvalidArgument, fn, "comm is NULL");
  *out = nullptr;
  if (nranks < 1) return fail(ncclInvalidArgument, fn, "nranks %d must be >= 1", nranks);
  if (rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, fn, "rank %d is out of range [0, %d)", rank, nranks);
  Config cfg;
  std::string why;
  if (parseConfig(config, getenv("NCCL_COMM_BLOCKING"), &cfg, &why) != ncclSuccess)
    return fail(ncclInvalidArgument, fn, "%s", why.c_str());
  if (!cfg.ignored.empty())
    logLine(Level::Info, "%s: config fields without a flagcx meaning, ignored: %s", fn,
            cfg.ignored.c_str());
  int dev = 0;
  NCCLX_CHECK(currentDevice(&dev));
  ncclComm *c = newComm(nranks, rank, dev, cfg);
  if (!c) return fail(ncclSystemError, fn, "out of memory");
  flagcxUniqueId id;
  unpackId(nid, &id);
  ncclResult_t r = startCreate(fn, c, [c, nranks, id, rank] { return createNow(c, nranks, id, rank); });
  if (r != ncclSuccess && r != ncclInProgress) {
    delete c;
    return r;
  }
  *out = c;
  return r;
}

void deleteComm(ncclComm *c) {
  {
    std::lock_guard<std::mutex> lk(c->mu);
    if (c->initThread.joinable()) c->initThread.join();
  }
  if (c->groupStream) device()->streamDestroy(c->groupStream);
  c->magic = 0;
  delete c;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *version) {
  NCCLX_FROM_REAL_NCCL(ncclGetVersion, version);
  if (!version) return fail(ncclInvalidArgument, "ncclGetVersion", "version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  NCCLX_FROM_REAL_NCCL(ncclGetUniqueId, uniqueId);
  if (!uniqueId) return fail(ncclInvalidArgument, "ncclGetUniqueId", "uniqueId is NULL");
  flagcxUniqueId id;
  flagcxResult_t r = flagcxGetUniqueId(&id);
  if (r != flagcxSuccess)
    return fail(toNccl(r), "ncclGetUniqueId", "flagcxGetUniqueId: %s", flagcxGetErrorString(r));
  std::string why;
  if (packId(id, uniqueId, &why) != ncclSuccess)
    return fail(ncclInternalError, "ncclGetUniqueId", "%s", why.c_str());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  return initRank("ncclCommInitRank", comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config) {
  return initRank("ncclCommInitRankConfig", comm, nranks, commId, rank, config);
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config) {
  const char *fn = "ncclCommInitRankScalable";
  if (nId < 1 || !commIds)
    return fail(ncclInvalidArgument, fn, "needs at least one unique id (nId %d, commIds %p)", nId,
                static_cast<void *>(commIds));
  // Every rank holds the same ids; flagcx's bootstrap needs only the first.
  return initRank(fn, newcomm, nranks, commIds[0], myrank, config);
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  const char *fn = "ncclCommInitAll";
  if (!comms) return fail(ncclInvalidArgument, fn, "comms is NULL");
  if (ndev < 1) return fail(ncclInvalidArgument, fn, "ndev %d must be >= 1", ndev);
  flagcxDeviceHandle_t h = device();
  if (!h) return fail(ncclUnhandledCudaError, fn, "no device adapter");
  int ndevices = 0;
  if (h->getDeviceCount(&ndevices) != flagcxSuccess || ndevices < 1)
    return fail(ncclUnhandledCudaError, fn, "no device");
  for (int i = 0; i < ndev; i++) {
    int d = devlist ? devlist[i] : i;
    // Unlike NCCL, ranks may share a device (flagcx runs them); without a
    // list, rank i takes device i modulo the count.
    if (devlist && (d < 0 || d >= ndevices))
      return fail(ncclInvalidArgument, fn, "devlist[%d] = %d is not a device (0..%d)", i, d,
                  ndevices - 1);
    comms[i] = nullptr;
  }
  flagcxUniqueId id;
  flagcxResult_t fr = flagcxGetUniqueId(&id);
  if (fr != flagcxSuccess)
    return fail(toNccl(fr), fn, "flagcxGetUniqueId: %s", flagcxGetErrorString(fr));
  Config cfg;
  std::vector<Deferred> items;
  for (int i = 0; i < ndev; i++) {
    int d = devlist ? devlist[i] : i % ndevices;
    ncclComm *c = newComm(ndev, i, d, cfg);
    if (!c) {
      for (auto &it : items) delete it.comm;
      return fail(ncclSystemError, fn, "out of memory");
    }
    items.push_back({c, d, [c, ndev, id, i] { return createNow(c, ndev, id, i); }});
  }
  ncclResult_t r = runAll(items);
  if (r != ncclSuccess) {
    for (auto &it : items) {
      if (it.comm->fc) flagcxCommDestroy(it.comm->fc);
      deleteComm(it.comm);
    }
    return r;
  }
  for (int i = 0; i < ndev; i++) comms[i] = items[static_cast<size_t>(i)].comm;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config) {
  const char *fn = "ncclCommSplit";
  flagcxComm_t parent;
  NCCLX_CHECK(enter(fn, comm, &parent));
  if (!newcomm) return fail(ncclInvalidArgument, fn, "newcomm is NULL");
  *newcomm = nullptr;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(ncclInvalidArgument, fn, "color %d must be >= 0 or NCCL_SPLIT_NOCOLOR", color);
  Config cfg;
  std::string why;
  if (parseConfig(config, getenv("NCCL_COMM_BLOCKING"), &cfg, &why) != ncclSuccess)
    return fail(ncclInvalidArgument, fn, "%s", why.c_str());
  if (!config) cfg.blocking = comm->blocking;  // NCCL: the parent's setting
  ncclComm *c = nullptr;
  if (color != NCCL_SPLIT_NOCOLOR) {
    c = newComm(0, -1, comm->device, cfg);
    if (!c) return fail(ncclSystemError, fn, "out of memory");
  }
  ncclComm *parentComm = comm;
  auto run = [parentComm, c, color, key] { return splitNow(parentComm, c, color, key); };
  ncclResult_t r;
  if (c) {
    r = startCreate(fn, c, run);
  } else if (inGroup()) {
    defer({nullptr, comm->device, run});  // still takes part in the exchange
    r = ncclSuccess;
  } else {
    r = run();
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    if (c) delete c;
    return r;
  }
  *newcomm = c;
  return r;
}

// NCCL 2.28's device API (nccl_device/core.h, not nccl.h) has no flagcx
// meaning, but PyTorch 2.x's libtorch_cuda.so links these two: they must exist
// for it to load under the drop-in.  NVIDIA's NCCL calls its own
// ncclDevCommDestroy through the PLT, so a foreign communicator goes back to it.
struct ncclDevCommRequirements;
struct ncclDevComm;

ncclResult_t ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements *reqs,
                               ncclDevComm *outDevComm) {
  NCCLX_FOREIGN_COMM(ncclDevCommCreate, comm, comm, reqs, outDevComm);
  return fail(ncclInvalidUsage, "ncclDevCommCreate",
              "not supported by flagcx (no device-side communication API)");
}

ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm *devComm) {
  NCCLX_FOREIGN_COMM(ncclDevCommDestroy, comm, comm, devComm);
  return fail(ncclInvalidUsage, "ncclDevCommDestroy",
              "not supported by flagcx (no device-side communication API)");
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  flagcxComm_t fc;
  NCCLX_CHECK(enter("ncclCommFinalize", comm, &fc));
  return fromFlagcx("ncclCommFinalize", flagcxCommFinalize(fc));
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  const char *fn = "ncclCommDestroy";
  if (!comm) return ncclSuccess;  // NCCL accepts NULL
  if (comm->magic != ncclComm::kMagic)
    return fail(ncclInvalidArgument, fn, "comm is not a communicator (destroyed?)");
  if (comm->state.load() == ncclComm::kDeferred)
    return fail(ncclInvalidUsage, fn, "the communicator's group has not ended yet");
  {
    std::lock_guard<std::mutex> lk(comm->mu);
    if (comm->initThread.joinable()) comm->initThread.join();
  }
  ncclResult_t r = ncclSuccess;
  if (comm->groupStream) device()->streamSynchronize(comm->groupStream);
  if (comm->fc) r = fromFlagcx(fn, flagcxCommDestroy(comm->fc));
  deleteComm(comm);
  return r;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  const char *fn = "ncclCommAbort";
  if (!comm) return ncclSuccess;
  if (comm->magic != ncclComm::kMagic)
    return fail(ncclInvalidArgument, fn, "comm is not a communicator (destroyed?)");
  if (comm->state.load() == ncclComm::kDeferred)
    return fail(ncclInvalidUsage, fn, "the communicator's group has not ended yet");
  {
    std::lock_guard<std::mutex> lk(comm->mu);
    if (comm->initThread.joinable()) comm->initThread.join();
  }
  ncclResult_t r = ncclSuccess;
  if (comm->fc) r = fromFlagcx(fn, flagcxCommAbort(comm->fc));
  deleteComm(comm);
  return r;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  NCCLX_FOREIGN_COMM(ncclCommGetAsyncError, comm, comm, asyncError);
  const char *fn = "ncclCommGetAsyncError";
  if (!comm) return fail(ncclInvalidArgument, fn, "comm is NULL");
  if (!asyncError) return fail(ncclInvalidArgument, fn, "asyncError is NULL");
  if (comm->magic != ncclComm::kMagic)
    return fail(ncclInvalidArgument, fn, "comm is not a communicator (destroyed?)");
  int s = comm->state.load(std::memory_order_acquire);
  if (s == ncclComm::kDeferred || s == ncclComm::kRunning) {
    *asyncError = ncclInProgress;
    return ncclSuccess;
  }
  if (s == ncclComm::kFailed) {
    *asyncError = comm->initResult;
    return ncclSuccess;
  }
  flagcxResult_t a = flagcxSuccess;
  flagcxResult_t r = flagcxCommGetAsyncError(comm->fc, &a);
  if (r != flagcxSuccess) return fromFlagcx(fn, r);
  *asyncError = toNccl(a);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  flagcxComm_t fc;
  NCCLX_CHECK(enter("ncclCommCount", comm, &fc));
  return fromFlagcx("ncclCommCount", flagcxCommCount(fc, count));
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  flagcxComm_t fc;
  NCCLX_CHECK(enter("ncclCommCuDevice", comm, &fc));
  return fromFlagcx("ncclCommCuDevice", flagcxCommGetDeviceNumber(fc, device));
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  flagcxComm_t fc;
  NCCLX_CHECK(enter("ncclCommUserRank", comm, &fc));
  return fromFlagcx("ncclCommUserRank", flagcxCommUserRank(fc, rank));
}

const char *ncclGetErrorString(ncclResult_t result) {
  NCCLX_FROM_REAL_NCCL(ncclGetErrorString, result);
  return ncclErrorText(result);
}

const char *ncclGetLastError(ncclComm_t comm) {
  bool ready = comm && comm->magic == ncclComm::kMagic && comm->state.load() == ncclComm::kReady;
  // A direct communicator's operations return NVIDIA's results unchanged
  // (coll.cc): NVIDIA's reason comes first (the drop-in's own text may be
  // from an older failure on this thread).
  if (ready && comm->direct.getLastError)
    if (const char *e = comm->direct.getLastError(comm->direct.comm); e && *e) return e;
  if (const char *e = lastError()) return e;
  return flagcxGetLastError(ready ? comm->fc : nullptr);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
void ncclResetDebugInit() {}  // flagcx reads FLAGCX_DEBUG once; nothing to reset
#pragma GCC diagnostic pop

ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  NCCLX_FROM_REAL_NCCL(ncclMemAlloc, ptr, size);
  return fromFlagcx("ncclMemAlloc", flagcxMemAlloc(ptr, size));
}

ncclResult_t ncclMemFree(void *ptr) {
  NCCLX_FROM_REAL_NCCL(ncclMemFree, ptr);
  return fromFlagcx("ncclMemFree", flagcxMemFree(ptr));
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle) {
  NCCLX_FOREIGN_COMM(ncclCommRegister, comm, comm, buff, size, handle);
  flagcxComm_t fc;
  NCCLX_CHECK(enter("ncclCommRegister", comm, &fc));
  return fromFlagcx("ncclCommRegister", flagcxCommRegister(fc, buff, size, handle));
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  NCCLX_FOREIGN_COMM(ncclCommDeregister, comm, comm, handle);
  flagcxComm_t fc;
  NCCLX_CHECK(enter("ncclCommDeregister", comm, &fc));
  return fromFlagcx("ncclCommDeregister", flagcxCommDeregister(fc, handle));
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                    int winFlags) {
  NCCLX_FOREIGN_COMM(ncclCommWindowRegister, comm, comm, buff, size, win, winFlags);
  const char *fn = "ncclCommWindowRegister";
  flagcxComm_t fc;
  NCCLX_CHECK(enter(fn, comm, &fc));
  if (!win) return fail(ncclInvalidArgument, fn, "win is NULL");
  *win = nullptr;
  if (!buff && size) return fail(ncclInvalidArgument, fn, "buff is NULL");
  auto *w = new (std::nothrow) ncclWindow_vidmem();
  if (!w) return fail(ncclSystemError, fn, "out of memory");
  w->comm = comm;
  w->buff = buff;
  w->size = size;
  flagcxResult_t r = flagcxCommWindowRegister(fc, buff, size, &w->fwin, winFlags);
  if (r == flagcxNotSupported) {
    // flagcx has no symmetric windows yet.  Collectives work on any memory,
    // so a window is only a record of the range (no symmetric kernels).
    w->fwin = nullptr;
    logLine(Level::Info, "%s: flagcx has no windows; %zu bytes at %p recorded only", fn, size, buff);
  } else if (r != flagcxSuccess) {
    delete w;
    return fromFlagcx(fn, r);
  }
  *win = w;
  return ncclSuccess;
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  NCCLX_FOREIGN_COMM(ncclCommWindowDeregister, comm, comm, win);
  const char *fn = "ncclCommWindowDeregister";
  flagcxComm_t fc;
  NCCLX_CHECK(enter(fn, comm, &fc));
  if (!win || win->magic != ncclWindow_vidmem::kMagic || win->comm != comm)
    return fail(ncclInvalidArgument, fn, "win is not a window of this communicator");
  ncclResult_t r = ncclSuccess;
  if (win->fwin) r = fromFlagcx(fn, flagcxCommWindowDeregister(fc, win->fwin));
  win->magic = 0;
  delete win;
  return r;
}

}  // extern "C"

NCCLX_PNAME(ncclGetVersion)
NCCLX_PNAME(ncclGetUniqueId)
NCCLX_PNAME(ncclCommInitRank)
NCCLX_PNAME(ncclCommInitRankConfig)
NCCLX_PNAME(ncclCommInitRankScalable)
NCCLX_PNAME(ncclCommInitAll)
NCCLX_PNAME(ncclCommSplit)
NCCLX_PNAME(ncclCommFinalize)
NCCLX_PNAME(ncclCommDestroy)
NCCLX_PNAME(ncclCommAbort)
NCCLX_PNAME(ncclCommGetAsyncError)
NCCLX_PNAME(ncclCommCount)
NCCLX_PNAME(ncclCommCuDevice)
NCCLX_PNAME(ncclCommUserRank)
NCCLX_PNAME(ncclDevCommCreate)
NCCLX_PNAME(ncclDevCommDestroy)
NCCLX_PNAME(ncclGetErrorString)
NCCLX_PNAME(ncclGetLastError)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
NCCLX_PNAME(ncclResetDebugInit)
#pragma GCC diagnostic pop
NCCLX_PNAME(ncclMemAlloc)
NCCLX_PNAME(ncclMemFree)
NCCLX_PNAME(ncclCommRegister)
NCCLX_PNAME(ncclCommDeregister)
NCCLX_PNAME(ncclCommWindowRegister)
NCCLX_PNAME(ncclCommWindowDeregister)
