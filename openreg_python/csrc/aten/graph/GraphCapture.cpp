// Graph capture, per operator: what a capture records of each operator call.
//
// A CUDA kernel is a function plus its arguments by value, so CUDA captures
// the launch itself. openreg's eager kernels are closures that wrap their
// arguments, allocate their results and run ATen's CPU code in one go
// (KernelView.h): re-running one would allocate new results instead of
// writing the captured ones. So the capture works one level up, per
// operator, below autograd:
//   * while a capture runs, every openreg kernel asks the capture first
//     (CaptureHook.h): a call on a capturing stream, in any thread, is
//     decided on here (capture_action) before the kernel would run;
//   * an operator on a capturing stream is not run: its results' shapes
//     come from its meta kernel, they are allocated at once (from the
//     graph's private pool, as any allocation on a capturing stream), and
//     the call is recorded with orLaunchKernelOwned as a node
//     (GraphNode.cpp) that re-runs the openreg kernel on those fixed
//     addresses: through the operator's out= variant where it has one, else
//     the functional call and a copy;
//   * views and allocations do no device work: they run at capture time;
//   * random operators reserve their part of the generator's stream at
//     capture (the generator is registered with the capture); each replay
//     refills the seed/offset slots in stream order, so every replay draws
//     new numbers and a seeded program draws the same ones.
//
// Vendor: with a device whose kernels take their arguments by value (most
// real ones), the runtime capture of the kernels' own launches is enough and
// this file is not needed; GraphImpl.cpp is what you keep.
#include "CaptureHook.h"
#include "Graph.h"
#include "GraphCapture.h"

#include "aten/core/DeviceCheck.h"
#include "aten/core/KernelView.h"
#include "aten/core/Philox.h"
#include "aten/core/StackArgs.h"

#include "runtime/OpenRegException.h"
#include "runtime/OpenRegFunctions.h"
#include "runtime/OpenRegGenerator.h"
#include "runtime/OpenRegStream.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/flat_hash_map.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_map>

namespace torch_openreg {

std::atomic<int> g_graph_captures{0};

namespace {

// ---------------------------------------------------------------- tensors of a call
// Meta tensors with the geometry of openreg ones (the results' shapes).
StorageRemap to_meta() {
  return {[](const at::Tensor& t) {
            return at::empty({static_cast<int64_t>(t.storage().nbytes())},
                             at::TensorOptions().dtype(at::kByte).device(at::kMeta))
                .storage();
          },
          [](const c10::Storage& st, const at::Tensor& t) {
            at::Tensor m = at::empty({0}, t.options().device(at::kMeta));
            m.set_(st, t.storage_offset(), t.sizes(), t.strides());
            return m;
          }};
}

// openreg tensors over the same device memory that do not own it (the
// graph's pool keeps it; inputs from outside the pool must be kept alive by
// the caller, as with CUDA graphs): what a node replays on.
StorageRemap borrowing() {
  return {[](const at::Tensor& t) {
            return c10::Storage(
                c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                c10::DataPtr(const_cast<void*>(t.storage().data_ptr().get()), t.device()),
                /*allocator=*/nullptr, /*resizable=*/false);
          },
          [](const c10::Storage& st, const at::Tensor& t) {
            return make_openreg_tensor(st, t.dtype(), t.sizes(), t.strides(),
                                       t.storage_offset());
          }};
}

// ---------------------------------------------------------------- what to do with a call
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

// One operator call on a capturing stream, as the steps below see it.
struct Call {
  const c10::OperatorHandle& op;
  const torch::jit::Stack* stack;
  size_t begin;                   // its arguments are stack[begin...]
  c10::DeviceIndex device;
  orStream_t stream;              // the capturing stream
  unsigned long long capture_id;
  std::string what;               // "'aten::add.Tensor'", for messages
  const c10::FunctionSchema& schema() const { return op.schema(); }
  size_t n() const { return stack->size() - begin; }
  const c10::IValue& arg(size_t i) const { return (*stack)[begin + i]; }
  template <class F>
  void for_each_arg_tensor(F&& f) const {
    for (size_t i = begin; i < stack->size(); ++i) for_each_tensor((*stack)[i], f);
  }
};

// [docs:graph-capture-call]
// Copies from or to the host (or another device) are the runtime's to
// record or refuse (an async copy from pinned memory is recorded, a
// blocking one to the host invalidates the capture): true for a call that
// goes on to the openreg kernels as it is. Quantized arguments and copies
// the runtime cannot capture fail the capture.
bool passes_to_runtime(const Call& c) {
  bool other_device = false, quantized = false;
  c.for_each_arg_tensor([&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.is_quantized()) quantized = true;
    if (!is_openreg(t) ? t.dim() > 0 : t.device().index() != c.device) other_device = true;
  });
  for (size_t i = 0; i < c.n(); ++i) {
    const c10::IValue& v = c.arg(i);
    if (v.isDevice() && v.toDevice() != c10::Device(c10::DeviceType::PrivateUse1, c.device))
      other_device = true;  // _to_copy(device="cpu"), ...
  }
  const std::string& name = c.schema().name();
  if (other_device && name.find("copy") != std::string::npos) {
    // As CUDA: only an asynchronous copy between the device and pinned host
    // memory can be captured (a memcpy node); a blocking or pageable one
    // waits for the device, and a copy between two devices is not captured.
    if (name == "aten::copy_" || name == "aten::_copy_from" ||
        name == "aten::_copy_from_and_resize") {
      bool non_blocking = false, pinned_host = true, two_devices = false;
      for (size_t i = 0; i < c.n(); ++i) {
        const c10::IValue& v = c.arg(i);
        if (c.schema().arguments()[i].name() == "non_blocking" && v.isBool())
          non_blocking = v.toBool();
        if (!v.isTensor() || !v.toTensor().defined()) continue;
        const at::Tensor& t = v.toTensor();
        if (!is_openreg(t)) pinned_host = pinned_host && t.is_pinned();
        else if (t.device().index() != c.device) two_devices = true;
      }
      if (two_devices)
        fail_capture(c.stream, c10::str("openreg: ", c.what, " between two openreg devices "
                                        "cannot be captured in a graph; the capture is "
                                        "invalidated"));
      if (!non_blocking || !pinned_host)
        fail_capture(c.stream, c10::str("openreg: ", c.what, " between the host and the device "
                                        "during a graph capture must be non_blocking and use "
                                        "pinned host memory: a blocking or pageable copy waits "
                                        "for the device, which is not permitted while the "
                                        "stream is capturing; the capture is invalidated"));
    }
    return true;
  }
  if (quantized)
    fail_capture(c.stream, c10::str("openreg: ", c.what, " has quantized arguments, which a "
                                    "graph capture does not record; the capture is invalidated"));
  return false;
}

// 1. The results' geometry, from the meta kernel (on meta twins of the
//    arguments): the stack of its results.
torch::jit::Stack meta_results(const Call& c) {
  StorageRemap meta_of = to_meta();
  torch::jit::Stack meta;
  meta.reserve(c.n());
  for (size_t i = 0; i < c.n(); ++i) {
    const c10::IValue& v = c.arg(i);
    const c10::Argument& a = c.schema().arguments()[i];
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      meta.emplace_back(c10::Device(c10::DeviceType::Meta));
    } else if (v.isGenerator() && is_optional_generator(a)) {
      meta.emplace_back();  // meta kernels draw nothing
    } else {
      meta.push_back(map_tensors(v, meta_of));
    }
  }
  try {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    c.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  } catch (const std::exception& e) {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    fail_capture(c.stream, c10::str("openreg: ", c.what, " cannot be captured in a graph: the "
                                    "capture needs its results' shapes before it runs, and its "
                                    "meta kernel failed (",
                                    c10_error ? c10_error->what_without_backtrace() : e.what(),
                                    "); the capture is invalidated"));
  }
  return meta;
}

// 2. The results: written arguments are returned as they are (resized now
//    if the operator resizes them); the others are allocated now (from the
//    graph's pool: the stream is capturing).
struct Results {
  std::vector<c10::IValue> values;  // what the call returns
  std::vector<at::Tensor> fresh;    // the tensors allocated for it
  bool fresh_undefined = false;     // a result the meta kernel left undefined
};

// Result j, which the operator writes into the argument aliased with it.
at::Tensor written_result(const Call& c, const c10::AliasInfo& ra, const c10::IValue& mv) {
  const auto& args = c.schema().arguments();
  std::optional<size_t> arg;
  for (size_t i = 0; i < args.size() && !arg; ++i)
    if (args[i].alias_info() && *args[i].alias_info() == ra) arg = i;
  TORCH_CHECK(arg && c.arg(*arg).isTensor() && mv.isTensor(),
              "openreg graph capture: cannot match the result of ", c.what,
              " to the argument it writes");
  at::Tensor t = c.arg(*arg).toTensor();
  const at::Tensor m = mv.toTensor();
  if (t.sizes() != m.sizes() || t.strides() != m.strides()) {
    // An out= argument the operator resizes: resized now, written at replay.
    at_capture([&] {
      t.resize_(m.sizes());
      if (t.strides() != m.strides()) t.as_strided_(m.sizes(), m.strides(), t.storage_offset());
    });
  }
  return t;
}

Results allocate_results(const Call& c, const torch::jit::Stack& meta) {
  Results r;
  auto allocate = [&](const at::Tensor& m) -> at::Tensor {
    if (!m.defined()) {
      r.fresh_undefined = true;
      return m;
    }
    at::Tensor t = at::empty_strided(m.sizes(), m.strides(),
                                     m.options().device(c10::DeviceType::PrivateUse1, c.device));
    r.fresh.push_back(t);
    return t;
  };
  const auto& rets = c.schema().returns();
  for (size_t j = 0; j < rets.size(); ++j) {
    const c10::IValue& mv = meta[meta.size() - rets.size() + j];
    const c10::AliasInfo* ra = rets[j].alias_info();
    if (ra && ra->isWrite()) {
      r.values.emplace_back(written_result(c, *ra, mv));
    } else if (mv.isTensor()) {
      r.values.emplace_back(allocate(mv.toTensor()));
    } else if (mv.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& m : mv.toTensorList()) list.push_back(allocate(m));
      r.values.emplace_back(std::move(list));
    } else {
      r.values.push_back(mv);  // a non-tensor result the meta kernel computed (SymInt, ...)
    }
  }
  return r;
}

// 3. The node: the call on borrowed tensors, through the out= variant when
//    there is one (`*through_out`), else the call and a copy into the results.
std::unique_ptr<Node> make_node(const Call& c, const Results& r, bool* through_out) {
  StorageRemap borrow = borrowing();
  auto out = r.fresh_undefined ? std::nullopt : out_variant(c.op);
  *through_out = out.has_value();
  auto node = std::make_unique<Node>(out ? *out : c.op);
  node->device = c.device;
  for (size_t i = 0; i < c.n(); ++i) node->args.push_back(map_tensors(c.arg(i), borrow));
  for (const at::Tensor& t : r.fresh) {
    if (out) node->args.emplace_back(borrow(t));
    else node->copy_into.push_back(borrow(t));
  }
  return node;
}

// 4. A random operator's share of the generator's stream, reserved now: as
//    many offsets as every tensor involved has elements (an upper bound of
//    what the kernel draws), or the attention matrix for SDPA.
void reserve_random(const Call& c, const Results& r, Node& node) {
  static const ska::flat_hash_map<std::string, int> random_without_generator = {
      {"aten::native_dropout", 0},
      {"aten::_fused_dropout", 0},
      {"aten::_scaled_dot_product_fused_attention_overrideable", 1},
  };
  std::optional<at::Generator> gen_arg;
  bool random = false;
  for (size_t i = 0; i < c.n(); ++i) {
    if (!is_generator_arg(c.schema().arguments()[i])) continue;
    random = true;
    if (c.arg(i).isGenerator()) gen_arg = c.arg(i).toGenerator();
  }
  auto rw = random_without_generator.find(c.schema().name());
  if (rw != random_without_generator.end()) random = true;
  if (!random) return;
  uint64_t elems = 0;
  c.for_each_arg_tensor([&](const at::Tensor& t) { if (t.defined()) elems += t.numel(); });
  for (const at::Tensor& t : r.fresh) elems += t.numel();
  if (rw != random_without_generator.end() && rw->second == 1) {
    const at::Tensor& q = c.arg(0).toTensor();
    const at::Tensor& k = c.arg(1).toTensor();
    if (q.dim() >= 2 && k.dim() >= 2)
      elems += static_cast<uint64_t>(q.numel() / q.size(-1)) * static_cast<uint64_t>(k.size(-2));
  }
  OpenRegGeneratorImpl* g = openregGeneratorOrDefault(gen_arg, c.device);
  std::lock_guard<std::mutex> lock(g->mutex_);
  if (!g->capturing()) {
    fail_capture(c.stream, c10::str("openreg: ", c.what, " draws from a generator that this "
                                    "graph does not capture (only the device's default "
                                    "generator is registered with an openreg graph); the "
                                    "capture is invalidated"));
  }
  node.rng = std::make_unique<PinnedPhilox>();
  node.rng->owner = g->state_id();
  node.rng->reserved = philox::increment_for(std::max<uint64_t>(elems, 1));
  node.rng->state = g->philox_state(node.rng->reserved);
  node.rng->op = c.schema().name().c_str();
}

// Records the call as a node on the capturing stream and puts its results
// on `stack` in place of its arguments.
void record(const Call& c, torch::jit::Stack* stack) {
  const torch::jit::Stack meta = meta_results(c);
  Results r = allocate_results(c, meta);
  bool through_out = false;
  std::unique_ptr<Node> node = make_node(c, r, &through_out);
  reserve_random(c, r, *node);
  // (random nodes are not prepared)
  node->prepared = at_capture([&] { return prepare_node(*node, c.op); });
  record_accesses(c.capture_id, *node, through_out, r.fresh);
  Node* raw = node.release();
  orError_t err = orLaunchKernelOwned(c.stream, &run_node, raw, &delete_node,
                                      c.schema().name().c_str(), 0);
  OPENREG_CHECK(err);  // (the runtime deleted the node if it failed)
  torch::jit::drop(*stack, c.n());
  for (auto& v : r.values) stack->push_back(std::move(v));
}

// The call as the steps above see it, when its device's current stream
// captures (else nullopt).
std::optional<Call> capturing_call(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t begin = stack.size() - schema.arguments().size();
  const auto device = stack_device(stack, begin, stack.size());
  if (!device) return std::nullopt;
  const orStream_t stream = currentNativeStream(*device);
  orStreamCaptureStatus status = orStreamCaptureStatusNone;
  unsigned long long capture_id = 0;
  OPENREG_CHECK(orStreamGetCaptureInfo(stream, &status, &capture_id));
  if (status == orStreamCaptureStatusNone) return std::nullopt;
  Call call{op, &stack, begin, *device, stream, capture_id,
            c10::str("'", schema.operator_name(), "'")};
  TORCH_CHECK(status == orStreamCaptureStatusActive, "openreg: ", call.what,
              " was called on a stream whose capture was invalidated by an earlier error; "
              "end the capture (it fails) and capture again");
  return call;
}

}  // namespace

CaptureAction capture_action(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const std::optional<Call> call = capturing_call(op, stack);
  if (!call) return CaptureAction::Run;
  switch (classify(op.schema())) {
    case Kind::AtCapture:  // views only compute metadata
      return CaptureAction::RunAtCapture;
    case Kind::HostSync:
      fail_capture(call->stream, c10::str("openreg: ", call->what, " needs a value on the host "
                                          "(it synchronizes with the device), which is not "
                                          "permitted while the stream is capturing a graph; the "
                                          "capture is invalidated. Move it out of the captured "
                                          "region"));
    case Kind::Record:
      break;
  }
  if (passes_to_runtime(*call)) return CaptureAction::Run;
  check_op_devices(op.schema(), stack, call->begin);
  return CaptureAction::Record;
}

void capture_record(const c10::OperatorHandle& op, c10::DispatchKeySet /*ks*/,
                    torch::jit::Stack* stack) {
  const std::optional<Call> call = capturing_call(op, *stack);
  TORCH_INTERNAL_ASSERT(call, "openreg graph capture: ", op.schema().operator_name(),
                        " is not on a capturing stream");
  record(*call, stack);
}
// [docs:graph-capture-call:end]

c10::OperatorHandle capture_op_handle(const char* name) {
  std::string full(name);
  const size_t dot = full.find('.');
  std::string base = full.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : full.substr(dot + 1);
  auto& d = c10::Dispatcher::singleton();
  if (base.find("::") != std::string::npos) {
    if (auto op = d.findOp({base, overload})) return *op;
  } else {
    for (const char* ns : {"aten::", "openreg::"})
      if (auto op = d.findOp({ns + base, overload})) return *op;
  }
  TORCH_INTERNAL_ASSERT(false, "openreg graph capture: no operator named ", name);
}

}  // namespace torch_openreg
