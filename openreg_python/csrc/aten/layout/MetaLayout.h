// Results in the layout their meta function promises (MetaLayout.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>

#include <initializer_list>

namespace torch_openreg {

// `result` of the operator `op` called with `args`, in the
// sizes and strides the operator's meta function gives for those arguments:
// itself when it already has them, else a copy laid out so. For kernels
// registered one by one (not through the boxed fallback) whose CPU
// computation lays the result out otherwise.
at::Tensor in_promised_layout(const c10::OperatorHandle& op,
                              std::initializer_list<c10::IValue> args, at::Tensor result);

// The boxed fallback's CPU-kernel path (Fallback.cpp), which the operators
// of MetaLayout.cpp's table wrap.
void run_cpu_kernel_boxed(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                          torch::jit::Stack* stack);

}  // namespace torch_openreg
