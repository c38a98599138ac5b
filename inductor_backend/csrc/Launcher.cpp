// torch_openreg.inductor._launcher: how the Python wrapper that Inductor
// generates for openreg calls a compiled kernel.
//
// Inductor's CPU code generator produces `extern "C" void kernel(T0 a0, ...)`
// with raw pointers and scalars; scheduling.py appends a trampoline
// `openreg_entry(void* const* args)` that unpacks an argument array. A
// Kernel here holds that trampoline's address and, on each call, turns the
// Python arguments (tensors, ints, floats) into the array, with every
// openreg tensor's address translated to the kernel view, and launches the
// trampoline on the current stream through orInductorLaunch.
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <c10/util/SmallVector.h>

#include <string>

#include "openreg_inductor.h"

namespace py = pybind11;

namespace {

using Entry = void (*)(void* const*);

union Slot {
  void* p;
  int64_t i;
  double d;
};

struct Call {
  Entry entry;
  void* const* argv;
};

class Kernel {
 public:
  // kinds: one letter per argument, 'p' tensor pointer, 'i' integer, 'f' float.
  Kernel(std::string name, uintptr_t entry, std::string kinds)
      : name_(orInductorInternName(name.c_str())),
        entry_(reinterpret_cast<Entry>(entry)),
        kinds_(std::move(kinds)) {
    TORCH_CHECK(entry != 0, "openreg kernel ", name_, ": null entry point");
  }

  // [docs:kernel-call]
  void operator()(const py::args& args) const {
    TORCH_CHECK(args.size() == kinds_.size(), "openreg kernel ", name_, " takes ",
                kinds_.size(), " arguments, got ", args.size());
    c10::SmallVector<Slot, 16> slots(args.size());
    c10::SmallVector<void*, 16> argv(args.size());
    int device = -1;
    for (size_t i = 0; i < args.size(); ++i) {
      PyObject* obj = args[i].ptr();
      switch (kinds_[i]) {
        case 'p': {
          TORCH_CHECK(THPVariable_Check(obj), "openreg kernel ", name_, ": argument ", i,
                      " must be a tensor");
          const at::Tensor& t = THPVariable_Unpack(obj);
          char* p = static_cast<char*>(t.data_ptr());
          if (t.device().is_privateuseone()) {
            const int d = t.device().index();
            TORCH_CHECK(device < 0 || device == d, "openreg kernel ", name_,
                        ": arguments on openreg:", device, " and openreg:", d);
            device = d;
            // Strict memory: the host may touch device bytes only at the
            // kernel view (see openreg.h).
            if (p) p += orInductorKernelViewOffset(d);
          }
          slots[i].p = p;
          argv[i] = slots[i].p;
          break;
        }
        case 'i':
          slots[i].i = py::cast<int64_t>(args[i]);
          argv[i] = &slots[i].i;
          break;
        case 'f':
          slots[i].d = py::cast<double>(args[i]);
          argv[i] = &slots[i].d;
          break;
        default:
          TORCH_CHECK(false, "openreg kernel ", name_, ": bad argument kind '", kinds_[i], "'");
      }
    }
    if (device < 0) device = current_device();
    char err[512];
    int rc;
    if (C10_UNLIKELY(orInductorIsCapturing(device))) {
      rc = launch_owned(device, slots, err, sizeof(err));
    } else {
      Call call{entry_, argv.data()};
      py::gil_scoped_release nogil;
      rc = orInductorLaunch(
          device, name_, [](void* c) { auto* k = static_cast<Call*>(c); k->entry(k->argv); },
          &call, err, sizeof(err));
    }
    TORCH_CHECK(rc == 0, err);
  }
  // [docs:kernel-call:end]

  const char* name() const { return name_; }

 private:
  static int current_device() {
    return static_cast<int>(c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)
                                ->getDevice()
                                .index());
  }

  // A launch on a capturing stream: the graph keeps a copy of the argument
  // slots (addresses and scalars by value, as CUDA copies kernel
  // parameters), so a replay reads the same buffers as the capture did.
  struct Owned {
    Entry entry;
    c10::SmallVector<Slot, 16> slots;
    c10::SmallVector<void*, 16> argv;
  };

  int launch_owned(int device, const c10::SmallVector<Slot, 16>& slots, char* err,
                   size_t errlen) const {
    auto* owned = new Owned{entry_, slots, {}};
    owned->argv.resize(slots.size());
    for (size_t i = 0; i < slots.size(); ++i)
      owned->argv[i] = kinds_[i] == 'p' ? owned->slots[i].p : &owned->slots[i];
    return orInductorLaunchOwned(
        device, name_, [](void* c) { auto* o = static_cast<Owned*>(c); o->entry(o->argv.data()); },
        owned, [](void* c) { delete static_cast<Owned*>(c); }, err, errlen);
  }

  const char* name_;
  Entry entry_;
  std::string kinds_;
};

}  // namespace

PYBIND11_MODULE(_launcher, m) {
  m.doc() = "Launches Inductor-generated kernels on openreg (see torch_openreg.inductor)";
  py::class_<Kernel>(m, "Kernel", py::dynamic_attr())
      .def(py::init<std::string, uintptr_t, std::string>(), py::arg("name"),
           py::arg("entry"), py::arg("kinds"))
      .def("__call__", &Kernel::operator())
      .def_property_readonly("name", &Kernel::name)
      .def("__repr__", [](const Kernel& k) {
        return std::string("<openreg compiled kernel ") + k.name() + ">";
      });
  m.def("current_raw_stream", [](int64_t device) {
    return reinterpret_cast<uintptr_t>(orInductorCurrentStream(static_cast<int>(device)));
  });
  m.def("kernel_view_offset", [](int64_t device) {
    return static_cast<int64_t>(orInductorKernelViewOffset(static_cast<int>(device)));
  });
}
