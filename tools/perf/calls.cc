// One call of each side of the benchmark (bench.h): flagcx's collective on
// the benchmark's stream, and MPI's own equivalent on the same buffers.
#include <climits>
#include <vector>

#include "bench.h"

namespace perf {

// One flagcx call of the benchmark, enqueued on the stream.
flagcxResult_t callFlagcx(Bench &b, const Layout &l, flagcxDataType_t dt, flagcxRedOp_t rop,
                          int root) {
  void *s = b.send, *r = b.recv;
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
bool mpiCan(const Bench &b, const Layout &l, const TypeInfo &t, const RedInfo &red,
            const char **why) {
  if (b.onDevice) { *why = "device buffers"; return false; }
  if (b.op->reduces && t.mpiReduce == MPI_DATATYPE_NULL) { *why = "no MPI type"; return false; }
  if (b.op->reduces && red.mpi == MPI_OP_NULL) { *why = "no MPI op"; return false; }
  if (l.sendElems > INT_MAX || l.recvElems > INT_MAX) { *why = "count > INT_MAX"; return false; }
  return true;
}

void callMpi(Bench &b, const Layout &l, const TypeInfo &t, const RedInfo &red, int root) {
  MPI_Datatype dt = b.op->reduces ? t.mpiReduce : t.mpiMove;
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
