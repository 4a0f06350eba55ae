// The drop-in's internal state: the communicator wrapper behind ncclComm_t,
// the calling thread's group, and the one-line log.  Below this only
// flagcx's public API (flagcx.h) is used, with one exception: on a
// communicator that flagcx passes whole to NVIDIA's library, the collectives
// call that library directly (flagcx::commVendorDirect, coll.cc).
#pragma once
#include <flagcx.h>
#include <nccl.h>

#include <atomic>
#include <cstdarg>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "translate.h"

namespace ncclx {

// A PreMulSum operation made by ncclRedOpCreatePreMulSum.
struct PreMul {
  bool used = false;
  ncclDataType_t type = ncclFloat32;
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  unsigned char value[8] = {};  // the scalar, for ncclScalarHostImmediate
  const void *ptr = nullptr;    // the scalar's address, for ncclScalarDevice
};

// NVIDIA's entry points and communicator behind a drop-in communicator that
// flagcx passes whole to NVIDIA's library (null members: not available).
struct Direct {
  ncclComm_t comm = nullptr;
  decltype(&ncclAllReduce) allReduce = nullptr;
  decltype(&ncclReduce) reduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclAllGather) allGather = nullptr;
  decltype(&ncclReduceScatter) reduceScatter = nullptr;
  decltype(&ncclAlltoAll) alltoAll = nullptr;
  decltype(&ncclGather) gather = nullptr;
  decltype(&ncclScatter) scatter = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGetLastError) getLastError = nullptr;
  decltype(&ncclGroupStart) groupStart = nullptr;
  decltype(&ncclGroupEnd) groupEnd = nullptr;
};

}  // namespace ncclx

// What ncclComm_t points to.  The fields a direct collective reads (magic,
// state, NVIDIA's communicator and the first entry points) share the first
// cache line: at one rank an out-of-place call spends microseconds in the
// CUDA driver, which evicts whatever the drop-in touched, so every line the
// drop-in reads per call is a miss (measured on an H200; docs/NCCL-DROPIN.md).
struct alignas(64) ncclComm {
  static constexpr uint64_t kMagic = 0x58434347414c464eull;  // "NFLAGCCX"
  enum State : int { kReady = 0, kDeferred = 1, kRunning = 2, kFailed = 3 };
  uint64_t magic = kMagic;
  std::atomic<int> state{kReady};
  ncclx::Direct direct;  // set once fc exists (setDirect); 24 bytes in: comm, allReduce..reduceScatter
  flagcxComm_t fc = nullptr;
  int device = -1;
  int rank = -1, nranks = 0;
  bool blocking = true;
  ncclResult_t initResult = ncclSuccess;
  std::string name;
  std::thread initThread;  // non-blocking creation
  std::mutex mu;           // initThread, premul
  std::vector<ncclx::PreMul> premul;
  flagcxStream_t groupStream = nullptr;  // host adapter: NULL stream inside a group
};
struct ncclWindow_vidmem {
  static constexpr uint64_t kMagic = 0x574f444e49574e4eull;
  uint64_t magic = kMagic;
  ncclComm *comm = nullptr;
  void *buff = nullptr;
  size_t size = 0;
  flagcxWindow_t fwin = nullptr;  // when flagcx registered it
};

namespace ncclx {

enum class Level { None = 0, Warn = 1, Info = 2 };
Level logLevel();
void logLine(Level lv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Log one WARN line "fn: why", remember it for ncclGetLastError, return r.
ncclResult_t fail(ncclResult_t r, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void clearLastError();
const char *lastError();

flagcxDeviceHandle_t device();  // the process's device table (FLAGCX_DEVICE)

// Work that ncclGroupEnd runs: communicator creation deferred by a group.
struct Deferred {
  ncclComm *comm;  // may be null (a split that yields no communicator)
  int device;
  std::function<ncclResult_t()> run;
};
// Run every item, several at once on their own threads (ranks of one
// process must meet in the bootstrap at the same time).
ncclResult_t runAll(std::vector<Deferred> &items);
bool inGroup();
void defer(Deferred d);

}  // namespace ncclx
