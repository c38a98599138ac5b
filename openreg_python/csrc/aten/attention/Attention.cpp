// Scaled dot-product attention on openreg: the fused-SDPA hook.
//
// torch.nn.functional.scaled_dot_product_attention is a composite operator.
// It asks `_fused_sdp_choice_stub` (a DispatchStub keyed on the device type)
// which backend to use and, for SDPBackend::overrideable, calls
// aten::_scaled_dot_product_fused_attention_overrideable, whose autograd
// formula calls ..._overrideable_backward. Both are "implement me" operators
// for PrivateUse1 backends. This file provides:
//
//   * the backend choice, registered both as the stub's PrivateUse1 kernel
//     (what the composite consults) and as the PrivateUse1 kernel of the
//     aten::_fused_sdp_choice operator (what torch._fused_sdp_choice asks);
//   * the forward and backward kernels: real attention (not placeholders),
//     run with ATen's CPU operators in place on device memory (zero-copy
//     aliases, KernelView.h) on the device's current stream.
//
// Dropout: the forward takes (seed, offset) from the device's Philox
// generator for as many positions as the mask has elements (B * H * L * S),
// and the mask is the bernoulli draw at those positions (the rule of
// Random.cpp). Both travel to the backward in the op's `philox_seed` and
// `philox_offset` outputs (CPU int64 scalars, as CUDA's flash attention keeps
// them outside graph capture); the backward regenerates the identical mask.
//
// Vendor: replace the bodies of attention_forward_kernel and
// attention_backward_kernel with your fused kernels; keep the checks, the
// choice function, the output contract (shapes/dtypes as in torch's meta
// function for this op) and the seed handling.
#include "aten/graph/CaptureHook.h"
#include "AttentionDropoutCache.h"
#include "aten/core/DeviceCheck.h"
#include "aten/core/KernelView.h"

#include "runtime/OpenRegGenerator.h"

#include <ATen/Context.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/SDPBackend.h>
#include <ATen/TensorOperators.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <torch/library.h>

#include <algorithm>
#include <deque>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <vector>

namespace torch_openreg {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention on openreg";

bool supported_dtype(c10::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

// ------------------------------------------------------------ backend choice

// Why the overrideable kernel cannot take these inputs ("" if it can). The
// kernel handles what the op's meta function describes: 3-D (H, L, E) or 4-D
// (B, H, L, E) dense floating tensors, key/value heads dividing the query
// heads (grouped-query attention), any broadcastable mask. Everything else
// goes to the math composite, which runs on openreg through the fallback.
std::string overrideable_unsupported(const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v, bool enable_gqa) {
  if (q.is_nested() || k.is_nested() || v.is_nested()) return "nested tensors";
  const auto d = q.dim();
  if ((d != 3 && d != 4) || k.dim() != d || v.dim() != d) {
    return "query, key and value must all be 3-D or 4-D";
  }
  if (!supported_dtype(q.scalar_type()) || k.scalar_type() != q.scalar_type() ||
      v.scalar_type() != q.scalar_type()) {
    return "query, key and value must share one of float32, float64, float16, bfloat16";
  }
  if (d == 4 && (k.size(0) != q.size(0) || v.size(0) != q.size(0))) {
    return "query, key and value must have the same batch size";
  }
  const auto hq = q.size(-3), hk = k.size(-3), hv = v.size(-3);
  if (hk != hv) return "key and value must have the same number of heads";
  // With enable_gqa=False the math path broadcasts heads (only hk == 1
  // works); with enable_gqa=True it repeats key/value heads. Both equal the
  // grouped computation below whenever hq % hk == 0.
  if (hq != hk && !(hk > 0 && hq % hk == 0 && (enable_gqa || hk == 1))) {
    return "the number of key/value heads must divide the number of query heads "
           "(and enable_gqa=True unless it is 1)";
  }
  return "";
}

// [docs:sdpa-choice]
int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key,
                         const at::Tensor& value, const std::optional<at::Tensor>& attn_mask,
                         double dropout_p, bool is_causal, std::optional<double> scale,
                         bool enable_gqa) {
  auto& ctx = at::globalContext();
  // ATen's default priority puts overrideable last, behind math; openreg
  // prefers its fused kernel unless the user set a priority order of their
  // own (sdpa_kernel(..., set_priority=True)).
  static constexpr std::array<at::SDPBackend, at::num_sdp_backends> kAtenDefault{
      at::SDPBackend::flash_attention, at::SDPBackend::efficient_attention,
      at::SDPBackend::math, at::SDPBackend::cudnn_attention, at::SDPBackend::overrideable};
  const auto order = ctx.sDPPriorityOrder();
  const bool default_order = order == kAtenDefault;
  const std::string why_not = overrideable_unsupported(query, key, value, enable_gqa);
  const bool overrideable_ok = ctx.userEnabledOverrideableSDP() && why_not.empty();
  if (default_order && overrideable_ok) return static_cast<int64_t>(at::SDPBackend::overrideable);
  for (auto backend : order) {
    if (backend == at::SDPBackend::overrideable && overrideable_ok) {
      return static_cast<int64_t>(at::SDPBackend::overrideable);
    }
    if (backend == at::SDPBackend::math && ctx.userEnabledMathSDP()) {
      return static_cast<int64_t>(at::SDPBackend::math);
    }
  }
  TORCH_CHECK(false, kOp, ": no enabled backend can run these inputs. openreg "
              "implements SDPBackend.OVERRIDEABLE and SDPBackend.MATH; ",
              ctx.userEnabledOverrideableSDP()
                  ? "OVERRIDEABLE cannot take them: " + why_not
                  : std::string("OVERRIDEABLE is disabled"),
              ctx.userEnabledMathSDP() ? "" : "; MATH is disabled", ".");
}
// [docs:sdpa-choice:end]

// ------------------------------------------------------------ input checks

struct Shape {
  bool batched;   // 4-D inputs (B, H, L, E); 3-D inputs are (H, L, E)
  int64_t B, Hq, Hkv, L, S, E, Ev;
};

Shape check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& bias, double dropout_p, const char* what) {
  TORCH_CHECK(q.defined() && k.defined() && v.defined(), what,
              ": query, key and value must be defined");
  TORCH_CHECK(is_openreg(q), what, ": query must be an openreg tensor, got ", q.device());
  auto same_device = [&](const at::Tensor& t, const char* name) {
    TORCH_CHECK(!t.defined() || t.device() == q.device(), what,
                ": expected all tensors on ", q.device(), ", but ", name, " is on ",
                t.device());
  };
  same_device(k, "key");
  same_device(v, "value");
  same_device(bias, "attn_mask");
  TORCH_CHECK(supported_dtype(q.scalar_type()), what,
              ": query dtype must be float32, float64, float16 or bfloat16, got ",
              q.scalar_type());
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              what, ": expected query, key and value to have the same dtype, but got "
              "query.dtype: ", q.scalar_type(), " key.dtype: ", k.scalar_type(),
              " and value.dtype: ", v.scalar_type(), " instead.");
  const auto d = q.dim();
  TORCH_CHECK((d == 3 || d == 4) && k.dim() == d && v.dim() == d, what,
              ": query, key and value must all be 3-D (H, L, E) or 4-D (B, H, L, E), got "
              "query ", q.sizes(), ", key ", k.sizes(), ", value ", v.sizes());
  Shape s{d == 4, d == 4 ? q.size(0) : 1, q.size(-3), k.size(-3),
          q.size(-2), k.size(-2), q.size(-1), v.size(-1)};
  TORCH_CHECK(!s.batched || (k.size(0) == s.B && v.size(0) == s.B), what,
              ": query, key and value must have the same batch size, got query ",
              q.sizes(), ", key ", k.sizes(), ", value ", v.sizes());
  TORCH_CHECK(k.size(-1) == s.E, what, ": key's last dimension (", k.size(-1),
              ") must equal query's (", s.E, ")");
  TORCH_CHECK(v.size(-2) == s.S && v.size(-3) == s.Hkv, what,
              ": key ", k.sizes(), " and value ", v.sizes(),
              " must agree in heads and sequence length");
  TORCH_CHECK(s.Hkv > 0 && s.Hq % s.Hkv == 0, what, ": the number of key/value heads (",
              s.Hkv, ") must divide the number of query heads (", s.Hq, ")");
  if (bias.defined()) {
    TORCH_CHECK(bias.scalar_type() == at::kBool || at::isFloatingType(bias.scalar_type()),
                what, ": attn_mask must be bool or floating point, got ", bias.scalar_type());
    const std::vector<int64_t> weights =
        d == 4 ? std::vector<int64_t>{s.B, s.Hq, s.L, s.S} : std::vector<int64_t>{s.Hq, s.L, s.S};
    TORCH_CHECK(at::is_expandable_to(bias.sizes(), weights), what, ": attn_mask of shape ",
                bias.sizes(), " is not broadcastable to the attention weights' shape ",
                c10::IntArrayRef(weights));
  }
  TORCH_CHECK(dropout_p >= 0. && dropout_p <= 1., what,
              ": dropout probability has to be between 0 and 1, but got ", dropout_p);
  return s;
}

double softmax_scale(std::optional<double> scale, int64_t head_dim) {
  return scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

// An attention kernel's work, for its width on a device thread (WideKernel).
int64_t attention_work(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return (q.numel() + k.numel() + v.numel()) * kMatmulWeight;
}

// ------------------------------------------------------------ the kernels
// Everything below runs inside launch_kernel on CPU aliases of device memory.

// Key/value heads repeated for grouped-query attention (as the math path's
// repeat_interleave on dim -3); a no-op without groups.
at::Tensor expand_heads(const at::Tensor& t, int64_t groups) {
  return groups == 1 ? t : t.repeat_interleave(groups, -3);
}

// The softmax over the last dimension, fully masked rows (all -inf) 0, as
// at::_safe_softmax computes it, in vectorised passes: ATen's softmax over a
// short last dimension runs scalar code (T5's attention, 12 keys: 52 us for a
// (4, 4, 12, 12) float32 tensor on one thread, against 20 here). The row's
// maximum is subtracted first, as ATen's kernel does, so large scores keep
// their precision (a forward's float32 logsumexp would not: exp(s - lse)
// loses 1e-5 relative where the scores reach a few hundred).
at::Tensor safe_softmax_lastdim(const at::Tensor& s) {
  at::Tensor m = s.amax(-1, /*keepdim=*/true);
  m.masked_fill_(m.isneginf(), 0);  // a fully masked row: exp(-inf - 0) = 0
  at::Tensor p = (s - m).exp_();
  // Every other row sums to at least 1 (its maximum's exp(0)); a fully
  // masked row sums to 0 and its probabilities stay 0.
  return p.div_(p.sum(-1, /*keepdim=*/true).clamp_min_(1));
}

// Attention scores with masks applied, and their softmax, in `cdt`:
// s = (q * scale) @ k^T + mask, causal positions above the diagonal -inf.
// Fully masked rows get probabilities 0 (as the math path's _safe_softmax).
struct Scores {
  at::Tensor qs, kx, s, p;
};

Scores scores_and_probs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& bias,
                        bool is_causal, double scale, int64_t groups, at::ScalarType cdt) {
  Scores r;
  r.qs = q.to(cdt).mul(scale);
  r.kx = expand_heads(k, groups).to(cdt);
  r.s = at::matmul(r.qs, r.kx.transpose(-2, -1));
  if (bias.defined()) {
    if (bias.scalar_type() == at::kBool) {
      r.s.masked_fill_(bias.logical_not(), -std::numeric_limits<double>::infinity());
    } else {
      r.s.add_(bias.to(cdt));
    }
  }
  if (is_causal) {
    // Top-left aligned, as the math path: query i sees keys 0..i.
    const auto L = r.s.size(-2), S = r.s.size(-1);
    auto allowed = at::ones({L, S}, r.s.options().dtype(at::kBool)).tril();
    r.s.masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  }
  r.p = safe_softmax_lastdim(r.s);
  return r;
}

// logsumexp over the last dimension of the scores `s`, in float32 (the op's
// contract), from the softmax `p` already computed: p = exp(s - lse), so at
// each row's largest entry lse = max(s) - log(max(p)), which is exact to
// rounding there (max(p) >= 1/L). Two reductions instead of at::logsumexp's
// four passes over the scores (max, subtract, exp, sum). Fully masked rows
// (max(p) = 0) get -inf, as logsumexp gives.
at::Tensor row_logsumexp(const at::Tensor& s, const at::Tensor& p) {
  at::Tensor smax = s.amax(-1);
  at::Tensor pmax = p.amax(-1);
  at::Tensor lse = smax.sub_(pmax.log());
  lse.masked_fill_(pmax.le(0), -std::numeric_limits<double>::infinity());
  return lse.to(at::kFloat);
}

double keep_scale(double dropout_p) { return dropout_p < 1.0 ? 1.0 / (1.0 - dropout_p) : 0.0; }

// An empty tensor shaped `sizes` whose dimensions are ordered in memory like
// `like`'s (torch's meta function for this op does the same), so eager and
// compiled outputs have the same strides.
at::Tensor empty_matching_layout(const at::Tensor& like, c10::IntArrayRef sizes,
                                 at::ScalarType dtype) {
  if (like.sizes() == sizes) return at::empty_like(like, like.options().dtype(dtype));
  std::vector<int64_t> order(like.dim());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
  std::vector<int64_t> strides(like.dim());
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = stride;
    stride *= sizes[*it];
  }
  return at::empty_strided(sizes, strides, like.options().dtype(dtype));
}

// `value` converted to `dtype` in the layout empty_matching_layout gives.
at::Tensor with_layout_of(const at::Tensor& value, const at::Tensor& like, at::ScalarType dtype) {
  at::Tensor out = empty_matching_layout(like, value.sizes(), dtype);
  if (value.scalar_type() == dtype && value.strides() == out.strides()) return value;
  out.copy_(value);
  return out;
}

struct ForwardResult {
  at::Tensor out, lse, debug;
};

// [docs:sdpa-forward]
ForwardResult attention_forward_kernel(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& bias,
                                       double dropout_p, bool is_causal, double scale,
                                       std::optional<DropoutRng> seed, bool return_debug,
                                       const KeepMaskCache::Key& cache_key) {
  const auto cdt = at::toOpMathType(q.scalar_type());  // bf16/fp16 compute in fp32
  const int64_t groups = q.size(-3) / k.size(-3);
  Scores sc = scores_and_probs(q, k, bias, is_causal, scale, groups, cdt);
  at::Tensor weights = sc.p;
  if (seed) {
    at::Tensor keep = keep_mask(sc.p, dropout_p, *seed);
    keep_mask_cache().put(cache_key, {keep, sc.p});
    weights = (sc.p * keep).mul_(keep_scale(dropout_p));
  }
  at::Tensor out = at::matmul(weights, expand_heads(v, groups).to(cdt));
  ForwardResult r;
  r.out = with_layout_of(out, q, q.scalar_type());
  r.lse = row_logsumexp(sc.s, sc.p);
  if (return_debug) r.debug = weights.to(q.scalar_type());
  return r;
}
// [docs:sdpa-forward:end]

struct BackwardResult {
  at::Tensor dq, dk, dv, dbias;
};

// ------------------------------------------------------------ small attention
// The backward of small float32 attention, one pass per (batch, head) in
// plain loops over the tensors' memory. Each ATen operator costs a few
// microseconds of dispatch and set-up whatever its size, and the generic
// backward below takes about 25 of them: at T5's sizes (4 x 4 heads, 12
// positions, 8 features, a trainable position bias) that was about 110 us a
// call, most of a compiled T5 step's gap to the CPU's (whose Inductor graph
// fuses the math path instead). The same arithmetic as the generic kernel
// (scores, safe softmax, dP = dOut V^T, dS = P (dP - rowsum(P dP))), without
// dropout or grouped heads, for sizes where that overhead dominates; larger
// attention keeps the BLAS-backed generic kernel.
struct SmallShape {
  int64_t B, H, L, S, E, Ev;
};

bool small_backward_applies(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& bias, bool dropout) {
  if (dropout || q.scalar_type() != at::kFloat || q.dim() != 4) return false;
  if (k.size(1) != q.size(1) || dout.scalar_type() != at::kFloat) return false;
  if (bias.defined() && bias.scalar_type() != at::kFloat) return false;
  for (const at::Tensor* t : {&dout, &q, &k, &v}) {
    if (t->stride(-1) != 1) return false;
  }
  const int64_t L = q.size(2), S = k.size(2);
  return L * S <= 4096 && q.size(3) <= 128 && v.size(3) <= 128 && q.numel() > 0 &&
         k.numel() > 0;
}

// A strided 4-D float tensor indexed as [b][h][row][col] (col unit-stride,
// except for the bias, whose broadcast dimensions have stride 0).
struct View4 {
  const float* data;
  int64_t s0, s1, s2, s3;
  explicit View4(const at::Tensor& t)
      : data(t.data_ptr<float>()), s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)),
        s3(t.stride(3)) {}
  const float* row(int64_t b, int64_t h, int64_t i) const { return data + b * s0 + h * s1 + i * s2; }
};

BackwardResult small_attention_backward(const at::Tensor& dout, const at::Tensor& q,
                                        const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& bias, bool is_causal, double scale,
                                        std::array<bool, 4> need) {
  const SmallShape n{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  const auto opts = q.options();
  at::Tensor dq = at::empty({n.B, n.H, n.L, n.E}, opts);
  at::Tensor dk = at::empty({n.B, n.H, n.S, n.E}, opts);
  at::Tensor dv = at::empty({n.B, n.H, n.S, n.Ev}, opts);
  const bool bias_grad = need[3] && bias.defined();
  at::Tensor ds_all = bias_grad ? at::empty({n.B, n.H, n.L, n.S}, opts) : at::Tensor();
  const View4 Q(q), K(k), V(v), G(dout);
  std::optional<View4> M;
  at::Tensor bias4;
  if (bias.defined()) {
    bias4 = bias.expand({n.B, n.H, n.L, n.S});
    M.emplace(bias4);
  }
  float* dqp = dq.data_ptr<float>();
  float* dkp = dk.data_ptr<float>();
  float* dvp = dv.data_ptr<float>();
  float* dsp = bias_grad ? ds_all.data_ptr<float>() : nullptr;
  const float sc = static_cast<float>(scale);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  at::parallel_for(0, n.B * n.H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> p(n.L * n.S), ds(n.L * n.S);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / n.H, h = bh % n.H;
      // P: the scores and their softmax, row by row (fully masked rows 0).
      for (int64_t i = 0; i < n.L; ++i) {
        const float* qi = Q.row(b, h, i);
        float* pi = p.data() + i * n.S;
        float mx = kNegInf;
        for (int64_t j = 0; j < n.S; ++j) {
          float s = kNegInf;
          if (!(is_causal && j > i)) {
            const float* kj = K.row(b, h, j);
            float acc = 0.f;
            for (int64_t e = 0; e < n.E; ++e) acc += qi[e] * kj[e];
            s = acc * sc;
            if (M) s += M->row(b, h, i)[j * M->s3];
          }
          pi[j] = s;
          mx = std::max(mx, s);
        }
        if (mx == kNegInf) {
          std::fill(pi, pi + n.S, 0.f);
          continue;
        }
        float sum = 0.f;
        for (int64_t j = 0; j < n.S; ++j) sum += (pi[j] = std::exp(pi[j] - mx));
        const float inv = 1.f / sum;
        for (int64_t j = 0; j < n.S; ++j) pi[j] *= inv;
      }
      // dS = P * (dP - rowsum(P * dP)), dP = dOut V^T.
      for (int64_t i = 0; i < n.L; ++i) {
        const float* gi = G.row(b, h, i);
        const float* pi = p.data() + i * n.S;
        float* dsi = ds.data() + i * n.S;
        float dot = 0.f;
        for (int64_t j = 0; j < n.S; ++j) {
          const float* vj = V.row(b, h, j);
          float acc = 0.f;
          for (int64_t e = 0; e < n.Ev; ++e) acc += gi[e] * vj[e];
          dsi[j] = acc;
          dot += pi[j] * acc;
        }
        for (int64_t j = 0; j < n.S; ++j) dsi[j] = pi[j] * (dsi[j] - dot);
      }
      // dQ = scale dS K, dK = scale dS^T Q, dV = P^T dOut.
      float* dqb = dqp + bh * n.L * n.E;
      float* dkb = dkp + bh * n.S * n.E;
      float* dvb = dvp + bh * n.S * n.Ev;
      std::fill(dkb, dkb + n.S * n.E, 0.f);
      std::fill(dvb, dvb + n.S * n.Ev, 0.f);
      for (int64_t i = 0; i < n.L; ++i) {
        const float* qi = Q.row(b, h, i);
        const float* gi = G.row(b, h, i);
        const float* pi = p.data() + i * n.S;
        const float* dsi = ds.data() + i * n.S;
        float* dqi = dqb + i * n.E;
        std::fill(dqi, dqi + n.E, 0.f);
        for (int64_t j = 0; j < n.S; ++j) {
          const float* kj = K.row(b, h, j);
          const float d = dsi[j], pij = pi[j];
          float* dkj = dkb + j * n.E;
          float* dvj = dvb + j * n.Ev;
          for (int64_t e = 0; e < n.E; ++e) {
            dqi[e] += d * kj[e];
            dkj[e] += d * qi[e];
          }
          for (int64_t e = 0; e < n.Ev; ++e) dvj[e] += pij * gi[e];
        }
        for (int64_t e = 0; e < n.E; ++e) dqi[e] *= sc;
      }
      for (int64_t x = 0; x < n.S * n.E; ++x) dkb[x] *= sc;
      if (dsp) std::copy(ds.begin(), ds.end(), dsp + bh * n.L * n.S);
    }
  });
  BackwardResult r;
  if (need[0]) r.dq = with_layout_of(dq, q, q.scalar_type());
  if (need[1]) r.dk = with_layout_of(dk, k, k.scalar_type());
  if (need[2]) r.dv = with_layout_of(dv, v, v.scalar_type());
  if (bias_grad) {
    r.dbias = with_layout_of(ds_all.sum_to_size(bias.sizes()), bias, bias.scalar_type());
  }
  return r;
}

BackwardResult attention_backward_kernel(const at::Tensor& dout, const at::Tensor& q,
                                         const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& bias, double dropout_p,
                                         bool is_causal, double scale,
                                         std::optional<DropoutRng> seed,
                                         std::array<bool, 4> need,
                                         const KeepMaskCache::Key& cache_key) {
  // logsumexp is float32 by the op's contract, too coarse to rebuild float64
  // probabilities as exp(s - lse); recomputing the softmax as the math path
  // does keeps the CPU's numbers in every dtype.
  const auto cdt = at::toOpMathType(q.scalar_type());
  const int64_t groups = q.size(-3) / k.size(-3);
  if (small_backward_applies(dout, q, k, v, bias, seed.has_value())) {
    return small_attention_backward(dout, q, k, v, bias, is_causal, scale, need);
  }
  KeepMaskCache::Entry saved;
  if (seed) saved = keep_mask_cache().take(cache_key);
  Scores sc;
  if (saved.probs.defined() && saved.probs.scalar_type() == cdt) {
    // The forward's probabilities: no second q @ k^T and softmax.
    sc.qs = q.to(cdt).mul(scale);
    sc.kx = expand_heads(k, groups).to(cdt);
    sc.p = saved.probs;
  } else {
    sc = scores_and_probs(q, k, bias, is_causal, scale, groups, cdt);
  }
  at::Tensor keep_scaled;  // mask / (1 - p): what forward multiplied P by
  if (seed) {
    at::Tensor keep = saved.keep;
    if (!keep.defined() || keep.sizes() != sc.p.sizes()) keep = keep_mask(sc.p, dropout_p, *seed);
    keep_scaled = keep.to(cdt).mul_(keep_scale(dropout_p));
  }
  at::Tensor g = dout.to(cdt);
  at::Tensor vx = expand_heads(v, groups).to(cdt);

  // out = (P * keep) @ V  =>  dV = (P * keep)^T @ dOut, dP = (dOut @ V^T) * keep
  at::Tensor weights = seed ? sc.p * keep_scaled : sc.p;
  at::Tensor dp = at::matmul(g, vx.transpose(-2, -1));
  if (seed) dp.mul_(keep_scaled);
  // softmax backward: dS = P * (dP - rowsum(dP * P)); masked entries have P = 0.
  // Three vectorised passes: ATen's _softmax_backward_data over a short last
  // dimension runs scalar code (17 us against 8 for T5's (4, 4, 12, 12)).
  at::Tensor ds = dp.sub_((dp * sc.p).sum(-1, /*keepdim=*/true)).mul_(sc.p);

  auto fold_groups = [&](const at::Tensor& t) {
    // Sum the gradient of each repeated key/value head back into its group.
    if (groups == 1) return t;
    auto sizes = t.sizes().vec();
    const int64_t h = sizes[sizes.size() - 3];
    sizes[sizes.size() - 3] = h / groups;
    sizes.insert(sizes.end() - 2, groups);
    return t.reshape(sizes).sum(-3);
  };
  BackwardResult r;
  if (need[0]) r.dq = with_layout_of(at::matmul(ds, sc.kx).mul_(scale), q, q.scalar_type());
  if (need[1]) {
    r.dk = with_layout_of(fold_groups(at::matmul(ds.transpose(-2, -1), sc.qs)), k,
                          k.scalar_type());
  }
  if (need[2]) {
    r.dv = with_layout_of(fold_groups(at::matmul(weights.transpose(-2, -1), g)), v,
                          v.scalar_type());
  }
  if (need[3] && bias.defined() && bias.scalar_type() != at::kBool) {
    // The mask was broadcast onto the scores: reduce back to its shape.
    r.dbias = with_layout_of(ds.sum_to_size(bias.sizes()), bias, bias.scalar_type());
  }
  return r;
}

// ------------------------------------------------------------ the CPU's flash kernel
// Where the CPU itself would run its fused flash-attention kernel (no
// dropout, float32/bf16/fp16, 4-D inputs with equal head counts and head
// dims, unit-stride last dims), openreg runs that same kernel in place: the
// results are the CPU's bit for bit and it is several times faster than the
// generic kernels above (which remain for dropout, float64, grouped-query,
// 3-D inputs and gradients of a float mask). The choice depends only on the
// inputs, so a backward always takes the path its forward took.
// Vendor: this is where a device with several attention kernels picks one.
bool use_cpu_flash(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& bias, double dropout_p) {
  const auto t = q.scalar_type();
  if (dropout_p != 0.0 || !(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf)) return false;
  if (q.dim() != 4 || q.size(1) != k.size(1) || v.size(-1) != q.size(-1)) return false;
  if (q.stride(-1) != 1 || k.stride(-1) != 1 || v.stride(-1) != 1) return false;
  if (q.numel() == 0 || k.numel() == 0) return false;
  if (bias.defined() && bias.scalar_type() != at::kBool && bias.scalar_type() != t) return false;
  return true;
}

// ------------------------------------------------------------ the operators

// Takes the mask's place in the device generator's stream: `n` positions.
DropoutRng draw_dropout_rng(c10::DeviceIndex device, uint64_t n) {
  const auto [seed, offset] = unpack(takePhiloxState(std::nullopt, device, n));
  return {seed, offset};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt,
           at::Tensor, at::Tensor, at::Tensor>
sdpa_overrideable(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                  const std::optional<at::Tensor>& attn_bias, double dropout_p,
                  bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  check_same_device("aten::_scaled_dot_product_fused_attention_overrideable",
                    {{"query", query}, {"key", key}, {"value", value}, {"attn_bias", attn_bias}});
  const at::Tensor bias = attn_bias.value_or(at::Tensor());
  const Shape s = check_inputs(query, key, value, bias, dropout_p,
                               "_scaled_dot_product_fused_attention_overrideable");
  const auto device = query.device().index();
  const double sc = softmax_scale(scale, s.E);

  // [docs:sdpa-seed]
  std::optional<DropoutRng> seed;
  if (dropout_p > 0.0) {
    seed = draw_dropout_rng(device, static_cast<uint64_t>(s.B * s.Hq * s.L * s.S));
  }
  // CPU scalars made before the launch: host memory, readable by the backward
  // without a device synchronisation.
  const DropoutRng rng = seed.value_or(DropoutRng{});
  at::Tensor philox_seed = at::scalar_tensor(static_cast<int64_t>(rng.seed),
                                             at::TensorOptions().dtype(at::kLong));
  at::Tensor philox_offset = at::scalar_tensor(static_cast<int64_t>(rng.offset),
                                               at::TensorOptions().dtype(at::kLong));
  // [docs:sdpa-seed:end]

  const auto cache_key = KeepMaskCache::key(rng, query, key, value, bias);
  AliasSet set(device);
  at::Tensor q = set.alias(query), k = set.alias(key), v = set.alias(value);
  at::Tensor b = set.alias(bias);
  ForwardResult r;
  if (use_cpu_flash(query, key, value, bias, dropout_p) && !return_debug_mask) {
    launch_kernel(device, "aten::_scaled_dot_product_fused_attention_overrideable", [&] {
      std::optional<at::Tensor> mask;
      if (b.defined()) mask = b;
      auto [o, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, is_causal,
                                                                     mask, sc);
      r.out = with_layout_of(o, q, q.scalar_type());
      // Contiguous (B, H, L), as the op's meta function declares: the CPU
      // kernel returns it transposed, and compiled graphs check the strides.
      r.lse = lse.to(at::kFloat).contiguous();
    }, attention_work(query, key, value));
    return {set.unwrap(r.out), set.unwrap(r.lse), at::Tensor(), at::Tensor(),
            c10::SymInt(s.L), c10::SymInt(s.S), philox_seed, philox_offset, at::Tensor()};
  }
  launch_kernel(device, "aten::_scaled_dot_product_fused_attention_overrideable", [&] {
    r = attention_forward_kernel(s.batched ? q : q.unsqueeze(0),
                                 s.batched ? k : k.unsqueeze(0),
                                 s.batched ? v : v.unsqueeze(0), b, dropout_p, is_causal, sc,
                                 seed, return_debug_mask, cache_key);
    if (!s.batched) {
      r.out = r.out.squeeze(0);
      if (r.debug.defined()) r.debug = r.debug.squeeze(0);
    }
  }, attention_work(query, key, value));
  // cum_seq_q/k are for nested (ragged) inputs, which this kernel does not
  // take: undefined, as in the meta function.
  return {set.unwrap(r.out), set.unwrap(r.lse), at::Tensor(), at::Tensor(),
          c10::SymInt(s.L), c10::SymInt(s.S), philox_seed, philox_offset,
          set.unwrap(r.debug)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_overrideable_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& cum_seq_q,
    const at::Tensor& cum_seq_k, int64_t max_q, int64_t max_k, double dropout_p,
    bool is_causal, const at::Tensor& philox_seed, const at::Tensor& philox_offset,
    std::optional<double> scale) {
  if (!grad_out.defined()) return {};
  check_same_device("aten::_scaled_dot_product_fused_attention_overrideable_backward",
                    {{"grad_out", grad_out}, {"query", query}, {"key", key}, {"value", value},
                     {"attn_bias", attn_bias}, {"out", out}, {"logsumexp", logsumexp}});
  const Shape s = check_inputs(query, key, value, attn_bias, dropout_p,
                               "_scaled_dot_product_fused_attention_overrideable_backward");
  TORCH_CHECK(grad_out.device() == query.device(),
              "_scaled_dot_product_fused_attention_overrideable_backward: grad_out is on ",
              grad_out.device(), ", query on ", query.device());
  {
    auto expected = query.sizes().vec();
    expected.back() = s.Ev;
    TORCH_CHECK(grad_out.sizes() == c10::IntArrayRef(expected),
                "_scaled_dot_product_fused_attention_overrideable_backward: grad_out must have "
                "the output's shape ", c10::IntArrayRef(expected), ", got ", grad_out.sizes());
  }
  std::optional<DropoutRng> seed;
  if (dropout_p > 0.0) {
    TORCH_CHECK(philox_seed.defined() && philox_seed.numel() == 1 && philox_offset.defined() &&
                    philox_offset.numel() == 1,
                "_scaled_dot_product_fused_attention_overrideable_backward: dropout_p > 0 "
                "needs the philox_seed and philox_offset returned by the forward");
    seed = DropoutRng{static_cast<uint64_t>(philox_seed.cpu().item<int64_t>()),
                      static_cast<uint64_t>(philox_offset.cpu().item<int64_t>())};
  }
  const auto device = query.device().index();
  const double sc = softmax_scale(scale, s.E);

  const auto cache_key = KeepMaskCache::key(seed.value_or(DropoutRng{}), query, key, value,
                                            attn_bias);
  AliasSet set(device);
  at::Tensor g = set.alias(grad_out), q = set.alias(query), k = set.alias(key),
             v = set.alias(value), b = set.alias(attn_bias);
  BackwardResult r;
  // A float mask that needs its gradient takes the generic kernel: the flash
  // backward does not produce one (its recomputation matches the forward).
  const bool mask_grad = grad_input_mask[3] && attn_bias.defined() &&
                         attn_bias.scalar_type() != at::kBool;
  if (use_cpu_flash(query, key, value, attn_bias, dropout_p) && !mask_grad) {
    at::Tensor o = set.alias(out), lse = set.alias(logsumexp);
    launch_kernel(device, "aten::_scaled_dot_product_fused_attention_overrideable_backward", [&] {
      std::optional<at::Tensor> mask;
      if (b.defined()) mask = b;
      auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          g, q, k, v, o, lse, 0.0, is_causal, mask, sc);
      if (grad_input_mask[0]) r.dq = with_layout_of(dq, q, q.scalar_type());
      if (grad_input_mask[1]) r.dk = with_layout_of(dk, k, k.scalar_type());
      if (grad_input_mask[2]) r.dv = with_layout_of(dv, v, v.scalar_type());
    }, attention_work(query, key, value));
    return {set.unwrap(r.dq), set.unwrap(r.dk), set.unwrap(r.dv), at::Tensor()};
  }
  launch_kernel(device, "aten::_scaled_dot_product_fused_attention_overrideable_backward", [&] {
    auto batch = [&](const at::Tensor& t) { return s.batched ? t : t.unsqueeze(0); };
    r = attention_backward_kernel(batch(g), batch(q), batch(k), batch(v), b, dropout_p,
                                  is_causal, sc, seed, grad_input_mask, cache_key);
    if (!s.batched) {
      if (r.dq.defined()) r.dq = r.dq.squeeze(0);
      if (r.dk.defined()) r.dk = r.dk.squeeze(0);
      if (r.dv.defined()) r.dv = r.dv.squeeze(0);
    }
  }, attention_work(query, key, value));
  return {set.unwrap(r.dq), set.unwrap(r.dk), set.unwrap(r.dv), set.unwrap(r.dbias)};
}

}  // namespace

// [docs:sdpa-register]
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  OPENREG_CAPTURABLE_IMPL(m, "_scaled_dot_product_fused_attention_overrideable", sdpa_overrideable);
  OPENREG_CAPTURABLE_IMPL(m, "_scaled_dot_product_fused_attention_overrideable_backward", sdpa_overrideable_backward);
}

}  // namespace torch_openreg

// The composite scaled_dot_product_attention consults this DispatchStub, not
// the aten::_fused_sdp_choice operator: without it every PrivateUse1 call
// takes the math path. The macro names the stub unqualified, hence at::native.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_openreg::fused_sdp_choice)
}  // namespace at::native
// [docs:sdpa-register:end]
