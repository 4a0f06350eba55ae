// ProcessGroupFlagcx: see process_group_flagcx.hpp for the execution model.
#include "process_group_flagcx.hpp"

#include <pybind11/pybind11.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>

#ifdef FLAGCX_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace flagcx_torch {
namespace {

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
    default: return false;
  }
}

const char *redOpName(c10d::ReduceOp::RedOpType op) {
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
              "float16, bfloat16, float32, float64, bool and complex)");
  switch (kind) {
    case c10d::ReduceOp::SUM: r.op = flagcxSum; break;
    case c10d::ReduceOp::AVG: r.op = flagcxAvg; break;
    case c10d::ReduceOp::PRODUCT: r.op = flagcxProd; break;
    case c10d::ReduceOp::MIN: r.op = flagcxMin; break;
    case c10d::ReduceOp::MAX: r.op = flagcxMax; break;
    case c10d::ReduceOp::PREMUL_SUM: {
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

}  // namespace

// ---------------------------------------------------------------- Channel

flagcxResult_t Channel::asyncError(std::string *message) {
  std::lock_guard<std::mutex> g(mu);
  if (closed || !comm) {
    if (message) *message = finalMessage;
    return finalError;
  }
  flagcxResult_t e = flagcxSuccess;
  flagcxResult_t r = flagcxCommGetAsyncError(comm, &e);
  if (r != flagcxSuccess) e = r;
  if (e != flagcxSuccess && message) *message = resultText("the operation", e, comm);
  return e;
}

void Channel::close() {
  std::lock_guard<std::mutex> g(mu);
  if (closed) return;
  closed = true;
  if (!comm) return;
  flagcxResult_t e = flagcxSuccess;
  flagcxCommGetAsyncError(comm, &e);
  if (e == flagcxSuccess && stream) {
    flagcxResult_t r = devHandle()->streamSynchronize(stream);
    if (r != flagcxSuccess) e = r;
    if (e == flagcxSuccess) flagcxCommGetAsyncError(comm, &e);
  }
  finalError = e;
  if (e != flagcxSuccess) finalMessage = resultText("the operation", e, comm);
  if (stream) {
#ifdef FLAGCX_TORCH_CUDA
    if (cuda) devHandle()->streamFree(stream);  // wraps torch's stream
    else
#endif
      devHandle()->streamDestroy(stream);
    stream = nullptr;
  }
  // A communicator whose peer failed may not be able to finish collectively.
  if (e != flagcxSuccess) flagcxCommAbort(comm);
  else flagcxCommDestroy(comm);
  comm = nullptr;
}

Channel::~Channel() { close(); }

// ---------------------------------------------------------------- Batch

void Batch::complete() {
  std::lock_guard<std::mutex> g(mu);
  if (done.load(std::memory_order_acquire)) return;
  TORCH_CHECK(enqueued.load(std::memory_order_acquire),
              "flagcx: waiting for an operation of a coalesced batch that has not been issued ",
              "yet: it runs when the coalescing block ends (wait after the block)");
  if (event) {
    flagcxResult_t r = devHandle()->eventSynchronize(event);
    if (r != flagcxSuccess && !error)
      error = std::make_exception_ptr(std::runtime_error(resultText("eventSynchronize", r, nullptr)));
  }
#ifdef FLAGCX_TORCH_CUDA
  if (cudaEvent && hostSync) cudaEvent->synchronize();
#endif
  if (ch && !error) {
    std::string msg;
    if (ch->asyncError(&msg) != flagcxSuccess)
      error = std::make_exception_ptr(std::runtime_error(msg));
  }
  if (event) {
    devHandle()->eventDestroy(event);
    event = nullptr;
  }
  ops.clear();
  ch.reset();
  done.store(true, std::memory_order_release);
}

bool Batch::query() {
  if (done.load(std::memory_order_acquire)) return true;
  if (!enqueued.load(std::memory_order_acquire)) return false;
#ifdef FLAGCX_TORCH_CUDA
  if (cudaEvent && !event) {
    if (!cudaEvent->query()) return false;
    complete();
    return true;
  }
#endif
  adopt();
  return false;
}

void Batch::adopt() {
  // Never blocks (is_completed() polls through here while the batch runs).
  if (done.load(std::memory_order_acquire) || adopted.exchange(true)) return;
  std::shared_ptr<Engine> e = engine.lock();
  // No engine: the group is gone and closing its channel ran everything.
  if (e) e->push(shared_from_this(), c10::intrusive_ptr<WorkFlagcx>());
}

Batch::~Batch() {
  if (event) devHandle()->eventDestroy(event);
}

// ---------------------------------------------------------------- Engine

void Engine::push(std::shared_ptr<Batch> b, c10::intrusive_ptr<WorkFlagcx> w) {
  if (!b && !w) return;
  {
    std::unique_lock<std::mutex> g(mu_);
    if (stop_) {
      // Stopping: nobody will pick it up, so settle it here.
      g.unlock();
      if (!b) b = w->batch();
      b->complete();
      if (w) w->settle();
      return;
    }
    if (!started_) {
      started_ = true;
      thread_ = std::thread([this] { loop(); });
    }
    q_.emplace_back(std::move(b), std::move(w));
  }
  cv_.notify_one();
}

void Engine::loop() {
  for (;;) {
    std::pair<std::shared_ptr<Batch>, c10::intrusive_ptr<WorkFlagcx>> item;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [this] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stop_ and nothing left
      item = std::move(q_.front());
      q_.pop_front();
    }
    std::shared_ptr<Batch> b = item.first;
    if (!b && item.second) b = item.second->batch();
    try {
      if (b) b->complete();
      if (item.second) item.second->settle();  // runs the future's callbacks
    } catch (const std::exception &e) {
      TORCH_WARN("flagcx: completing an operation failed: ", e.what());
    }
  }
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

Engine::~Engine() { stop(); }

// ---------------------------------------------------------------- Work

WorkFlagcx::WorkFlagcx(int rank, c10d::OpType type, std::shared_ptr<Batch> batch,
                       std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type), batch_(std::move(batch)), outputs_(std::move(outputs)) {}

WorkFlagcx::~WorkFlagcx() {
  // Given up before completion: somebody must still drive it (host streams
  // run queued work lazily), and its tensors must stay alive until then.
  if (batch_ && !batch_->done.load(std::memory_order_acquire) && batch_.use_count() == 1)
    batch_->adopt();
}

void WorkFlagcx::settle() {
  if (settled_.exchange(true)) return;
  std::exception_ptr err = batch_->error;
  finish(err);
  std::lock_guard<std::mutex> g(futMu_);
  if (future_ && !future_->completed()) {
    if (err) future_->setError(err);
    else future_->markCompleted(c10::IValue(outputs_));
  }
}

bool WorkFlagcx::isCompleted() {
  if (!batch_->query()) return false;
  settle();
  return true;
}

std::vector<at::Tensor> WorkFlagcx::result() { return outputs_; }

void WorkFlagcx::synchronize() {
#ifdef FLAGCX_TORCH_CUDA
  if (batch_->cudaEvent && !batch_->hostSync) {
    // CUDA work: the caller's current stream waits for it; the host does not.
    if (!batch_->done.load(std::memory_order_acquire)) {
      auto cur = at::cuda::getCurrentCUDAStream(batch_->cudaEvent->device_index());
      batch_->cudaEvent->block(cur);
    }
    std::string msg;
    std::shared_ptr<Channel> ch;
    {
      std::lock_guard<std::mutex> g(batch_->mu);
      ch = batch_->ch;
    }
    if (ch && ch->asyncError(&msg) != flagcxSuccess) TORCH_CHECK(false, msg);
    return;
  }
#endif
  batch_->complete();
  settle();
  if (batch_->error) std::rethrow_exception(batch_->error);
}

bool WorkFlagcx::wait(std::chrono::milliseconds timeout) {
  if (timeout != kWaitForever && !batch_->done.load(std::memory_order_acquire)) {
    // A bounded wait: let the engine drive the batch and watch the clock.
    batch_->adopt();
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!batch_->done.load(std::memory_order_acquire)) {
      TORCH_CHECK(std::chrono::steady_clock::now() < deadline, "flagcx: wait timed out after ",
                  timeout.count(), " ms (the operation keeps running)");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  synchronize();
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkFlagcx::getFuture() {
  TORCH_CHECK(batch_->enqueued.load(std::memory_order_acquire),
              "flagcx: the future of an operation of a coalesced batch that has not been ",
              "issued yet: ask for it after the coalescing block");
  std::lock_guard<std::mutex> g(futMu_);
  if (future_) return future_;
  std::vector<c10::Device> devices;
#ifdef FLAGCX_TORCH_CUDA
  if (batch_->cudaEvent && !batch_->hostSync) {
    // As NCCL's process group: the future is complete once the work is
    // enqueued; users of its value wait on the internal stream's event.
    devices.emplace_back(c10::DeviceType::CUDA, batch_->cudaEvent->device_index());
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                      devices);
    // Completed "on" the internal stream: the future records its own event
    // there, and whoever uses the value waits for that event.
    c10::cuda::CUDAStreamGuard guard(*batch_->cudaStream);
    future_->markCompleted(c10::IValue(outputs_));
    return future_;
  }
#endif
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  if (batch_->done.load(std::memory_order_acquire)) {
    if (batch_->error) future_->setError(batch_->error);
    else future_->markCompleted(c10::IValue(outputs_));
    return future_;
  }
  auto e = batch_->engine.lock();
  if (!e) {
    // The group is gone; its channel ran everything when it closed.
    batch_->complete();
    if (batch_->error) future_->setError(batch_->error);
    else future_->markCompleted(c10::IValue(outputs_));
    return future_;
  }
  e->push(std::shared_ptr<Batch>(), c10::intrusive_ptr<WorkFlagcx>::reclaim_copy(this));
  return future_;
}

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
  flagcxResult_t r = flagcxCommInitRank(&ch->comm, getSize(), &id, getRank());
  if (r != flagcxSuccess) {
    ch->comm = nullptr;
    fail("flagcxCommInitRank", r, nullptr);
  }
#ifdef FLAGCX_TORCH_CUDA
  if (cuda) {
    ch->torchStream = c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(device));
    r = devHandle()->streamCopy(&ch->stream, static_cast<void *>(ch->torchStream->stream()));
    if (r != flagcxSuccess) fail("streamCopy", r, ch->comm);
    return ch;
  }
#endif
  r = devHandle()->streamCreate(&ch->stream);
  if (r != flagcxSuccess) fail("streamCreate", r, ch->comm);
  return ch;
}

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
    b.cudaEvent = std::make_shared<at::cuda::CUDAEvent>(cudaEventDisableTiming);
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
    at::cuda::CUDAEvent ready(cudaEventDisableTiming);
    ready.record(at::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(ch->device)));
    ready.block(*ch->torchStream);
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

// ---------------------------------------------------------------- operations

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

namespace {
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
}  // namespace

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

namespace {
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
}  // namespace

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

namespace {
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
}  // namespace

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

namespace {
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
}  // namespace

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
