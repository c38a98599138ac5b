// Private to the graph glue: what the capture (GraphCapture.cpp), the
// recorded nodes (GraphNode.cpp) and the graph object (GraphImpl.cpp) share.
// Graph.h is the glue's public side (the bindings').
//
// How the three fit: GraphImpl's capture_begin counts a capture running;
// every openreg kernel's hook (CaptureHook.h) then hands each operator call
// on a capturing stream to the capture (capture_record), which turns it into
// a Node, launched on the stream with orLaunchKernelOwned; the runtime keeps
// the nodes in the graph, and a replay runs them (run_node) in order.
#pragma once

#include "CaptureHook.h"
#include "aten/core/KernelView.h"
#include "aten/core/Sanitizer.h"

#include "runtime/OpenRegGenerator.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/DispatchKey.h>
#include <c10/util/flat_hash_map.h>

#include <openreg.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch_openreg {

// ---------------------------------------------------------------- tensors of a call
// openreg tensors rebuilt with the same geometry over other storages, one
// new storage per original one (so tensors that share a storage still share
// one, and overlap checks see it). Its makers: the capture's meta tensors
// (the results' shapes) and borrowed tensors (what a node replays on), in
// GraphCapture.cpp, and a prepared node's CPU aliases (GraphPrepared.cpp).
struct StorageRemap {
  std::function<c10::Storage(const at::Tensor& t)> make_storage;
  std::function<at::Tensor(const c10::Storage& st, const at::Tensor& t)> make_tensor;
  ska::flat_hash_map<c10::StorageImpl*, c10::Storage> storages{};

  at::Tensor operator()(const at::Tensor& t) {
    if (!is_openreg(t)) return t;
    c10::Storage& st = storages[t.storage().unsafeGetStorageImpl()];
    if (!st) st = make_storage(t);
    at::Tensor r = make_tensor(st, t);
    r.unsafeGetTensorImpl()->_set_conj(t.is_conj());
    r.unsafeGetTensorImpl()->_set_neg(t.is_neg());
    return r;
  }
};

// ---------------------------------------------------------------- nodes (GraphNode.cpp)
// A node's kernel prepared at capture (GraphPrepared.cpp): what is left of
// the operator once its host-side set-up is done, run by the replay.
struct PreparedNode {
  virtual ~PreparedNode() = default;
  virtual void run() = 0;
};

// One recorded operator: what its replay calls.
struct Node {
  explicit Node(c10::OperatorHandle o) : op(std::move(o)) {}
  c10::OperatorHandle op;
  std::vector<c10::IValue> args;       // openreg tensors borrow the captured memory
  std::vector<at::Tensor> copy_into;   // no out= variant: the results are copied here
  std::unique_ptr<PinnedPhilox> rng;   // random operators
  c10::DeviceIndex device = -1;
  std::unique_ptr<PreparedNode> prepared;  // set when the capture could prepare it
};

// The node's kernel (its replay) and its deleter, for orLaunchKernelOwned.
orError_t run_node(void* node);
void delete_node(void* node);

// The out= overload of a functional operator: the same arguments, then one
// written tensor per result (add.Tensor -> add.out). Cached.
std::optional<c10::OperatorHandle> out_variant(const c10::OperatorHandle& op);

// The memory a capture's nodes touch, by capture id: a replay declares it to
// the stream sanitizer as one launch's accesses (reads, and writes for the
// arguments an operator writes and the results it fills). `fresh`: the
// results the capture allocated; `out_variant`: they are arguments of the node.
void record_accesses(unsigned long long capture_id, const Node& node, bool out_variant,
                     const std::vector<at::Tensor>& fresh);
std::vector<SanitizerAccess> take_accesses(unsigned long long capture_id);

// Copies a call's fresh results (those not aliasing a written argument),
// in order, from `stack` (after the call) into `into`.
void copy_fresh_results(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                        const std::vector<at::Tensor>& into);

// ---------------------------------------------------------------- prepared nodes (GraphPrepared.cpp)
// The node's kernel with its set-up done now, or null when the node keeps
// the dispatcher path (OPENREG_GRAPH_PREPARE, docs/graphs.md).
// `called`: the operator the capture saw (node.op may be its out= variant).
std::unique_ptr<PreparedNode> prepare_node(const Node& node, const c10::OperatorHandle& called);

}  // namespace torch_openreg
