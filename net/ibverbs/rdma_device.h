// The small RDMA-device interface the verbs transport is written against.
//
// It is the part of ibverbs the protocol engine needs, with reliable-connected
// (RC) semantics: memory regions with local/remote keys; one queue pair per
// connection whose work requests (RDMA write, write with immediate, read,
// 8-byte atomics) execute in posting order; completions polled from the queue
// pair; a queue pair that fails (bad key or range, dead peer) enters the
// error state, and every request still outstanding completes with an error.
//
// Two implementations: the binding to libibverbs loaded at run time
// (verbs_device.cc), and a software device for tests (soft_device.cc) that
// moves bytes between processes of one host through shared memory.  The
// engine (ib_transport.cc) cannot tell them apart.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flagcx.h"

namespace flagcx::rdma {

enum Access : uint32_t {
  kLocalWrite = 1,
  kRemoteWrite = 2,
  kRemoteRead = 4,
  kRemoteAtomic = 8,
};

class Mr {
 public:
  virtual ~Mr() = default;  // deregisters
  void *addr = nullptr;
  size_t length = 0;
  uint32_t lkey = 0, rkey = 0;
  uint32_t access = 0;
};

enum class Opcode : uint8_t { Write, WriteImm, Read, FetchAdd, CompSwap, Recv };
const char *opcodeName(Opcode op);

enum class WcStatus : uint8_t {
  Success,
  LocalProtection,  // lkey or range of the local buffer invalid
  RemoteAccess,     // rkey, range or permission refused by the target
  RetryExceeded,    // the peer stopped answering (dead, or the path is down)
  Flushed,          // the queue pair was already in the error state
  Fatal,            // anything else the device reports
};
const char *wcStatusName(WcStatus s);

struct SendWr {
  Opcode op = Opcode::Write;
  uint64_t wrId = 0;
  void *local = nullptr;  // source of writes, destination of reads and atomics
  uint32_t lkey = 0;
  uint32_t length = 0;    // atomics: 8
  uint64_t remote = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;       // WriteImm
  uint64_t compareAdd = 0, swap = 0;  // FetchAdd: add = compareAdd; CompSwap: both
  bool signaled = true;   // unsignaled requests complete silently unless they fail
};

struct Completion {
  uint64_t wrId = 0;
  Opcode op = Opcode::Write;
  WcStatus status = WcStatus::Success;
  uint32_t imm = 0;      // Recv of a WriteImm
  uint32_t length = 0;   // Recv: bytes the WriteImm carried
};

enum class QpState : uint8_t { Init, Ready, Error };

// What a queue pair's peer needs to connect to it, exchanged over the
// bootstrap.  Opaque to the engine.
struct QpAddr {
  uint8_t bytes[96] = {};
};

class Qp {
 public:
  virtual ~Qp() = default;
  virtual flagcxResult_t localAddr(QpAddr *out) = 0;
  // Moves the queue pair to ready-to-send with the peer at `peer`.
  virtual flagcxResult_t connect(const QpAddr &peer) = 0;
  // Both sides connected (a bootstrap round later): release set-up state.
  virtual void connected() {}
  virtual flagcxResult_t postSend(const SendWr &wr) = 0;
  // A receive request: consumed by one incoming WriteImm.
  virtual flagcxResult_t postRecv(uint64_t wrId) = 0;
  // Advance and take up to `max` completions; returns how many (never blocks).
  virtual int poll(Completion *out, int max) = 0;
  virtual QpState state() const = 0;
  // A cheap liveness check, called when the engine waits without progress:
  // a device that can tell the peer is gone moves the queue pair to Error.
  virtual void checkPeer() {}
  // Give up: move the queue pair to Error, so that every request still
  // outstanding completes (Flushed) on the next polls and touches no memory.
  virtual void abort() = 0;
  virtual int maxSendWr() const = 0;
};

struct PortInfo {
  std::string device;  // e.g. mlx5_0, or "soft0"
  int port = 1;
  bool active = false;
  std::string why;     // when not active
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const char *kind() const = 0;  // "verbs" or "software"
  virtual const PortInfo &port() const = 0;
  virtual flagcxResult_t regMr(void *addr, size_t length, uint32_t access,
                               std::unique_ptr<Mr> *out) = 0;
  // Register `length` bytes that this process addresses at `addr` and that
  // file descriptor `fd` names from `offset` on: a dma-buf a GPU driver
  // exports for device memory, which the NIC then reads and writes directly
  // (ibv_reg_dmabuf_mr).  The caller keeps `fd` (it may close it once this
  // returns).  Devices that cannot: flagcxInternalError, nothing logged.
  virtual flagcxResult_t regDmabuf(int /*fd*/, uint64_t /*offset*/, void * /*addr*/,
                                   size_t /*length*/, uint32_t /*access*/,
                                   std::unique_ptr<Mr> * /*out*/) {
    return flagcxInternalError;
  }
  virtual flagcxResult_t createQp(std::unique_ptr<Qp> *out) = 0;
};

// The software device (tests only: FLAGCX_IB_SOFTWARE_DEVICE).
flagcxResult_t openSoftDevice(std::unique_ptr<Device> *out);

// libibverbs, loaded with dlopen.  `why` says what is missing when no
// usable port is found (library absent, no device, no active port,
// FLAGCX_IB_HCA matched nothing); *out stays null then.
flagcxResult_t openVerbsDevice(std::unique_ptr<Device> *out, std::string *why);
// For the device-list test: load libibverbs and count devices.  Returns -1
// (with the reason) when the library cannot be loaded.
int verbsDeviceCount(std::string *why, std::vector<std::string> *names);

}  // namespace flagcx::rdma
