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
#include "StubKernels.h"

#include "KernelView.h"

#include <ATen/Dispatch.h>
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

std::atomic<int64_t> g_addcmul_calls{0};

// [docs:stub-kernel]
// out = self + value * tensor1 * tensor2 over a TensorIterator whose data
// pointers are device addresses (operand 0 is the output).
// Vendor: launch your device's elementwise kernel with these pointers and
// strides instead of the host loop.
void addcmul_kernel(at::TensorIteratorBase& iter, const at::Scalar& value) {
  g_addcmul_calls.fetch_add(1, std::memory_order_relaxed);
  constexpr int kOperands = 4;
  TORCH_INTERNAL_ASSERT(iter.ntensors() == kOperands);
  const auto device = iter.device(0).index();
  // Device operands are reached through the kernel view of device memory;
  // CPU scalars (0-dim CPU tensors TensorIterator allows) are host memory.
  std::array<intptr_t, kOperands> shift{};
  std::array<at::ScalarType, kOperands> dtype{};
  for (int k = 0; k < kOperands; ++k) {
    shift[k] = iter.device(k).is_privateuseone() ? kernel_view_offset(device) : 0;
    dtype[k] = iter.dtype(k);
  }
  launch_kernel(device, "addcmul", [&] {
    AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND2(at::kHalf, at::kBFloat16, iter.common_dtype(),
                                           "openreg_addcmul", [&] {
      using opmath_t = at::opmath_type<scalar_t>;
      const opmath_t v = value.to<opmath_t>();
      // Unlike on the CPU, TensorIterator does not make same-dtype copies of
      // device operands: mixed dtypes are cast element by element (as CUDA's
      // "dynamic casting" does).
      const bool uniform = std::all_of(dtype.begin(), dtype.end(), [&](at::ScalarType t) {
        return t == c10::CppTypeToScalarType<scalar_t>::value;
      });
      auto load = [&](int k, const char* p) -> opmath_t {
        return uniform ? opmath_t(*reinterpret_cast<const scalar_t*>(p))
                       : c10::fetch_and_cast<opmath_t>(dtype[k], p);
      };
      iter.for_each([&](char** data, const int64_t* strides, int64_t n0, int64_t n1) {
        for (int64_t j = 0; j < n1; ++j) {
          std::array<char*, kOperands> p;
          for (int k = 0; k < kOperands; ++k) p[k] = data[k] + shift[k] + j * strides[kOperands + k];
          for (int64_t i = 0; i < n0; ++i) {
            const opmath_t r = load(1, p[1]) + v * load(2, p[2]) * load(3, p[3]);
            if (uniform) {
              *reinterpret_cast<scalar_t*>(p[0]) = static_cast<scalar_t>(r);
            } else {
              c10::cast_and_store<opmath_t>(dtype[0], p[0], r);
            }
            for (int k = 0; k < kOperands; ++k) p[k] += strides[k];
          }
        }
      });
    });
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

int64_t addcmul_stub_calls() { return g_addcmul_calls.load(std::memory_order_relaxed); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("addcmul", TORCH_FN(addcmul));
  m.impl("addcmul.out", TORCH_FN(addcmul_out));
  m.impl("addcmul_", TORCH_FN(addcmul_));
}

}  // namespace torch_openreg

// [docs:stub-register]
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(addcmul_stub, &torch_openreg::addcmul_kernel)
}  // namespace at::native
// [docs:stub-register:end]
