// Aliases: an openreg tensor as a CPU tensor over the kernel view of its
// bytes, for one kernel call (AliasSet, KernelView.h), and results turned
// back into openreg tensors. Kernel-view allocations:
// KernelViewAllocation.cpp; quantized aliases: QuantizedAlias.cpp.
#include "KernelView.h"
#include "SparseAlias.h"

#include "runtime/OpenRegAllocator.h"

#include <ATen/core/TensorBody.h>
#include <ATen/quantized/QTensorImpl.h>
#include <ATen/quantized/Quantizer.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/flat_hash_map.h>

#include <array>
#include <functional>
#include <cstring>
#include <atomic>
#include <mutex>
#include <typeinfo>

namespace torch_openreg {

at::Tensor make_openreg_tensor(c10::Storage storage, const caffe2::TypeMeta dtype,
                               c10::IntArrayRef sizes, c10::IntArrayRef strides,
                               int64_t storage_offset) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, storage_offset);
  return t;
}

AliasSet::StorageEntry& AliasSet::storage_alias(const c10::Storage& s) {
  c10::StorageImpl* impl = s.unsafeGetStorageImpl();
  for (auto& e : storages_) {
    if (e.openreg == impl) return e;
  }
  const c10::DataPtr& dp = impl->data_ptr();
  void* dev = dp.get();
  void* kv = dev ? static_cast<char*>(dev) + kv_offset() : nullptr;
  // The block's cached alias, if it still describes this storage exactly (a
  // kernel that resized it moved the storage to a new block; see
  // finalize_storages).
  if (c10::StorageImpl* cached = kv ? cachedCpuAlias(dp) : nullptr) {
    if (cached->data_ptr().get() == kv && cached->nbytes() == impl->nbytes() &&
        cached->resizable() == impl->resizable()) {
      storages_.push_back({impl, cached, c10::Storage(), kv});  // the block holds it
      return storages_.back();
    }
  }
  c10::Storage alias(c10::Storage::use_byte_size_t(), impl->nbytes(),
                     c10::DataPtr(kv, c10::Device(c10::DeviceType::CPU)),
                     kernelViewAllocator(), impl->resizable());
  if (kv) cacheCpuAlias(dp, alias.unsafeGetStorageImpl());
  c10::StorageImpl* raw = alias.unsafeGetStorageImpl();
  storages_.push_back({impl, raw, std::move(alias), kv});
  return storages_.back();
}

// CPU TensorImpls of aliases, kept per thread between calls: building and
// destroying a TensorImpl for every tensor argument of every operator was a
// quarter of the per-operator overhead. A direct-mapped table indexed by the
// openreg TensorImpl an alias last stood for: eager code passes the same
// tensors to operator after operator, and an alias that still describes its
// tensor exactly (same CPU storage object, dtype and geometry) is handed out
// as it is, with nothing to set. The key is only a hint: an entry is used
// as-is only after that check, so a freed tensor whose address was reused
// is harmless; otherwise the entry's TensorImpl is reset and reused.
// Only plain aliases that nothing else kept are stored (recycle_aliases).
constexpr size_t kAliasBuckets = 32;  // two ways each
struct AliasSlot {
  const c10::TensorImpl* key = nullptr;
  c10::intrusive_ptr<c10::TensorImpl> alias;
};
struct AliasCache {
  std::array<std::array<AliasSlot, 2>, kAliasBuckets> buckets;
};

namespace {
thread_local AliasCache t_alias_cache;

inline std::array<AliasSlot, 2>& bucket_for(AliasCache& c, const c10::TensorImpl* t) {
  auto h = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t) >> 4);
  return c.buckets[(h * 0x9E3779B97F4A7C15ull) >> 59];  // top 5 bits: 32 buckets
}

const c10::DispatchKeySet& cpu_alias_keys() {
  static const c10::DispatchKeySet keys = [] {
    c10::Storage none(c10::Storage::use_byte_size_t(), 0,
                      c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)), nullptr, false);
    return at::detail::make_tensor<c10::TensorImpl>(
               std::move(none), c10::DispatchKeySet(c10::DispatchKey::CPU),
               caffe2::TypeMeta::Make<float>())
        .key_set();
  }();
  return keys;
}
}  // namespace

AliasCache* AliasSet::alias_cache() {
  if (cache_state_ == 0) {
    // (Inference mode makes TensorImpls without autograd keys: build those,
    // and keep them out of the table.)
    cache_state_ = c10::InferenceMode::is_enabled() ? 2 : 1;
    if (cache_state_ == 1) cache_ = &t_alias_cache;
  }
  return cache_;
}

void AliasSet::recycle_aliases() {
  AliasCache* cache = alias_cache();
  if (!cache) return;
  for (auto& e : tensors_) {
    c10::TensorImpl* a = e.alias.get();
    if (a && e.alias.use_count() == 1 && a->key_set() == cpu_alias_keys() &&
        a->autograd_meta() == nullptr && !a->is_wrapped_number() &&
        a->allow_tensor_metadata_change() && a->get_backend_meta() == nullptr &&
        !a->has_symbolic_sizes_strides() && a->pyobj_slot()->load_pyobj() == nullptr) {
      // Into a free way or the way this tensor had; else the newest goes
      // first and the older entry of way 0 replaces that of way 1.
      auto& b = bucket_for(*cache, e.openreg);
      AliasSlot* slot = &b[0];
      if (b[0].alias && b[0].key != e.openreg) {
        if (b[1].alias && b[1].key != e.openreg) b[1] = std::move(b[0]);
        else slot = &b[1];
      }
      slot->key = e.openreg;
      slot->alias = std::move(e.alias);
    }
  }
}

namespace {
// A new handle to a storage the caller can name only by pointer.
inline c10::Storage share_storage(c10::StorageImpl* s) {
  return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(s));
}

// IntArrayRef's == calls memcmp: for the few dimensions of a tensor, a loop
// is cheaper.
inline bool same_dims(c10::IntArrayRef a, c10::IntArrayRef b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}
}  // namespace

// The table's alias of `t`, if it still describes `t` exactly; registers its
// storage in the set. nullptr otherwise (the caller builds one). Called by
// alias_entry, the hot path of every tensor argument (left out of line: with
// it inlined there, the compiler stops inlining the set's push_back).
inline c10::TensorImpl* AliasSet::cached_alias(c10::TensorImpl* ti, AliasSlot& slot) {
  c10::TensorImpl* a = slot.alias.get();
  if (slot.key != ti || !a) return nullptr;
  if (ti->is_conj() || ti->is_neg() || ti->is_wrapped_number()) return nullptr;
  // (Without the virtual storage(): a tensor whose storage may not be read
  // has none with bytes behind it, and fails the checks below; the alias
  // is a plain CPU TensorImpl.)
  c10::StorageImpl* osi = ti->unsafe_storage().unsafeGetStorageImpl();
  void* dev = osi ? osi->data_ptr().get() : nullptr;
  c10::StorageImpl* as = a->unsafe_storage().unsafeGetStorageImpl();
  // The alias's storage must cover the same bytes. It need not be the
  // block's cached alias (storage_alias): a CPU storage over the kernel
  // view owns nothing, so any one over the same range will do, as long as
  // tensors that share a storage in this call share it (checked below).
  if (!dev || as->data_ptr().get() != static_cast<char*>(dev) + kv_offset() ||
      as->nbytes() != osi->nbytes() || as->resizable() != osi->resizable()) {
    return nullptr;
  }
  if (a->dtype() != ti->dtype() || a->storage_offset() != ti->storage_offset() ||
      !same_dims(a->sizes(), ti->sizes()) || !same_dims(a->strides(), ti->strides())) {
    return nullptr;
  }
  for (auto& e : storages_) {
    if (e.openreg == osi) {
      if (e.alias != as) return nullptr;
      return a;
    }
  }
  if (cachedCpuAlias(osi->data_ptr()) == as) {
    storages_.push_back({osi, as, c10::Storage(), as->data_ptr().get()});  // the block holds it
  } else {
    storages_.push_back({osi, as, share_storage(as), as->data_ptr().get()});
  }
  return a;
}

// A sparse tensor's entry: a CPU sparse tensor over aliases of its members
// (SparseAlias.h). Its members' entries come first; the sanitizer sees them.
int AliasSet::sparse_entry(const at::Tensor& t, bool write) {
  c10::TensorImpl* ti = t.unsafeGetTensorImpl();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].openreg == ti) return static_cast<int>(i);
  }
  check_device(t);
  auto impl = c10::intrusive_ptr<c10::TensorImpl>::reclaim(
      sparse_alias(*this, t, write).unsafeReleaseTensorImpl());
  c10::TensorImpl* raw = impl.get();
  tensors_.push_back({std::move(impl), ti, raw});
  return static_cast<int>(tensors_.size() - 1);
}

void AliasSet::check_device(const at::Tensor& t) const {
  TORCH_CHECK(t.device().index() == device_,
              "Expected all tensors to be on the same device, but found at "
              "least two devices, openreg:", static_cast<int>(device_), " and ",
              t.device(), "!");
}

void AliasSet::note_access(const at::Tensor& t, bool write) {
  const void* p = nullptr;
  size_t n = 0;
  if (tensor_footprint(t, &p, &n)) accesses_.push_back({p, n, write, sanitizer_label(t)});
}

// The index in tensors_ of `t`'s alias, made if needed; -1 if `t` is not
// an openreg tensor. Only the common case is here: a dense tensor of this
// set's device that is already in the set or whose alias from an earlier
// call still describes it (cached_alias). Everything else is out of line:
// the code a tiny operator passes through costs instruction-cache misses as
// much as instructions (docs/performance.md).
C10_ALWAYS_INLINE int AliasSet::alias_entry(const at::Tensor& t, bool write) {
  if (!is_openreg(t)) return -1;
  if (C10_UNLIKELY(t.layout() != c10::kStrided)) return sparse_entry(t, write);
  if (C10_UNLIKELY(sanitizing_)) note_access(t, write);
  if (C10_UNLIKELY(t.device().index() != device_)) check_device(t);
  c10::TensorImpl* ti = t.unsafeGetTensorImpl();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].openreg == ti) return static_cast<int>(i);
  }
  if (C10_UNLIKELY(t.is_quantized())) return new_entry(t, nullptr);
  AliasSlot* slot = nullptr;
  if (AliasCache* cache = alias_cache()) {
    auto& b = bucket_for(*cache, ti);
    for (AliasSlot& w : b) {
      if (c10::TensorImpl* a = cached_alias(ti, w)) {
        w.key = nullptr;
        tensors_.push_back({std::move(w.alias), ti, a});
        return static_cast<int>(tensors_.size() - 1);
      }
    }
    // A TensorImpl to reset: this tensor's stale alias, else the older way.
    slot = b[0].key == ti || !b[1].alias ? &b[0] : &b[1];
  }
  return new_entry(t, slot);
}

// A new alias of `t`, in `slot`'s TensorImpl if it has one (else a new one).
int AliasSet::new_entry(const at::Tensor& t, AliasSlot* slot) {
  c10::TensorImpl* ti = t.unsafeGetTensorImpl();
  if (C10_UNLIKELY(t.is_quantized())) {
    // The quantizer first: aliasing its scales may grow storages_.
    at::QuantizerPtr q = map_quantizer(at::get_qtensorimpl(t)->quantizer(),
                                       [this](const at::Tensor& x) { return alias(x); });
    StorageEntry& se = storage_alias(t.storage());
    auto impl = c10::intrusive_ptr<c10::TensorImpl>::reclaim(
        make_qtensor(se.alias_storage(), c10::DispatchKey::QuantizedCPU, t, std::move(q))
            .unsafeReleaseTensorImpl());
    c10::TensorImpl* raw = impl.get();
    tensors_.push_back({std::move(impl), ti, raw});
    return static_cast<int>(tensors_.size() - 1);
  }
  StorageEntry& se = storage_alias(t.storage());
  c10::intrusive_ptr<c10::TensorImpl> impl;
  if (slot && slot->alias) {
    // Another tensor's alias, or a stale one: reset and reuse its TensorImpl.
    slot->key = nullptr;
    impl = std::move(slot->alias);
    impl->set_storage_and_dtype(se.alias_storage(), t.dtype());
    impl->_set_conj(t.is_conj());
    impl->_set_neg(t.is_neg());
  } else {
    impl = c10::make_intrusive<c10::TensorImpl>(
        se.alias_storage(), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
    if (t.is_conj()) impl->_set_conj(true);
    if (t.is_neg()) impl->_set_neg(true);
  }
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  if (ti->is_wrapped_number()) impl->set_wrapped_number(true);
  c10::TensorImpl* raw = impl.get();
  tensors_.push_back({std::move(impl), ti, raw});
  return static_cast<int>(tensors_.size() - 1);
}

at::Tensor AliasSet::alias(const at::Tensor& t, bool write) {
  int i = alias_entry(t, write);
  if (i < 0) return t;
  return at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(tensors_[i].cpu));
}

at::Tensor AliasSet::lend_alias(const at::Tensor& t, bool write, int* index) {
  *index = -1;
  int i = alias_entry(t, write);
  if (i < 0) return t;
  TensorEntry& e = tensors_[i];
  if (!e.alias) {  // already lent (the same tensor passed twice): share it
    return at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(e.cpu));
  }
  *index = i;
  return at::Tensor(std::move(e.alias));
}

void AliasSet::give_back(int index, at::Tensor&& alias) {
  // Called from destructors: never throws. A kernel that reassigned its
  // Tensor& argument hands back another tensor; keep that one (the table
  // takes it only if it is a plain alias), or nothing if it is undefined.
  TensorEntry& e = tensors_[index];
  if (!alias.defined() || e.alias) return;
  e.cpu = alias.unsafeGetTensorImpl();
  e.alias = c10::intrusive_ptr<c10::TensorImpl>::reclaim(alias.unsafeReleaseTensorImpl());
}

void AliasSet::finalize_storages() {
  if (finalized_) return;
  finalized_ = true;
  for (auto& e : storages_) {
    c10::StorageImpl* a = e.alias;
    if (C10_UNLIKELY(a->data_ptr().get() != e.alias_data)) move_resized(e);
    if (a->nbytes() != e.openreg->nbytes()) e.openreg->set_nbytes(a->nbytes());
  }
}

// The kernel resized the storage of `e`'s alias: the new bytes are a device
// block (KernelViewAllocator); give them to the openreg storage.
void AliasSet::move_resized(StorageEntry& e) {
  c10::StorageImpl* a = e.alias;
  // The openreg storage moves to a new block below, and its old block
  // drops the cached alias: hold it.
  if (!e.owned) e.owned = e.alias_storage();
  c10::DataPtr fresh = a->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
  c10::DataPtr dev;
  if (isKernelViewDataPtr(fresh) && fresh.get()) {
    dev = rehomeKernelViewDataPtr(std::move(fresh), device_);
  } else {
    TORCH_INTERNAL_ASSERT(fresh.get() == nullptr,
                          "openreg: a kernel replaced a storage with host memory");
    dev = c10::DataPtr(nullptr, c10::Device(c10::DeviceType::PrivateUse1, device_));
  }
  e.openreg->set_data_ptr_noswap(std::move(dev));
  void* kv = e.openreg->data_ptr().get()
                 ? static_cast<char*>(e.openreg->data_ptr().get()) + kv_offset()
                 : nullptr;
  // Keep the alias usable for views created by the kernel.
  a->set_data_ptr_noswap(c10::DataPtr(kv, c10::Device(c10::DeviceType::CPU)));
  e.alias_data = kv;
}

c10::StorageImpl* AliasSet::adopt_storage(c10::StorageImpl* impl) {
  for (auto& a : adopted_) {
    if (a.cpu == impl) return a.openreg;
  }
  if (C10_UNLIKELY(!isKernelViewDataPtr(impl->data_ptr()))) return adopt_by_copy(impl);
  // Allocated in device memory by the kernel: adopt it, zero-copy. The
  // storage object itself becomes the openreg storage (its device is its
  // DataPtr's): no second StorageImpl per result. The CPU tensors that
  // still refer to it are the kernel's own results, about to be dropped.
  c10::DataPtr taken = impl->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
  impl->set_data_ptr_noswap(rehomeKernelViewDataPtr(std::move(taken), device_));
  impl->set_allocator(getDeviceAllocator());
  adopted_.push_back({impl, impl, c10::Storage()});
  return impl;
}

// Host memory (the kernel used an allocator we do not control): copy.
c10::StorageImpl* AliasSet::adopt_by_copy(c10::StorageImpl* impl) {
  size_t nbytes = impl->nbytes();
  c10::DataPtr dp = allocateOn(device_, nbytes);
  if (nbytes && impl->data_ptr().get()) {
    OPENREG_CHECK(orMemcpyAsync(dp.get(), impl->data_ptr().get(), nbytes,
                                orMemcpyHostToDevice, currentNativeStream(device_)));
  }
  c10::Storage out(c10::Storage::use_byte_size_t(), nbytes, std::move(dp), getDeviceAllocator(),
                   /*resizable=*/true);
  c10::StorageImpl* raw = out.unsafeGetStorageImpl();
  adopted_.push_back({impl, raw, std::move(out)});
  return raw;
}

void AliasSet::sync_back(const at::Tensor& openreg, const at::Tensor& cpu) {
  sync_back(openreg.unsafeGetTensorImpl(), cpu);
}

void AliasSet::sync_back(c10::TensorImpl* oi, const at::Tensor& cpu) {
  if (C10_UNLIKELY(cpu.layout() != c10::kStrided)) {
    sparse_sync_back(*this, oi, cpu);
    return;
  }
  finalize_storages();
  auto* ci = cpu.unsafeGetTensorImpl();
  c10::StorageImpl* cs = ci->storage().unsafeGetStorageImpl();
  c10::StorageImpl* target = nullptr;
  for (auto& e : storages_) {
    if (e.alias == cs) {
      target = e.openreg;
      break;
    }
  }
  if (!target) target = adopt_storage(cs);
  if (target != oi->storage().unsafeGetStorageImpl()) {
    oi->set_storage_keep_dtype(share_storage(target));
  }
  if (oi->sizes() != ci->sizes() || oi->strides() != ci->strides() ||
      oi->storage_offset() != ci->storage_offset()) {
    oi->set_sizes_and_strides(ci->sizes(), ci->strides(), ci->storage_offset());
  }
  if (C10_UNLIKELY(ci->is_quantized() && oi->is_quantized())) {
    // The kernel may have given the alias a new quantizer (copy_ from
    // another quantized tensor does): the openreg tensor takes it over.
    auto* oq = static_cast<at::QTensorImpl*>(oi);
    const at::QuantizerPtr& cq = static_cast<at::QTensorImpl*>(ci)->quantizer();
    if (cq.get() != oq->quantizer().get()) {
      // (Compared on the device: the alias's scales are CPU tensors.)
      at::QuantizerPtr q = map_quantizer(cq, [this](const at::Tensor& x) { return unwrap(x); });
      if (q.get() != oq->quantizer().get() && !q->equalTo(oq->quantizer())) oq->set_quantizer_(q);
    }
  }
}

c10::TensorImpl* AliasSet::argument_of(const at::Tensor& cpu) {
  auto* ci = cpu.unsafeGetTensorImpl();
  for (auto& e : tensors_) {
    if (e.cpu == ci) {
      sync_back(e.openreg, cpu);
      return e.openreg;
    }
  }
  return nullptr;
}

at::Tensor AliasSet::unwrap(const at::Tensor& cpu) {
  at::Tensor out;
  return unwrap_into(cpu, &out) ? cpu : out;
}

at::Tensor AliasSet::unwrap(at::Tensor&& cpu) {
  at::Tensor out;
  return unwrap_into(cpu, &out) ? std::move(cpu) : out;
}

// A result that is not a strided tensor: sparse ones have their own
// unwrap (SparseAlias.h); the rest cannot be openreg tensors.
at::Tensor AliasSet::unwrap_unstrided(const at::Tensor& cpu) {
  if (cpu.is_sparse() || cpu.layout() == c10::kSparseCsr || cpu.layout() == c10::kSparseCsc ||
      cpu.layout() == c10::kSparseBsr || cpu.layout() == c10::kSparseBsc) {
    return sparse_unwrap(*this, cpu);
  }
  TORCH_CHECK_NOT_IMPLEMENTED(!cpu.is_nested(),
                              "openreg does not support nested tensors: the kernel "
                              "returned one, which an openreg tensor cannot hold");
  TORCH_CHECK_NOT_IMPLEMENTED(false, "openreg does not support non-strided tensors: the "
                              "kernel returned a ", cpu.layout(),
                              " tensor, which an openreg tensor cannot hold");
}

bool AliasSet::unwrap_into(const at::Tensor& cpu, at::Tensor* result) {
  if (!cpu.defined() || cpu.device().type() != c10::DeviceType::CPU) return true;
  finalize_storages();
  if (c10::TensorImpl* arg = argument_of(cpu)) {
    *result = at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(arg));
    return false;
  }
  auto* ci = cpu.unsafeGetTensorImpl();
  if (C10_UNLIKELY(cpu.layout() != c10::kStrided || cpu.is_nested())) {
    *result = unwrap_unstrided(cpu);
    return false;
  }
  c10::StorageImpl* cs = ci->storage().unsafeGetStorageImpl();
  c10::StorageImpl* target = nullptr;
  for (auto& e : storages_) {
    if (e.alias == cs) {
      target = e.openreg;
      break;
    }
  }
  if (!target) target = adopt_storage(cs);
  if (C10_UNLIKELY(cpu.is_quantized())) {
    *result = unwrap_quantized(cpu, target);
    return false;
  }
  // A result nobody else holds (the kernel's fresh output, held only by the
  // caller's result slot) becomes the openreg tensor itself: a new storage
  // and new backend keys, and no second TensorImpl per result. A real
  // backend allocates its outputs as device tensors to begin with. (Its
  // storage, adopted, usually is the openreg one already.)
  if (cpu.use_count() == 1 && typeid(*ci) == typeid(c10::TensorImpl) &&
      ci->autograd_meta() == nullptr && ci->allow_tensor_metadata_change()) {
    // (set_storage_keep_dtype also moves the TensorImpl's device to the
    // storage's. When the storage is the same object, it is moved out and
    // back in: no reference count update.)
    ci->set_storage_keep_dtype(target != cs ? share_storage(target)
                                            : std::move(const_cast<c10::Storage&>(ci->storage())));
    ci->_change_backend_component_keys(c10::Device(c10::DeviceType::PrivateUse1, device_));
    return true;
  }
  *result = new_result(cpu, target);
  return false;
}

// A quantized result over the openreg storage `target`.
at::Tensor AliasSet::unwrap_quantized(const at::Tensor& cpu, c10::StorageImpl* target) {
  at::QuantizerPtr q =
      map_quantizer(static_cast<at::QTensorImpl*>(cpu.unsafeGetTensorImpl())->quantizer(),
                    [this](const at::Tensor& x) { return unwrap(x); });
  return make_qtensor(share_storage(target), c10::DispatchKey::QuantizedPrivateUse1, cpu,
                      std::move(q));
}

// A new openreg tensor with the geometry of the result `cpu` over `target`
// (a view, or a result that something else holds too).
at::Tensor AliasSet::new_result(const at::Tensor& cpu, c10::StorageImpl* target) {
  auto out = make_openreg_tensor(share_storage(target), cpu.dtype(), cpu.sizes(),
                                 cpu.strides(), cpu.storage_offset());
  if (cpu.is_conj()) out.unsafeGetTensorImpl()->_set_conj(true);
  if (cpu.is_neg()) out.unsafeGetTensorImpl()->_set_neg(true);
  return out;
}

}  // namespace torch_openreg
