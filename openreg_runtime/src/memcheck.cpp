// Memcheck (see memcheck.h for the model, docs/memcheck.md for its use).
// Vendor: a real device faults on its own and its driver reports the
// fault; this file is the simulation's stand-in for both, and for
// compute-sanitizer's precision (an allocation that ends at a guard page).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // REG_ERR, to tell a write from a read
#endif
#include "memcheck.h"
#include "scheduler.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace openreg {
namespace memcheck {

std::atomic<bool> g_on{false};

namespace {

bool g_raise = false;
bool g_init = false;  // OPENREG_MEMCHECK=initcheck
bool g_guard_start = false;
size_t g_quarantine = 0;

// Initcheck's state of a page of the kernel view. A live allocation's pages
// start kUnwritten and PROT_NONE; the first write to one (a fault that says
// write, a copy or a memset) makes it kWritten and read/write.
enum PageState : uint8_t { kNotLive = 0, kUnwritten = 1, kWritten = 2 };
std::atomic<uint64_t> g_seq{0};
std::atomic<orMemcheckDescriber_t> g_describer{nullptr};

// What a kernel has done wrong so far. The fault handler records the first
// invalid access, opens the faulting page and lets the kernel go on;
// run_kernel closes the pages again afterwards and reports. (A jump back out
// of the kernel would stop it at once, but would skip the frames of a kernel
// written in Python, which holds the GIL, and leave the interpreter broken.)
// Each kernel has one on its launching thread; the threads of ATen's
// intra-op pool that a kernel fans out to share a global one.
struct Watch {
  static constexpr int kMaxPages = 256;
  std::atomic<size_t> count{0};
  std::atomic<bool> recorded{false};  // the first access below is set
  size_t offset = 0;  // of the first invalid access
  int device = -1;
  int write = -1;       // 1 write, 0 read, -1 unknown
  bool uninit = false;  // a read of a page nothing wrote
  std::atomic<int> npages{0};
  uintptr_t pages[kMaxPages];
  // The kernel watched (a kernel's own watch; the pool's has none).
  const char* kernel = nullptr;
  int kernel_device = -1;
  unsigned long long kernel_stream = 0;
};
thread_local Watch* t_watch = nullptr;
Watch g_pool_watch;              // intra-op threads of the kernels running
std::atomic<int> g_running{0};   // kernels running under a watch

// Where an allocation's own pages start (its region less the guard page),
// and how many bytes they span.
size_t data_start(const Arena::McAlloc& m) { return g_guard_start ? m.region + kPageSize : m.region; }
size_t data_len(const Arena::McAlloc& m) { return m.region_len - kPageSize; }

// The end of a report: the process stops, as under compute-sanitizer, or
// (raise mode) the operation fails with the report as its message.
orError_t report_error(const std::string& report, std::string* why);

// The nearest allocation to an offset, and how the offset relates to it.
struct Finding {
  std::string text;
  uintptr_t alloc = 0;  // device address of the allocation (0: none)
  size_t size = 0;
  bool freed = false;
};

std::string relation(size_t off, const Arena::McAlloc& m) {
  if (off < m.off) return format("%zu bytes before", m.off - off);
  if (off >= m.off + m.size) return format("%zu bytes after the end of", off - (m.off + m.size));
  return format("%zu bytes inside", off - m.off);
}

Finding find(const Arena& a, int device, size_t off) {
  Finding f;
  auto addr = [&a](size_t o) { return static_cast<const void*>(a.base + o); };
  // A quarantined allocation's pages: a use after free (newest free first).
  for (auto it = a.mc_quarantine.rbegin(); it != a.mc_quarantine.rend(); ++it) {
    if (off >= it->region && off < it->region + it->region_len) {
      f.text = format("%s allocation #%llu of %zu bytes at %p (openreg:%d), which was freed: "
                      "use after free", relation(off, *it).c_str(),
                      (unsigned long long)it->seq, it->size, addr(it->off), device);
      f.alloc = reinterpret_cast<uintptr_t>(addr(it->off));
      f.size = it->size;
      f.freed = true;
      return f;
    }
  }
  // Otherwise the live allocation nearest to it (a guard page is its own
  // allocation's): out of bounds.
  const Arena::McAlloc* best = nullptr;
  size_t best_dist = SIZE_MAX;
  auto next = a.mc_live.upper_bound(off);
  auto consider = [&](const Arena::McAlloc& m) {
    size_t d = off < m.off ? m.off - off : off >= m.off + m.size ? off - (m.off + m.size) + 1 : 0;
    if (off >= m.region && off < m.region + m.region_len) d = 0;  // its own guard page
    if (d < best_dist) best = &m, best_dist = d;
  };
  if (next != a.mc_live.end()) consider(next->second);
  if (next != a.mc_live.begin()) consider(std::prev(next)->second);
  if (!best) {
    f.text = format("not near any allocation of openreg:%d (none is live)", device);
    return f;
  }
  const bool inside = off >= best->off && off < best->off + best->size;
  f.text = format("%s allocation #%llu of %zu bytes at %p (openreg:%d)%s",
                  relation(off, *best).c_str(), (unsigned long long)best->seq, best->size,
                  addr(best->off), device, inside ? "" : ": out of bounds");
  f.alloc = reinterpret_cast<uintptr_t>(addr(best->off));
  f.size = best->size;
  return f;
}

// The describer's lines about an allocation (its stacks), indented.
std::string described(const Finding& f) {
  orMemcheckDescriber_t d = g_describer.load();
  if (!d || !f.alloc) return "";
  std::string buf(8192, '\0');
  size_t n = d(reinterpret_cast<const void*>(f.alloc), f.size, f.freed ? 1 : 0, &buf[0],
               buf.size());
  buf.resize(std::min(n, buf.size() - 1));
  std::string out;
  size_t start = 0;
  while (start < buf.size()) {
    size_t end = buf.find('\n', start);
    if (end == std::string::npos) end = buf.size();
    out += "=========     " + buf.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

std::string fault_report(const char* kernel, int device, unsigned long long stream,
                         const Watch& j) {
  Finding f;
  uintptr_t address = 0;
  if (Device* dev = peek_device(j.device)) {  // (a kernel may touch another device's memory)
    Arena& a = *dev->arena;
    address = reinterpret_cast<uintptr_t>(a.base + j.offset);
    std::lock_guard<std::mutex> g(a.mu);
    f = find(a, j.device, j.offset);
  }
  const char* access = j.uninit ? "uninitialised read"
                       : j.write == 1 ? "invalid write" : j.write == 0 ? "invalid read"
                                                               : "invalid access";
  if (j.uninit) f.text += ", in a page nothing has written since it was allocated";
  std::string r = format(
      "========= OPENREG MEMCHECK: %s by kernel '%s' on stream %llu of openreg:%d\n"
      "=========     device address %p is %s\n",
      access, kernel, stream, device, reinterpret_cast<void*>(address), f.text.c_str());
  if (j.count > 1 && &j != &g_pool_watch)
    r += format("=========     and %zu more invalid accesses\n", j.count.load() - 1);
  return r + described(f);
}

// After the kernel: close the pages the handler opened, unless
// they became a live allocation's since.
void reclose(const Watch& w) {
  Device* dev = peek_device(w.device);
  const int npages = std::min(w.npages.load(), Watch::kMaxPages);
  if (!dev || !npages) return;
  Arena& a = *dev->arena;
  std::lock_guard<std::mutex> g(a.mu);
  for (int i = 0; i < npages; ++i) {
    const size_t page = w.pages[i] - reinterpret_cast<uintptr_t>(a.kview);
    bool live = false;
    auto next = a.mc_live.upper_bound(page);
    for (auto it : {next, next == a.mc_live.begin() ? a.mc_live.end() : std::prev(next)}) {
      if (it == a.mc_live.end()) continue;
      const size_t data = data_start(it->second);
      if (page >= data && page < data + data_len(it->second)) live = true;
    }
    if (!live) mprotect(a.kview + page, kPageSize, PROT_NONE);
  }
}

void write_str(const char* s) {
  ssize_t r = ::write(2, s, strlen(s));
  (void)r;
}

}  // namespace

void configure(const Config& c) {
  g_raise = c.memcheck_raise;
  g_guard_start = c.memcheck_guard_start;
  g_quarantine = c.memcheck_quarantine;
  g_init = c.memcheck == 2;
  g_on.store(c.memcheck != 0);
}

bool init_arena(Arena& a) {
  if (g_init) {
    const size_t pages = a.capacity / kPageSize;
    a.mc_pages.reset(new std::atomic<uint8_t>[pages]);
    for (size_t i = 0; i < pages; ++i) a.mc_pages[i].store(kNotLive, std::memory_order_relaxed);
  }
  return mprotect(a.kview, a.capacity, PROT_NONE) == 0;
}

namespace {
void set_pages(Arena& a, size_t data, size_t len, PageState st) {
  for (size_t p = data / kPageSize; p < (data + len) / kPageSize; ++p) a.mc_pages[p].store(st);
}
}  // namespace

size_t malloc(Arena& a, size_t size) {
  const size_t data_pages = round_up(size, kPageSize);
  const size_t len = data_pages + kPageSize;  // one guard page
  size_t region = arena_take(a, len);
  if (region == SIZE_MAX && !a.mc_quarantine.empty()) {
    // Full: the quarantine goes before the allocation fails.
    for (const auto& q : a.mc_quarantine) {
      arena_insert_free(a, q.region, q.region_len);
      a.used_bytes -= q.region_len;
    }
    a.mc_quarantine.clear();
    a.mc_quarantine_bytes = 0;
    region = arena_take(a, len);
  }
  if (region == SIZE_MAX) return SIZE_MAX;
  const size_t data = g_guard_start ? region + kPageSize : region;
  if (g_init) {
    set_pages(a, data, data_pages, kUnwritten);  // opened by their first write
  } else if (mprotect(a.kview + data, data_pages, PROT_READ | PROT_WRITE) != 0) {
    arena_insert_free(a, region, len);
    return SIZE_MAX;
  }
  Arena::McAlloc m;
  m.region = region;
  m.region_len = len;
  m.off = g_guard_start ? data : data + data_pages - size;
  m.size = size;
  m.seq = ++g_seq;
  a.used[m.off] = size;
  a.used_bytes += len;
  const size_t off = m.off;
  a.mc_live[off] = std::move(m);
  return off;
}

void free(Arena& a, size_t off) {
  auto it = a.mc_live.find(off);
  if (it == a.mc_live.end()) return;
  Arena::McAlloc m = std::move(it->second);
  a.mc_live.erase(it);
  const size_t data = data_start(m);
  if (g_init) set_pages(a, data, data_len(m), kNotLive);
  mprotect(a.kview + data, data_len(m), PROT_NONE);
  a.mc_quarantine_bytes += m.region_len;
  a.mc_quarantine.push_back(std::move(m));
  while (a.mc_quarantine_bytes > g_quarantine && !a.mc_quarantine.empty()) {
    const Arena::McAlloc& q = a.mc_quarantine.front();
    arena_insert_free(a, q.region, q.region_len);  // its pages stay PROT_NONE
    a.used_bytes -= q.region_len;
    a.mc_quarantine_bytes -= q.region_len;
    a.mc_quarantine.pop_front();
  }
}

std::string describe(const Arena& a, int device, size_t off, size_t n) {
  return format("range [%p, +%zu) is not inside a live allocation: its first byte is %s",
                static_cast<const void*>(a.base + off), n, find(a, device, off).text.c_str());
}

namespace {
orError_t report_error(const std::string& report, std::string* why) {
  if (!g_raise) {
    write_str(("\n" + report + "========= ERROR SUMMARY: 1 error\n").c_str());
    abort();
  }
  *why = "an illegal memory access was encountered\n" + report;
  return orErrorIllegalAddress;
}

// Initcheck of a copy's or memset's device range: a source page nothing has
// written is reported, a destination page becomes written (and accessible).
bool check_range(int device, const void* p, size_t n, bool write, const char* call,
                 std::string* why) {
  Arena& a = arena(device);
  const size_t off = size_t(static_cast<const char*>(p) - a.base);
  std::lock_guard<std::mutex> g(a.mu);
  for (size_t pg = off / kPageSize; pg <= (off + n - 1) / kPageSize; ++pg) {
    if (a.mc_pages[pg].load() != kUnwritten) continue;
    if (!write) {
      const size_t first = std::max(off, pg * kPageSize);
      *why = format("========= OPENREG MEMCHECK: uninitialised read by %s of openreg:%d\n"
                    "=========     device address %p is %s, in a page nothing has written "
                    "since it was allocated\n", call, device,
                    static_cast<const void*>(a.base + first), find(a, device, first).text.c_str());
      return false;
    }
    a.mc_pages[pg].store(kWritten);
    mprotect(a.kview + pg * kPageSize, kPageSize, PROT_READ | PROT_WRITE);
  }
  return true;
}
}  // namespace

orError_t check_copy(const Item& it, std::string* why) {
  if (!g_init || it.count == 0) return orSuccess;
  std::string report;
  const int sd = it.type == Item::Memcpy ? device_of_pointer(it.src) : -1;
  const int dd = device_of_pointer(it.dst);
  if (sd >= 0 && !check_range(sd, it.src, it.count, false, it.name, &report))
    return report_error(report, why);
  if (dd >= 0) check_range(dd, it.dst, it.count, true, it.name, &report);
  return orSuccess;
}

void exported(Arena& a, size_t off) {
  if (!g_init) return;
  auto it = a.mc_live.find(off);
  if (it == a.mc_live.end()) return;
  const size_t data = data_start(it->second);
  const size_t len = data_len(it->second);
  set_pages(a, data, len, kWritten);
  mprotect(a.kview + data, len, PROT_READ | PROT_WRITE);
}

// [docs:memcheck-run-kernel]
orError_t run_kernel(const Item& it, int device, unsigned long long stream, std::string* why) {
  Watch w;
  w.kernel = it.name;
  w.kernel_device = device;
  w.kernel_stream = stream;
  Watch* const outer = t_watch;  // a kernel may launch one inline
  const size_t pool_before = g_pool_watch.count.load();
  g_running.fetch_add(1);
  t_watch = &w;
  std::string failed;
  const orError_t e = call_kernel_fn(it, &failed);
  t_watch = outer;
  g_running.fetch_sub(1);
  Watch* bad = w.recorded.load() ? &w : nullptr;
  if (__builtin_expect(!bad && g_pool_watch.count.load() != pool_before, 0)) {
    bad = &g_pool_watch;  // an intra-op thread's (of this kernel, or of one beside it)
  }
  if (__builtin_expect(!bad, 1)) {
    if (e != orSuccess) *why = std::move(failed);
    return e;
  }
  // The kernel ran to its end with its invalid accesses let through.
  reclose(*bad);
  std::string report = fault_report(it.name, device, stream, *bad);
  if (bad == &g_pool_watch) {
    report += "=========     (by another thread than the kernel's own, such as ATen's intra-op pool)\n";
    g_pool_watch.npages.store(0);
    g_pool_watch.recorded.store(false);  // the next one is recorded afresh
  }
  return report_error(report, why);  // (an asynchronous kernel fails its stream)
}
// [docs:memcheck-run-kernel:end]

bool on_fault(uintptr_t addr, int device, size_t offset, int write) {
  Watch* w = t_watch;
  if (!w && g_running.load() > 0) w = &g_pool_watch;
  const uintptr_t page = addr & ~uintptr_t(kPageSize - 1);
  bool uninit = false;
  if (g_init) {
    std::atomic<uint8_t>& st = peek_device(device)->arena->mc_pages[offset / kPageSize];
    uint8_t s = st.load();
    if (s == kWritten) return true;  // opened by another thread meanwhile: retry
    if (s == kUnwritten) {
      // The first write initialises the page, and so does any access from
      // outside a kernel (host code, which initcheck does not judge); a
      // kernel's read of it is what initcheck reports. Either way the page
      // is open for good.
      uninit = w && write == 0;
      st.store(kWritten);
      if (mprotect(reinterpret_cast<void*>(page), kPageSize, PROT_READ | PROT_WRITE) != 0)
        return false;
      if (!uninit) return true;
    }
  }
  if (!w) return false;
  w->count.fetch_add(1);
  if (!w->recorded.exchange(true)) {
    w->offset = offset;
    w->device = device;
    w->write = write;
    w->uninit = uninit;
  }
  if (uninit) return true;  // opened above
  const int i = w->npages.fetch_add(1);
  if (i >= Watch::kMaxPages ||
      mprotect(reinterpret_cast<void*>(page), kPageSize, PROT_READ | PROT_WRITE) != 0) {
    write_str("\n========= OPENREG MEMCHECK: a kernel made invalid accesses to more than 256 "
              "pages; the process stops.\n");
    return false;
  }
  w->pages[i] = page;
  return true;  // the access is retried, and succeeds
}

const char* faulting_kernel(int* device, unsigned long long* stream) {
  if (Watch* w = t_watch) {
    *device = w->kernel_device;
    *stream = w->kernel_stream;
    return w->kernel ? w->kernel : "";
  }
  return g_running.load() > 0 ? "" : nullptr;
}

}  // namespace memcheck
}  // namespace openreg

using namespace openreg;

extern "C" {

orError_t orMemcheckGetEnabled(int* enabled) {
  if (!enabled) return fail(orErrorInvalidValue, "orMemcheckGetEnabled: enabled is NULL");
  const Config& c = config();
  *enabled = c.init_error == orSuccess ? c.memcheck : 0;
  return orSuccess;
}

orError_t orMemcheckSetDescriber(orMemcheckDescriber_t describer) {
  openreg::memcheck::g_describer.store(describer);
  return orSuccess;
}

}  // extern "C"
