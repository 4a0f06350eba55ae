// Exchanges and the rest: all_to_all (single, with split sizes, lists),
// send/recv, barrier, and torch 2.x's coalesced tensor collectives.
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

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::alltoall_base(at::Tensor &output,
                                                                 at::Tensor &input,
                                                                 std::vector<int64_t> &outputSplits,
                                                                 std::vector<int64_t> &inputSplits,
                                                                 const c10d::AllToAllOptions &) {
  checkTensor("all_to_all_single", output);
  checkTensor("all_to_all_single", input);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "flagcx all_to_all_single: input and output types differ");
  int size = getSize();
  std::vector<size_t> sc, sd, rc, rd;
  byteSplits("all_to_all_single", input, inputSplits, size, &sc, &sd);
  byteSplits("all_to_all_single", output, outputSplits, size, &rc, &rd);
  bool equal = inputSplits.empty() && outputSplits.empty();
  if (equal)
    TORCH_CHECK(output.numel() == input.numel(), "flagcx all_to_all_single: input and output ",
                "sizes differ (", input.numel(), " and ", output.numel(), ")");
  return issue(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output, input}, {true, false},
               {output}, [=](const std::vector<at::Tensor> &u) {
                 if (equal) {
                   at::Tensor out = u[0], in = u[1];
                   size_t n = bytesOf(in) / static_cast<size_t>(size);
                   Op op;
                   op.keep = {out, in};
                   op.core = [out, in, n](flagcxComm_t c, flagcxStream_t s) {
                     if (n == 0) return flagcxSuccess;
                     return flagcxAlltoAll(in.data_ptr(), out.data_ptr(), n, flagcxUint8, c, s);
                   };
                   return op;
                 }
                 return alltoallvOp(u[0], u[1], sc, sd, rc, rd);
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::alltoall(std::vector<at::Tensor> &outputs,
                                                            std::vector<at::Tensor> &inputs,
                                                            const c10d::AllToAllOptions &) {
  int size = getSize();
  TORCH_CHECK(static_cast<int>(outputs.size()) == size && static_cast<int>(inputs.size()) == size,
              "flagcx all_to_all: expects ", size, " input and ", size, " output tensors, got ",
              inputs.size(), " and ", outputs.size());
  for (const auto &t : outputs) checkTensor("all_to_all", t);
  for (const auto &t : inputs) {
    checkTensor("all_to_all", t);
    TORCH_CHECK(t.scalar_type() == outputs[0].scalar_type(),
                "flagcx all_to_all: all tensors must have one type");
  }
  for (const auto &t : outputs)
    TORCH_CHECK(t.scalar_type() == outputs[0].scalar_type(),
                "flagcx all_to_all: all tensors must have one type");
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  std::vector<bool> written(all.size(), false);
  for (int i = 0; i < size; i++) written[static_cast<size_t>(i)] = true;
  return issue(c10d::OpType::ALLTOALL, "all_to_all", all, written, outputs,
               [size](const std::vector<at::Tensor> &u) {
                 std::vector<at::Tensor> outs(u.begin(), u.begin() + size);
                 std::vector<at::Tensor> ins(u.begin() + size, u.end());
                 std::vector<size_t> sc, sd, rc, rd;
                 size_t so = 0, ro = 0;
                 for (int i = 0; i < size; i++) {
                   sc.push_back(bytesOf(ins[static_cast<size_t>(i)]));
                   sd.push_back(so);
                   so += sc.back();
                   rc.push_back(bytesOf(outs[static_cast<size_t>(i)]));
                   rd.push_back(ro);
                   ro += rc.back();
                 }
                 at::Tensor inFlat = flatCat(ins).view(at::kByte);
                 at::Tensor outFlat = at::empty({static_cast<int64_t>(ro)},
                                                outs[0].options().dtype(at::kByte));
                 Op op = alltoallvOp(outFlat, inFlat, sc, sd, rc, rd);
                 op.post = [outFlat, outs](flagcxComm_t, flagcxStream_t s) {
                   const char *p = static_cast<const char *>(outFlat.data_ptr());
                   for (const auto &o : outs) {
                     size_t b = bytesOf(o);
                     flagcxResult_t r = streamCopy(o.data_ptr(), p, b, s);
                     if (r != flagcxSuccess) return r;
                     p += b;
                   }
                   return flagcxSuccess;
                 };
                 op.keep.insert(op.keep.end(), outs.begin(), outs.end());
                 return op;
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::send(std::vector<at::Tensor> &tensors,
                                                        int dstRank, int) {
  at::Tensor t = single("send", tensors);
  TORCH_CHECK(dstRank >= 0 && dstRank < getSize() && dstRank != getRank(), "flagcx send: rank ",
              dstRank, " is not another rank of this group (size ", getSize(), ")");
  return issue(c10d::OpType::SEND, "send", {t}, {false}, {t},
               [dstRank](const std::vector<at::Tensor> &u) {
                 at::Tensor x = u[0];
                 size_t n = bytesOf(x);
                 Op op;
                 op.keep = {x};
                 op.core = [x, n, dstRank](flagcxComm_t c, flagcxStream_t s) {
                   if (n == 0) return flagcxSuccess;
                   return flagcxSend(x.data_ptr(), n, flagcxUint8, dstRank, c, s);
                 };
                 return op;
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::recv(std::vector<at::Tensor> &tensors,
                                                        int srcRank, int) {
  at::Tensor t = single("recv", tensors);
  TORCH_CHECK(srcRank >= 0 && srcRank < getSize() && srcRank != getRank(), "flagcx recv: rank ",
              srcRank, " is not another rank of this group (size ", getSize(), ")");
  return issue(c10d::OpType::RECV, "recv", {t}, {true}, {t},
               [srcRank](const std::vector<at::Tensor> &u) {
                 at::Tensor x = u[0];
                 size_t n = bytesOf(x);
                 Op op;
                 op.keep = {x};
                 op.core = [x, n, srcRank](flagcxComm_t c, flagcxStream_t s) {
                   if (n == 0) return flagcxSuccess;
                   return flagcxRecv(x.data_ptr(), n, flagcxUint8, srcRank, c, s);
                 };
                 return op;
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::recvAnysource(std::vector<at::Tensor> &, int) {
  TORCH_CHECK(false, "flagcx recv: receiving from any source is not supported (flagcx matches ",
              "every receive with a named peer); pass src=");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::barrier(const c10d::BarrierOptions &opts) {
  // The barrier runs where this group's work runs: a CUDA device in a GPU
  // process (the one asked for, else the current one), else the host.
  std::vector<at::Tensor> none;
  c10::Device device(c10::DeviceType::CPU);
#ifdef FLAGCX_TORCH_CUDA
  if (!processDeviceIsHost()) {
    int idx = opts.device_ids.empty() ? c10::cuda::current_device()
                                      : static_cast<int>(opts.device_ids[0]);
    device = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(idx));
  }
#else
  (void)opts;
#endif
  // A one-byte tensor on that device names it for issue().
  at::Tensor probe = at::empty({1}, at::TensorOptions().dtype(at::kByte).device(device));
  return issue(c10d::OpType::BARRIER, "barrier", {probe}, {false}, {},
               [](const std::vector<at::Tensor> &) {
                 Op op;
                 op.core = [](flagcxComm_t c, flagcxStream_t s) { return flagcxBarrier(c, s); };
                 return op;
               },
               /*hostSync=*/true);
}

#if TORCH_VERSION_MAJOR >= 2
#ifdef FLAGCX_TORCH_COALESCING_V2
c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::allgather_into_tensor_coalesced(
    std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions &) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "flagcx allgather_into_tensor_coalesced: one output per input");
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  std::vector<bool> written(all.size(), false);
  for (size_t i = 0; i < outputs.size(); i++) {
    checkTensor("allgather_into_tensor_coalesced", outputs[i]);
    checkTensor("allgather_into_tensor_coalesced", inputs[i]);
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * getSize(),
                "flagcx allgather_into_tensor_coalesced: output ", i, " has the wrong size");
    written[i] = true;
  }
  size_t k = inputs.size();
  return issue(c10d::OpType::_ALLGATHER_BASE, "allgather_into_tensor_coalesced", all, written, outputs,
               [k](const std::vector<at::Tensor> &u) {
                 std::vector<Op> ops;
                 for (size_t i = 0; i < k; i++) ops.push_back(allgatherBaseOp(u[i], u[k + i]));
                 return merged(std::move(ops));
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::ReduceScatterOptions &opts) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "flagcx reduce_scatter_tensor_coalesced: one output per input");
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  std::vector<bool> written(all.size(), false);
  c10d::ReduceOp rop = opts.reduceOp;
  for (size_t i = 0; i < outputs.size(); i++) {
    checkTensor("reduce_scatter_tensor_coalesced", outputs[i]);
    checkTensor("reduce_scatter_tensor_coalesced", inputs[i]);
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * getSize(),
                "flagcx reduce_scatter_tensor_coalesced: input ", i, " has the wrong size");
    reduction("reduce_scatter_tensor_coalesced", outputs[i], rop);
    written[i] = true;
  }
  size_t k = inputs.size();
  return issue(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor_coalesced", all, written, outputs,
               [k, rop](const std::vector<at::Tensor> &u) {
                 std::vector<Op> ops;
                 for (size_t i = 0; i < k; i++) ops.push_back(reduceScatterBaseOp(u[i], u[k + i], rop));
                 return merged(std::move(ops));
               });
}
#endif
#endif

}  // namespace flagcx_torch
