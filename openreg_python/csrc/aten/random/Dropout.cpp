// Dropout on openreg, fused the way CUDA fuses it.
//
// For a PrivateUse1 tensor, as for a CUDA one, torch.dropout calls
// native_dropout, whose mask is a bool tensor, and its backward is
// native_dropout_backward(grad, mask, scale). Composed from CPU operators,
// `x * mask` first copies the mask to x's dtype (the CPU TensorIterator
// promotes mixed inputs by copying them), forward and backward: in a
// transformer's training step those copies were all of openreg's 2-4 % over
// the CPU device, which never takes this route (its dropout multiplies by a
// float noise tensor). Here one pass reads the bool mask directly and
// multiplies, so NaN and inf propagate as they do in CUDA's kernel
// (x * 0 is NaN for x = inf), unlike a select.
// Vendor: a real device fuses the mask draw in too (Philox seed/offset).
#include "aten/graph/CaptureHook.h"
#include "Dropout.h"

#include "aten/core/DeviceCheck.h"
#include "aten/core/KernelView.h"
#include "aten/layout/MetaLayout.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/cpu/Loops.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

namespace torch_openreg {
namespace {

bool fusable(const at::Tensor& x, const at::Tensor& keep) {
  const auto t = x.scalar_type();
  return (t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16) &&
         keep.scalar_type() == at::kBool && x.sizes() == keep.sizes() && x.layout() == at::kStrided;
}

// On the CPU aliases, inside the kernel: the result lands in device memory.
at::Tensor cpu_masked_scale(const at::Tensor& x, const at::Tensor& keep, double scale) {
  at::Tensor out = at::empty_like(x);
  auto iter = at::TensorIteratorConfig()
                  .add_output(out)
                  .add_const_input(x)
                  .add_const_input(keep)
                  .check_all_same_dtype(false)
                  .build();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "openreg_dropout", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    const opmath_t s = static_cast<opmath_t>(scale);
    at::native::cpu_kernel(iter, [s](scalar_t v, bool k) -> scalar_t {
      return static_cast<scalar_t>(static_cast<opmath_t>(v) * static_cast<opmath_t>(k) * s);
    });
  });
  return out;
}

// The meta function lays the result out as a contiguous tensor where the
// CPU's iterator keeps the operands' layout (MetaLayout.cpp).
at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::native_dropout_backward", "");
  return in_promised_layout(op, {grad, mask, scale},
                            dropout_masked_scale(grad, mask, scale, "aten::native_dropout_backward",
                                                 /*scale_in_place=*/false));
}

}  // namespace

at::Tensor dropout_masked_scale(const at::Tensor& x, const at::Tensor& keep, double scale,
                                const char* op, bool scale_in_place) {
  check_same_device(op, {{"input", x}, {"mask", keep}});
  if (!fusable(x, keep)) {  // what the CPU computes
    at::Tensor masked = x.mul(keep);
    return scale_in_place ? masked.mul_(scale) : masked.mul(scale);
  }
  const c10::DeviceIndex device = x.device().index();
  AliasSet set(device);
  at::Tensor a = set.alias(x), k = set.alias(keep);
  at::Tensor out;
  launch_kernel(device, op, [&] { out = cpu_masked_scale(a, k, scale); });
  return set.unwrap(std::move(out));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_CAPTURABLE_IMPL(m, "native_dropout_backward", native_dropout_backward);
}

}  // namespace torch_openreg
