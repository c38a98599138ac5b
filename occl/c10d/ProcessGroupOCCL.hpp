// ProcessGroupOCCL: the c10d backend "occl" for device openreg.
//
// This is the glue a vendor keeps (renaming occl* to their library's calls):
// it turns c10d's Backend API into liboccl calls enqueued on the process
// group's own stream, and gives back Work objects with c10d's async
// semantics. Modelled on ProcessGroupNCCL, much smaller.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <occl.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

namespace torch_openreg {

class ProcessGroupOCCL;
class WorkOCCL;

// What a process group and its Work objects share: the communicator (NULL
// once aborted or shut down), the OCCL stream, and the thread that completes
// futures in order. Works hold this, not the process group, so a Work may
// outlive its group.
struct OcclShared {
  std::mutex mu;
  occlComm_t comm = nullptr;
  std::optional<c10::Stream> stream;

  std::thread thread;
  std::mutex wd_mu;
  std::condition_variable wd_cv;
  std::deque<c10::intrusive_ptr<WorkOCCL>> queue;
  bool stop = false;

  void watch(c10::intrusive_ptr<WorkOCCL> work);
  void loop();
  void stop_and_join();
  // Takes the communicator away from everyone, then aborts or destroys it.
  void release(bool abort);
};

class WorkOCCL : public c10d::Work {
 public:
  WorkOCCL(std::shared_ptr<OcclShared> sh, int rank, c10d::OpType type, uint64_t seq,
           const char* title, std::vector<at::Tensor> outputs,
           std::optional<std::vector<at::Tensor>> inputs);
  ~WorkOCCL() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override { return seq_; }
  float getDuration() const override;

 private:
  friend class ProcessGroupOCCL;
  friend struct OcclShared;
  // Reads the result of the liboccl operation once the end event completed.
  void finish();
  void block_current_stream();

  std::shared_ptr<OcclShared> sh_;
  uint64_t seq_;        // c10d sequence number of this group
  uint64_t occl_seq_ = 0;  // liboccl's sequence number of the last operation
  std::string name_;    // "allreduce", ...
  c10::Device device_;
  orEvent_t start_ = nullptr, end_ = nullptr;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_alive_;  // inputs and temporaries
  // (strided output, contiguous temporary) pairs copied back on completion
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back_;
  std::shared_ptr<int> source_ = std::make_shared<int>(-1);

  // Enqueued while the caller's stream captured a graph: liboccl recorded
  // the operation into the graph, so there is nothing for the host to wait
  // for or to watch; consumers wait on the stream (end_), in the graph.
  bool captured_ = false;

  mutable std::mutex mu_;
  bool done_ = false;
  bool copied_back_ = false;
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupOCCL : public c10d::Backend {
 public:
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout = ::kBackendDefaultTimeout)
        : c10d::Backend::Options("occl", timeout) {}
  };

  ProcessGroupOCCL(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                   c10::intrusive_ptr<Options> options);
  ~ProcessGroupOCCL() override;

  const std::string getBackendName() const override { return "occl"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override { return options_; }
  bool supportsCoalescing() const override { return true; }
  void setTimeout(std::chrono::milliseconds timeout) override;
  void eagerConnectSingleDevice(at::Device device) override;
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  void setSequenceNumberForGroup() override {}
  c10d::ErrorType getError() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void abort() override;
  void shutdown() override;
  // dist.split_group: a sub-communicator made by occlCommSplit of this one.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts)
      override;

  // For tests and docs: how this rank reaches its peers, the OCCL stream.
  std::string transport();
  c10::Stream occlStream();

 private:
  friend class WorkOCCL;
  struct Launch;  // one operation being enqueued
  occlComm_t comm_for(const at::Device& device);
  c10::intrusive_ptr<WorkOCCL> run(c10d::OpType type, const char* name, at::Device device,
                                   std::vector<at::Tensor> outputs,
                                   std::vector<at::Tensor> inputs,
                                   const std::function<occlResult_t(occlComm_t, orStream_t)>& fn,
                                   std::vector<std::pair<at::Tensor, at::Tensor>> copy_back = {});
  // The *_coalesced operations: `one(i)` runs operation i of `n`; the
  // returned Work completes with the last of them, reports `outputs`, and
  // the group spends one sequence number on the whole set.
  c10::intrusive_ptr<c10d::Work> coalesce(
      const char* name, size_t n, std::vector<at::Tensor> outputs,
      const std::function<c10::intrusive_ptr<c10d::Work>(size_t)>& one);
  void teardown(bool abort);

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<Options> options_;
  std::shared_ptr<OcclShared> sh_ = std::make_shared<OcclShared>();
  std::optional<at::Device> device_;
  uint64_t seq_ = 0;

  // Coalescing (startCoalescing .. endCoalescing)
  bool coalescing_ = false;
  std::vector<at::Tensor> coalesced_outputs_;
  std::vector<at::Tensor> coalesced_inputs_;
  std::optional<at::Device> coalesced_device_;
  bool coalesced_any_ = false;
};

}  // namespace torch_openreg
