// Tracing: the hook points profilers subscribe to. The scheduler reports
// every executed kernel, copy, memset and host function here.
#include "scheduler.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <shared_mutex>

struct orTraceSubscriber_st {
  orTraceCallback_t callback;
  void* user;
};

namespace openreg {
namespace {
// Subscribers change rarely and are read on every traced item: readers share
// the lock, so Unsubscribe (exclusive) waits for running callbacks to end.
std::shared_mutex& subs_mu() {
  static auto* m = new std::shared_mutex();
  return *m;
}
std::vector<orTraceSubscriber_st*>& subscribers() {
  static auto* v = new std::vector<orTraceSubscriber_st*>();
  return *v;
}
std::atomic<int> g_subscriber_count{0};
thread_local unsigned long long t_correlation = 0;
thread_local std::string t_annotation;  // for the next launch of this thread
// Set once any thread has set an annotation: until then no launch needs to
// look at its thread's (a thread-local std::string costs a TLS call).
std::atomic<bool> g_annotated{false};

unsigned long long this_thread_id() {
  static thread_local unsigned long long tid =
      static_cast<unsigned long long>(syscall(SYS_gettid));
  return tid;
}
}  // namespace

bool tracing_enabled() {
  return g_subscriber_count.load(std::memory_order_relaxed) != 0;
}

void stamp_launch(Item& it) {
  it.correlation = t_correlation;
  if (tracing_enabled()) {
    it.launch_ns = now_ns();
    it.launch_thread = this_thread_id();
    it.annotation = std::move(t_annotation);
  }
  forget_launch_annotation();
}

void forget_launch_annotation() {
  if (!g_annotated.load(std::memory_order_relaxed)) return;
  std::string& annotation = t_annotation;
  if (!annotation.empty()) annotation.clear();
}

void trace_item(const Item& it, int device, unsigned long long stream_id,
                uint64_t t0, uint64_t t1) {
  if (it.untraced) return;  // the backend's own bookkeeping (orLaunchUntraced)
  orTraceRecord r;
  memset(&r, 0, sizeof(r));
  switch (it.type) {
    case Item::Kernel: r.kind = orTraceKernel; break;
    case Item::Memcpy: r.kind = orTraceMemcpy; break;
    case Item::Memset: r.kind = orTraceMemset; break;
    case Item::HostFunc: r.kind = orTraceHostFunc; break;
    case Item::Graph: r.kind = orTraceGraphLaunch; break;
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
  // Work launched before the first subscriber has no launch stamp.
  r.launch_ns = it.launch_ns ? it.launch_ns : t0;
  r.launch_thread = it.launch_thread;
  r.annotation = it.annotation.empty() ? nullptr : it.annotation.c_str();
  std::shared_lock<std::shared_mutex> g(subs_mu());
  for (orTraceSubscriber_st* s : subscribers()) s->callback(&r, s->user);
}

}  // namespace openreg

using namespace openreg;

extern "C" {

orError_t orTraceSubscribe(orTraceSubscriber_t* subscriber,
                           orTraceCallback_t callback, void* user) {
  if (!subscriber) return fail(orErrorInvalidValue, "orTraceSubscribe: subscriber is NULL");
  if (!callback) return fail(orErrorInvalidValue, "orTraceSubscribe: callback is NULL");
  auto* s = new orTraceSubscriber_st{callback, user};
  std::unique_lock<std::shared_mutex> g(subs_mu());
  subscribers().push_back(s);
  g_subscriber_count.store(int(subscribers().size()), std::memory_order_relaxed);
  *subscriber = s;
  return orSuccess;
}

orError_t orTraceUnsubscribe(orTraceSubscriber_t subscriber) {
  std::unique_lock<std::shared_mutex> g(subs_mu());
  auto& v = subscribers();
  auto it = std::find(v.begin(), v.end(), subscriber);
  if (!subscriber || it == v.end())
    return fail(orErrorInvalidResourceHandle,
                "orTraceUnsubscribe: %p is not a live trace subscriber",
                static_cast<void*>(subscriber));
  v.erase(it);
  g_subscriber_count.store(int(v.size()), std::memory_order_relaxed);
  delete subscriber;
  return orSuccess;
}

orError_t orTraceIsActive(int* active) {
  if (!active) return fail(orErrorInvalidValue, "orTraceIsActive: active is NULL");
  *active = tracing_enabled() ? 1 : 0;
  return orSuccess;
}

orError_t orTraceSetLaunchAnnotation(const char* annotation) {
  if (annotation && tracing_enabled()) {
    g_annotated.store(true, std::memory_order_relaxed);
    t_annotation = annotation;
  } else {
    t_annotation.clear();
  }
  return orSuccess;
}

orError_t orTraceSetCorrelationId(unsigned long long id) {
  t_correlation = id;
  return orSuccess;
}

}  // extern "C"
