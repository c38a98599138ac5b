#include "DeviceCheck.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/op_registration/adaption.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <string_view>
#include <unordered_set>

namespace torch_openreg {
namespace {

// "name.overload" of every aten operator whose CUDA wrapper does not check
// devices (generated from native_functions.yaml).
const std::unordered_set<std::string_view>& nocheck_ops() {
  static const auto* s = new std::unordered_set<std::string_view>{
#include "device_check_nocheck.inc"
  };
  return *s;
}

// NoCheck operators that move data between devices: any mix is allowed.
bool is_copy_op(std::string_view name) {
  static const std::unordered_set<std::string_view> ops = {
      "copy_", "_copy_from", "_copy_from_and_resize", "_to_copy", "copy", "copy.out",
      "_foreach_copy_", "_foreach_copy", "_foreach_copy.out", "lift_fresh_copy"};
  return ops.count(name) != 0;
}

}  // namespace

DeviceRule device_rule(const std::string& name) {
  if (is_copy_op(name)) return DeviceRule::Unchecked;
  if (nocheck_ops().count(name)) return DeviceRule::CpuScalars;
  return DeviceRule::SameDevice;
}

bool indices_may_be_cpu(const std::string& name) {
  // CUDA's indexing kernels move CPU index tensors to the device.
  static const std::unordered_set<std::string_view> ops = {
      "index.Tensor", "index.Tensor_out", "index_put", "index_put_", "index_put.out",
      "_index_put_impl_", "_index_put_impl", "_index_put_impl.out", "_unsafe_index.Tensor",
      "_unsafe_index_put"};
  return ops.count(name) != 0;
}

OpDeviceInfo make_device_info(const c10::FunctionSchema& schema) {
  OpDeviceInfo info;
  const std::string& full = schema.name();
  info.method = full;
  if (full.rfind("aten::", 0) == 0) {
    std::string name = full.substr(6);
    if (!schema.overload_name().empty()) name += "." + schema.overload_name();
    info.rule = device_rule(name);
    info.cpu_indices = indices_may_be_cpu(name);
  }
  for (const c10::Argument& a : schema.arguments()) {
    info.arg_names.push_back(a.name());
    info.arg_written.push_back(a.alias_info() && a.alias_info()->isWrite());
  }
  return info;
}

const OpDeviceInfo& device_info_for(const char* aten_schema_name) {
  // Called once per unboxed kernel (a function-local static at the call site).
  std::string qualified = aten_schema_name;
  auto dot = qualified.find('.');
  std::string base = qualified.substr(0, dot);
  std::string overload = dot == std::string::npos ? "" : qualified.substr(dot + 1);
  auto op = c10::Dispatcher::singleton().findSchema({"aten::" + base, overload});
  TORCH_INTERNAL_ASSERT(op.has_value(), "openreg: no schema for aten::", qualified);
  return *new OpDeviceInfo(make_device_info(op->schema()));
}

void DeviceChecker::check_same(const at::Tensor& t, const char* arg) {
  c10::impl::check_and_update_common_device(common_, t, op_, arg);
}

void DeviceChecker::check_iterator(const at::Tensor& t, bool is_output, bool is_index) {
  const c10::Device d = t.device();
  if (d.is_cpu()) {
    // CPU scalars (inputs) and CPU indices are allowed next to a device.
    if ((!is_output && t.dim() == 0) || is_index) return;
    if (non_cpu_) {
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least "
                  "two devices, ", *non_cpu_, " and ", d, "!");
    }
    cpu_tensor_ = d;
    return;
  }
  if (!non_cpu_) {
    non_cpu_ = d;
    common_ = d;
  } else if (*non_cpu_ != d) {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least "
                "two devices, ", *non_cpu_, " and ", d, "!");
  }
  if (cpu_tensor_) {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least "
                "two devices, ", d, " and ", *cpu_tensor_, "!");
  }
}

}  // namespace torch_openreg

namespace torch_openreg {

void check_same_device(const char* method, std::initializer_list<NamedTensorArg> args) {
  DeviceChecker c(DeviceRule::SameDevice, method);
  for (const NamedTensorArg& a : args) {
    if (a.tensor) c.check(*a.tensor, a.name);
  }
}

}  // namespace torch_openreg
