// The graph capture's hook in every openreg kernel (GraphCapture.cpp does
// the recording).
//
// Each openreg kernel asks, before it runs, whether a graph capture wants
// the call: the boxed fallback (Fallback.cpp), the CPU-kernel wrappers
// (CpuKernel.h), the promised-layout kernels (MetaLayout.cpp) and every
// hand-written kernel, registered through OPENREG_CAPTURABLE_IMPL. Outside a
// capture the question is one relaxed atomic load.
//
// Why in the kernels and not as a dispatch key the capturing thread turns
// on: a key in the thread's dispatch-key set is part of what torch.compile
// guards on (a tensor's dispatch keys are its own plus the thread's), so a
// compiled function warmed up outside the capture would recompile inside
// it, and the recompiled code would not be the code that was warmed up.
// The kernels are what a real device's capture sees too (its launches).
#pragma once

#include "aten/core/KernelView.h"

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <utility>

namespace torch_openreg {

// openreg captures running in the process (GraphImpl.cpp counts them).
extern std::atomic<int> g_graph_captures;

// True when a call may be one a capture records: a capture is running and
// this call is not the capture's own work (a replay, a view it runs, ...).
inline bool capture_may_intercept() {
  return C10_UNLIKELY(g_graph_captures.load(std::memory_order_relaxed) != 0) &&
         graph_inline_depth == 0;
}

// What the kernel does with a call while a capture runs.
enum class CaptureAction : uint8_t {
  Run,           // not on a capturing stream, or a copy the runtime records itself
  RunAtCapture,  // no device work (views, metadata): run now, as the capture's own work
  Record,        // recorded as a graph node (capture_record), not run
};

// Decides for the call whose arguments end `stack`; raises (and invalidates
// the capture) for a call that cannot be captured. GraphCapture.cpp.
CaptureAction capture_action(const c10::OperatorHandle& op, const torch::jit::Stack& stack);

// Records the call (arguments at the end of `stack`) as a node of the
// capture and replaces them by its results. A boxed kernel. GraphCapture.cpp.
void capture_record(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                    torch::jit::Stack* stack);

// Runs `f` as work done at capture time (not recorded, not a node).
template <class F>
decltype(auto) at_capture(F&& f) {
  struct Depth {
    Depth() { ++graph_inline_depth; }
    ~Depth() { --graph_inline_depth; }
  } depth;
  return f();
}

// The operator a hand-written kernel is registered for: "name.overload"
// in aten or openreg, or "ns::name.overload". Looked up once per kernel.
c10::OperatorHandle capture_op_handle(const char* name);

// A boxed kernel's hook: true when it handled the call (recorded it or ran
// it as capture work through `run`), false when the kernel runs as usual.
template <class Run>
bool captured_boxed(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                    torch::jit::Stack* stack, Run&& run) {
  if (!capture_may_intercept()) return false;
  switch (capture_action(op, *stack)) {
    case CaptureAction::Run: return false;
    case CaptureAction::RunAtCapture: at_capture([&] { run(op, ks, stack); }); return true;
    case CaptureAction::Record: capture_record(op, ks, stack); return true;
  }
  return false;
}

// An unboxed kernel's hook: `run()` calls the kernel; while a capture runs,
// the call is boxed to be decided on and, if recorded, its results are
// unboxed into R (a written argument comes back as the caller's reference).
template <class R, class... A, class Run>
R capture_or_run(const c10::OperatorHandle& op, Run&& run, A... args) {
  const torch::jit::Stack boxed = c10::impl::boxArgs<A...>(args...);
  switch (capture_action(op, boxed)) {
    case CaptureAction::Run: break;
    case CaptureAction::RunAtCapture: return at_capture(run);
    case CaptureAction::Record: {
      static const c10::BoxedKernel record =
          c10::BoxedKernel::makeFromFunction<&capture_record>();
      return c10::impl::BoxedKernelWrapper<R(A...)>::call(
          record, op, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
          std::forward<A>(args)...);
    }
  }
  return run();
}

// A hand-written kernel Fn of operator Name with the capture hook in front.
template <class FnType, FnType* Fn, const char* Name>
struct Capturable;

template <class R, class... A, R (*Fn)(A...), const char* Name>
struct Capturable<R(A...), Fn, Name> {
  static R call(A... args) {
    if (C10_LIKELY(!capture_may_intercept())) return Fn(std::forward<A>(args)...);
    static const c10::OperatorHandle op = capture_op_handle(Name);
    return capture_or_run<R, A...>(
        op, [&]() -> R { return Fn(std::forward<A>(args)...); }, args...);
  }
};

}  // namespace torch_openreg

// m.impl(NAME, FN) with the capture hook in front of FN: every openreg
// kernel written by hand is registered through it. NAME as m.impl takes it.
// [docs:capturable-impl]
#define OPENREG_CAPTURABLE_IMPL(m, NAME, FN)                                          \
  do {                                                                                \
    static constexpr char openreg_capturable_name[] = NAME;                           \
    m.impl(NAME, TORCH_FN((::torch_openreg::Capturable<std::remove_pointer_t<decltype(&FN)>, \
                                                       &FN, openreg_capturable_name>::call))); \
  } while (0)
// [docs:capturable-impl:end]
