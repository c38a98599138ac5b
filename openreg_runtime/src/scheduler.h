// The scheduler's private interface, shared by the files that enqueue work
// (streams, events, copies, launches) and the one that runs it
// (scheduler.cpp). Nothing here is visible to the torch glue.
#pragma once

#include "internal.h"

namespace openreg {

// One lock for the scheduler state of all devices: cross-device waits make
// finer locking error-prone, and every critical section is tiny.
std::mutex& sched_mu();
// Signalled whenever work completes; host threads that synchronise wait on it.
std::condition_variable& cv_done();

// ---- called WITHOUT sched_mu() held
// Resolve a user stream handle; NULL means the current device's default
// stream. Returns nullptr with the thread's error set.
Stream* resolve_stream(orStream_t handle, const char* call);
// Make `s` known to the scheduler (live handle, scanned by its device's
// workers), or forget it once its queued work is done.
void register_stream(Device& dev, Stream* s);
void unregister_stream(Stream* s);
// Enqueue `it` on `s` (asynchronous). If `inline_ok` and the stream is idle,
// run it on this thread instead; its error is then reported at the next
// synchronisation, exactly as for queued work.
void submit(Stream* s, Item it, bool inline_ok);
// Wait for the stream's earlier work, then run `it` on this thread and
// return its error (nothing is deferred).
orError_t run_synchronously(Stream* s, Item it, std::string* why);
// resolve_stream + run_synchronously under one lock (the synchronous kernel
// launch). `*launched` is false if the handle was bad (the thread's error is
// set and returned).
orError_t launch_synchronously(orStream_t handle, Item& it, const char* call,
                               bool* launched, std::string* why);

// Host threads blocked in wait_done. A stream claimed without the lock is
// released without it too, unless someone waits (scheduler.cpp).
extern std::atomic<int> g_host_waiters;

// ---- called WITH sched_mu() held
// Wait on cv_done() until pred() holds. Every host-side wait goes through
// here: it registers the waiter before the first check of pred, so a
// lock-free release either is seen by that check or sees the waiter.
template <class Pred>
void wait_done(std::unique_lock<std::mutex>& lk, Pred pred) {
  g_host_waiters.fetch_add(1);
  cv_done().wait(lk, pred);
  g_host_waiters.fetch_sub(1);
}
// Append a marker or work item to the queue and wake a worker.
void enqueue_locked(Stream* s, Item it);
// Pop Record/Wait items at the head of `s` that can complete now; true if
// anything changed (and waiters were woken).
bool drain_markers(Stream* s);
// Wait (releasing the lock) until `s` has no queued or running work.
void wait_idle_locked(std::unique_lock<std::mutex>& lk, Stream* s);
// Report and clear the stream's pending asynchronous error, if any.
orError_t take_error(Stream* s, const char* call);
bool is_live_stream(Stream* s);
// Fails with orErrorInvalidResourceHandle naming `call` unless `e` is live.
orError_t check_live_event(orEvent_t e, const char* call);  // event.cpp

// Run one item's body (no scheduler lock held) for stream `stream` of
// `device` (named in memcheck reports). Returns its error.
orError_t execute(const Item& it, int device, unsigned long long stream, std::string* why);
// Calls a kernel item's function. On failure *why is "kernel '<name>' failed:
// <reason>", the reason being what the kernel gave orKernelSetErrorMessage,
// else the error code's string.
orError_t call_kernel_fn(const Item& it, std::string* why);
// The same for a kernel given by its parts (no Item).
orError_t call_kernel(orKernelFn_t fn, void* args, const char* name, std::string* why);
// A synchronous kernel launch without an Item, when it can take the hot
// path: `handle` is the stream this thread last launched on and is idle,
// and nothing traces, captures, sanitizes or memchecks. False if it could
// not (nothing ran); else the kernel ran and *err is its error (*why says
// why, as call_kernel_fn).
bool launch_inline(orStream_t handle, orKernelFn_t fn, void* args, const char* name,
                   orError_t* err, std::string* why);

// ---- stream capture and graphs (graph.cpp)
namespace capture {
// True while any capture is active: the one check the launch paths make
// when nothing captures (a relaxed load).
bool any();
// Called WITHOUT sched_mu() held, by every path that enqueues work: true if
// `s` is capturing, then `it` was recorded into its capture or could not be
// (*err: the capture is invalidated, or `it` cannot be recorded).
bool recorded(Stream* s, Item& it, const char* call, orError_t* err);
// `call` is a potentially unsafe call (device synchronisation, a blocking
// copy): illegal during a global capture, or a thread-local one of this
// thread. The first takes sched_mu(), the second needs it held.
orError_t check_unsafe(const char* call);
orError_t check_unsafe_locked(const char* call);
// The rest is called WITH sched_mu() held.
// `call` waits for or observes stream `s`'s work: illegal if it captures.
orError_t check_stream_locked(Stream* s, const char* call);
// orEventRecord on `s`: true if `s` captures (the event now names capture nodes).
bool event_record_locked(orEvent_t e, Stream* s);
// orStreamWaitEvent: joins, merges or refuses captures; *handled if done.
orError_t stream_wait_locked(Stream* s, orEvent_t e, bool* handled);
// Query, synchronisation or timing of an event recorded in a capture.
orError_t check_event_locked(orEvent_t e, const char* call);
// A stream being destroyed leaves (and invalidates) its capture.
void stream_destroyed_locked(Stream* s);
}  // namespace capture
// Runs an executable graph's nodes in order (execute's Graph case).
orError_t run_graph(const Item& it, std::string* why);

// ---- tracing (trace.cpp)
bool tracing_enabled();
// Stamp `it` with the launching thread's correlation id and, while
// tracing, its launch time and thread.
void stamp_launch(Item& it);
// What stamp_launch does for a launch that makes no Item: forgets the
// thread's launch annotation, if it has one.
void forget_launch_annotation();
void trace_item(const Item& it, int device, unsigned long long stream_id,
                uint64_t t0, uint64_t t1);

}  // namespace openreg
