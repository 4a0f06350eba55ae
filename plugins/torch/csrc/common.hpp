// What the backend's source files share: flagcx's device table and
// messages, the dtype/reduction mapping, argument checks, and the steps
// operations are built from.  Internal to the plugin.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "process_group_flagcx.hpp"

namespace flagcx_torch::detail {

// "flagcx: <what> failed (<result>): <flagcx's last error>".
std::string resultText(const char *what, flagcxResult_t r, flagcxComm_t comm);
// The table of the device flagcx drives in this process (FLAGCX_DEVICE is
// read once per process, so every communicator shares it).
flagcxDeviceHandle_t devHandle();
bool processDeviceIsHost();
bool toFlagcx(at::ScalarType t, flagcxDataType_t *out);

// A reduction as flagcx runs it: the tensor viewed in a type flagcx has,
// its type and op, and the factor a PREMUL_SUM multiplies inputs by.
struct Reduction {
  at::Tensor view;
  flagcxDataType_t dtype = flagcxFloat32;
  flagcxRedOp_t op = flagcxSum;
  bool premul = false;
  double factor = 1.0;
  at::Tensor tensorFactor;
};
// Checks that flagcx can run `rop` on `t` (raises a clear error if not).
Reduction reduction(const char *opName, const at::Tensor &t, const c10d::ReduceOp &rop);
// The source of a PREMUL_SUM: a scaled copy of the input.
at::Tensor premultiplied(const Reduction &r);

void checkTensor(const char *op, const at::Tensor &t);
at::Tensor single(const char *op, const std::vector<at::Tensor> &ts);
void checkSameShape(const char *op, const at::Tensor &ref, const std::vector<at::Tensor> &ts,
                    const char *what);
size_t bytesOf(const at::Tensor &t);
std::string timeoutSeconds(std::chrono::milliseconds t);

// A copy in stream order on the channel's stream.
flagcxResult_t streamCopy(void *dst, const void *src, size_t bytes, flagcxStream_t s);
// Copies a flat buffer out into equally sized tensors, in stream order.
Step scatterInto(at::Tensor flat, std::vector<at::Tensor> outs);
at::Tensor flatCat(const std::vector<at::Tensor> &ts);

// Operation builders shared by several torch calls.
Op allreduceOp(const at::Tensor &x, const c10d::ReduceOp &rop);
Op merged(std::vector<Op> ops);  // one flagcx group around the cores
Op allgatherBaseOp(const at::Tensor &out, const at::Tensor &in);
Op allgatherListOp(const at::Tensor &in, const std::vector<at::Tensor> &outs, int size);
Op reduceScatterBaseOp(const at::Tensor &out, const at::Tensor &in, const c10d::ReduceOp &rop);
// Counts and displacements in bytes for alltoallv: `splits` are rows of
// dim 0 (empty: equal parts).
void byteSplits(const char *op, const at::Tensor &t, const std::vector<int64_t> &splits, int size,
                std::vector<size_t> *counts, std::vector<size_t> *displs);
Op alltoallvOp(const at::Tensor &out, const at::Tensor &in, std::vector<size_t> sc,
               std::vector<size_t> sd, std::vector<size_t> rc, std::vector<size_t> rd);

}  // namespace flagcx_torch::detail
