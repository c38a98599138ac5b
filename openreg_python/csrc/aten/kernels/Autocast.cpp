// Automatic mixed precision (torch.autocast("openreg")).
//
// Autocast is a dispatch key that sits above autograd: while
// `torch.autocast("openreg")` is active, every operator called with an
// openreg tensor first reaches AutocastPrivateUse1. An operator registered
// there gets a wrapper that casts its floating-point openreg arguments
// according to a policy and redispatches below autocast; every other
// operator falls through untouched.
//
// openreg follows CUDA's policy exactly: the policy lists are the
// AT_FORALL_* macros of ATen/autocast_mode.h, the very lists
// aten/src/ATen/autocast_mode.cpp registers for AutocastCUDA, so they stay
// in step with the installed torch. tests/ops/test_amp.py checks that the
// set of operators registered here equals the AutocastCUDA set (minus the
// cuDNN-only operators).
//
// Vendor: this file is the place to deviate from CUDA, e.g. keep an op in
// fp32 because your device has no fast half-precision kernel for it
// (register it with `fp32` instead of `lower_precision_fp`), or add your own
// fused operators to `lower_precision_fp`. The supported autocast dtypes are
// declared on the Python side (torch_openreg/openreg/amp.py).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include "TorchGates.h"

namespace torch_openreg {
namespace {

// The policy macros spell signatures the way autocast_mode.cpp sees them
// (inside namespace at::autocast).
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// CUDA refuses binary_cross_entropy under autocast (its fp16 gradient is
// unsafe); so does openreg, with CUDA's message. ATen's own function for
// this is file-local, hence this copy.
Tensor binary_cross_entropy_banned(const Tensor&, const Tensor&,
                                   const std::optional<Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe "
              "to autocast.\nMany models use a sigmoid layer right before the binary cross "
              "entropy layer.\nIn this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits\nor "
              "torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and "
              "BCEWithLogits are safe to autocast.");
}

}  // namespace

// [docs:autocast-fallthrough]
// Operators without a policy run unchanged under autocast. Without this
// fallthrough, torch.autocast("openreg") would fail for every operator not
// listed below ("could not run ... with arguments from the
// 'AutocastPrivateUse1' backend").
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}
// [docs:autocast-fallthrough:end]

// [docs:autocast-policies]
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // lower_precision_fp: matmul/conv/linear family, run in the autocast dtype
  // (torch.get_autocast_dtype("openreg"), float16 unless dtype= says else).
#define OPENREG_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(OPENREG_LOWER_PRECISION_FP)

  // fp32: numerically sensitive ops (exp/log/pow, norms, losses, upsampling)
  // run in float32 whatever their input dtype.
#define OPENREG_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(OPENREG_FP32)

  // fp32_set_opt_dtype: ops with a `dtype=` argument (softmax, log_softmax,
  // sum, cumsum, prod, vector/matrix norms) get dtype=float32 unless the
  // caller gave one.
#define OPENREG_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(OPENREG_FP32_SET_OPT_DTYPE)

  // fp32_append_dtype: norm overloads without a dtype are redispatched to
  // the overload that takes one, with float32.
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

  // promote: multi-input ops (addcmul, addcdiv, atan2, cross, dot, index_put,
  // scatter_add, ...) run in the widest floating dtype among their inputs.
  // cat and stack are not listed (for CUDA either): they promote natively.
#define OPENREG_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(OPENREG_PROMOTE)
#if OPENREG_GATE_AUTOCAST_MATRIX_SQRTH
  KERNEL_PRIVATEUSEONE(linalg_matrix_sqrth, fp32)
#endif

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN(binary_cross_entropy_banned));
}
// [docs:autocast-policies:end]

#undef OPENREG_LOWER_PRECISION_FP
#undef OPENREG_FP32
#undef OPENREG_FP32_SET_OPT_DTYPE
#undef OPENREG_PROMOTE

}  // namespace torch_openreg
