// Kernel-view allocations: the memory CPU code allocates while it runs as an
// openreg kernel (outputs, workspaces, a resized alias), served from device
// memory, and the CPU allocator shim that routes a KernelScope's CPU
// allocations there (KernelView.h).
#include "KernelView.h"

#include "runtime/OpenRegAllocator.h"

#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/flat_hash_map.h>

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace torch_openreg {

// ---- Kernel-view allocations
// Outputs and workspaces of CPU code running on device memory. Each one is
// an ordinary openreg allocation, handed to the CPU code as a DataPtr whose
// data == context == the kernel-view address (device CPU, so CPU code may
// write it, and may also take it through Allocator::raw_allocate/
// raw_deallocate, as oneDNN does). The owning openreg DataPtr waits in a
// registry keyed by that address until the CPU DataPtr is freed or rehomed
// as an openreg one.
//
// Every operator result passes through the registry once each way, so its
// fast part takes no lock: a fixed table whose slots are claimed and
// released with one atomic operation each. An address lives in one of
// kKvProbe slots after its hash; when those are all taken the entry goes to
// an overflow map under a mutex. A slot's key is nullptr (free), kKvBusy
// (being filled) or the address; its owner is written only by the thread
// that claimed it and read only by the one thread that frees the address
// (each kernel-view DataPtr has one owner).
namespace {
constexpr size_t kKvSlots = 1024;
constexpr size_t kKvProbe = 8;
void* const kKvBusy = reinterpret_cast<void*>(uintptr_t(1));

struct KvSlot {
  std::atomic<void*> key{nullptr};
  c10::DataPtr owner;
};

struct KvRegistry {
  std::array<KvSlot, kKvSlots> slots;
  std::mutex mu;
  std::atomic<size_t> overflow_size{0};
  ska::flat_hash_map<void*, c10::DataPtr> overflow;
};

KvRegistry& kv_registry() {
  static auto* r = new KvRegistry();  // never destroyed: frees may come late
  return *r;
}

inline size_t kv_hash(void* kv) {
  // Addresses are OR_MALLOC_ALIGNMENT-aligned: drop the zero bits, mix.
  return static_cast<size_t>((reinterpret_cast<uintptr_t>(kv) >> 9) * 0x9E3779B97F4A7C15ull >> 40);
}

void put_kv_allocation(void* kv, c10::DataPtr owner) {
  KvRegistry& r = kv_registry();
  size_t h = kv_hash(kv);
  for (size_t i = 0; i < kKvProbe; ++i) {
    KvSlot& slot = r.slots[(h + i) & (kKvSlots - 1)];
    void* expected = nullptr;
    if (slot.key.load(std::memory_order_relaxed) == nullptr &&
        slot.key.compare_exchange_strong(expected, kKvBusy, std::memory_order_acquire)) {
      slot.owner = std::move(owner);
      slot.key.store(kv, std::memory_order_release);
      return;
    }
  }
  std::lock_guard<std::mutex> g(r.mu);
  r.overflow.emplace(kv, std::move(owner));
  r.overflow_size.store(r.overflow.size(), std::memory_order_release);
}

// The openreg DataPtr behind kernel-view address `kv` (empty if unknown),
// no longer registered.
c10::DataPtr take_kv_allocation(void* kv) {
  if (!kv) return {};  // zero bytes: nothing registered
  KvRegistry& r = kv_registry();
  size_t h = kv_hash(kv);
  for (size_t i = 0; i < kKvProbe; ++i) {
    KvSlot& slot = r.slots[(h + i) & (kKvSlots - 1)];
    if (slot.key.load(std::memory_order_acquire) == kv) {
      c10::DataPtr owner = std::move(slot.owner);
      slot.key.store(nullptr, std::memory_order_release);
      return owner;
    }
  }
  if (r.overflow_size.load(std::memory_order_acquire) == 0) return {};
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.overflow.find(kv);
  if (it == r.overflow.end()) return {};
  c10::DataPtr owner = std::move(it->second);
  r.overflow.erase(it);
  r.overflow_size.store(r.overflow.size(), std::memory_order_release);
  return owner;
}

void kv_deleter(void* kv) {
  take_kv_allocation(kv);  // the owner frees the block as it goes
}

// The device whose kernel this thread is running (KernelScope), or -1;
// kThreadUnseen until this thread's first kernel.
constexpr int kThreadUnseen = -2;
thread_local int t_kernel_device = kThreadUnseen;

// OpenMP's and MKL's thread-count calls, found in torch's libraries at run
// time (the glue does not link OpenMP or MKL itself); MKL keeps a thread
// count of its own. (MKL's C entry point is MKL_Set_Num_Threads_Local: the
// lower-case symbols are its Fortran interface, which takes a pointer.)
struct ThreadWidthFns {
  void (*omp_set)(int) = nullptr;
  int (*mkl_set)(int) = nullptr;
  int (*omp_pause)(int) = nullptr;  // omp_pause_resource_all (OpenMP 5.0)
};
constexpr int kOmpPauseSoft = 1;  // omp_pause_soft

const ThreadWidthFns& thread_width_fns() {
  static const ThreadWidthFns fns = [] {
    ThreadWidthFns f;
    f.omp_set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    f.mkl_set = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
    f.omp_pause = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "omp_pause_resource_all"));
    return f;
  }();
  return fns;
}

// This thread's OpenMP and MKL thread counts (each where torch has it).
void set_thread_width(int n) {
  const ThreadWidthFns& f = thread_width_fns();
  if (f.omp_set) f.omp_set(n);
  if (f.mkl_set) f.mkl_set(n);
}

// The OpenMP width a narrowed device thread had (WideKernel), or 0.
thread_local int t_device_thread_width = 0;

// [docs:device-thread-pool]
// The first kernel that a thread runs. On autograd's device threads
// (pt_autograd_<index>: the backward of openreg tensors runs there, as for
// CUDA) kernels run with one OpenMP thread. GNU OpenMP keeps a pool of
// workers per thread that opens parallel regions; a device thread's pool
// beside the main thread's is more pool threads than a 2-core machine has
// cores, and then libgomp cuts its spin-wait from 300,000 iterations to
// 100 for every pool: each parallel region of the process, on any thread,
// pays a futex wake-up per worker (docs/performance.md). A GPU's backward
// uses no host threads; this keeps openreg's from taxing every other CPU
// operation of the process, except for the kernels worth both cores, which
// open a pool for as long as they run (WideKernel, below; the default,
// OPENREG_DEVICE_THREAD_OMP=kernel); compiled kernels count as such (Inductor
// has decided which of their loops run in parallel). =one keeps every kernel
// at one thread, =keep leaves the thread its pool.
// The runtime's stream workers (openreg_w<index>) keep theirs: a graph
// replay queued behind asynchronous work runs there, and a large one needs
// both cores (docs/performance.md measures the trade-off).
void first_kernel_of_this_thread() {
  // (Checked on every thread's first kernel, so a bad value fails at once.)
  enum Mode { kKernel, kOne, kKeep };
  static const Mode mode = [] {
    const char* v = std::getenv("OPENREG_DEVICE_THREAD_OMP");
    if (!v || !*v || std::strcmp(v, "kernel") == 0) return kKernel;
    if (std::strcmp(v, "one") == 0) return kOne;
    TORCH_CHECK(std::strcmp(v, "keep") == 0,
                "OPENREG_DEVICE_THREAD_OMP must be 'kernel' (the default), 'one' or 'keep', got '",
                v, "'");
    return kKeep;
  }();
  char name[16] = {0};
  if (mode == kKeep || pthread_getname_np(pthread_self(), name, sizeof(name)) != 0 ||
      std::strncmp(name, "pt_autograd_", 12) != 0)
    return;
  // ATen's lazy per-thread set-up first, so it does not undo this; its
  // answer is the width this thread would have had.
  const int width = at::get_num_threads();
  set_thread_width(1);
  const ThreadWidthFns& f = thread_width_fns();
  if (mode == kKernel && width > 1 && f.omp_set && f.omp_pause) t_device_thread_width = width;
}
// [docs:device-thread-pool:end]
}  // namespace

// [docs:device-thread-width]
// A kernel on a device thread whose work is worth both cores (a matmul of
// the backward) would lose half its speed at one OpenMP thread; with a pool
// that outlives it, every other parallel region of the process pays the
// throttled wake-ups again. So such a kernel opens a pool of the process's
// width for itself and releases it (omp_pause_resource_all) when it ends:
// while it runs, the thread that called backward() is asleep waiting for it,
// so the two pools never compete, and after it there is again one pool in
// the process. The pool's start and release cost 0.1-3 ms here (more while
// the CPU pool's workers still spin after the forward's last region), which
// the threshold pays for; keeping the pool for the whole backward instead
// was measured and was no faster (docs/performance.md). Small kernels stay
// at one thread.
namespace {
thread_local bool t_wide_now = false;  // a WideKernel is open on this thread
}  // namespace

bool WideKernel::widen() {
  if (C10_UNLIKELY(t_kernel_device == kThreadUnseen)) {  // a compiled kernel first
    first_kernel_of_this_thread();  // (a bad setting throws, here as for the next kernel)
    t_kernel_device = -1;
  }
  const int width = t_device_thread_width;
  // Not a narrowed device thread (or one core), or a kernel inside a wide one.
  if (width <= 1 || t_wide_now) return false;
  set_thread_width(width);
  t_wide_now = true;
  return true;
}

void WideKernel::narrow() {
  set_thread_width(1);
  thread_width_fns().omp_pause(kOmpPauseSoft);  // this thread's pool only
  t_wide_now = false;
}
// [docs:device-thread-width:end]

c10::DataPtr allocateKernelView(c10::DeviceIndex device, size_t nbytes) {
  if (nbytes == 0) {
    return {nullptr, nullptr, &kv_deleter, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DataPtr owner = allocateOn(device, nbytes);
  // Inside a kernel: the kernel is about to write its new output/workspace.
  if (C10_UNLIKELY(sanitizer_on()) && t_kernel_device >= 0)
    sanitize_fresh_allocation(owner.get(), nbytes);
  void* kv = static_cast<char*>(owner.get()) + kernel_view_offset(device);
  put_kv_allocation(kv, std::move(owner));
  return {kv, kv, &kv_deleter, c10::Device(c10::DeviceType::CPU)};
}

bool freeKernelViewPointer(void* kv) {
  return static_cast<bool>(take_kv_allocation(kv).get_context());
}

bool isKernelViewDataPtr(const c10::DataPtr& ptr) {
  return ptr.get_deleter() == &kv_deleter;
}

c10::DataPtr rehomeKernelViewDataPtr(c10::DataPtr&& ptr, c10::DeviceIndex device) {
  TORCH_INTERNAL_ASSERT(isKernelViewDataPtr(ptr));
  void* kv = ptr.get();
  ptr.release_context();  // ownership moves to the returned DataPtr
  if (!kv) return allocateOn(device, 0);  // zero bytes: still this device's
  c10::DataPtr owner = take_kv_allocation(kv);
  TORCH_INTERNAL_ASSERT(owner.get_context(), "openreg: unknown kernel-view allocation");
  return owner;
}

namespace {

// Allocator of the CPU alias storages: when a CPU kernel resizes an alias
// (an out= argument of the wrong size), the new bytes come from the device.
struct KernelViewAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    int d = t_kernel_device >= 0 ? t_kernel_device : current_device();
    return allocateKernelView(static_cast<c10::DeviceIndex>(d), n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dst, const void* src, size_t n) const override {
    if (n) std::memcpy(dst, src, n);
  }
};


c10::DeleterFnPtr g_base_raw_deleter = nullptr;

// raw_deallocate of the shim: kernel-view blocks go back to the device
// allocator, anything else to the wrapped CPU allocator.
void shim_raw_delete(void* p) {
  if (p && freeKernelViewPointer(p)) return;
  if (g_base_raw_deleter) g_base_raw_deleter(p);
}

// Wraps the process's CPU allocator. Outside kernels it forwards every call;
// inside a KernelScope it serves CPU allocations from device memory.
struct CPUAllocatorShim final : public c10::Allocator {
  explicit CPUAllocatorShim(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) override {
    int d = t_kernel_device;
    if (d >= 0) return allocateKernelView(static_cast<c10::DeviceIndex>(d), n);
    return base_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return g_base_raw_deleter ? &shim_raw_delete : nullptr;
  }
  void copy_data(void* dst, const void* src, size_t n) const override {
    base_->copy_data(dst, src, n);
  }
  c10::Allocator* base_;
};

}  // namespace

c10::Allocator* kernelViewAllocator() {
  static auto* a = new KernelViewAllocator();
  return a;
}

void install_cpu_allocator_shim() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* base = c10::GetCPUAllocator();
    g_base_raw_deleter = base->raw_deleter();
    static auto* shim = new CPUAllocatorShim(base);
    c10::SetCPUAllocator(shim, /*priority=*/UINT8_MAX);
  });
}

// (One thread-local lookup per scope: each is a call into the dynamic
// linker from a shared library.)
KernelScope::KernelScope(c10::DeviceIndex device) : slot_(&t_kernel_device) {
  prev_ = *slot_;
  if (C10_UNLIKELY(prev_ == kThreadUnseen)) {
    prev_ = -1;
    first_kernel_of_this_thread();
  }
  *slot_ = device;
}

KernelScope::~KernelScope() { *slot_ = prev_; }

}  // namespace torch_openreg
