// Fused LSTM/GRU cells.
//
// On a PrivateUse1 device ATen's RNN code (aten/src/ATen/native/RNN.cpp) does
// not compute cells from linear + activations as on the CPU: like on CUDA it
// calls _thnn_fused_lstm_cell / _thnn_fused_gru_cell (and their backwards),
// which only CUDA implements. Without these kernels nn.LSTM, nn.GRU,
// nn.LSTMCell and nn.GRUCell fail on openreg. The math and the workspace
// layout follow the CUDA kernels, so the autograd formulas that consume the
// workspace work unchanged; each cell runs as one kernel on the device.
#include "aten/graph/CaptureHook.h"
#include "aten/core/DeviceCheck.h"
#include "aten/core/KernelView.h"

#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <torch/library.h>

namespace torch_openreg {
namespace {

at::Tensor opt(AliasSet& set, const std::optional<at::Tensor>& t) {
  return t && t->defined() ? set.alias(*t) : at::Tensor();
}

// (hy, cy, workspace); workspace = activated gates [i, f, g, o].
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  check_same_device("aten::_thnn_fused_lstm_cell",
                    {{"input_gates", input_gates}, {"hidden_gates", hidden_gates}, {"cx", cx},
                     {"input_bias", input_bias}, {"hidden_bias", hidden_bias}});
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(),
              "_thnn_fused_lstm_cell: input_gates ", input_gates.sizes(),
              " and hidden_gates ", hidden_gates.sizes(), " must have the same shape");
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.size(1) == 4 * cx.size(-1),
              "_thnn_fused_lstm_cell: gates must be [batch, 4 * hidden], got ",
              input_gates.sizes(), " for hidden size ", cx.size(-1));
  auto device = input_gates.device().index();
  AliasSet set(device);
  at::Tensor ig = set.alias(input_gates), hg = set.alias(hidden_gates), c = set.alias(cx);
  at::Tensor b1 = opt(set, input_bias), b2 = opt(set, hidden_bias);
  at::Tensor hy, cy, ws;
  launch_kernel(device, "aten::_thnn_fused_lstm_cell", [&] {
    at::Tensor gates = ig + hg;
    if (b1.defined()) gates = gates + b1 + b2;
    auto chunks = gates.chunk(4, 1);
    at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid();
    at::Tensor g = chunks[2].tanh(), o = chunks[3].sigmoid();
    cy = f * c + i * g;
    hy = o * cy.tanh();
    ws = at::cat({i, f, g, o}, 1);
  });
  return {set.unwrap(hy), set.unwrap(cy), set.unwrap(ws)};
}

// (grad_gates, grad_cx, grad_bias)
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  check_same_device("aten::_thnn_fused_lstm_cell_backward_impl",
                    {{"grad_hy", grad_hy}, {"grad_cy", grad_cy}, {"cx", cx}, {"cy", cy},
                     {"workspace", workspace}});
  auto device = workspace.device().index();
  AliasSet set(device);
  at::Tensor go = opt(set, grad_hy), goc = opt(set, grad_cy);
  at::Tensor c = set.alias(cx), cyy = set.alias(cy), ws = set.alias(workspace);
  at::Tensor grad_gates, grad_cx, grad_bias;
  launch_kernel(device, "aten::_thnn_fused_lstm_cell_backward_impl", [&] {
    auto chunks = ws.chunk(4, 1);
    const at::Tensor &i = chunks[0], &f = chunks[1], &g = chunks[2], &o = chunks[3];
    at::Tensor tanh_cy = cyy.tanh();
    at::Tensor zero = at::zeros_like(c);
    at::Tensor gh = go.defined() ? go : zero;
    at::Tensor gcx = gh * o * (1 - tanh_cy * tanh_cy) + (goc.defined() ? goc : zero);
    at::Tensor gig = gcx * g * (1 - i) * i;
    at::Tensor gfg = gcx * c * (1 - f) * f;
    at::Tensor gcg = gcx * i * (1 - g * g);
    at::Tensor gog = gh * tanh_cy * (1 - o) * o;
    grad_gates = at::cat({gig, gfg, gcg, gog}, 1);
    grad_cx = gcx * f;
    if (has_bias) grad_bias = grad_gates.sum(0);
  });
  return {set.unwrap(grad_gates), set.unwrap(grad_cx), set.unwrap(grad_bias)};
}

// (hy, workspace); workspace = [r, z, n, hx, hn + b_hn].
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  check_same_device("aten::_thnn_fused_gru_cell",
                    {{"input_gates", input_gates}, {"hidden_gates", hidden_gates}, {"hx", hx},
                     {"input_bias", input_bias}, {"hidden_bias", hidden_bias}});
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(),
              "_thnn_fused_gru_cell: input_gates ", input_gates.sizes(),
              " and hidden_gates ", hidden_gates.sizes(), " must have the same shape");
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.size(1) == 3 * hx.size(-1),
              "_thnn_fused_gru_cell: gates must be [batch, 3 * hidden], got ",
              input_gates.sizes(), " for hidden size ", hx.size(-1));
  auto device = input_gates.device().index();
  AliasSet set(device);
  at::Tensor ig = set.alias(input_gates), hg = set.alias(hidden_gates), h = set.alias(hx);
  at::Tensor b1 = opt(set, input_bias), b2 = opt(set, hidden_bias);
  at::Tensor hy, ws;
  launch_kernel(device, "aten::_thnn_fused_gru_cell", [&] {
    at::Tensor i_all = b1.defined() ? ig + b1 : ig;
    at::Tensor h_all = b2.defined() ? hg + b2 : hg;
    auto ic = i_all.chunk(3, 1), hc = h_all.chunk(3, 1);
    at::Tensor r = (ic[0] + hc[0]).sigmoid();
    at::Tensor z = (ic[1] + hc[1]).sigmoid();
    at::Tensor n = (ic[2] + r * hc[2]).tanh();
    hy = n + z * (h - n);
    ws = at::cat({r, z, n, h, hc[2]}, 1);
  });
  return {set.unwrap(hy), set.unwrap(ws)};
}

// (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  check_same_device("aten::_thnn_fused_gru_cell_backward",
                    {{"grad_hy", grad_hy}, {"workspace", workspace}});
  auto device = workspace.device().index();
  AliasSet set(device);
  at::Tensor go = set.alias(grad_hy), ws = set.alias(workspace);
  at::Tensor gi, gh, ghx, gbi, gbh;
  launch_kernel(device, "aten::_thnn_fused_gru_cell_backward", [&] {
    auto c = ws.chunk(5, 1);
    const at::Tensor &r = c[0], &z = c[1], &n = c[2], &hx = c[3], &hn = c[4];
    at::Tensor gz = go * (hx - n) * (1 - z) * z;
    ghx = go * z;
    at::Tensor gn = go * (1 - z) * (1 - n * n);
    at::Tensor ghn = gn * r;
    at::Tensor gr = gn * hn * (1 - r) * r;
    gi = at::cat({gr, gz, gn}, 1);
    gh = at::cat({gr, gz, ghn}, 1);
    if (has_bias) {
      gbi = gi.sum(0);
      gbh = gh.sum(0);
    }
  });
  return {set.unwrap(gi), set.unwrap(gh), set.unwrap(ghx), set.unwrap(gbi), set.unwrap(gbh)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_CAPTURABLE_IMPL(m, "_thnn_fused_lstm_cell", fused_lstm_cell);
  OPENREG_CAPTURABLE_IMPL(m, "_thnn_fused_lstm_cell_backward_impl", fused_lstm_cell_backward);
  OPENREG_CAPTURABLE_IMPL(m, "_thnn_fused_gru_cell", fused_gru_cell);
  OPENREG_CAPTURABLE_IMPL(m, "_thnn_fused_gru_cell_backward", fused_gru_cell_backward);
}

}  // namespace torch_openreg
