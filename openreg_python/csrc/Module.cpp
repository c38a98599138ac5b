// torch_openreg._C: the Python bindings behind torch.openreg.
// Importing it loads libtorch_openreg, whose static initialisers register
// the allocator, guard, hooks, host allocator and kernels with PyTorch.
#include "aten/KernelView.h"
#include "runtime/OpenRegAllocator.h"
#include "runtime/OpenRegFunctions.h"
#include "runtime/OpenRegGenerator.h"
#include "runtime/OpenRegSerialization.h"
#include "runtime/OpenRegStream.h"

#include <ATen/Context.h>
#include <torch/csrc/Event.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

namespace torch_openreg {
void bind_sanitizer(py::module& m);  // SanitizerBindings.cpp
}  // namespace torch_openreg

namespace {

using torch_openreg::check_device_index;

c10::DeviceIndex index_or_current(int64_t index) {
  if (index < 0) return torch_openreg::current_device();
  check_device_index(static_cast<c10::DeviceIndex>(index));
  return static_cast<c10::DeviceIndex>(index);
}

py::tuple pack_stream(const c10::Stream& s) {
  return py::make_tuple(s.id(), static_cast<int>(s.device_index()),
                        static_cast<int>(s.device_type()));
}

c10::Stream unpack_stream(int64_t id, int64_t device_index) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1,
                                 static_cast<c10::DeviceIndex>(device_index)),
                     static_cast<c10::StreamId>(id));
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "OpenReg device bindings (see torch.openreg)";
  torch_openreg::install_cpu_allocator_shim();
  torch_openreg::register_structured_kernels();
  torch_openreg::bind_sanitizer(m);

  m.def("_init", [] {
    torch::utils::register_fork_handler_for_device_init(at::kPrivateUse1);
    at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1);
  });
  m.def("_is_in_bad_fork", [] {
    return torch::utils::is_device_in_bad_fork(at::kPrivateUse1);
  });
  m.def("_get_default_generator", [](int64_t index) {
    torch::utils::register_fork_handler_for_device_init(at::kPrivateUse1);
    auto idx = index_or_current(index);
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(
        at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::PrivateUse1, idx))));
  });

  // devices
  m.def("_get_device_count", [] { return static_cast<int>(torch_openreg::device_count()); });
  m.def("_get_device", [] { return static_cast<int>(torch_openreg::current_device()); });
  m.def("_set_device", [](int64_t index) {
    torch_openreg::set_device(static_cast<c10::DeviceIndex>(index));
  });
  m.def("_exchange_device", [](int64_t index) {
    if (index < 0) return -1;
    return static_cast<int>(
        torch_openreg::exchange_device(static_cast<c10::DeviceIndex>(index)));
  });
  m.def("_maybe_exchange_device", [](int64_t index) {
    if (index < 0) return -1;
    return static_cast<int>(
        torch_openreg::maybe_exchange_device(static_cast<c10::DeviceIndex>(index)));
  });
  // The one device-index check (torch.openreg's Python API uses it too).
  m.def("_check_device_index", [](int64_t index) {
    check_device_index(static_cast<c10::DeviceIndex>(index));
    return index;
  });
  m.def("_synchronize", [](int64_t index) {
    auto idx = index_or_current(index);
    py::gil_scoped_release nogil;
    torch_openreg::DeviceScope scope(idx);
    OPENREG_CHECK(orDeviceSynchronize());
  });
  // Like torch.cuda._sleep: occupy the current stream for `us` microseconds
  // of "device time" (a host function on the stream), for tests and demos of
  // asynchronous behaviour.
  m.def("_sleep", [](int64_t us) {
    TORCH_CHECK(us >= 0, "_sleep: expected a non-negative duration, got ", us);
    auto idx = torch_openreg::current_device();
    OPENREG_CHECK(orLaunchSleep(torch_openreg::currentNativeStream(idx),
                                static_cast<unsigned long long>(us)));
  });

  // streams
  m.def("_stream_priority_range", [] {
    int least = 0, greatest = 0;
    OPENREG_CHECK(orDeviceGetStreamPriorityRange(&least, &greatest));
    return py::make_tuple(least, greatest);
  });
  m.def("_get_current_stream", [](int64_t index) {
    return pack_stream(torch_openreg::getCurrentStream(index_or_current(index)));
  });
  m.def("_get_default_stream", [](int64_t index) {
    return pack_stream(torch_openreg::getDefaultStream(index_or_current(index)));
  });
  m.def("_get_stream_from_pool", [](int64_t index, int priority) {
    return pack_stream(torch_openreg::getStreamFromPool(index_or_current(index), priority));
  });
  m.def("_set_current_stream", [](int64_t id, int64_t device_index) {
    torch_openreg::exchangeCurrentStream(unpack_stream(id, device_index));
  });
  // The runtime's process-unique stream id (orStreamGetId): the stream's row
  // in profiler traces.
  m.def("_stream_native_id", [](int64_t id, int64_t device_index) {
    unsigned long long native = 0;
    OPENREG_CHECK(orStreamGetId(torch_openreg::nativeStream(unpack_stream(id, device_index)),
                                &native));
    return native;
  });
  m.def("_stream_priority", [](int64_t id, int64_t device_index) {
    return torch_openreg::streamPriority(unpack_stream(id, device_index));
  });

  // torch.Event.elapsed_time insists on the exact torch.Event type; this
  // accepts subclasses (torch.openreg.Event) too.
  m.def("_event_elapsed_time", [](py::handle start, py::handle end) {
    TORCH_CHECK(THPEvent_Check(start.ptr()) && THPEvent_Check(end.ptr()),
                "elapsed_time: expected two torch.Event objects");
    auto* a = reinterpret_cast<THPEvent*>(start.ptr());
    auto* b = reinterpret_cast<THPEvent*>(end.ptr());
    py::gil_scoped_release nogil;
    return a->event.elapsedTime(b->event);
  });

  // memory
  m.def("_mem_get_info", [](int64_t index) {
    auto info = torch_openreg::getDeviceAllocator()->getMemoryInfo(index_or_current(index));
    return py::make_tuple(info.first, info.second);
  });

  // backend metadata (runtime/OpenRegSerialization.h): the "format" tag that
  // torch.save/torch.load carry along; None clears it.
  m.def("_set_backend_meta", [](const at::Tensor& t, std::optional<std::string> format) {
    torch_openreg::set_backend_format(t, format);
  }, py::arg("tensor"), py::arg("format"));
  m.def("_get_backend_meta", [](const at::Tensor& t) {
    return torch_openreg::get_backend_format(t);
  }, py::arg("tensor"));
}
