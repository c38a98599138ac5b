// Work for ProcessGroupOCCL: a collective's completion (its events on the
// OCCL stream and liboccl's sequence number), wait() with the group's
// timeout, and futures completed in order by one watcher thread per group
// (OcclShared), which is also where the communicator is released.
#include "Conversions.hpp"

#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>

#include "runtime/OpenRegFunctions.h"
#include "runtime/OpenRegStream.h"

#include <thread>

namespace torch_openreg {

// ------------------------------------------------------------ WorkOCCL
WorkOCCL::WorkOCCL(std::shared_ptr<OcclShared> sh, int rank, c10d::OpType type,
                   uint64_t seq, const char* title, std::vector<at::Tensor> outputs,
                   std::optional<std::vector<at::Tensor>> inputs)
    : c10d::Work(rank, type, nullptr, inputs),
      sh_(std::move(sh)),
      seq_(seq),
      name_(title),
      device_(c10::DeviceType::PrivateUse1, 0),
      outputs_(std::move(outputs)) {}

WorkOCCL::~WorkOCCL() {
  if (start_) orEventDestroy(start_);
  if (end_) orEventDestroy(end_);
}

void WorkOCCL::finish() {
  std::lock_guard<std::mutex> g(mu_);
  if (done_) return;
  std::string msg;
  {
    std::lock_guard<std::mutex> pg(sh_->mu);
    if (!sh_->comm) {
      msg = "the process group was aborted or shut down";
    } else {
      occlResult_t r = occlCommQuerySeq(sh_->comm, occl_seq_);
      if (r == occlInProgress) return;  // not yet
      if (r != occlSuccess) msg = occlCommGetErrorMessage(sh_->comm);
    }
  }
  if (!msg.empty()) {
    error_ = make_dist_error(c10::str("OCCL ", name_, " (seq ", seq_, ") on rank ", rank_,
                                      " failed: ", msg));
  }
  done_ = true;
}

bool WorkOCCL::isCompleted() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (done_) return true;
  }
  orError_t e = orEventQuery(end_);
  if (e == orErrorNotReady) {
    orGetLastError();
    return false;
  }
  finish();
  std::lock_guard<std::mutex> g(mu_);
  return done_;
}

bool WorkOCCL::isSuccess() const {
  std::lock_guard<std::mutex> g(mu_);
  return done_ && !error_;
}

std::exception_ptr WorkOCCL::exception() const {
  std::lock_guard<std::mutex> g(mu_);
  return error_;
}

int WorkOCCL::sourceRank() const { return *source_; }

std::vector<at::Tensor> WorkOCCL::result() { return outputs_; }

void WorkOCCL::block_current_stream() {
  or_check(orStreamWaitEvent(currentNativeStream(device_.index()), end_, 0), "orStreamWaitEvent");
}

void WorkOCCL::synchronize() { block_current_stream(); }

// [docs:occl-work-wait]
// Work.wait(): the caller's current stream waits for the collective (as
// with NCCL). The host also waits, bounded by the group's timeout, so that a
// failure (a dead peer, a timeout, mismatched calls) is raised here as
// DistBackendError instead of leaving garbage in the output: openreg's ATen
// kernel launches wait for their stream anyway (docs/streams.md), so the
// host-side wait costs no overlap.
bool WorkOCCL::wait(std::chrono::milliseconds timeout) {
  if (captured_) {  // recorded into a graph: only stream order (NCCL's behaviour in a capture)
    block_current_stream();
    return true;
  }
  if (timeout == kNoTimeout) {
    or_check(orEventSynchronize(end_), "orEventSynchronize");
  } else {
    // (now + a huge timeout would overflow into the past: checked_timeout caps it.)
    const auto deadline =
        std::chrono::steady_clock::now() + checked_timeout(timeout, "Work.wait");
    while (!isCompleted()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        std::lock_guard<std::mutex> g(mu_);
        error_ = make_dist_error(c10::str("OCCL ", name_, " (seq ", seq_, ") on rank ", rank_,
                                          ": Work.wait timed out after ", timeout.count(), " ms"));
        done_ = true;
        std::rethrow_exception(error_);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  finish();
  if (auto e = exception()) std::rethrow_exception(e);
  block_current_stream();
  return true;
}
// [docs:occl-work-wait:end]

void WorkOCCL::abort() { sh_->release(/*abort=*/true); }

float WorkOCCL::getDuration() const {
  TORCH_CHECK(!captured_, "OCCL ", name_, ": a collective recorded into a graph has no duration "
              "(a capture records no timing)");
  float ms = 0;
  TORCH_CHECK(orEventElapsedTime(&ms, start_, end_) == orSuccess,
              "OCCL: the work has not completed");
  return ms;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkOCCL::getFuture() {
  bool finished;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (future_) return future_;
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), std::vector<c10::Device>{device_});
    finished = done_;
  }
  (void)finished;
  if (captured_) {
    // Completed now, as a device future: its consumers' streams wait on an
    // event recorded on the OCCL stream, which is part of the capture.
    c10::OptionalStreamGuard guard(sh_->stream);
    future_->markCompleted(c10::IValue(outputs_));
    return future_;
  }
  sh_->watch(c10::intrusive_ptr<WorkOCCL>::reclaim_copy(this));  // completed in order
  return future_;
}

void OcclShared::watch(c10::intrusive_ptr<WorkOCCL> work) {
  std::lock_guard<std::mutex> g(wd_mu);
  if (stop) {  // the group is gone, so the work has finished
    work->finish();
    std::lock_guard<std::mutex> wg(work->mu_);
    if (work->future_ && !work->future_->completed()) {
      if (work->error_) work->future_->setError(work->error_);
      else work->future_->markCompleted(c10::IValue(work->outputs_));
    }
    return;
  }
  if (!thread.joinable()) thread = std::thread([this] { loop(); });
  queue.push_back(std::move(work));
  wd_cv.notify_one();
}

void OcclShared::loop() {
  for (;;) {
    c10::intrusive_ptr<WorkOCCL> w;
    {
      std::unique_lock<std::mutex> lk(wd_mu);
      wd_cv.wait(lk, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      w = std::move(queue.front());
      queue.pop_front();
    }
    // liboccl ends every operation within the timeout, so this returns.
    if (orEventSynchronize(w->end_) != orSuccess) orGetLastError();
    w->finish();
    c10::intrusive_ptr<c10::ivalue::Future> fut;
    std::exception_ptr err;
    {
      std::lock_guard<std::mutex> g(w->mu_);
      fut = w->future_;
      err = w->error_;
    }
    if (!fut || fut->completed()) continue;
    // Completion events are recorded on the OCCL stream, which has run the
    // collective: consumers' streams wait for exactly that.
    c10::OptionalStreamGuard guard(stream);
    if (err) {
      fut->setError(err);
    } else {
      fut->markCompleted(c10::IValue(w->outputs_));
    }
  }
}

void OcclShared::stop_and_join() {
  {
    std::lock_guard<std::mutex> g(wd_mu);
    stop = true;
    wd_cv.notify_all();
  }
  if (thread.joinable()) thread.join();
}

void OcclShared::release(bool abort) {
  occlComm_t c;
  {
    std::lock_guard<std::mutex> g(mu);
    c = comm;
    comm = nullptr;
  }
  if (!c) return;
  if (abort) {
    occlCommAbort(c);
  } else {
    if (stream) {
      if (orStreamSynchronize(nativeStream(*stream)) != orSuccess) orGetLastError();
    }
    occlCommDestroy(c);
  }
}

}  // namespace torch_openreg
