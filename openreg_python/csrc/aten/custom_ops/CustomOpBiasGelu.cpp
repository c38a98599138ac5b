// Custom operator example 1: openreg::fused_bias_gelu(x, bias) = gelu(x + bias),
// one pass over the data instead of two (a bias add feeding GELU is the MLP
// hot path). Kernels for PrivateUse1 (zero-copy, on the device's stream), CPU
// (the same loop on host memory) and Meta (shapes only: FakeTensor,
// torch.compile), and autograd through a C++ torch::autograd::Function
// registered for the Autograd alias key. (Example 2, a structured operator,
// is CustomOpScaledAdd.cpp.)
//
// Vendor: rename the namespace, keep the pattern; the body of
// bias_gelu_compute is where your device kernel is launched.
#include "aten/graph/CaptureHook.h"
#include "CustomOps.h"

#include <ATen/Dispatch.h>
#include <ATen/Functions.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorOperators.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <cmath>

namespace torch_openreg {

// [docs:custom-def]
TORCH_LIBRARY(openreg, m) {
  m.def("fused_bias_gelu(Tensor x, Tensor bias) -> Tensor");
  m.def("fused_bias_gelu_backward(Tensor grad, Tensor x, Tensor bias) -> (Tensor, Tensor)");
}
// [docs:custom-def:end]

namespace {

using at::Tensor;

// Shared by every kernel (CPU, PrivateUse1, Meta), so a bad call fails the
// same way eagerly, under FakeTensor and under torch.compile.
void check_bias_gelu(const char* op, const Tensor& x, const Tensor& bias) {
  TORCH_CHECK(x.device() == bias.device(), op, ": x and bias must be on the same device, got x on ",
              x.device(), " and bias on ", bias.device());
  TORCH_CHECK_TYPE(at::isReducedFloatingType(x.scalar_type()) || x.scalar_type() == at::kFloat ||
                       x.scalar_type() == at::kDouble,
                   op, ": x must be float32, float64, float16 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK_TYPE(bias.scalar_type() == x.scalar_type(), op,
                   ": bias must have x's dtype (", x.scalar_type(), "), got ", bias.scalar_type());
  TORCH_CHECK_VALUE(x.dim() >= 1, op, ": x must have at least one dimension");
  TORCH_CHECK_VALUE(bias.dim() == 1 && bias.size(0) == x.size(-1), op,
                    ": bias must be 1-D with x.size(-1) = ", x.size(-1),
                    " elements, got shape ", bias.sizes());
}

// gelu(v) = v * Phi(v), the exact (erf) form, as torch.nn.functional.gelu.
template <typename T>
inline T gelu(T v) {
  return T(0.5) * v * (T(1) + std::erf(v * T(M_SQRT1_2)));
}
// d/dv gelu(v) = Phi(v) + v * phi(v)
template <typename T>
inline T gelu_grad(T v) {
  const T cdf = T(0.5) * (T(1) + std::erf(v * T(M_SQRT1_2)));
  const T pdf = std::exp(T(-0.5) * v * v) * T(0.3989422804014327);  // 1/sqrt(2*pi)
  return cdf + v * pdf;
}

// Rows of x (contiguous), one pass: y = gelu(x + bias), in opmath precision.
// [docs:custom-loop]
Tensor bias_gelu_compute(const Tensor& x_, const Tensor& bias_) {
  const Tensor x = x_.contiguous(), bias = bias_.contiguous();
  Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "fused_bias_gelu", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* bp = bias.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, rows, std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(n, 1)),
                     [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          yp[r * n + j] = gelu(opmath_t(xp[r * n + j]) + opmath_t(bp[j]));
        }
      }
    });
  });
  return y;
}
// [docs:custom-loop:end]

std::tuple<Tensor, Tensor> bias_gelu_backward_compute(const Tensor& grad_, const Tensor& x_,
                                                      const Tensor& bias_) {
  const Tensor grad = grad_.contiguous(), x = x_.contiguous(), bias = bias_.contiguous();
  Tensor gx = at::empty_like(x, at::MemoryFormat::Contiguous);
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(),
                                  "fused_bias_gelu_backward", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    const scalar_t* gp = grad.const_data_ptr<scalar_t>();
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* bp = bias.const_data_ptr<scalar_t>();
    scalar_t* gxp = gx.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, rows, std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(n, 1)),
                     [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          const int64_t i = r * n + j;
          gxp[i] = opmath_t(gp[i]) * gelu_grad(opmath_t(xp[i]) + opmath_t(bp[j]));
        }
      }
    });
  });
  // The bias was broadcast over every row: its gradient sums them.
  Tensor gb = gx.reshape({rows, n}).sum(0, false, at::toOpMathType(x.scalar_type()))
                  .to(bias.scalar_type());
  return {gx, gb};
}

// [docs:custom-kernels]
Tensor fused_bias_gelu_kernel(const Tensor& x, const Tensor& bias) {
  check_bias_gelu("openreg::fused_bias_gelu", x, bias);
  // CPU tensors run the loop in place; openreg tensors run it on the device's
  // current stream over zero-copy aliases of device memory.
  return run_on_device_of(x, "openreg::fused_bias_gelu",
                          [](const std::vector<Tensor>& t) { return bias_gelu_compute(t[0], t[1]); },
                          {x, bias});
}

Tensor fused_bias_gelu_meta(const Tensor& x, const Tensor& bias) {
  check_bias_gelu("openreg::fused_bias_gelu", x, bias);
  return at::empty_like(x, at::MemoryFormat::Contiguous);  // shape and dtype only
}
// [docs:custom-kernels:end]

std::tuple<Tensor, Tensor> fused_bias_gelu_backward_kernel(const Tensor& grad, const Tensor& x,
                                                           const Tensor& bias) {
  check_bias_gelu("openreg::fused_bias_gelu_backward", x, bias);
  TORCH_CHECK(grad.sizes() == x.sizes() && grad.device() == x.device() &&
                  grad.scalar_type() == x.scalar_type(),
              "openreg::fused_bias_gelu_backward: grad must be like x ", x.sizes(), " ",
              x.scalar_type(), " on ", x.device(), ", got ", grad.sizes(), " ",
              grad.scalar_type(), " on ", grad.device());
  return run_on_device_of(
      x, "openreg::fused_bias_gelu_backward",
      [](const std::vector<Tensor>& t) { return bias_gelu_backward_compute(t[0], t[1], t[2]); },
      {grad, x, bias});
}

std::tuple<Tensor, Tensor> fused_bias_gelu_backward_meta(const Tensor& grad, const Tensor& x,
                                                         const Tensor& bias) {
  check_bias_gelu("openreg::fused_bias_gelu_backward", x, bias);
  return {at::empty_like(x, at::MemoryFormat::Contiguous),
          at::empty_like(bias, at::MemoryFormat::Contiguous)};
}

// Autograd in C++: the Function re-enters the dispatcher below the autograd
// keys for the forward, and its backward is another operator with device
// kernels of its own (so it runs on openreg, and torch.compile traces it).
// [docs:custom-autograd]
class FusedBiasGelu : public torch::autograd::Function<FusedBiasGelu> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x,
                        const Tensor& bias) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("openreg::fused_bias_gelu", "")
                         .typed<Tensor(const Tensor&, const Tensor&)>();
    ctx->save_for_backward({x, bias});
    return op.call(x, bias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("openreg::fused_bias_gelu_backward", "")
                         .typed<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&,
                                                           const Tensor&)>();
    auto saved = ctx->get_saved_variables();
    auto [gx, gb] = op.call(grads[0], saved[0], saved[1]);
    return {gx, gb};
  }
};

Tensor fused_bias_gelu_autograd(const Tensor& x, const Tensor& bias) {
  return FusedBiasGelu::apply(x, bias);
}
// [docs:custom-autograd:end]

// [docs:custom-register]
// The same kernels serve openreg and CPU tensors (run_on_device_of picks the
// device's stream or the host).
void impl_bias_gelu_kernels(torch::Library& m) {
  OPENREG_CAPTURABLE_IMPL(m, "fused_bias_gelu", fused_bias_gelu_kernel);
  OPENREG_CAPTURABLE_IMPL(m, "fused_bias_gelu_backward", fused_bias_gelu_backward_kernel);
}

}  // namespace

TORCH_LIBRARY_IMPL(openreg, PrivateUse1, m) { impl_bias_gelu_kernels(m); }
TORCH_LIBRARY_IMPL(openreg, CPU, m) { impl_bias_gelu_kernels(m); }

TORCH_LIBRARY_IMPL(openreg, Meta, m) {
  m.impl("fused_bias_gelu", TORCH_FN(fused_bias_gelu_meta));
  m.impl("fused_bias_gelu_backward", TORCH_FN(fused_bias_gelu_backward_meta));
}

// Autograd is an alias key: one registration covers AutogradCPU,
// AutogradPrivateUse1, AutogradMeta, ...
TORCH_LIBRARY_IMPL(openreg, Autograd, m) {
  m.impl("fused_bias_gelu", TORCH_FN(fused_bias_gelu_autograd));
}
// [docs:custom-register:end]

}  // namespace torch_openreg
