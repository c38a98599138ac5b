// The simulated device's scheduler: per-device worker threads that run the
// items queued on streams.
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
// is marked running while it executes, exactly as if a worker had it. A
// synchronous kernel launch claims an idle stream without the scheduler lock
// at all (try_claim_idle), when the thread has used that stream before. A
// kernel launched with orLaunchMayDefer may give up in that inline run; it
// then goes back to the head of its stream for a worker, as if a worker had
// been running it all along.
//
// Vendor: this file is what your hardware queues and firmware do. The torch
// glue only relies on the semantics in openreg.h.
#include "scheduler.h"
#include "memcheck.h"

#include <cstdio>
#include <cstring>

#include <pthread.h>

namespace openreg {

std::mutex& sched_mu() {
  static auto* m = new std::mutex();  // leaked: workers outlive static dtors
  return *m;
}
std::condition_variable& cv_done() {
  static auto* c = new std::condition_variable();
  return *c;
}

namespace {

std::unordered_set<Stream*>& live_streams() {
  static auto* s = new std::unordered_set<Stream*>();
  return *s;
}

std::atomic<unsigned long long> g_next_stream_id{1};
// Bumped (under sched_mu()) whenever a stream starts being destroyed: a
// thread's last validated handle stays valid while the count is unchanged
// (is_live_stream's hash lookup missed the cache on every launch). Read
// without the lock by the lock-free claim.
std::atomic<uint64_t> g_stream_destructions{0};
// This thread's last validated stream and the count it was validated at:
// one thread-local, so the hot path looks up one address (each thread-local
// read in a shared library is a call into the dynamic linker).
struct LiveStream {
  Stream* stream = nullptr;
  uint64_t epoch = 0;
};
thread_local LiveStream t_live;
std::atomic<uint64_t> g_order{0};

// Completed markers can make items runnable on any device (cross-device
// event waits): wake every device's workers, and the host waiters.
void wake_all() {
  cv_done().notify_all();
  for (int i = 0; i < kMaxDevices; ++i) {
    if (Device* d = peek_device(i)) d->work_cv.notify_all();
  }
}

// Give a new item its place in the global FIFO and the launching thread's
// correlation id. sched_mu() held.
void stamp(Item& it) {
  it.order = g_order.fetch_add(1, std::memory_order_relaxed) + 1;
  stamp_launch(it);
}

// Keep the lock-free copy of the queue's length in step (sched_mu() held).
void queue_changed(Stream* s) { s->queued.store(s->queue.size()); }

// ------------------------------------------------------------ execution
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

}  // namespace

namespace {
// The reason a running kernel gave for its failure (orKernelSetErrorMessage).
// Per kernel: a kernel may launch another inline.
struct KernelMessage {
  std::string text;
};
thread_local KernelMessage* t_kernel_message = nullptr;
}  // namespace

orError_t call_kernel(orKernelFn_t fn, void* args, const char* name, std::string* why) {
  KernelMessage mine;
  KernelMessage** slot = &t_kernel_message;
  // (Opaque to the compiler, which would otherwise recompute the
  // thread-local's address after the call, a second call into the dynamic
  // linker, instead of keeping it.)
  asm("" : "+r"(slot));
  KernelMessage* const outer = *slot;
  *slot = &mine;
  const orError_t e = fn(args);
  *slot = outer;
  if (e != orSuccess) {
    *why = format("kernel '%s' failed: %s", name,
                  mine.text.empty() ? orGetErrorString(e) : mine.text.c_str());
  }
  return e;
}

orError_t call_kernel_fn(const Item& it, std::string* why) {
  return call_kernel(it.kfn, it.args, it.name, why);
}

orError_t execute(const Item& it, int device, unsigned long long stream, std::string* why) {
  switch (it.type) {
    case Item::Kernel: {
      if (__builtin_expect(memcheck::on(), 0)) return memcheck::run_kernel(it, device, stream, why);
      return call_kernel_fn(it, why);
    }
    case Item::HostFunc:
      it.hfn(it.args);
      return orSuccess;
    case Item::Memcpy: {
      void* d;
      const void* s;
      orError_t e = resolve_copy(it, &d, &s, why);
      if (e != orSuccess) return e;
      if (__builtin_expect(memcheck::on(), 0) && (e = memcheck::check_copy(it, why))) return e;
      if (it.count) memmove(d, s, it.count);
      return orSuccess;
    }
    case Item::Memset: {
      int dev = device_of_pointer(it.dst);
      void* d = kernel_address(dev, it.dst, it.count, why);
      if (!d) return orErrorIllegalAddress;
      if (__builtin_expect(memcheck::on(), 0)) memcheck::check_copy(it, why);
      memset(d, it.value, it.count);
      return orSuccess;
    }
    case Item::Graph:
      return run_graph(it, why);
    default:
      return orSuccess;
  }
}

namespace {

// Keep the first asynchronous error of a stream until it is reported.
// sched_mu() held.
void record_error(Stream* s, const Item& it, orError_t err, const std::string& why) {
  if (err == orSuccess || s->error != orSuccess) return;
  s->error = err;
  s->error_message = format("%s (stream %llu, device openreg:%d) failed "
                            "asynchronously: %s", it.name, s->id, s->device,
                            why.c_str());
}

// Run an item the caller has claimed (stream marked running, sched_mu() held
// by `lk`): release the lock while it executes (traced), then take it back,
// mark the stream free, complete the markers behind it and wake waiters.
orError_t run_claimed(Stream* s, const Item& it,
                      std::unique_lock<std::mutex>& lk, std::string* why) {
  lk.unlock();
  const bool tracing = tracing_enabled();
  uint64_t t0 = tracing ? (it.attempt_ns ? it.attempt_ns : now_ns()) : 0;
  orError_t err = execute(it, s->device, s->id, why);
  // A deferred attempt is traced with the worker's call that finishes it.
  if (tracing && !(it.may_defer && err == orErrorNotReady))
    trace_item(it, s->device, s->id, t0, now_ns());
  lk.lock();
  s->running.store(false);
  return err;
}

// Wake host threads waiting for completions, and one of the device's
// workers only when this stream still has queued work: after a synchronous
// or inline run on an idle stream there is usually none, and waking every
// sleeping worker per kernel (to rescan and sleep again) cost more than the
// kernel launch. Markers that complete wake everyone (drain_markers).
void finish_claimed(Stream* s) {
  drain_markers(s);
  cv_done().notify_all();
  if (!s->queue.empty()) peek_device(s->device)->work_cv.notify_one();
}

void worker_loop(Device* dev) {
  // "openreg_w<device>": named as a device's thread, for debuggers and for
  // the glue (which runs this thread's kernels with one OpenMP thread).
  char name[16];
  std::snprintf(name, sizeof(name), "openreg_w%d", dev->index);
  pthread_setname_np(pthread_self(), name);
  std::unique_lock<std::mutex> lk(sched_mu());
  for (;;) {
    // [docs:scheduler-pick]
    Stream* best = nullptr;
    bool progressed = false;
    for (Stream* s : dev->streams) {
      if (drain_markers(s)) progressed = true;
      if (s->running.load() || s->queue.empty()) continue;
      const Item& head = s->queue.front();
      if (head.type == Item::Wait || head.type == Item::Record) continue;
      if (!best || s->priority < best->priority ||
          (s->priority == best->priority &&
           head.order < best->queue.front().order)) {
        best = s;
      }
    }
    if (!best) {
      // Completing a marker may have made an earlier-scanned stream ready:
      // scan again before sleeping.
      if (progressed) continue;
      dev->work_cv.wait(lk);
      continue;
    }
    // [docs:scheduler-pick:end]
    // A lock-free claim (a synchronous launch) may have taken the stream
    // since the scan; it will see the queued item when it releases the
    // stream, and wake a worker.
    if (!best->try_claim()) continue;
    Item it = std::move(best->queue.front());
    best->queue.pop_front();
    queue_changed(best);
    std::string why;
    orError_t err = run_claimed(best, it, lk, &why);
    record_error(best, it, err, why);
    finish_claimed(best);
  }
}

void ensure_workers(Device* dev) {
  // sched_mu() held.
  if (dev->workers_started) return;
  dev->workers_started = true;
  for (int i = 0; i < config().workers; ++i) {
    std::thread t(worker_loop, dev);
    t.detach();  // workers live as long as the process
  }
}

}  // namespace

// ------------------------------------------------------------ streams
void init_device_streams(Device& dev) {
  auto* s = new orStream_st();
  s->device = dev.index;
  s->priority = 0;
  s->is_default = true;
  dev.default_stream = s;
  register_stream(dev, s);
}

void register_stream(Device& dev, Stream* s) {
  s->id = g_next_stream_id++;
  std::lock_guard<std::mutex> g(sched_mu());
  dev.streams.push_back(s);
  live_streams().insert(s);
}

void unregister_stream(Stream* s) {
  std::unique_lock<std::mutex> lk(sched_mu());
  // Invalidate every thread's cached handle first, so no lock-free claim
  // starts on this stream from now on.
  g_stream_destructions.fetch_add(1);
  // Pending work completes first (CUDA releases the stream afterwards).
  wait_idle_locked(lk, s);
  live_streams().erase(s);
  auto& v = peek_device(s->device)->streams;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == s) {
      v.erase(v.begin() + long(i));
      break;
    }
  }
}

bool is_live_stream(Stream* s) {
  const uint64_t epoch = g_stream_destructions.load();
  LiveStream& live = t_live;
  if (s == live.stream && live.epoch == epoch) return true;
  if (live_streams().count(s) == 0) return false;
  live.stream = s;
  live.epoch = epoch;
  return true;
}

namespace {
// resolve_stream's work: sched_mu() must be held when `handle` is not NULL
// (the live-handle check) and must not be when it is (get_device may
// initialise the device, which registers its default stream).
Stream* resolve_stream_locked(orStream_t handle, const char* call) {
  if (!handle) {
    Device* dev = get_device(current_device_index(), call);
    return dev ? dev->default_stream : nullptr;
  }
  Stream* s = static_cast<Stream*>(handle);
  if (!is_live_stream(s)) {
    fail(orErrorInvalidResourceHandle,
         "%s: %p is not a live stream (destroyed, or never created)", call,
         static_cast<void*>(handle));
    return nullptr;
  }
  if (in_forked_child()) {
    fail(orErrorInitializationError, "%s: " OPENREG_FORK_MESSAGE, call);
    return nullptr;
  }
  return s;
}
}  // namespace

Stream* resolve_stream(orStream_t handle, const char* call) {
  if (!handle) return resolve_stream_locked(handle, call);
  std::lock_guard<std::mutex> g(sched_mu());
  return resolve_stream_locked(handle, call);
}

orError_t take_error(Stream* s, const char* call) {
  if (s->error == orSuccess) return orSuccess;
  orError_t e = s->error;
  std::string msg = std::move(s->error_message);
  s->error = orSuccess;
  s->error_message.clear();
  return fail(e, "%s: %s", call, msg.c_str());
}

// ------------------------------------------------------------ queueing
bool drain_markers(Stream* s) {
  bool changed = false;
  while (!s->running.load() && !s->queue.empty()) {
    Item& head = s->queue.front();
    if (head.type == Item::Record) {
      head.event->time_ns = now_ns();
      head.event->completed = true;
    } else if (head.type != Item::Wait || !head.event->completed) {
      break;
    }
    s->queue.pop_front();
    queue_changed(s);
    changed = true;
  }
  // A completed marker can unblock waiters anywhere: other streams' Wait
  // items (on any device) and host threads in synchronize calls. Callers on
  // host threads (query, synchronize, record) get here too, so the wake-up
  // must not depend on a worker noticing.
  if (changed) wake_all();
  return changed;
}

std::atomic<int> g_host_waiters{0};

void wait_idle_locked(std::unique_lock<std::mutex>& lk, Stream* s) {
  wait_done(lk, [&] {
    drain_markers(s);
    return s->idle();
  });
}

namespace {
// Give back a stream claimed without the lock.
void release_claim(Stream* s) {
  s->running.store(false);
  if (s->queued.load() != 0 || g_host_waiters.load() != 0) {
    std::lock_guard<std::mutex> g(sched_mu());
    finish_claimed(s);
  }
}

// Wait until `s` is idle and claim it (sched_mu() held by `lk`). The claim is
// a compare-and-swap: a lock-free claim may take the stream in between.
void claim_locked(std::unique_lock<std::mutex>& lk, Stream* s) {
  do {
    wait_idle_locked(lk, s);
  } while (!s->try_claim());
}

// One worker per new item: every worker of a device can run any of its
// streams, and a worker rescans before it sleeps, so none is left behind.
void wake_a_worker(Stream* s) {
  Device* dev = peek_device(s->device);
  ensure_workers(dev);
  dev->work_cv.notify_one();
}
}  // namespace

void enqueue_locked(Stream* s, Item it) {
  stamp(it);
  s->queue.push_back(std::move(it));
  queue_changed(s);
  wake_a_worker(s);
}

void submit(Stream* s, Item it, bool inline_ok) {
  std::unique_lock<std::mutex> lk(sched_mu());
  if (!(inline_ok && s->queue.empty() && s->try_claim())) {
    it.may_defer = false;  // only an inline run may give up
    enqueue_locked(s, std::move(it));
    return;
  }
  stamp(it);
  if (it.may_defer && tracing_enabled()) it.attempt_ns = now_ns();
  std::string why;
  orError_t err = run_claimed(s, it, lk, &why);
  if (it.may_defer && err == orErrorNotReady) {
    // orLaunchMayDefer: the attempt gave up. The same launch goes back to
    // the head of its stream (items queued meanwhile stay behind it, and the
    // stream is not idle in between) for a worker, whose call must finish.
    it.may_defer = false;
    s->queue.push_front(std::move(it));
    queue_changed(s);
    wake_a_worker(s);
    return;
  }
  record_error(s, it, err, why);
  finish_claimed(s);
}

orError_t run_synchronously(Stream* s, Item it, std::string* why) {
  std::unique_lock<std::mutex> lk(sched_mu());
  claim_locked(lk, s);
  stamp(it);
  orError_t err = run_claimed(s, it, lk, why);  // errors go straight back
  finish_claimed(s);
  return err;
}

namespace {
// The lock-free claim of an idle stream, for synchronous launches. It needs
// the thread's last validated handle (is_live_stream's cache) to be `s` and
// still valid: a destroyed stream bumps g_stream_destructions before it
// waits for its work. Every step is sequentially consistent, against
// enqueue_locked (queued), workers (their compare-and-swap on running) and
// host waiters (g_host_waiters):
// * a claimant that finds work queued after its swap gives the stream back;
// * a releaser that finds work queued or a host waiting finishes under the
//   lock, as a worker would (markers, wake-ups);
// * a host waiter registers before it checks the stream, so either it sees
//   the stream released or the releaser sees it waiting.
bool try_claim_idle(Stream* s) {
  const LiveStream& live = t_live;
  const uint64_t epoch = live.epoch;
  if (s != live.stream || epoch != g_stream_destructions.load() || in_forked_child())
    return false;
  if (s->queued.load() != 0 || !s->try_claim()) return false;
  if (s->queued.load() == 0 && epoch == g_stream_destructions.load()) return true;
  release_claim(s);
  return false;
}
}  // namespace

// [docs:sync-launch]
// The hot path of every eager operator. A stream this thread has launched on
// before, and that is idle, is claimed and released with one
// compare-and-swap and one store, without the scheduler lock. Otherwise: one
// critical section to check the handle, wait for the stream's earlier work
// and claim it, one to release it. The kernel always runs unlocked, on this
// thread.
orError_t launch_synchronously(orStream_t handle, Item& it, const char* call,
                               bool* launched, std::string* why) {
  Stream* s = static_cast<Stream*>(handle);
  if (s && !tracing_enabled() && try_claim_idle(s)) {
    *launched = true;
    stamp_launch(it);
    orError_t err = execute(it, s->device, s->id, why);
    release_claim(s);
    return err;
  }
  *launched = false;
  // The NULL handle resolves without the lock (the first use of a device
  // initialises it, which registers its default stream under the lock).
  if (!handle) s = resolve_stream_locked(nullptr, call);
  if (!handle && !s) return orPeekAtLastError();
  std::unique_lock<std::mutex> lk(sched_mu());
  if (handle) s = resolve_stream_locked(handle, call);
  if (!s) return orPeekAtLastError();
  *launched = true;
  claim_locked(lk, s);
  stamp(it);
  orError_t err = run_claimed(s, it, lk, why);
  finish_claimed(s);
  return err;
}
// [docs:sync-launch:end]

bool launch_inline(orStream_t handle, orKernelFn_t fn, void* args, const char* name,
                   orError_t* err, std::string* why) {
  Stream* s = static_cast<Stream*>(handle);
  if (!s || tracing_enabled() || memcheck::on() || !try_claim_idle(s)) return false;
  forget_launch_annotation();
  *err = call_kernel(fn, args, name, why);
  release_claim(s);
  return true;
}

}  // namespace openreg

extern "C" {

orError_t orKernelSetErrorMessage(const char* message) {
  if (!message) return openreg::fail(orErrorInvalidValue, "orKernelSetErrorMessage: message is NULL");
  if (openreg::t_kernel_message) openreg::t_kernel_message->text = message;
  return orSuccess;
}

}  // extern "C"
