// Custom operator example 2: openreg::scaled_add(self, other, alpha) =
// self + alpha * other, written the way ATen writes structured kernels: one
// meta function (checks, broadcast shape, promoted dtype) shared by every
// variant and device, one impl that writes into a preallocated output, and
// thin wrappers for the functional, out= and in-place variants (what torchgen
// generates in ATen), registered for PrivateUse1, CPU and Meta, with
// functionalization and autograd for the mutating variants.
//
// ATen declares, per structured operator, a meta class (meta() computes the
// output's shape/dtype and calls set_output_raw_strided) and an impl class
// deriving from it (impl() writes into the output); torchgen then generates
// per-backend wrapper classes that implement set_output_* for the
// functional, out= and in-place variants. An out-of-tree library has no
// torchgen: the same layout, written by hand.
//
// Vendor: rename the namespace, keep the pattern; the body of the impl is
// where your device kernel is launched.
#include "aten/graph/CaptureHook.h"
#include "CustomOps.h"

#include <ATen/ExpandUtils.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/Functions.h>
#include <ATen/TensorMeta.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Resize.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

namespace torch_openreg {

using at::Tensor;

// A fragment: the namespace itself is defined in CustomOpBiasGelu.cpp.
TORCH_LIBRARY_FRAGMENT(openreg, m) {
  m.def("scaled_add(Tensor self, Tensor other, Scalar alpha) -> Tensor");
  m.def("scaled_add.out(Tensor self, Tensor other, Scalar alpha, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("scaled_add_(Tensor(a!) self, Tensor other, Scalar alpha) -> Tensor(a!)");
}

// [docs:structured-meta]
namespace meta {
struct structured_scaled_add : public at::impl::MetaBase {
  void meta(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
};

TORCH_META_FUNC(scaled_add)(const at::Tensor& self, const at::Tensor& other,
                            const at::Scalar& alpha) {
  TORCH_CHECK(self.device() == other.device(), "openreg::scaled_add: self and other must be on "
              "the same device, got ", self.device(), " and ", other.device());
  const auto dtype = at::result_type(self, other);  // type promotion, as torch.add
  at::native::alpha_check(dtype, alpha);
  // Broadcasting; raises "The size of tensor a (..) must match ..." on mismatch.
  const auto shape = at::infer_size_dimvector(self.sizes(), other.sizes());
  // No stride preference: the impl handles any output layout.
  set_output_raw_strided(0, shape, {}, self.options().dtype(dtype));
}
}  // namespace meta

namespace native {
struct structured_scaled_add_out : public meta::structured_scaled_add {
  void impl(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
            const at::Tensor& out);
};

TORCH_IMPL_FUNC(scaled_add_out)(const at::Tensor& self, const at::Tensor& other,
                                const at::Scalar& alpha, const at::Tensor& out) {
  // `out` is preallocated (functional), user-given (out=) or self (in-place).
  run_on_device_of(out, "openreg::scaled_add", [&](const std::vector<at::Tensor>& t) {
    at::Tensor o = t[0];
    at::add_out(o, t[1], t[2], alpha);  // Vendor: your elementwise kernel here.
    return o;
  }, {out, self, other});
}
}  // namespace native
// [docs:structured-meta:end]

namespace {

// The wrappers torchgen would generate. set_output_raw_strided is where the
// variants differ: allocate, resize the user's out=, or check self.
// [docs:structured-wrappers]
struct ScaledAddFunctional final : native::structured_scaled_add_out {
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    // options carry the inputs' device: openreg, CPU or meta alike.
    outputs_[i] = strides.empty() ? at::empty(sizes, options)
                                  : at::empty_strided(sizes, strides, options);
  }
  const Tensor& maybe_get_output(int64_t i) override { return outputs_[i]; }
  std::array<Tensor, 1> outputs_;
};

void check_out(const Tensor& out, at::TensorOptions options) {
  TORCH_CHECK(out.device() == options.device(), "openreg::scaled_add.out: out is on ",
              out.device(), " but the inputs are on ", options.device());
  TORCH_CHECK(at::canCast(options.dtype().toScalarType(), out.scalar_type()),
              "openreg::scaled_add.out: result type ", options.dtype().toScalarType(),
              " can't be cast to the desired output type ", out.scalar_type());
}

struct ScaledAddOut final : native::structured_scaled_add_out {
  explicit ScaledAddOut(Tensor& out) : outputs_{std::ref(out)} {}
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    const Tensor& out = outputs_[i].get();
    check_out(out, options);
    // Resizes (with ATen's warning) only if the shape differs.
    if (at::native::resize_output(out, sizes) && !strides.empty()) {
      out.as_strided_(sizes, strides);
    }
  }
  const Tensor& maybe_get_output(int64_t i) override { return outputs_[i]; }
  std::array<std::reference_wrapper<Tensor>, 1> outputs_;
};

struct ScaledAddInplace final : native::structured_scaled_add_out {
  explicit ScaledAddInplace(Tensor& self) : outputs_{std::ref(self)} {}
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    const Tensor& self = outputs_[i].get();
    TORCH_CHECK(self.sizes() == sizes, "openreg::scaled_add_: output with shape ", self.sizes(),
                " doesn't match the broadcast shape ", sizes);
    TORCH_CHECK(at::canCast(options.dtype().toScalarType(), self.scalar_type()),
                "openreg::scaled_add_: result type ", options.dtype().toScalarType(),
                " can't be cast to the desired output type ", self.scalar_type());
  }
  const Tensor& maybe_get_output(int64_t i) override { return outputs_[i]; }
  std::array<std::reference_wrapper<Tensor>, 1> outputs_;
};

// One entry point per variant; `run_impl` is false for the Meta kernels,
// which need only the meta function (shapes, dtypes, checks).
template <bool run_impl>
Tensor scaled_add(const Tensor& self, const Tensor& other, const at::Scalar& alpha) {
  ScaledAddFunctional op;
  op.meta(self, other, alpha);
  if (run_impl) op.impl(self, other, alpha, op.outputs_[0]);
  return std::move(op.outputs_[0]);
}

template <bool run_impl>
Tensor& scaled_add_out(const Tensor& self, const Tensor& other, const at::Scalar& alpha,
                       Tensor& out) {
  ScaledAddOut op(out);
  op.meta(self, other, alpha);
  if (run_impl) op.impl(self, other, alpha, op.maybe_get_output(0));
  return out;
}

template <bool run_impl>
Tensor& scaled_add_(Tensor& self, const Tensor& other, const at::Scalar& alpha) {
  ScaledAddInplace op(self);
  op.meta(self, other, alpha);
  if (run_impl) op.impl(self, other, alpha, op.maybe_get_output(0));
  return self;
}
// [docs:structured-wrappers:end]

const auto& scaled_add_op_inplace() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("openreg::scaled_add_", "")
                       .typed<Tensor&(Tensor&, const Tensor&, const at::Scalar&)>();
  return op;
}

const auto& scaled_add_op_out() {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("openreg::scaled_add", "out")
          .typed<Tensor&(const Tensor&, const Tensor&, const at::Scalar&, Tensor&)>();
  return op;
}

// Functionalization (torch.compile): the compiler's graphs are functional,
// and custom operators whose outputs alias an input cannot be rewritten
// automatically (auto_functionalize refuses them). These kernels do what
// torchgen generates for ATen's in-place/out= operators: run the functional
// variant on the unwrapped values and make the result the new value of the
// mutated argument.
// [docs:structured-functionalize]
Tensor unwrap_functional(const Tensor& t) {
  namespace F = at::functionalization::impl;
  if (!F::isFunctionalTensor(t)) return t;
  F::sync(t);
  return F::from_functional_tensor(t);
}

// The functional scaled_add, below the Functionalize key.
Tensor functional_scaled_add(const Tensor& self, const Tensor& other, const at::Scalar& alpha) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("openreg::scaled_add", "")
                       .typed<Tensor(const Tensor&, const Tensor&, const at::Scalar&)>();
  at::AutoDispatchSkipFunctionalize skip;
  return op.call(self, other, alpha);
}

void commit(Tensor& mutated, const Tensor& value) {
  namespace F = at::functionalization::impl;
  F::replace_(mutated, value);  // casts to mutated's dtype, takes value's shape
  F::commit_update(mutated);
  F::sync(mutated);
}

Tensor& scaled_add__functionalize(Tensor& self, const Tensor& other, const at::Scalar& alpha) {
  namespace F = at::functionalization::impl;
  if (!F::isFunctionalTensor(self)) {
    TORCH_CHECK(!F::isFunctionalTensor(other), "openreg::scaled_add_: mutating a "
                "non-functional tensor with a functional tensor is not allowed");
    at::AutoDispatchSkipFunctionalize skip;
    return scaled_add_<true>(self, other, alpha);
  }
  Tensor self_ = unwrap_functional(self), other_ = unwrap_functional(other);
  // The in-place form's own checks (its result must fit self), which the
  // functional variant would not make: the meta function alone, reused.
  ScaledAddInplace(self_).meta(self_, other_, alpha);
  commit(self, functional_scaled_add(self_, other_, alpha));
  return self;
}

Tensor& scaled_add_out_functionalize(const Tensor& self, const Tensor& other,
                                     const at::Scalar& alpha, Tensor& out) {
  namespace F = at::functionalization::impl;
  if (!F::isFunctionalTensor(out)) {
    TORCH_CHECK(!F::isFunctionalTensor(self) && !F::isFunctionalTensor(other),
                "openreg::scaled_add.out: mutating a non-functional tensor with a functional "
                "tensor is not allowed");
    at::AutoDispatchSkipFunctionalize skip;
    return scaled_add_out<true>(self, other, alpha, out);
  }
  Tensor self_ = unwrap_functional(self), other_ = unwrap_functional(other);
  Tensor result = functional_scaled_add(self_, other_, alpha);
  check_out(unwrap_functional(out), result.options());
  commit(out, result);  // out= may resize: the result's shape wins
  return out;
}
// [docs:structured-functionalize:end]

// Autograd for the functional variant (the out= and in-place variants are
// not differentiable, as for ATen's out= operators).
class ScaledAdd : public torch::autograd::Function<ScaledAdd> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& self,
                        const Tensor& other, const at::Scalar& alpha) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("openreg::scaled_add", "")
                         .typed<Tensor(const Tensor&, const Tensor&, const at::Scalar&)>();
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["self_sizes"] = self.sizes().vec();
    ctx->saved_data["other_sizes"] = other.sizes().vec();
    ctx->saved_data["self_dtype"] = self.scalar_type();
    ctx->saved_data["other_dtype"] = other.scalar_type();
    return op.call(self, other, alpha);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const Tensor& g = grads[0];
    const auto alpha = ctx->saved_data["alpha"].toScalar();
    auto reduce = [&](const Tensor& t, const char* sizes, const char* dtype) {
      // Undo broadcasting and type promotion.
      return t.sum_to_size(ctx->saved_data[sizes].toIntVector())
          .to(ctx->saved_data[dtype].toScalarType());
    };
    return {reduce(g, "self_sizes", "self_dtype"),
            reduce(g * alpha.conj(), "other_sizes", "other_dtype"), Tensor()};
  }
};

Tensor scaled_add_autograd(const Tensor& self, const Tensor& other, const at::Scalar& alpha) {
  return ScaledAdd::apply(self, other, alpha);
}

// The mutating variants refuse gradients instead of silently dropping them
// (without an Autograd kernel, torch's fallback would let an in-place update
// of a saved tensor, or of a leaf, go unnoticed). Like ATen's out= operators.
void refuse_grad(const char* op, std::initializer_list<const Tensor*> tensors) {
  if (!at::GradMode::is_enabled()) return;
  for (const Tensor* t : tensors) {
    TORCH_CHECK(!t->requires_grad(), op, ": the in-place and out= variants don't support "
                "automatic differentiation, but one of the arguments requires grad; use "
                "openreg::scaled_add");
  }
}

Tensor& scaled_add__autograd(Tensor& self, const Tensor& other, const at::Scalar& alpha) {
  refuse_grad("openreg::scaled_add_", {&self, &other});
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    scaled_add_op_inplace().call(self, other, alpha);
  }
  torch::autograd::impl::bump_version(self);  // what ADInplaceOrView does for ATen ops
  return self;
}

Tensor& scaled_add_out_autograd(const Tensor& self, const Tensor& other, const at::Scalar& alpha,
                                Tensor& out) {
  refuse_grad("openreg::scaled_add.out", {&self, &other, &out});
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    scaled_add_op_out().call(self, other, alpha, out);
  }
  torch::autograd::impl::bump_version(out);
  return out;
}

// [docs:structured-register]
// run_impl=true: the impl runs (openreg or CPU, see run_on_device_of);
// false: shapes only (Meta).
template <bool run_impl>
void impl_scaled_add(torch::Library& m) {
  // With the graph capture's hook in front (CaptureHook.h), which lets
  // calls on CPU and meta tensors through untouched.
  OPENREG_CAPTURABLE_IMPL(m, "scaled_add", scaled_add<run_impl>);
  OPENREG_CAPTURABLE_IMPL(m, "scaled_add.out", scaled_add_out<run_impl>);
  OPENREG_CAPTURABLE_IMPL(m, "scaled_add_", scaled_add_<run_impl>);
}

}  // namespace

TORCH_LIBRARY_IMPL(openreg, PrivateUse1, m) { impl_scaled_add<true>(m); }
TORCH_LIBRARY_IMPL(openreg, CPU, m) { impl_scaled_add<true>(m); }
TORCH_LIBRARY_IMPL(openreg, Meta, m) { impl_scaled_add<false>(m); }

TORCH_LIBRARY_IMPL(openreg, Functionalize, m) {
  m.impl("scaled_add_", TORCH_FN(scaled_add__functionalize));
  m.impl("scaled_add.out", TORCH_FN(scaled_add_out_functionalize));
}

TORCH_LIBRARY_IMPL(openreg, Autograd, m) {
  m.impl("scaled_add", TORCH_FN(scaled_add_autograd));
  m.impl("scaled_add_", TORCH_FN(scaled_add__autograd));
  m.impl("scaled_add.out", TORCH_FN(scaled_add_out_autograd));
}
// [docs:structured-register:end]

}  // namespace torch_openreg
