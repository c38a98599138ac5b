// Tracing: the hook points a profiler subscribes to. The scheduler reports
// every executed kernel, copy, memset and host function here.
#include "scheduler.h"

#include <cstring>

namespace openreg {
namespace {
std::atomic<orTraceCallback_t> g_trace_cb{nullptr};
std::atomic<void*> g_trace_user{nullptr};
thread_local unsigned long long t_correlation = 0;
}  // namespace

bool tracing_enabled() {
  return g_trace_cb.load(std::memory_order_relaxed) != nullptr;
}

unsigned long long current_correlation() { return t_correlation; }

void trace_item(const Item& it, int device, unsigned long long stream_id,
                uint64_t t0, uint64_t t1) {
  orTraceCallback_t cb = g_trace_cb.load(std::memory_order_acquire);
  if (!cb) return;
  orTraceRecord r;
  memset(&r, 0, sizeof(r));
  switch (it.type) {
    case Item::Kernel: r.kind = orTraceKernel; break;
    case Item::Memcpy: r.kind = orTraceMemcpy; break;
    case Item::Memset: r.kind = orTraceMemset; break;
    case Item::HostFunc: r.kind = orTraceHostFunc; break;
    default: return;
  }
  r.name = it.name;
  r.device = device;
  r.stream_id = stream_id;
  r.correlation_id = it.correlation;
  r.start_ns = t0;
  r.end_ns = t1;
  r.bytes = (it.type == Item::Memcpy || it.type == Item::Memset) ? it.count : 0;
  r.copy_kind = it.kind;
  cb(&r, g_trace_user.load(std::memory_order_relaxed));
}

}  // namespace openreg

using namespace openreg;

extern "C" {

orError_t orTraceSetCallback(orTraceCallback_t callback, void* user) {
  g_trace_user.store(user, std::memory_order_relaxed);
  g_trace_cb.store(callback, std::memory_order_release);
  return orSuccess;
}

orError_t orTraceSetCorrelationId(unsigned long long id) {
  t_correlation = id;
  return orSuccess;
}

}  // extern "C"
