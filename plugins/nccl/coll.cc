// Collectives, point-to-point, PreMulSum, streams, and the split exchange.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <map>

#include "adapters/adapters.h"
#include "exports.h"
#include "forward.h"
#include "scale.h"

using namespace ncclx;

namespace ncclx {

thread_local StreamHit t_stream;

void setDirect(ncclComm *c) {
  const flagcx::VendorDirect *v = c->fc ? flagcx::commVendorDirect(c->fc) : nullptr;
  if (!v || !v->comm) return;
  Direct &d = c->direct;
  d.allReduce = reinterpret_cast<decltype(d.allReduce)>(v->allReduce);
  d.reduce = reinterpret_cast<decltype(d.reduce)>(v->reduce);
  d.broadcast = reinterpret_cast<decltype(d.broadcast)>(v->broadcast);
  d.allGather = reinterpret_cast<decltype(d.allGather)>(v->allGather);
  d.reduceScatter = reinterpret_cast<decltype(d.reduceScatter)>(v->reduceScatter);
  d.alltoAll = reinterpret_cast<decltype(d.alltoAll)>(v->alltoAll);
  d.gather = reinterpret_cast<decltype(d.gather)>(v->gather);
  d.scatter = reinterpret_cast<decltype(d.scatter)>(v->scatter);
  d.send = reinterpret_cast<decltype(d.send)>(v->send);
  d.recv = reinterpret_cast<decltype(d.recv)>(v->recv);
  d.getLastError = reinterpret_cast<decltype(d.getLastError)>(v->getLastError);
  d.groupStart = reinterpret_cast<decltype(d.groupStart)>(v->groupStart);
  d.groupEnd = reinterpret_cast<decltype(d.groupEnd)>(v->groupEnd);
  d.comm = static_cast<ncclComm_t>(v->comm);
  logLine(Level::Info, "rank %d: operations go directly to NVIDIA's NCCL (FLAGCX_NCCL_DROPIN_DIRECT=0 "
          "routes them through flagcx's API)", c->rank);
}

// One flagcx wrapper per cudaStream_t value, kept for the life of the
// process: a wrapper holds only the native handle, so a value that CUDA
// reuses for a new stream designates the new stream correctly.
bool hostAdapter() {
  static const bool onHost = [] {
    char vendor[128] = "";
    return device() && device()->getVendor(vendor) == flagcxSuccess && strcmp(vendor, "host") == 0;
  }();
  return onHost;
}

ncclResult_t mapStreamSlow(ncclComm *c, cudaStream_t s, flagcxStream_t *out) {
  if (!s && t_g.depth > 0 && hostAdapter()) {
    std::lock_guard<std::mutex> lk(c->mu);
    if (!c->groupStream) {
      flagcxResult_t r = device()->streamCreate(&c->groupStream);
      if (r != flagcxSuccess)
        return fail(toNccl(r), "stream", "cannot create the communicator's group stream");
    }
    *out = c->groupStream;
    groupStreamsUsed(c);
    return ncclSuccess;
  }
  static std::mutex mu;
  static auto *map = new std::map<std::pair<cudaStream_t, int>, flagcxStream_t>();
  flagcxStream_t fs = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu);
    auto it = map->find({s, c->device});
    if (it != map->end()) {
      fs = it->second;
    } else {
      flagcxDeviceHandle_t h = device();
      if (!h) return fail(ncclUnhandledCudaError, "stream", "no device adapter");
      // The wrapper takes the current device as the stream's: make it the
      // communicator's for the moment.
      int prev = -1;
      bool switched = h->getDevice(&prev) == flagcxSuccess && prev != c->device &&
                      h->setDevice(c->device) == flagcxSuccess;
      flagcxResult_t r = h->streamCopy(&fs, reinterpret_cast<void *>(s));
      if (switched) h->setDevice(prev);
      if (r != flagcxSuccess)
        return fail(toNccl(r), "stream", "cannot use stream %p: %s", static_cast<void *>(s),
                    flagcxGetErrorString(r));
      map->emplace(std::make_pair(s, c->device), fs);
    }
  }
  t_stream.native = s;
  t_stream.device = c->device;
  t_stream.mapped = fs;
  t_stream.valid = true;
  *out = fs;
  return ncclSuccess;
}

ncclResult_t splitNow(ncclComm *parent, ncclComm *c, int color, int key) {
  const char *fn = "ncclCommSplit";
  flagcxComm_t pfc = parent->fc;
  flagcxDeviceHandle_t h = device();
  int n = 0, me = 0;
  flagcxCommCount(pfc, &n);
  flagcxCommUserRank(pfc, &me);
  // Two allgathers over the parent, on device memory (the vendor library
  // may serve the parent and needs device buffers): (color, key), then the
  // unique id of each new communicator's first rank.
  struct Entry {
    int32_t color, key, rank, pad;
  };
  static_assert(sizeof(Entry) == 16);
  size_t idBytes = sizeof(flagcxUniqueId);
  size_t bytes = static_cast<size_t>(n) * (idBytes + sizeof(Entry));
  void *dbuf = nullptr;
  if (h->deviceMalloc(&dbuf, 2 * bytes, flagcxMemDevice, nullptr) != flagcxSuccess)
    return fail(ncclSystemError, fn, "cannot allocate %zu bytes for the exchange", 2 * bytes);
  char *din = static_cast<char *>(dbuf), *dout = din + bytes;
  std::vector<Entry> all(static_cast<size_t>(n));
  Entry mine{color, key, me, 0};
  ncclResult_t res = ncclSuccess;
  auto gather = [&](const void *src, size_t len, void *dst) -> ncclResult_t {
    if (h->deviceMemcpy(din, const_cast<void *>(src), len, flagcxMemcpyHostToDevice, nullptr) !=
        flagcxSuccess)
      return fail(ncclUnhandledCudaError, fn, "copy to the exchange buffer failed");
    flagcxResult_t r = flagcxAllGather(din, dout, len, flagcxUint8, pfc, nullptr);
    if (r != flagcxSuccess) return fromFlagcx(fn, r);
    if (h->deviceMemcpy(dst, dout, len * static_cast<size_t>(n), flagcxMemcpyDeviceToHost,
                        nullptr) != flagcxSuccess)
      return fail(ncclUnhandledCudaError, fn, "copy from the exchange buffer failed");
    return ncclSuccess;
  };
  res = gather(&mine, sizeof(mine), all.data());
  std::vector<Entry> members;
  for (const Entry &e : all)
    if (e.color == color && color != NCCL_SPLIT_NOCOLOR) members.push_back(e);
  std::sort(members.begin(), members.end(), [](const Entry &a, const Entry &b) {
    return a.key != b.key ? a.key < b.key : a.rank < b.rank;
  });
  int newRank = -1;
  for (size_t i = 0; i < members.size(); i++)
    if (members[i].rank == me) newRank = static_cast<int>(i);
  flagcxUniqueId id{};
  if (res == ncclSuccess && newRank == 0) {
    flagcxResult_t r = flagcxGetUniqueId(&id);
    if (r != flagcxSuccess) res = fromFlagcx(fn, r);  // the others see a zero id and fail too
  }
  std::vector<flagcxUniqueId> ids(static_cast<size_t>(n));
  if (res == ncclSuccess) res = gather(&id, idBytes, ids.data());
  h->deviceFree(dbuf, flagcxMemDevice, nullptr);
  if (res != ncclSuccess || !c) return res;
  c->rank = newRank;
  c->nranks = static_cast<int>(members.size());
  const flagcxUniqueId &leader = ids[static_cast<size_t>(members[0].rank)];
  flagcxUniqueId copy = leader;
  flagcxResult_t r = flagcxCommInitRank(&c->fc, c->nranks, &copy, newRank);
  if (r != flagcxSuccess) {
    c->fc = nullptr;
    logLine(Level::Info, "%s: color %d rank %d of %d: flagcxCommInitRank: %s", fn, color, newRank,
            c->nranks, flagcxGetErrorString(r));
    return fromFlagcx(fn, r);
  }
  logLine(Level::Info, "split: parent rank %d -> color %d rank %d of %d", me, color, newRank,
          c->nranks);
  setDirect(c);
  return ncclSuccess;
}

}  // namespace ncclx

namespace {

inline ncclResult_t type(const char *fn, ncclDataType_t t, Use use, flagcxDataType_t *out) {
  if (fastType(t)) {
    *out = static_cast<flagcxDataType_t>(t);
    return ncclSuccess;
  }
  const char *why = "";
  if (mapType(t, use, out, &why) != ncclSuccess)
    return fail(ncclInvalidArgument, fn, "datatype %d: %s", static_cast<int>(t), why);
  return ncclSuccess;
}

ncclResult_t findPreMul(const char *fn, ncclComm *c, ncclRedOp_t op, ncclDataType_t t, PreMul *out) {
  int i = userOpIndex(op);
  std::lock_guard<std::mutex> lk(c->mu);
  if (i < 0 || static_cast<size_t>(i) >= c->premul.size() || !c->premul[static_cast<size_t>(i)].used)
    return fail(ncclInvalidArgument, fn, "op %d is not a reduction operation of this communicator",
                static_cast<int>(op));
  *out = c->premul[static_cast<size_t>(i)];
  if (out->type != t)
    return fail(ncclInvalidArgument, fn, "op %d was made for datatype %d, used with %d",
                static_cast<int>(op), static_cast<int>(out->type), static_cast<int>(t));
  return ncclSuccess;
}

// A reduction with a PreMulSum op: scale this rank's input into a working
// buffer, then sum.  `inCount` elements in, `run` does the collective.
template <class Run>
ncclResult_t preMulSum(const char *fn, ncclComm *c, flagcxComm_t fc, const void *send,
                       size_t inCount, ncclDataType_t t, ncclRedOp_t op, cudaStream_t stream,
                       Run run) {
  PreMul pm;
  NCCLX_CHECK(findPreMul(fn, c, op, t, &pm));
  flagcxDataType_t ft;
  NCCLX_CHECK(type(fn, t, Use::Scale, &ft));
  flagcxStream_t fs;
  NCCLX_CHECK(mapStream(c, stream, &fs));
  size_t bytes = inCount * getFlagcxDataTypeSize(ft);
  flagcxDeviceHandle_t h = device();
  void *tmp = nullptr;
  if (bytes && h->deviceMalloc(&tmp, bytes, flagcxMemDevice, nullptr) != flagcxSuccess)
    return fail(ncclSystemError, fn, "cannot allocate %zu bytes for the scaled input", bytes);
  ncclResult_t r = bytes ? scaleInto(fn, tmp, send, inCount, t, pm, stream, fs) : ncclSuccess;
  if (r == ncclSuccess) r = fromFlagcx(fn, run(tmp, ft, fs));
  if (tmp) releaseLater(tmp, fs);  // behind the collective on its stream
  (void)fc;
  return r;
}

// The direct path (setDirect): a ready communicator whose operations flagcx
// would hand unchanged to NVIDIA's library, with NVIDIA's entry point `f`.
// Buffers that flagcx's checks would refuse (NULL with a count) take the
// usual path, which reports them.
// Inside a group, NVIDIA's own group is opened by the first direct call
// (ncclGroupEnd closes it): a group of direct calls costs what it costs
// with NVIDIA's library alone.
// The exported function ends in a tail call to `f`, its flagcx path is out
// of line (the *Slow functions): a few instructions, no frame.  At one rank
// an out-of-place call spends microseconds in the CUDA driver, which evicts
// what the drop-in touched, so each line it reads costs a miss per call
// (measured on an H200).  NVIDIA's result and its ncclGetLastError text
// reach the caller unchanged, as without the drop-in.
// Reductions pass `typesBelow` = ncclFloat8e4m3: NVIDIA's library
// accumulates float8 its own way, flagcx in float32 with one rounding, so
// float8 reductions take the usual path (flagcx's engine).
template <class F>
inline F direct(ncclComm *c, F Direct::*fn, size_t count, const void *a, const void *b,
                ncclDataType_t t, ncclDataType_t typesBelow = ncclNumTypes) {
  // A datatype outside nccl.h's enum takes the usual path too, which names it
  // in its one log line (a register compare, no memory touched).
  if (!c || c->magic != ncclComm::kMagic ||
      c->state.load(std::memory_order_acquire) != ncclComm::kReady || (count && (!a || !b)) ||
      static_cast<unsigned>(t) >= static_cast<unsigned>(typesBelow))
    return nullptr;
  F f = c->direct.*fn;
  if (__builtin_expect(f && t_g.depth > 0, 0) && !vendorGroupOpen(c->direct.groupStart, c->direct.groupEnd))
    return nullptr;  // the usual path then
  return f;
}

}  // namespace

extern "C" {

// Marker: flagcx's NCCL pass-through looks for it after dlopen and refuses
// to load this library as "the real NCCL" (recursion when preloaded).
extern const int flagcxNcclDropin;
const int flagcxNcclDropin = 1;

[[gnu::noinline]]
static ncclResult_t allReduceSlow(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream) {
  const char *fn = "ncclAllReduce";
  flagcxComm_t fc;
  NCCLX_CHECK(enter(fn, comm, &fc));
  if (!builtinOp(op))
    return preMulSum(fn, comm, fc, sendbuff, count, datatype, op, stream,
                     [&](void *in, flagcxDataType_t ft, flagcxStream_t fs) {
                       return flagcxAllReduce(in, recvbuff, count, ft, flagcxSum, fc, fs);
                     });
  flagcxDataType_t ft;
  NCCLX_CHECK(type(fn, datatype, Use::Reduce, &ft));
  flagcxStream_t fs;
  NCCLX_CHECK(mapStream(comm, stream, &fs));
  return fromFlagcx(fn, flagcxAllReduce(sendbuff, recvbuff, count, ft,
                                        static_cast<flagcxRedOp_t>(op), fc, fs));
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  if (auto f = direct(comm, &Direct::allReduce, count, sendbuff, recvbuff, datatype, ncclFloat8e4m3);
      f && builtinOp(op))
    return f(sendbuff, recvbuff, count, datatype, op, comm->direct.comm, stream);
  return allReduceSlow(sendbuff, recvbuff, count, datatype, op, comm, stream);
}

[[gnu::noinline]]
static ncclResult_t reduceSlow(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  const char *fn = "ncclReduce";
  flagcxComm_t fc;
  NCCLX_CHECK(enter(fn, comm, &fc));
  if (!builtinOp(op))
    return preMulSum(fn, comm, fc, sendbuff, count, datatype, op, stream,
                     [&](void *in, flagcxDataType_t ft, flagcxStream_t fs) {
                       return flagcxReduce(in, recvbuff, count, ft, flagcxSum, root, fc, fs);
                     });
  flagcxDataType_t ft;
  NCCLX_CHECK(type(fn, datatype, Use::Reduce, &ft));
  flagcxStream_t fs;
  NCCLX_CHECK(mapStream(comm, stream, &fs));
  return fromFlagcx(fn, flagcxReduce(sendbuff, recvbuff, count, ft,
                                     static_cast<flagcxRedOp_t>(op), root, fc, fs));
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  if (auto f = direct(comm, &Direct::reduce, count, sendbuff, sendbuff, datatype, ncclFloat8e4m3);
      f && builtinOp(op))
    return f(sendbuff, recvbuff, count, datatype, op, root, comm->direct.comm, stream);
  return reduceSlow(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

[[gnu::noinline]]
static ncclResult_t reduceScatterSlow(const void *sendbuff, void *recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) {
  const char *fn = "ncclReduceScatter";
  flagcxComm_t fc;
  NCCLX_CHECK(enter(fn, comm, &fc));
  if (!builtinOp(op))
    return preMulSum(fn, comm, fc, sendbuff, recvcount * static_cast<size_t>(comm->nranks),
                     datatype, op, stream, [&](void *in, flagcxDataType_t ft, flagcxStream_t fs) {
                       return flagcxReduceScatter(in, recvbuff, recvcount, ft, flagcxSum, fc, fs);
                     });
  flagcxDataType_t ft;
  NCCLX_CHECK(type(fn, datatype, Use::Reduce, &ft));
  flagcxStream_t fs;
  NCCLX_CHECK(mapStream(comm, stream, &fs));
  return fromFlagcx(fn, flagcxReduceScatter(sendbuff, recvbuff, recvcount, ft,
                                            static_cast<flagcxRedOp_t>(op), fc, fs));
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  if (auto f = direct(comm, &Direct::reduceScatter, recvcount, sendbuff, recvbuff, datatype,
                         ncclFloat8e4m3);
      f && builtinOp(op))
    return f(sendbuff, recvbuff, recvcount, datatype, op, comm->direct.comm, stream);
  return reduceScatterSlow(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

#define MOVE_PROLOGUE(fn)                           \
  flagcxComm_t fc;                                  \
  NCCLX_CHECK(enter(fn, comm, &fc));                \
  flagcxDataType_t ft;                              \
  NCCLX_CHECK(type(fn, datatype, Use::Move, &ft));  \
  flagcxStream_t fs;                                \
  NCCLX_CHECK(mapStream(comm, stream, &fs))

[[gnu::noinline]]
static ncclResult_t broadcastSlow(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  MOVE_PROLOGUE("ncclBroadcast");
  return fromFlagcx("ncclBroadcast",
                    flagcxBroadcast(sendbuff, recvbuff, count, ft, root, fc, fs));
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  NCCLX_FOREIGN_COMM(ncclBroadcast, comm, sendbuff, recvbuff, count, datatype, root, comm, stream);
  if (auto f = direct(comm, &Direct::broadcast, count, recvbuff, recvbuff, datatype); f)
    return f(sendbuff, recvbuff, count, datatype, root, comm->direct.comm, stream);
  return broadcastSlow(sendbuff, recvbuff, count, datatype, root, comm, stream);
}

[[gnu::noinline]]
static ncclResult_t bcastSlow(void *buff, size_t count, ncclDataType_t datatype, int root,
                              ncclComm_t comm, cudaStream_t stream) {
  MOVE_PROLOGUE("ncclBcast");
  return fromFlagcx("ncclBcast", flagcxBroadcast(buff, buff, count, ft, root, fc, fs));
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream) {
  if (auto f = direct(comm, &Direct::broadcast, count, buff, buff, datatype); f)
    return f(buff, buff, count, datatype, root, comm->direct.comm, stream);
  return bcastSlow(buff, count, datatype, root, comm, stream);
}

[[gnu::noinline]]
static ncclResult_t allGatherSlow(const void *sendbuff, void *recvbuff, size_t sendcount,
                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  MOVE_PROLOGUE("ncclAllGather");
  return fromFlagcx("ncclAllGather", flagcxAllGather(sendbuff, recvbuff, sendcount, ft, fc, fs));
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  if (auto f = direct(comm, &Direct::allGather, sendcount, sendbuff, recvbuff, datatype); f)
    return f(sendbuff, recvbuff, sendcount, datatype, comm->direct.comm, stream);
  return allGatherSlow(sendbuff, recvbuff, sendcount, datatype, comm, stream);
}

[[gnu::noinline]]
static ncclResult_t alltoAllSlow(const void *sendbuff, void *recvbuff, size_t count,
                                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  MOVE_PROLOGUE("ncclAlltoAll");
  return fromFlagcx("ncclAlltoAll", flagcxAlltoAll(sendbuff, recvbuff, count, ft, fc, fs));
}

ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  if (auto f = direct(comm, &Direct::alltoAll, count, sendbuff, recvbuff, datatype); f)
    return f(sendbuff, recvbuff, count, datatype, comm->direct.comm, stream);
  return alltoAllSlow(sendbuff, recvbuff, count, datatype, comm, stream);
}

[[gnu::noinline]]
static ncclResult_t gatherSlow(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  MOVE_PROLOGUE("ncclGather");
  return fromFlagcx("ncclGather", flagcxGather(sendbuff, recvbuff, count, ft, root, fc, fs));
}

ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  if (auto f = direct(comm, &Direct::gather, count, sendbuff, sendbuff, datatype); f)
    return f(sendbuff, recvbuff, count, datatype, root, comm->direct.comm, stream);
  return gatherSlow(sendbuff, recvbuff, count, datatype, root, comm, stream);
}

[[gnu::noinline]]
static ncclResult_t scatterSlow(const void *sendbuff, void *recvbuff, size_t count,
                                ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream) {
  MOVE_PROLOGUE("ncclScatter");
  return fromFlagcx("ncclScatter", flagcxScatter(sendbuff, recvbuff, count, ft, root, fc, fs));
}

ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  if (auto f = direct(comm, &Direct::scatter, count, recvbuff, recvbuff, datatype); f)
    return f(sendbuff, recvbuff, count, datatype, root, comm->direct.comm, stream);
  return scatterSlow(sendbuff, recvbuff, count, datatype, root, comm, stream);
}

[[gnu::noinline]]
static ncclResult_t sendSlow(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                             ncclComm_t comm, cudaStream_t stream) {
  MOVE_PROLOGUE("ncclSend");
  return fromFlagcx("ncclSend", flagcxSend(sendbuff, count, ft, peer, fc, fs));
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  if (auto f = direct(comm, &Direct::send, count, sendbuff, sendbuff, datatype); f)
    return f(sendbuff, count, datatype, peer, comm->direct.comm, stream);
  return sendSlow(sendbuff, count, datatype, peer, comm, stream);
}

[[gnu::noinline]]
static ncclResult_t recvSlow(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                             ncclComm_t comm, cudaStream_t stream) {
  MOVE_PROLOGUE("ncclRecv");
  return fromFlagcx("ncclRecv", flagcxRecv(recvbuff, count, ft, peer, fc, fs));
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  if (auto f = direct(comm, &Direct::recv, count, recvbuff, recvbuff, datatype); f)
    return f(recvbuff, count, datatype, peer, comm->direct.comm, stream);
  return recvSlow(recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  const char *fn = "ncclRedOpCreatePreMulSum";
  flagcxComm_t fc;
  NCCLX_CHECK(enter(fn, comm, &fc));
  if (!op) return fail(ncclInvalidArgument, fn, "op is NULL");
  if (!scalar) return fail(ncclInvalidArgument, fn, "scalar is NULL");
  flagcxDataType_t ft;
  NCCLX_CHECK(type(fn, datatype, Use::Scale, &ft));
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return fail(ncclInvalidArgument, fn, "residence %d is not an ncclScalarResidence_t",
                static_cast<int>(residence));
  PreMul pm;
  pm.used = true;
  pm.type = datatype;
  pm.residence = residence;
  if (residence == ncclScalarHostImmediate)
    memcpy(pm.value, scalar, getFlagcxDataTypeSize(ft));  // read now, as NCCL does
  else
    pm.ptr = scalar;  // read when each operation runs
  std::lock_guard<std::mutex> lk(comm->mu);
  size_t i = 0;
  while (i < comm->premul.size() && comm->premul[i].used) i++;
  if (i >= static_cast<size_t>(kMaxUserOps))
    return fail(ncclInvalidUsage, fn, "more than %d live PreMulSum operations", kMaxUserOps);
  if (i == comm->premul.size()) comm->premul.emplace_back();
  comm->premul[i] = pm;
  *op = userOp(static_cast<int>(i));
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const char *fn = "ncclRedOpDestroy";
  flagcxComm_t fc;
  NCCLX_CHECK(enter(fn, comm, &fc));
  int i = userOpIndex(op);
  std::lock_guard<std::mutex> lk(comm->mu);
  if (i < 0 || static_cast<size_t>(i) >= comm->premul.size() ||
      !comm->premul[static_cast<size_t>(i)].used)
    return fail(ncclInvalidArgument, fn, "op %d was not made by ncclRedOpCreatePreMulSum on this "
                "communicator", static_cast<int>(op));
  comm->premul[static_cast<size_t>(i)].used = false;
  return ncclSuccess;
}

}  // extern "C"

NCCLX_PNAME(ncclAllReduce)
NCCLX_PNAME(ncclReduce)
NCCLX_PNAME(ncclReduceScatter)
NCCLX_PNAME(ncclBroadcast)
NCCLX_PNAME(ncclBcast)
NCCLX_PNAME(ncclAllGather)
NCCLX_PNAME(ncclAlltoAll)
NCCLX_PNAME(ncclGather)
NCCLX_PNAME(ncclScatter)
NCCLX_PNAME(ncclSend)
NCCLX_PNAME(ncclRecv)
NCCLX_PNAME(ncclRedOpCreatePreMulSum)
NCCLX_PNAME(ncclRedOpDestroy)
