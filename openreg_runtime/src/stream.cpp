// Streams, events, copies and launches: the simulated device's scheduler.
//
// Each device has `multiProcessorCount` worker threads (started on the first
// asynchronous launch). A worker picks, among the device's streams whose head
// item is ready, the one with the highest priority (lowest number), FIFO
// between equals, and runs that item with the scheduler lock released. A
// stream never runs two items at once, so work on one stream is in order;
// work on different streams is ordered only by events (Wait items).
//
// Fast path: a kernel, memset or device-to-device copy launched on an idle
// stream runs inline on the calling thread. That is unobservable: the stream
// is marked running while it executes, exactly as if a worker had it.
//
// Vendor: this file is what your hardware queues and driver do. The torch glue
// only relies on the semantics in openreg.h.
#include "internal.h"

#include <cstring>
#include <unordered_map>

namespace openreg {

namespace {

// One lock for the scheduler state of all devices: cross-device waits make
// finer locking error-prone, and every critical section here is tiny.
std::mutex& mu() {
  static auto* m = new std::mutex();
  return *m;
}
std::condition_variable& cv_work() {  // workers wait for runnable items
  static auto* c = new std::condition_variable();
  return *c;
}
std::condition_variable& cv_done() {  // synchronisers wait for progress
  static auto* c = new std::condition_variable();
  return *c;
}
std::unordered_set<Stream*>& live_streams() {
  static auto* s = new std::unordered_set<Stream*>();
  return *s;
}
std::unordered_set<orEvent_st*>& live_events() {
  static auto* s = new std::unordered_set<orEvent_st*>();
  return *s;
}

std::atomic<unsigned long long> g_next_stream_id{1};
uint64_t g_order = 0;  // guarded by mu()

// Tracing hook.
std::atomic<orTraceCallback_t> g_trace_cb{nullptr};
std::atomic<void*> g_trace_user{nullptr};
thread_local unsigned long long t_correlation = 0;

const char* kind_name(orMemcpyKind k) {
  switch (k) {
    case orMemcpyHostToHost: return "HostToHost";
    case orMemcpyHostToDevice: return "HostToDevice";
    case orMemcpyDeviceToHost: return "DeviceToHost";
    case orMemcpyDeviceToDevice: return "DeviceToDevice";
    default: return "Default";
  }
}

void trace(const Item& it, int device, unsigned long long stream_id,
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

// ------------------------------------------------------------ copies
// Resolve a copy's pointers to addresses the host can touch, validating
// every device range against the live allocations at the moment the copy
// runs (so a use-after-free in queued work is caught, not silently done).
orError_t resolve_copy(const Item& it, void** dst, const void** src,
                       std::string* why) {
  *dst = it.dst;
  *src = it.src;
  int dd = device_of_pointer(it.dst);
  int sd = device_of_pointer(it.src);
  if (dd >= 0) {
    *dst = kernel_address(dd, it.dst, it.count, why);
    if (!*dst) return orErrorIllegalAddress;
  }
  if (sd >= 0) {
    *src = kernel_address(sd, it.src, it.count, why);
    if (!*src) return orErrorIllegalAddress;
  }
  return orSuccess;
}

// Run one item's body (no scheduler lock held). Returns its error.
orError_t execute(const Item& it, std::string* why) {
  switch (it.type) {
    case Item::Kernel: {
      orError_t e = it.kfn(it.args);
      if (e != orSuccess)
        *why = format("kernel '%s' failed: %s", it.name, orGetErrorString(e));
      return e;
    }
    case Item::HostFunc:
      it.hfn(it.args);
      return orSuccess;
    case Item::Memcpy: {
      void* d;
      const void* s;
      orError_t e = resolve_copy(it, &d, &s, why);
      if (e != orSuccess) return e;
      if (it.count) memmove(d, s, it.count);
      return orSuccess;
    }
    case Item::Memset: {
      int dev = device_of_pointer(it.dst);
      void* d = kernel_address(dev, it.dst, it.count, why);
      if (!d) return orErrorIllegalAddress;
      memset(d, it.value, it.count);
      return orSuccess;
    }
    default:
      return orSuccess;
  }
}

void complete_item(Stream* s, const Item& it, orError_t err,
                   const std::string& why) {
  // Called with mu() held.
  s->completed_seq = it.seq;
  if (err != orSuccess && s->error == orSuccess) {
    s->error = err;
    s->error_message = format("%s (stream %llu, device openreg:%d) failed "
                              "asynchronously: %s", it.name, s->id, s->device,
                              why.c_str());
  }
}

// Pop Record/Wait items that can complete right now. mu() held.
// Returns true if anything changed.
bool drain_markers(Stream* s) {
  bool changed = false;
  while (!s->running && !s->queue.empty()) {
    Item& head = s->queue.front();
    if (head.type == Item::Record) {
      head.event->time_ns = now_ns();
      head.event->completed = true;
      s->completed_seq = head.seq;
      s->queue.pop_front();
      changed = true;
    } else if (head.type == Item::Wait) {
      if (!head.event->completed) break;
      s->completed_seq = head.seq;
      s->queue.pop_front();
      changed = true;
    } else {
      break;
    }
  }
  if (changed) {
    // A completed marker can unblock waiters anywhere: other streams' Wait
    // items (on any device) and host threads in synchronize calls. Callers
    // on host threads (query, synchronize, record) get here too, so the
    // wake-up must not depend on a worker noticing.
    cv_done().notify_all();
    cv_work().notify_all();
  }
  return changed;
}

// Run an item the caller has claimed (stream marked running, mu() held by
// `lk`): release the lock while it executes (traced), then take it back and
// mark the stream free. The caller records completion and wakes waiters.
orError_t run_claimed(Stream* s, const Item& it, std::unique_lock<std::mutex>& lk,
                      std::string* why) {
  lk.unlock();
  const bool tracing = g_trace_cb.load(std::memory_order_relaxed) != nullptr;
  uint64_t t0 = tracing ? now_ns() : 0;
  orError_t err = execute(it, why);
  uint64_t t1 = tracing ? now_ns() : 0;
  if (tracing) trace(it, s->device, s->id, t0, t1);
  lk.lock();
  s->running = false;
  return err;
}

void worker_loop(Device* dev) {
  std::unique_lock<std::mutex> lk(mu());
  for (;;) {
    // [docs:scheduler-pick]
    Stream* best = nullptr;
    bool progressed = false;
    for (Stream* s : dev->streams) {
      if (drain_markers(s)) progressed = true;
      if (s->running || s->queue.empty()) continue;
      const Item& head = s->queue.front();
      if (head.type == Item::Wait || head.type == Item::Record) continue;
      if (!best || s->priority < best->priority ||
          (s->priority == best->priority &&
           head.order < best->queue.front().order)) {
        best = s;
      }
    }
    if (progressed) {
      // Markers completing may unblock waiters on other devices too.
      cv_done().notify_all();
      cv_work().notify_all();
    }
    if (!best) {
      // Completing a marker may have made an earlier-scanned stream ready:
      // scan again before sleeping.
      if (progressed) continue;
      cv_work().wait(lk);
      continue;
    }
    // [docs:scheduler-pick:end]
    Item it = std::move(best->queue.front());
    best->queue.pop_front();
    best->running = true;
    std::string why;
    orError_t err = run_claimed(best, it, lk, &why);
    complete_item(best, it, err, why);
    drain_markers(best);
    cv_done().notify_all();
    cv_work().notify_all();
  }
}

void ensure_workers(Device* dev) {
  // mu() held.
  if (dev->workers_started) return;
  dev->workers_started = true;
  for (int i = 0; i < config().workers; ++i) {
    std::thread t(worker_loop, dev);
    t.detach();  // workers live as long as the process
  }
}

// Resolve a user stream handle; NULL means the current device's default
// stream. mu() must NOT be held.
Stream* resolve_stream(orStream_t handle, const char* call) {
  if (!handle) {
    Device* dev = get_device(current_device_index(), call);
    return dev ? dev->default_stream : nullptr;
  }
  Stream* s = static_cast<Stream*>(handle);
  {
    std::lock_guard<std::mutex> g(mu());
    if (!live_streams().count(s)) {
      fail(orErrorInvalidResourceHandle,
           "%s: %p is not a live stream (destroyed, or never created)", call,
           static_cast<void*>(handle));
      return nullptr;
    }
  }
  if (in_forked_child()) {
    fail(orErrorInitializationError,
         "%s: " OPENREG_FORK_MESSAGE, call);
    return nullptr;
  }
  return s;
}

orError_t take_error(Stream* s, const char* call) {
  // mu() held.
  if (s->error == orSuccess) return orSuccess;
  orError_t e = s->error;
  std::string msg = std::move(s->error_message);
  s->error = orSuccess;
  s->error_message.clear();
  return fail(e, "%s: %s", call, msg.c_str());
}

// Enqueue `it` on `s` (asynchronous). If `inline_ok` and the stream is idle,
// run it right here instead. Returns the error of an inline run (callers of
// async APIs get it at the next synchronisation, as for queued work).
void submit(Stream* s, Item it, bool inline_ok) {
  std::unique_lock<std::mutex> lk(mu());
  it.seq = ++s->enqueued_seq;
  it.order = ++g_order;
  it.correlation = t_correlation;
  if (inline_ok && s->idle()) {
    s->running = true;
    std::string why;
    orError_t err = run_claimed(s, it, lk, &why);
    complete_item(s, it, err, why);
    drain_markers(s);
    cv_done().notify_all();
    cv_work().notify_all();
    return;
  }
  s->queue.push_back(std::move(it));
  ensure_workers(peek_device(s->device));
  cv_work().notify_all();
}

// Wait for the stream's earlier work, then run `it` on this thread.
orError_t run_synchronously(Stream* s, Item it, std::string* why) {
  std::unique_lock<std::mutex> lk(mu());
  cv_done().wait(lk, [&] {
    drain_markers(s);
    return s->idle();
  });
  it.seq = ++s->enqueued_seq;
  it.order = ++g_order;
  it.correlation = t_correlation;
  s->running = true;
  orError_t err = run_claimed(s, it, lk, why);
  s->completed_seq = it.seq;  // errors go straight back to the caller
  drain_markers(s);
  cv_done().notify_all();
  cv_work().notify_all();
  return err;
}

// Classify and validate a copy. Returns the device whose stream orders it.
orError_t check_copy(const char* call, void* dst, const void* src,
                     size_t count, orMemcpyKind* kind, int* device) {
  if (count && (!dst || !src))
    return fail(orErrorInvalidValue, "%s: NULL %s pointer", call,
                dst ? "source" : "destination");
  if (*kind < orMemcpyHostToHost || *kind > orMemcpyDefault)
    return fail(orErrorInvalidMemcpyDirection, "%s: invalid copy kind %d", call,
                int(*kind));
  int dd = device_of_pointer(dst);
  int sd = device_of_pointer(src);
  orMemcpyKind actual = dd >= 0 ? (sd >= 0 ? orMemcpyDeviceToDevice
                                            : orMemcpyHostToDevice)
                                : (sd >= 0 ? orMemcpyDeviceToHost
                                           : orMemcpyHostToHost);
  if (*kind != orMemcpyDefault && *kind != actual) {
    return fail(orErrorInvalidMemcpyDirection,
                "%s: kind is %s but dst %p is %s memory and src %p is %s memory",
                call, kind_name(*kind), dst, dd >= 0 ? "device" : "host", src,
                sd >= 0 ? "device" : "host");
  }
  *kind = actual;
  std::string why;
  if (dd >= 0 && count && !kernel_address(dd, dst, count, &why))
    return fail(orErrorInvalidValue, "%s: destination: %s", call, why.c_str());
  if (sd >= 0 && count && !kernel_address(sd, src, count, &why))
    return fail(orErrorInvalidValue, "%s: source: %s", call, why.c_str());
  *device = sd >= 0 ? sd : (dd >= 0 ? dd : current_device_index());
  return orSuccess;
}

}  // namespace

void init_device_streams(Device& dev) {
  auto* s = new orStream_st();
  s->device = dev.index;
  s->priority = 0;
  s->is_default = true;
  s->id = g_next_stream_id++;
  std::lock_guard<std::mutex> g(mu());
  dev.default_stream = s;
  dev.streams.push_back(s);
  live_streams().insert(s);
}

}  // namespace openreg

using namespace openreg;

extern "C" {

// ------------------------------------------------------------ streams
orError_t orStreamCreate(orStream_t* stream) {
  return orStreamCreateWithPriority(stream, 0, 0);
}

orError_t orStreamCreateWithPriority(orStream_t* stream, unsigned int flags,
                                     int priority) {
  (void)flags;
  if (!stream) return fail(orErrorInvalidValue, "orStreamCreate: stream is NULL");
  Device* dev = get_device(current_device_index(), "orStreamCreate");
  if (!dev) return orPeekAtLastError();
  int least, greatest;
  orDeviceGetStreamPriorityRange(&least, &greatest);
  // Like CUDA, out-of-range priorities are clamped.
  if (priority > least) priority = least;
  if (priority < greatest) priority = greatest;
  auto* s = new orStream_st();
  s->device = dev->index;
  s->priority = priority;
  s->id = g_next_stream_id++;
  std::lock_guard<std::mutex> g(mu());
  dev->streams.push_back(s);
  live_streams().insert(s);
  *stream = s;
  return orSuccess;
}

orError_t orStreamDestroy(orStream_t stream) {
  if (!stream)
    return fail(orErrorInvalidResourceHandle,
                "orStreamDestroy: the default stream cannot be destroyed");
  Stream* s = resolve_stream(stream, "orStreamDestroy");
  if (!s) return orPeekAtLastError();
  if (s->is_default)
    return fail(orErrorInvalidResourceHandle,
                "orStreamDestroy: the default stream cannot be destroyed");
  std::unique_lock<std::mutex> lk(mu());
  // Pending work completes first (CUDA releases the stream afterwards).
  cv_done().wait(lk, [&] { return s->idle(); });
  live_streams().erase(s);
  Device* dev = peek_device(s->device);
  auto& v = dev->streams;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == s) {
      v.erase(v.begin() + long(i));
      break;
    }
  }
  delete static_cast<orStream_st*>(s);
  return orSuccess;
}

orError_t orStreamQuery(orStream_t stream) {
  Stream* s = resolve_stream(stream, "orStreamQuery");
  if (!s) return orPeekAtLastError();
  std::lock_guard<std::mutex> g(mu());
  drain_markers(s);
  return s->idle() ? orSuccess : orErrorNotReady;
}

orError_t orStreamSynchronize(orStream_t stream) {
  Stream* s = resolve_stream(stream, "orStreamSynchronize");
  if (!s) return orPeekAtLastError();
  std::unique_lock<std::mutex> lk(mu());
  cv_done().wait(lk, [&] {
    drain_markers(s);
    return s->idle();
  });
  return take_error(s, "orStreamSynchronize");
}

orError_t orStreamWaitEvent(orStream_t stream, orEvent_t event,
                            unsigned int flags) {
  (void)flags;
  Stream* s = resolve_stream(stream, "orStreamWaitEvent");
  if (!s) return orPeekAtLastError();
  std::unique_lock<std::mutex> lk(mu());
  if (!event || !live_events().count(event))
    return fail(orErrorInvalidResourceHandle,
                "orStreamWaitEvent: %p is not a live event",
                static_cast<void*>(event));
  // A never-recorded or already-completed event imposes no wait.
  if (!event->recorded || event->state->completed) return orSuccess;
  Item it;
  it.type = Item::Wait;
  it.name = "orStreamWaitEvent";
  it.event = event->state;
  it.seq = ++s->enqueued_seq;
  it.order = ++g_order;
  s->queue.push_back(std::move(it));
  ensure_workers(peek_device(s->device));
  return orSuccess;
}

orError_t orStreamGetPriority(orStream_t stream, int* priority) {
  if (!priority) return fail(orErrorInvalidValue, "orStreamGetPriority: priority is NULL");
  Stream* s = resolve_stream(stream, "orStreamGetPriority");
  if (!s) return orPeekAtLastError();
  *priority = s->priority;
  return orSuccess;
}

orError_t orStreamGetDevice(orStream_t stream, int* device) {
  if (!device) return fail(orErrorInvalidValue, "orStreamGetDevice: device is NULL");
  Stream* s = resolve_stream(stream, "orStreamGetDevice");
  if (!s) return orPeekAtLastError();
  *device = s->device;
  return orSuccess;
}

orError_t orStreamGetId(orStream_t stream, unsigned long long* id) {
  if (!id) return fail(orErrorInvalidValue, "orStreamGetId: id is NULL");
  Stream* s = resolve_stream(stream, "orStreamGetId");
  if (!s) return orPeekAtLastError();
  *id = s->id;
  return orSuccess;
}

orError_t orDeviceSynchronize(void) {
  Device* dev = get_device(current_device_index(), "orDeviceSynchronize");
  if (!dev) return orPeekAtLastError();
  std::unique_lock<std::mutex> lk(mu());
  cv_done().wait(lk, [&] {
    for (Stream* s : dev->streams) {
      drain_markers(s);
      if (!s->idle()) return false;
    }
    return true;
  });
  orError_t first = orSuccess;
  for (Stream* s : dev->streams) {
    if (s->error != orSuccess && first == orSuccess) {
      first = take_error(s, "orDeviceSynchronize");
    } else if (s->error != orSuccess) {
      s->error = orSuccess;  // reported once, with the first one
      s->error_message.clear();
    }
  }
  return first;
}

// ------------------------------------------------------------ events
orError_t orEventCreate(orEvent_t* event) {
  return orEventCreateWithFlags(event, orEventDefault);
}

orError_t orEventCreateWithFlags(orEvent_t* event, unsigned int flags) {
  if (!event) return fail(orErrorInvalidValue, "orEventCreate: event is NULL");
  if (flags & ~unsigned(orEventBlockingSync | orEventDisableTiming))
    return fail(orErrorInvalidValue, "orEventCreateWithFlags: unknown flags 0x%x", flags);
  if (in_forked_child())
    return fail(orErrorInitializationError,
                "orEventCreate: " OPENREG_FORK_MESSAGE);
  auto* e = new orEvent_st();
  e->flags = flags;
  e->device = current_device_index();
  e->state = std::make_shared<EventState>();
  std::lock_guard<std::mutex> g(mu());
  live_events().insert(e);
  *event = e;
  return orSuccess;
}

orError_t orEventDestroy(orEvent_t event) {
  std::lock_guard<std::mutex> g(mu());
  if (!event || !live_events().erase(event))
    return fail(orErrorInvalidResourceHandle,
                "orEventDestroy: %p is not a live event", static_cast<void*>(event));
  delete event;  // queued Record/Wait items keep the shared state alive
  return orSuccess;
}

orError_t orEventRecord(orEvent_t event, orStream_t stream) {
  Stream* s = resolve_stream(stream, "orEventRecord");
  if (!s) return orPeekAtLastError();
  std::lock_guard<std::mutex> g(mu());
  if (!event || !live_events().count(event))
    return fail(orErrorInvalidResourceHandle,
                "orEventRecord: %p is not a live event", static_cast<void*>(event));
  // Each record starts a new generation: waits captured earlier keep
  // waiting for the generation they saw, as in CUDA.
  auto st = std::make_shared<EventState>();
  st->device = s->device;
  st->stream = s;
  event->state = st;
  event->recorded = true;
  event->device = s->device;
  drain_markers(s);
  if (s->idle()) {
    st->time_ns = now_ns();
    st->completed = true;
    return orSuccess;
  }
  Item it;
  it.type = Item::Record;
  it.name = "orEventRecord";
  it.event = st;
  it.seq = ++s->enqueued_seq;
  it.order = ++g_order;
  s->queue.push_back(std::move(it));
  ensure_workers(peek_device(s->device));
  return orSuccess;
}

orError_t orEventQuery(orEvent_t event) {
  std::lock_guard<std::mutex> g(mu());
  if (!event || !live_events().count(event))
    return fail(orErrorInvalidResourceHandle,
                "orEventQuery: %p is not a live event", static_cast<void*>(event));
  if (!event->recorded || event->state->completed) return orSuccess;
  return orErrorNotReady;
}

orError_t orEventSynchronize(orEvent_t event) {
  std::unique_lock<std::mutex> lk(mu());
  if (!event || !live_events().count(event))
    return fail(orErrorInvalidResourceHandle,
                "orEventSynchronize: %p is not a live event",
                static_cast<void*>(event));
  if (!event->recorded) return orSuccess;
  std::shared_ptr<EventState> st = event->state;
  cv_done().wait(lk, [&] { return st->completed; });
  // Report an asynchronous failure of the recording stream, if it is still
  // alive and has one pending.
  if (live_streams().count(st->stream))
    return take_error(st->stream, "orEventSynchronize");
  return orSuccess;
}

orError_t orEventElapsedTime(float* ms, orEvent_t start, orEvent_t end) {
  if (!ms) return fail(orErrorInvalidValue, "orEventElapsedTime: ms is NULL");
  std::lock_guard<std::mutex> g(mu());
  for (orEvent_t e : {start, end}) {
    if (!e || !live_events().count(e))
      return fail(orErrorInvalidResourceHandle,
                  "orEventElapsedTime: %p is not a live event", static_cast<void*>(e));
    if (e->flags & orEventDisableTiming)
      return fail(orErrorInvalidResourceHandle,
                  "orEventElapsedTime: event %p was created with "
                  "orEventDisableTiming", static_cast<void*>(e));
    if (!e->recorded)
      return fail(orErrorInvalidResourceHandle,
                  "orEventElapsedTime: event %p has not been recorded",
                  static_cast<void*>(e));
  }
  if (!start->state->completed || !end->state->completed)
    return fail(orErrorNotReady,
                "orEventElapsedTime: the work before one of the events has "
                "not completed yet");
  *ms = float(double(int64_t(end->state->time_ns - start->state->time_ns)) / 1e6);
  return orSuccess;
}

// ------------------------------------------------------------ work
orError_t orLaunchHostFunc(orStream_t stream, orHostFn_t fn, void* userData) {
  if (!fn) return fail(orErrorInvalidValue, "orLaunchHostFunc: fn is NULL");
  Stream* s = resolve_stream(stream, "orLaunchHostFunc");
  if (!s) return orPeekAtLastError();
  Item it;
  it.type = Item::HostFunc;
  it.name = "orLaunchHostFunc";
  it.hfn = fn;
  it.args = userData;
  submit(s, std::move(it), /*inline_ok=*/false);
  return orSuccess;
}

orError_t orLaunchKernel(orStream_t stream, orKernelFn_t fn, void* args,
                         const char* name, unsigned int flags) {
  if (!fn) return fail(orErrorInvalidValue, "orLaunchKernel: fn is NULL");
  if (flags & ~unsigned(orLaunchSynchronous))
    return fail(orErrorInvalidValue, "orLaunchKernel: unknown flags 0x%x", flags);
  Stream* s = resolve_stream(stream, "orLaunchKernel");
  if (!s) return orPeekAtLastError();
  Item it;
  it.type = Item::Kernel;
  it.name = name ? name : "kernel";
  it.kfn = fn;
  it.args = args;
  if (flags & orLaunchSynchronous) {
    std::string why;
    orError_t e = run_synchronously(s, std::move(it), &why);
    if (e != orSuccess)
      return fail(e, "orLaunchKernel: %s", why.c_str());
    return orSuccess;
  }
  submit(s, std::move(it), /*inline_ok=*/true);
  return orSuccess;
}

// ------------------------------------------------------------ copies
orError_t orMemcpy(void* dst, const void* src, size_t count, orMemcpyKind kind) {
  int device = 0;
  if (orError_t e = check_copy("orMemcpy", dst, src, count, &kind, &device))
    return e;
  if (kind == orMemcpyHostToHost) {
    if (count) memmove(dst, src, count);
    return orSuccess;
  }
  // Synchronous copies are ordered on the device's default stream.
  Device* dev = get_device(device, "orMemcpy");
  if (!dev) return orPeekAtLastError();
  Item it;
  it.type = Item::Memcpy;
  it.name = "orMemcpy";
  it.dst = dst;
  it.src = src;
  it.count = count;
  it.kind = kind;
  std::string why;
  orError_t e = run_synchronously(dev->default_stream, std::move(it), &why);
  if (e != orSuccess) return fail(e, "orMemcpy: %s", why.c_str());
  return orSuccess;
}

orError_t orMemcpyAsync(void* dst, const void* src, size_t count,
                        orMemcpyKind kind, orStream_t stream) {
  int device = 0;
  if (orError_t e = check_copy("orMemcpyAsync", dst, src, count, &kind, &device))
    return e;
  Stream* s = resolve_stream(stream, "orMemcpyAsync");
  if (!s) return orPeekAtLastError();
  Item it;
  it.type = Item::Memcpy;
  it.name = "orMemcpyAsync";
  it.dst = dst;
  it.src = src;
  it.count = count;
  it.kind = kind;
  const void* host = kind == orMemcpyHostToDevice ? src
                     : kind == orMemcpyDeviceToHost ? static_cast<const void*>(dst)
                                                    : nullptr;
  if (kind == orMemcpyHostToHost ||
      (host && !is_pinned_range(host, count))) {
    // Pageable host memory: like CUDA, the copy is staged synchronously, so
    // the host buffer may be reused as soon as the call returns.
    std::string why;
    orError_t e = run_synchronously(s, std::move(it), &why);
    if (e != orSuccess) return fail(e, "orMemcpyAsync: %s", why.c_str());
    return orSuccess;
  }
  // Pinned host memory: truly asynchronous, executed by a device worker.
  // Device-to-device: may run inline when the stream is idle.
  submit(s, std::move(it), /*inline_ok=*/kind == orMemcpyDeviceToDevice);
  return orSuccess;
}

orError_t orMemset(void* devPtr, int value, size_t count) {
  int d = device_of_pointer(devPtr);
  if (d < 0) return fail(orErrorInvalidValue, "orMemset: %p is not a device pointer", devPtr);
  std::string why;
  if (count && !kernel_address(d, devPtr, count, &why))
    return fail(orErrorInvalidValue, "orMemset: %s", why.c_str());
  Device* dev = get_device(d, "orMemset");
  if (!dev) return orPeekAtLastError();
  Item it;
  it.type = Item::Memset;
  it.name = "orMemset";
  it.dst = devPtr;
  it.value = value;
  it.count = count;
  orError_t e = run_synchronously(dev->default_stream, std::move(it), &why);
  if (e != orSuccess) return fail(e, "orMemset: %s", why.c_str());
  return orSuccess;
}

orError_t orMemsetAsync(void* devPtr, int value, size_t count, orStream_t stream) {
  int d = device_of_pointer(devPtr);
  if (d < 0)
    return fail(orErrorInvalidValue, "orMemsetAsync: %p is not a device pointer", devPtr);
  std::string why;
  if (count && !kernel_address(d, devPtr, count, &why))
    return fail(orErrorInvalidValue, "orMemsetAsync: %s", why.c_str());
  Stream* s = resolve_stream(stream, "orMemsetAsync");
  if (!s) return orPeekAtLastError();
  Item it;
  it.type = Item::Memset;
  it.name = "orMemsetAsync";
  it.dst = devPtr;
  it.value = value;
  it.count = count;
  submit(s, std::move(it), /*inline_ok=*/true);
  return orSuccess;
}

// ------------------------------------------------------------ tracing
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
