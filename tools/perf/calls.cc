// One call of each side of the benchmark (bench.h): flagcx's collective on
// the benchmark's stream, and MPI's own equivalent on the same buffers.
#include <climits>
#include <cstring>
#include <vector>

#include "bench.h"

namespace perf {

bool hasInPlace(Op op) { return op != Op::AlltoAllv && op != Op::SendRecv; }
bool recvInsideSend(Op op) { return op == Op::ReduceScatter || op == Op::Scatter; }

void callBuffers(const Bench &b, const Layout &l, size_t ts, void *send, void *recv, void **s,
                 void **r) {
  *s = send;
  *r = recv;
  if (!b.opt.inPlace) return;
  Op op = b.op->op;
  // This rank's block: allgather, gather, reducescatter and scatter.
  size_t mine = b.op->blocked ? static_cast<size_t>(b.rank) * l.count * ts : 0;
  if (recvInsideSend(op)) *r = static_cast<char *>(send) + mine;
  else *s = static_cast<char *>(recv) + (op == Op::AlltoAll ? 0 : mine);
}

// One flagcx call of the benchmark, enqueued on the stream.
flagcxResult_t callFlagcx(Bench &b, const Layout &l, flagcxDataType_t dt, flagcxRedOp_t rop,
                          int root) {
  void *s, *r;
  callBuffers(b, l, getFlagcxDataTypeSize(dt), b.send, b.recv, &s, &r);
  switch (b.op->op) {
    case Op::AllReduce: return flagcxAllReduce(s, r, l.count, dt, rop, b.comm, b.stream);
    case Op::AllGather: return flagcxAllGather(s, r, l.count, dt, b.comm, b.stream);
    case Op::ReduceScatter: return flagcxReduceScatter(s, r, l.count, dt, rop, b.comm, b.stream);
    case Op::Broadcast: return flagcxBroadcast(s, r, l.count, dt, root, b.comm, b.stream);
    case Op::Reduce: return flagcxReduce(s, r, l.count, dt, rop, root, b.comm, b.stream);
    case Op::Gather: return flagcxGather(s, r, l.count, dt, root, b.comm, b.stream);
    case Op::Scatter: return flagcxScatter(s, r, l.count, dt, root, b.comm, b.stream);
    case Op::AlltoAll: return flagcxAlltoAll(s, r, l.count, dt, b.comm, b.stream);
    case Op::AlltoAllv: {
      auto &m = const_cast<Layout &>(l);
      return flagcxAlltoAllv(s, m.sc.data(), m.sd.data(), r, m.rc.data(), m.rd.data(), dt, b.comm,
                             b.stream);
    }
    case Op::SendRecv: {
      int next = (b.rank + 1) % b.nranks, prev = (b.rank + b.nranks - 1) % b.nranks;
      flagcxResult_t res = flagcxGroupStart(b.comm);
      if (res == flagcxSuccess) res = flagcxSend(s, l.count, dt, next, b.comm, b.stream);
      if (res == flagcxSuccess) res = flagcxRecv(r, l.count, dt, prev, b.comm, b.stream);
      flagcxResult_t e = flagcxGroupEnd(b.comm);
      return res != flagcxSuccess ? res : e;
    }
  }
  return flagcxInternalError;
}

// Whether MPI can run the same call; `why` says why not.
namespace {
bool mpiIsMpich() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0;
  MPI_Get_library_version(v, &len);
  return strstr(v, "MPICH") != nullptr;
}
}  // namespace

bool mpiCan(const Bench &b, const Layout &l, const TypeInfo &t, const RedInfo &red, int root,
            const char **why) {
  if (b.onDevice) { *why = "device buffers"; return false; }
  if (b.op->reduces && t.mpiReduce == MPI_DATATYPE_NULL) { *why = "no MPI type"; return false; }
  if (b.op->reduces && red.mpi == MPI_OP_NULL) { *why = "no MPI op"; return false; }
  if (l.sendElems > INT_MAX || l.recvElems > INT_MAX) { *why = "count > INT_MAX"; return false; }
  if (b.opt.inPlace && b.op->op == Op::Reduce && root != 0 && mpiIsMpich()) {
    // MPICH 4.0.2 (Debian 12) segfaults in MPI_Reduce(MPI_IN_PLACE) at a
    // root other than 0 from about 4 KiB (docs/PERFORMANCE.md, "Method").
    *why = "MPICH's in-place reduce at root != 0 crashes";
    return false;
  }
  return true;
}

namespace {

// MPI's in-place forms on the buffers flagcx gets in place (callBuffers).
// MPI_Reduce_scatter_block leaves the result at the start of the buffer,
// not at this rank's block: the same bytes move, so the times compare.
void callMpiInPlace(Bench &b, const Layout &l, size_t ts, MPI_Datatype dt, MPI_Op rop, int root) {
  int c = static_cast<int>(l.count);
  void *s, *r;
  callBuffers(b, l, ts, b.send, b.recv, &s, &r);
  MPI_Comm w = b.mpiComm;
  bool isRoot = b.rank == root;
  // For the arguments only the root reads: MPICH's reduce crashed on a
  // NULL receive buffer at a non-root, so they get the unused other buffer.
  void *spare = recvInsideSend(b.op->op) ? b.recv : b.send;
  switch (b.op->op) {
    case Op::AllReduce: MPI_Allreduce(MPI_IN_PLACE, r, c, dt, rop, w); break;
    case Op::AllGather: MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r, c, dt, w); break;
    case Op::ReduceScatter: MPI_Reduce_scatter_block(MPI_IN_PLACE, s, c, dt, rop, w); break;
    case Op::Broadcast: MPI_Bcast(r, c, dt, root, w); break;
    case Op::Reduce:
      if (isRoot) MPI_Reduce(MPI_IN_PLACE, r, c, dt, rop, root, w);
      else MPI_Reduce(s, spare, c, dt, rop, root, w);
      break;
    case Op::Gather:
      if (isRoot) MPI_Gather(MPI_IN_PLACE, c, dt, r, c, dt, root, w);
      else MPI_Gather(s, c, dt, spare, c, dt, root, w);
      break;
    case Op::Scatter:
      if (isRoot) MPI_Scatter(s, c, dt, MPI_IN_PLACE, c, dt, root, w);
      else MPI_Scatter(spare, c, dt, r, c, dt, root, w);
      break;
    case Op::AlltoAll: MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r, c, dt, w); break;
    case Op::AlltoAllv:
    case Op::SendRecv: break;  // no in-place form here (run() refuses -I 1)
  }
}

}  // namespace

void callMpi(Bench &b, const Layout &l, const TypeInfo &t, const RedInfo &red, int root) {
  MPI_Datatype dt = b.op->reduces ? t.mpiReduce : t.mpiMove;
  if (b.opt.inPlace) return callMpiInPlace(b, l, getFlagcxDataTypeSize(t.dt), dt, red.mpi, root);
  int c = static_cast<int>(l.count);
  void *s = b.send, *r = b.recv;
  MPI_Comm w = b.mpiComm;
  switch (b.op->op) {
    case Op::AllReduce: MPI_Allreduce(s, r, c, dt, red.mpi, w); break;
    case Op::AllGather: MPI_Allgather(s, c, dt, r, c, dt, w); break;
    case Op::ReduceScatter: MPI_Reduce_scatter_block(s, r, c, dt, red.mpi, w); break;
    case Op::Broadcast: MPI_Bcast(r, c, dt, root, w); break;
    case Op::Reduce: MPI_Reduce(s, r, c, dt, red.mpi, root, w); break;
    case Op::Gather: MPI_Gather(s, c, dt, r, c, dt, root, w); break;
    case Op::Scatter: MPI_Scatter(s, c, dt, r, c, dt, root, w); break;
    case Op::AlltoAll: MPI_Alltoall(s, c, dt, r, c, dt, w); break;
    case Op::AlltoAllv: {
      size_t n = static_cast<size_t>(b.nranks);
      std::vector<int> sc(n), sd(n), rc(n), rd(n);
      for (size_t p = 0; p < n; p++) {
        sc[p] = static_cast<int>(l.sc[p]); sd[p] = static_cast<int>(l.sd[p]);
        rc[p] = static_cast<int>(l.rc[p]); rd[p] = static_cast<int>(l.rd[p]);
      }
      MPI_Alltoallv(s, sc.data(), sd.data(), dt, r, rc.data(), rd.data(), dt, w);
      break;
    }
    case Op::SendRecv: {
      int next = (b.rank + 1) % b.nranks, prev = (b.rank + b.nranks - 1) % b.nranks;
      MPI_Sendrecv(s, c, dt, next, 7, r, c, dt, prev, 7, w, MPI_STATUS_IGNORE);
      break;
    }
  }
}

}  // namespace perf
