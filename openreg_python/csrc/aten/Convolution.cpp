// Convolution: ATen routes every non-CPU/CUDA/MKLDNN backend to the
// *_overrideable entry points, which a backend must implement. Here they run
// the CPU convolution (oneDNN/im2col) in place on device memory.
#include "DeviceCheck.h"
#include "KernelView.h"

#include <ATen/Functions.h>
#include <torch/library.h>

namespace torch_openreg {
namespace {

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
  launch_kernel(device, "aten::convolution_overrideable", [&] {
    out = at::convolution(in, w, b, stride, padding, dilation, transposed, output_padding, groups);
  });
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
  launch_kernel(device, "aten::convolution_backward_overrideable", [&] {
    r = at::convolution_backward(go, in, w, bias_sizes, stride, padding, dilation, transposed,
                                 output_padding, groups, output_mask);
  });
  return {set.unwrap(std::get<0>(r)), set.unwrap(std::get<1>(r)), set.unwrap(std::get<2>(r))};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
}

}  // namespace torch_openreg
