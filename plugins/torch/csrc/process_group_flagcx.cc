// ProcessGroupFlagcx: construction, communicators per device, issuing
// operations (and coalescing them).  See process_group_flagcx.hpp for the
// execution model; the operations are in ops_*.cc.
#include "common.hpp"

#include <pybind11/pybind11.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
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

// ---------------------------------------------------------------- ProcessGroupFlagcx

ProcessGroupFlagcx::ProcessGroupFlagcx(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                       int size, std::chrono::milliseconds timeout)
    : PgBase(rank, size), store_(store), timeout_(timeout) {
  // flagcx reads its variables once per process: the first group's timeout
  // becomes FLAGCX_TIMEOUT unless the user set that variable.
  static std::mutex envMu;
  static std::string applied;
  std::lock_guard<std::mutex> g(envMu);
  std::string want = timeoutSeconds(timeout);
  if (applied.empty()) {
    const char *set = getenv("FLAGCX_TIMEOUT");
    if (set && *set) {
      applied = set;
    } else {
      setenv("FLAGCX_TIMEOUT", want.c_str(), 1);
      applied = want;
    }
  } else if (std::stoll(want) < std::atoll(applied.c_str())) {
    // A later group wants to fail sooner than flagcx will.
    TORCH_WARN_ONCE("flagcx: FLAGCX_TIMEOUT is ", applied, " s for this process (flagcx reads it ",
                    "once, at its first use); a group asked for ", want, " s");
  }
}

ProcessGroupFlagcx::~ProcessGroupFlagcx() {
  // Python drops the last reference with the GIL held; the completion
  // thread may need it for a future's Python callback while we join it.
  std::optional<pybind11::gil_scoped_release> nogil;
  if (Py_IsInitialized() && PyGILState_Check()) nogil.emplace();
  std::shared_ptr<Engine> e;
  std::map<int, std::shared_ptr<Channel>> chans;
  {
    std::lock_guard<std::mutex> g(mu_);
    e = std::move(engine_);
    chans.swap(channels_);
  }
  if (e) e->stop();
  for (auto &kv : chans) kv.second->close();
}

std::string ProcessGroupFlagcx::deviceName() {
  char vendor[128] = {0};
  devHandle()->getVendor(vendor);
  return vendor;
}

void ProcessGroupFlagcx::fail(const char *op, flagcxResult_t r, flagcxComm_t comm) const {
  TORCH_CHECK(false, resultText(op, r, comm));
}

std::shared_ptr<Engine> ProcessGroupFlagcx::engine() {
  std::lock_guard<std::mutex> g(mu_);
  if (!engine_) engine_ = std::make_shared<Engine>();
  return engine_;
}

std::shared_ptr<Channel> ProcessGroupFlagcx::createChannel(int device, bool cuda) {
  auto ch = std::make_shared<Channel>();
  ch->device = device;
  ch->cuda = cuda;
  // The unique id travels through the group's store: rank 0 makes it.
  std::string key = "flagcx/uid/" + std::to_string(commCount_++) + "/" + std::to_string(device);
  flagcxUniqueId id;
  if (getRank() == 0) {
    flagcxResult_t r = flagcxGetUniqueId(&id);
    if (r != flagcxSuccess) fail("flagcxGetUniqueId", r, nullptr);
    std::vector<uint8_t> v(reinterpret_cast<uint8_t *>(&id), reinterpret_cast<uint8_t *>(&id) + sizeof(id));
    store_->set(key, v);
  } else {
    std::vector<uint8_t> v = store_->get(key);
    TORCH_CHECK(v.size() == sizeof(id), "flagcx: the unique id in the store has ", v.size(),
                " bytes, expected ", sizeof(id));
    memcpy(&id, v.data(), sizeof(id));
  }
#ifdef FLAGCX_TORCH_CUDA
  std::optional<c10::cuda::CUDAGuard> guard;
  if (cuda) guard.emplace(static_cast<c10::DeviceIndex>(device));
#endif
  ch->seq = commCount_ - 1;
  flagcxResult_t r = flagcxCommInitRank(&ch->comm, getSize(), &id, getRank());
  if (r != flagcxSuccess) {
    ch->comm = nullptr;
    fail("flagcxCommInitRank", r, nullptr);
  }
  attachStream(*ch);
  return ch;
}

void ProcessGroupFlagcx::attachStream(Channel &ch) {
#ifdef FLAGCX_TORCH_CUDA
  if (ch.cuda) {
    ch.torchStream = c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(ch.device));
    flagcxResult_t r = devHandle()->streamCopy(&ch.stream, static_cast<void *>(ch.torchStream->stream()));
    if (r != flagcxSuccess) fail("streamCopy", r, ch.comm);
    return;
  }
#endif
  flagcxResult_t r = devHandle()->streamCreate(&ch.stream);
  if (r != flagcxSuccess) fail("streamCreate", r, ch.comm);
}

c10::intrusive_ptr<ProcessGroupFlagcx> ProcessGroupFlagcx::shrinkGroup(
    const std::vector<int64_t> &exclude, int flags) {
  std::vector<int> excl;
  int before = 0;  // excluded ranks below this one
  for (int64_t r : exclude) {
    TORCH_CHECK(r >= 0 && r < getSize(), "flagcx: shrink: rank ", r, " is not in this group of ",
                getSize());
    excl.push_back(static_cast<int>(r));
    before += r < getRank() ? 1 : 0;
  }
  std::vector<std::shared_ptr<Channel>> chans;
  int prefix;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto &kv : channels_) chans.push_back(kv.second);
    prefix = shrinkCount_++;
  }
  std::sort(chans.begin(), chans.end(),
            [](const auto &a, const auto &b) { return a->seq < b->seq; });
  // Channels the new group makes later meet under their own keys.
  auto store = c10::make_intrusive<c10d::PrefixStore>("flagcx/shrink/" + std::to_string(prefix),
                                                      store_);
  auto child = c10::make_intrusive<ProcessGroupFlagcx>(
      store, getRank() - before, getSize() - static_cast<int>(excl.size()), timeout_);
  for (auto &ch : chans) {
    auto nch = std::make_shared<Channel>();
    nch->device = ch->device;
    nch->cuda = ch->cuda;
    nch->seq = child->commCount_++;
    flagcxResult_t r;
    {
      std::lock_guard<std::mutex> g(ch->mu);
      TORCH_CHECK(!ch->closed, "flagcx: shrink: the group is already destroyed");
      // Without the abort flag every survivor is idle: what waits on the
      // stream runs first (the shrink itself waits for flagcx's in flight).
      if (flags == 0 && ch->stream) {
        flagcxResult_t q = devHandle()->streamSynchronize(ch->stream);
        if (q != flagcxSuccess) fail("streamSynchronize", q, ch->comm);
      }
#ifdef FLAGCX_TORCH_CUDA
      std::optional<c10::cuda::CUDAGuard> guard;
      if (ch->cuda) guard.emplace(static_cast<c10::DeviceIndex>(ch->device));
#endif
      r = flagcxCommShrink(ch->comm, excl.data(), static_cast<int>(excl.size()), &nch->comm, flags);
    }
    if (r != flagcxSuccess) {
      nch->comm = nullptr;
      fail("flagcxCommShrink", r, ch->comm);
    }
    child->attachStream(*nch);
    std::lock_guard<std::mutex> g(child->mu_);
    child->channels_[nch->device] = nch;
  }
  return child;
}

#ifdef FLAGCX_TORCH_SHRINK
c10::intrusive_ptr<c10d::Backend> ProcessGroupFlagcx::shrink(
    const std::vector<int64_t> &ranks_to_exclude, int shrink_flags,
    const c10::intrusive_ptr<Options> & /*opts_override: nothing of it applies*/) {
  return shrinkGroup(ranks_to_exclude, shrink_flags);
}
#endif

std::shared_ptr<Channel> ProcessGroupFlagcx::channelFor(const c10::Device &device) {
  bool host = processDeviceIsHost();
  int key = -1;
  bool cuda = false;
  if (device.is_cuda()) {
#ifdef FLAGCX_TORCH_CUDA
    TORCH_CHECK(!host, "flagcx: CUDA tensors, but flagcx drives the host in this process ",
                "(FLAGCX_DEVICE=host, or no usable GPU for flagcx)");
    key = device.index();
    cuda = true;
#else
    TORCH_CHECK(false, "flagcx: CUDA tensors, but this flagcx plugin was built against a torch ",
                "without CUDA");
#endif
  } else if (!host) {
#ifdef FLAGCX_TORCH_CUDA
    key = c10::cuda::current_device();  // CPU tensors are staged through this GPU
    cuda = true;
#else
    TORCH_CHECK(false, "flagcx: this process's flagcx device is not the host, and the plugin ",
                "has no CUDA support to stage CPU tensors");
#endif
  }
  std::lock_guard<std::mutex> g(mu_);
  auto it = channels_.find(key);
  if (it != channels_.end()) return it->second;
  auto ch = createChannel(key, cuda);
  channels_[key] = ch;
  return ch;
}

void ProcessGroupFlagcx::enqueue(Batch &b) {
  Channel &ch = *b.ch;
  auto run = [&](const Step &s, const Op &op) {
    if (!s) return;
    flagcxResult_t r = s(ch.comm, ch.stream);
    if (r != flagcxSuccess) fail(op.name, r, ch.comm);
  };
  for (const auto &op : b.ops) run(op.pre, op);
  bool group = b.ops.size() > 1;
  if (group) {
    flagcxResult_t r = flagcxGroupStart(ch.comm);
    if (r != flagcxSuccess) fail("flagcxGroupStart", r, ch.comm);
  }
  for (const auto &op : b.ops) run(op.core, op);
  if (group) {
    flagcxResult_t r = flagcxGroupEnd(ch.comm);
    if (r != flagcxSuccess) fail("flagcxGroupEnd", r, ch.comm);
  }
  for (const auto &op : b.ops) run(op.post, op);
  for (const auto &op : b.ops) b.hostSync = b.hostSync || op.hostSync;
#ifdef FLAGCX_TORCH_CUDA
  if (ch.cuda) {
    b.cudaEvent = ch.takeEvent();
    b.cudaEvent->record(*ch.torchStream);
    b.cudaStream = ch.torchStream;
    b.enqueued = true;
    if (!b.stagedBack.empty()) {
      // CPU tensors staged through the GPU: results back into them, and
      // the work is complete when the call returns.
      {
        c10::cuda::CUDAGuard dg(static_cast<c10::DeviceIndex>(ch.device));
        c10::cuda::CUDAStreamGuard sg(*ch.torchStream);
        for (auto &kv : b.stagedBack) kv.first.copy_(kv.second, /*non_blocking=*/false);
        b.stagedBack.clear();
      }
      b.hostSync = true;
      b.complete();
      if (b.error) std::rethrow_exception(b.error);
    }
    return;
  }
#endif
  flagcxResult_t r = devHandle()->eventCreate(&b.event, flagcxEventDisableTiming);
  if (r != flagcxSuccess) fail("eventCreate", r, ch.comm);
  r = devHandle()->eventRecord(b.event, ch.stream);
  if (r != flagcxSuccess) fail("eventRecord", r, ch.comm);
  b.enqueued = true;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::issue(c10d::OpType type, const char *name,
                                                         std::vector<at::Tensor> tensors,
                                                         std::vector<bool> written,
                                                         std::vector<at::Tensor> outputs,
                                                         const Builder &build, bool hostSync) {
  c10::Device device(c10::DeviceType::CPU);
  bool haveDevice = false;
  for (const auto &t : tensors) {
    if (!t.defined()) continue;
    if (!haveDevice) {
      device = t.device();
      haveDevice = true;
    }
    TORCH_CHECK(t.device() == device, "flagcx ", name, ": all tensors must be on one device (",
                device, " and ", t.device(), ")");
  }
  std::shared_ptr<Channel> ch;
  if (coalescing_ && coalesced_->ch) {
    ch = coalesced_->ch;
  } else {
    ch = channelFor(device);
  }

  Op op;
  std::vector<at::Tensor> used = tensors;
  bool staged = false;
#ifdef FLAGCX_TORCH_CUDA
  std::optional<c10::cuda::CUDAGuard> devGuard;
  std::optional<c10::cuda::CUDAStreamGuard> streamGuard;
  if (ch->cuda) {
    devGuard.emplace(static_cast<c10::DeviceIndex>(ch->device));
    // The internal stream starts after what the caller queued so far.
    {
      std::lock_guard<std::mutex> g(ch->readyMu);
      if (!ch->readyEvent) ch->readyEvent.emplace(cudaEventDisableTiming);
      ch->readyEvent->record(
          at::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(ch->device)));
      ch->readyEvent->block(*ch->torchStream);
    }
    streamGuard.emplace(*ch->torchStream);
    if (device.is_cpu()) {
      staged = true;
      c10::Device gpu(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(ch->device));
      for (auto &t : used)
        if (t.defined()) t = t.to(gpu, /*non_blocking=*/false, /*copy=*/true);
    } else {
      for (const auto &t : used)
        if (t.defined() && t.numel() > 0)
          c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), *ch->torchStream);
    }
  }
#endif
  op = build(used);
  op.name = name;
  op.hostSync = op.hostSync || hostSync;

  auto batch = coalescing_ ? coalesced_ : std::make_shared<Batch>();
  if (!batch->ch) batch->ch = ch;
  TORCH_CHECK(batch->ch == ch, "flagcx ", name, ": a coalesced batch must stay on one device");
  batch->engine = engine();
  batch->ops.push_back(std::move(op));
  auto work = c10::make_intrusive<WorkFlagcx>(getRank(), type, batch, std::move(outputs));
#ifdef FLAGCX_TORCH_CUDA
  if (staged)
    for (size_t i = 0; i < tensors.size(); i++)
      if (written[i] && tensors[i].defined()) batch->stagedBack.emplace_back(tensors[i], used[i]);
#else
  (void)staged;
  (void)written;
#endif
  if (coalescing_) {
#if TORCH_VERSION_MAJOR >= 2
    // torch 2.x waits for the Work endCoalescing returns; the per-op Work
    // of a synchronous call inside the block is waited at once, so it must
    // be complete already (as NCCL's process group does).
    auto none = std::make_shared<Batch>();
    none->enqueued = true;
    none->done = true;
    return c10::make_intrusive<WorkFlagcx>(getRank(), type, none, std::vector<at::Tensor>());
#else
    coalescedWorks_.push_back(work);
    return work;
#endif
  }
  enqueue(*batch);
  return work;
}

#if TORCH_VERSION_MAJOR >= 2
#ifdef FLAGCX_TORCH_COALESCING_V2
void ProcessGroupFlagcx::startCoalescing() {
  TORCH_CHECK(!coalescing_, "flagcx: coalescing already started");
  coalescing_ = true;
  coalesced_ = std::make_shared<Batch>();
  coalescedWorks_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagcx::endCoalescing() {
  TORCH_CHECK(coalescing_, "flagcx: endCoalescing without startCoalescing");
  coalescing_ = false;
  auto batch = std::move(coalesced_);
  coalescedWorks_.clear();
  std::vector<at::Tensor> outs;
  if (!batch->ops.empty()) {
    enqueue(*batch);
  } else {
    batch->enqueued = true;
    batch->done = true;
  }
  return c10::make_intrusive<WorkFlagcx>(getRank(), c10d::OpType::UNKNOWN, batch, outs);
}
#endif
#else
void ProcessGroupFlagcx::startCoalescing() {
  TORCH_CHECK(!coalescing_, "flagcx: coalescing already started");
  coalescing_ = true;
  coalesced_ = std::make_shared<Batch>();
  coalescedWorks_.clear();
}

void ProcessGroupFlagcx::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>> &) {
  TORCH_CHECK(coalescing_, "flagcx: endCoalescing without startCoalescing");
  coalescing_ = false;
  auto batch = std::move(coalesced_);
  coalescedWorks_.clear();  // the works share the batch; they complete with it
  if (!batch->ops.empty()) {
    enqueue(*batch);
  } else {
    batch->enqueued = true;
    batch->done = true;
  }
}
#endif

}  // namespace flagcx_torch
