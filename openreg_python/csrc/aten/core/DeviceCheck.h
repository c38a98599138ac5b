// Device placement, checked as CUDA checks it: an operator that mixes
// devices raises "Expected all tensors to be on the same device" before
// anything runs or is written.
//
// The rules are PyTorch's own (read from the torch wheel's
// native_functions.yaml at build time, tools/gen_device_check.py):
//   * SameDevice: every tensor argument, outputs included, on one device;
//     the exact check CUDA's generated wrappers make
//     (c10::impl::check_and_update_common_device).
//   * CpuScalars: operators marked `device_check: NoCheck` (TensorIterator
//     operators): 0-dim CPU *inputs* are scalars and allowed, like
//     TensorIterator on CUDA; index tensors of the indexing operators may be
//     on the CPU, as CUDA accepts.
//   * Unchecked: the copy operators, which move data between devices.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <optional>
#include <string>
#include <vector>

namespace c10 {
struct FunctionSchema;
struct IValue;
}

namespace torch_openreg {

enum class DeviceRule : uint8_t { SameDevice, CpuScalars, Unchecked };

// The rule for an aten operator named "name" or "name.overload" (no "aten::").
// Operators of other namespaces (custom operators) get SameDevice.
DeviceRule device_rule(const std::string& qualified_name);

// Accumulates the arguments of one call; throws at the first mismatch.
class DeviceChecker {
 public:
  DeviceChecker(DeviceRule rule, const char* op) : rule_(rule), op_(op) {}

  // `arg` names the argument in messages; `is_output` for tensors the
  // operator writes (out=, in-place self), `is_index` for the indices of an
  // indexing operator.
  void check(const at::Tensor& t, const char* arg, bool is_output = false,
             bool is_index = false) {
    if (rule_ == DeviceRule::Unchecked || !t.defined()) return;
    if (rule_ == DeviceRule::SameDevice) return check_same(t, arg);
    check_iterator(t, is_output, is_index);
  }
  void check(const std::optional<at::Tensor>& t, const char* arg, bool is_output = false,
             bool is_index = false) {
    if (t) check(*t, arg, is_output, is_index);
  }

  // The device every checked argument agreed on (if any was checked).
  const std::optional<c10::Device>& device() const { return common_; }

 private:
  void check_same(const at::Tensor& t, const char* arg);
  void check_iterator(const at::Tensor& t, bool is_output, bool is_index);

  DeviceRule rule_;
  const char* op_;
  std::optional<c10::Device> common_;      // SameDevice: first tensor's device
  std::optional<c10::Device> non_cpu_;     // CpuScalars: the accelerator device
  std::optional<c10::Device> cpu_tensor_;  // CpuScalars: a CPU non-scalar seen
};

// True for the indexing operators whose `indices` may live on the CPU.
bool indices_may_be_cpu(const std::string& qualified_name);

}  // namespace torch_openreg

namespace torch_openreg {

// What a kernel needs to check its arguments, looked up once per operator.
struct OpDeviceInfo {
  DeviceRule rule = DeviceRule::SameDevice;
  bool cpu_indices = false;          // `indices` may be on the CPU
  std::string method;                // "aten::mm", for messages
  std::vector<std::string> arg_names;
  std::vector<bool> arg_written;     // Tensor(a!) arguments
  const char* arg_name(size_t i) const {
    return i < arg_names.size() ? arg_names[i].c_str() : "argument";
  }
  bool written(size_t i) const { return i < arg_written.size() && arg_written[i]; }
  bool is_index(size_t i) const { return cpu_indices && i < arg_names.size() &&
                                         arg_names[i] == "indices"; }
};

// By schema (the boxed fallback) and by "name.overload" (unboxed kernels).
OpDeviceInfo make_device_info(const c10::FunctionSchema& schema);
const OpDeviceInfo& device_info_for(const char* aten_schema_name);

// The boxed fallback's check of one call: the arguments of `schema` are
// stack[begin...] (Fallback.cpp; the graph capture path checks with it too).
void check_op_devices(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& stack,
                      size_t begin);

}  // namespace torch_openreg

namespace torch_openreg {

// For hand-written kernels of SameDevice operators:
//   check_same_device("aten::convolution_overrideable",
//                     {{"input", input}, {"weight", weight}, {"bias", bias}});
struct NamedTensorArg {
  NamedTensorArg(const char* n, const at::Tensor& t) : name(n), tensor(&t) {}
  NamedTensorArg(const char* n, const std::optional<at::Tensor>& t)
      : name(n), tensor(t ? &*t : nullptr) {}
  const char* name;
  const at::Tensor* tensor;
};
void check_same_device(const char* method, std::initializer_list<NamedTensorArg> args);

}  // namespace torch_openreg
