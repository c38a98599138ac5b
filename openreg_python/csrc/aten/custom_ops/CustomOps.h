// Shared by the custom-operator examples (CustomOpBiasGelu.cpp,
// CustomOpScaledAdd.cpp): running a kernel body on openreg or CPU tensors.
#pragma once

#include "aten/core/DeviceCheck.h"
#include "aten/core/KernelView.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <tuple>
#include <type_traits>
#include <vector>

namespace torch_openreg {

// Runs `fn` on CPU views of `tensors`: on the device's stream over aliases of
// device memory when they are openreg tensors, directly on the CPU otherwise.
// The results `fn` returns are openreg tensors again (zero-copy) or CPU ones.
template <class F>
auto run_on_device_of(const at::Tensor& like, const char* name, F&& fn,
                      std::initializer_list<at::Tensor> tensors) {
  using R = decltype(fn(std::vector<at::Tensor>{}));
  // A kernel's own ATen calls are implementation details: no autograd
  // recording (this matters on the CPU, where the inputs themselves are used).
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  // Custom operators follow ATen's same-device rule (DeviceCheck.h), on the
  // CPU too: a CPU tensor next to an openreg one is an error, not a copy.
  DeviceChecker checker(DeviceRule::SameDevice, name);
  for (const at::Tensor& t : tensors) checker.check(t, "argument");
  if (like.device().type() != c10::DeviceType::PrivateUse1) {
    return fn(std::vector<at::Tensor>(tensors));
  }
  const auto device = like.device().index();
  AliasSet set(device);
  std::vector<at::Tensor> aliases;
  for (const at::Tensor& t : tensors) aliases.push_back(set.alias(t));
  R result;
  launch_kernel(device, name, [&] { result = fn(aliases); });
  if constexpr (std::is_same_v<R, at::Tensor>) {
    return set.unwrap(result);
  } else {
    return R{set.unwrap(std::get<0>(result)), set.unwrap(std::get<1>(result))};
  }
}

}  // namespace torch_openreg
