// Shared helpers of the backend: flagcx's device table and messages, dtype
// and reduction mapping, argument checks, and the steps operations are
// built from (see common.hpp).
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

namespace flagcx_torch::detail {

std::string resultText(const char *what, flagcxResult_t r, flagcxComm_t comm) {
  std::string s = "flagcx: ";
  s += what;
  s += " failed (";
  s += flagcxGetErrorString(r);
  s += ")";
  const char *last = flagcxGetLastError(comm);
  if (last && *last) {
    s += ": ";
    s += last;
  }
  return s;
}

// The table of the device flagcx drives in this process (FLAGCX_DEVICE is
// read once per process, so every communicator shares it).
flagcxDeviceHandle_t devHandle() {
  static std::mutex mu;
  static flagcxDeviceHandle_t handle = nullptr;
  std::lock_guard<std::mutex> g(mu);
  if (!handle) {
    flagcxResult_t r = flagcxDeviceHandleInit(&handle);
    if (r != flagcxSuccess) {
      handle = nullptr;
      TORCH_CHECK(false, resultText("flagcxDeviceHandleInit", r, nullptr));
    }
  }
  return handle;
}

bool processDeviceIsHost() {
  static int host = -1;
  if (host < 0) {
    char vendor[128] = {0};
    flagcxResult_t r = devHandle()->getVendor(vendor);
    TORCH_CHECK(r == flagcxSuccess, resultText("getVendor", r, nullptr));
    host = strcmp(vendor, "host") == 0 ? 1 : 0;
  }
  return host == 1;
}

// torch.float8_e4m3fn / float8_e5m2 (torch 2.1 and later) are the OCP
// formats flagcx's FP8 types hold (e4m3: no infinity, NaN 0x7f/0xff).
#ifndef TORCH_VERSION_MAJOR
#error "torch/version.h (through common.hpp) must come first"
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define FLAGCX_TORCH_HAS_FLOAT8 1
#else
#define FLAGCX_TORCH_HAS_FLOAT8 0
#endif
bool toFlagcx(at::ScalarType t, flagcxDataType_t *out) {
  switch (t) {
    case at::kChar: *out = flagcxInt8; return true;
    case at::kByte: *out = flagcxUint8; return true;
    case at::kBool: *out = flagcxUint8; return true;
    case at::kInt: *out = flagcxInt32; return true;
    case at::kLong: *out = flagcxInt64; return true;
    case at::kHalf: *out = flagcxFloat16; return true;
    case at::kFloat: *out = flagcxFloat32; return true;
    case at::kDouble: *out = flagcxFloat64; return true;
    case at::kBFloat16: *out = flagcxBfloat16; return true;
#if FLAGCX_TORCH_HAS_FLOAT8
    case at::kFloat8_e4m3fn: *out = flagcxFloat8e4m3; return true;
    case at::kFloat8_e5m2: *out = flagcxFloat8e5m2; return true;
#endif
    default: return false;
  }
}

static const char *redOpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "an unknown op";
  }
}


Reduction reduction(const char *opName, const at::Tensor &t, const c10d::ReduceOp &rop) {
  Reduction r;
  r.view = t;
  auto kind = static_cast<c10d::ReduceOp::RedOpType>(rop.op_);
  if (t.is_complex()) {
    TORCH_CHECK(kind == c10d::ReduceOp::SUM || kind == c10d::ReduceOp::AVG ||
                    kind == c10d::ReduceOp::PREMUL_SUM,
                "flagcx ", opName, ": ", redOpName(kind),
                " is not defined for complex tensors (SUM, AVG and PREMUL_SUM are)");
    r.view = at::view_as_real(t);
  }
  TORCH_CHECK(toFlagcx(r.view.scalar_type(), &r.dtype), "flagcx ", opName, ": tensors of type ",
              t.scalar_type(), " cannot be reduced (flagcx reduces int8, uint8, int32, int64, ",
              "float16, bfloat16, float32, float64, float8_e4m3fn and float8_e5m2 (torch 2.1+), ",
              "bool and complex)");
  switch (kind) {
    case c10d::ReduceOp::SUM: r.op = flagcxSum; break;
    case c10d::ReduceOp::AVG: r.op = flagcxAvg; break;
    case c10d::ReduceOp::PRODUCT: r.op = flagcxProd; break;
    case c10d::ReduceOp::MIN: r.op = flagcxMin; break;
    case c10d::ReduceOp::MAX: r.op = flagcxMax; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK(r.dtype != flagcxFloat8e4m3 && r.dtype != flagcxFloat8e5m2, "flagcx ", opName,
                  ": PREMUL_SUM is not supported on float8 tensors (SUM, AVG, PRODUCT, MIN, MAX are)");
      r.op = flagcxSum;
      r.premul = true;
      auto *sup = dynamic_cast<c10d::NCCLPreMulSumSupplement *>(rop.supplement_.get());
      TORCH_CHECK(sup, "flagcx ", opName, ": PREMUL_SUM without its factor");
#if TORCH_VERSION_MAJOR >= 2
      if (sup->tensor_factor.defined()) r.tensorFactor = sup->tensor_factor;
#else
      if (!sup->tensor_factors.empty()) r.tensorFactor = sup->tensor_factors[0];
#endif
      else r.factor = sup->double_factor;
      break;
    }
    default:
      TORCH_CHECK(false, "flagcx ", opName, ": reduction ", redOpName(kind),
                  " is not supported (flagcx has SUM, AVG, PRODUCT, MIN, MAX and PREMUL_SUM)");
  }
  if (t.scalar_type() == at::kBool) {
    // Bools travel as bytes: OR is MAX, AND is MIN (as NCCL's process group).
    if (r.op == flagcxSum && !r.premul) r.op = flagcxMax;
    else if (r.op == flagcxProd) r.op = flagcxMin;
    TORCH_CHECK(r.op == flagcxMax || r.op == flagcxMin, "flagcx ", opName, ": ",
                redOpName(kind), " is not defined for bool tensors");
  }
  return r;
}

// The source of a PREMUL_SUM: a scaled copy of the input (the caller's
// tensor stays as it is until the result lands in it).
at::Tensor premultiplied(const Reduction &r) {
  if (r.tensorFactor.defined()) return r.view * r.tensorFactor.to(r.view.device());
  return r.view * r.factor;
}

void checkTensor(const char *op, const at::Tensor &t) {
  TORCH_CHECK(t.defined(), "flagcx ", op, ": undefined tensor");
  TORCH_CHECK(t.layout() == c10::kStrided, "flagcx ", op, ": only dense (strided) tensors are supported");
  TORCH_CHECK(t.is_contiguous(), "flagcx ", op, ": tensors must be contiguous");
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "flagcx ", op,
              ": tensors must be on the CPU or a CUDA device, not ", t.device());
}

at::Tensor single(const char *op, const std::vector<at::Tensor> &ts) {
  TORCH_CHECK(ts.size() == 1, "flagcx ", op, ": expects one tensor per process, got ", ts.size());
  checkTensor(op, ts[0]);
  return ts[0];
}

size_t bytesOf(const at::Tensor &t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// A copy enqueued on the channel's stream (stream order: after the flagcx
// call enqueued before it).
flagcxResult_t streamCopy(void *dst, const void *src, size_t bytes, flagcxStream_t s) {
  if (bytes == 0 || dst == src) return flagcxSuccess;
  return devHandle()->deviceMemcpy(dst, const_cast<void *>(src), bytes,
                                   flagcxMemcpyDeviceToDevice, s);
}

// Copies a flat buffer out into equally sized tensors, in stream order.
Step scatterInto(at::Tensor flat, std::vector<at::Tensor> outs) {
  return [flat, outs](flagcxComm_t, flagcxStream_t s) {
    const char *p = static_cast<const char *>(flat.data_ptr());
    for (const auto &o : outs) {
      size_t b = bytesOf(o);
      flagcxResult_t r = streamCopy(o.data_ptr(), p, b, s);
      if (r != flagcxSuccess) return r;
      p += b;
    }
    return flagcxSuccess;
  };
}

at::Tensor flatCat(const std::vector<at::Tensor> &ts) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const auto &t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void checkSameShape(const char *op, const at::Tensor &ref, const std::vector<at::Tensor> &ts,
                    const char *what) {
  for (const auto &t : ts) {
    checkTensor(op, t);
    TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "flagcx ", op, ": ", what,
                " must have the input's type ", ref.scalar_type(), ", got ", t.scalar_type());
    TORCH_CHECK(t.numel() == ref.numel(), "flagcx ", op, ": ", what, " must have ",
                ref.numel(), " elements like the input, got ", t.numel());
  }
}

std::string timeoutSeconds(std::chrono::milliseconds t) {
  long long s = (t.count() + 999) / 1000;
  if (s < 1) s = 1;
  return std::to_string(s);
}

// ---------------------------------------------------------------- op steps

// The allreduce of one tensor, in place (PREMUL_SUM reads a scaled copy).
Op allreduceOp(const at::Tensor &x, const c10d::ReduceOp &rop) {
  Reduction r = reduction("allreduce", x, rop);
  at::Tensor dst = r.view;
  at::Tensor src = r.premul ? premultiplied(r) : dst;
  Op op;
  op.keep = {dst, src};
  size_t n = static_cast<size_t>(dst.numel());
  flagcxDataType_t dt = r.dtype;
  flagcxRedOp_t ro = r.op;
  op.core = [src, dst, n, dt, ro](flagcxComm_t c, flagcxStream_t s) {
    if (n == 0) return flagcxSuccess;
    return flagcxAllReduce(src.data_ptr(), dst.data_ptr(), n, dt, ro, c, s);
  };
  return op;
}

// Several ops' steps as one op (flagcx group around the cores).
Op merged(std::vector<Op> ops) {
  Op m;
  auto shared = std::make_shared<std::vector<Op>>(std::move(ops));
  for (const auto &o : *shared) m.keep.insert(m.keep.end(), o.keep.begin(), o.keep.end());
  m.pre = [shared](flagcxComm_t c, flagcxStream_t s) {
    for (const auto &o : *shared)
      if (o.pre) {
        flagcxResult_t r = o.pre(c, s);
        if (r != flagcxSuccess) return r;
      }
    return flagcxSuccess;
  };
  m.core = [shared](flagcxComm_t c, flagcxStream_t s) {
    flagcxResult_t r = flagcxGroupStart(c);
    if (r != flagcxSuccess) return r;
    for (const auto &o : *shared)
      if (o.core) {
        r = o.core(c, s);
        if (r != flagcxSuccess) {
          flagcxGroupEnd(c);
          return r;
        }
      }
    return flagcxGroupEnd(c);
  };
  m.post = [shared](flagcxComm_t c, flagcxStream_t s) {
    for (const auto &o : *shared)
      if (o.post) {
        flagcxResult_t r = o.post(c, s);
        if (r != flagcxSuccess) return r;
      }
    return flagcxSuccess;
  };
  return m;
}

Op allgatherBaseOp(const at::Tensor &out, const at::Tensor &in) {
  Op op;
  op.keep = {out, in};
  size_t n = bytesOf(in);
  op.core = [out, in, n](flagcxComm_t c, flagcxStream_t s) {
    if (n == 0) return flagcxSuccess;
    return flagcxAllGather(in.data_ptr(), out.data_ptr(), n, flagcxUint8, c, s);
  };
  return op;
}

// Allgather into a list: through one flat buffer, then copied out.
Op allgatherListOp(const at::Tensor &in, const std::vector<at::Tensor> &outs, int size) {
  at::Tensor flat = at::empty({static_cast<int64_t>(size) * in.numel()}, in.options());
  Op op = allgatherBaseOp(flat, in);
  op.post = scatterInto(flat, outs);
  op.keep.insert(op.keep.end(), outs.begin(), outs.end());
  return op;
}

Op reduceScatterBaseOp(const at::Tensor &out, const at::Tensor &in, const c10d::ReduceOp &rop) {
  Reduction ro = reduction("reduce_scatter", out, rop);
  Reduction ri = reduction("reduce_scatter", in, rop);
  at::Tensor dst = ro.view;
  at::Tensor src = ri.premul ? premultiplied(ri) : ri.view;
  Op op;
  op.keep = {dst, src};
  size_t n = static_cast<size_t>(dst.numel());
  flagcxDataType_t dt = ro.dtype;
  flagcxRedOp_t r = ro.op;
  op.core = [src, dst, n, dt, r](flagcxComm_t c, flagcxStream_t s) {
    if (n == 0) return flagcxSuccess;
    return flagcxReduceScatter(src.data_ptr(), dst.data_ptr(), n, dt, r, c, s);
  };
  return op;
}

// Counts and displacements in bytes for alltoallv: `splits` are rows of
// dim 0 (empty: equal parts).
void byteSplits(const char *op, const at::Tensor &t, const std::vector<int64_t> &splits, int size,
                std::vector<size_t> *counts, std::vector<size_t> *displs) {
  int64_t rows = t.dim() > 0 ? t.size(0) : t.numel();
  size_t rowBytes = rows > 0 ? bytesOf(t) / static_cast<size_t>(rows) : 0;
  counts->assign(static_cast<size_t>(size), 0);
  displs->assign(static_cast<size_t>(size), 0);
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "flagcx ", op, ": dim 0 (", rows,
                ") does not split evenly over ", size, " ranks");
    for (int i = 0; i < size; i++) (*counts)[static_cast<size_t>(i)] = rowBytes * static_cast<size_t>(rows / size);
  } else {
    TORCH_CHECK(static_cast<int>(splits.size()) == size, "flagcx ", op, ": ", splits.size(),
                " split sizes for ", size, " ranks");
    int64_t sum = 0;
    for (int i = 0; i < size; i++) {
      TORCH_CHECK(splits[static_cast<size_t>(i)] >= 0, "flagcx ", op, ": negative split size");
      sum += splits[static_cast<size_t>(i)];
      (*counts)[static_cast<size_t>(i)] = rowBytes * static_cast<size_t>(splits[static_cast<size_t>(i)]);
    }
    TORCH_CHECK(sum == rows, "flagcx ", op, ": split sizes add up to ", sum, ", dim 0 is ", rows);
  }
  size_t off = 0;
  for (int i = 0; i < size; i++) {
    (*displs)[static_cast<size_t>(i)] = off;
    off += (*counts)[static_cast<size_t>(i)];
  }
}

Op alltoallvOp(const at::Tensor &out, const at::Tensor &in, std::vector<size_t> sc,
               std::vector<size_t> sd, std::vector<size_t> rc, std::vector<size_t> rd) {
  Op op;
  op.keep = {out, in};
  op.core = [out, in, sc, sd, rc, rd](flagcxComm_t c, flagcxStream_t s) mutable {
    return flagcxAlltoAllv(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(), rc.data(),
                           rd.data(), flagcxUint8, c, s);
  };
  return op;
}

}  // namespace flagcx_torch::detail
