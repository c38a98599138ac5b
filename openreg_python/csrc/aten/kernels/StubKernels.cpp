// A DispatchStub kernel: how an out-of-tree backend plugs into ATen's own
// native implementation of an operator.
//
// Many ATen kernels are written once for every device and call a
// DispatchStub for the device-specific loop: the structured addcmul's impl is
//     TORCH_IMPL_FUNC(addcmul_out)(...) { addcmul_stub(device_type(), *this, value); }
// with `*this` a TensorIterator over (out, self, tensor1, tensor2). ATen
// registers that structured kernel for CPU and CUDA only. Here openreg
//   1. registers addcmul, addcmul.out and addcmul_ for PrivateUse1 with the
//      wrappers torchgen would generate around ATen's structured class, so
//      ATen's meta function (broadcasting, type promotion, out= checks) and
//      impl run for openreg tensors, and
//   2. registers the openreg kernel of addcmul_stub with
//      REGISTER_PRIVATEUSE1_DISPATCH, which the impl then calls with
//      device_type() == PrivateUse1.
// The kernel is an elementwise loop over the iterator's device pointers,
// the shape of a real device kernel. Other stubs follow the same pattern.

#include "aten/graph/CaptureHook.h"
#include "aten/core/KernelView.h"

#include <ATen/Dispatch.h>
#include <ATen/CPUFunctions.h>
#include <ATen/Functions.h>
#include <ATen/OpMathType.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/PointwiseOps.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorIterator.h>
#include <ATen/ops/addcmul_native.h>
#include <c10/core/DynamicCast.h>
#include <torch/library.h>

#include <array>
#include <atomic>

namespace torch_openreg {
namespace {

// [docs:stub-kernel]
// out = self + value * tensor1 * tensor2 over a TensorIterator whose operands
// are openreg tensors (operand 0 is the output).
// Vendor: this is where your device's elementwise kernel is launched with the
// iterator's pointers and strides. OpenReg's "device" runs host code on the
// kernel view of device memory, so it runs ATen's own CPU addcmul (whose
// impl calls this stub's CPU loop) on CPU aliases of the operands: the
// results are bit-identical to the CPU's (a hand-written loop would differ in
// the last bit wherever the CPU kernel uses fused multiply-adds).
void addcmul_kernel(at::TensorIteratorBase& iter, const at::Scalar& value) {
  TORCH_INTERNAL_ASSERT(iter.ntensors() == 4);
  const auto device = iter.device(0).index();
  AliasSet set(device);
  at::Tensor out = set.alias(iter.tensor(0), /*write=*/true);
  at::Tensor self = set.alias(iter.tensor(1));
  at::Tensor t1 = set.alias(iter.tensor(2));
  at::Tensor t2 = set.alias(iter.tensor(3));
  launch_kernel(device, "addcmul_stub", [&] {
    // The meta function already broadcast, promoted and sized the output;
    // the CPU's structured addcmul runs the CPU loop of the same stub.
    at::cpu::addcmul_out(out, self, t1, t2, value);
  });
}
// [docs:stub-kernel:end]

// ---- The wrappers torchgen generates for a structured TensorIterator
// operator (see RegisterCPU.cpp in a PyTorch build), for PrivateUse1.
// The final call to the base's set_output_raw_strided hands the output to
// the TensorIterator.
using at::Tensor;
using Base = at::native::structured_addcmul_out;

struct AddcmulFunctional final : Base {
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    outputs_[i] = strides.empty() ? at::empty(sizes, options)
                                  : at::empty_strided(sizes, strides, options);
    Base::set_output_raw_strided(i, sizes, strides, options);
  }
  const Tensor& maybe_get_output(int64_t i) override { return outputs_[i]; }
  std::array<Tensor, 1> outputs_;
};

struct AddcmulOut final : Base {
  explicit AddcmulOut(Tensor& out) : outputs_{std::ref(out)} {}
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    const Tensor& out = outputs_[i].get();
    TORCH_CHECK(options.device() == out.device(), "Expected out tensor to have device ",
                options.device(), ", but got ", out.device(), " instead");
    if (at::native::resize_output(out, sizes) && !strides.empty()) {
      out.as_strided_(sizes, strides);
    }
    Base::set_output_raw_strided(i, sizes, strides, options);
  }
  const Tensor& maybe_get_output(int64_t i) override { return outputs_[i]; }
  std::array<std::reference_wrapper<Tensor>, 1> outputs_;
};

struct AddcmulInplace final : Base {
  explicit AddcmulInplace(Tensor& self) : outputs_{std::ref(self)} {}
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    const Tensor& self = outputs_[i].get();
    TORCH_CHECK(sizes == self.sizes(), "Bad in-place call: input tensor size ", self.sizes(),
                " and output tensor size ", sizes, " should match");
    Base::set_output_raw_strided(i, sizes, strides, options);
  }
  const Tensor& maybe_get_output(int64_t i) override { return outputs_[i]; }
  std::array<std::reference_wrapper<Tensor>, 1> outputs_;
};

Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, const at::Scalar& value) {
  AddcmulFunctional op;
  op.meta(self, t1, t2, value);
  op.impl(self, t1, t2, value, op.outputs_[0]);  // -> addcmul_stub(PrivateUse1, ...)
  return std::move(op.outputs_[0]);
}

Tensor& addcmul_out(const Tensor& self, const Tensor& t1, const Tensor& t2,
                    const at::Scalar& value, Tensor& out) {
  AddcmulOut op(out);
  op.meta(self, t1, t2, value);
  op.impl(self, t1, t2, value, op.maybe_get_output(0));
  return out;
}

Tensor& addcmul_(Tensor& self, const Tensor& t1, const Tensor& t2, const at::Scalar& value) {
  AddcmulInplace op(self);
  op.meta(self, t1, t2, value);
  op.impl(self, t1, t2, value, op.maybe_get_output(0));
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_CAPTURABLE_IMPL(m, "addcmul", addcmul);
  OPENREG_CAPTURABLE_IMPL(m, "addcmul.out", addcmul_out);
  OPENREG_CAPTURABLE_IMPL(m, "addcmul_", addcmul_);
}

}  // namespace torch_openreg

// [docs:stub-register]
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(addcmul_stub, &torch_openreg::addcmul_kernel)
}  // namespace at::native
// [docs:stub-register:end]
