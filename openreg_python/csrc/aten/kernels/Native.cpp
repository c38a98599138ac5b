// The hot operators, registered natively through ATen's CPU structured
// kernels and out-variants (the at::cpu:: entry points), unboxed: see
// CpuKernel.h. Everything not listed here still runs zero-copy through the
// boxed fallback; listing an op here only removes boxing overhead, it does
// not change results.
//
// Vendor: this is where a backend registers its own kernels. The list below
// is the set worth optimising first for typical training workloads.
#include "aten/graph/CaptureHook.h"
#include "CpuKernel.h"

#include <ATen/CPUFunctions.h>
#include <ATen/Functions.h>
#include <ATen/ops/mode_native.h>
#include <torch/library.h>

// An at::cpu function whose name is overloaded needs its signature spelled out.
#define OPENREG_CPU_KERNEL_SIG(m, SCHEMA, FN, ...)                          \
  do {                                                                      \
    static constexpr std::type_identity_t<__VA_ARGS__> openreg_fn = &FN;    \
    static constexpr char openreg_kernel_name[] = SCHEMA;                   \
    m.impl(SCHEMA, TORCH_FN((::torch_openreg::CpuKernel<openreg_fn, openreg_kernel_name>::call))); \
    ::torch_openreg::note_cpu_kernel_op(SCHEMA);                           \
  } while (0)

namespace torch_openreg {
namespace {
using T = at::Tensor;
using CT = const at::Tensor&;
using S = const c10::Scalar&;
}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // [docs:native-registrations]
  // Elementwise (TensorIterator) -------------------------------------------
  OPENREG_CPU_KERNEL(m, "add.Tensor", at::cpu::add);
  OPENREG_CPU_KERNEL(m, "add_.Tensor", at::cpu::add_);
  OPENREG_CPU_KERNEL(m, "add.out", at::cpu::add_outf);
  OPENREG_CPU_KERNEL(m, "sub.Tensor", at::cpu::sub);
  OPENREG_CPU_KERNEL(m, "sub_.Tensor", at::cpu::sub_);
  OPENREG_CPU_KERNEL(m, "sub.out", at::cpu::sub_outf);
  OPENREG_CPU_KERNEL(m, "mul.Tensor", at::cpu::mul);
  OPENREG_CPU_KERNEL(m, "mul_.Tensor", at::cpu::mul_);
  OPENREG_CPU_KERNEL(m, "mul.out", at::cpu::mul_outf);
  OPENREG_CPU_KERNEL_SIG(m, "div.Tensor", at::cpu::div, T (*)(CT, CT));
  // [docs:native-registrations:end]
  OPENREG_CPU_KERNEL_SIG(m, "div_.Tensor", at::cpu::div_, T& (*)(T&, CT));
  OPENREG_CPU_KERNEL_SIG(m, "div.out", at::cpu::div_outf, T& (*)(CT, CT, T&));
  OPENREG_CPU_KERNEL(m, "neg", at::cpu::neg);
  OPENREG_CPU_KERNEL(m, "exp", at::cpu::exp);
  OPENREG_CPU_KERNEL(m, "log", at::cpu::log);
  OPENREG_CPU_KERNEL(m, "sqrt", at::cpu::sqrt);
  OPENREG_CPU_KERNEL(m, "rsqrt", at::cpu::rsqrt);
  OPENREG_CPU_KERNEL(m, "tanh", at::cpu::tanh);
  OPENREG_CPU_KERNEL(m, "sigmoid", at::cpu::sigmoid);
  OPENREG_CPU_KERNEL(m, "relu", at::cpu::relu);
  OPENREG_CPU_KERNEL(m, "relu_", at::cpu::relu_);
  OPENREG_CPU_KERNEL(m, "gelu", at::cpu::gelu);
  OPENREG_CPU_KERNEL(m, "gelu_backward", at::cpu::gelu_backward);
  OPENREG_CPU_KERNEL(m, "silu", at::cpu::silu);
  OPENREG_CPU_KERNEL(m, "silu_backward", at::cpu::silu_backward);
  OPENREG_CPU_KERNEL(m, "threshold_backward", at::cpu::threshold_backward);
  OPENREG_CPU_KERNEL(m, "tanh_backward", at::cpu::tanh_backward);
  OPENREG_CPU_KERNEL(m, "sigmoid_backward", at::cpu::sigmoid_backward);
  OPENREG_CPU_KERNEL(m, "where.self", at::cpu::where);
  OPENREG_CPU_KERNEL_SIG(m, "pow.Tensor_Scalar", at::cpu::pow, T (*)(CT, S));
  OPENREG_CPU_KERNEL(m, "maximum", at::cpu::maximum);
  OPENREG_CPU_KERNEL(m, "minimum", at::cpu::minimum);
  OPENREG_CPU_KERNEL_SIG(m, "fill_.Scalar", at::cpu::fill_, T& (*)(T&, S));
  OPENREG_CPU_KERNEL(m, "zero_", at::cpu::zero_);
  OPENREG_CPU_KERNEL_SIG(m, "masked_fill_.Scalar", at::cpu::masked_fill_, T& (*)(T&, CT, S));

  // Reductions --------------------------------------------------------------
  OPENREG_CPU_KERNEL(m, "sum.dim_IntList", at::cpu::sum);
  OPENREG_CPU_KERNEL(m, "mean.dim", at::cpu::mean);
  OPENREG_CPU_KERNEL(m, "amax", at::cpu::amax);
  OPENREG_CPU_KERNEL(m, "amin", at::cpu::amin);
  OPENREG_CPU_KERNEL(m, "argmax", at::cpu::argmax);

  // Matrix products -----------------------------------------------------------
  OPENREG_CPU_KERNEL(m, "mm", at::cpu::mm);
  OPENREG_CPU_KERNEL(m, "mm.out", at::cpu::mm_outf);
  OPENREG_CPU_KERNEL(m, "addmm", at::cpu::addmm);
  OPENREG_CPU_KERNEL(m, "addmm.out", at::cpu::addmm_outf);
  OPENREG_CPU_KERNEL(m, "bmm", at::cpu::bmm);
  OPENREG_CPU_KERNEL(m, "bmm.out", at::cpu::bmm_outf);
  OPENREG_CPU_KERNEL(m, "baddbmm", at::cpu::baddbmm);

  // Softmax and normalisation ---------------------------------------------------
  OPENREG_CPU_KERNEL(m, "_softmax", at::cpu::_softmax);
  OPENREG_CPU_KERNEL(m, "_log_softmax", at::cpu::_log_softmax);
  OPENREG_CPU_KERNEL(m, "_softmax_backward_data", at::cpu::_softmax_backward_data);
  OPENREG_CPU_KERNEL(m, "_log_softmax_backward_data", at::cpu::_log_softmax_backward_data);
  OPENREG_CPU_KERNEL(m, "native_layer_norm", at::cpu::native_layer_norm);
  OPENREG_CPU_KERNEL(m, "native_layer_norm_backward", at::cpu::native_layer_norm_backward);
  // native_batch_norm: MetaLayout.cpp (the meta function's layout and eval statistics).
  OPENREG_CPU_KERNEL(m, "native_batch_norm_backward", at::cpu::native_batch_norm_backward);

  // Embedding and indexing ------------------------------------------------------
  OPENREG_CPU_KERNEL(m, "embedding_dense_backward", at::cpu::embedding_dense_backward);
  OPENREG_CPU_KERNEL(m, "index_select", at::cpu::index_select);
  OPENREG_CPU_KERNEL(m, "index.Tensor", at::cpu::index);
  OPENREG_CPU_KERNEL(m, "_index_put_impl_", at::cpu::_index_put_impl_);
  OPENREG_CPU_KERNEL(m, "gather", at::cpu::gather);

  // Joining, losses, pooling ------------------------------------------------------
  OPENREG_CPU_KERNEL(m, "cat", at::cpu::cat);
  OPENREG_CPU_KERNEL(m, "nll_loss_forward", at::cpu::nll_loss_forward);
  OPENREG_CPU_KERNEL(m, "nll_loss_backward", at::cpu::nll_loss_backward);
  OPENREG_CPU_KERNEL(m, "mse_loss", at::cpu::mse_loss);
  OPENREG_CPU_KERNEL(m, "max_pool2d_with_indices", at::cpu::max_pool2d_with_indices);
  OPENREG_CPU_KERNEL(m, "max_pool2d_with_indices_backward",
                     at::cpu::max_pool2d_with_indices_backward);
}

}  // namespace torch_openreg

namespace torch_openreg {
namespace {

// aten::mode.values has only a CompositeExplicitAutograd kernel, and that
// kernel (at::native::mode_out) refuses every device but CPU/CUDA/XPU. Run
// that same kernel on CPU aliases of the device memory, so every check,
// message and resize warning is the CPU's own (tests/ops/test_kernel_messages.py);
// only the placement checks come first, in ATen's words, because the
// aliases are all CPU tensors and would pass them.
std::tuple<at::Tensor&, at::Tensor&> mode_values(const at::Tensor& self, int64_t dim,
                                                 bool keepdim, at::Tensor& values,
                                                 at::Tensor& indices) {
  TORCH_CHECK(self.device() == values.device(),
              "expected device '", self.device(), "' but got '", values.device(),
              "' for values output");
  TORCH_CHECK(self.device() == indices.device(),
              "expected device '", self.device(), "' but got '", indices.device(),
              "' for indices output");
  const auto device = self.device().index();
  AliasSet set(device);
  at::Tensor s = set.alias(self), v = set.alias(values, /*write=*/true),
             i = set.alias(indices, /*write=*/true);
  launch_kernel(device, "aten::mode.values", [&] { at::native::mode_out(s, dim, keepdim, v, i); });
  set.sync_back(values, v);
  set.sync_back(indices, i);
  return {values, indices};
}

// aten::addr_ is a composite that calls addr.out with `self` passed twice as
// the same C++ object, and the CPU kernel tells in-place from out-of-place
// by object address (an in-place 0-d self is an error, not a broadcast).
// The fallback's boxed arguments are distinct objects, so do the same call
// here with one alias.
at::Tensor& addr_(at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2,
                  const c10::Scalar& beta, const c10::Scalar& alpha) {
  check_same_device("aten::addr_", {{"self", self}, {"vec1", vec1}, {"vec2", vec2}});
  auto device = self.device().index();
  AliasSet set(device);
  at::Tensor s = set.alias(self, /*write=*/true), v1 = set.alias(vec1), v2 = set.alias(vec2);
  launch_kernel(device, "aten::addr_", [&] { at::cpu::addr_outf(s, v1, v2, beta, alpha, s); });
  set.sync_back(self, s);
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_CAPTURABLE_IMPL(m, "mode.values", mode_values);
  OPENREG_CAPTURABLE_IMPL(m, "addr_", addr_);
}

}  // namespace torch_openreg
