// Device memory: mmap'ed host pages owned by the runtime.
//
// Vendor: this whole file is the part a real driver does in hardware and
// firmware. Replace orMalloc/orFree with your driver's allocation calls.
//
// Strict mode maps one shared-memory object twice:
//   base  .. base+capacity   PROT_NONE   the "device addresses" handed out
//   kview .. kview+capacity  read/write  the kernels' private view
// Host code that dereferences a device address therefore faults at once (as
// it would on a discrete GPU), while kernels run on the same pages through
// kview, with zero copies and no per-kernel mprotect calls.
#include "internal.h"
#include "memcheck.h"
#include "sanitizer.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#include <sys/syscall.h>
#include <sys/stat.h>
#include <fcntl.h>

#include <shared_mutex>
#ifndef FALLOC_FL_PUNCH_HOLE
#define FALLOC_FL_KEEP_SIZE 0x01
#define FALLOC_FL_PUNCH_HOLE 0x02
#endif

namespace openreg {

namespace {

constexpr size_t kReleaseThreshold = size_t(1) << 20;

// Arena ranges, readable from the signal handler without locks.
std::atomic<uintptr_t> g_arena_lo[kMaxDevices];
std::atomic<uintptr_t> g_arena_hi[kMaxDevices];
std::atomic<uintptr_t> g_kview_lo[kMaxDevices];  // kernel views, for memcheck
Arena* g_arenas[kMaxDevices];

void insert_free(Arena& a, size_t off, size_t len) {
  const size_t freed_off = off, freed_len = len;
  // Coalesce with neighbours.
  auto next = a.free_by_off.lower_bound(off);
  if (next != a.free_by_off.end() && off + len == next->first) {
    a.free_by_len.erase({next->second, next->first});
    len += next->second;
    next = a.free_by_off.erase(next);
  }
  if (next != a.free_by_off.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      a.free_by_len.erase({prev->second, prev->first});
      off = prev->first;
      len += prev->second;
      a.free_by_off.erase(prev);
    }
  }
  a.free_by_off[off] = len;
  a.free_by_len.insert({len, off});

  // Give the whole pages of what was freed back to the OS when it joins a
  // large free range, so a cached-then-freed multi-GB segment does not pin
  // host RAM. (Only the part freed now: the rest of the range went back when
  // it was freed; memcheck frees small ranges next to the huge free tail.)
  if (len >= kReleaseThreshold) {
    size_t lo = round_up(freed_off, kPageSize);
    size_t hi = (freed_off + freed_len) / kPageSize * kPageSize;
    if (hi > lo) {
      if (a.memfd >= 0) {
        fallocate(a.memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  off_t(lo), off_t(hi - lo));
      } else {
        madvise(a.kview + lo, hi - lo, MADV_DONTNEED);
      }
    }
  }
}

}  // namespace

void arena_insert_free(Arena& a, size_t off, size_t len) { insert_free(a, off, len); }

// The first free range of at least `len` bytes (the smallest that fits),
// taken out of the free lists; SIZE_MAX if none. a.mu held.
size_t arena_take(Arena& a, size_t len) {
  auto it = a.free_by_len.lower_bound({len, 0});
  if (it == a.free_by_len.end()) return SIZE_MAX;
  size_t flen = it->first, off = it->second;
  a.free_by_len.erase(it);
  a.free_by_off.erase(off);
  if (flen > len) {
    a.free_by_off[off + len] = flen - len;
    a.free_by_len.insert({flen - len, off + len});
  }
  return off;
}

namespace {

// ------------------------------------------------------------ fault handler
struct sigaction g_prev_segv;
struct sigaction g_prev_bus;

void write_str(const char* s) {
  ssize_t r = write(2, s, strlen(s));
  (void)r;
}

void write_hex(uintptr_t v) {
  char buf[2 + 16 + 1];
  buf[0] = '0';
  buf[1] = 'x';
  for (int i = 0; i < 16; ++i) {
    unsigned d = (v >> ((15 - i) * 4)) & 0xF;
    buf[2 + i] = char(d < 10 ? '0' + d : 'a' + d - 10);
  }
  buf[18] = 0;
  write_str(buf);
}

void write_dec(uint64_t v) {
  char buf[24];
  int i = 23;
  buf[i] = 0;
  do {
    buf[--i] = char('0' + v % 10);
    v /= 10;
  } while (v && i > 0);
  write_str(buf + i);
}

void fault_handler(int sig, siginfo_t* info, void* uctx) {
  auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  int dev = -1;
  if (info->si_code > 0) {  // a real fault, not kill()/raise()
    for (int i = 0; i < kMaxDevices; ++i) {
      uintptr_t lo = g_arena_lo[i].load(std::memory_order_relaxed);
      uintptr_t hi = g_arena_hi[i].load(std::memory_order_relaxed);
      if (lo && addr >= lo && addr < hi) {
        dev = i;
        break;
      }
    }
  }
  struct sigaction* prev = sig == SIGSEGV ? &g_prev_segv : &g_prev_bus;
  if (info->si_code > 0 && memcheck::on()) {
    // A kernel's access outside its allocations (kernel view), or, without
    // strict mode (the view is the device addresses), any such access.
    int write = -1;
#if defined(__x86_64__)
    // The page-fault error code: bit 1 is set for a write.
    write = (static_cast<ucontext_t*>(uctx)->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#endif
    bool in_kview = false;
    for (int i = 0; i < kMaxDevices; ++i) {
      uintptr_t lo = g_kview_lo[i].load(std::memory_order_relaxed);
      uintptr_t len = g_arena_hi[i].load(std::memory_order_relaxed) -
                      g_arena_lo[i].load(std::memory_order_relaxed);
      if (!lo || addr < lo || addr >= lo + len) continue;
      in_kview = true;
      // Inside a kernel: noted, and let through (reported after the kernel).
      if (memcheck::on_fault(addr, i, addr - lo, write)) return;
      write_str("\n========= OPENREG MEMCHECK: invalid access at kernel-view address ");
      write_hex(addr);
      write_str(" (openreg:");
      write_dec(uint64_t(i));
      write_str(", offset ");
      write_dec(addr - lo);
      write_str(") while no kernel runs (host code): no full report; the process stops.\n");
      dev = -1;
      break;
    }
    // [docs:memcheck-foreign-address]
    // Outside every device's memory, from a kernel: compute-sanitizer's
    // "Address ... is out of bounds" for an address of no allocation. The
    // page cannot be opened for the kernel to go on, so the report comes
    // now and the process stops (in raise mode too).
    int kdev = -1;
    unsigned long long kstream = 0;
    const char* kernel =
        dev < 0 && !in_kview ? memcheck::faulting_kernel(&kdev, &kstream) : nullptr;
    if (kernel) {
      write_str(write == 1 ? "\n========= OPENREG MEMCHECK: invalid write"
                : write == 0 ? "\n========= OPENREG MEMCHECK: invalid read"
                             : "\n========= OPENREG MEMCHECK: invalid access");
      if (*kernel) {
        write_str(" by kernel '");
        write_str(kernel);
        write_str("' on stream ");
        write_dec(kstream);
        write_str(" of openreg:");
        write_dec(uint64_t(kdev));
      } else {
        write_str(" by a thread of ATen's intra-op pool while a kernel runs");
      }
      write_str("\n=========     address ");
      write_hex(addr);
      write_str(" is out of bounds: it is in no allocation of any openreg device (a view of "
                "a storage resized to 0 or freed, or a pointer that is not device memory)\n"
                "=========     the kernel cannot go on; the process stops.\n");
    }
    // [docs:memcheck-foreign-address:end]
  }
  if (dev >= 0) {
    write_str("\nopenreg: illegal host access to device memory at address ");
    write_hex(addr);
    write_str(" (device openreg:");
    write_dec(uint64_t(dev));
    write_str(", offset ");
    write_dec(addr - g_arena_lo[dev].load(std::memory_order_relaxed));
    write_str(" into its memory).\nopenreg: device memory is not host-"
              "accessible in strict mode; copy the tensor to the CPU first "
              "(tensor.cpu()), or set OPENREG_STRICT_MEMORY=0.\n");
  }
  // Hand the fault to whoever was installed before us (e.g. Python's
  // faulthandler) or to the default action, and let it re-trigger.
  sigaction(sig, prev, nullptr);
  if (!(prev->sa_flags & SA_SIGINFO) && prev->sa_handler == SIG_IGN) {
    signal(sig, SIG_DFL);
  }
  (void)uctx;
}

}  // namespace

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!config().strict && !memcheck::on()) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = fault_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    sigaction(SIGBUS, &sa, &g_prev_bus);
  });
}

void init_arena(Device& dev) {
  const Config& c = config();
  auto a = std::make_unique<Arena>();
  a->capacity = c.capacity;
  int flags_noreserve = MAP_NORESERVE;
  // [docs:dual-mapping]
  if (c.strict) {
    char name[32];
    snprintf(name, sizeof(name), "openreg-device-%d", dev.index);
    int fd = int(syscall(SYS_memfd_create, name, MFD_CLOEXEC));
    if (fd < 0) return;
    if (ftruncate(fd, off_t(c.capacity)) != 0) {
      close(fd);
      return;
    }
    void* base = mmap(nullptr, c.capacity, PROT_NONE,
                      MAP_SHARED | flags_noreserve, fd, 0);
    if (base == MAP_FAILED) {
      close(fd);
      return;
    }
    void* kview = mmap(nullptr, c.capacity, PROT_READ | PROT_WRITE,
                       MAP_SHARED | flags_noreserve, fd, 0);
    if (kview == MAP_FAILED) {
      munmap(base, c.capacity);
      close(fd);
      return;
    }
    a->memfd = fd;
    a->base = static_cast<char*>(base);
    a->kview = static_cast<char*>(kview);
  } else {
    void* base = mmap(nullptr, c.capacity, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | flags_noreserve, -1, 0);
    if (base == MAP_FAILED) return;
    a->base = a->kview = static_cast<char*>(base);
  }
  // [docs:dual-mapping:end]
  memcheck::configure(c);
  if (memcheck::on() && !memcheck::init_arena(*a)) return;
  a->free_by_off[0] = a->capacity;
  a->free_by_len.insert({a->capacity, 0});
  g_arenas[dev.index] = a.get();
  g_kview_lo[dev.index].store(reinterpret_cast<uintptr_t>(a->kview));
  g_arena_lo[dev.index].store(reinterpret_cast<uintptr_t>(a->base));
  g_arena_hi[dev.index].store(reinterpret_cast<uintptr_t>(a->base) + a->capacity);
  dev.arena = std::move(a);
}

// ------------------------------------------------------------ IPC imports
// Peers' allocations opened with orIpcOpenMemHandle, keyed by the start of
// their device-address mapping. They count as device memory of the device
// that was current when they were opened.
namespace {
struct Import {
  size_t map_len = 0;     // bytes mapped (whole pages)
  char* kview = nullptr;  // read/write view of the same pages
  int device = 0;
  size_t alloc_off = 0;   // where the allocation starts in the mapping
  size_t alloc_size = 0;
};
std::shared_mutex g_import_mu;
std::atomic<int> g_import_count{0};
std::map<uintptr_t, Import>& imports() {
  static auto* m = new std::map<uintptr_t, Import>();
  return *m;
}
// The import whose mapping holds p (caller holds g_import_mu), or nullptr.
const Import* find_import(const void* p, uintptr_t* base) {
  auto v = reinterpret_cast<uintptr_t>(p);
  auto& m = imports();
  auto it = m.upper_bound(v);
  if (it == m.begin()) return nullptr;
  --it;
  if (v >= it->first + it->second.map_len) return nullptr;
  *base = it->first;
  return &it->second;
}
}  // namespace

int device_of_pointer(const void* p) {
  auto v = reinterpret_cast<uintptr_t>(p);
  for (int i = 0; i < kMaxDevices; ++i) {
    uintptr_t lo = g_arena_lo[i].load(std::memory_order_acquire);
    if (lo && v >= lo && v < g_arena_hi[i].load(std::memory_order_relaxed))
      return i;
  }
  if (g_import_count.load(std::memory_order_acquire) == 0) return -1;
  std::shared_lock<std::shared_mutex> g(g_import_mu);
  uintptr_t base;
  const Import* im = find_import(p, &base);
  return im ? im->device : -1;
}

Arena& arena(int device) { return *g_arenas[device]; }

void* kernel_address(int device, const void* p, size_t n, std::string* why) {
  Arena& a = arena(device);
  if (static_cast<const char*>(p) < a.base || static_cast<const char*>(p) >= a.base + a.capacity) {
    std::shared_lock<std::shared_mutex> g(g_import_mu);
    uintptr_t base;
    const Import* im = find_import(p, &base);
    const size_t off = reinterpret_cast<uintptr_t>(p) - base;
    // (n compared with the room left, not off + n with the end: a huge n
    // would wrap around and pass. The fuzzer found orMemset(p, v, SIZE_MAX).)
    if (!im || off < im->alloc_off || off >= im->alloc_off + im->alloc_size ||
        n > im->alloc_off + im->alloc_size - off) {
      if (why) *why = format("range [%p, +%zu) is not inside a live allocation of openreg:%d "
                             "or an opened IPC allocation", p, n, device);
      return nullptr;
    }
    return im->kview + off;
  }
  size_t off = size_t(static_cast<const char*>(p) - a.base);
  std::lock_guard<std::mutex> g(a.mu);
  auto it = find_enclosing(a.used, off);
  if (it == a.used.end()) {
    if (why && memcheck::on()) *why = memcheck::describe(a, device, off, n);
    else if (why) *why = format("device address %p (openreg:%d) is not inside a live "
                                "allocation (freed, or never allocated)", p, device);
    return nullptr;
  }
  if (n > it->first + it->second - off) {  // (not off + n: it wraps for huge n)
    if (why) *why = format("range [%p, +%zu) overruns its allocation of %zu bytes at %p "
                           "(openreg:%d)%s", p, n, it->second, a.base + it->first, device,
                           memcheck::on() ? ": out of bounds" : "");
    return nullptr;
  }
  return a.kview + off;
}

// ------------------------------------------------------------ pinned memory
namespace {
std::mutex g_pinned_mu;
std::map<uintptr_t, size_t>& pinned() {
  static auto* m = new std::map<uintptr_t, size_t>();
  return *m;
}
}  // namespace

bool is_pinned_range(const void* p, size_t n) {
  auto v = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(g_pinned_mu);
  auto it = find_enclosing(pinned(), v);
  return it != pinned().end() && v + n <= it->first + it->second;
}

}  // namespace openreg

using namespace openreg;

namespace {
orError_t out_of_memory(int device, size_t size, const Arena& a) {
  return fail(orErrorMemoryAllocation,
              "orMalloc: out of memory on device openreg:%d: requested %zu "
              "bytes, capacity %zu bytes, in use %zu bytes",
              device, size, a.capacity, a.used_bytes);
}
}  // namespace

extern "C" {

orError_t orMalloc(void** devPtr, size_t size) {
  if (!devPtr) return fail(orErrorInvalidValue, "orMalloc: devPtr is NULL");
  *devPtr = nullptr;
  int idx = current_device_index();
  Device* dev = get_device(idx, "orMalloc");
  if (!dev) return orPeekAtLastError();
  if (size == 0) return orSuccess;
  Arena& a = *dev->arena;
  if (size > a.capacity) {
    return out_of_memory(idx, size, a);
  }
  std::lock_guard<std::mutex> g(a.mu);
  if (memcheck::on()) {
    const size_t off = memcheck::malloc(a, size);
    if (off == SIZE_MAX) return out_of_memory(idx, size, a);
    *devPtr = a.base + off;
    return orSuccess;
  }
  size_t len = round_up(size, kAlignment);
  const size_t off = arena_take(a, len);
  if (off == SIZE_MAX) {
    return out_of_memory(idx, size, a);
  }
  a.used[off] = len;
  a.used_bytes += len;
  *devPtr = a.base + off;
  return orSuccess;
}

orError_t orFree(void* devPtr) {
  if (!devPtr) return orSuccess;
  if (g_import_count.load() > 0) {
    std::shared_lock<std::shared_mutex> g(g_import_mu);
    uintptr_t base;
    if (find_import(devPtr, &base))
      return fail(orErrorInvalidDevicePointer,
                  "orFree: %p was opened with orIpcOpenMemHandle (a peer's memory); close "
                  "it with orIpcCloseMemHandle", devPtr);
  }
  int d = device_of_pointer(devPtr);
  if (d < 0) {
    return fail(orErrorInvalidDevicePointer,
                "orFree: %p is not a device pointer (host memory is freed with "
                "orFreeHost or free)", devPtr);
  }
  if (in_forked_child())
    return fail(orErrorInitializationError,
                "orFree: " OPENREG_FORK_MESSAGE);
  Arena& a = arena(d);
  size_t off = size_t(static_cast<char*>(devPtr) - a.base);
  std::lock_guard<std::mutex> g(a.mu);
  auto it = a.used.find(off);
  if (it == a.used.end()) {
    return fail(orErrorInvalidDevicePointer,
                "orFree: %p (openreg:%d) is not the start of a live allocation "
                "(double free, or a pointer into the middle of a block)",
                devPtr, d);
  }
  size_t len = it->second;
  a.used.erase(it);
  if (memcheck::on()) {
    memcheck::free(a, off);  // unreachable at once, reusable after its quarantine
  } else {
    a.used_bytes -= len;
    insert_free(a, off, len);
  }
  // The sanitizer treats orFree as cudaFree, which synchronises the device:
  // the range's history ends here. (orFree itself does not wait for queued
  // work: a reuse of the range that overtakes queued work is a runtime-level
  // hazard the sanitizer does not report.)
  if (san::on()) san::forget(devPtr, len);
  return orSuccess;
}

orError_t orMemGetInfo(size_t* free, size_t* total) {
  int idx = current_device_index();
  Device* dev = get_device(idx, "orMemGetInfo");
  if (!dev) return orPeekAtLastError();
  Arena& a = *dev->arena;
  std::lock_guard<std::mutex> g(a.mu);
  if (free) *free = a.capacity - a.used_bytes;
  if (total) *total = a.capacity;
  return orSuccess;
}

orError_t orMallocHost(void** ptr, size_t size) {
  if (!ptr) return fail(orErrorInvalidValue, "orMallocHost: ptr is NULL");
  *ptr = nullptr;
  if (size == 0) return orSuccess;
  size_t len = round_up(size, kPageSize);
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return fail(orErrorMemoryAllocation,
                "orMallocHost: could not allocate %zu bytes of pinned host "
                "memory: %s", size, strerror(errno));
  }
  std::lock_guard<std::mutex> g(g_pinned_mu);
  pinned()[reinterpret_cast<uintptr_t>(p)] = len;
  *ptr = p;
  return orSuccess;
}

orError_t orFreeHost(void* ptr) {
  if (!ptr) return orSuccess;
  size_t len = 0;
  {
    std::lock_guard<std::mutex> g(g_pinned_mu);
    auto it = pinned().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == pinned().end()) {
      return fail(orErrorInvalidValue,
                  "orFreeHost: %p was not allocated by orMallocHost (or was "
                  "already freed)", ptr);
    }
    len = it->second;
    pinned().erase(it);
  }
  // The pages are unmapped: a later mapping at this address is new memory.
  if (san::on()) san::forget(ptr, len);
  munmap(ptr, len);
  return orSuccess;
}

orError_t orPointerGetAttributes(orPointerAttributes* attr, const void* ptr) {
  if (!attr) return fail(orErrorInvalidValue, "orPointerGetAttributes: attributes is NULL");
  memset(attr, 0, sizeof(*attr));
  attr->device = -1;
  if (g_import_count.load() > 0) {
    std::shared_lock<std::shared_mutex> g(g_import_mu);
    uintptr_t base;
    if (const Import* im = find_import(ptr, &base)) {
      const size_t off = reinterpret_cast<uintptr_t>(ptr) - base;
      attr->type = orMemoryTypeDevice;
      attr->device = im->device;
      attr->hostPointer = im->kview + off;
      if (off >= im->alloc_off && off < im->alloc_off + im->alloc_size) {
        attr->devicePointer = reinterpret_cast<char*>(base) + im->alloc_off;
        attr->allocationSize = im->alloc_size;
      }
      return orSuccess;
    }
  }
  int d = device_of_pointer(ptr);
  if (d >= 0) {
    Arena& a = arena(d);
    attr->type = orMemoryTypeDevice;
    attr->device = d;
    size_t off = size_t(static_cast<const char*>(ptr) - a.base);
    attr->hostPointer = a.kview + off;
    std::lock_guard<std::mutex> g(a.mu);
    auto it = find_enclosing(a.used, off);
    if (it != a.used.end()) {
      attr->devicePointer = a.base + it->first;
      attr->allocationSize = it->second;
    }
    return orSuccess;
  }
  auto v = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> g(g_pinned_mu);
  auto it = find_enclosing(pinned(), v);
  if (it != pinned().end()) {
    attr->type = orMemoryTypeHost;
    attr->hostPointer = const_cast<void*>(ptr);
    attr->devicePointer = reinterpret_cast<void*>(it->first);
    attr->allocationSize = it->second;
    return orSuccess;
  }
  attr->type = orMemoryTypeUnregistered;
  attr->hostPointer = const_cast<void*>(ptr);
  return orSuccess;
}

orError_t orDeviceGetKernelViewOffset(int device, intptr_t* offset) {
  if (!offset) return fail(orErrorInvalidValue, "orDeviceGetKernelViewOffset: offset is NULL");
  Device* dev = get_device(device, "orDeviceGetKernelViewOffset");
  if (!dev) return orPeekAtLastError();
  *offset = reinterpret_cast<intptr_t>(dev->arena->kview) -
            reinterpret_cast<intptr_t>(dev->arena->base);
  return orSuccess;
}

}  // extern "C"

// ------------------------------------------------------------ IPC
namespace {
constexpr uint64_t kIpcMagic = 0x3130304350494f52ull;  // "ROIPC001"
struct IpcHandle {
  uint64_t magic;
  int32_t pid;
  int32_t fd;        // the owner's memfd, reachable as /proc/<pid>/fd/<fd>
  uint64_t ino;      // identity of that memfd (refuses a recycled pid/fd)
  uint64_t dev;
  uint64_t offset;   // the allocation inside the owner's device memory
  uint64_t size;
  int32_t device;    // the owner's device index (for messages)
  int32_t pad;
};
static_assert(sizeof(IpcHandle) <= OR_IPC_HANDLE_SIZE, "IPC handle too large");
}  // namespace

extern "C" {

// [docs:ipc-get]
orError_t orIpcGetMemHandle(orIpcMemHandle_t* handle, void* devPtr) {
  if (!handle) return fail(orErrorInvalidValue, "orIpcGetMemHandle: handle is NULL");
  memset(handle, 0, sizeof(*handle));
  const int d = device_of_pointer(devPtr);
  if (d < 0 || !g_arenas[d] || static_cast<char*>(devPtr) < g_arenas[d]->base ||
      static_cast<char*>(devPtr) >= g_arenas[d]->base + g_arenas[d]->capacity)
    return fail(orErrorInvalidDevicePointer,
                "orIpcGetMemHandle: %p is not memory allocated by orMalloc in this process",
                devPtr);
  if (in_forked_child())
    return fail(orErrorInitializationError, "orIpcGetMemHandle: " OPENREG_FORK_MESSAGE);
  Arena& a = arena(d);
  if (a.memfd < 0)
    return fail(orErrorNotSupported,
                "orIpcGetMemHandle: device openreg:%d has anonymous memory "
                "(OPENREG_STRICT_MEMORY=0); IPC needs strict mode, whose memory is a memfd", d);
  const size_t off = size_t(static_cast<char*>(devPtr) - a.base);
  IpcHandle h{};
  {
    std::lock_guard<std::mutex> g(a.mu);
    auto it = find_enclosing(a.used, off);
    if (it == a.used.end())
      return fail(orErrorInvalidDevicePointer,
                  "orIpcGetMemHandle: %p (openreg:%d) is not inside a live allocation", devPtr, d);
    h.offset = it->first;
    h.size = it->second;
    if (memcheck::on()) memcheck::exported(a, it->first);
  }
  struct stat st;
  if (fstat(a.memfd, &st) != 0)
    return fail(orErrorUnknown, "orIpcGetMemHandle: fstat: %s", strerror(errno));
  h.magic = kIpcMagic;
  h.pid = int32_t(getpid());
  h.fd = a.memfd;
  h.ino = uint64_t(st.st_ino);
  h.dev = uint64_t(st.st_dev);
  h.device = d;
  memcpy(handle->reserved, &h, sizeof(h));
  return orSuccess;
}
// [docs:ipc-get:end]

// [docs:ipc-open]
orError_t orIpcOpenMemHandle(void** devPtr, orIpcMemHandle_t handle, unsigned int flags) {
  if (!devPtr) return fail(orErrorInvalidValue, "orIpcOpenMemHandle: devPtr is NULL");
  *devPtr = nullptr;
  (void)flags;
  IpcHandle h;
  memcpy(&h, handle.reserved, sizeof(h));
  if (h.magic != kIpcMagic || h.size == 0)
    return fail(orErrorInvalidResourceHandle, "orIpcOpenMemHandle: not an IPC memory handle");
  const int idx = current_device_index();
  if (!get_device(idx, "orIpcOpenMemHandle")) return orPeekAtLastError();
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", int(h.pid), int(h.fd));
  const int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return fail(orErrorInvalidResourceHandle,
                "orIpcOpenMemHandle: cannot open the memory of process %d (device openreg:%d) "
                "through %s: %s (has the owner exited?)", int(h.pid), int(h.device), path,
                strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || uint64_t(st.st_ino) != h.ino || uint64_t(st.st_dev) != h.dev ||
      uint64_t(st.st_size) < h.offset + h.size) {
    close(fd);
    return fail(orErrorInvalidResourceHandle,
                "orIpcOpenMemHandle: %s is not the device memory the handle was made for "
                "(the owner exited and its pid or descriptor was reused): refused", path);
  }
  // Whole pages around the allocation, mapped twice like the runtime's own
  // memory: PROT_NONE device addresses, and a read/write kernel view.
  const size_t lo = h.offset / kPageSize * kPageSize;
  const size_t len = round_up(h.offset + h.size, kPageSize) - lo;
  void* dev = mmap(nullptr, len, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, off_t(lo));
  void* kv = dev == MAP_FAILED ? MAP_FAILED
                               : mmap(nullptr, len, PROT_READ | PROT_WRITE,
                                      MAP_SHARED | MAP_NORESERVE, fd, off_t(lo));
  const int err = errno;
  close(fd);  // the mappings keep the memory alive
  if (kv == MAP_FAILED) {
    if (dev != MAP_FAILED) munmap(dev, len);
    return fail(orErrorMemoryAllocation, "orIpcOpenMemHandle: mmap of %zu bytes: %s", len,
                strerror(err));
  }
  Import im;
  im.map_len = len;
  im.kview = static_cast<char*>(kv);
  im.device = idx;
  im.alloc_off = h.offset - lo;
  im.alloc_size = h.size;
  {
    std::unique_lock<std::shared_mutex> g(g_import_mu);
    imports()[reinterpret_cast<uintptr_t>(dev)] = im;
    g_import_count.fetch_add(1);
  }
  *devPtr = static_cast<char*>(dev) + im.alloc_off;
  return orSuccess;
}
// [docs:ipc-open:end]

orError_t orIpcCloseMemHandle(void* devPtr) {
  Import im;
  uintptr_t base = 0;
  {
    std::unique_lock<std::shared_mutex> g(g_import_mu);
    const Import* found = find_import(devPtr, &base);
    if (!found || reinterpret_cast<uintptr_t>(devPtr) != base + found->alloc_off)
      return fail(orErrorInvalidDevicePointer,
                  "orIpcCloseMemHandle: %p is not a pointer returned by orIpcOpenMemHandle "
                  "(or it was already closed)", devPtr);
    im = *found;
    imports().erase(base);
    g_import_count.fetch_sub(1);
  }
  munmap(reinterpret_cast<void*>(base), im.map_len);
  munmap(im.kview, im.map_len);
  return orSuccess;
}

}  // extern "C"
