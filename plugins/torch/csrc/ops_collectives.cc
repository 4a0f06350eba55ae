// The collectives that reduce, broadcast or gather: allreduce (coalesced),
// broadcast, reduce, allgather (list, tensor, coalesced), gather, scatter,
// reduce_scatter (list, tensor).
#include "common.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#ifdef FLAGCX_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace flagcx_torch {
using namespace detail;

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::broadcast(std::vector<at::Tensor> &tensors,
                                                             const c10d::BroadcastOptions &opts) {
  at::Tensor t = single("broadcast", tensors);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(), "flagcx broadcast: root ",
              opts.rootRank, " is not a rank of this group (size ", getSize(), ")");
  int root = static_cast<int>(opts.rootRank);
  return issue(c10d::OpType::BROADCAST, "broadcast", {t}, {true}, {t},
               [root](const std::vector<at::Tensor> &u) {
                 at::Tensor x = u[0];
                 Op op;
                 op.keep = {x};
                 size_t n = bytesOf(x);
                 op.core = [x, n, root](flagcxComm_t c, flagcxStream_t s) {
                   if (n == 0) return flagcxSuccess;
                   return flagcxBroadcast(x.data_ptr(), x.data_ptr(), n, flagcxUint8, root, c, s);
                 };
                 return op;
               });
}


c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::allreduce(std::vector<at::Tensor> &tensors,
                                                             const c10d::AllreduceOptions &opts) {
  at::Tensor t = single("allreduce", tensors);
  c10d::ReduceOp rop = opts.reduceOp;
  reduction("allreduce", t, rop);  // reject bad input before anything is queued
  return issue(c10d::OpType::ALLREDUCE, "allreduce", {t}, {true}, {t},
               [rop](const std::vector<at::Tensor> &u) { return allreduceOp(u[0], rop); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::allreduce_coalesced(
    std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) {
  TORCH_CHECK(!tensors.empty(), "flagcx allreduce_coalesced: no tensors");
  c10d::ReduceOp rop = opts.reduceOp;
  for (const auto &t : tensors) {
    checkTensor("allreduce_coalesced", t);
    reduction("allreduce_coalesced", t, rop);
  }
  std::vector<bool> written(tensors.size(), true);
  return issue(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, written, tensors,
               [rop](const std::vector<at::Tensor> &u) {
                 std::vector<Op> ops;
                 for (const auto &x : u) ops.push_back(allreduceOp(x, rop));
                 return merged(std::move(ops));
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::reduce(std::vector<at::Tensor> &tensors,
                                                          const c10d::ReduceOptions &opts) {
  at::Tensor t = single("reduce", tensors);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(), "flagcx reduce: root ",
              opts.rootRank, " is not a rank of this group (size ", getSize(), ")");
  int root = static_cast<int>(opts.rootRank);
  c10d::ReduceOp rop = opts.reduceOp;
  reduction("reduce", t, rop);
  return issue(c10d::OpType::REDUCE, "reduce", {t}, {true}, {t},
               [rop, root](const std::vector<at::Tensor> &u) {
                 Reduction r = reduction("reduce", u[0], rop);
                 at::Tensor dst = r.view;
                 at::Tensor src = r.premul ? premultiplied(r) : dst;
                 Op op;
                 op.keep = {dst, src};
                 size_t n = static_cast<size_t>(dst.numel());
                 flagcxDataType_t dt = r.dtype;
                 flagcxRedOp_t ro = r.op;
                 op.core = [src, dst, n, dt, ro, root](flagcxComm_t c, flagcxStream_t s) {
                   if (n == 0) return flagcxSuccess;
                   return flagcxReduce(src.data_ptr(), dst.data_ptr(), n, dt, ro, root, c, s);
                 };
                 return op;
               });
}


c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::allgather(
    std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions &) {
  at::Tensor in = single("allgather", inputs);
  TORCH_CHECK(outputs.size() == 1, "flagcx allgather: expects one output list per process");
  auto &outs = outputs[0];
  TORCH_CHECK(static_cast<int>(outs.size()) == getSize(), "flagcx allgather: the output list has ",
              outs.size(), " tensors, the group has ", getSize(), " ranks");
  checkSameShape("allgather", in, outs, "output tensors");
  std::vector<at::Tensor> all = outs;
  all.push_back(in);
  std::vector<bool> written(all.size(), true);
  written.back() = false;
  int size = getSize();
  size_t k = outs.size();
  return issue(c10d::OpType::ALLGATHER, "allgather", all, written, outs,
               [size, k](const std::vector<at::Tensor> &u) {
                 std::vector<at::Tensor> o(u.begin(), u.begin() + static_cast<long>(k));
                 return allgatherListOp(u[k], o, size);
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::_allgather_base(at::Tensor &output,
                                                                   at::Tensor &input,
                                                                   const c10d::AllgatherOptions &) {
  checkTensor("allgather_into_tensor", output);
  checkTensor("allgather_into_tensor", input);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "flagcx allgather_into_tensor: input and output types differ");
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "flagcx allgather_into_tensor: ",
              "the output must have size x ", input.numel(), " = ", input.numel() * getSize(),
              " elements, got ", output.numel());
  return issue(c10d::OpType::_ALLGATHER_BASE, "allgather_into_tensor", {output, input},
               {true, false}, {output},
               [](const std::vector<at::Tensor> &u) { return allgatherBaseOp(u[0], u[1]); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::allgather_coalesced(
    std::vector<std::vector<at::Tensor>> &outputLists, std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions &) {
  TORCH_CHECK(!inputs.empty(), "flagcx allgather_coalesced: no tensors");
  TORCH_CHECK(outputLists.size() == static_cast<size_t>(getSize()),
              "flagcx allgather_coalesced: expects one output list per rank (", getSize(),
              "), got ", outputLists.size());
  for (const auto &l : outputLists)
    TORCH_CHECK(l.size() == inputs.size(), "flagcx allgather_coalesced: each output list must ",
                "have ", inputs.size(), " tensors like the input list");
  std::vector<at::Tensor> all;
  std::vector<bool> written;
  std::vector<at::Tensor> results;
  for (size_t i = 0; i < inputs.size(); i++) {
    checkTensor("allgather_coalesced", inputs[i]);
    std::vector<at::Tensor> col;
    for (const auto &l : outputLists) col.push_back(l[i]);
    checkSameShape("allgather_coalesced", inputs[i], col, "output tensors");
  }
  for (const auto &l : outputLists)
    for (const auto &t : l) {
      all.push_back(t);
      written.push_back(true);
      results.push_back(t);
    }
  for (const auto &t : inputs) {
    all.push_back(t);
    written.push_back(false);
  }
  int size = getSize();
  size_t k = inputs.size();
  return issue(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", all, written, results,
               [size, k](const std::vector<at::Tensor> &u) {
                 std::vector<Op> ops;
                 size_t inBase = static_cast<size_t>(size) * k;
                 for (size_t i = 0; i < k; i++) {
                   std::vector<at::Tensor> outs;
                   for (int r = 0; r < size; r++) outs.push_back(u[static_cast<size_t>(r) * k + i]);
                   ops.push_back(allgatherListOp(u[inBase + i], outs, size));
                 }
                 return merged(std::move(ops));
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::gather(std::vector<std::vector<at::Tensor>> &outputs,
                                                          std::vector<at::Tensor> &inputs,
                                                          const c10d::GatherOptions &opts) {
  at::Tensor in = single("gather", inputs);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(), "flagcx gather: root ",
              opts.rootRank, " is not a rank of this group (size ", getSize(), ")");
  int root = static_cast<int>(opts.rootRank);
  bool isRoot = getRank() == root;
  std::vector<at::Tensor> outs;
  if (isRoot) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                "flagcx gather: the root needs one list of ", getSize(), " output tensors");
    outs = outputs[0];
    checkSameShape("gather", in, outs, "output tensors");
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "flagcx gather: only the root passes output tensors");
  }
  std::vector<at::Tensor> all = outs;
  all.push_back(in);
  std::vector<bool> written(all.size(), true);
  written.back() = false;
  int size = getSize();
  size_t k = outs.size();
  return issue(c10d::OpType::GATHER, "gather", all, written, outs,
               [size, k, root, isRoot](const std::vector<at::Tensor> &u) {
                 at::Tensor x = u[k];
                 size_t n = bytesOf(x);
                 Op op;
                 op.keep = {x};
                 at::Tensor flat;
                 if (isRoot) {
                   flat = at::empty({static_cast<int64_t>(size) * x.numel()}, x.options());
                   std::vector<at::Tensor> o(u.begin(), u.begin() + static_cast<long>(k));
                   op.post = scatterInto(flat, o);
                   op.keep.insert(op.keep.end(), o.begin(), o.end());
                   op.keep.push_back(flat);
                 }
                 op.core = [x, flat, n, root](flagcxComm_t c, flagcxStream_t s) {
                   if (n == 0) return flagcxSuccess;
                   return flagcxGather(x.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, n,
                                       flagcxUint8, root, c, s);
                 };
                 return op;
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::scatter(std::vector<at::Tensor> &outputs,
                                                           std::vector<std::vector<at::Tensor>> &inputs,
                                                           const c10d::ScatterOptions &opts) {
  at::Tensor out = single("scatter", outputs);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(), "flagcx scatter: root ",
              opts.rootRank, " is not a rank of this group (size ", getSize(), ")");
  int root = static_cast<int>(opts.rootRank);
  bool isRoot = getRank() == root;
  std::vector<at::Tensor> ins;
  if (isRoot) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                "flagcx scatter: the root needs one list of ", getSize(), " input tensors");
    ins = inputs[0];
    checkSameShape("scatter", out, ins, "input tensors");
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "flagcx scatter: only the root passes input tensors");
  }
  std::vector<at::Tensor> all = {out};
  all.insert(all.end(), ins.begin(), ins.end());
  std::vector<bool> written(all.size(), false);
  written[0] = true;
  return issue(c10d::OpType::SCATTER, "scatter", all, written, {out},
               [root, isRoot](const std::vector<at::Tensor> &u) {
                 at::Tensor y = u[0];
                 size_t n = bytesOf(y);
                 Op op;
                 op.keep = {y};
                 at::Tensor flat;
                 if (isRoot) {
                   flat = flatCat(std::vector<at::Tensor>(u.begin() + 1, u.end()));
                   op.keep.push_back(flat);
                 }
                 op.core = [y, flat, n, root](flagcxComm_t c, flagcxStream_t s) {
                   if (n == 0) return flagcxSuccess;
                   return flagcxScatter(flat.defined() ? flat.data_ptr() : nullptr, y.data_ptr(), n,
                                        flagcxUint8, root, c, s);
                 };
                 return op;
               });
}


c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::reduce_scatter(
    std::vector<at::Tensor> &outputs, std::vector<std::vector<at::Tensor>> &inputs,
    const c10d::ReduceScatterOptions &opts) {
  at::Tensor out = single("reduce_scatter", outputs);
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
              "flagcx reduce_scatter: expects one list of ", getSize(), " input tensors");
  checkSameShape("reduce_scatter", out, inputs[0], "input tensors");
  c10d::ReduceOp rop = opts.reduceOp;
  reduction("reduce_scatter", out, rop);
  std::vector<at::Tensor> all = {out};
  all.insert(all.end(), inputs[0].begin(), inputs[0].end());
  std::vector<bool> written(all.size(), false);
  written[0] = true;
  return issue(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", all, written, {out},
               [rop](const std::vector<at::Tensor> &u) {
                 at::Tensor flat = flatCat(std::vector<at::Tensor>(u.begin() + 1, u.end()));
                 return reduceScatterBaseOp(u[0], flat, rop);
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::_reduce_scatter_base(
    at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) {
  checkTensor("reduce_scatter_tensor", output);
  checkTensor("reduce_scatter_tensor", input);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "flagcx reduce_scatter_tensor: input and output types differ");
  TORCH_CHECK(input.numel() == output.numel() * getSize(), "flagcx reduce_scatter_tensor: the ",
              "input must have size x ", output.numel(), " = ", output.numel() * getSize(),
              " elements, got ", input.numel());
  c10d::ReduceOp rop = opts.reduceOp;
  reduction("reduce_scatter_tensor", output, rop);
  return issue(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output, input},
               {true, false}, {output}, [rop](const std::vector<at::Tensor> &u) {
                 return reduceScatterBaseOp(u[0], u[1], rop);
               });
}

}  // namespace flagcx_torch
