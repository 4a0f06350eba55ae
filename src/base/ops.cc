// The facts about each collective operation kind (ops.h).
#include "base/ops.h"

#include <cstddef>

#include "base/dtype.h"

namespace flagcx {

namespace {
constexpr const char *kOpNames[] = {"allreduce", "reduce",  "broadcast", "allgather",
                                    "gather",    "reducescatter", "scatter", "alltoall",
                                    "alltoallv", "barrier"};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == static_cast<size_t>(OpKind::Count));
}  // namespace

const char *opName(OpKind op) {
  size_t i = static_cast<size_t>(op);
  return i < static_cast<size_t>(OpKind::Count) ? kOpNames[i] : "?";
}

bool opFromName(const std::string &s, OpKind *op) {
  for (size_t i = 0; i < static_cast<size_t>(OpKind::Count); i++) {
    if (s == kOpNames[i]) {
      *op = static_cast<OpKind>(i);
      return true;
    }
  }
  return false;
}

bool opIsRooted(OpKind op) {
  return op == OpKind::Reduce || op == OpKind::Broadcast || op == OpKind::Gather ||
         op == OpKind::Scatter;
}

bool opReduces(OpKind op) {
  return op == OpKind::AllReduce || op == OpKind::Reduce || op == OpKind::ReduceScatter;
}

bool foldsInOrder(const CollArgs &a) {
  return opReduces(a.op) && dtypeIsFloat(a.dtype) &&
         (a.redop == flagcxSum || a.redop == flagcxProd || a.redop == flagcxAvg);
}

}  // namespace flagcx
