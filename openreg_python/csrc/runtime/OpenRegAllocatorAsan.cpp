// The caching allocator's ASan poisoning (OpenRegAllocatorAsan.h says what
// and when). Empty outside AddressSanitizer builds.
#include "OpenRegAllocatorAsan.h"

#if defined(__SANITIZE_ADDRESS__)

#include <sanitizer/asan_interface.h>

#include <map>
#include <mutex>

namespace torch_openreg::alloc::asan {
namespace {

// Both maps hold kernel-view ranges (start -> length) of every device; the
// devices' views do not overlap. The mutex is never held while calling the
// runtime, so a host function taking it cannot deadlock with a thread that
// waits for its stream.
std::mutex g_mu;
std::map<char*, size_t> g_segments;  // the cache's segments
std::map<char*, size_t> g_live;      // allocated blocks' requested bytes

// Poison [a, b) minus what is live, within the cache's segments. g_mu held.
void poison_locked(char* a, char* b) {
  auto seg = g_segments.upper_bound(a);
  if (seg == g_segments.begin()) return;
  --seg;
  char* seg_end = seg->first + seg->second;
  if (seg_end <= a) return;  // given back to the runtime since
  if (b > seg_end) b = seg_end;
  auto it = g_live.upper_bound(a);
  if (it != g_live.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second > a) a = prev->first + prev->second;
  }
  for (; a < b; ++it) {
    char* next = (it == g_live.end() || it->first > b) ? b : it->first;
    if (next > a) ASAN_POISON_MEMORY_REGION(a, size_t(next - a));
    if (it == g_live.end()) break;
    a = it->first + it->second;
  }
}

struct Poison {
  char* kv;
  size_t n;
};

void poison_fn(void* p) {
  auto* m = static_cast<Poison*>(p);
  {
    std::lock_guard<std::mutex> g(g_mu);
    poison_locked(m->kv, m->kv + m->n);
  }
  delete m;
}

// poison_fn in stream order, as a kernel the trace does not show: it is
// the allocator's bookkeeping, not work the program launched (a profiled
// step would otherwise show device activity that no operator made).
orError_t poison_kernel(void* p) {
  poison_fn(p);
  return orSuccess;
}

}  // namespace

void segment_added(char* kv, size_t n) {
  std::lock_guard<std::mutex> g(g_mu);
  g_segments[kv] = n;
  ASAN_POISON_MEMORY_REGION(kv, n);
}

void segment_removed(char* kv, size_t n) {
  std::lock_guard<std::mutex> g(g_mu);
  g_segments.erase(kv);
  g_live.erase(g_live.lower_bound(kv), g_live.lower_bound(kv + n));
  ASAN_UNPOISON_MEMORY_REGION(kv, n);
}

void allocated(char* kv, size_t requested) {
  std::lock_guard<std::mutex> g(g_mu);
  g_live[kv] = requested;
  ASAN_UNPOISON_MEMORY_REGION(kv, requested);
}

void freed(orStream_t stream, char* kv, size_t n) {
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_live.erase(kv);
  }
  // A capturing stream is never queried (that would invalidate its capture)
  // and gets no host function (that would be captured): the block stays
  // unpoisoned, which misses reports but never makes a false one.
  orStreamCaptureStatus capture = orStreamCaptureStatusNone;
  if (orStreamGetCaptureInfo(stream, &capture, nullptr) != orSuccess) {
    orGetLastError();
    return;
  }
  if (capture != orStreamCaptureStatusNone) return;
  auto* m = new Poison{kv, n};
  orError_t busy = orStreamQuery(stream);
  if (busy == orErrorNotReady) {
    orGetLastError();
    if (orLaunchKernel(stream, &poison_kernel, m, "openreg_allocator_poison",
                       orLaunchNeverInline | orLaunchUntraced) == orSuccess)
      return;
    orGetLastError();
    delete m;
    return;  // (the stream failed: leave the block unpoisoned)
  }
  if (busy != orSuccess) orGetLastError();
  poison_fn(m);
}

}  // namespace torch_openreg::alloc::asan

#endif  // __SANITIZE_ADDRESS__
