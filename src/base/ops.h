// The collective operations by kind, and the facts about each that every
// layer shares (the schedule compiler, the executor, the tag layout of the
// transports, the vendor pass-through).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "flagcx.h"

namespace flagcx {

enum class OpKind : uint8_t {
  AllReduce, Reduce, Broadcast, AllGather, Gather, ReduceScatter, Scatter,
  AlltoAll, AlltoAllv, Barrier, Count
};
const char *opName(OpKind op);              // "allreduce", ...
bool opFromName(const std::string &s, OpKind *op);
bool opIsRooted(OpKind op);                 // reduce, broadcast, gather, scatter
bool opReduces(OpKind op);                  // allreduce, reduce, reducescatter

// One collective call as the API received it (after its checks).  The
// executor and the vendor pass-through both take it as it is.
struct CollArgs {
  OpKind op;
  const void *send;
  void *recv;
  size_t count;
  flagcxDataType_t dtype;
  flagcxRedOp_t redop;
  int root;
  const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;  // alltoallv
};

// The calls deterministic mode covers (docs/DETERMINISM.md): a reduction
// (allreduce, reduce, reducescatter) with Sum, Prod or Avg on a floating
// type.  The others are exact in any order.
bool foldsInOrder(const CollArgs &a);

}  // namespace flagcx
