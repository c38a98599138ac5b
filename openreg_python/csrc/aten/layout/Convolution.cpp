// Convolution: ATen routes every non-CPU/CUDA/MKLDNN backend to the
// *_overrideable entry points, which a backend must implement. Here they run
// the CPU convolution (oneDNN/im2col) in place on device memory.
#include "aten/graph/CaptureHook.h"
#include "aten/core/DeviceCheck.h"
#include "aten/core/KernelView.h"

#include <ATen/Functions.h>
#include <ATen/native/ConvUtils.h>
#include <torch/library.h>

namespace torch_openreg {
namespace {

// [docs:conv-memory-format]
// The layout of a convolution's results is the one its meta function
// promises, not the CPU kernel's. torch.compile plans with FakeTensor's
// answer, which for a device on the *_overrideable path is
// _determine_backend_memory_format(input, weight, Overrideable)
// (torch/_subclasses/fake_impls.py), and Inductor asserts the sizes and
// strides of every kernel it calls. The CPU's oneDNN kernel instead answers
// channels_last whenever the input or the weight is channels_last (Inductor's
// layout optimisation makes weights channels_last). Asking ATen the same
// question keeps the two equal on every release. Vendor: keep this; if your
// kernels prefer another layout, say so to PyTorch's meta function instead.
at::MemoryFormat promised_format(const at::Tensor& input, const at::Tensor& weight) {
  return at::native::_determine_backend_memory_format(input, weight,
                                                      at::native::ConvBackend::Overrideable);
}

at::Tensor in_format(at::Tensor t, at::MemoryFormat fmt) {
  if (!t.defined() || t.dim() < 4 || t.is_contiguous(fmt)) return t;
  return t.contiguous(fmt);
}
// [docs:conv-memory-format:end]

// [docs:conv-weight-format]
// The CPU kernel computes in channels_last when the input *or* the weight is
// channels_last, reordering the other operands, and its result would then
// be reordered back to the promised layout. Where the promise is contiguous
// and only the weight is channels_last (what Inductor's layout optimisation
// makes of an openreg conv graph, whose convolutions FakeTensor promises
// contiguous), the weight is brought to
// the promised layout instead: one small copy where there would be three
// of the activations (the input in, the result out; grad_input in the backward).
at::Tensor weight_for(const at::Tensor& w, const at::Tensor& input, at::MemoryFormat fmt) {
  if (fmt != at::MemoryFormat::Contiguous || w.dim() < 4 || w.is_contiguous()) return w;
  if (input.suggest_memory_format() != at::MemoryFormat::Contiguous) return w;
  return w.contiguous();
}
// [docs:conv-weight-format:end]

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding,
                                    c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  check_same_device("aten::convolution_overrideable",
                    {{"input", input}, {"weight", weight}, {"bias", bias}});
  auto device = input.device().index();
  AliasSet set(device);
  at::Tensor in = set.alias(input), w = set.alias(weight);
  std::optional<at::Tensor> b;
  if (bias && bias->defined()) b = set.alias(*bias);
  at::Tensor out;
  const auto fmt = promised_format(input, weight);
  launch_kernel(device, "aten::convolution_overrideable", [&] {
    out = in_format(at::convolution(in, weight_for(w, in, fmt), b, stride, padding, dilation,
                                    transposed, output_padding, groups),
                    fmt);
  }, (input.numel() + weight.numel()) * kMatmulWeight);
  return set.unwrap(out);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    bool transposed, c10::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> output_mask) {
  check_same_device("aten::convolution_backward_overrideable",
                    {{"grad_output", grad_output}, {"input", input}, {"weight", weight}});
  auto device = input.device().index();
  AliasSet set(device);
  at::Tensor go = set.alias(grad_output), in = set.alias(input), w = set.alias(weight);
  std::tuple<at::Tensor, at::Tensor, at::Tensor> r;
  std::vector<int64_t> bias_sizes{weight.size(transposed ? 1 : 0) * (transposed ? groups : 1)};
  const auto fmt = promised_format(input, weight);
  launch_kernel(device, "aten::convolution_backward_overrideable", [&] {
    r = at::convolution_backward(go, in, weight_for(w, in, fmt), bias_sizes,
                                 stride, padding, dilation, transposed, output_padding, groups,
                                 output_mask);
    std::get<0>(r) = in_format(std::get<0>(r), fmt);  // as FakeTensor: grad_input and
    std::get<1>(r) = in_format(std::get<1>(r), fmt);  // grad_weight in the promised format
  }, (grad_output.numel() + input.numel() + weight.numel()) * kMatmulWeight);
  return {set.unwrap(std::get<0>(r)), set.unwrap(std::get<1>(r)), set.unwrap(std::get<2>(r))};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_CAPTURABLE_IMPL(m, "convolution_overrideable", convolution_overrideable);
  OPENREG_CAPTURABLE_IMPL(m, "convolution_backward_overrideable", convolution_backward_overrideable);
}

}  // namespace torch_openreg
