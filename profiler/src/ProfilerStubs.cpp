// The legacy profiler path: torch.autograd.profiler.profile(use_device=
// "openreg") (use_kineto=False) times each operator with device events
// through these stubs, as it does with CUDA events for CUDA.
//
// Vendor: keep this file; only the or* calls name your runtime.
#include "openreg_profiler.h"

#include <openreg.h>

#include "runtime/OpenRegFunctions.h"
#include "runtime/OpenRegStream.h"

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

namespace torch_openreg::profiler {
namespace {

// [docs:profiler-stubs]
struct OpenRegStubs final : public torch::profiler::impl::ProfilerStubs {
  // At each operator's entry and exit: an event on the current stream.
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    auto index = current_device();
    if (device) *device = index;
    orEvent_t e = nullptr;
    OPENREG_CHECK(orEventCreate(&e));
    *event = std::shared_ptr<void>(e, [](void* p) {
      if (orEventDestroy(static_cast<orEvent_t>(p)) != orSuccess) orGetLastError();
    });
    if (cpu_ns) *cpu_ns = c10::getTime();
    OPENREG_CHECK(orEventRecord(e, currentNativeStream(index)));
  }

  // Device time between two events, in microseconds.
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* start,
                const torch::profiler::impl::ProfilerVoidEventStub* end) const override {
    auto a = static_cast<orEvent_t>(start->get());
    auto b = static_cast<orEvent_t>(end->get());
    OPENREG_CHECK(orEventSynchronize(a));
    OPENREG_CHECK(orEventSynchronize(b));
    float ms = 0;
    OPENREG_CHECK(orEventElapsedTime(&ms, a, b));
    return ms * 1000.0f;
  }
  // [docs:profiler-stubs:end]

  void mark(const char* name) const override { openreg_profiler_mark(name); }
  void rangePush(const char* name) const override { openreg_profiler_range_push(name); }
  void rangePop() const override { openreg_profiler_range_pop(); }
  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      DeviceScope scope(d);
      op(d);
    }
  }

  void synchronize() const override { OPENREG_CHECK(orDeviceSynchronize()); }
};

struct Registrar {
  Registrar() {
    static OpenRegStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} g_registrar;

}  // namespace
}  // namespace torch_openreg::profiler
