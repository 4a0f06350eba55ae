// The shape of one call and the checks around it (bench.h): inputs from
// data.h's pattern, every element of the result compared with the value
// computed here, the guard bytes after the receive buffer, the send buffer
// against a copy saved when it was filled.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench.h"
#include "data.h"

namespace perf {

// Per-peer element counts of the alltoallv benchmark: about `block` each,
// uneven on purpose (block-1 .. block+1).
static size_t vcount(size_t block, int src, int dst) {
  return block ? block + static_cast<size_t>(src + 2 * dst) % 3 - 1 : 0;
}


Layout layoutFor(const OpInfo &op, size_t bytes, size_t ts, int nranks, int rank) {
  Layout l;
  size_t n = static_cast<size_t>(nranks);
  if (op.blocked) {
    size_t block = bytes / (ts * n);
    l.count = block;
    l.bytes = block * n * ts;
    l.sendElems = op.sendIsFull ? block * n : block;
    l.recvElems = op.recvIsFull ? block * n : block;
  } else {
    l.count = bytes / ts;
    l.bytes = l.count * ts;
    l.sendElems = l.recvElems = l.count;
  }
  if (op.op == Op::AlltoAllv) {
    l.sc.resize(n); l.sd.resize(n); l.rc.resize(n); l.rd.resize(n);
    size_t s = 0, r = 0;
    for (int p = 0; p < nranks; p++) {
      size_t pi = static_cast<size_t>(p);
      l.sc[pi] = vcount(l.count, rank, p);
      l.rc[pi] = vcount(l.count, p, rank);
      l.sd[pi] = s; l.rd[pi] = r;
      s += l.sc[pi]; r += l.rc[pi];
    }
    l.sendElems = s;
    l.recvElems = r;
  }
  return l;
}

void bufferBytes(const OpInfo &op, size_t bytes, int nranks, size_t *send, size_t *recv) {
  size_t n = static_cast<size_t>(nranks), slack = op.op == Op::AlltoAllv ? n * 8 : 0;
  *send = (op.blocked && !op.sendIsFull ? bytes / n : bytes) + slack + kGuardBytes;
  *recv = (op.blocked && !op.recvIsFull ? bytes / n : bytes) + slack + kGuardBytes;
}

namespace {

uint8_t guardByte(size_t k) { return static_cast<uint8_t>(0x5A ^ (k * 37)); }

// Copies `bytes` of device buffer `d` to host `h` (nothing to do on the host adapter).
void fromDevice(Bench &b, void *h, const void *d, size_t bytes, const char *what) {
  if (!b.onDevice || !bytes) return;
  flagcxResult_t r = b.dev->deviceMemcpy(h, const_cast<void *>(d), bytes, flagcxMemcpyDeviceToHost, nullptr);
  if (r != flagcxSuccess) fail(b, what, r);
}
void toDevice(Bench &b, void *d, const void *h, size_t bytes, const char *what) {
  if (!b.onDevice || !bytes) return;
  flagcxResult_t r = b.dev->deviceMemcpy(d, const_cast<void *>(h), bytes, flagcxMemcpyHostToDevice, nullptr);
  // A copy from pageable memory may return before it has landed; the
  // benchmark's stream does not wait for the legacy stream by itself.
  if (r == flagcxSuccess) r = b.dev->deviceSynchronize();
  if (r != flagcxSuccess) fail(b, what, r);
}

// Wrong elements of this rank's result.
// `out` is where the call's receive buffer lies in the host mirrors.
size_t checkResult(Bench &b, const Layout &l, flagcxDataType_t dt, flagcxRedOp_t rop, int root,
                   const char *out, size_t *firstBad) {
  size_t ts = getFlagcxDataTypeSize(dt), n = static_cast<size_t>(b.nranks);
  size_t r = static_cast<size_t>(b.rank), B = l.count;
  double tol = tolerance(dt), table[kKeys];
  *firstBad = SIZE_MAX;
  auto check = [&](size_t off, size_t len, size_t idx0) {
    size_t bad = SIZE_MAX;
    size_t w = dispatch<Check>(dt, static_cast<const void *>(out + off * ts), len, idx0,
                               static_cast<const double *>(table), tol, &bad);
    if (w && *firstBad == SIZE_MAX) *firstBad = off + bad;
    return w;
  };
  size_t wrong = 0;
  switch (b.op->op) {
    case Op::AllReduce:
    case Op::Reduce:
      if (b.op->op == Op::Reduce && b.rank != root) break;
      reducedTable(b.nranks, dt, rop, table);
      wrong = check(0, l.count, 0);
      break;
    case Op::ReduceScatter:
      reducedTable(b.nranks, dt, rop, table);
      wrong = check(0, B, r * B);
      break;
    case Op::Broadcast:
      sourceTable(root, dt, rop, table);
      wrong = check(0, l.count, 0);
      break;
    case Op::Scatter:
      sourceTable(root, dt, rop, table);
      wrong = check(0, B, r * B);
      break;
    case Op::AllGather:
    case Op::Gather:
      if (b.op->op == Op::Gather && b.rank != root) break;
      for (size_t p = 0; p < n; p++) {
        sourceTable(static_cast<int>(p), dt, rop, table);
        wrong += check(p * B, B, 0);
      }
      break;
    case Op::AlltoAll:
      for (size_t p = 0; p < n; p++) {
        sourceTable(static_cast<int>(p), dt, rop, table);
        wrong += check(p * B, B, r * B);
      }
      break;
    case Op::AlltoAllv:
      for (int p = 0; p < b.nranks; p++) {
        size_t pi = static_cast<size_t>(p), senderDispl = 0;
        for (int q = 0; q < b.rank; q++) senderDispl += vcount(B, p, q);
        sourceTable(p, dt, rop, table);
        wrong += check(l.rd[pi], l.rc[pi], senderDispl);
      }
      break;
    case Op::SendRecv:
      sourceTable((b.rank + b.nranks - 1) % b.nranks, dt, rop, table);
      wrong = check(0, l.count, 0);
      break;
  }
  return wrong;
}

// The buffer that holds the results and the guard bytes after them: the
// receive buffer, or in place the send buffer that holds the receive block.
struct Held {
  void *dev;
  char *host;
  size_t bytes;  // before the guard
};
Held resultsHeld(const Bench &b, const Layout &l, size_t ts) {
  if (b.opt.inPlace && recvInsideSend(b.op->op))
    return {b.send, static_cast<char *>(b.hsend), l.sendElems * ts};
  return {b.recv, static_cast<char *>(b.hrecv), l.recvElems * ts};
}
// Where the call's receive buffer lies in the host mirrors.
char *resultHost(const Bench &b, const Layout &l, size_t ts) {
  void *s, *r;
  callBuffers(b, l, ts, b.hsend, b.hrecv, &s, &r);
  return static_cast<char *>(r);
}

void putGuard(char *end) {
  unsigned char *p = reinterpret_cast<unsigned char *>(end);
  for (size_t k = 0; k < kGuardBytes; k++) p[k] = guardByte(k);
}

// In place: the input goes where the call reads it, inside the buffer that
// also receives; the rest of a receive buffer gets the sentinel.  There is
// no separate send buffer to keep unchanged.
void fillInPlace(Bench &b, const Layout &l, flagcxDataType_t dt, const double *table) {
  size_t ts = getFlagcxDataTypeSize(dt);
  Held h = resultsHeld(b, l, ts);
  void *s, *r;
  callBuffers(b, l, ts, b.hsend, b.hrecv, &s, &r);
  if (!recvInsideSend(b.op->op)) memset(h.host, 0xEE, h.bytes);
  dispatch<Fill>(dt, s, l.sendElems, size_t{0}, table);
  putGuard(h.host + h.bytes);
  b.sentCopy.clear();
  toDevice(b, h.dev, h.host, h.bytes + kGuardBytes, "deviceMemcpy (inputs, in place)");
}

}  // namespace

void fillInputs(Bench &b, const Layout &l, flagcxDataType_t dt, flagcxRedOp_t rop) {
  double table[kKeys];
  sourceTable(b.rank, dt, rop, table);
  if (b.opt.inPlace) return fillInPlace(b, l, dt, static_cast<const double *>(table));
  size_t ts = getFlagcxDataTypeSize(dt);
  dispatch<Fill>(dt, b.hsend, l.sendElems, size_t{0}, static_cast<const double *>(table));
  const char *s = static_cast<const char *>(b.hsend);
  b.sentCopy.assign(s, s + l.sendElems * ts);
  toDevice(b, b.send, b.hsend, l.sendElems * ts, "deviceMemcpy (inputs)");
  resetRecv(b, l, dt);
}

void resetRecv(Bench &b, const Layout &l, flagcxDataType_t dt) {
  size_t n = l.recvElems * getFlagcxDataTypeSize(dt);
  unsigned char *p = static_cast<unsigned char *>(b.hrecv);
  memset(p, 0xEE, n);
  putGuard(reinterpret_cast<char *>(p + n));
  toDevice(b, b.recv, b.hrecv, n + kGuardBytes, "deviceMemcpy (receive buffer)");
}

size_t verify(Bench &b, const Layout &l, const TypeInfo &t, const RedInfo &red, int root,
              const char *when) {
  size_t ts = getFlagcxDataTypeSize(t.dt);
  Held h = resultsHeld(b, l, ts);
  fromDevice(b, h.host, h.dev, h.bytes + kGuardBytes, "deviceMemcpy (results)");
  char *out = resultHost(b, l, ts);
  // PERF_CORRUPT=1 spoils one result element on rank 0: proves the check sees it.
  if (b.rank == 0 && l.recvElems && getenv("PERF_CORRUPT")) out[ts - 1] ^= 0x40;
  size_t problems = 0, firstBad = SIZE_MAX;
  size_t wrong = checkResult(b, l, t.dt, red.op, root, out, &firstBad);
  char where[160];
  snprintf(where, sizeof(where), "%s %s %s root %d, %zu bytes, %s", b.op->name, t.name,
           b.op->reduces ? red.name : "none", root, l.bytes, when);
  if (wrong)
    fprintf(stderr, "rank %d: %s: %zu wrong element(s), the first at element %zu\n", b.rank,
            where, wrong, firstBad);
  problems += wrong;
  const unsigned char *g = reinterpret_cast<const unsigned char *>(h.host + h.bytes);
  for (size_t k = 0; k < kGuardBytes; k++)
    if (g[k] != guardByte(k)) {
      fprintf(stderr, "rank %d: %s: wrote past the %s buffer (guard byte %zu of %zu changed)\n",
              b.rank, where, h.dev == b.send ? "send" : "receive", k, kGuardBytes);
      problems++;
      break;
    }
  size_t sb = b.sentCopy.size();
  std::vector<char> sendNow;
  const char *s = static_cast<const char *>(b.hsend);
  if (b.onDevice) {
    sendNow.resize(sb);
    fromDevice(b, sendNow.data(), b.send, sb, "deviceMemcpy (send buffer)");
    s = sendNow.data();
  }
  if (sb && memcmp(s, b.sentCopy.data(), sb) != 0) {
    size_t k = 0;
    while (k < sb && s[k] == b.sentCopy[k]) k++;
    fprintf(stderr, "rank %d: %s: the send buffer changed (first at byte %zu)\n", b.rank, where, k);
    problems++;
  }
  return problems;
}

void printExcerpt(Bench &b, const Layout &l, flagcxDataType_t dt) {
  if (b.rank != 0) return;
  const void *out = resultHost(b, l, getFlagcxDataTypeSize(dt));
  size_t shown = std::min<size_t>(l.recvElems, 8);
  printf("#   rank 0 recvbuff[0..%zu):", shown);
  double v;
  for (size_t i = 0; i < shown; i++) {
    switch (dt) {
      case flagcxInt8: v = static_cast<const int8_t *>(out)[i]; break;
      case flagcxUint8: v = static_cast<const uint8_t *>(out)[i]; break;
      case flagcxInt32: v = static_cast<const int32_t *>(out)[i]; break;
      case flagcxUint32: v = static_cast<const uint32_t *>(out)[i]; break;
      case flagcxInt64: v = static_cast<double>(static_cast<const int64_t *>(out)[i]); break;
      case flagcxUint64: v = static_cast<double>(static_cast<const uint64_t *>(out)[i]); break;
      case flagcxFloat16: v = halfBitsToFloat(static_cast<const uint16_t *>(out)[i]); break;
      case flagcxBfloat16: v = bf16BitsToFloat(static_cast<const uint16_t *>(out)[i]); break;
      case flagcxFloat64: v = static_cast<const double *>(out)[i]; break;
      default: v = static_cast<const float *>(out)[i]; break;
    }
    printf(" %g", v);
  }
  printf("%s\n", l.recvElems > shown ? " ..." : "");
}

}  // namespace perf
