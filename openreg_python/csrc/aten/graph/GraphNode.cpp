// A recorded operator of a graph (GraphCapture.h's Node): its replay, the
// out= variant it replays through, and the memory it touches (declared to
// the stream sanitizer when the graph is replayed).
#include "GraphCapture.h"

#include "aten/core/KernelView.h"
#include "aten/core/StackArgs.h"

#include "runtime/OpenRegGenerator.h"

#include <c10/util/flat_hash_map.h>

#include <mutex>
#include <unordered_map>

namespace torch_openreg {

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
    if (n->prepared) {
      // Prepared at capture (GraphPrepared.cpp): the kernel alone.
      KernelScope scope(n->device);
      n->prepared->run();
    } else {
      torch::jit::Stack stack(n->args);
      n->op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), &stack);
      if (!n->copy_into.empty())
        copy_fresh_results(n->op.schema(), stack, n->copy_into);
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

void copy_fresh_results(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                        const std::vector<at::Tensor>& into) {
  size_t k = 0;
  auto one = [&](const at::Tensor& r) {
    if (!r.defined()) return;
    TORCH_INTERNAL_ASSERT(k < into.size());
    into[k++].copy_(r);  // (copy_ is const on at::Tensor)
  };
  // The results the capture allocated, in order: not those that are
  // arguments the operator writes (returned as they are).
  const auto& rets = schema.returns();
  for (size_t j = 0; j < rets.size() && j < stack.size(); ++j) {
    if (rets[j].alias_info() && rets[j].alias_info()->isWrite()) continue;
    const c10::IValue& v = stack[stack.size() - rets.size() + j];
    if (v.isTensor()) one(v.toTensor());
    else if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList()) one(t);
  }
}

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

namespace {
std::mutex g_accesses_mu;
std::unordered_map<unsigned long long, std::vector<SanitizerAccess>> g_accesses;
}  // namespace

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

}  // namespace torch_openreg
