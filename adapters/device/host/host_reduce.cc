// hostReduce / hostDivide / hostFold: argument checks, then the fastest kernel variant
// the running CPU supports (AVX2 on x86-64 when present, else the baseline).
#include "adapters/device/adapter.h"
#include "base/base.h"
#include "host_reduce_kernels.h"

namespace flagcx {
namespace {

using namespace reduce_kernels;

struct Kernels {
  ReduceFn reduce;
  DivideFn divide;
  FoldFn fold;
};

Kernels pickKernels() {
#if defined(FLAGCX_HAVE_AVX2_KERNELS) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return {avx2::reduce, avx2::divide, avx2::fold};
#endif
  return {generic::reduce, generic::divide, generic::fold};
}

const Kernels &kernels() {
  static const Kernels k = pickKernels();
  return k;
}

}  // namespace

flagcxResult_t hostReduce(void *dst, const void *a, const void *b, size_t count,
                          flagcxDataType_t dtype, flagcxRedOp_t op) {
  if (static_cast<unsigned>(dtype) >= flagcxNumTypes)
    return argError(flagcxInvalidArgument, kColl, "reduce: invalid datatype %d", static_cast<int>(dtype));
  if (op == flagcxAvg) op = flagcxSum;  // the caller divides at the end (hostDivide)
  if (op != flagcxSum && op != flagcxProd && op != flagcxMax && op != flagcxMin)
    return argError(flagcxInvalidArgument, kColl, "reduce: invalid reduction op %d", static_cast<int>(op));
  if (count == 0) return flagcxSuccess;
  if (!dst || !a || !b)
    return argError(flagcxInvalidArgument, kColl, "reduce: NULL buffer (dst=%p a=%p b=%p)", dst, a, b);
  kernels().reduce(dst, a, b, count, dtype, op);
  return flagcxSuccess;
}

flagcxResult_t hostDivide(void *dst, const void *src, size_t count, flagcxDataType_t dtype,
                          uint64_t divisor) {
  if (static_cast<unsigned>(dtype) >= flagcxNumTypes)
    return argError(flagcxInvalidArgument, kColl, "divide: invalid datatype %d", static_cast<int>(dtype));
  if (divisor == 0) return argError(flagcxInvalidArgument, kColl, "divide: divisor is 0");
  if (count == 0) return flagcxSuccess;
  if (!dst || !src)
    return argError(flagcxInvalidArgument, kColl, "divide: NULL buffer (dst=%p src=%p)", dst, src);
  kernels().divide(dst, src, count, dtype, divisor);
  return flagcxSuccess;
}

flagcxResult_t checkFoldArgs(const void *dst, const void *const *srcs, int n, size_t count,
                             flagcxDataType_t dtype, flagcxRedOp_t op) {
  if (static_cast<unsigned>(dtype) >= flagcxNumTypes)
    return argError(flagcxInvalidArgument, kColl, "fold: invalid datatype %d", static_cast<int>(dtype));
  if (static_cast<unsigned>(op) >= flagcxRedNoOp)
    return argError(flagcxInvalidArgument, kColl, "fold: invalid reduction op %d", static_cast<int>(op));
  if (n < 1 || !srcs) return argError(flagcxInvalidArgument, kColl, "fold: %d sources", n);
  if (count == 0) return flagcxSuccess;
  for (int k = 0; k < n; k++)
    if (!srcs[k]) return argError(flagcxInvalidArgument, kColl, "fold: source %d is NULL", k);
  if (!dst) return argError(flagcxInvalidArgument, kColl, "fold: NULL destination");
  return flagcxSuccess;
}

flagcxResult_t hostFold(void *dst, const void *const *srcs, int n, size_t count,
                        flagcxDataType_t dtype, flagcxRedOp_t op) {
  FLAGCX_CHECK(checkFoldArgs(dst, srcs, n, count, dtype, op));
  if (count) kernels().fold(dst, srcs, n, count, dtype, op);
  return flagcxSuccess;
}

}  // namespace flagcx
