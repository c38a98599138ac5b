// Graph replay without the host-side set-up: a node's kernel prepared at
// capture (GraphCapture.h's PreparedNode).
//
// A node replays by default through the dispatcher, as the eager call did:
// the openreg kernel finds the device, checks it, wraps every argument in a
// CPU alias of its device memory, and ATen's CPU kernel builds its
// TensorIterator (broadcasting, type promotion, strides, memory overlap)
// before the loop runs. In a graph none of that can change between replays:
// the addresses, shapes, strides and dtypes are fixed. So the capture does
// it once, for two kinds of node:
//   * iterator: the elementwise operators below (ATen's structured
//     TensorIterator operators, at::native::structured_*): the capture runs
//     the operator's meta function on the aliases, which builds the
//     TensorIterator, and a replay calls only its impl, the DispatchStub's
//     CPU loop over that iterator;
//   * aliases: any other operator whose openreg kernel is ATen's CPU kernel
//     on aliases (CpuKernel.h's registrations and the fallback): the capture
//     makes the aliases, and a replay calls the CPU kernel on them, skipping
//     the openreg kernel's own work.
// Every other node (openreg's own kernels: convolution, attention, random
// operators, copies to or from the host, ...) keeps the dispatcher path.
// Either way the CPU kernel and its loop are the ones the eager call runs,
// on the same memory: the results are bit-equal.
//
// OPENREG_GRAPH_PREPARE: "1" (the default) prepares both kinds, "aliases"
// only the second, "0" none (every node through the dispatcher, as before).
//
// Vendor: a real device's kernels take their arguments by value, so a
// captured launch is already "prepared"; this file is what a backend whose
// kernels do host-side work per call (as openreg's, which run ATen's CPU
// code) does to bring a replayed node down to the kernel itself.
#include "Graph.h"
#include "GraphCapture.h"

#include "aten/core/KernelView.h"
#include "aten/core/StackArgs.h"

#include "runtime/OpenRegFunctions.h"

#include <ATen/native/TensorIterator.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/clamp_min_native.h>
#include <ATen/ops/div_native.h>
#include <ATen/ops/exp_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/neg_native.h>
#include <ATen/ops/sigmoid_native.h>
#include <ATen/ops/sub_native.h>
#include <ATen/ops/tanh_native.h>
#include <ATen/ops/threshold_backward_native.h>
#include <c10/util/flat_hash_map.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

namespace torch_openreg {
namespace {

enum class Mode { Off, Aliases, Iterator };

Mode prepare_mode() {
  const char* v = std::getenv("OPENREG_GRAPH_PREPARE");
  if (!v || !*v || std::strcmp(v, "1") == 0) return Mode::Iterator;
  if (std::strcmp(v, "aliases") == 0) return Mode::Aliases;
  if (std::strcmp(v, "0") == 0) return Mode::Off;
  TORCH_CHECK(false, "OPENREG_GRAPH_PREPARE must be '1' (the default: prepare elementwise "
              "iterators and aliases at capture), 'aliases' (aliases only) or '0' (replay "
              "every node through the dispatcher), got '", v, "'");
}

std::atomic<uint64_t> g_stats[3];  // nodes captured: dispatcher, aliases, iterator

// ---------------------------------------------------------------- which operators
std::mutex g_ops_mu;
std::unordered_set<c10::OperatorName>& cpu_kernel_ops() {
  static auto* s = new std::unordered_set<c10::OperatorName>();
  return *s;
}

// True if openreg runs `op` as ATen's CPU kernel on aliases (so the CPU
// kernel may be called on aliases made at capture): registered through
// CpuKernel.h or routed to the fallback, or without an openreg kernel and
// without a composite one (the backend fallback then runs it).
bool runs_cpu_kernel(const c10::OperatorHandle& op) {
  {
    std::lock_guard<std::mutex> g(g_ops_mu);
    if (cpu_kernel_ops().count(op.operator_name())) return true;
  }
  return op.hasKernelForDispatchKey(c10::DispatchKey::CPU) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
}

// ---------------------------------------------------------------- aliases
// CPU tensors over the kernel view of a node's device memory, made once.
// Tensors that share an openreg storage share one alias storage (overlap
// checks see it). The storages do not own the memory: the graph's pool
// (or, for inputs from outside it, the caller) keeps it, as for the node's
// own borrowed tensors.
struct Aliases {
  explicit Aliases(c10::DeviceIndex d)
      : device(d),
        remap{[kv = kernel_view_offset(d)](const at::Tensor& t) {
                void* p = const_cast<void*>(t.storage().data());
                return c10::Storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                                    c10::DataPtr(p ? static_cast<char*>(p) + kv : nullptr,
                                                 c10::Device(c10::DeviceType::CPU)),
                                    /*allocator=*/nullptr, /*resizable=*/false);
              },
              [](const c10::Storage& st, const at::Tensor& t) {
                auto a = at::detail::make_tensor<c10::TensorImpl>(
                    c10::Storage(st), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
                a.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(),
                                                               t.storage_offset());
                return a;
              }} {}
  c10::DeviceIndex device;
  StorageRemap remap;
  bool ok = true;  // false: an argument this scheme does not cover

  at::Tensor operator()(const at::Tensor& t) {
    if (!t.defined()) return t;
    if (!is_openreg(t)) {
      // Only constants: a wrapped Python number. A 0-dim CPU tensor of the
      // caller's is read at every replay (the dispatcher path does).
      if (!t.unsafeGetTensorImpl()->is_wrapped_number()) ok = false;
      return t;
    }
    if (t.device().index() != device || t.is_quantized() || t.is_neg() ||
        t.layout() != c10::kStrided) {
      ok = false;
      return t;
    }
    return remap(t);
  }

  c10::IValue value(const c10::IValue& v) {
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1)
      return c10::Device(c10::DeviceType::CPU);  // as the fallback maps `device=`
    if (v.isGenerator()) ok = false;
    return map_tensors(v, *this);
  }
};

// "aliases": the CPU kernel of the operator (what its openreg kernel runs)
// on aliases made at capture; a functional call's results are copied into
// the captured ones, as the dispatcher path does.
struct CpuCall final : PreparedNode {
  c10::OperatorHandle op;
  std::vector<c10::IValue> args;
  std::vector<at::Tensor> copy_into;
  explicit CpuCall(c10::OperatorHandle o) : op(std::move(o)) {}
  void run() override {
    torch::jit::Stack stack(args);
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
    if (!copy_into.empty())
      copy_fresh_results(op.schema(), stack, copy_into);
  }
};

// ---------------------------------------------------------------- iterators
// [docs:graph-prepared-iterator]
// "iterator": ATen's structured operator S (a TensorIteratorBase) whose meta
// function ran at capture on the aliases, writing into the captured output;
// a replay calls its impl: S's DispatchStub with this iterator, which runs
// the CPU loop (serially or split over the intra-op threads, as eagerly).
template <class S>
struct IterCall final : S, PreparedNode {
  at::Tensor out_;
  std::array<at::Tensor, 2> in_;  // the iterator borrows these: they never move
  c10::Scalar scalar_;
  void (*impl_)(IterCall&) = nullptr;

  // The meta function hands over the output's geometry: the captured output
  // already has it (the capture resized it), so nothing is allocated,
  // resized or restrided. Anything else keeps the dispatcher path.
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    TORCH_CHECK(i == 0 && sizes == out_.sizes() &&
                    (strides.empty() || strides == out_.strides()) &&
                    options.dtype() == out_.dtype(),
                "openreg graph: not prepared (the output would be resized)");
    S::set_output_raw_strided(i, sizes, strides, options);
  }
  const at::Tensor& maybe_get_output(int64_t) override { return out_; }
  void run() override { impl_(*this); }
};
// [docs:graph-prepared-iterator:end]

// How an operator's arguments map onto its structured class.
enum class Args { Unary, UnaryScalar, Binary, BinaryScalar };

template <class S, Args A, bool Inplace>
std::unique_ptr<PreparedNode> make_iter(const std::vector<c10::IValue>& a) {
  auto p = std::make_unique<IterCall<S>>();
  p->in_[0] = a[0].toTensor();
  if constexpr (A == Args::Binary || A == Args::BinaryScalar) p->in_[1] = a[1].toTensor();
  if constexpr (A == Args::UnaryScalar) p->scalar_ = a[1].toScalar();
  if constexpr (A == Args::BinaryScalar) p->scalar_ = a[2].toScalar();
  p->out_ = Inplace ? a[0].toTensor() : a.back().toTensor();
  // Only loops that leave the iterator as they found it and read the inputs
  // in place: one dtype for every tensor (the CPU's TensorIterator converts
  // an input of another dtype into a temporary copy when it is built, which
  // a replay would not refresh; a Python number is a constant), no reduced
  // floating type (whose CPU loops take a scalar operand out of the
  // iterator), and something to do.
  const auto dt = p->out_.scalar_type();
  if (dt != at::kFloat && dt != at::kDouble && dt != at::kInt && dt != at::kLong) return nullptr;
  for (const at::Tensor& t : p->in_)
    if (t.defined() && t.scalar_type() != dt && !t.unsafeGetTensorImpl()->is_wrapped_number())
      return nullptr;
  if constexpr (A == Args::Unary) {
    p->meta(p->in_[0]);
    p->impl_ = [](IterCall<S>& q) { q.impl(q.in_[0], q.out_); };
  } else if constexpr (A == Args::UnaryScalar) {
    p->meta(p->in_[0], p->scalar_);
    p->impl_ = [](IterCall<S>& q) { q.impl(q.in_[0], q.scalar_, q.out_); };
  } else if constexpr (A == Args::Binary) {
    p->meta(p->in_[0], p->in_[1]);
    p->impl_ = [](IterCall<S>& q) { q.impl(q.in_[0], q.in_[1], q.out_); };
  } else {
    p->meta(p->in_[0], p->in_[1], p->scalar_);
    p->impl_ = [](IterCall<S>& q) { q.impl(q.in_[0], q.in_[1], q.scalar_, q.out_); };
  }
  if (p->common_dtype() != dt || p->numel() == 0) return nullptr;
  for (int k = 0; k < p->ntensors(); ++k)
    if (p->dtype(k) != dt) return nullptr;
  return p;
}

using Maker = std::unique_ptr<PreparedNode> (*)(const std::vector<c10::IValue>&);

const ska::flat_hash_map<std::string, Maker>& iterator_makers() {
  using namespace at::native;
  static const ska::flat_hash_map<std::string, Maker> m = {
      {"aten::add.out", &make_iter<structured_ufunc_add_CPU, Args::BinaryScalar, false>},
      {"aten::add_.Tensor", &make_iter<structured_ufunc_add_CPU, Args::BinaryScalar, true>},
      {"aten::sub.out", &make_iter<structured_sub_out, Args::BinaryScalar, false>},
      {"aten::sub_.Tensor", &make_iter<structured_sub_out, Args::BinaryScalar, true>},
      {"aten::mul.out", &make_iter<structured_mul_out, Args::Binary, false>},
      {"aten::mul_.Tensor", &make_iter<structured_mul_out, Args::Binary, true>},
      {"aten::div.out", &make_iter<structured_div_out, Args::Binary, false>},
      {"aten::div_.Tensor", &make_iter<structured_div_out, Args::Binary, true>},
      {"aten::neg.out", &make_iter<structured_neg_out, Args::Unary, false>},
      {"aten::neg_", &make_iter<structured_neg_out, Args::Unary, true>},
      {"aten::exp.out", &make_iter<structured_exp_out, Args::Unary, false>},
      {"aten::exp_", &make_iter<structured_exp_out, Args::Unary, true>},
      {"aten::sigmoid.out", &make_iter<structured_sigmoid_out, Args::Unary, false>},
      {"aten::sigmoid_", &make_iter<structured_sigmoid_out, Args::Unary, true>},
      {"aten::tanh.out", &make_iter<structured_tanh_out, Args::Unary, false>},
      {"aten::tanh_", &make_iter<structured_tanh_out, Args::Unary, true>},
      {"aten::clamp_min.out", &make_iter<structured_clamp_min_out, Args::UnaryScalar, false>},
      {"aten::clamp_min_", &make_iter<structured_clamp_min_out, Args::UnaryScalar, true>},
      {"aten::threshold_backward.grad_input",
       &make_iter<structured_threshold_backward_out, Args::BinaryScalar, false>},
  };
  return m;
}

// Composite operators whose kernel is one call of a CPU-kernel operator:
// sum(self, dtype) is sum.dim_IntList(self, [], False, dtype) in ATen
// (ReduceOps.cpp), mean(self, dtype) likewise mean.dim. A node of one calls
// that operator's CPU kernel.
struct Rewrite {
  c10::OperatorHandle op;
  std::vector<c10::IValue> args;
};
std::optional<Rewrite> rewrite(const c10::OperatorHandle& called,
                               const std::vector<c10::IValue>& args) {
  const std::string& name = called.schema().name();
  const char* to = name == "aten::sum" ? "dim_IntList" : name == "aten::mean" ? "dim" : nullptr;
  if (!to || !called.schema().overload_name().empty() || args.size() < 2) return std::nullopt;
  auto op = c10::Dispatcher::singleton().findOp({name, to});
  if (!op) return std::nullopt;
  return Rewrite{*op, {args[0], c10::IValue(std::vector<int64_t>{}), false, args[1]}};
}

std::string full_name(const c10::OperatorName& n) {
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

}  // namespace

void note_cpu_kernel_op(const c10::OperatorName& name) {
  std::lock_guard<std::mutex> g(g_ops_mu);
  cpu_kernel_ops().insert(name);
}

void note_cpu_kernel_op(const char* schema_name) {
  std::string s(schema_name);
  const auto dot = s.find('.');
  note_cpu_kernel_op(c10::OperatorName("aten::" + s.substr(0, dot),
                                       dot == std::string::npos ? "" : s.substr(dot + 1)));
}

std::unique_ptr<PreparedNode> prepare_node(const Node& node, const c10::OperatorHandle& called) {
  std::unique_ptr<PreparedNode> p = [&]() -> std::unique_ptr<PreparedNode> {
    const Mode mode = prepare_mode();
    if (mode == Mode::Off || node.rng) return nullptr;
    const c10::FunctionSchema& schema = node.op.schema();
    const bool copy = schema.name() == "aten::copy_";
    // copy_ between two tensors of one device is a CPU copy_ on aliases
    // (Minimal.cpp); with the host it is the runtime's copy.
    c10::OperatorHandle op = node.op;
    std::vector<const at::Tensor*> into;
    for (const at::Tensor& t : node.copy_into) into.push_back(&t);
    std::vector<c10::IValue> given(node.args.begin(), node.args.end());
    if (!copy && !runs_cpu_kernel(op)) {
      // An out= variant generated from the functional operator (relu.out:
      // the functional call, then a copy into `out`): the functional
      // operator's CPU kernel, and the copy.
      if (called.operator_name() == op.operator_name() && node.copy_into.empty()) return nullptr;
      const size_t nout = node.args.size() - called.schema().arguments().size();
      for (size_t i = node.args.size() - nout; i < node.args.size(); ++i) {
        if (!node.args[i].isTensor()) return nullptr;
        into.push_back(&node.args[i].toTensor());
      }
      given.resize(node.args.size() - nout);
      op = called;
      if (!runs_cpu_kernel(op)) {
        auto r = rewrite(called, given);
        if (!r || !runs_cpu_kernel(r->op)) return nullptr;
        op = r->op;
        given = std::move(r->args);
      }
    }
    Aliases aliases(node.device);
    std::vector<c10::IValue> args;
    args.reserve(given.size());
    for (const c10::IValue& v : given) args.push_back(aliases.value(v));
    std::vector<at::Tensor> copy_into;
    for (const at::Tensor* t : into) copy_into.push_back(aliases(*t));
    if (!aliases.ok) return nullptr;
    if (copy) {
      for (size_t i = 0; i < 2; ++i)
        if (!args[i].isTensor() || !is_openreg(node.args[i].toTensor())) return nullptr;
    }
    // The iterator's operator and arguments: the node's, except that the
    // CPU's relu is clamp_min(self, 0) (and relu_ clamp_min_), whose
    // iterator writes the captured result directly.
    std::string name = full_name(op.operator_name());
    const std::vector<c10::IValue>* iter_args = &args;
    std::vector<c10::IValue> relu_args;
    bool iter_ok = copy_into.empty();
    if (name == "aten::relu" && copy_into.size() == 1 && args.size() == 1) {
      name = "aten::clamp_min.out";
      relu_args = {args[0], c10::IValue(c10::Scalar(0)), copy_into[0]};
      iter_args = &relu_args;
      iter_ok = true;
    } else if (name == "aten::relu_" && args.size() == 1) {
      name = "aten::clamp_min_";
      relu_args = {args[0], c10::IValue(c10::Scalar(0))};
      iter_args = &relu_args;
    }
    if (mode == Mode::Iterator && iter_ok) {
      auto it = iterator_makers().find(name);
      if (it != iterator_makers().end()) {
        try {
          if (auto made = it->second(*iter_args)) {
            ++g_stats[2];
            return made;
          }
        } catch (const c10::Error&) {
          // Not preparable as an iterator (a resize, an overlap, ...): the
          // aliases below, whose kernel then says what is wrong at replay.
        }
      }
    }
    auto call = std::make_unique<CpuCall>(op);
    call->args = std::move(args);
    call->copy_into = std::move(copy_into);
    ++g_stats[1];
    return call;
  }();
  if (!p) ++g_stats[0];
  return p;
}

std::array<uint64_t, 3> graphPrepareStats() {
  return {g_stats[0].load(), g_stats[1].load(), g_stats[2].load()};
}

}  // namespace torch_openreg
