// ProcessGroupFlagcx: the torch.distributed backend "flagcx".
//
// One source for two torch generations: torch 1.x registers third-party
// backends as c10d::ProcessGroup subclasses, torch 2.x as c10d::Backend
// subclasses that a ProcessGroup dispatches to per device type.  Only the
// public flagcx API (flagcx.h) is used.
//
// Execution model:
//  - CPU tensors in a process whose flagcx device is the host: every
//    operation is enqueued on the channel's host stream (it returns at once)
//    and an event is recorded after it.  Work::wait synchronizes that event,
//    which runs the operation on the waiting thread when nobody else is
//    running the stream; a completion thread drives operations whose Work
//    was given up, polled or turned into a future.
//  - CUDA tensors (torch with CUDA only): an internal CUDA stream per device,
//    ordered after the caller's current stream by an event; Work::wait makes
//    the caller's stream wait for the operation (as NCCL's process group
//    does).  CPU tensors in a process whose flagcx device is CUDA are staged
//    through device memory and complete before the call returns.
//  - Errors: immediate failures raise at the call; failures found while the
//    operation runs become the Work's exception (and the future's error),
//    both carrying flagcx's own message.
#pragma once

#include <torch/version.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#ifdef FLAGCX_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <flagcx.h>

// Coalescing entry points changed shape between the generations.
#if TORCH_VERSION_MAJOR >= 2 && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 1)
#define FLAGCX_TORCH_COALESCING_V2 1
#endif
// Backend::shrink (torch.distributed.shrink_group) exists from torch 2.10.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)
#define FLAGCX_TORCH_SHRINK 1
#endif

namespace flagcx_torch {

// Work::wait's "no limit" (torch's own constant moved between releases).
constexpr std::chrono::milliseconds kWaitForever{0};

#if TORCH_VERSION_MAJOR >= 2
using PgBase = c10d::Backend;
#else
using PgBase = c10d::ProcessGroup;
#endif

// One communicator and the stream its operations are ordered on.  Shared by
// the process group and every batch still in flight on it, so that a Work
// that outlives its group never touches a destroyed communicator.
struct Channel {
  int device = -1;  // CUDA device index, or -1 for the host
  bool cuda = false;
  int seq = 0;      // the group's count of channels when this one was made
  flagcxComm_t comm = nullptr;
  flagcxStream_t stream = nullptr;
#ifdef FLAGCX_TORCH_CUDA
  std::optional<c10::cuda::CUDAStream> torchStream;
  // Per-call CUDA events cost a create and a destroy each (about a
  // microsecond apiece at one rank, where a call moves no data): the
  // "caller's stream is ready" event is one per channel, recorded and
  // waited under readyMu, and end events come from a small pool.
  std::mutex readyMu;
  std::optional<at::cuda::CUDAEvent> readyEvent;
  struct EventPool {
    std::mutex mu;
    std::vector<std::unique_ptr<at::cuda::CUDAEvent>> free;
  };
  std::shared_ptr<EventPool> events = std::make_shared<EventPool>();
  // An end event from the pool; it goes back there when the last owner
  // lets go (re-recording an event still pending is allowed by CUDA).
  std::shared_ptr<at::cuda::CUDAEvent> takeEvent();
#endif
  std::mutex mu;            // guards comm against close()
  bool closed = false;
  flagcxResult_t finalError = flagcxSuccess;
  std::string finalMessage;

  // The communicator's asynchronous error, with flagcx's message; success
  // and an empty message when none.
  flagcxResult_t asyncError(std::string *message);
  // Waits for everything queued, then destroys stream and communicator.
  void close();
  ~Channel();
};

// One operation: what runs before it (inputs into staging buffers), the
// flagcx call(s), and what runs after (staging buffers into outputs).  Each
// step enqueues on the stream it is given.
using Step = std::function<flagcxResult_t(flagcxComm_t, flagcxStream_t)>;
struct Op {
  const char *name = "";
  Step pre, core, post;
  std::vector<at::Tensor> keep;  // every tensor the steps touch
  bool hostSync = false;         // wait() blocks the host even for CUDA work
};

class Engine;

// What one or more Work objects wait for: the operations enqueued together
// and the event recorded after them.
struct Batch : std::enable_shared_from_this<Batch> {
  std::shared_ptr<Channel> ch;
  std::vector<Op> ops;
  flagcxEvent_t event = nullptr;  // host streams
#ifdef FLAGCX_TORCH_CUDA
  std::shared_ptr<at::cuda::CUDAEvent> cudaEvent;
  std::optional<c10::cuda::CUDAStream> cudaStream;  // the stream it ran on
  // CPU tensors staged through the GPU: (caller's tensor, device copy).
  std::vector<std::pair<at::Tensor, at::Tensor>> stagedBack;
#endif
  bool hostSync = false;
  std::weak_ptr<Engine> engine;

  std::mutex mu;
  std::atomic<bool> enqueued{false};  // false while a coalescing block collects it
  std::atomic<bool> done{false};
  std::exception_ptr error;
  std::atomic<bool> adopted{false};  // handed to the engine's thread once

  // Blocks until the batch has run (host) or its event has been reached
  // (CUDA, host-sync batches); records the error, if any.  Idempotent.
  void complete();
  // Non-blocking: true when the batch has finished (CUDA: event reached).
  bool query();
  // Makes sure somebody drives the batch to completion (host streams run
  // work lazily): hands it to the engine's thread once.
  void adopt();
  ~Batch();
};

class WorkFlagcx;

// The completion thread of a process group: drives given-up batches and
// completes the futures of works.  Started on first use.
class Engine : public std::enable_shared_from_this<Engine> {
 public:
  void push(std::shared_ptr<Batch> b, c10::intrusive_ptr<WorkFlagcx> w);
  void stop();
  ~Engine();

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Batch>, c10::intrusive_ptr<WorkFlagcx>>> q_;
  bool stop_ = false;
  bool started_ = false;
  std::thread thread_;
};

class WorkFlagcx : public c10d::Work {
 public:
  WorkFlagcx(int rank, c10d::OpType type, std::shared_ptr<Batch> batch,
             std::vector<at::Tensor> outputs);
  ~WorkFlagcx() override;

  bool isCompleted() override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout = kWaitForever) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Called once the batch is complete: finishes the Work and its future.
  void settle();
  const std::shared_ptr<Batch> &batch() const { return batch_; }

 private:
  std::shared_ptr<Batch> batch_;
  std::vector<at::Tensor> outputs_;
  std::mutex futMu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<bool> settled_{false};
};

class ProcessGroupFlagcx : public PgBase {
 public:
  ProcessGroupFlagcx(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupFlagcx() override;

  const std::string getBackendName() const override { return "flagcx"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts =
                                               c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts =
                                               c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor> &tensors,
      const c10d::AllreduceCoalescedOptions &opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                        const c10d::ReduceOptions &opts =
                                            c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &opts =
                                               c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                 const c10d::AllgatherOptions &opts =
                                                     c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>> &outputLists, std::vector<at::Tensor> &inputs,
      const c10d::AllgatherOptions &opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs,
                                        const c10d::GatherOptions &opts =
                                            c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                         std::vector<std::vector<at::Tensor>> &inputs,
                                         const c10d::ScatterOptions &opts =
                                             c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts =
                                                    c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor &output, at::Tensor &input,
      const c10d::ReduceScatterOptions &opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                               std::vector<int64_t> &outputSplits,
                                               std::vector<int64_t> &inputSplits,
                                               const c10d::AllToAllOptions &opts =
                                                   c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::AllToAllOptions &opts =
                                              c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts =
                                             c10d::BarrierOptions()) override;

#if TORCH_VERSION_MAJOR >= 2
#ifdef FLAGCX_TORCH_COALESCING_V2
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
      const c10d::AllgatherOptions &opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
      const c10d::ReduceScatterOptions &opts = c10d::ReduceScatterOptions()) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
#endif
  // Declared without `override`: only newer 2.x releases have it.
  virtual bool supportsCoalescing() const { return true; }
#else
  void startCoalescing() override;
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>> &reqs) override;
#endif

  // A group of the survivors: every channel's communicator shrunk by
  // flagcxCommShrink (flags: 0 or FLAGCX_SHRINK_ABORT), in the order the
  // channels were made, the same on every survivor; new ranks are the
  // survivors in this group's order.  Called by the survivors only.
  c10::intrusive_ptr<ProcessGroupFlagcx> shrinkGroup(const std::vector<int64_t> &exclude,
                                                     int flags);
#ifdef FLAGCX_TORCH_SHRINK
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(
      const std::vector<int64_t> &ranks_to_exclude, int shrink_flags = 0,
      const c10::intrusive_ptr<Options> &opts_override = nullptr) override;
#endif

  // Test hook: the flagcx device this process drives ("host" or a vendor).
  static std::string deviceName();

 private:
  using Builder = std::function<Op(const std::vector<at::Tensor> &)>;
  // Checks the tensors share one device, finds (or creates) its channel,
  // stages CPU tensors through a CUDA device where needed, builds the op on
  // the tensors it will really use and enqueues it (or queues it while
  // coalescing).  `written` flags the tensors the op writes.
  c10::intrusive_ptr<c10d::Work> issue(c10d::OpType type, const char *name,
                                       std::vector<at::Tensor> tensors,
                                       std::vector<bool> written,
                                       std::vector<at::Tensor> outputs, const Builder &build,
                                       bool hostSync = false);
  std::shared_ptr<Channel> channelFor(const c10::Device &device);
  std::shared_ptr<Channel> createChannel(int device, bool cuda);
  // The stream a new channel's operations are ordered on.
  void attachStream(Channel &ch);
  void enqueue(Batch &batch);
  std::shared_ptr<Engine> engine();
  [[noreturn]] void fail(const char *op, flagcxResult_t r, flagcxComm_t comm) const;

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;  // channels_ and engine_
  std::map<int, std::shared_ptr<Channel>> channels_;
  int commCount_ = 0;
  int shrinkCount_ = 0;  // groups shrunk from this one (their stores' prefix)
  std::shared_ptr<Engine> engine_;

  bool coalescing_ = false;
  std::shared_ptr<Batch> coalesced_;
  std::vector<c10::intrusive_ptr<WorkFlagcx>> coalescedWorks_;
};

}  // namespace flagcx_torch
