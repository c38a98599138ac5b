// Graph capture and replay: torch.accelerator.Graph on openreg
// (at::GraphImplInterface, registered with REGISTER_GRAPH_IMPL), over the
// runtime's stream capture (orStreamBeginCapture ... orGraphLaunch).
//
// What a capture records. A CUDA kernel is a function plus its arguments by
// value, so CUDA captures the launch itself. openreg's eager kernels are
// closures that wrap their arguments, allocate their results and run ATen's
// CPU code in one go (KernelView.h): re-running one would allocate new
// results instead of writing the captured ones. So the capture works one
// level up, per operator, below autograd:
//   * while a capture runs, the capturing thread (and the autograd threads
//     it starts, which inherit its dispatch-key TLS) includes one dispatch
//     key, CustomRNGKeyId, whose boxed fallback (capture_fallback) sees
//     every operator call before the openreg kernels do;
//   * an operator on a capturing stream is not run: its results' shapes
//     come from its meta kernel, they are allocated at once (from the
//     graph's private pool, as any allocation on a capturing stream), and
//     the call is recorded with orLaunchKernelOwned as a node that re-runs
//     the openreg kernel on those fixed addresses: through the operator's
//     out= variant where it has one, else the functional call and a copy;
//   * views and allocations do no device work: they run at capture time;
//   * random operators reserve their part of the generator's stream at
//     capture (the generator is registered with the capture); each replay
//     refills the seed/offset slots in stream order, so every replay draws
//     new numbers and a seeded program draws the same ones.
// A replay is the runtime's: one graph launch on the current stream whose
// nodes run the recorded operators in order, their kernels inline.
//
// Vendor: with a device whose kernels take their arguments by value (most
// real ones), the runtime capture of the kernels' own launches is enough and
// this operator-level recording is not needed; the GraphImpl class below
// (capture_begin/end with the allocator's pool and the generator's hooks,
// instantiate, replay, reset, pool, debug dump) is what you keep.
#include "Graph.h"

#include "DeviceCheck.h"
#include "KernelView.h"
#include "Philox.h"
#include "Sanitizer.h"

#include "../runtime/OpenRegAllocator.h"
#include "../runtime/OpenRegException.h"
#include "../runtime/OpenRegFunctions.h"
#include "../runtime/OpenRegGenerator.h"
#include "../runtime/OpenRegStream.h"

#include <ATen/core/GraphImplInterface.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/flat_hash_map.h>
#include <torch/library.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace torch_openreg {
namespace {

// The key whose fallback records operators during a capture. Unused by
// PyTorch's own operators (it exists for out-of-tree random generators);
// it sits above the backends and below autograd.
constexpr c10::DispatchKey kCaptureKey = c10::DispatchKey::CustomRNGKeyId;

// openreg captures running in the process (the fallback's fast exit).
std::atomic<int> g_captures{0};

// ---------------------------------------------------------------- nodes

// One recorded operator: what its replay calls.
struct Node {
  explicit Node(c10::OperatorHandle o) : op(std::move(o)) {}
  c10::OperatorHandle op;
  std::vector<c10::IValue> args;       // openreg tensors borrow the captured memory
  std::vector<at::Tensor> copy_into;   // no out= variant: the results are copied here
  std::unique_ptr<PinnedPhilox> rng;   // random operators
};

// Replay of a node: the openreg kernel of the recorded call, run inline.
orError_t run_node(void* p) {
  auto* n = static_cast<Node*>(p);
  ++graph_inline_depth;
  PinnedPhilox* const prev = pinnedPhilox();
  if (n->rng) {
    n->rng->used = 0;
    pinnedPhilox() = n->rng.get();
  }
  orError_t result = orSuccess;
  try {
    c10::impl::ExcludeDispatchKeyGuard no_capture(kCaptureKey);
    torch::jit::Stack stack(n->args);
    n->op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), &stack);
    if (!n->copy_into.empty()) {
      size_t k = 0;
      auto copy = [&](const at::Tensor& r) {
        if (!r.defined()) return;
        TORCH_INTERNAL_ASSERT(k < n->copy_into.size());
        n->copy_into[k++].copy_(r);
      };
      // The results the capture allocated, in order: not those that are
      // arguments the operator writes (returned as they are).
      const auto& rets = n->op.schema().returns();
      for (size_t j = 0; j < rets.size() && j < stack.size(); ++j) {
        if (rets[j].alias_info() && rets[j].alias_info()->isWrite()) continue;
        const c10::IValue& v = stack[stack.size() - rets.size() + j];
        if (v.isTensor()) copy(v.toTensor());
        else if (v.isTensorList())
          for (const at::Tensor& t : v.toTensorList()) copy(t);
      }
    }
  } catch (const std::exception& e) {
    // An asynchronous error, as a failing CUDA kernel: reported by the next
    // synchronization. The reason goes to the warning handler.
    TORCH_WARN("openreg graph replay: '", n->op.schema().operator_name(), "' failed: ", e.what());
    result = orErrorLaunchFailure;
  }
  pinnedPhilox() = prev;
  --graph_inline_depth;
  return result;
}

void delete_node(void* p) { delete static_cast<Node*>(p); }

// ---------------------------------------------------------------- helpers

template <class F>
c10::IValue map_tensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    return out;
  }
  if (v.isList()) {
    auto in = v.toList();
    c10::impl::GenericList out(in.elementType());
    for (const c10::IValue& e : in) out.push_back(map_tensors(e, f));
    return out;
  }
  return v;
}

template <class F>
void for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) f(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) for_each_tensor(e, f);
  }
}

// The openreg device an operator call works on, if any.
std::optional<c10::DeviceIndex> openreg_device(const torch::jit::Stack& stack, size_t begin) {
  std::optional<c10::DeviceIndex> found;
  for (size_t i = begin; i < stack.size() && !found; ++i) {
    const c10::IValue& v = stack[i];
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      found = v.toDevice().has_index() ? v.toDevice().index() : current_device();
    } else {
      for_each_tensor(v, [&](const at::Tensor& t) {
        if (!found && is_openreg(t)) found = t.device().index();
      });
    }
  }
  return found;
}

// Meta tensors with the geometry of openreg ones; tensors that share a
// storage get metas that share one (so overlap checks see it).
struct MetaMap {
  ska::flat_hash_map<c10::StorageImpl*, c10::Storage> storages;
  at::Tensor operator()(const at::Tensor& t) {
    if (!is_openreg(t)) return t;
    c10::Storage& st = storages[t.storage().unsafeGetStorageImpl()];
    if (!st) {
      st = at::empty({static_cast<int64_t>(t.storage().nbytes())},
                     at::TensorOptions().dtype(at::kByte).device(at::kMeta))
               .storage();
    }
    at::Tensor m = at::empty({0}, t.options().device(at::kMeta));
    m.set_(st, t.storage_offset(), t.sizes(), t.strides());
    m.unsafeGetTensorImpl()->_set_conj(t.is_conj());
    m.unsafeGetTensorImpl()->_set_neg(t.is_neg());
    return m;
  }
};

// openreg tensors over the same device memory that do not own it (the
// graph's pool keeps it; inputs from outside the pool must be kept alive by
// the caller, as with CUDA graphs).
struct Borrow {
  ska::flat_hash_map<c10::StorageImpl*, c10::Storage> storages;
  at::Tensor operator()(const at::Tensor& t) {
    if (!is_openreg(t)) return t;
    c10::Storage& st = storages[t.storage().unsafeGetStorageImpl()];
    if (!st) {
      st = c10::Storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                        c10::DataPtr(const_cast<void*>(t.storage().data_ptr().get()), t.device()),
                        /*allocator=*/nullptr, /*resizable=*/false);
    }
    at::Tensor b = make_openreg_tensor(st, t.dtype(), t.sizes(), t.strides(), t.storage_offset());
    b.unsafeGetTensorImpl()->_set_conj(t.is_conj());
    b.unsafeGetTensorImpl()->_set_neg(t.is_neg());
    return b;
  }
};

bool is_generator_arg(const c10::Argument& a) {
  const auto& type = a.type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  return type->kind() == c10::TypeKind::OptionalType &&
         type->castRaw<c10::OptionalType>()->getElementType()->kind() ==
             c10::TypeKind::GeneratorType;
}

// What the capture does with an operator.
enum class Kind : uint8_t {
  Record,     // recorded as a node
  AtCapture,  // no device work (allocation, metadata, views): run now
  HostSync,   // needs a value on the host: not permitted while capturing
};

Kind classify(const c10::FunctionSchema& schema) {
  static const std::unordered_map<std::string, Kind> named = {
      {"aten::empty", Kind::AtCapture},
      {"aten::empty_strided", Kind::AtCapture},
      {"aten::as_strided", Kind::AtCapture},
      {"aten::view", Kind::AtCapture},
      {"aten::_reshape_alias", Kind::AtCapture},
      {"aten::_unsafe_view", Kind::AtCapture},  // a view, though its schema does not say so
      {"aten::set_", Kind::AtCapture},
      {"aten::resize_", Kind::AtCapture},
      {"aten::record_stream", Kind::AtCapture},
      {"aten::lift_fresh", Kind::AtCapture},
      {"aten::_local_scalar_dense", Kind::HostSync},
      {"aten::is_nonzero", Kind::HostSync},
      {"aten::equal", Kind::HostSync},
      {"aten::nonzero", Kind::HostSync},
      {"aten::masked_select", Kind::HostSync},
      {"aten::_unique2", Kind::HostSync},
      {"aten::unique_dim", Kind::HostSync},
      {"aten::unique_consecutive", Kind::HostSync},
      {"aten::unique_dim_consecutive", Kind::HostSync},
      {"aten::bincount", Kind::HostSync},
  };
  auto it = named.find(schema.name());
  if (it != named.end()) return it->second;
  // Pure views: every result aliases an argument without writing it.
  const auto& rets = schema.returns();
  bool view = !rets.empty();
  for (const auto& r : rets) view = view && r.alias_info() && !r.alias_info()->isWrite();
  return view ? Kind::AtCapture : Kind::Record;
}

// The out= overload of a functional operator: the same arguments, then one
// written tensor per result (add.Tensor -> add.out). Cached.
std::optional<c10::OperatorHandle> out_variant(const c10::OperatorHandle& op) {
  static std::mutex mu;
  static ska::flat_hash_map<const c10::FunctionSchema*, std::optional<c10::OperatorHandle>> cache;
  static std::unordered_map<std::string, std::vector<c10::OperatorName>>* overloads = nullptr;
  const c10::FunctionSchema& s = op.schema();
  std::lock_guard<std::mutex> g(mu);
  auto hit = cache.find(&s);
  if (hit != cache.end()) return hit->second;
  if (!overloads) {
    overloads = new std::unordered_map<std::string, std::vector<c10::OperatorName>>();
    for (const auto& name : c10::Dispatcher::singleton().getAllOpNames())
      (*overloads)[name.name].push_back(name);
  }
  std::optional<c10::OperatorHandle> found;
  const auto& args = s.arguments();
  const size_t nret = s.returns().size();
  bool functional = nret > 0 && !s.is_mutable();
  // The CPU's out= kernels of the reducing losses (mse_loss, smooth_l1_loss,
  // binary_cross_entropy, ...) resize their result twice and warn about it
  // when it is not empty: those replay functionally, and copy a scalar.
  for (const auto& a : args) functional = functional && a.name() != "reduction";
  for (const auto& r : s.returns()) functional = functional && *r.type() == *c10::TensorType::get();
  auto names = overloads->find(s.name());
  if (functional && names != overloads->end()) {
    for (const auto& name : names->second) {
      auto cand = c10::Dispatcher::singleton().findOp(name);
      if (!cand || !cand->hasSchema()) continue;
      const auto& cargs = cand->schema().arguments();
      if (cargs.size() != args.size() + nret) continue;
      bool match = true;
      for (size_t i = 0; i < args.size() && match; ++i)
        match = cargs[i].name() == args[i].name() && *cargs[i].type() == *args[i].type();
      for (size_t i = args.size(); i < cargs.size() && match; ++i)
        match = cargs[i].kwarg_only() && cargs[i].alias_info() &&
                cargs[i].alias_info()->isWrite() && *cargs[i].type() == *c10::TensorType::get();
      if (match) {
        found = *cand;
        break;
      }
    }
  }
  cache.emplace(&s, found);
  return found;
}

// Invalidate the capture on `stream` (a call that is illegal while it
// captures, as the runtime's own checks do) and raise `why`.
[[noreturn]] void fail_capture(orStream_t stream, const std::string& why) {
  std::string runtime;
  if (orStreamSynchronize(stream) != orSuccess) {
    runtime = orGetLastErrorMessage();
    orGetLastError();
  }
  TORCH_CHECK(false, why, " [", runtime, "]");
}

// ---------------------------------------------------------------- capture

// The memory each capture's nodes touch, by capture id: a replay declares it
// to the stream sanitizer as one launch's accesses (reads, and writes for
// the arguments an operator writes and the results it fills).
std::mutex g_accesses_mu;
std::unordered_map<unsigned long long, std::vector<SanitizerAccess>> g_accesses;

void record_accesses(unsigned long long capture_id, const Node& node, bool out_variant,
                     const std::vector<at::Tensor>& fresh) {
  std::vector<SanitizerAccess> mine;
  auto add = [&](const at::Tensor& t, bool write) {
    const void* p = nullptr;
    size_t n = 0;
    if (is_openreg(t) && tensor_footprint(t, &p, &n))
      mine.push_back({p, n, write, sanitizer_label(t)});
  };
  const auto& args = node.op.schema().arguments();
  for (size_t i = 0; i < node.args.size() && i < args.size(); ++i) {
    const bool write = args[i].alias_info() && args[i].alias_info()->isWrite();
    for_each_tensor(node.args[i], [&](const at::Tensor& t) { add(t, write); });
  }
  if (!out_variant)
    for (const at::Tensor& t : fresh) add(t, true);
  std::lock_guard<std::mutex> g(g_accesses_mu);
  auto& all = g_accesses[capture_id];
  all.insert(all.end(), mine.begin(), mine.end());
}

std::vector<SanitizerAccess> take_accesses(unsigned long long capture_id) {
  std::lock_guard<std::mutex> g(g_accesses_mu);
  auto it = g_accesses.find(capture_id);
  if (it == g_accesses.end()) return {};
  std::vector<SanitizerAccess> v = std::move(it->second);
  g_accesses.erase(it);
  return v;
}

}  // namespace

// [docs:graph-capture-fallback]
void capture_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                      torch::jit::Stack* stack) {
  const auto below = ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kCaptureKey);
  if (g_captures.load(std::memory_order_relaxed) == 0 || graph_inline_depth != 0)
    return op.redispatchBoxed(below, stack);
  const c10::FunctionSchema& schema = op.schema();
  const size_t n = schema.arguments().size();
  const size_t begin = stack->size() - n;
  const auto device = openreg_device(*stack, begin);
  if (!device) return op.redispatchBoxed(below, stack);
  const orStream_t stream = currentNativeStream(*device);
  orStreamCaptureStatus status = orStreamCaptureStatusNone;
  unsigned long long capture_id = 0;
  OPENREG_CHECK(orStreamGetCaptureInfo(stream, &status, &capture_id));
  if (status == orStreamCaptureStatusNone) return op.redispatchBoxed(below, stack);
  const std::string what = c10::str("'", schema.operator_name(), "'");
  TORCH_CHECK(status == orStreamCaptureStatusActive, "openreg: ", what,
              " was called on a stream whose capture was invalidated by an earlier error; "
              "end the capture (it fails) and capture again");

  switch (classify(schema)) {
    case Kind::AtCapture: {
      ++graph_inline_depth;  // views only compute metadata
      try {
        op.redispatchBoxed(below, stack);
      } catch (...) {
        --graph_inline_depth;
        throw;
      }
      --graph_inline_depth;
      return;
    }
    case Kind::HostSync:
      fail_capture(stream, c10::str("openreg: ", what, " needs a value on the host (it "
                                    "synchronizes with the device), which is not permitted "
                                    "while the stream is capturing a graph; the capture is "
                                    "invalidated. Move it out of the captured region"));
    case Kind::Record:
      break;
  }

  // Copies from or to the host (or another device) are the runtime's to
  // record or refuse (an async copy from pinned memory is recorded, a
  // blocking one to the host invalidates the capture).
  bool other_device = false, quantized = false;
  for (size_t i = begin; i < stack->size(); ++i) {
    for_each_tensor((*stack)[i], [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (t.is_quantized()) quantized = true;
      if (!is_openreg(t) ? t.dim() > 0 : t.device().index() != *device) other_device = true;
    });
    const c10::IValue& v = (*stack)[i];
    if (v.isDevice() && v.toDevice() != c10::Device(c10::DeviceType::PrivateUse1, *device))
      other_device = true;  // _to_copy(device="cpu"), ...
  }
  if (other_device && schema.name().find("copy") != std::string::npos) {
    // As CUDA: only an asynchronous copy between the device and pinned host
    // memory can be captured (a memcpy node); a blocking or pageable one
    // waits for the device, and a copy between two devices is not captured.
    const bool copy = schema.name() == "aten::copy_" || schema.name() == "aten::_copy_from" ||
                      schema.name() == "aten::_copy_from_and_resize";
    if (copy) {
      bool non_blocking = false, pinned_host = true, two_devices = false;
      for (size_t i = 0; i < n; ++i) {
        const c10::IValue& v = (*stack)[begin + i];
        if (schema.arguments()[i].name() == "non_blocking" && v.isBool()) non_blocking = v.toBool();
        if (!v.isTensor() || !v.toTensor().defined()) continue;
        const at::Tensor& t = v.toTensor();
        if (!is_openreg(t)) pinned_host = pinned_host && t.is_pinned();
        else if (t.device().index() != *device) two_devices = true;
      }
      if (two_devices)
        fail_capture(stream, c10::str("openreg: ", what, " between two openreg devices cannot "
                                      "be captured in a graph; the capture is invalidated"));
      if (!non_blocking || !pinned_host)
        fail_capture(stream, c10::str("openreg: ", what, " between the host and the device "
                                      "during a graph capture must be non_blocking and use "
                                      "pinned host memory: a blocking or pageable copy waits "
                                      "for the device, which is not permitted while the "
                                      "stream is capturing; the capture is invalidated"));
    }
    return op.redispatchBoxed(below, stack);
  }
  if (quantized)
    fail_capture(stream, c10::str("openreg: ", what, " has quantized arguments, which a graph "
                                  "capture does not record; the capture is invalidated"));
  check_op_devices(schema, *stack, begin);

  // 1. The results' geometry, from the meta kernel.
  MetaMap to_meta;
  torch::jit::Stack meta;
  meta.reserve(n);
  for (size_t i = begin; i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      meta.emplace_back(c10::Device(c10::DeviceType::Meta));
    } else if (v.isGenerator() && is_generator_arg(schema.arguments()[i - begin]) &&
               schema.arguments()[i - begin].type()->kind() == c10::TypeKind::OptionalType) {
      meta.emplace_back();  // meta kernels draw nothing
    } else {
      meta.push_back(map_tensors(v, to_meta));
    }
  }
  try {
    c10::impl::ExcludeDispatchKeyGuard no_capture(kCaptureKey);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  } catch (const std::exception& e) {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    fail_capture(stream, c10::str("openreg: ", what, " cannot be captured in a graph: the "
                                  "capture needs its results' shapes before it runs, and its "
                                  "meta kernel failed (",
                                  c10_error ? c10_error->what_without_backtrace() : e.what(),
                                  "); the capture is invalidated"));
  }

  // 2. The results: written arguments are returned as they are; the others
  //    are allocated now (from the graph's pool: the stream is capturing).
  const auto& args = schema.arguments();
  const auto& rets = schema.returns();
  std::vector<c10::IValue> results;
  std::vector<at::Tensor> fresh;
  bool fresh_undefined = false;
  auto allocate = [&](const at::Tensor& m) -> at::Tensor {
    if (!m.defined()) {
      fresh_undefined = true;
      return m;
    }
    c10::impl::ExcludeDispatchKeyGuard no_capture(kCaptureKey);
    at::Tensor t = at::empty_strided(m.sizes(), m.strides(),
                                     m.options().device(c10::DeviceType::PrivateUse1, *device));
    fresh.push_back(t);
    return t;
  };
  for (size_t j = 0; j < rets.size(); ++j) {
    const c10::IValue& mv = meta[meta.size() - rets.size() + j];
    const c10::AliasInfo* ra = rets[j].alias_info();
    if (ra && ra->isWrite()) {
      std::optional<size_t> arg;
      for (size_t i = 0; i < args.size() && !arg; ++i)
        if (args[i].alias_info() && *args[i].alias_info() == *ra) arg = i;
      TORCH_CHECK(arg && (*stack)[begin + *arg].isTensor() && mv.isTensor(),
                  "openreg graph capture: cannot match the result of ", what,
                  " to the argument it writes");
      at::Tensor t = (*stack)[begin + *arg].toTensor();
      const at::Tensor m = mv.toTensor();
      if (t.sizes() != m.sizes() || t.strides() != m.strides()) {
        // An out= argument the operator resizes: resized now, written at replay.
        c10::impl::ExcludeDispatchKeyGuard no_capture(kCaptureKey);
        ++graph_inline_depth;
        try {
          t.resize_(m.sizes());
          if (t.strides() != m.strides()) t.as_strided_(m.sizes(), m.strides(), t.storage_offset());
        } catch (...) {
          --graph_inline_depth;
          throw;
        }
        --graph_inline_depth;
      }
      results.emplace_back(std::move(t));
    } else if (mv.isTensor()) {
      results.emplace_back(allocate(mv.toTensor()));
    } else if (mv.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& m : mv.toTensorList()) list.push_back(allocate(m));
      results.emplace_back(std::move(list));
    } else {
      results.push_back(mv);  // a non-tensor result the meta kernel computed (SymInt, ...)
    }
  }

  // 3. The node: the call on borrowed tensors, through the out= variant
  //    when there is one, and this kernel's share of the random stream.
  Borrow borrow;
  auto out = fresh_undefined ? std::nullopt : out_variant(op);
  auto node = std::make_unique<Node>(out ? *out : op);
  for (size_t i = begin; i < stack->size(); ++i) node->args.push_back(map_tensors((*stack)[i], borrow));
  if (out) {
    for (const at::Tensor& t : fresh) node->args.emplace_back(borrow(t));
  } else {
    for (const at::Tensor& t : fresh) node->copy_into.push_back(borrow(t));
  }
  static const ska::flat_hash_map<std::string, int> random_without_generator = {
      {"aten::native_dropout", 0},
      {"aten::_fused_dropout", 0},
      {"aten::_scaled_dot_product_fused_attention_overrideable", 1},
  };
  std::optional<at::Generator> gen_arg;
  bool random = false;
  for (size_t i = 0; i < n; ++i) {
    if (!is_generator_arg(args[i])) continue;
    random = true;
    if ((*stack)[begin + i].isGenerator()) gen_arg = (*stack)[begin + i].toGenerator();
  }
  auto rw = random_without_generator.find(schema.name());
  if (rw != random_without_generator.end()) random = true;
  if (random) {
    // As many offsets as every tensor involved has elements (an upper bound
    // of what the kernel draws), or the attention matrix for SDPA.
    uint64_t elems = 0;
    for (size_t i = begin; i < stack->size(); ++i)
      for_each_tensor((*stack)[i], [&](const at::Tensor& t) { if (t.defined()) elems += t.numel(); });
    for (const at::Tensor& t : fresh) elems += t.numel();
    if (rw != random_without_generator.end() && rw->second == 1) {
      const at::Tensor& q = (*stack)[begin].toTensor();
      const at::Tensor& k = (*stack)[begin + 1].toTensor();
      if (q.dim() >= 2 && k.dim() >= 2)
        elems += static_cast<uint64_t>(q.numel() / q.size(-1)) * static_cast<uint64_t>(k.size(-2));
    }
    OpenRegGeneratorImpl* g = openregGeneratorOrDefault(gen_arg, *device);
    std::lock_guard<std::mutex> lock(g->mutex_);
    if (!g->capturing()) {
      fail_capture(stream, c10::str("openreg: ", what, " draws from a generator that this graph "
                                    "does not capture (only the device's default generator is "
                                    "registered with an openreg graph); the capture is invalidated"));
    }
    node->rng = std::make_unique<PinnedPhilox>();
    node->rng->owner = g->state_id();
    node->rng->reserved = philox::increment_for(std::max<uint64_t>(elems, 1));
    node->rng->state = g->philox_state(node->rng->reserved);
    node->rng->op = schema.name().c_str();
  }
  record_accesses(capture_id, *node, out.has_value(), fresh);
  Node* raw = node.release();
  orError_t err = orLaunchKernelOwned(stream, &run_node, raw, &delete_node,
                                      schema.name().c_str(), 0);
  OPENREG_CHECK(err);  // (the runtime deleted the node if it failed)

  torch::jit::drop(*stack, n);
  for (auto& r : results) stack->push_back(std::move(r));
}
// [docs:graph-capture-fallback:end]

TORCH_LIBRARY_IMPL(_, CustomRNGKeyId, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&capture_fallback>());
}

// ---------------------------------------------------------------- GraphImpl

namespace {

std::atomic<unsigned long long> g_pool_uid{1};

struct SlotFill {
  std::shared_ptr<std::pair<uint64_t, uint64_t>> slots;
  std::pair<uint64_t, uint64_t> values;
};
orError_t fill_slots(void* p) {
  auto* f = static_cast<SlotFill*>(p);
  *f->slots = f->values;
  return orSuccess;
}
void delete_fill(void* p) { delete static_cast<SlotFill*>(p); }

orStreamCaptureMode runtime_mode(at::GraphCaptureMode mode) {
  switch (mode) {
    case at::GraphCaptureMode::ThreadLocal: return orStreamCaptureModeThreadLocal;
    case at::GraphCaptureMode::Relaxed: return orStreamCaptureModeRelaxed;
    default: return orStreamCaptureModeGlobal;  // CUDA's default too
  }
}

}  // namespace

// [docs:graph-impl]
class OpenRegGraph final : public at::GraphImplInterface {
 public:
  explicit OpenRegGraph(const at::GraphImplArgs& args) : keep_graph_(args.keep_graph) {}
  ~OpenRegGraph() override {
    try {
      reset();
    } catch (const std::exception& e) {
      TORCH_WARN("openreg graph: reset at destruction failed: ", e.what());
    }
  }

  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) override {
    TORCH_CHECK(!has_graph_ && !capturing_,
                "This openreg graph has already been captured; call reset() before capturing "
                "it again");
    const c10::DeviceIndex device = current_device();
    const c10::Stream stream = getCurrentStream(device);
    TORCH_CHECK(stream != getDefaultStream(device),
                "openreg graphs must be captured on a non-default stream. (However, after "
                "capture, it's ok to replay them on the default stream.)");
    if (pool.first != 0 || pool.second != 0) {
      TORCH_CHECK(pool.first == 0 || pool.second == 0,
                  "openreg graph: invalid pool id (", pool.first, ", ", pool.second,
                  "); use another graph's pool() or torch.openreg.graph_pool_handle()");
      pool_ = pool;  // shared with another graph
    } else {
      pool_ = {g_pool_uid.fetch_add(1), 0};  // this graph's own
    }
    gen_ = openregGeneratorOrDefault(std::nullopt, device);
    {
      std::lock_guard<std::mutex> lock(gen_->mutex_);
      gen_->capture_prologue();
      slots_ = gen_->capture_slots();
    }
    const orStream_t s = nativeStream(stream);
    if (const orError_t e = orStreamBeginCapture(s, runtime_mode(mode)); e != orSuccess) {
      std::lock_guard<std::mutex> lock(gen_->mutex_);
      gen_->capture_epilogue();
      throw_runtime_error(e, "orStreamBeginCapture");
    }
    orStreamCaptureStatus status = orStreamCaptureStatusNone;
    OPENREG_CHECK(orStreamGetCaptureInfo(s, &status, &capture_id_));
    beginAllocateToPool(device, pool_, capture_id_);
    pool_held_ = true;
    device_ = device;
    stream_ = stream;
    capturing_ = true;
    capture_thread_ = std::this_thread::get_id();
    key_was_included_ = c10::impl::tls_is_dispatch_key_included(kCaptureKey);
    c10::impl::tls_set_dispatch_key_included(kCaptureKey, true);
    g_captures.fetch_add(1);
  }

  void capture_end() override {
    TORCH_CHECK(capturing_, "openreg graph: capture_end() without capture_begin()");
    TORCH_CHECK(getCurrentStream(device_) == stream_,
                "Capture must end on the same stream it began on.");
    const uint64_t increment = stop_capturing();
    orGraph_t graph = nullptr;
    if (const orError_t e = orStreamEndCapture(nativeStream(stream_), &graph); e != orSuccess) {
      release_pool();
      throw_runtime_error(e, "orStreamEndCapture");
    }
    graph_ = graph;
    rng_increment_ = increment;
    has_graph_ = true;
    if (!keep_graph_) {
      instantiate();
      if (!debug_) destroy_graph();
    }
  }

  void instantiate() override {
    TORCH_CHECK(has_graph_, "openreg graph: instantiate() before a capture");
    TORCH_CHECK(graph_, "openreg graph: the graph was not kept after capture (keep_graph=False)");
    destroy_exec();
    OPENREG_CHECK(orGraphInstantiate(&exec_, graph_));
  }

  void replay() override {
    TORCH_CHECK(has_graph_, "Called replay() on an openreg graph that was not captured (or "
                            "was reset)");
    if (!exec_) instantiate();
    DeviceScope scope(device_);
    const orStream_t s = currentNativeStream(device_);
    if (rng_increment_ > 0) {
      // This replay's seed and offset, written in stream order before it.
      auto* fill = new SlotFill{slots_, {}};
      {
        std::lock_guard<std::mutex> lock(gen_->mutex_);
        fill->values = gen_->replay_values(rng_increment_);
      }
      OPENREG_CHECK(orLaunchKernelOwned(s, &fill_slots, fill, &delete_fill,
                                        "openreg graph rng", 0));
    }
    if (C10_UNLIKELY(sanitizer_on())) {
      // The stream sanitizer checks the replay as one launch touching what
      // its nodes touch.
      for (const SanitizerAccess& a : accesses_)
        OPENREG_CHECK(orSanitizerDeclareAccess(a.ptr, a.bytes, a.write, a.label.c_str()));
    }
    OPENREG_CHECK(orGraphLaunch(exec_, s));
  }

  void reset() override {
    if (capturing_) {
      stop_capturing();
      orGraph_t graph = nullptr;
      if (orStreamEndCapture(nativeStream(stream_), &graph) == orSuccess) orGraphDestroy(graph);
      orGetLastError();
    }
    destroy_exec();
    destroy_graph();
    has_graph_ = false;
    accesses_.clear();
    release_pool();
  }

  c10::MempoolId_t pool() const override { return pool_; }

  void enable_debug_mode() override { debug_ = true; }

  void debug_dump(const std::string& path) override {
    TORCH_CHECK(debug_, "openreg graph: call enable_debug_mode() before capture to keep the "
                        "graph for debug_dump()");
    TORCH_CHECK(graph_, "openreg graph: nothing to dump (capture first)");
    OPENREG_CHECK(orGraphDebugDotPrint(graph_, path.c_str()));
  }

 private:
  // The glue's side of ending a capture: the fallback, the allocator's
  // routing and the generator. Returns the graph's random-offset increment.
  uint64_t stop_capturing() {
    capturing_ = false;
    accesses_ = take_accesses(capture_id_);
    g_captures.fetch_sub(1);
    if (std::this_thread::get_id() == capture_thread_)
      c10::impl::tls_set_dispatch_key_included(kCaptureKey, key_was_included_);
    endAllocateToPool(device_, capture_id_);
    std::lock_guard<std::mutex> lock(gen_->mutex_);
    return gen_->capture_epilogue();
  }
  void release_pool() {
    if (!pool_held_) return;
    pool_held_ = false;
    releasePool(device_, pool_);
  }
  void destroy_exec() {
    if (exec_) orGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  void destroy_graph() {
    if (graph_) orGraphDestroy(graph_);
    graph_ = nullptr;
  }

  bool keep_graph_ = false;
  bool debug_ = false;
  bool capturing_ = false;
  bool has_graph_ = false;
  bool pool_held_ = false;
  bool key_was_included_ = false;
  std::thread::id capture_thread_;
  c10::DeviceIndex device_ = 0;
  c10::Stream stream_{c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, 0)};
  unsigned long long capture_id_ = 0;
  c10::MempoolId_t pool_{0, 0};
  OpenRegGeneratorImpl* gen_ = nullptr;
  std::shared_ptr<std::pair<uint64_t, uint64_t>> slots_;
  uint64_t rng_increment_ = 0;
  std::vector<SanitizerAccess> accesses_;  // what the nodes touch (stream sanitizer)
  orGraph_t graph_ = nullptr;
  orGraphExec_t exec_ = nullptr;
};

}  // namespace torch_openreg

// torch.accelerator.Graph looks the implementation up in
// at::GraphImplRegistry under c10::DeviceTypeName(device_type), which for
// PrivateUse1 is the backend's name in upper case ("OPENREG" once
// torch.utils.rename_privateuse1_backend("openreg") ran). The macro names
// the registry unqualified: use it in namespace at.
namespace at {
REGISTER_GRAPH_IMPL(OPENREG, torch_openreg::OpenRegGraph);
}
// [docs:graph-impl:end]

namespace torch_openreg {

// torch.openreg.graph_pool_handle(): a pool id for graphs to share (CUDA's
// {0, uid}; a graph's own pool is {uid, 0}).
c10::MempoolId_t graphPoolHandle() { return {0, g_pool_uid.fetch_add(1)}; }

bool currentStreamIsCapturing(c10::DeviceIndex device) {
  orStreamCaptureStatus status = orStreamCaptureStatusNone;
  OPENREG_CHECK(orStreamIsCapturing(currentNativeStream(device), &status));
  return status != orStreamCaptureStatusNone;
}

}  // namespace torch_openreg
