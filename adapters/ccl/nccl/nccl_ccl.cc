// The NCCL pass-through: on a homogeneous communicator of CUDA ranks, every
// collective and send/recv goes straight to NCCL, loaded at run time.
//
// - The library: dlopen(FLAGCX_NCCL_LIB) (default libnccl.so.2) once per
//   process, never closed (NCCL keeps threads).  nccl.h is used for types only.
// - When it applies (decided collectively, so that every rank agrees): every
//   rank's device is CUDA, FLAGCX_USE_HETERO_COMM=0 on every rank, NCCL
//   loaded everywhere, and no two ranks drive the same GPU (NCCL refuses
//   that; such communicators stay on the flagcx engine).
// - Creation: rank 0's ncclGetUniqueId travels over the flagcx bootstrap
//   (the bootstrap's bcast), then ncclCommInitRank on the calling thread's device.
// - Streams: a flagcxStream_t of the CUDA adapter carries its cudaStream_t;
//   NULL is the legacy default stream, and a call on it outside a group waits
//   for completion (a NULL stream means "now" throughout flagcx).
// - Gather, Scatter and AlltoAll call NCCL's own when it has them (2.28+);
//   otherwise they, and AlltoAllv, are grouped ncclSend/ncclRecv (the rank's
//   own block is a device copy on the same stream); Barrier is a
//   one-element allreduce on a small device buffer.
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <string>

#include "adapters/ccl/ccl.h"
#include "adapters/device/cuda/cuda_internal.h"
#include "rendezvous/rendezvous.h"
#include "base/base.h"

namespace flagcx {


namespace {

struct Nccl {
  void *lib = nullptr;
  std::string error;  // why it did not load
  int version = 0;
#define NCCL_FN(name) decltype(&::name) name = nullptr
  NCCL_FN(ncclGetVersion);
  NCCL_FN(ncclGetUniqueId);
  NCCL_FN(ncclCommInitRank);
  NCCL_FN(ncclCommDestroy);
  NCCL_FN(ncclCommAbort);
  NCCL_FN(ncclGetErrorString);
  NCCL_FN(ncclCommGetAsyncError);
  NCCL_FN(ncclAllReduce);
  NCCL_FN(ncclReduce);
  NCCL_FN(ncclBroadcast);
  NCCL_FN(ncclAllGather);
  NCCL_FN(ncclReduceScatter);
  NCCL_FN(ncclSend);
  NCCL_FN(ncclRecv);
  NCCL_FN(ncclGroupStart);
  NCCL_FN(ncclGroupEnd);
  // Optional (NCCL 2.28+): native gather/scatter/alltoall, used when present.
  NCCL_FN(ncclGather);
  NCCL_FN(ncclScatter);
  NCCL_FN(ncclAlltoAll);
  NCCL_FN(ncclGetLastError);
#undef NCCL_FN
};

std::string g_loadError;

Nccl *loadNccl() {
  static Nccl n;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string &path = paramStr(Param::NCCL_LIB);
    // flagcx's NCCL drop-in (plugins/nccl) is a libnccl.so.2 too, marked by
    // the symbol flagcxNcclDropin.  When it is in the process (LD_PRELOAD, or
    // an application linked to it), dlopen by name returns it, and passing
    // through to it would recurse: only a path to another file can name the
    // real NCCL.  NCCL calls some of its own exported functions through the
    // PLT; those bind to the drop-in, which hands calls coming from NCCL back
    // to NCCL (plugins/nccl/forward.h).  RTLD_DEEPBIND, tried first, crashed
    // NCCL 2.28.3 (its weak reference to libstdc++'s __once_proxy stayed NULL).
    const char *kMarker = "flagcxNcclDropin";
    int flags = RTLD_NOW | RTLD_LOCAL;
    n.lib = dlopen(path.c_str(), flags);
    if (!n.lib) {
      const char *e = dlerror();
      n.error = "dlopen(" + path + "): " + (e ? e : "unknown error");
      g_loadError = n.error;
      return;
    }
    if (dlsym(n.lib, kMarker)) {
      // Not closed: the drop-in stays loaded for the application anyway.
      n.lib = nullptr;
      n.error = "FLAGCX_NCCL_LIB=" + path +
                " is flagcx's NCCL drop-in, not NCCL (would recurse); set FLAGCX_NCCL_LIB to "
                "the path of NVIDIA's libnccl.so.2 to use NCCL under the drop-in";
      g_loadError = n.error;
      return;
    }
    bool ok = true;
#define NCCL_SYM(name)                                                                  \
  do {                                                                                  \
    n.name = reinterpret_cast<decltype(n.name)>(dlsym(n.lib, #name));                   \
    if (!n.name) {                                                                      \
      ok = false;                                                                       \
      n.error += std::string(n.error.empty() ? "" : ", ") + "no symbol " #name;         \
    }                                                                                   \
  } while (0)
    NCCL_SYM(ncclGetVersion);
    NCCL_SYM(ncclGetUniqueId);
    NCCL_SYM(ncclCommInitRank);
    NCCL_SYM(ncclCommDestroy);
    NCCL_SYM(ncclCommAbort);
    NCCL_SYM(ncclGetErrorString);
    NCCL_SYM(ncclCommGetAsyncError);
    NCCL_SYM(ncclAllReduce);
    NCCL_SYM(ncclReduce);
    NCCL_SYM(ncclBroadcast);
    NCCL_SYM(ncclAllGather);
    NCCL_SYM(ncclReduceScatter);
    NCCL_SYM(ncclSend);
    NCCL_SYM(ncclRecv);
    NCCL_SYM(ncclGroupStart);
    NCCL_SYM(ncclGroupEnd);
#undef NCCL_SYM
    n.ncclGather = reinterpret_cast<decltype(n.ncclGather)>(dlsym(n.lib, "ncclGather"));
    n.ncclScatter = reinterpret_cast<decltype(n.ncclScatter)>(dlsym(n.lib, "ncclScatter"));
    n.ncclAlltoAll = reinterpret_cast<decltype(n.ncclAlltoAll)>(dlsym(n.lib, "ncclAlltoAll"));
    n.ncclGetLastError = reinterpret_cast<decltype(n.ncclGetLastError)>(dlsym(n.lib, "ncclGetLastError"));
    if (!ok) {
      n.error = path + ": " + n.error;
      dlclose(n.lib);
      n.lib = nullptr;
    }
    if (n.lib) {
      n.ncclGetVersion(&n.version);
      INFO(kInit, "nccl: loaded %s (version %d)", path.c_str(), n.version);
    }
  });
  if (!n.lib) g_loadError = n.error;
  return n.lib ? &n : nullptr;
}

const std::string &loadError() {
  loadNccl();
  return g_loadError;
}

std::atomic<Nccl *> g_active{nullptr};  // set once a pass-through exists

flagcxResult_t toFlagcx(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return flagcxSuccess;
    case ncclUnhandledCudaError: return flagcxUnhandledDeviceError;
    case ncclSystemError: return flagcxSystemError;
    case ncclInternalError: return flagcxInternalError;
    case ncclInvalidArgument: return flagcxInvalidArgument;
    case ncclInvalidUsage: return flagcxInvalidUsage;
    case ncclRemoteError: return flagcxRemoteError;
    case ncclInProgress: return flagcxInProgress;
    default: return flagcxUnhandledCCLError;
  }
}

bool mapType(flagcxDataType_t t, ncclDataType_t *out) {
  switch (t) {
    case flagcxInt8: *out = ncclInt8; return true;
    case flagcxUint8: *out = ncclUint8; return true;
    case flagcxInt32: *out = ncclInt32; return true;
    case flagcxUint32: *out = ncclUint32; return true;
    case flagcxInt64: *out = ncclInt64; return true;
    case flagcxUint64: *out = ncclUint64; return true;
    case flagcxFloat16: *out = ncclFloat16; return true;
    case flagcxFloat32: *out = ncclFloat32; return true;
    case flagcxFloat64: *out = ncclFloat64; return true;
    case flagcxBfloat16: *out = ncclBfloat16; return true;
    case flagcxFloat8e4m3:
    case flagcxFloat8e5m2: *out = ncclUint8; return true;  // moved as bytes; coll refuses reducing them
    default: return false;
  }
}

bool mapOp(flagcxRedOp_t op, ncclRedOp_t *out) {
  switch (op) {
    case flagcxSum: *out = ncclSum; return true;
    case flagcxProd: *out = ncclProd; return true;
    case flagcxMax: *out = ncclMax; return true;
    case flagcxMin: *out = ncclMin; return true;
    case flagcxAvg: *out = ncclAvg; return true;
    default: return false;
  }
}

// Group brackets opened by vendorGroupStart on this thread (engine groups
// nest at most once into the vendor library).
thread_local int t_vendorGroups = 0;

class NcclCcl final : public CclAdapter {
 public:
  NcclCcl(Nccl *n, int rank, int nranks, ncclComm_t nc, void *barrierBuf)
      : n_(n), rank_(rank), nranks_(nranks), nc_(nc), barrierBuf_(barrierBuf) {
    auto v = [](auto f) { return reinterpret_cast<void *>(f); };
    direct_ = VendorDirect{nc_, v(n->ncclAllReduce), v(n->ncclReduce), v(n->ncclBroadcast),
                           v(n->ncclAllGather), v(n->ncclReduceScatter), v(n->ncclAlltoAll),
                           v(n->ncclGather), v(n->ncclScatter), v(n->ncclSend), v(n->ncclRecv),
                           v(n->ncclGetLastError), v(n->ncclGroupStart), v(n->ncclGroupEnd)};
  }
  const char *name() const override { return "nccl"; }
  const VendorDirect *direct() const override { return nc_ ? &direct_ : nullptr; }

  flagcxResult_t coll(const CollArgs &a, flagcxStream_t stream) override {
    cudaStream_t s = nullptr;
    FLAGCX_CHECK(streamOf(stream, &s));
    ncclDataType_t dt;
    if (!mapType(a.dtype, &dt))
      return argError(flagcxInvalidArgument, kColl, "nccl: invalid datatype %d", static_cast<int>(a.dtype));
    if (opReduces(a.op) && dtypeIsFloat8(a.dtype))
      return argError(flagcxNotSupported, kColl,
                      "nccl: float8 reductions are not offered over the NCCL pass-through "
                      "(NCCL accumulates them in half precision, flagcx in float32)");
    ncclRedOp_t op = ncclSum;
    if (opReduces(a.op) && !mapOp(a.redop, &op))
      return argError(flagcxInvalidArgument, kColl, "nccl: invalid reduction op %d", static_cast<int>(a.redop));
    const size_t ts = getFlagcxDataTypeSize(a.dtype);
    const int me = rank_, n = nranks_;
    const char *snd = static_cast<const char *>(a.send);
    char *rcv = static_cast<char *>(a.recv);
    ncclResult_t r = ncclSuccess;
    switch (a.op) {
      case OpKind::AllReduce:
        r = n_->ncclAllReduce(a.send, a.recv, a.count, dt, op, nc_, s);
        break;
      case OpKind::Reduce:
        r = n_->ncclReduce(a.send, a.recv, a.count, dt, op, a.root, nc_, s);
        break;
      case OpKind::Broadcast:
        r = n_->ncclBroadcast(a.send, a.recv, a.count, dt, a.root, nc_, s);
        break;
      case OpKind::AllGather:
        r = n_->ncclAllGather(a.send, a.recv, a.count, dt, nc_, s);
        break;
      case OpKind::ReduceScatter:
        r = n_->ncclReduceScatter(a.send, a.recv, a.count, dt, op, nc_, s);
        break;
      case OpKind::Barrier:
        r = n_->ncclAllReduce(barrierBuf_, barrierBuf_, 1, ncclInt32, ncclSum, nc_, s);
        break;
      case OpKind::Gather: {
        if (n_->ncclGather) {
          r = n_->ncclGather(a.send, a.recv, a.count, dt, a.root, nc_, s);
          break;
        }
        const size_t blk = a.count * ts;
        FLAGCX_CHECK(groupStart());
        if (me == a.root) {
          for (int p = 0; p < n && r == ncclSuccess; p++) {
            if (p == me) r = selfCopy(rcv + p * blk, snd, blk, s);
            else r = n_->ncclRecv(rcv + p * blk, a.count, dt, p, nc_, s);
          }
        } else {
          r = n_->ncclSend(a.send, a.count, dt, a.root, nc_, s);
        }
        r = endGroup(r);
        break;
      }
      case OpKind::Scatter: {
        if (n_->ncclScatter) {
          r = n_->ncclScatter(a.send, a.recv, a.count, dt, a.root, nc_, s);
          break;
        }
        const size_t blk = a.count * ts;
        FLAGCX_CHECK(groupStart());
        if (me == a.root) {
          for (int p = 0; p < n && r == ncclSuccess; p++) {
            if (p == me) r = selfCopy(rcv, snd + p * blk, blk, s);
            else r = n_->ncclSend(snd + p * blk, a.count, dt, p, nc_, s);
          }
        } else {
          r = n_->ncclRecv(a.recv, a.count, dt, a.root, nc_, s);
        }
        r = endGroup(r);
        break;
      }
      case OpKind::AlltoAll: {
        if (n_->ncclAlltoAll) {
          r = n_->ncclAlltoAll(a.send, a.recv, a.count, dt, nc_, s);
          break;
        }
        const size_t blk = a.count * ts;
        FLAGCX_CHECK(groupStart());
        for (int p = 0; p < n && r == ncclSuccess; p++) {
          if (p == me) {
            r = selfCopy(rcv + p * blk, snd + p * blk, blk, s);
            continue;
          }
          r = n_->ncclSend(snd + p * blk, a.count, dt, p, nc_, s);
          if (r == ncclSuccess) r = n_->ncclRecv(rcv + p * blk, a.count, dt, p, nc_, s);
        }
        r = endGroup(r);
        break;
      }
      case OpKind::AlltoAllv: {
        FLAGCX_CHECK(groupStart());
        for (int p = 0; p < n && r == ncclSuccess; p++) {
          const char *sp = snd + a.sdispls[p] * ts;
          char *rp = rcv + a.rdispls[p] * ts;
          if (p == me) {
            if (a.sendcounts[p] != a.recvcounts[p]) {
              r = ncclInvalidArgument;
              WARN(kColl, "nccl alltoallv: rank %d sends %zu elements to itself but receives %zu",
                   me, a.sendcounts[p], a.recvcounts[p]);
            } else {
              r = selfCopy(rp, sp, a.sendcounts[p] * ts, s);
            }
            continue;
          }
          if (a.sendcounts[p]) r = n_->ncclSend(sp, a.sendcounts[p], dt, p, nc_, s);
          if (r == ncclSuccess && a.recvcounts[p])
            r = n_->ncclRecv(rp, a.recvcounts[p], dt, p, nc_, s);
        }
        r = endGroup(r);
        break;
      }
      default:
        return argError(flagcxInvalidArgument, kColl, "nccl: unsupported operation %d",
                        static_cast<int>(a.op));
    }
    return finish(r, opName(a.op), stream, s);
  }

  flagcxResult_t send(const void *buf, size_t count, flagcxDataType_t dt, int peer,
                      flagcxStream_t stream) override {
    cudaStream_t s = nullptr;
    FLAGCX_CHECK(streamOf(stream, &s));
    ncclDataType_t t;
    if (!mapType(dt, &t)) return argError(flagcxInvalidArgument, kP2P, "nccl send: invalid datatype");
    return finish(n_->ncclSend(buf, count, t, peer, nc_, s), "send", stream, s);
  }

  flagcxResult_t recv(void *buf, size_t count, flagcxDataType_t dt, int peer,
                      flagcxStream_t stream) override {
    cudaStream_t s = nullptr;
    FLAGCX_CHECK(streamOf(stream, &s));
    ncclDataType_t t;
    if (!mapType(dt, &t)) return argError(flagcxInvalidArgument, kP2P, "nccl recv: invalid datatype");
    return finish(n_->ncclRecv(buf, count, t, peer, nc_, s), "recv", stream, s);
  }

  flagcxResult_t destroy(bool abort) override {
    ncclResult_t r = abort ? n_->ncclCommAbort(nc_) : n_->ncclCommDestroy(nc_);
    nc_ = nullptr;
    if (barrierBuf_) {
      // Stream-ordered free: cudaFree would synchronize the whole device.
      cudaFreeAsync(barrierBuf_, cuda::internalStream(cuda::currentDevice()));
      cudaGetLastError();
      barrierBuf_ = nullptr;
    }
    if (r != ncclSuccess)
      return argError(toFlagcx(r), kInit, "nccl: %s failed: %s", abort ? "ncclCommAbort" : "ncclCommDestroy",
                      n_->ncclGetErrorString(r));
    return flagcxSuccess;
  }

 private:
  flagcxResult_t streamOf(flagcxStream_t stream, cudaStream_t *s) {
    if (!cuda::streamValid(stream))
      return argError(flagcxInvalidArgument, kColl, "nccl: stream %p is not a live CUDA stream",
                      static_cast<void *>(stream));
    *s = cuda::nativeOf(stream);
    return flagcxSuccess;
  }
  flagcxResult_t groupStart() {
    ncclResult_t r = n_->ncclGroupStart();
    if (r != ncclSuccess)
      return argError(toFlagcx(r), kColl, "nccl: ncclGroupStart failed: %s", n_->ncclGetErrorString(r));
    return flagcxSuccess;
  }
  ncclResult_t endGroup(ncclResult_t sofar) {
    ncclResult_t r = n_->ncclGroupEnd();  // always close what we opened
    return sofar != ncclSuccess ? sofar : r;
  }
  ncclResult_t selfCopy(void *dst, const void *src, size_t bytes, cudaStream_t s) {
    if (bytes == 0 || dst == src) return ncclSuccess;
    if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s) != cudaSuccess) {
      cudaError_t e = cudaGetLastError();
      WARN(kColl, "nccl: local block copy failed: %s", cudaGetErrorString(e));
      return ncclUnhandledCudaError;
    }
    return ncclSuccess;
  }
  flagcxResult_t finish(ncclResult_t r, const char *what, flagcxStream_t stream, cudaStream_t s) {
    if (r != ncclSuccess && r != ncclInProgress)
      return argError(toFlagcx(r), kColl, "rank %d: nccl %s failed: %s", rank_, what,
                      n_->ncclGetErrorString(r));
    if (!stream && t_vendorGroups == 0) {
      cudaError_t e = cudaStreamSynchronize(s);
      if (e != cudaSuccess) return cuda::cudaFail("cudaStreamSynchronize (nccl, NULL stream)", e);
    }
    return flagcxSuccess;
  }

  Nccl *n_;
  int rank_, nranks_;
  ncclComm_t nc_;
  void *barrierBuf_;
  VendorDirect direct_{};
};

// What each rank tells the others before the decision.
struct Vote {
  int32_t ok;        // this rank can and wants to use NCCL
  int32_t pad;
  char uuid[16];     // its GPU
};

}  // namespace

flagcxResult_t makeVendorCcl(const CclContext &ctx, std::unique_ptr<CclAdapter> *out) {
  out->reset();
  DeviceAdapter *cuda = cudaAdapter();
  bool isCuda = cuda && ctx.dev == cuda;
  // Only communicators that could use NCCL vote; the answer of homogeneous
  // and device kind is the same on every rank, so the others skip the vote.
  if (!isCuda || !ctx.homogeneous) return flagcxSuccess;
  Vote mine{};
  std::string why;
  Nccl *n = nullptr;
  if (paramInt(Param::USE_HETERO_COMM) != 0) {
    why = "FLAGCX_USE_HETERO_COMM=1";
  } else if (!(n = loadNccl())) {
    why = "NCCL not loadable on this rank (" + loadError() + ")";
  } else {
    mine.ok = 1;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, cuda::currentDevice()) == cudaSuccess)
      memcpy(mine.uuid, &prop.uuid, sizeof(mine.uuid));
    else
      cudaGetLastError();
  }
  std::vector<Vote> votes(static_cast<size_t>(ctx.nranks));
  votes[static_cast<size_t>(ctx.rank)] = mine;
  FLAGCX_CHECK(ctx.bs->allgather(votes.data(), sizeof(Vote)));
  for (int r = 0; r < ctx.nranks && why.empty(); r++) {
    const Vote &v = votes[static_cast<size_t>(r)];
    if (!v.ok) why = "rank " + std::to_string(r) + " cannot use NCCL";
    for (int q = 0; q < r && why.empty(); q++)
      if (memcmp(votes[static_cast<size_t>(q)].uuid, v.uuid, sizeof(v.uuid)) == 0)
        why = "ranks " + std::to_string(q) + " and " + std::to_string(r) +
              " share one GPU (NCCL needs one GPU per rank)";
  }
  if (!why.empty()) {
    INFO(kInit, "rank %d: the flagcx engine runs this communicator (not NCCL): %s", ctx.rank,
         why.c_str());
    return flagcxSuccess;
  }

  ncclUniqueId id{};
  if (ctx.rank == 0) {
    ncclResult_t r = n->ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      return argError(toFlagcx(r), kInit, "nccl: ncclGetUniqueId failed: %s", n->ncclGetErrorString(r));
  }
  FLAGCX_CHECK(ctx.bs->bcast(&id, sizeof(id), 0));
  ncclComm_t nc = nullptr;
  ncclResult_t r = n->ncclCommInitRank(&nc, ctx.nranks, id, ctx.rank);
  if (r != ncclSuccess)
    return argError(toFlagcx(r), kInit, "rank %d: ncclCommInitRank failed: %s", ctx.rank,
                    n->ncclGetErrorString(r));
  void *barrierBuf = nullptr;
  cudaStream_t is = cuda::internalStream(cuda::currentDevice());
  cudaError_t ce = cudaMallocAsync(&barrierBuf, 16, is);
  if (ce == cudaSuccess) ce = cudaMemsetAsync(barrierBuf, 0, 16, is);
  if (ce == cudaSuccess) ce = cudaStreamSynchronize(is);
  if (ce != cudaSuccess) {
    n->ncclCommDestroy(nc);
    return cuda::cudaFail("barrier buffer for nccl", ce);
  }
  g_active.store(n);
  *out = std::make_unique<NcclCcl>(n, ctx.rank, ctx.nranks, nc, barrierBuf);
  INFO(kInit, "rank %d: collectives pass through to NCCL %d", ctx.rank, n->version);
  return flagcxSuccess;
}

void vendorGroupStart() {
  Nccl *n = g_active.load();
  if (!n) return;
  if (n->ncclGroupStart() == ncclSuccess) t_vendorGroups++;
}

void vendorGroupEnd() {
  Nccl *n = g_active.load();
  if (!n || t_vendorGroups == 0) return;
  t_vendorGroups--;
  ncclResult_t r = n->ncclGroupEnd();
  if (r != ncclSuccess && r != ncclInProgress)
    WARN(kColl, "nccl: ncclGroupEnd failed: %s", n->ncclGetErrorString(r));
}

}  // namespace flagcx
