// torch_openreg._occl: ProcessGroupOCCL for Python. Built against torch's
// bundled pybind11 (openreg_torch_python_module) so that the c10d.Store made
// by torch can be handed to it and the process group handed back.
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

#include <climits>

#include "ProcessGroupOCCL.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_occl, m) {
  m.doc() = "OCCL's c10d process group for openreg";
  // c10d's Backend must be registered with pybind11 before we derive from it.
  py::module_::import("torch._C._distributed_c10d");
  py::class_<torch_openreg::ProcessGroupOCCL, c10d::Backend,
             c10::intrusive_ptr<torch_openreg::ProcessGroupOCCL>>(
      m, "ProcessGroupOCCL",
      "c10d's backend for openreg tensors on OCCL (registered as \"occl\").\n\n"
      "dist.init_process_group(\"occl\") creates it; it can also be made directly\n"
      "from a c10d Store, this process's rank, the group size, a timeout and a\n"
      "group name.")
      // rank and size as int64, so that 2**40 is refused by the constructor's
      // range check with its message rather than by pybind11's overload
      // resolution (a size past INT_MAX is refused here).
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int64_t rank, int64_t size,
                       std::chrono::milliseconds timeout, const std::string& group_name) {
             TORCH_CHECK_VALUE(size >= 1 && size <= INT_MAX,
                               "ProcessGroupOCCL: size must be in [1, ", INT_MAX, "], got ", size);
             TORCH_CHECK_VALUE(rank >= 0 && rank < size,
                               "ProcessGroupOCCL: rank must be in [0, size) = [0, ", size,
                               "), got ", rank);
             auto opts = c10::make_intrusive<torch_openreg::ProcessGroupOCCL::Options>(timeout);
             opts->group_name = group_name;
             return c10::make_intrusive<torch_openreg::ProcessGroupOCCL>(
                 store, int(rank), int(size), opts);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("group_name") = "", py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("transport", &torch_openreg::ProcessGroupOCCL::transport,
                             "How this rank reaches its peers: \"shm+ipc\" (zero copy), \"shm\", "
                             "\"tcp\" or \"shm+tcp\"; empty while there is no communicator "
                             "(before the first collective, after shutdown).")
      // dist.split_group deep-copies `backend.options` as the new group's
      // options unless given some; None makes c10d pass none, and split()
      // then starts from this group's options (timeout, name).
      .def_property_readonly(
          "options", [](torch_openreg::ProcessGroupOCCL&) { return py::none(); },
          "None: dist.split_group then starts from this group's options (timeout, name).")
      // dist.new_group calls this on ranks left out of the new group when the
      // default group can split (as ncclCommSplit needs every rank). c10d
      // splits only NCCL's members that way; a custom backend's members
      // bootstrap through the store, so there is nothing here to match.
      .def("perform_nocolor_split", [](torch_openreg::ProcessGroupOCCL&, py::object) {},
           "Does nothing: the members of an OCCL sub-group bootstrap through the store.")
      .def_property_readonly(
          "occl_stream",
          [](torch_openreg::ProcessGroupOCCL& pg) {
            c10::Stream s = pg.occlStream();
            return py::make_tuple(s.id(), s.device_index(), int(s.device_type()));
          },
          "(stream_id, device_index, device_type) of the stream collectives run on; "
          "RuntimeError before the first collective.");
}
