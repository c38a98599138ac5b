// ProcessGroupOCCL: c10d's Backend API on top of liboccl (see the header).
// This file: the group itself (its communicator, created lazily, its stream,
// split, run() which every collective goes through, coalescing, teardown).
// The collectives' entry points: Collectives.cpp; Work: WorkOCCL.cpp.
#include "Conversions.hpp"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "runtime/OpenRegFunctions.h"
#include "runtime/OpenRegStream.h"

#include <chrono>
#include <cstdio>

namespace torch_openreg {

namespace {

class StoreAdapter : public occlStore {
 public:
  explicit StoreAdapter(c10::intrusive_ptr<c10d::Store> s) : store_(std::move(s)) {}
  void set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::string get(const std::string& key) override {
    auto v = store_->get(key);
    return std::string(v.begin(), v.end());
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace

// ------------------------------------------------------------ ProcessGroupOCCL
ProcessGroupOCCL::ProcessGroupOCCL(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                   c10::intrusive_ptr<Options> options)
    : c10d::Backend(rank, size), store_(std::move(store)), options_(std::move(options)) {
  // Checked here, not at the first collective: a null store crashed there,
  // and a bad rank or size failed only then, inside occlCommInitRank.
  TORCH_CHECK_TYPE(store_, "ProcessGroupOCCL: store must be a torch.distributed.Store, got None");
  TORCH_CHECK_VALUE(size >= 1, "ProcessGroupOCCL: size must be at least 1, got ", size);
  TORCH_CHECK_VALUE(rank >= 0 && rank < size, "ProcessGroupOCCL: rank must be in [0, size) = [0, ",
                    size, "), got ", rank);
  TORCH_CHECK_TYPE(options_, "ProcessGroupOCCL: options must not be None");
  options_->timeout = checked_timeout(options_->timeout);
}

ProcessGroupOCCL::~ProcessGroupOCCL() { teardown(false); }

void ProcessGroupOCCL::setTimeout(std::chrono::milliseconds timeout) {
  options_->timeout = checked_timeout(timeout);
}

void ProcessGroupOCCL::eagerConnectSingleDevice(at::Device device) { comm_for(device); }

c10d::ErrorType ProcessGroupOCCL::getError() {
  std::lock_guard<std::mutex> g(sh_->mu);
  if (!sh_->comm) return c10d::ErrorType::SUCCESS;
  occlResult_t r;
  occlCommGetAsyncError(sh_->comm, &r);
  if (r == occlSuccess) return c10d::ErrorType::SUCCESS;
  if (r == occlTimeout) return c10d::ErrorType::TIMEOUT;
  if (r == occlRemoteError) return c10d::ErrorType::REMOTE_ERROR;
  return c10d::ErrorType::COMM_ERROR;
}

occlComm_t ProcessGroupOCCL::comm_for(const at::Device& device) {
  std::lock_guard<std::mutex> g(sh_->mu);
  if (device_) {
    TORCH_CHECK(*device_ == device, "OCCL: this process group uses ", *device_,
                " on this rank; got a tensor on ", device);
    TORCH_CHECK(sh_->comm, "OCCL: the process group was aborted or shut down");
    return sh_->comm;
  }
  check_device_index(device.index());
  // Created lazily, at the first collective, as NCCL communicators are: the
  // device is known only then (unless init_process_group got device_id).
  StoreAdapter store(store_);
  const std::string name = options_->group_name.empty() ? "pg" : options_->group_name;
  occlConfig_t cfg{device.index(), int64_t(options_->timeout.count()), name.c_str()};
  occlComm_t comm = nullptr;
  occlResult_t r = occlCommInitRank(&comm, getSize(), getRank(), &store, &cfg);
  if (r != occlSuccess)
    throw_dist(c10::str("OCCL: creating the communicator of rank ", getRank(), " failed: ",
                        occlGetLastError()));
  sh_->comm = comm;
  device_ = device;
  // [docs:occl-stream]
  // One stream per process group, as ProcessGroupNCCL has: collectives run
  // there, ordered after the caller's stream and before whatever waits on
  // their Work.
  sh_->stream = getNewStream(device.index(), 0);
  // [docs:occl-stream:end]
  return comm;
}

// [docs:occl-split-glue]
// dist.split_group: every rank of this group calls split() with the ranks of
// its own new group (sorted, disjoint from the other new groups), or with a
// group it is not in. The smallest rank names the group (the color), the
// position in it is the new rank (the key); liboccl splits the communicator
// without the store, and the new process group starts with it.
c10::intrusive_ptr<c10d::Backend> ProcessGroupOCCL::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  const auto it = std::find(ranks.begin(), ranks.end(), getRank());
  const bool member = it != ranks.end();
  const int color = member ? *std::min_element(ranks.begin(), ranks.end()) : OCCL_SPLIT_NOCOLOR;
  const int key = member ? int(it - ranks.begin()) : 0;
  const at::Device device =
      device_ ? *device_ : at::Device(c10::DeviceType::PrivateUse1, current_device());
  occlComm_t parent = comm_for(device);
  auto new_opts =
      c10::make_intrusive<Options>(checked_timeout(opts ? opts->timeout : options_->timeout));
  new_opts->group_name = opts ? opts->group_name : options_->group_name;
  const std::string name = new_opts->group_name.empty() ? "split" : new_opts->group_name;
  occlConfig_t cfg{device.index(), int64_t(new_opts->timeout.count()), name.c_str()};
  occlComm_t comm = nullptr;
  if (occlCommSplit(parent, color, key, &comm, &cfg) != occlSuccess)
    throw_dist(c10::str("OCCL: splitting the communicator on rank ", getRank(), " failed: ",
                        occlGetLastError()));
  if (!member) return nullptr;
  auto pg = c10::make_intrusive<ProcessGroupOCCL>(store, key, int(ranks.size()), new_opts);
  pg->sh_->comm = comm;
  pg->device_ = device;
  pg->sh_->stream = getNewStream(device.index(), 0);
  return pg;
}
// [docs:occl-split-glue:end]

// [docs:occl-run]
// Every collective: order the OCCL stream after the caller's stream, protect
// the tensors from reuse until the OCCL stream is done with them
// (record_stream), enqueue liboccl's work, bracket it with events.
c10::intrusive_ptr<WorkOCCL> ProcessGroupOCCL::run(
    c10d::OpType type, const char* name, at::Device device, std::vector<at::Tensor> outputs,
    std::vector<at::Tensor> inputs, const std::function<occlResult_t(occlComm_t, orStream_t)>& fn,
    std::vector<std::pair<at::Tensor, at::Tensor>> copy_back) {
  occlComm_t comm = comm_for(device);
  c10::DeviceGuard device_guard(device);
  const c10::Stream occl_stream = *sh_->stream;
  orStream_t os = nativeStream(occl_stream);
  orStream_t cur = currentNativeStream(device.index());

  // The OCCL stream stays part of a capture that forked it until that
  // capture ends: a collective from outside the capture (another thread,
  // another stream) would be recorded into it, or run beside its replays.
  orStreamCaptureStatus cur_status = orStreamCaptureStatusNone, os_status = cur_status;
  unsigned long long cur_capture = 0, os_capture = 0;
  or_check(orStreamGetCaptureInfo(cur, &cur_status, &cur_capture), "orStreamGetCaptureInfo");
  or_check(orStreamGetCaptureInfo(os, &os_status, &os_capture), "orStreamGetCaptureInfo");
  TORCH_CHECK(os_status == orStreamCaptureStatusNone ||
                  (cur_status != orStreamCaptureStatusNone && cur_capture == os_capture),
              "OCCL ", name, " on rank ", getRank(), ": the process group's collectives are being "
              "captured into a graph (capture ", os_capture, ") by another thread or stream; "
              "the group cannot be used outside that capture until it ends");

  orEvent_t ready;
  or_check(orEventCreateWithFlags(&ready, orEventDisableTiming), "orEventCreateWithFlags");
  or_check(orEventRecord(ready, cur), "orEventRecord");
  or_check(orStreamWaitEvent(os, ready, 0), "orStreamWaitEvent");
  orEventDestroy(ready);
  for (auto* list : {&inputs, &outputs})
    for (auto& t : *list)
      if (t.defined() && t.storage()) t.record_stream(occl_stream);

  // [docs:occl-run-capture]
  // On a capturing stream (the OCCL stream joined the caller's capture
  // through `ready`), liboccl records the operation into the graph: the Work
  // is complete for the host at once and nothing watches it (as NCCL, HCCL
  // and XCCL skip work enqueue and their watchdog while capturing).
  const bool captured = cur_status != orStreamCaptureStatusNone;  // (checked above)
  auto work = c10::make_intrusive<WorkOCCL>(
      sh_, getRank(), type, ++seq_, name,
      outputs, inputs);
  work->device_ = device;
  work->captured_ = work->done_ = captured;
  // (A capture records no timing: getDuration() then fails, as on CUDA.)
  const unsigned event_flags = captured ? orEventDisableTiming : 0;
  or_check(orEventCreateWithFlags(&work->start_, event_flags), "orEventCreate");
  or_check(orEventCreateWithFlags(&work->end_, event_flags), "orEventCreate");
  // [docs:occl-run-capture:end]
  or_check(orEventRecord(work->start_, os), "orEventRecord");
  occlResult_t r = fn(comm, os);
  if (r != occlSuccess) {
    orEventRecord(work->end_, os);
    TORCH_CHECK(false, "OCCL ", name, " (seq ", work->seq_, "): ", occlGetLastError());
  }
  // Results that land in a temporary are copied into place on the OCCL
  // stream, after the collective.
  for (auto& [dst, src] : copy_back) {
    if (dst.is_contiguous() && dst.scalar_type() == src.scalar_type() && dst.numel() == src.numel()) {
      if (dst.nbytes())
        or_check(orMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                               orMemcpyDeviceToDevice, os), "orMemcpyAsync");
    } else {
      c10::StreamGuard sg(occl_stream);
      dst.copy_(src.view(dst.sizes()));
    }
    work->keep_alive_.push_back(src);
  }
  or_check(orEventRecord(work->end_, os), "orEventRecord");
  work->occl_seq_ = occlCommLastSeq(comm);
  if (coalescing_) {
    coalesced_any_ = true;
    coalesced_device_ = device;
    coalesced_outputs_.insert(coalesced_outputs_.end(), outputs.begin(), outputs.end());
  }
  if (debug())
    fprintf(stderr, "[occl rank %d] enqueued %s seq %llu\n", getRank(), name,
            (unsigned long long)work->seq_);
  return work;
}
// [docs:occl-run:end]

// [docs:occl-coalescing]
// Between startCoalescing and endCoalescing (torch's _coalescing_manager,
// batch_isend_irecv), sends and receives go into one liboccl group, which
// progresses them together, and the whole batch gets one Work.
void ProcessGroupOCCL::startCoalescing() {
  TORCH_CHECK(!coalescing_, "OCCL: already coalescing");
  coalescing_ = true;
  coalesced_any_ = false;
  coalesced_outputs_.clear();
  occlGroupStart();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::endCoalescing() {
  TORCH_CHECK(coalescing_, "OCCL: endCoalescing without startCoalescing");
  coalescing_ = false;
  at::Device device = coalesced_device_ ? *coalesced_device_
                                        : at::Device(c10::DeviceType::PrivateUse1, current_device());
  std::vector<at::Tensor> outs;
  outs.swap(coalesced_outputs_);
  // The group's work is enqueued by occlGroupEnd; bracket it like any other.
  return run(c10d::OpType::COALESCED, "coalesced", device, outs, {},
             [&](occlComm_t, orStream_t) { return occlGroupEnd(); });
}
// [docs:occl-coalescing:end]

// ------------------------------------------------------------ teardown
void ProcessGroupOCCL::teardown(bool abort) {
  if (abort) {
    // Fails the running operation and every queued one at once, so the
    // watchdog's pending events complete.
    sh_->release(true);
    sh_->stop_and_join();
  } else {
    sh_->stop_and_join();  // drains: every pending future completes
    sh_->release(false);
  }
}

void ProcessGroupOCCL::abort() { teardown(true); }

void ProcessGroupOCCL::shutdown() { teardown(false); }

std::string ProcessGroupOCCL::transport() {
  std::lock_guard<std::mutex> g(sh_->mu);
  return sh_->comm ? occlCommTransport(sh_->comm) : "";
}

c10::Stream ProcessGroupOCCL::occlStream() {
  TORCH_CHECK(sh_->stream, "OCCL: no collective has run yet");
  return *sh_->stream;
}

}  // namespace torch_openreg
