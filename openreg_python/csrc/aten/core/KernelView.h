// Running ATen's CPU kernels on openreg device memory, zero-copy.
//
// The simulated device's memory *is* host memory, reachable by kernels at
// "device address + kernel view offset" (see openreg.h). So an openreg
// kernel here is: wrap each openreg tensor in a CPU tensor over the kernel
// view of the same bytes (an "alias"), run the CPU kernel on the aliases on
// the device's current stream, and turn CPU results back into openreg
// tensors. Results the CPU kernel allocates land in device memory directly
// (KernelScope routes this thread's CPU allocations to the device), so no
// byte is copied in either direction.
//
// Vendor: a real backend launches its own kernels here instead; the shape of
// this file (find device, wrap arguments, launch on the current stream,
// wrap results) is still the shape of a backend's kernel glue.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <exception>
#include <functional>

#include "runtime/OpenRegFunctions.h"
#include "runtime/OpenRegStream.h"
#include "Sanitizer.h"
#include "WideKernel.h"

namespace torch_openreg {

struct AliasCache;
struct AliasSlot;

inline bool is_openreg(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// While alive, CPU allocations made by this thread come from `device`'s
// memory (kernel view). Nests.
struct KernelScope {
  explicit KernelScope(c10::DeviceIndex device);
  ~KernelScope();
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  int* slot_;
  int prev_;
};

// Kernel names of the matmul family (work weighted by kMatmulWeight; the
// convolution and attention kernels weight their own).
constexpr bool is_matmul_kernel(const char* name) {
  auto starts = [](const char* s, const char* p) {
    while (*p)
      if (*s++ != *p++) return false;
    return *s == '\0' || *s == '.';
  };
  for (const char* op : {"mm", "addmm", "bmm", "baddbmm", "addbmm", "_addmm_activation"})
    if (starts(name, op)) return true;
  return false;
}

// Kernels that run ATen's CPU code on device memory allocate their outputs
// and workspaces here: the returned DataPtr points at the kernel view of a
// device block and claims device CPU, so CPU code can write it. Turn it into
// a real openreg DataPtr with rehomeKernelViewDataPtr().
c10::DataPtr allocateKernelView(c10::DeviceIndex device, size_t nbytes);
// True if `ptr` came from allocateKernelView.
bool isKernelViewDataPtr(const c10::DataPtr& ptr);
// Frees a kernel-view allocation by address (Allocator::raw_deallocate
// path); false if `kv` is not one.
bool freeKernelViewPointer(void* kv);
// Converts a DataPtr made by allocateKernelView on `device` into the openreg
// DataPtr of the same block, without copying.
c10::DataPtr rehomeKernelViewDataPtr(c10::DataPtr&& ptr, c10::DeviceIndex device);
// The allocator of alias storages: a CPU kernel that resizes an alias (an
// out= argument of the wrong size) gets its new bytes from the device.
c10::Allocator* kernelViewAllocator();

// Installs the CPU-allocator shim that makes KernelScope work. Idempotent.
void install_cpu_allocator_shim();

// Sends structured operators straight to the fallback (see Fallback.cpp).
// Called once the dispatcher knows every operator (module import).
void register_structured_kernels();

// Maps openreg tensors to CPU aliases and CPU results back, for one kernel
// launch. Tensors that share an openreg storage get aliases that share one
// CPU storage, so CPU overlap checks and view relationships are preserved.
class AliasSet {
 public:
  explicit AliasSet(c10::DeviceIndex device) : device_(device) {
    if (C10_UNLIKELY(sanitizer_on())) enter_sanitizer();
  }
  ~AliasSet() {
    if (C10_UNLIKELY(sanitizing_)) leave_sanitizer();
    if (!tensors_.empty()) recycle_aliases();
  }
  AliasSet(const AliasSet&) = delete;
  AliasSet& operator=(const AliasSet&) = delete;

  // CPU alias of an openreg tensor (same sizes/strides/offset/dtype/conj/neg
  // bits). Undefined and non-openreg tensors are returned unchanged. `write`:
  // the kernel may write it (declared to the stream sanitizer; reads are the
  // default).
  at::Tensor alias(const at::Tensor& t, bool write = false);
  // The same, but the set lends out its own handle instead of sharing it
  // (no reference count traffic per argument): hand it back with
  // give_back(*index) before the set is destroyed. *index is -1 when
  // nothing was lent (not an openreg tensor, or one already aliased): then
  // the result is an ordinary shared handle. CpuKernel's LentAlias does both.
  at::Tensor lend_alias(const at::Tensor& t, bool write, int* index);
  void give_back(int index, at::Tensor&& alias);

  // After the CPU kernel ran: propagate metadata/storage changes that the
  // kernel made to an alias (resize_, as_strided_, set_) to its openreg
  // tensor.
  void sync_back(const at::Tensor& openreg, const at::Tensor& cpu_alias);
  void sync_back(c10::TensorImpl* openreg, const at::Tensor& cpu_alias);

  // Turn a CPU result into an openreg tensor: the original openreg tensor if
  // the result *is* one of our aliases, a view of the aliased openreg storage
  // if it views one, else a tensor that adopts the result's storage (which
  // the kernel allocated in device memory) or, failing that, a copy.
  at::Tensor unwrap(const at::Tensor& cpu_result);
  // The same, moving the kernel's own result handle when it becomes the
  // openreg tensor (no reference count traffic).
  at::Tensor unwrap(at::Tensor&& cpu_result);
  // If `cpu_result` is the alias of an argument: that argument's
  // TensorImpl (borrowed, after sync_back), else nullptr. Lets a kernel
  // return the caller's own tensor by reference without a new handle.
  c10::TensorImpl* argument_of(const at::Tensor& cpu_result);

  c10::DeviceIndex device() const { return device_; }
  // kernel_view_offset(device()), looked up once per set.
  intptr_t kv_offset() {
    if (C10_UNLIKELY(kv_offset_ == kUnknownOffset)) kv_offset_ = kernel_view_offset(device_);
    return kv_offset_;
  }

  // Called (implicitly, by sync_back/unwrap) once the kernel has run: moves
  // storages the kernel reallocated over to their openreg owners.
  void finalize_storages();

 private:
  struct StorageEntry {
    c10::StorageImpl* openreg;  // borrowed: the openreg tensors keep it alive
    c10::StorageImpl* alias;    // CPU storage over the kernel view
    // `alias` owned, unless it is the device block's cached alias, which
    // the block holds as long as the openreg storage holds the block (an
    // atomic increment and decrement fewer per argument; finalize_storages
    // takes a reference before it moves an openreg storage to a new block).
    c10::Storage owned;
    void* alias_data;           // alias data pointer when created
    c10::Storage alias_storage() const {
      return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(alias));
    }
  };
  // Borrowed, not owned: the caller's arguments outlive the call. Owning a
  // handle would cost more than the rest of the alias: an extra reference
  // to a tensor that has a Python object makes c10 take the GIL to incref
  // and decref that object, and operators run with the GIL released.
  // The alias is owned: once the kernel's own handles are gone, an alias
  // nobody else kept is recycled for the next call (recycle_aliases).
  struct TensorEntry {
    c10::intrusive_ptr<c10::TensorImpl> alias;  // null while lent out
    c10::TensorImpl* openreg;
    c10::TensorImpl* cpu;  // the alias, lent or not
  };
  C10_NOINLINE void move_resized(StorageEntry& e);
  int alias_entry(const at::Tensor& t, bool write);
  // alias_entry's rare cases, out of line (KernelView.cpp)
  C10_NOINLINE int new_entry(const at::Tensor& t, AliasSlot* slot);
  C10_NOINLINE int sparse_entry(const at::Tensor& t, bool write);
  C10_NOINLINE void check_device(const at::Tensor& t) const;
  C10_NOINLINE void note_access(const at::Tensor& t, bool write);
  StorageEntry& storage_alias(const c10::Storage& s);
  // unwrap: true if `cpu_result` itself is the answer (it was converted in
  // place, or is not a CPU tensor), else the answer is in *result.
  bool unwrap_into(const at::Tensor& cpu_result, at::Tensor* result);
  C10_NOINLINE at::Tensor unwrap_unstrided(const at::Tensor& cpu_result);
  C10_NOINLINE at::Tensor unwrap_quantized(const at::Tensor& cpu_result, c10::StorageImpl* target);
  C10_NOINLINE at::Tensor new_result(const at::Tensor& cpu_result, c10::StorageImpl* target);
  // The openreg storage that `cpu_storage` (a result's) becomes: borrowed,
  // alive while the results that hold it are (adopted_ owns only copies).
  c10::StorageImpl* adopt_storage(c10::StorageImpl* cpu_storage);
  C10_NOINLINE c10::StorageImpl* adopt_by_copy(c10::StorageImpl* cpu_storage);

  // Stream sanitizer: while enabled, live AliasSets of a thread form a stack
  // whose recorded accesses launch_kernel declares (Sanitizer.h).
  void recycle_aliases();
  // This thread's table of spare aliases (KernelView.cpp), or nullptr in
  // inference mode; looked up once per set.
  AliasCache* alias_cache();
  c10::TensorImpl* cached_alias(c10::TensorImpl* openreg, AliasSlot& slot);
  void enter_sanitizer();
  void leave_sanitizer();
  friend void sanitize_launch();

  c10::DeviceIndex device_;
  bool finalized_ = false;
  bool sanitizing_ = false;
  static constexpr intptr_t kUnknownOffset = INTPTR_MIN;
  intptr_t kv_offset_ = kUnknownOffset;
  int8_t cache_state_ = 0;  // 0: not looked up, 1: cache_ set, 2: none
  AliasCache* cache_ = nullptr;
  AliasSet* outer_ = nullptr;
  std::vector<SanitizerAccess> accesses_;
  c10::SmallVector<StorageEntry, 4> storages_;
  c10::SmallVector<TensorEntry, 4> tensors_;
  // CPU storages adopted as openreg storages during unwrap (result
  // sharing): a kernel-view storage becomes the openreg one itself (no
  // handle kept: the results hold it), a host one is copied into `copy`.
  struct Adopted {
    c10::StorageImpl* cpu;
    c10::StorageImpl* openreg;
    c10::Storage copy;
  };
  c10::SmallVector<Adopted, 2> adopted_;
};

// Nonzero while this thread runs a graph node's operator (a replay, which is
// already device work in stream order) or, during a capture, an operator
// that does no device work (a view): launch_kernel then runs `fn` at once
// instead of launching it (Graph.cpp).
inline thread_local int graph_inline_depth = 0;

// Run `fn` as a kernel on `device`'s current stream: after the stream's
// earlier work, on this thread, with CPU allocations routed to the device.
// Exceptions thrown by `fn` propagate to the caller unchanged.
// [docs:launch-kernel]
// `work` (optional) is the kernel's work estimate, for its width on an
// autograd device thread (WideKernel).
template <class F>
void launch_kernel(c10::DeviceIndex device, const char* name, F&& fn, int64_t work = 0) {
  if (C10_UNLIKELY(graph_inline_depth != 0)) {
    KernelScope scope(device);
    fn();
    return;
  }
  struct Ctx {
    F* fn;
    c10::DeviceIndex device;
    int64_t work;
    std::exception_ptr error;
  } ctx{&fn, device, work, nullptr};
  orKernelFn_t body = [](void* p) -> orError_t {
    auto* c = static_cast<Ctx*>(p);
    try {
      KernelScope scope(c->device);
      WideKernel wide(c->work);
      (*c->fn)();
    } catch (...) {
      c->error = std::current_exception();
      return orErrorLaunchFailure;
    }
    return orSuccess;
  };
  if (C10_UNLIKELY(sanitizer_on())) sanitize_launch();
  orError_t err = orLaunchKernel(currentNativeStream(device), body, &ctx, name,
                                 orLaunchSynchronous);
  if (ctx.error) {
    orGetLastError();
    std::rethrow_exception(ctx.error);
  }
  OPENREG_CHECK(err);
}
// [docs:launch-kernel:end]

// Make an openreg tensor with the given geometry over `storage`.
at::Tensor make_openreg_tensor(c10::Storage storage, const caffe2::TypeMeta dtype,
                               c10::IntArrayRef sizes, c10::IntArrayRef strides,
                               int64_t storage_offset);
// A quantized tensor with `like`'s dtype and geometry over `storage`, with
// dispatch key `key` (QuantizedPrivateUse1, or QuantizedCPU for an alias).
at::Tensor make_qtensor(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like,
                        at::QuantizerPtr quantizer);
// The bytes of a storage (openreg or CPU), as a dense uint8 tensor on its
// device.
at::Tensor storage_bytes(const c10::Storage& st);
// A quantized CPU copy of a quantized openreg tensor: the same bytes and
// geometry, the quantizer's scales moved to the host.
at::Tensor quantized_to_cpu(const at::Tensor& src);
// A quantizer with its scales and zero points (if any) on `device`.
at::QuantizerPtr quantizer_on(const at::QuantizerPtr& q, c10::Device device);
// `q` with its scales and zero points (per-channel quantizers) mapped by
// `map`; `q` itself when the map leaves them as they are.
at::QuantizerPtr map_quantizer(const at::QuantizerPtr& q,
                               const std::function<at::Tensor(const at::Tensor&)>& map);

}  // namespace torch_openreg
