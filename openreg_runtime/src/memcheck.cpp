// Memcheck (see memcheck.h for the model, docs/memcheck.md for its use).
// Vendor: a real device faults on its own and its driver reports the
// fault; this file is the simulation's stand-in for both, and for
// compute-sanitizer's precision (an allocation that ends at a guard page).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // REG_ERR, to tell a write from a read
#endif
#include "memcheck.h"

#include <setjmp.h>
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
bool g_guard_start = false;
size_t g_quarantine = 0;
std::atomic<uint64_t> g_seq{0};
std::atomic<orMemcheckDescriber_t> g_describer{nullptr};

// What this thread's kernel has done wrong so far. Abort mode: the fault
// handler records the first invalid access and jumps back to run_kernel.
// Raise mode: it records it, opens the faulting page and lets the kernel go
// on (a jump would skip the frames of a Python kernel holding the GIL), and
// run_kernel closes the pages again afterwards.
struct Watch {
  sigjmp_buf buf;
  size_t offset = 0;
  int device = -1;
  int write = -1;  // of the first invalid access: 1 write, 0 read, -1 unknown
  size_t count = 0;
  static constexpr int kMaxPages = 256;
  uintptr_t pages[kMaxPages];
  int npages = 0;
};
thread_local Watch* t_watch = nullptr;

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
  f.text = format("%s allocation #%llu of %zu bytes at %p (openreg:%d): out of bounds",
                  relation(off, *best).c_str(), (unsigned long long)best->seq, best->size,
                  addr(best->off), device);
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
  if (Device* dev = peek_device(device)) {
    Arena& a = *dev->arena;
    address = reinterpret_cast<uintptr_t>(a.base + j.offset);
    std::lock_guard<std::mutex> g(a.mu);
    f = find(a, device, j.offset);
  }
  const char* access = j.write == 1 ? "write" : j.write == 0 ? "read" : "access";
  std::string r = format(
      "========= OPENREG MEMCHECK: invalid %s by kernel '%s' on stream %llu of openreg:%d\n"
      "=========     device address %p is %s\n",
      access, kernel, stream, device, reinterpret_cast<void*>(address), f.text.c_str());
  if (j.count > 1) r += format("=========     and %zu more invalid accesses\n", j.count - 1);
  return r + described(f);
}

// Raise mode, after the kernel: close the pages the handler opened, unless
// they became a live allocation's since.
void reclose(const Watch& w) {
  Device* dev = peek_device(w.device);
  if (!dev || !w.npages) return;
  Arena& a = *dev->arena;
  std::lock_guard<std::mutex> g(a.mu);
  for (int i = 0; i < w.npages; ++i) {
    const size_t page = w.pages[i] - reinterpret_cast<uintptr_t>(a.kview);
    bool live = false;
    auto next = a.mc_live.upper_bound(page);
    for (auto it : {next, next == a.mc_live.begin() ? a.mc_live.end() : std::prev(next)}) {
      if (it == a.mc_live.end()) continue;
      const size_t data = g_guard_start ? it->second.region + kPageSize : it->second.region;
      if (page >= data && page < data + it->second.region_len - kPageSize) live = true;
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
  g_on.store(c.memcheck != 0);
}

bool init_arena(Arena& a) {
  return mprotect(a.kview, a.capacity, PROT_NONE) == 0;
}

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
  if (mprotect(a.kview + data, data_pages, PROT_READ | PROT_WRITE) != 0) {
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
  const size_t data = g_guard_start ? m.region + kPageSize : m.region;
  mprotect(a.kview + data, m.region_len - kPageSize, PROT_NONE);
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

// [docs:memcheck-run-kernel]
orError_t run_kernel(const Item& it, int device, unsigned long long stream, std::string* why) {
  Watch w;
  Watch* const outer = t_watch;  // a kernel may launch one inline
  if (!g_raise && sigsetjmp(w.buf, 0) != 0) {  // (0: no signal-mask syscall)
    // The fault handler jumped here: the kernel stopped at its first invalid
    // access, as a faulting GPU kernel does, and so does the process.
    t_watch = outer;
    const std::string report = fault_report(it.name, device, stream, w);
    write_str(("\n" + report + "========= ERROR SUMMARY: 1 error\n").c_str());
    abort();
  }
  t_watch = &w;
  const orError_t e = it.kfn(it.args);
  t_watch = outer;
  if (__builtin_expect(w.count == 0, 1)) {
    if (e != orSuccess) *why = format("kernel '%s' failed: %s", it.name, orGetErrorString(e));
    return e;
  }
  // Raise mode: the kernel ran to its end with its invalid accesses let
  // through; it fails now, its stream with it.
  reclose(w);
  *why = "an illegal memory access was encountered\n" + fault_report(it.name, device, stream, w);
  return orErrorIllegalAddress;
}
// [docs:memcheck-run-kernel:end]

bool on_fault(uintptr_t addr, int device, size_t offset, int write) {
  Watch* w = t_watch;
  if (!w) return false;
  if (w->count++ == 0) {
    w->offset = offset;
    w->device = device;
    w->write = write;
  }
  if (!g_raise) siglongjmp(w->buf, 1);
  const uintptr_t page = addr & ~uintptr_t(kPageSize - 1);
  if (w->npages == Watch::kMaxPages ||
      mprotect(reinterpret_cast<void*>(page), kPageSize, PROT_READ | PROT_WRITE) != 0) {
    write_str("\n========= OPENREG MEMCHECK: a kernel made invalid accesses to more than 256 "
              "pages; the process stops.\n");
    return false;
  }
  w->pages[w->npages++] = page;
  return true;  // the access is retried, and succeeds
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
