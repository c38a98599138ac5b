// torch_openreg._C bindings of the stream sanitizer (aten/core/Sanitizer.h), and
// the C++ exception behind torch_openreg.StreamRaceError.
//
// Kernels live in libtorch_openreg, which does not link libtorch_python; the
// exception type Python maps to its own class (torch::PyTorchError, whose
// python_type() the torch bindings' error handlers ask) must come from this
// module, so libtorch_openreg throws through a function registered here.
#include "aten/core/KernelView.h"
#include "aten/core/Sanitizer.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

namespace torch_openreg {
namespace {

PyObject* g_race_type = nullptr;  // torch_openreg.StreamRaceError (owned)

struct StreamRaceError : public torch::PyTorchError {
  using torch::PyTorchError::PyTorchError;
  PyObject* python_type() override { return g_race_type ? g_race_type : PyExc_RuntimeError; }
};

[[noreturn]] void throw_race(const std::string& report) { throw StreamRaceError(report); }

}  // namespace

void bind_sanitizer(py::module& m) {
  m.def("_set_stream_race_error", [](py::object cls) {
    Py_XDECREF(g_race_type);
    g_race_type = cls.release().ptr();
    set_stream_race_thrower(&throw_race);
  });
  // Our own bindings go through pybind11, not torch's error handlers.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (StreamRaceError& e) {
      PyErr_SetString(e.python_type(), e.what());
    }
  });
  m.def("_set_stream_sanitizer", [](bool on) { set_sanitizer(on); });
  m.def("_is_stream_sanitizer_enabled", [] { return sanitizer_on(); });
  // The host reads (or writes) a CPU tensor: checked if it is pinned memory
  // that asynchronous device work may still be writing (or reading).
  m.def("_sanitizer_host_access", [](const at::Tensor& t, bool write, const std::string& op) {
    if (!sanitizer_on() || !t.defined() || t.device().type() != c10::DeviceType::CPU) return;
    const void* p = nullptr;
    size_t n = 0;
    if (!tensor_footprint(t, &p, &n)) return;
    orError_t err = orSanitizerHostAccess(p, n, write, op.c_str());
    if (err != orSuccess) throw_runtime_error(err, "orSanitizerHostAccess");
  });
}

}  // namespace torch_openreg
