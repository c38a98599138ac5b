// Dropout's masked scaling, fused (Dropout.cpp).
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_openreg {

// x * keep * scale for an openreg tensor `x` and a bool mask `keep` of its
// shape, in one pass that reads the mask as it is. Other dtypes and shapes
// take the composite path of the CPU's formula: x.mul(keep).mul_(scale) for
// native_dropout (`scale_in_place`, so an integer input fails as on the
// CPU), x * keep * scale for native_dropout_backward. `op` names the
// operator in errors and traces.
at::Tensor dropout_masked_scale(const at::Tensor& x, const at::Tensor& keep, double scale,
                                const char* op, bool scale_in_place);

}  // namespace torch_openreg
