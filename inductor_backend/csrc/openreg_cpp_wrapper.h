/*
 * openreg_cpp_wrapper.h -- included by the C++ wrapper that Inductor
 * generates for openreg graphs (torch.compile(..., options={"cpp_wrapper":
 * True}); wrapper.py, OpenRegCppWrapperCodegen). It gives the wrapper:
 *
 *   - the C shim of openreg (c_shim_openreg.h, generated at build time by
 *     tools/gen_c_shim.py): aoti_torch_openreg_<op> for every operator the
 *     wrapper calls without a lowering (mm, addmm, convolution, fallbacks),
 *     each through the dispatcher, so openreg tensors reach openreg kernels;
 *   - the launch of a compiled kernel, the C++ twin of the Python wrapper's
 *     _launcher.Kernel: kernel-view addresses for openreg tensors, and
 *     orInductorLaunch on the device's current stream.
 *
 * Buffers need nothing here: aoti_torch_empty_strided with
 * aoti_torch_device_type_privateuse1() allocates through openreg's caching
 * allocator, like torch.empty_strided(..., device="openreg:N").
 *
 * Vendor: keep the shim; replace kernel_ptr (simulation only) and launch
 * with your driver's kernel launch.
 */
#ifndef OPENREG_CPP_WRAPPER_H_
#define OPENREG_CPP_WRAPPER_H_

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <cstdint>
#include <stdexcept>

#include "c_shim_openreg.h"
#include "openreg_inductor.h"

namespace openreg_inductor {

// [docs:cpp-wrapper-launch]
// The address a kernel on openreg uses for a tensor's data: the kernel view
// for openreg tensors (strict memory: device addresses are not readable by
// the host), the address itself for CPU tensors (scalars).
inline void* kernel_ptr(AtenTensorHandle t, intptr_t view_offset) {
  void* p = nullptr;
  int32_t type = 0;
  if (aoti_torch_get_data_ptr(t, &p) != AOTI_TORCH_SUCCESS ||
      aoti_torch_get_device_type(t, &type) != AOTI_TORCH_SUCCESS) {
    throw std::runtime_error("openreg C++ wrapper: not a tensor handle");
  }
  if (p != nullptr && type == aoti_torch_device_type_privateuse1()) {
    return static_cast<char*>(p) + view_offset;
  }
  return p;
}

// Runs body() as the kernel `name` on `device`'s current stream, after the
// stream's earlier work (as the Python wrapper's kernels and eager ops do).
// `name` must live as long as the process (orInductorInternName). `body`
// holds its arguments by value (the wrapper's [=] lambda): on a capturing
// stream the graph keeps a copy of it, which each replay runs.
template <class Body>
inline void launch(int device, const char* name, const Body& body) {
  char err[512];
  int rc;
  if (orInductorIsCapturing(device)) {
    rc = orInductorLaunchOwned(
        device, name, [](void* b) { (*static_cast<Body*>(b))(); }, new Body(body),
        [](void* b) { delete static_cast<Body*>(b); }, err, sizeof(err));
  } else {
    rc = orInductorLaunch(
        device, name, [](void* b) { (*static_cast<const Body*>(b))(); },
        const_cast<Body*>(&body), err, sizeof(err));
  }
  if (rc != 0) throw std::runtime_error(err);
}
// [docs:cpp-wrapper-launch:end]

}  // namespace openreg_inductor

#endif  // OPENREG_CPP_WRAPPER_H_
