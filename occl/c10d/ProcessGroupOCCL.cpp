// ProcessGroupOCCL: c10d's Backend API on top of liboccl (see the header).
#include "ProcessGroupOCCL.hpp"

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

[[noreturn]] void throw_dist(const std::string& msg) { C10_THROW_ERROR(DistBackendError, msg); }

std::exception_ptr make_dist_error(const std::string& msg) {
  try {
    throw_dist(msg);
  } catch (...) {
    return std::current_exception();
  }
}

// The longest timeout liboccl is given: it adds a timeout to
// steady_clock::now(), whose int64 nanosecond count overflows after 292
// years. A longer one (timedelta.max is 2.7 million years) waits ten years.
constexpr std::chrono::milliseconds kMaxTimeout = std::chrono::hours(24 * 3653);

// A group's timeout, checked where c10d or Python hands it over: liboccl
// would take zero or a negative value for its 30-minute default, and a
// timedelta too long for int64 microseconds reaches us wrapped to a
// negative count (torch's and pybind11's conversions do not check).
std::chrono::milliseconds checked_timeout(std::chrono::milliseconds timeout,
                                          const char* what = "ProcessGroupOCCL") {
  TORCH_CHECK_VALUE(timeout.count() > 0, what, ": timeout must be positive, got ",
                    timeout.count(), " ms", timeout.count() < -1000LL * 86400 * 365 * 1000
                        ? " (a timedelta too long to count in int64 microseconds wraps around)"
                        : "");
  return std::min(timeout, kMaxTimeout);
}

void or_check(orError_t e, const char* call) {
  if (e != orSuccess) {
    orGetLastError();
    TORCH_CHECK(false, "OCCL: ", call, " failed: ", orGetLastErrorMessage());
  }
}

// Vendor: map your library's types here (as ProcessGroupNCCL's ncclDataType).
occlDataType_t occl_type(at::ScalarType t) {
  switch (t) {
    case at::kChar: return occlInt8;
    case at::kByte: return occlUint8;
    case at::kShort: return occlInt16;
    case at::kUInt16: return occlUint16;
    case at::kInt: return occlInt32;
    case at::kUInt32: return occlUint32;
    case at::kLong: return occlInt64;
    case at::kUInt64: return occlUint64;
    case at::kHalf: return occlFloat16;
    case at::kBFloat16: return occlBFloat16;
    case at::kFloat: return occlFloat32;
    case at::kDouble: return occlFloat64;
    case at::kBool: return occlBool;
    case at::kComplexFloat: return occlComplex64;
    case at::kComplexDouble: return occlComplex128;
    case at::kFloat8_e4m3fn: case at::kFloat8_e5m2: return occlUint8;  // bytes, no reduction
    default:
      C10_THROW_ERROR(TypeError, c10::str("OCCL does not support dtype ", t));
  }
}

occlRedOp_t occl_op(const c10d::ReduceOp& op, at::ScalarType t) {
  using R = c10d::ReduceOp::RedOpType;
  switch (op.op_) {
    case R::SUM: return {occlSum, 0};
    case R::PRODUCT: return {occlProd, 0};
    case R::MIN: return {occlMin, 0};
    case R::MAX: return {occlMax, 0};
    case R::AVG: return {occlAvg, 0};
    case R::BAND: return {occlBand, 0};
    case R::BOR: return {occlBor, 0};
    case R::BXOR: return {occlBxor, 0};
    case R::PREMUL_SUM: {
      auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s, "OCCL: PREMUL_SUM without a factor");
      double f = s->double_factor;
      if (s->tensor_factor.defined()) f = s->tensor_factor.to(at::kCPU).item<double>();
      return {occlPreMulSum, f};
    }
    default:
      C10_THROW_ERROR(ValueError, "OCCL: unsupported reduce op");
  }
}

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

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "OCCL: ", what,
              " must be an openreg tensor, got one on ", t.device());
  TORCH_CHECK(!t.is_sparse(), "OCCL: sparse tensors are not supported");
}

at::Tensor dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

bool debug() {
  static const bool on = [] {
    const char* v = getenv("OCCL_DEBUG");  // 0 or 1: liboccl refuses anything else
    return v && strcmp(v, "1") == 0;
  }();
  return on;
}

}  // namespace

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
  sh_->watch(c10::intrusive_ptr<WorkOCCL>::reclaim_copy(this));  // completed in order
  return future_;
}

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

  orEvent_t ready;
  or_check(orEventCreateWithFlags(&ready, orEventDisableTiming), "orEventCreateWithFlags");
  or_check(orEventRecord(ready, cur), "orEventRecord");
  or_check(orStreamWaitEvent(os, ready, 0), "orStreamWaitEvent");
  orEventDestroy(ready);
  for (auto* list : {&inputs, &outputs})
    for (auto& t : *list)
      if (t.defined() && t.storage()) t.record_stream(occl_stream);

  auto work = c10::make_intrusive<WorkOCCL>(
      sh_, getRank(), type, ++seq_, name,
      outputs, inputs);
  work->device_ = device;
  or_check(orEventCreate(&work->start_), "orEventCreate");
  or_check(orEventCreate(&work->end_), "orEventCreate");
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

// ------------------------------------------------------------ collectives
c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "OCCL: one tensor per process");
  at::Tensor t = tensors[0];
  check_tensor(t, "allreduce tensor");
  const auto dt = occl_type(t.scalar_type());
  const auto op = occl_op(opts.reduceOp, t.scalar_type());
  at::Tensor buf = dense(t);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  if (!buf.is_same(t)) back.emplace_back(t, buf);
  return run(c10d::OpType::ALLREDUCE, "allreduce", t.device(), {t}, {buf},
             [&](occlComm_t c, orStream_t s) {
               return occlAllReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt, op, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return coalesce("allreduce_coalesced", tensors.size(), tensors, [&](size_t i) {
    std::vector<at::Tensor> one{tensors[i]};
    return allreduce(one, opts);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::coalesce(
    const char* name, size_t n, std::vector<at::Tensor> outputs,
    const std::function<c10::intrusive_ptr<c10d::Work>(size_t)>& one) {
  TORCH_CHECK(n > 0, "OCCL: ", name, " needs tensors");
  const uint64_t first_seq = seq_ + 1;
  c10::intrusive_ptr<WorkOCCL> last;
  for (size_t i = 0; i < n; ++i) last = c10::static_intrusive_pointer_cast<WorkOCCL>(one(i));
  // One Work for the whole set: it completes with the last operation.
  last->outputs_ = std::move(outputs);
  last->seq_ = first_seq;
  seq_ = first_seq;
  return last;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "OCCL: one tensor per process");
  at::Tensor t = tensors[0];
  check_tensor(t, "broadcast tensor");
  const auto dt = occl_type(t.scalar_type());
  at::Tensor buf = dense(t);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  if (!buf.is_same(t)) back.emplace_back(t, buf);
  const int root = int(opts.rootRank);
  return run(c10d::OpType::BROADCAST, "broadcast", t.device(), {t}, {buf},
             [&](occlComm_t c, orStream_t s) {
               return occlBroadcast(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt, root, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "OCCL: one tensor per process");
  at::Tensor t = tensors[0];
  check_tensor(t, "reduce tensor");
  const auto dt = occl_type(t.scalar_type());
  const auto op = occl_op(opts.reduceOp, t.scalar_type());
  at::Tensor buf = dense(t);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  const int root = int(opts.rootRank);
  if (!buf.is_same(t) && getRank() == root) back.emplace_back(t, buf);
  return run(c10d::OpType::REDUCE, "reduce", t.device(), {t}, {buf},
             [&](occlComm_t c, orStream_t s) {
               return occlReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt, op, root, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::_allgather_base(at::Tensor& output,
                                                                 at::Tensor& input,
                                                                 const c10d::AllgatherOptions&) {
  check_tensor(input, "allgather input");
  check_tensor(output, "allgather output");
  TORCH_CHECK(input.dtype() == output.dtype(), "OCCL: allgather input and output dtypes differ");
  TORCH_CHECK(output.numel() == input.numel() * getSize(),
              "OCCL: allgather output must have world_size * input.numel() elements");
  at::Tensor in = dense(input), out = dense(output);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  if (!out.is_same(output)) back.emplace_back(output, out);
  const auto dt = occl_type(in.scalar_type());
  return run(c10d::OpType::_ALLGATHER_BASE, "allgather_into_tensor", in.device(), {output}, {in, out},
             [&](occlComm_t c, orStream_t s) {
               return occlAllGather(in.data_ptr(), out.data_ptr(), in.numel(), dt, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, "OCCL: one tensor per process");
  at::Tensor in = inputs[0];
  check_tensor(in, "allgather input");
  auto& outs = outputs[0];
  TORCH_CHECK(int(outs.size()) == getSize(), "OCCL: allgather needs world_size outputs");
  for (auto& o : outs) {
    check_tensor(o, "allgather output");
    TORCH_CHECK(o.numel() == in.numel() && o.dtype() == in.dtype(),
                "OCCL: allgather outputs must match the input's size and dtype");
  }
  at::Tensor inc = dense(in);
  at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  for (int p = 0; p < getSize(); ++p)
    back.emplace_back(outs[size_t(p)], flat.narrow(0, p * in.numel(), in.numel()));
  const auto dt = occl_type(in.scalar_type());
  return run(c10d::OpType::ALLGATHER, "allgather", in.device(), outs, {inc, flat},
             [&](occlComm_t c, orStream_t s) {
               return occlAllGather(inc.data_ptr(), flat.data_ptr(), inc.numel(), dt, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "OCCL: as many outputs as inputs");
  return coalesce("allgather_into_tensor_coalesced", inputs.size(), outputs,
                  [&](size_t i) { return _allgather_base(outputs[i], inputs[i], opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "reduce_scatter input");
  check_tensor(output, "reduce_scatter output");
  TORCH_CHECK(input.dtype() == output.dtype(), "OCCL: reduce_scatter input and output dtypes differ");
  TORCH_CHECK(input.numel() == output.numel() * getSize(),
              "OCCL: reduce_scatter input must have world_size * output.numel() elements");
  at::Tensor in = dense(input), out = dense(output);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  if (!out.is_same(output)) back.emplace_back(output, out);
  const auto dt = occl_type(in.scalar_type());
  const auto op = occl_op(opts.reduceOp, in.scalar_type());
  return run(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", in.device(), {output},
             {in, out}, [&](occlComm_t c, orStream_t s) {
               return occlReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), dt, op, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, "OCCL: one tensor per process");
  at::Tensor out = outputs[0];
  check_tensor(out, "reduce_scatter output");
  auto& ins = inputs[0];
  TORCH_CHECK(int(ins.size()) == getSize(), "OCCL: reduce_scatter needs world_size inputs");
  std::vector<at::Tensor> flat_parts;
  for (auto& t : ins) {
    check_tensor(t, "reduce_scatter input");
    TORCH_CHECK(t.numel() == out.numel() && t.dtype() == out.dtype(),
                "OCCL: reduce_scatter inputs must match the output's size and dtype");
    flat_parts.push_back(t.reshape({-1}));
  }
  at::Tensor flat = at::cat(flat_parts);
  return _reduce_scatter_base(out, flat, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "OCCL: as many outputs as inputs");
  return coalesce("reduce_scatter_tensor_coalesced", inputs.size(), outputs,
                  [&](size_t i) { return _reduce_scatter_base(outputs[i], inputs[i], opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions&) {
  check_tensor(input, "alltoall input");
  check_tensor(output, "alltoall output");
  TORCH_CHECK(input.dtype() == output.dtype(), "OCCL: alltoall input and output dtypes differ");
  const int n = getSize();
  auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& split,
                    std::vector<size_t>& cnt, std::vector<size_t>& disp) {
    const int64_t rows = t.dim() ? t.size(0) : 1;
    const int64_t row = rows ? t.numel() / rows : 0;
    cnt.assign(size_t(n), 0);
    disp.assign(size_t(n), 0);
    if (split.empty()) {
      TORCH_CHECK(rows % n == 0, "OCCL: alltoall tensor's first dimension must divide by world size");
      for (int p = 0; p < n; ++p) cnt[size_t(p)] = size_t(rows / n * row);
    } else {
      TORCH_CHECK(int(split.size()) == n, "OCCL: one split size per rank");
      int64_t total = 0;
      for (int p = 0; p < n; ++p) {
        TORCH_CHECK(split[size_t(p)] >= 0, "OCCL: negative split size");
        cnt[size_t(p)] = size_t(split[size_t(p)] * row);
        total += split[size_t(p)];
      }
      TORCH_CHECK(total == rows, "OCCL: split sizes add up to ", total, ", not ", rows);
    }
    for (int p = 1; p < n; ++p) disp[size_t(p)] = disp[size_t(p - 1)] + cnt[size_t(p - 1)];
  };
  std::vector<size_t> sc, sd, rc, rd;
  counts(input, inputSplitSizes, sc, sd);
  counts(output, outputSplitSizes, rc, rd);
  at::Tensor in = dense(input), out = dense(output);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  if (!out.is_same(output)) back.emplace_back(output, out);
  const auto dt = occl_type(in.scalar_type());
  return run(c10d::OpType::ALLTOALL_BASE, "alltoall_base", in.device(), {output}, {in, out},
             [&](occlComm_t c, orStream_t s) {
               return occlAllToAllv(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(), rc.data(),
                                    rd.data(), dt, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions&) {
  const int n = getSize();
  TORCH_CHECK(int(inputs.size()) == n && int(outputs.size()) == n,
              "OCCL: alltoall needs world_size inputs and outputs");
  const size_t nn = static_cast<size_t>(n);
  std::vector<size_t> sc(nn), sd(nn), rc(nn), rd(nn);
  std::vector<at::Tensor> parts;
  size_t acc = 0;
  for (int p = 0; p < n; ++p) {
    check_tensor(inputs[size_t(p)], "alltoall input");
    sc[size_t(p)] = size_t(inputs[size_t(p)].numel());
    sd[size_t(p)] = acc;
    acc += sc[size_t(p)];
    parts.push_back(inputs[size_t(p)].reshape({-1}));
  }
  at::Tensor in = at::cat(parts);
  acc = 0;
  for (int p = 0; p < n; ++p) {
    check_tensor(outputs[size_t(p)], "alltoall output");
    TORCH_CHECK(outputs[size_t(p)].dtype() == in.dtype(), "OCCL: alltoall dtypes differ");
    rc[size_t(p)] = size_t(outputs[size_t(p)].numel());
    rd[size_t(p)] = acc;
    acc += rc[size_t(p)];
  }
  at::Tensor flat = at::empty({int64_t(acc)}, in.options());
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  for (int p = 0; p < n; ++p)
    back.emplace_back(outputs[size_t(p)], flat.narrow(0, int64_t(rd[size_t(p)]), int64_t(rc[size_t(p)])));
  const auto dt = occl_type(in.scalar_type());
  return run(c10d::OpType::ALLTOALL, "alltoall", in.device(), outputs, {in, flat},
             [&](occlComm_t c, orStream_t s) {
               return occlAllToAllv(in.data_ptr(), sc.data(), sd.data(), flat.data_ptr(), rc.data(),
                                    rd.data(), dt, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "OCCL: one tensor per process");
  at::Tensor in = inputs[0];
  check_tensor(in, "gather input");
  const int root = int(opts.rootRank);
  const bool is_root = getRank() == root;
  std::vector<at::Tensor> outs;
  if (is_root) {
    TORCH_CHECK(outputs.size() == 1 && int(outputs[0].size()) == getSize(),
                "OCCL: gather needs world_size outputs on the root");
    outs = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), "OCCL: gather outputs only on the root");
  }
  at::Tensor inc = dense(in);
  at::Tensor flat = is_root ? at::empty({getSize() * in.numel()}, in.options()) : at::Tensor();
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  for (int p = 0; p < int(outs.size()); ++p)
    back.emplace_back(outs[size_t(p)], flat.narrow(0, p * in.numel(), in.numel()));
  const auto dt = occl_type(in.scalar_type());
  std::vector<at::Tensor> ins{inc};
  if (flat.defined()) ins.push_back(flat);
  return run(c10d::OpType::GATHER, "gather", in.device(), outs, ins,
             [&](occlComm_t c, orStream_t s) {
               return occlGather(inc.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr,
                                 inc.numel(), dt, root, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "OCCL: one tensor per process");
  at::Tensor out = outputs[0];
  check_tensor(out, "scatter output");
  const int root = int(opts.rootRank);
  at::Tensor flat;
  if (getRank() == root) {
    TORCH_CHECK(inputs.size() == 1 && int(inputs[0].size()) == getSize(),
                "OCCL: scatter needs world_size inputs on the root");
    std::vector<at::Tensor> parts;
    for (auto& t : inputs[0]) {
      check_tensor(t, "scatter input");
      TORCH_CHECK(t.numel() == out.numel() && t.dtype() == out.dtype(),
                  "OCCL: scatter inputs must match the output's size and dtype");
      parts.push_back(t.reshape({-1}));
    }
    flat = at::cat(parts);
  }
  at::Tensor outc = dense(out);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  if (!outc.is_same(out)) back.emplace_back(out, outc);
  const auto dt = occl_type(out.scalar_type());
  std::vector<at::Tensor> ins{outc};
  if (flat.defined()) ins.push_back(flat);
  return run(c10d::OpType::SCATTER, "scatter", out.device(), {out}, ins,
             [&](occlComm_t c, orStream_t s) {
               return occlScatter(flat.defined() ? flat.data_ptr() : nullptr, outc.data_ptr(),
                                  outc.numel(), dt, root, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::send(std::vector<at::Tensor>& tensors, int dst,
                                                      int tag) {
  TORCH_CHECK(tensors.size() == 1, "OCCL: one tensor per process");
  at::Tensor t = dense(tensors[0]);
  check_tensor(t, "send tensor");
  const auto dt = occl_type(t.scalar_type());
  return run(c10d::OpType::SEND, "send", t.device(), {}, {t}, [&](occlComm_t c, orStream_t s) {
    return occlSend(t.data_ptr(), t.numel(), dt, dst, tag, c, s);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::recv(std::vector<at::Tensor>& tensors, int src,
                                                      int tag) {
  TORCH_CHECK(tensors.size() == 1, "OCCL: one tensor per process");
  at::Tensor t = tensors[0];
  check_tensor(t, "recv tensor");
  at::Tensor buf = dense(t);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  if (!buf.is_same(t)) back.emplace_back(t, buf);
  const auto dt = occl_type(t.scalar_type());
  auto work = run(c10d::OpType::RECV, "recv", t.device(), {t}, {buf},
                  [&](occlComm_t c, orStream_t s) {
                    return occlRecv(buf.data_ptr(), buf.numel(), dt, src, tag, nullptr, c, s);
                  }, back);
  *work->source_ = src;
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::recvAnysource(std::vector<at::Tensor>& tensors,
                                                               int tag) {
  TORCH_CHECK(tensors.size() == 1, "OCCL: one tensor per process");
  at::Tensor t = tensors[0];
  check_tensor(t, "recv tensor");
  at::Tensor buf = dense(t);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  if (!buf.is_same(t)) back.emplace_back(t, buf);
  const auto dt = occl_type(t.scalar_type());
  auto source = std::make_shared<int>(-1);
  auto work = run(c10d::OpType::RECVANYSOURCE, "recv_anysource", t.device(), {t}, {buf},
                  [&](occlComm_t c, orStream_t s) {
                    return occlRecv(buf.data_ptr(), buf.numel(), dt, -1, tag, source.get(), c, s);
                  }, back);
  work->source_ = source;
  // The watchdog holds the work (and with it `source`) until liboccl wrote it.
  sh_->watch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::barrier(const c10d::BarrierOptions& opts) {
  at::Device device = device_ ? *device_
                              : at::Device(c10::DeviceType::PrivateUse1, current_device());
  if (!opts.device_ids.empty()) device = at::Device(c10::DeviceType::PrivateUse1, opts.device_ids[0]);
  if (device_) device = *device_;
  return run(c10d::OpType::BARRIER, "barrier", device, {}, {},
             [&](occlComm_t c, orStream_t s) { return occlBarrier(c, s); });
}

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
