// Channel (communicator + stream), Batch (what Works wait for), Engine (the
// completion thread) and WorkFlagcx.  See process_group_flagcx.hpp.
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

#ifdef FLAGCX_TORCH_CUDA
std::shared_ptr<at::cuda::CUDAEvent> Channel::takeEvent() {
  constexpr size_t kKeep = 64;  // more than this many in flight: plain new/delete
  std::unique_ptr<at::cuda::CUDAEvent> e;
  {
    std::lock_guard<std::mutex> g(events->mu);
    if (!events->free.empty()) {
      e = std::move(events->free.back());
      events->free.pop_back();
    }
  }
  if (!e) e = std::make_unique<at::cuda::CUDAEvent>(cudaEventDisableTiming);
  std::weak_ptr<EventPool> pool = events;
  return std::shared_ptr<at::cuda::CUDAEvent>(e.release(), [pool](at::cuda::CUDAEvent *ev) {
    std::unique_ptr<at::cuda::CUDAEvent> own(ev);
    if (auto p = pool.lock()) {
      std::lock_guard<std::mutex> g(p->mu);
      if (p->free.size() < kKeep) p->free.push_back(std::move(own));
    }
  });
}
#endif

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
  if (!batch_ || batch_->done.load(std::memory_order_acquire) || batch_.use_count() != 1) return;
#ifdef FLAGCX_TORCH_CUDA
  // CUDA work needs no driver: it is queued on the internal stream, and the
  // caching allocator keeps its tensors' memory until that stream is past
  // it (recordStream at issue).  Handing it to the engine's thread only to
  // let go of it cost a thread wake-up per call.
  if (batch_->cudaEvent && !batch_->hostSync && batch_->stagedBack.empty()) return;
#endif
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

}  // namespace flagcx_torch
