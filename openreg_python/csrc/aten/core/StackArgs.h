// Reading a boxed operator call's arguments (a torch::jit::Stack): what the
// boxed fallback (Fallback.cpp) and the graph capture (GraphCapture.cpp)
// both need to know about a call before they run or record it.
#pragma once

#include "KernelView.h"

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>

#include <optional>

namespace torch_openreg {

// Calls f on every tensor of an argument: a Tensor, a Tensor[] or a list
// holding tensors (Tensor?[] indices), recursively.
template <class F>
void for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) f(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) for_each_tensor(e, f);
  }
}

// The argument with every tensor replaced by f(tensor); other values as they are.
template <class F>
c10::IValue map_tensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    return out;
  }
  if (v.isList()) {
    auto in = v.toList();
    c10::impl::GenericList out(in.elementType());
    for (const c10::IValue& e : in) out.push_back(map_tensors(e, f));
    return out;
  }
  return v;
}

// The openreg device a call works on: its first openreg tensor's, else the
// device named by its first openreg `device=` argument (the current device
// for "openreg" without an index), else none (a call with no openreg
// argument). stack[begin, end) are the call's arguments.
inline std::optional<c10::DeviceIndex> stack_device(const torch::jit::Stack& stack, size_t begin,
                                                    size_t end) {
  std::optional<c10::DeviceIndex> from_device_arg;
  for (size_t i = begin; i < end; ++i) {
    const c10::IValue& v = stack[i];
    std::optional<c10::DeviceIndex> found;
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!found && is_openreg(t)) found = t.device().index();
    });
    if (found) return found;
    if (!from_device_arg && v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1)
      from_device_arg = v.toDevice().has_index() ? v.toDevice().index() : current_device();
  }
  return from_device_arg;
}

// A `Generator?` argument (random operators take their generator as one).
inline bool is_optional_generator(const c10::Argument& a) {
  const auto& type = a.type();
  return type->kind() == c10::TypeKind::OptionalType &&
         type->castRaw<c10::OptionalType>()->getElementType()->kind() ==
             c10::TypeKind::GeneratorType;
}

// A `Generator` or `Generator?` argument.
inline bool is_generator_arg(const c10::Argument& a) {
  return a.type()->kind() == c10::TypeKind::GeneratorType || is_optional_generator(a);
}

}  // namespace torch_openreg
