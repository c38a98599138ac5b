// Results in the layout their meta function promises.
//
// [docs:meta-layout]
// torch.compile plans every buffer with FakeTensor, that is with each
// operator's meta function, and Inductor asserts the sizes and strides of
// the results of every kernel it calls (assert_size_stride). A real
// device's kernels return what their meta functions say. openreg's kernels
// are ATen's CPU kernels, and for a few operators the CPU lays its results
// out otherwise: a broadcast binary op keeps a transposed operand's layout
// where the Python reference that is its meta function does not, a padding
// or shuffle of a channels_last input stays channels_last where the meta
// function promises a contiguous result, nonzero_static answers row-major
// where the meta function (and CUDA) answer column-major, batch norm in
// eval mode returns empty save_mean/save_invstd where the meta function
// (and CUDA) return the running statistics' (C,).
//
// The operators of kPromisedLayout run the boxed fallback's CPU kernel and
// then bring each fresh result to the meta function's geometry: the meta
// function runs on meta twins of the arguments (once per argument geometry
// and thread: the answer is cached), and a result whose sizes match but
// whose strides differ (in a dimension longer than 1, as Inductor compares)
// is copied into a tensor laid out as promised. The list is what the OpInfo
// sweep of tests/ops finds (tests/ops/test_opinfo.py compares every result
// with FakeTensor's); an operator the sweep flags goes here.
// Vendor: your kernels should write the promised layout directly; where one
// cannot, this is the place for it.
// [docs:meta-layout:end]
#include "MetaLayout.h"

#include "aten/graph/Graph.h"
#include "aten/graph/CaptureHook.h"
#include "aten/graph/GraphCapture.h"
#include "aten/core/KernelView.h"
#include "aten/core/StackArgs.h"

#include <ATen/Functions.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/flat_hash_map.h>
#include <torch/library.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace torch_openreg {
namespace {

struct Geometry {
  std::vector<int64_t> sizes, strides;
};
// One entry per result of the operator: the meta function's geometry of a
// tensor result, or nothing (not a tensor, or the meta function could not
// tell).
using Promise = std::vector<std::optional<Geometry>>;

// [docs:meta-layout-table]
// The operators (schema names without "aten::") whose CPU kernels lay
// results out otherwise than their meta functions.
constexpr const char* kPromisedLayout[] = {
    // Broadcast binary elementwise: the meta function is a Python reference.
    "copysign.Tensor", "div.Tensor_mode", "floor_divide", "ldexp.Tensor", "logaddexp",
    "logical_and", "logical_or", "logical_xor", "heaviside",
    // Batch norm: the output keeps the input's layout; in eval mode the
    // saved statistics are (C,) (see eval_statistics).
    "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit.no_stats",
    "_batch_norm_with_update",
    // channels_last in, contiguous out.
    "reflection_pad3d", "replication_pad3d", "pixel_shuffle", "channel_shuffle",
    "native_channel_shuffle", "max_unpool2d",
    // Column-major (n, ndim), as CUDA's.
    "nonzero_static",
    // Laid out as its first operand.
    "nll_loss2d_forward",
};
// [docs:meta-layout-table:end]

// Batch norm in eval mode, arguments (input, weight, bias, running_mean,
// running_var, training, momentum, eps): the CPU returns empty save_mean and
// save_invstd; the meta function (torch._decomp's native_batch_norm_helper,
// "CPU and CUDA give different shapes") returns, off the CPU, the running
// mean and rsqrt(running_var + eps), in the computation dtype.
bool has_eval_statistics(const c10::OperatorName& name) {
  return (name.name == "aten::native_batch_norm" ||
          name.name == "aten::_native_batch_norm_legit") &&
         name.overload_name.empty();
}

// The key of a call's argument geometry: what a meta function's answer
// depends on (tensors' dtypes, sizes and strides; every other value), as
// raw bytes (this runs on every call of the operators of the table).
template <class T>
void put(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

bool describe(const c10::IValue& v, std::string& key) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      key += 'U';
      return true;
    }
    if (t.is_quantized() || t.layout() != c10::kStrided) return false;
    key += 'T';
    put(key, static_cast<int8_t>(t.scalar_type()));
    put(key, static_cast<int8_t>(t.dim()));
    for (int64_t d : t.sizes()) put(key, d);
    for (int64_t d : t.strides()) put(key, d);
    return true;
  }
  if (v.isTensorList() || v.isList()) {
    key += '[';
    for (const c10::IValue& e : v.toListRef())
      if (!describe(e, key)) return false;
    key += ']';
    return true;
  }
  if (v.isNone() || v.isGenerator() || v.isDevice()) {
    key += 'N';
  } else if (v.isInt()) {
    key += 'I';
    put(key, v.toInt());
  } else if (v.isDouble()) {
    key += 'D';
    put(key, v.toDouble());
  } else if (v.isBool()) {
    key += v.toBool() ? 'y' : 'n';
  } else if (v.isString()) {
    key += 'S';
    key += v.toStringRef();
    key += '\0';
  } else {
    std::ostringstream o;  // complex scalars, ...
    o << v;
    key += 'O';
    key += o.str();
    key += '\0';
  }
  return true;
}

// Meta twins of the call's arguments; false where a meta function cannot
// take one.
bool meta_arguments(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                    size_t begin, torch::jit::Stack& meta) {
  meta.reserve(schema.arguments().size());
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::IValue& v = stack[begin + i];
    if (v.isGenerator()) {
      if (!is_optional_generator(schema.arguments()[i])) return false;
      meta.emplace_back();  // meta functions draw nothing
    } else if (v.isDevice()) {
      meta.emplace_back(c10::Device(c10::DeviceType::Meta));
    } else {
      meta.push_back(map_tensors(v, [](const at::Tensor& t) -> at::Tensor {
        if (!t.defined()) return t;
        return at::empty_strided(t.sizes(), t.strides(),
                                 t.options().device(c10::DeviceType::Meta));
      }));
    }
  }
  return true;
}

std::shared_ptr<const Promise> compute_promise(const c10::OperatorHandle& op,
                                               const torch::jit::Stack& stack, size_t begin) {
  const c10::FunctionSchema& schema = op.schema();
  auto promise = std::make_shared<Promise>(schema.returns().size());
  torch::jit::Stack meta;
  if (!meta_arguments(schema, stack, begin, meta)) return promise;
  try {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  } catch (const std::exception&) {
    return promise;  // the CPU kernel raises its own error, or the result stays as it is
  }
  for (size_t j = 0; j < promise->size() && j < meta.size(); ++j) {
    if (!meta[j].isTensor() || !meta[j].toTensor().defined()) continue;
    const at::Tensor& m = meta[j].toTensor();
    (*promise)[j] = Geometry{m.sizes().vec(), m.strides().vec()};
  }
  return promise;
}

// The promise for this call, cached per thread by operator and argument
// geometry.
std::shared_ptr<const Promise> promise_for(const c10::OperatorHandle& op,
                                           const torch::jit::Stack& stack, size_t begin) {
  const c10::FunctionSchema& schema = op.schema();
  thread_local std::string k;
  k.clear();
  put(k, &schema);
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (!describe(stack[begin + i], k)) return nullptr;
  }
  thread_local ska::flat_hash_map<std::string, std::shared_ptr<const Promise>> cache;
  auto it = cache.find(k);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 4096) cache.clear();  // bounded: a new shape every call would grow it
  auto p = compute_promise(op, stack, begin);
  cache.emplace(k, p);
  return p;
}

bool significant_strides_differ(const at::Tensor& t, const Geometry& g) {
  if (t.numel() == 0) return false;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1 && t.stride(d) != g.strides[d]) return true;
  return false;
}

// Result `r` in the promised geometry `g` (same sizes): a copy, on the
// device, in stream order.
at::Tensor relaid(const at::Tensor& r, const Geometry& g) {
  at::Tensor out = at::empty_strided(g.sizes, g.strides, r.options());
  out.copy_(r);
  return out;
}

void keep_promise(const Promise& promise, torch::jit::Stack& stack, size_t first_result) {
  for (size_t j = 0; j < promise.size(); ++j) {
    if (!promise[j]) continue;
    c10::IValue& v = stack[first_result + j];
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    const Geometry& g = *promise[j];
    if (!t.defined() || !is_openreg(t) || t.sizes() != c10::IntArrayRef(g.sizes) ||
        !significant_strides_differ(t, g)) {
      continue;
    }
    v = relaid(t, g);
  }
}

void eval_statistics(const torch::jit::Stack& args, torch::jit::Stack& stack,
                     size_t first_result) {
  if (args[5].toBool() || !args[3].isTensor() || !args[4].isTensor()) return;
  const at::Tensor& mean = args[3].toTensor();
  const at::Tensor& var = args[4].toTensor();
  c10::IValue& save_mean = stack[first_result + 1];
  c10::IValue& save_invstd = stack[first_result + 2];
  if (!mean.defined() || !var.defined() || !is_openreg(mean) || !is_openreg(var) ||
      !save_mean.isTensor() || save_mean.toTensor().numel() != 0 || !save_invstd.isTensor() ||
      save_invstd.toTensor().numel() != 0) {
    return;
  }
  const at::ScalarType dtype = at::toOpMathType(stack[first_result].toTensor().scalar_type());
  const double eps = args[7].toDouble();
  const c10::DeviceIndex device = mean.device().index();
  AliasSet set(device);
  at::Tensor m = set.alias(mean), v = set.alias(var), sm, si;
  launch_kernel(device, "aten::native_batch_norm (eval statistics)", [&] {
    sm = m.to(dtype, /*non_blocking=*/false, /*copy=*/true);
    si = v.to(dtype, /*non_blocking=*/false, /*copy=*/true).add_(eps).rsqrt_();
  });
  save_mean = set.unwrap(sm);
  save_invstd = set.unwrap(si);
}

void promised_layout_run(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                         torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t begin = stack->size() - nargs;
  // A graph replay writes the results into the buffers its capture laid
  // out from the meta function already (GraphCapture.cpp); and it may run
  // off the Python thread, where a Python meta function would wait for the GIL.
  std::shared_ptr<const Promise> promise;
  if (graph_inline_depth == 0) promise = promise_for(op, *stack, begin);
  torch::jit::Stack eval_args;
  const bool eval_stats = has_eval_statistics(op.operator_name());
  if (eval_stats) eval_args.assign(stack->begin() + begin, stack->end());

  run_cpu_kernel_boxed(op, ks, stack);

  const size_t first_result = stack->size() - schema.returns().size();
  if (eval_stats) eval_statistics(eval_args, *stack, first_result);
  if (promise) keep_promise(*promise, *stack, first_result);
}

void promised_layout_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                            torch::jit::Stack* stack) {
  if (captured_boxed(op, ks, stack, &promised_layout_run)) return;
  promised_layout_run(op, ks, stack);
}

}  // namespace

at::Tensor in_promised_layout(const c10::OperatorHandle& op,
                              std::initializer_list<c10::IValue> args, at::Tensor result) {
  if (graph_inline_depth != 0 || !result.defined()) return result;
  std::shared_ptr<const Promise> promise = promise_for(op, torch::jit::Stack(args), 0);
  if (!promise) return result;
  torch::jit::Stack results{std::move(result)};
  keep_promise(*promise, results, 0);
  return results[0].toTensor();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : kPromisedLayout) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&promised_layout_kernel>());
    // A graph node of it may call the CPU kernel on aliases (its results are
    // the capture's, laid out from the meta function); not batch norm, whose
    // eval-mode statistics the CPU kernel would leave empty.
    const std::string full(name);
    const size_t dot = full.find('.');
    const c10::OperatorName op_name("aten::" + full.substr(0, dot),
                                    dot == std::string::npos ? "" : full.substr(dot + 1));
    if (!has_eval_statistics(op_name)) note_cpu_kernel_op(op_name);
  }
}

}  // namespace torch_openreg
