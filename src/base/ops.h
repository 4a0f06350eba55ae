// The collective operations by kind, and the facts about each that every
// layer shares (the schedule compiler, the executor, the tag layout of the
// transports, the vendor pass-through).
#pragma once
#include <cstdint>
#include <string>

namespace flagcx {

enum class OpKind : uint8_t {
  AllReduce, Reduce, Broadcast, AllGather, Gather, ReduceScatter, Scatter,
  AlltoAll, AlltoAllv, Barrier, Count
};
const char *opName(OpKind op);              // "allreduce", ...
bool opFromName(const std::string &s, OpKind *op);
bool opIsRooted(OpKind op);                 // reduce, broadcast, gather, scatter
bool opReduces(OpKind op);                  // allreduce, reduce, reducescatter

}  // namespace flagcx
