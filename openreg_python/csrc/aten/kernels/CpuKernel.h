// Unboxed openreg kernels generated from ATen's CPU entry points.
//
// `CpuKernel<&at::cpu::add, name>::call` has exactly the signature of
// at::cpu::add, so it can be registered for PrivateUse1 under the matching
// schema. It finds the device, wraps openreg arguments as CPU aliases
// (KernelView.h), calls the CPU function directly (no second dispatch) as a
// kernel on the device's current stream, and unwraps the results: the same
// zero-copy scheme as the boxed fallback, minus boxing and schema walking.
// This is how the hot operators (elementwise, reductions, matmul, softmax,
// norms, indexing, cat, ...) are registered, through their CPU out-variants
// and structured kernels (the at::cpu:: namespace).
#pragma once

#include "aten/graph/CaptureHook.h"
#include "aten/core/DeviceCheck.h"
#include "aten/core/KernelView.h"

#include <ATen/core/List.h>
#include <ATen/core/IListRef.h>

#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace torch_openreg {
namespace cpu_kernel {

// ---- argument conversion: openreg -> CPU alias ------------------------------
template <class A>
struct Conv {  // scalars, sizes, flags, ...: passed through
  using Held = std::decay_t<A>;
  static Held in(AliasSet&, A v) { return v; }
  static A pass(Held& h) { return h; }
  static void find_device(const Held&, c10::DeviceIndex*) {}
  static bool on(const Held&, c10::DeviceIndex) { return true; }
  static void check(const Held&, DeviceChecker&, const OpDeviceInfo&, size_t) {}
  static void write_back(AliasSet&, A, Held&) {}
};

// A tensor argument's alias, on loan from the AliasSet for the launch
// (AliasSet::lend_alias): moved, not shared, so converting an argument
// costs no reference count update, and handed back when dropped.
struct LentAlias {
  // (index first: lend_alias sets it while `t` is initialised.)
  int index = -1;
  AliasSet* set = nullptr;
  at::Tensor t;
  LentAlias(AliasSet& s, const at::Tensor& arg, bool write)
      : set(&s), t(s.lend_alias(arg, write, &index)) {}
  LentAlias(LentAlias&& o) noexcept : index(o.index), set(o.set), t(std::move(o.t)) {
    o.index = -1;
  }
  LentAlias(const LentAlias&) = delete;
  LentAlias& operator=(const LentAlias&) = delete;
  LentAlias& operator=(LentAlias&&) = delete;
  ~LentAlias() {
    if (index >= 0) set->give_back(index, std::move(t));
  }
};

template <>
struct Conv<const at::Tensor&> {
  using Held = LentAlias;
  static Held in(AliasSet& s, const at::Tensor& t) { return LentAlias(s, t, false); }
  static const at::Tensor& pass(Held& h) { return h.t; }
  // (Inlined: every operator passes here for each tensor argument.)
  C10_ALWAYS_INLINE static void find_device(const at::Tensor& t, c10::DeviceIndex* d) {
    if (*d < 0 && t.defined() && t.is_privateuseone()) *d = t.device().index();
  }
  // Undefined, or on openreg:`d`.
  C10_ALWAYS_INLINE static bool on(const at::Tensor& t, c10::DeviceIndex d) {
    return !t.defined() || (t.is_privateuseone() && t.device().index() == d);
  }
  static void check(const at::Tensor& t, DeviceChecker& c, const OpDeviceInfo& info, size_t i) {
    c.check(t, info.arg_name(i), info.written(i), info.is_index(i));
  }
  static void write_back(AliasSet&, const at::Tensor&, Held&) {}
};

template <>
struct Conv<at::Tensor&> {  // mutated (in-place self, out=)
  using Held = LentAlias;
  static Held in(AliasSet& s, at::Tensor& t) { return LentAlias(s, t, /*write=*/true); }
  static at::Tensor& pass(Held& h) { return h.t; }
  C10_ALWAYS_INLINE static void find_device(const at::Tensor& t, c10::DeviceIndex* d) {
    Conv<const at::Tensor&>::find_device(t, d);
  }
  C10_ALWAYS_INLINE static bool on(const at::Tensor& t, c10::DeviceIndex d) {
    return Conv<const at::Tensor&>::on(t, d);
  }
  static void check(const at::Tensor& t, DeviceChecker& c, const OpDeviceInfo& info, size_t i) {
    c.check(t, info.arg_name(i), /*is_output=*/true);
  }
  static void write_back(AliasSet& s, at::Tensor& t, Held& h) {
    if (is_openreg(t)) s.sync_back(t, h.t);
  }
};

template <>
struct Conv<const std::optional<at::Tensor>&> {
  using Held = std::optional<at::Tensor>;
  static Held in(AliasSet& s, const std::optional<at::Tensor>& t) {
    if (!t) return std::nullopt;
    return s.alias(*t);
  }
  static const std::optional<at::Tensor>& pass(Held& h) { return h; }
  static void find_device(const std::optional<at::Tensor>& t, c10::DeviceIndex* d) {
    if (t) Conv<const at::Tensor&>::find_device(*t, d);
  }
  static bool on(const std::optional<at::Tensor>& t, c10::DeviceIndex d) {
    return !t || Conv<const at::Tensor&>::on(*t, d);
  }
  static void check(const std::optional<at::Tensor>& t, DeviceChecker& c,
                    const OpDeviceInfo& info, size_t i) {
    if (t) Conv<const at::Tensor&>::check(*t, c, info, i);
  }
  static void write_back(AliasSet&, const std::optional<at::Tensor>&, Held&) {}
};

template <>
struct Conv<at::TensorList> {
  using Held = std::vector<at::Tensor>;
  static Held in(AliasSet& s, at::TensorList ts) {
    Held out;
    out.reserve(ts.size());
    for (const auto& t : ts) out.push_back(s.alias(t));
    return out;
  }
  static at::TensorList pass(Held& h) { return h; }
  static void find_device(at::TensorList ts, c10::DeviceIndex* d) {
    for (const auto& t : ts) Conv<const at::Tensor&>::find_device(t, d);
  }
  static bool on(at::TensorList ts, c10::DeviceIndex d) {
    for (const auto& t : ts)
      if (!Conv<const at::Tensor&>::on(t, d)) return false;
    return true;
  }
  static void check(at::TensorList ts, DeviceChecker& c, const OpDeviceInfo& info, size_t i) {
    for (const auto& t : ts) Conv<const at::Tensor&>::check(t, c, info, i);
  }
  static void write_back(AliasSet&, at::TensorList, Held&) {}
};

template <>
struct Conv<const at::ITensorListRef&> {
  struct Held {
    std::vector<at::Tensor> tensors;
    at::ITensorListRef ref;
  };
  static Held in(AliasSet& s, const at::ITensorListRef& ts) {
    Held out;
    for (const at::Tensor& t : ts) out.tensors.push_back(s.alias(t));
    out.ref = at::ITensorListRef(at::ArrayRef<at::Tensor>(out.tensors));
    return out;
  }
  static const at::ITensorListRef& pass(Held& h) { return h.ref; }
  static void find_device(const at::ITensorListRef& ts, c10::DeviceIndex* d) {
    for (const at::Tensor& t : ts) Conv<const at::Tensor&>::find_device(t, d);
  }
  static bool on(const at::ITensorListRef& ts, c10::DeviceIndex d) {
    for (const at::Tensor& t : ts)
      if (!Conv<const at::Tensor&>::on(t, d)) return false;
    return true;
  }
  static void check(const at::ITensorListRef& ts, DeviceChecker& c, const OpDeviceInfo& info,
                    size_t i) {
    for (const at::Tensor& t : ts) Conv<const at::Tensor&>::check(t, c, info, i);
  }
  static void write_back(AliasSet&, const at::ITensorListRef&, Held&) {}
};

template <>
struct Conv<const c10::List<std::optional<at::Tensor>>&> {
  using Held = c10::List<std::optional<at::Tensor>>;
  static Held in(AliasSet& s, const c10::List<std::optional<at::Tensor>>& ts) {
    Held out;
    out.reserve(ts.size());
    for (const std::optional<at::Tensor>& t : ts) {
      out.push_back(t ? std::optional<at::Tensor>(s.alias(*t)) : std::nullopt);
    }
    return out;
  }
  static const c10::List<std::optional<at::Tensor>>& pass(Held& h) { return h; }
  static void find_device(const c10::List<std::optional<at::Tensor>>& ts, c10::DeviceIndex* d) {
    for (const std::optional<at::Tensor>& t : ts) {
      if (t) Conv<const at::Tensor&>::find_device(*t, d);
    }
  }
  static bool on(const c10::List<std::optional<at::Tensor>>& ts, c10::DeviceIndex d) {
    for (const std::optional<at::Tensor>& t : ts)
      if (t && !Conv<const at::Tensor&>::on(*t, d)) return false;
    return true;
  }
  static void check(const c10::List<std::optional<at::Tensor>>& ts, DeviceChecker& c,
                    const OpDeviceInfo& info, size_t i) {
    for (const std::optional<at::Tensor>& t : ts) {
      if (t) Conv<const at::Tensor&>::check(*t, c, info, i);
    }
  }
  static void write_back(AliasSet&, const c10::List<std::optional<at::Tensor>>&, Held&) {}
};

// ---- result conversion: CPU -> openreg --------------------------------------
template <class R>
struct Ret {  // non-tensor results
  template <class... A>
  static R out(AliasSet&, R r, A&...) { return r; }
};

template <>
struct Ret<at::Tensor> {
  template <class... A>
  static at::Tensor out(AliasSet& s, at::Tensor& r, A&...) { return s.unwrap(std::move(r)); }
};

// A mutated argument returned by reference: return the caller's tensor.
template <class T>
T* pick_arg(c10::TensorImpl* impl, T&) {
  return nullptr;
}
inline at::Tensor* pick_arg(c10::TensorImpl* impl, at::Tensor& t) {
  return t.unsafeGetTensorImpl() == impl ? &t : nullptr;
}
inline const at::Tensor* pick_arg(c10::TensorImpl* impl, const at::Tensor& t) {
  return t.unsafeGetTensorImpl() == impl ? &t : nullptr;
}

template <class Ref, class... A>
Ref find_ref(AliasSet& s, const at::Tensor& r, A&... args) {
  // No new handle to the caller's tensor (see AliasSet::TensorEntry).
  c10::TensorImpl* impl = s.argument_of(r);
  std::remove_reference_t<Ref>* found = nullptr;
  auto try_one = [&](auto& a) {
    if (!found) {
      auto* p = pick_arg(impl, a);
      if constexpr (std::is_convertible_v<decltype(p), std::remove_reference_t<Ref>*>) {
        found = p;
      }
    }
  };
  (try_one(args), ...);
  TORCH_INTERNAL_ASSERT(found, "openreg: a CPU kernel returned a tensor that is not one of its arguments");
  return *found;
}

template <>
struct Ret<at::Tensor&> {
  template <class... A>
  static at::Tensor& out(AliasSet& s, at::Tensor& r, A&... args) {
    return find_ref<at::Tensor&>(s, r, args...);
  }
};

template <>
struct Ret<const at::Tensor&> {
  template <class... A>
  static const at::Tensor& out(AliasSet& s, const at::Tensor& r, A&... args) {
    return find_ref<const at::Tensor&>(s, r, args...);
  }
};

template <>
struct Ret<std::vector<at::Tensor>> {
  template <class... A>
  static std::vector<at::Tensor> out(AliasSet& s, const std::vector<at::Tensor>& r, A&...) {
    std::vector<at::Tensor> v;
    v.reserve(r.size());
    for (const auto& t : r) v.push_back(s.unwrap(t));
    return v;
  }
};

template <class... T>
struct Ret<std::tuple<T...>> {
  template <class... A>
  static std::tuple<T...> out(AliasSet& s, std::tuple<T...>& r, A&... args) {
    return std::apply(
        [&](auto&... e) { return std::tuple<T...>(Ret<T>::out(s, e, args...)...); }, r);
  }
};

// Holds a kernel's result across the launch (references are re-seated).
template <class R>
struct Slot {
  std::optional<R> v;
  void set(R&& r) { v.emplace(std::move(r)); }
  R& get() { return *v; }
};
template <class R>
struct Slot<R&> {
  R* v = nullptr;
  void set(R& r) { v = &r; }
  R& get() { return *v; }
};
template <class... T>
struct Slot<std::tuple<T...>> {
  std::optional<std::tuple<T...>> v;
  void set(std::tuple<T...>&& r) { v.emplace(std::move(r)); }
  std::tuple<T...>& get() { return *v; }
};

// A tensor argument's elements, added to a kernel's work (WideKernel).
template <class A, class V>
inline void add_work(const V& v, int64_t* work) {
  if constexpr (std::is_same_v<std::decay_t<A>, at::Tensor>) *work += v.defined() ? v.numel() : 0;
}

// "add.Tensor" -> "aten::add": the operator, without the overload.
inline std::string launch_name(const char* schema_name) {
  std::string n = schema_name;
  return "aten::" + n.substr(0, n.find('.'));
}

}  // namespace cpu_kernel

template <auto Fn, const char* Name>
struct CpuKernel;

template <class R, class... A, R (*Fn)(A...), const char* Name>
struct CpuKernel<Fn, Name> {
  // `run` with the graph capture's hook in front, as every hand-written
  // kernel has it (CaptureHook.h).
  static R call(A... args) {
    return Capturable<R(A...), &CpuKernel::run, Name>::call(std::forward<A>(args)...);
  }

  // [docs:cpu-kernel-call]
  static R run(A... args) {
    using namespace cpu_kernel;
    // Same-device rules first (DeviceCheck.h): nothing runs on a mix.
    // Every tensor on the first one's openreg device passes every rule;
    // only a call that mixes devices (or has no openreg tensor) walks the
    // rule argument by argument, for its message or its CPU scalars.
    c10::DeviceIndex device = -1;
    (Conv<A>::find_device(args, &device), ...);
    static const OpDeviceInfo& info = device_info_for(Name);
    if (info.rule != DeviceRule::Unchecked && !(device >= 0 && (Conv<A>::on(args, device) && ...))) {
      DeviceChecker checker(info.rule, info.method.c_str());
      size_t i = 0;
      (Conv<A>::check(args, checker, info, i++), ...);
    }
    if (device < 0) device = current_device();
    // Traces name the kernel by its operator, as the fallback does ("aten::add").
    static const std::string kernel = launch_name(Name);
    // Its width on a device thread (WideKernel): tensor arguments' elements.
    int64_t work = 0;
    (add_work<A>(args, &work), ...);
    if constexpr (is_matmul_kernel(Name)) work *= kMatmulWeight;
    AliasSet set(device);
    std::tuple<typename Conv<A>::Held...> held{Conv<A>::in(set, args)...};
    if constexpr (std::is_void_v<R>) {
      launch_kernel(device, kernel.c_str(), [&] {
        std::apply([](auto&... h) { Fn(Conv<A>::pass(h)...); }, held);
      }, work);
      write_back_all(set, held, std::index_sequence_for<A...>{}, args...);
    } else {
      Slot<R> result;
      launch_kernel(device, kernel.c_str(), [&] {
        std::apply([&](auto&... h) { result.set(Fn(Conv<A>::pass(h)...)); }, held);
      }, work);
      write_back_all(set, held, std::index_sequence_for<A...>{}, args...);
      return Ret<R>::out(set, result.get(), args...);
    }
  }
  // [docs:cpu-kernel-call:end]

 private:
  template <class Held, size_t... I>
  static void write_back_all(AliasSet& set, Held& held, std::index_sequence<I...>,
                             A&... args) {
    (cpu_kernel::Conv<A>::write_back(set, args, std::get<I>(held)), ...);
  }
};

// Graph.h's: a graph node of SCHEMA may call the CPU kernel on aliases
// made at capture (GraphPrepared.cpp).
void note_cpu_kernel_op(const char* schema_name);

}  // namespace torch_openreg

// Register at::cpu::FN for PrivateUse1 under SCHEMA (an "aten::" overload
// name without the namespace, e.g. "add.out").
#define OPENREG_CPU_KERNEL(m, SCHEMA, FN)                                  \
  do {                                                                     \
    static constexpr char openreg_kernel_name[] = SCHEMA;                  \
    m.impl(SCHEMA, TORCH_FN((::torch_openreg::CpuKernel<FN, openreg_kernel_name>::call))); \
    ::torch_openreg::note_cpu_kernel_op(SCHEMA);                          \
  } while (0)
