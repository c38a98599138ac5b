// DDP's timer on openreg: c10d::TimerRegistry entry for PrivateUse1.
//
// DistributedDataParallel's Reducer times each iteration (forward, backward
// compute, backward communication) with a Timer made by c10d's TimerRegistry
// for the parameters' device type. PyTorch registers one for the CPU (host
// clock) and CUDA (CUDA events); without one for openreg, DDP warns "Time
// stats are currently only collected for CPU and CUDA devices" and
// `_get_ddp_logging_data()` has no timings. This one records timing events
// on the device's current stream, as CUDA's does, so the times are device
// times: the interval between when the device reached each point, not when
// the host enqueued it.
//
// Vendor: the same with your events (anything with record, synchronize and
// elapsed time); it lives with the c10d glue because DDP is its only user.
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Registry.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

namespace {

// [docs:ddp-timer]
class OpenRegTimer : public c10d::Timer {
 public:
  explicit OpenRegTimer(c10::Device device) : device_(device) {}

  void record(Event event) override {
    c10d::Timer::record(event);  // the host-side timestamp, as every timer keeps
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
    get(event).record(impl->getStream(device_));
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    c10::Event& s = get(start);
    c10::Event& e = get(end);
    // An event is created when it is first recorded: without a backward
    // (evaluation) or in no_sync iterations some never are.
    if (!s.was_marked_for_recording() || !e.was_marked_for_recording()) return std::nullopt;
    // DDP asks at the start of the next forward, when the previous
    // iteration's work has finished, so the waits are short.
    s.synchronize();
    e.synchronize();
    const double ms = s.elapsedTime(e);
    // The end of an earlier iteration (no_sync): no valid interval.
    if (ms < 0) return std::nullopt;
    return static_cast<int64_t>(ms * 1e6);
  }

 private:
  // Timing events (BACKEND_DEFAULT: timing on, as torch.Event(enable_timing=True)).
  c10::Event& get(Event event) {
    switch (event) {
      case Event::kForwardStart: return forward_start_;
      case Event::kBackwardComputeStart: return backward_compute_start_;
      case Event::kBackwardComputeEnd: return backward_compute_end_;
      case Event::kBackwardCommStart: return backward_comm_start_;
      case Event::kBackwardCommEnd: return backward_comm_end_;
    }
    TORCH_INTERNAL_ASSERT(false, "unknown DDP timer event");
  }
  static c10::Event timing_event() {
    return c10::Event(c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT);
  }
  c10::Device device_;
  c10::Event forward_start_ = timing_event();
  c10::Event backward_compute_start_ = timing_event();
  c10::Event backward_compute_end_ = timing_event();
  c10::Event backward_comm_start_ = timing_event();
  c10::Event backward_comm_end_ = timing_event();
};

}  // namespace

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::DeviceType::PrivateUse1, OpenRegTimer);
}  // namespace c10d
// [docs:ddp-timer:end]
