// The boxed fallback: every ATen operator without an openreg kernel of its
// own runs its CPU kernel *in place* on device memory.
//
// Unlike at::native::cpu_fallback it copies nothing: openreg arguments are
// replaced by CPU aliases of their kernel view (KernelView.h), results the
// CPU kernel allocates already live in device memory, views of inputs come
// back as views of the openreg inputs, and mutated arguments get their new
// metadata. Random operators without an openreg kernel of their own draw
// from the openreg generator through a CPU engine seeded from it (see
// bridge_generator), and `device=` arguments are mapped.
#include "aten/graph/CaptureHook.h"
#include "aten/core/DeviceCheck.h"
#include "aten/graph/Graph.h"
#include "aten/core/KernelView.h"
#include "aten/layout/MetaLayout.h"
#include "aten/core/StackArgs.h"

#include "aten/core/Philox.h"

#include "runtime/OpenRegGenerator.h"

#include <ATen/CPUGeneratorImpl.h>

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/grad_mode.h>
#include <ATen/quantized/Quantizer.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <c10/util/flat_hash_map.h>

#include <mutex>

namespace torch_openreg {
namespace {

// The kinds of openreg tensors the fallback serves, by dispatch key.
enum class Kind {
  Dense,      // PrivateUse1: the CPU kernel, redispatched to CPU
  Quantized,  // QuantizedPrivateUse1: whichever kernel the CPU would run
  Sparse,     // SparsePrivateUse1, SparseCsrPrivateUse1: as Quantized (core/SparseAlias.h)
};

c10::IValue unwrap_value(AliasSet& aliases, c10::IValue v) {
  if (v.isTensor()) return aliases.unwrap(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    auto in = v.toTensorList();
    out.reserve(in.size());
    for (const at::Tensor& t : in) out.push_back(aliases.unwrap(t));
    return out;
  }
  if (v.isList()) {
    auto in = v.toList();
    c10::impl::GenericList out(in.elementType());
    out.reserve(in.size());
    for (const c10::IValue& e : in) out.push_back(unwrap_value(aliases, e));
    return out;
  }
  return v;
}

// [docs:rng-bridge]
// The random operators that have no openreg kernel (poisson, binomial,
// _standard_gamma, _sample_dirichlet, rrelu_with_noise: CPU kernels written
// against the CPU's engine) still draw from the openreg generator: the call
// takes its (seed, base offset) from it like any random kernel, consuming
// as many positions as its largest tensor argument has elements, and runs
// the CPU kernel with a fresh CPU engine seeded by the first two words of
// position `base`. Reproducible under manual_seed and get/set_rng_state, and
// the stream moves on; but unlike the Philox kernels, a part of such a
// tensor is not the same part of the whole (no split property).
at::Generator bridge_generator(const std::optional<at::Generator>& gen, c10::DeviceIndex device,
                               uint64_t n, const c10::FunctionSchema& schema) {
  OpenRegGeneratorImpl* g = openregGeneratorOrDefault(gen, device);
  PhiloxState st;
  {
    std::lock_guard<std::mutex> lock(g->mutex_);
    TORCH_CHECK(!g->capturing(), "The operator '", schema.operator_name(),
                "' cannot be captured in a graph on openreg: it runs a CPU kernel that "
                "draws from a host engine seeded when it is enqueued");
    st = g->philox_state(std::max<uint64_t>(n, 1));
  }
  const auto [seed, base] = unpack(st);
  const uint64_t s = philox::u64(philox::word(seed, base, 0), philox::word(seed, base, 1));
  return at::make_generator<at::CPUGeneratorImpl>(s);
}

uint64_t max_numel(const torch::jit::Stack& stack, size_t begin, size_t end) {
  uint64_t n = 0;
  for (size_t i = begin; i < end; ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      n = std::max<uint64_t>(n, v.toTensor().numel());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) n = std::max<uint64_t>(n, t.numel());
    }
  }
  return n;
}
// [docs:rng-bridge:end]

// A CPU kernel can turn dense inputs into a tensor kind openreg cannot hold
// (nested, mkldnn). Refuse the result by operator name, before it would be
// wrapped as a dense openreg tensor. (Quantized and sparse results are held:
// they become quantized or sparse openreg tensors, KernelView.cpp.)
void check_result_kind(const c10::FunctionSchema& schema, const c10::IValue& v) {
  auto check = [&](const at::Tensor& t) {
    if (!t.defined() || (t.layout() == c10::kStrided && !t.is_nested())) return;
    std::string kind;
    switch (t.layout()) {
      case c10::kStrided: kind = "nested"; break;
      case c10::kJagged: kind = "nested"; break;
      case c10::kSparse:
      case c10::kSparseCsr:
      case c10::kSparseCsc:
      case c10::kSparseBsr:
      case c10::kSparseBsc: return;
      default: kind = c10::str(t.layout()); break;  // e.g. Mkldnn
    }
    TORCH_CHECK_NOT_IMPLEMENTED(false, "openreg does not support ", kind,
                                " tensors: the operator '", schema.operator_name(),
                                "' would return one on the openreg device. Use dense "
                                "(strided) tensors, or run this part on the CPU.");
  };
  for_each_tensor(v, check);
}

// The device rules of `schema`, cached per thread by schema address.
const OpDeviceInfo& device_info(const c10::FunctionSchema& schema) {
  thread_local ska::flat_hash_map<const c10::FunctionSchema*, OpDeviceInfo> cache;
  auto it = cache.find(&schema);
  if (it == cache.end()) it = cache.emplace(&schema, make_device_info(schema)).first;
  return it->second;
}

// [docs:fallback-device-check]
// Same-device rules as CUDA's wrappers, before anything runs or is written.
void check_devices(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                   size_t begin) {
  const OpDeviceInfo& info = device_info(schema);
  if (info.rule == DeviceRule::Unchecked) return;
  DeviceChecker checker(info.rule, info.method.c_str());
  for (size_t i = 0; i < info.arg_names.size(); ++i) {
    const c10::IValue& v = stack[begin + i];
    const char* name = info.arg_name(i);
    const bool out = info.written(i), index = info.is_index(i);
    for_each_tensor(v, [&](const at::Tensor& t) { checker.check(t, name, out, index); });
  }
}
// [docs:fallback-device-check:end]

// The arguments of one call as the CPU kernel takes them: openreg tensors
// replaced by CPU aliases of their memory (AliasSet), an openreg `device=`
// by the CPU.
struct AliasedArgs {
  // The stack's openreg arguments, moved out (not copied: a new handle to a
  // tensor with a Python object costs a GIL round trip, see KernelView.h)
  // and kept alive until the call ends, whoever else owns them.
  c10::SmallVector<c10::IValue, 4> originals;
  // (openreg tensor, its alias) for arguments the operator may write; the
  // tensor is borrowed from `originals`.
  c10::SmallVector<std::pair<c10::TensorImpl*, at::Tensor>, 4> writes;
  // A Generator argument: replaced by the caller once every tensor is known.
  std::optional<size_t> generator_arg;
};

// [docs:sparse-requires-grad]
// A few CPU kernels look at their inputs' requires_grad to decide what to
// compute for the backward (the sparse CSR matmul with a max/min reduction
// returns the arg-max indices only then). Aliases are plain CPU tensors:
// where the fallback serves sparse operators, they say what their openreg
// tensors say, or the backward reads indices that were never computed.
void mirror_requires_grad(const at::Tensor& original, at::Tensor& alias) {
  if (original.requires_grad() && !alias.requires_grad() && alias.is_leaf()) {
    alias.set_requires_grad(true);
  }
}
// [docs:sparse-requires-grad:end]

void alias_arguments(const c10::FunctionSchema& schema, torch::jit::Stack& stack, size_t begin,
                     AliasSet& aliases, AliasedArgs& aliased, bool mirror_grad = false) {
  const auto& args = schema.arguments();
  auto& originals = aliased.originals;
  auto& writes = aliased.writes;
  for (size_t i = 0; i < args.size(); ++i) {
    c10::IValue& v = stack[begin + i];
    const c10::AliasInfo* info = args[i].alias_info();
    const bool is_write = info && info->isWrite();
    if (v.isTensor()) {
      if (!is_openreg(v.toTensor())) continue;
      originals.push_back(std::move(v));
      const at::Tensor& t = originals.back().toTensor();
      at::Tensor a = aliases.alias(t, is_write);
      if (is_write) writes.emplace_back(t.unsafeGetTensorImpl(), a);
      if (mirror_grad) mirror_requires_grad(t, a);
      v = std::move(a);
    } else if (v.isTensorList()) {
      originals.push_back(std::move(v));
      auto in = originals.back().toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(in.size());
      for (const at::Tensor& t : in) {
        at::Tensor a = aliases.alias(t, is_write);
        if (is_write && is_openreg(t)) writes.emplace_back(t.unsafeGetTensorImpl(), a);
        out.push_back(std::move(a));
      }
      v = std::move(out);
    } else if (v.isList()) {  // e.g. Tensor?[] indices
      originals.push_back(v);  // a second handle to the list, not to its tensors
      auto in = v.toList();
      c10::impl::GenericList out(in.elementType());
      out.reserve(in.size());
      for (const c10::IValue& e : in) {
        out.push_back(e.isTensor() ? c10::IValue(aliases.alias(e.toTensor())) : e);
      }
      v = std::move(out);
    } else if (v.isGenerator() || (v.isNone() && is_optional_generator(args[i]))) {
      aliased.generator_arg = i;
    } else if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      v = c10::Device(c10::DeviceType::CPU);
    }
  }
}

// Quantized openreg tensors (the QuantizedPrivateUse1 key) take the same
// path, with one difference: the CPU's quantized kernels are registered
// under QuantizedCPU, some factories under CPU behind BackendSelect, so the
// call on the aliases goes through the dispatcher again (below autograd)
// and finds whichever kernel the CPU would run.
template <Kind K>
void run_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet /*ks*/,
                  torch::jit::Stack* stack) {
  constexpr bool Quantized = K == Kind::Quantized;
  const auto& schema = op.schema();
  const size_t begin = stack->size() - schema.arguments().size();

  check_devices(schema, *stack, begin);
  // The device the call runs on: its openreg tensors', else a `device=`
  // argument's, else the current device.
  const c10::DeviceIndex device =
      stack_device(*stack, begin, stack->size()).value_or(current_device());
  AliasSet aliases(device);
  AliasedArgs aliased;
  alias_arguments(schema, *stack, begin, aliases, aliased,
                  K == Kind::Sparse && at::GradMode::is_enabled());
  const std::optional<size_t>& generator_arg = aliased.generator_arg;
  auto& writes = aliased.writes;
  // The largest tensor argument's elements: the generator bridge's draw size
  // and the kernel's work estimate.
  const uint64_t largest = max_numel(*stack, begin, stack->size());

  if (generator_arg) {
    c10::IValue& g = (*stack)[begin + *generator_arg];
    std::optional<at::Generator> gen;
    if (g.isGenerator()) gen = g.toGenerator();
    g = bridge_generator(gen, device, largest, schema);
  }

  // Its width on a device thread (WideKernel): its largest tensor's elements,
  // weighted for the matmul family (its overloads without a kernel of their own).
  int64_t work = static_cast<int64_t>(largest);
  if (work * kMatmulWeight >= kWideKernelWork) {
    const std::string& name = schema.name();
    if (name.rfind("aten::", 0) == 0 && is_matmul_kernel(name.c_str() + 6)) work *= kMatmulWeight;
  }

  // [docs:fallback-run]
  try {
    launch_kernel(device, schema.name().c_str(), [&] {
      if constexpr (K == Kind::Dense) {
        op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
      } else {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        op.callBoxed(stack);
      }
    }, work);
  } catch (const c10::NotImplementedError& e) {
    if constexpr (K == Kind::Sparse) {
      // No sparse kernel on the CPU, whose sparse kernels openreg runs: the
      // dispatcher's own message, naming this device's key as CUDA's names
      // SparseCUDA.
      std::string what = e.what_without_backtrace();
      bool named = false;
      for (auto [cpu, dev] : {std::pair{"'SparseCPU' backend", "'SparsePrivateUse1' backend"},
                              std::pair{"'SparseCsrCPU' backend", "'SparseCsrPrivateUse1' backend"}}) {
        const size_t at = what.find(cpu);
        if (at != std::string::npos) {
          what.replace(at, std::string(cpu).size(), dev);
          named = true;
        }
      }
      TORCH_CHECK_NOT_IMPLEMENTED(!named, what);
      throw;
    }
    if constexpr (Quantized) {
      // As CUDA names QuantizedCUDA: the operator has no kernel for
      // quantized tensors on this device (nor on the CPU, whose kernels
      // openreg runs).
      TORCH_CHECK_NOT_IMPLEMENTED(
          std::string(e.what()).find("'QuantizedCPU' backend") == std::string::npos,
          "Could not run '", schema.operator_name(), "' with arguments from the "
          "'QuantizedPrivateUse1' backend (quantized openreg tensors): openreg runs the CPU's "
          "quantized kernels and this operator has none (no QuantizedCPU kernel). "
          "Dequantize first, or run this part on the CPU.");
    }
    // Checked here, on the error path, not before every call.
    TORCH_CHECK_NOT_IMPLEMENTED(
        Quantized || op.hasKernelForDispatchKey(c10::DispatchKey::CPU),
        "The operator '", schema.operator_name(), "' is not implemented for the "
        "openreg device: openreg runs ATen's CPU kernels on device memory and "
        "this operator has no CPU kernel.");
    throw;
  }

  for (auto& [t, a] : writes) aliases.sync_back(t, a);
  const size_t nret = schema.returns().size();
  for (size_t j = stack->size() - nret; j < stack->size(); ++j) {
    check_result_kind(schema, (*stack)[j]);
    (*stack)[j] = unwrap_value(aliases, std::move((*stack)[j]));
  }
  // [docs:fallback-run:end]
}

// The fallback as registered: a graph capture may take the call first
// (CaptureHook.h), as it may at every openreg kernel.
// [docs:kernel-capture-hook]
template <Kind K>
void openreg_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                      torch::jit::Stack* stack) {
  if (captured_boxed(op, ks, stack, &run_fallback<K>)) return;
  run_fallback<K>(op, ks, stack);
}
// [docs:kernel-capture-hook:end]

}  // namespace

void check_op_devices(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                      size_t begin) {
  check_devices(schema, stack, begin);
}

void run_cpu_kernel_boxed(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                          torch::jit::Stack* stack) {
  run_fallback<Kind::Dense>(op, ks, stack);  // (the caller has its own capture hook)
}

void register_structured_kernels() {
  // Structured operators reach an out-of-tree backend through their generated
  // CompositeExplicitAutogradNonFunctional kernel, which allocates the result
  // itself and calls the out= variant. Besides the extra dispatch, some meta
  // functions (mse_loss, smooth_l1_loss, ...) then resize that result twice
  // and warn about it. A few other operators have both a CPU kernel and a
  // slower, numerically different CompositeExplicitAutograd decomposition
  // (native_layer_norm, native_group_norm, addr, _stack, ...). Route every
  // such operator that has a CPU kernel straight to the fallback, which runs
  // the CPU's own kernel: same speed and same results as the CPU.
  static std::once_flag once;
  std::call_once(once, [] {
    static auto* lib = new torch::Library(torch::Library::IMPL, "aten",
                                          c10::DispatchKey::PrivateUse1,
                                          __FILE__, __LINE__);
    static auto* qlib = new torch::Library(torch::Library::IMPL, "aten",
                                           c10::DispatchKey::QuantizedPrivateUse1,
                                           __FILE__, __LINE__);
    static auto* slib = new torch::Library(torch::Library::IMPL, "aten",
                                           c10::DispatchKey::SparsePrivateUse1,
                                           __FILE__, __LINE__);
    static auto* csrlib = new torch::Library(torch::Library::IMPL, "aten",
                                             c10::DispatchKey::SparseCsrPrivateUse1,
                                             __FILE__, __LINE__);
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      auto op = dispatcher.findOp(name);
      if (!op) continue;
      // [docs:quantized-routing]
      // Quantized openreg tensors: an operator with a QuantizedCPU kernel
      // runs that kernel through the quantized fallback, even where it also
      // has a composite kernel (clone, fill_, index_select, ...), which the
      // dispatcher would otherwise prefer to a backend fallback and which
      // is not what the CPU runs for quantized tensors.
      if (op->hasKernelForDispatchKey(c10::DispatchKey::QuantizedCPU) &&
          !op->hasKernelForDispatchKey(c10::DispatchKey::QuantizedPrivateUse1)) {
        std::string qname = name.name.substr(6);
        if (!name.overload_name.empty()) qname += "." + name.overload_name;
        qlib->impl(qname.c_str(),
                   torch::CppFunction::makeFromBoxedFunction<&openreg_fallback<Kind::Quantized>>());
      }
      // [docs:quantized-routing:end]
      const bool composite =
          op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
      // [docs:sparse-routing]
      // Sparse openreg tensors: an operator with a sparse CPU kernel runs it
      // through the sparse fallback, where the dispatcher would prefer its
      // composite kernel (clone, empty_like, permute, sum, ...), which is not
      // what the CPU runs for sparse tensors.
      for (auto [cpu_key, key, library] :
           {std::tuple{c10::DispatchKey::SparseCPU, c10::DispatchKey::SparsePrivateUse1, slib},
            std::tuple{c10::DispatchKey::SparseCsrCPU, c10::DispatchKey::SparseCsrPrivateUse1,
                       csrlib}}) {
        if (composite && op->hasKernelForDispatchKey(cpu_key) &&
            !op->hasKernelForDispatchKey(key)) {
          std::string sname = name.name.substr(6);
          if (!name.overload_name.empty()) sname += "." + name.overload_name;
          library->impl(sname.c_str(),
                        torch::CppFunction::makeFromBoxedFunction<&openreg_fallback<Kind::Sparse>>());
        }
      }
      // [docs:sparse-routing:end]
      if (!composite || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
        continue;
      }
      std::string full = name.name.substr(6);
      if (!name.overload_name.empty()) full += "." + name.overload_name;
      lib->impl(full.c_str(),
                torch::CppFunction::makeFromBoxedFunction<&openreg_fallback<Kind::Dense>>());
      note_cpu_kernel_op(name);  // a graph node of it may call the CPU kernel (GraphPrepared.cpp)

    }
  });
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&openreg_fallback<Kind::Dense>>());
}

// [docs:quantized-fallback]
TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&openreg_fallback<Kind::Quantized>>());
}
// [docs:quantized-fallback:end]

namespace {
// copy_ of quantized tensors: ATen's composite copy_ would hand any copy
// that involves a non-CPU device to _copy_from, which has no quantized
// kernel. Run the CPU's copy_ instead: on the aliases when the destination
// is on openreg (it copies the quantizer and the integer bytes, and the
// destination takes the quantizer over with its scales on the device), and
// on a host copy of the source when the destination is on the host (so no
// host tensor ends up with a quantizer over device memory). A source on
// another openreg device goes through the host.
// quint4x2 and quint2x4 pack several values into a byte and the CPU has no
// copy kernel for them: a copy of a whole contiguous tensor copies its bytes
// (and the quantizer, as the CPU's quantized copy_ does).
bool copy_packed(at::Tensor& self, const at::Tensor& src) {
  const auto t = self.scalar_type();
  if (!self.is_quantized() || !src.is_quantized() ||
      (t != at::kQUInt4x2 && t != at::kQUInt2x4)) {
    return false;
  }
  TORCH_CHECK(src.scalar_type() == t && src.qscheme() == self.qscheme(),
              "Quantized Copy only works with same qscheme and dtype");
  TORCH_CHECK(self.sizes() == src.sizes() && self.is_contiguous() && src.is_contiguous() &&
                  self.storage_offset() == 0 && src.storage_offset() == 0 &&
                  self.storage().nbytes() == src.storage().nbytes(),
              "copy_ of ", t, " tensors copies whole contiguous tensors of the same shape only "
              "(their values are packed several to a byte)");
  storage_bytes(self.storage()).copy_(storage_bytes(src.storage()));
  at::set_quantizer_(self, quantizer_on(src.quantizer(), self.device()));
  return true;
}

void quantized_copy_(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                     torch::jit::Stack* stack) {
  const size_t n = stack->size();
  at::Tensor self = (*stack)[n - 3].toTensor();
  const at::Tensor src = (*stack)[n - 2].toTensor();
  const bool non_blocking = (*stack)[n - 1].toBool();
  auto host = [](const at::Tensor& t) { return t.is_quantized() ? quantized_to_cpu(t) : t.cpu(); };
  if (!copy_packed(self, src)) {
    if (is_openreg(self)) {
      if (is_openreg(src) && self.device() != src.device()) (*stack)[n - 2] = host(src);
      openreg_fallback<Kind::Quantized>(op, ks, stack);
      return;
    }
    self.copy_(is_openreg(src) ? host(src) : src, non_blocking);
  }
  torch::jit::drop(*stack, 3);
  torch::jit::push(*stack, std::move(self));
}
}  // namespace

TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  m.impl("copy_", torch::CppFunction::makeFromBoxedFunction<&quantized_copy_>());
}

// [docs:sparse-fallback]
// Sparse openreg tensors run the CPU's sparse kernels on CPU sparse tensors
// whose members alias the device memory (core/SparseAlias.h).
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&openreg_fallback<Kind::Sparse>>());
}
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&openreg_fallback<Kind::Sparse>>());
}
// [docs:sparse-fallback:end]

}  // namespace torch_openreg
