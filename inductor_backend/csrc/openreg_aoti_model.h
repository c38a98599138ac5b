/*
 * openreg_aoti_model.h -- included by AOTInductor models compiled for openreg
 * (torch._inductor.aoti_compile_and_package; wrapper.py,
 * OpenRegCppWrapperCodegen in AOT mode), after torch's aoti_include/cpu.h and
 * openreg_cpp_wrapper.h. The generated model constructor calls these two
 * functions; the rest of the model is torch's AOTInductor runtime unchanged.
 *
 * Why they exist (PyTorch 2.13 hard-codes devices in the AOTInductor
 * runtime, docs/pytorch-gaps.md):
 *
 *   - AOTInductorModelBase parses its device string with a fixed list
 *     (cpu|cuda|xpu|mps, parse_device_str) and throws "Invalid device" for
 *     any other. The model is therefore created as "cpu" and moved to
 *     openreg by set_device, which parses "openreg" / "openreg:N" itself.
 *   - AOTInductorModelBase::load_constants allocates the weights with
 *     cudaMalloc/sycl/MPS under #ifdef and with malloc for everything else:
 *     openreg weights would land in host memory that is not device memory.
 *     load_constants below does what the CUDA build does, with the C shim
 *     only: one device allocation for all weights (openreg's caching
 *     allocator), a host-to-device copy per weight, and tensors viewing it.
 *
 * Vendor: keep both; they use nothing but torch's stable C shim and the
 * launch ABI (openreg_inductor.h).
 */
#ifndef OPENREG_AOTI_MODEL_H_
#define OPENREG_AOTI_MODEL_H_

#include <torch/csrc/inductor/aoti_runtime/model_base.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <cstdlib>
#include <cstring>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "openreg_inductor.h"

namespace openreg_aoti {

// [docs:aoti-set-device]
// The device string AOTIModelPackageLoader hands the model: the package's
// AOTI_DEVICE_KEY ("openreg"), with ":N" when aoti_load_package was given a
// device_index. Without an index the model runs on the current device.
inline int parse_device(const std::string& device_str) {
  static const std::regex re("openreg(:([0-9]{1,4}))?");
  std::smatch m;
  if (!std::regex_match(device_str, m, re)) {
    throw std::runtime_error("openreg AOTInductor model: invalid device '" + device_str +
                             "': this package was compiled for openreg ('openreg' or "
                             "'openreg:N')");
  }
  if (m[2].matched) return std::stoi(m[2].str());
  char err[256];
  const int device = orInductorCurrentDevice(err, sizeof(err));
  if (device < 0) throw std::runtime_error(err);
  return device;
}

// Called first in the generated constructor, after the base class parsed
// "cpu": the model's own device becomes openreg:N.
inline void set_device(const std::string& device_str, int32_t& device_type,
                       int32_t& device_idx) {
  device_type = aoti_torch_device_type_privateuse1();
  device_idx = parse_device(device_str);
}
// [docs:aoti-set-device:end]

namespace detail {

inline void check(AOTITorchError rc, const char* what) {
  if (rc != AOTI_TORCH_SUCCESS) {
    throw std::runtime_error(std::string("openreg AOTInductor model: ") + what + " failed");
  }
}

inline size_t aligned(size_t n) {
  return (n + AOTI_CONST_ALIGNMENT - 1) / AOTI_CONST_ALIGNMENT * AOTI_CONST_ALIGNMENT;
}

// bytes [src, src + n) of host memory -> device memory at dst.
inline void copy_to_device(void* dst, const uint8_t* src, int64_t n, int32_t device) {
  const int64_t stride = 1;
  AtenTensorHandle host = nullptr, dev = nullptr;
  check(aoti_torch_create_tensor_from_blob(const_cast<uint8_t*>(src), 1, &n, &stride, 0,
                                           aoti_torch_dtype_uint8(),
                                           aoti_torch_device_type_cpu(), 0, &host),
        "a weight's host view");
  const AOTITorchError rc = aoti_torch_create_tensor_from_blob(
      dst, 1, &n, &stride, 0, aoti_torch_dtype_uint8(), aoti_torch_device_type_privateuse1(),
      device, &dev);
  const AOTITorchError copied = rc == AOTI_TORCH_SUCCESS ? aoti_torch_copy_(dev, host, 0) : rc;
  aoti_torch_delete_tensor_object(host);
  if (dev != nullptr) aoti_torch_delete_tensor_object(dev);
  check(copied, "copying a weight to the device");
}

}  // namespace detail

// [docs:aoti-load-constants]
// The weights embedded in the model (include_weights) -> openreg memory.
// Called from the generated constructor of every model of a container; the
// first one loads (the constant map is shared), the others find it filled.
// `device_blob` and `host_blob` are the base class's constant_blob_ and
// aux_cpu_constant_blob_: the container takes them over (release_*_blob) and
// keeps the weights alive as long as the model.
template <class Model>
void load_constants(Model& model, int32_t device, torch::aot_inductor::ConstantMap& map,
                    ::RAIIDataPtr& device_blob,
                    ::RAIIDataPtr& host_blob, const uint8_t* src) {
  if (!map.empty()) return;
  const int32_t openreg = aoti_torch_device_type_privateuse1();
  const size_t n = model.num_constants();
  std::vector<size_t> offset(n, 0);
  size_t device_size = 0, host_size = 0;
  for (size_t i = 0; i < n; ++i) {
    if (model.constant_from_folded(i)) continue;
    size_t& size = model.constant_device_type(i) == openreg ? device_size : host_size;
    offset[i] = size;
    size += detail::aligned(model.constant_data_size(i));
  }
  uint8_t* device_base = nullptr;
  if (device_size > 0) {
    const int64_t size = static_cast<int64_t>(device_size), stride = 1;
    AtenTensorHandle blob = nullptr;
    detail::check(aoti_torch_empty_strided(1, &size, &stride, aoti_torch_dtype_uint8(), openreg,
                                           device, &blob),
                  "allocating the weights on the device");
    void* p = nullptr;
    detail::check(aoti_torch_get_data_ptr(blob, &p), "the weights' address");
    device_base = static_cast<uint8_t*>(p);
    device_blob = ::RAIIDataPtr(
        p, [blob](void* /*data*/) { aoti_torch_delete_tensor_object(blob); });
  }
  uint8_t* host_base = nullptr;
  if (host_size > 0) {  // CPU constants of an openreg model (mixed-device)
    host_base = static_cast<uint8_t*>(std::malloc(host_size));
    if (host_base == nullptr) throw std::bad_alloc();
    host_blob = ::RAIIDataPtr(host_base, [](void* p) { std::free(p); });
  }
  size_t read = 0;  // the embedded blob holds the weights back to back, unaligned
  for (size_t i = 0; i < n; ++i) {
    if (model.constant_from_folded(i)) continue;
    const bool on_device = model.constant_device_type(i) == openreg;
    const size_t size = model.constant_data_size(i);
    uint8_t* data = (on_device ? device_base : host_base) + offset[i];
    if (size > 0) {
      if (on_device) {
        detail::copy_to_device(data, src + read, static_cast<int64_t>(size), device);
      } else {
        std::memcpy(data, src + read, size);
      }
    }
    read += size;
    AtenTensorHandle tensor = nullptr;
    detail::check(aoti_torch_create_tensor_from_blob_v2(
                      data, model.constant_ndim(i), model.constant_shape(i),
                      model.constant_stride(i), model.constant_offset(i),
                      model.constant_dtype(i), on_device ? openreg : aoti_torch_device_type_cpu(),
                      on_device ? device : 0, &tensor, model.constant_layout(i),
                      model.opaque_metadata(i), model.opaque_metadata_size(i)),
                  "a weight's tensor");
    map.emplace(model.constant_name(i), tensor);
  }
}
// [docs:aoti-load-constants:end]

}  // namespace openreg_aoti

#endif  // OPENREG_AOTI_MODEL_H_
