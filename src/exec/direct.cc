// Direct mode: device memory between same-host ranks (CUDA IPC).
#include <cstring>
#include <string>
#include <vector>

#include "adapters/adapters.h"
#include "base/base.h"
#include "exec/state.h"
#include "rendezvous/rendezvous.h"

namespace flagcx {

namespace {

// A transfer of a stage becomes, over the same connection and tag:
//   sender -> receiver: a control message {magic, bytes, IPC reference of the
//                       sender's bytes}
//   receiver:           maps the sender's allocation (once per allocation,
//                       cached), copies or reduces straight from it on the GPU
//   receiver -> sender: an acknowledgement; the sender's stage ends with it,
//                       so its buffer is not reused before the peer has read it.
// Payloads never touch host memory; all transfers of a stage share both rounds.
constexpr uint64_t kDirectMagic = 0x44495245435446ull;  // "DIRECTF"
constexpr uint64_t kAckFlip = 1ull << 59;
constexpr size_t kCtrlBytes = 32 + DeviceAdapter::kIpcRefBytes;
constexpr size_t kOutboxMax = 2 << 20;  // messages below this go through the outbox
constexpr size_t kMaxImports = 4096;
constexpr size_t kOutboxBytes = 16 << 20;  // each rank's, mapped by every peer at init

}  // namespace

flagcxResult_t setupDirect(ExecState *s, bool canDirect) {
  std::vector<int32_t> votes(static_cast<size_t>(s->nranks), 0);
  votes[static_cast<size_t>(s->rank)] = canDirect && s->dev->ipcSupported() ? 1 : 0;
  FLAGCX_CHECK(s->env.bs->allgather(votes.data(), sizeof(int32_t)));
  for (int32_t v : votes)
    if (v != 1) return flagcxSuccess;
  // Every rank's outbox, mapped by every peer now (small messages never map
  // anything on the thread that runs the work).
  DeviceAdapter *dev = s->dev;
  FLAGCX_CHECK(dev->prepareEngine());
  void *ob = nullptr;
  FLAGCX_CHECK(dev->allocDevice(&ob, kOutboxBytes));
  s->sched->direct.dx.outbox = static_cast<char *>(ob);
  s->sched->direct.dx.outboxBytes = kOutboxBytes;
  size_t rb = DeviceAdapter::kIpcRefBytes;
  std::vector<char> refs(rb * static_cast<size_t>(s->nranks), 0);
  FLAGCX_CHECK(dev->ipcExport(ob, refs.data() + rb * static_cast<size_t>(s->rank)));
  FLAGCX_CHECK(s->env.bs->allgather(refs.data(), rb));
  s->sched->direct.dx.peerOutbox.assign(static_cast<size_t>(s->nranks), nullptr);
  s->sched->direct.dx.sameProcess.assign(static_cast<size_t>(s->nranks), 0);
  for (int p = 0; p < s->nranks; p++) {
    s->sched->direct.dx.sameProcess[static_cast<size_t>(p)] = p != s->rank && s->sameProcess(p);
    // A rank of this process reads our memory directly (CUDA does not open
    // an IPC handle in the process that made it).
    if (p == s->rank || s->sched->direct.dx.sameProcess[static_cast<size_t>(p)]) continue;
    void *base = nullptr;
    flagcxResult_t r = dev->ipcImportBase(refs.data() + rb * static_cast<size_t>(p), &base);
    if (r != flagcxSuccess) {
      WARN(kInit, "rank %d: mapping the outbox of rank %d (CUDA IPC) failed", s->rank, p);
      return r;
    }
    s->sched->direct.dx.peerOutbox[static_cast<size_t>(p)] = static_cast<char *>(base);
  }
  s->mode = ExecMode::Direct;
  return flagcxSuccess;
}

void releaseDirect(ExecState *s) {
  for (auto &kv : s->sched->direct.dx.imports) s->dev->ipcRelease(kv.second);
  s->sched->direct.dx.imports.clear();
  for (char *p : s->sched->direct.dx.peerOutbox)
    if (p) s->dev->ipcRelease(p);
  s->sched->direct.dx.peerOutbox.clear();
  if (s->sched->direct.dx.outbox) s->dev->freeDevice(s->sched->direct.dx.outbox);
  s->sched->direct.dx.outbox = nullptr;
}

void directImportReserve(ExecState *s, size_t k) {
  if (s->sched->direct.dx.imports.size() + k < kMaxImports) return;
  for (auto &kv : s->sched->direct.dx.imports) s->dev->ipcRelease(kv.second);
  s->sched->direct.dx.imports.clear();
}

flagcxResult_t directImport(ExecState *s, const char *ref, int peer, uint64_t need, char **out) {
  DeviceAdapter *dev = s->dev;
  std::string id(ref, dev->ipcIdBytes());
  auto it = s->sched->direct.dx.imports.find(id);
  if (it == s->sched->direct.dx.imports.end()) {
    if (s->sched->direct.dx.imports.size() >= kMaxImports) {
      // Peers' buffers come and go; drop every mapping rather than grow forever.
      for (auto &kv : s->sched->direct.dx.imports) dev->ipcRelease(kv.second);
      s->sched->direct.dx.imports.clear();
    }
    void *base = nullptr;
    flagcxResult_t r = dev->ipcImportBase(ref, &base);
    if (r != flagcxSuccess) {
      WARN(kColl, "rank %d: mapping device memory of rank %d (CUDA IPC) failed", s->rank, peer);
      return r;
    }
    it = s->sched->direct.dx.imports.emplace(std::move(id), base).first;
  }
  uint64_t off = dev->ipcOffset(ref), have = dev->ipcMappedBytes(it->second);
  if (off > have || need > have - off) {
    WARN(kColl, "rank %d: rank %d named %llu bytes at offset %llu of a %llu-byte allocation "
         "(CUDA IPC); refused", s->rank, peer, static_cast<unsigned long long>(need),
         static_cast<unsigned long long>(off), static_cast<unsigned long long>(have));
    return flagcxRemoteError;
  }
  *out = static_cast<char *>(it->second) + off;
  return flagcxSuccess;
}

flagcxResult_t runDirectXfers(ExecState *s, std::vector<Xfer> &xs, flagcxDataType_t dt,
                              flagcxRedOp_t op, const char *what) {
  if (xs.empty()) return flagcxSuccess;
  DeviceAdapter *dev = s->dev;
  size_t ts = dtypeSize(dt);
  std::vector<char> &ctrl = s->sched->direct.dx.ctrl;
  if (ctrl.size() < xs.size() * kCtrlBytes) ctrl.resize(xs.size() * kCtrlBytes);
  std::vector<Xfer> &cx = s->sched->direct.dx.xfers;
  cx.clear();
  size_t outboxUsed = 0;
  for (size_t i = 0; i < xs.size(); i++) {
    Xfer c = xs[i];
    c.buf = ctrl.data() + i * kCtrlBytes;
    c.bytes = kCtrlBytes;
    c.reduceDst = nullptr;
    c.ch = 0;
    c.conn = s->conn(c.peer, 0);
    if (c.isSend) {
      // {magic, bytes, kind, offset or address}; kind 1: in my outbox at
      // that offset; 2: at that address (a rank of this process: one CUDA
      // context, nothing to map); 0: the IPC reference that follows.
      uint64_t hdr[4] = {kDirectMagic, xs[i].bytes, 0, 0};
      memset(c.buf, 0, kCtrlBytes);
      size_t len = (xs[i].bytes + 255) & ~size_t(255);
      if (xs[i].bytes && s->sched->direct.dx.sameProcess[static_cast<size_t>(c.peer)]) {
        hdr[2] = 2;
        hdr[3] = reinterpret_cast<uintptr_t>(xs[i].buf);
      } else if (xs[i].bytes && xs[i].bytes < kOutboxMax && outboxUsed + len <= s->sched->direct.dx.outboxBytes) {
        FLAGCX_CHECK(dev->copyAsync(s->sched->direct.dx.outbox + outboxUsed, xs[i].buf, xs[i].bytes));
        hdr[2] = 1;
        hdr[3] = outboxUsed;
        outboxUsed += len;
      } else if (xs[i].bytes) {
        flagcxResult_t r = dev->ipcExport(xs[i].buf, c.buf + 32);
        if (r != flagcxSuccess) {
          WARN(kColl, "rank %d: %s: cannot share %p with rank %d (not device memory from "
               "cudaMalloc?)", s->rank, what, static_cast<void *>(xs[i].buf), c.peer);
          return r;
        }
      }
      memcpy(c.buf, hdr, sizeof(hdr));
    }
    cx.push_back(c);
  }
  TRACE(kColl, "rank %d: %s: direct: %zu transfer(s), %zu bytes in the outbox", s->rank, what,
        xs.size(), outboxUsed);
  if (outboxUsed) FLAGCX_CHECK(dev->flush());
  FLAGCX_CHECK(runXfers(s, cx, flagcxUint8, flagcxSum, what));
  TRACE(kColl, "rank %d: %s: direct: headers exchanged", s->rank, what);
  // Every receive: read the sender's bytes where they are.
  for (size_t i = 0; i < xs.size(); i++) {
    const Xfer &x = xs[i];
    if (x.isSend) continue;
    const char *c = ctrl.data() + i * kCtrlBytes;
    uint64_t hdr[4];
    memcpy(hdr, c, sizeof(hdr));
    bool local = s->sched->direct.dx.sameProcess[static_cast<size_t>(x.peer)];
    if (hdr[0] != kDirectMagic || hdr[2] > 2 || (hdr[2] == 2) != (local && x.bytes)) {
      WARN(kColl, "rank %d: %s: rank %d sent a malformed direct-transfer header", s->rank,
           what, x.peer);
      return flagcxInternalError;
    }
    if (hdr[1] != x.bytes) {
      WARN(kColl, "rank %d: %s: rank %d sends %llu bytes, this rank expects %zu (mismatched "
           "calls?)", s->rank, what, x.peer, static_cast<unsigned long long>(hdr[1]), x.bytes);
      return flagcxInvalidUsage;
    }
    if (!x.bytes) continue;
    char *src = nullptr;
    if (hdr[2] == 1) {
      if (hdr[3] > s->sched->direct.dx.outboxBytes || x.bytes > s->sched->direct.dx.outboxBytes - hdr[3]) {
        WARN(kColl, "rank %d: %s: rank %d names bytes %llu..%llu of its outbox (%zu bytes)",
             s->rank, what, x.peer, static_cast<unsigned long long>(hdr[3]),
             static_cast<unsigned long long>(hdr[3] + x.bytes), s->sched->direct.dx.outboxBytes);
        return flagcxInternalError;
      }
      src = s->sched->direct.dx.peerOutbox[static_cast<size_t>(x.peer)] + hdr[3];
    } else if (hdr[2] == 2) {
      src = reinterpret_cast<char *>(static_cast<uintptr_t>(hdr[3]));
    } else {
      FLAGCX_CHECK(directImport(s, c + 32, x.peer, x.bytes, &src));
    }
    if (x.reduceDst)
      FLAGCX_CHECK(dev->reduceAsync(x.reduceDst, x.reduceDst, src, x.bytes / ts, dt, op));
    else
      FLAGCX_CHECK(dev->copyAsync(x.buf, src, x.bytes));
  }
  FLAGCX_CHECK(dev->flush());
  TRACE(kColl, "rank %d: %s: direct: data read", s->rank, what);
  // Acknowledgements, the other way.
  cx.clear();
  for (size_t i = 0; i < xs.size(); i++) {
    Xfer c = xs[i];
    c.isSend = !xs[i].isSend;
    c.buf = ctrl.data() + i * kCtrlBytes;
    c.bytes = 8;
    c.tag = xs[i].tag ^ kAckFlip;
    c.reduceDst = nullptr;
    c.ch = 0;
    c.conn = s->conn(c.peer, 0);
    if (c.isSend) memcpy(c.buf, &kDirectMagic, 8);
    cx.push_back(c);
  }
  return runXfers(s, cx, flagcxUint8, flagcxSum, what);
}

// Direct mode: grow the device working buffers a job will need, on the
// caller's thread (see GrowBuf).
flagcxResult_t reserveDirect(Job *j) {
  ExecState *s = j->ex;
  DeviceAdapter *dev = s->dev;
  int n = s->nranks;
  auto need = [&](GrowBuf &b, size_t bytes) -> flagcxResult_t {
    if (bytes && !b.grow(bytes)) {
      WARN(kColl, "rank %d: cannot allocate %zu bytes of device memory for the engine",
           s->rank, bytes);
      return flagcxSystemError;
    }
    return flagcxSuccess;
  };
  for (size_t k = 0; k < j->ncolls; k++) {
    const CollItem &ci = j->colls[k];
    const CollArgs &a = ci.a;
    size_t ts = dtypeSize(a.dtype);
    size_t inB = elemsIn(ci, n) * ts, outB = elemsOut(ci, n) * ts;
    size_t scr = (a.op == OpKind::AllReduce || a.op == OpKind::Reduce || a.op == OpKind::Broadcast)
                     ? a.count : a.count * static_cast<size_t>(n);
    if (a.op == OpKind::AlltoAllv) {
      scr = 0;
      for (int p = 0; p < n; p++) scr += ci.v[static_cast<size_t>(p)];
    }
    FLAGCX_CHECK(need(s->sched->direct.scratch, std::max<size_t>(scr * ts, 1)));
    const char *send = static_cast<const char *>(a.send);
    const char *recv = static_cast<const char *>(a.recv);
    bool sendDev = !send || !inB || dev->isDeviceMemory(send);
    bool recvDev = !recv || !outB || dev->isDeviceMemory(recv);
    if (!sendDev) FLAGCX_CHECK(need(s->sched->direct.stageIn, inB));
    if (!recvDev) FLAGCX_CHECK(need(s->sched->direct.stageOut, outB));
    // Staging may place the input inside the output (or the reverse): then
    // the executor snapshots it, as it does for overlapping user buffers.
    if (!sendDev || !recvDev || (send && recv && overlaps(send, inB, recv, outB)))
      FLAGCX_CHECK(need(s->sched->direct.inPlace, std::max(inB, outB)));
    bool isRoot = s->rank == a.root;
    if (!isRoot && (a.op == OpKind::Reduce || a.op == OpKind::Gather))
      FLAGCX_CHECK(need(s->sched->direct.outAlt, outB));
    if (!isRoot && (a.op == OpKind::Broadcast || a.op == OpKind::Scatter))
      FLAGCX_CHECK(need(s->sched->direct.inAlt, inB));
  }
  size_t staged = 0;
  for (const P2PItem &it : j->p2p)
    if (it.bytes && !dev->isDeviceMemory(it.buf)) staged += it.bytes;
  return need(s->sched->direct.stageIn, staged);
}

// Point-to-point in direct mode: device buffers are read in place by the
// peer; other buffers go through a device staging area.
flagcxResult_t runP2PDirect(ExecState *s, std::vector<P2PItem> &items) {
  DeviceAdapter *dev = s->dev;
  size_t staged = 0;
  for (auto &it : items)
    if (it.bytes && !dev->isDeviceMemory(it.buf)) staged += it.bytes;
  char *stage = staged ? s->sched->direct.stageIn.grow(staged) : nullptr;
  if (staged && !stage) return flagcxSystemError;
  std::vector<P2PItem> h = items;
  size_t off = 0;
  for (auto &it : h) {
    if (!it.bytes || dev->isDeviceMemory(it.buf)) continue;
    if (it.isSend) FLAGCX_CHECK(dev->copy(stage + off, it.buf, it.bytes, nullptr));
    it.buf = stage + off;
    off += it.bytes;
  }
  FLAGCX_CHECK(runP2P(s, h));
  for (size_t i = 0; i < items.size(); i++)
    if (!items[i].isSend && items[i].bytes && h[i].buf != items[i].buf)
      FLAGCX_CHECK(dev->copy(items[i].buf, h[i].buf, items[i].bytes, nullptr));
  return flagcxSuccess;
}

}  // namespace flagcx
