// The stream-race sanitizer's hooks into the runtime (see openreg.h,
// orSanitizerSetEnabled, and docs/sanitizer.md). Each hook is guarded by
// san::on() at its call site, so a disabled sanitizer costs one relaxed
// atomic load per runtime call that could matter to it.
//
// Model: every stream and the host have a vector clock. Work enqueued on a
// stream first joins the host's clock (it was launched after everything the
// host knows to be complete), then ticks the stream's own component; that
// tick is the work's epoch. An event record captures the recording stream's
// clock, a wait joins it into the waiting stream's; synchronising a stream,
// an event or the device joins their clocks into the host's, and so do
// blocking copies. A shadow map of the device (and pinned) address space
// keeps, per byte range, the last write and the last read per stream. An
// access conflicts with an earlier one on another stream unless the current
// clock has reached the earlier epoch.
//
// Lock order: sched_mu() may be held when a hook is called; the sanitizer's
// own mutex is innermost and never held while calling back into the
// scheduler.
#pragma once

#include "internal.h"

namespace openreg {
namespace san {

extern std::atomic<bool> g_on;
inline bool on() { return g_on.load(std::memory_order_relaxed); }

// Kernels. kernel_begin consumes the accesses declared on this thread,
// checks them against stream `s` and records them; on a race it returns
// orErrorStreamRace (the thread's error set) and the kernel must not run.
// While `in_kernel` is true (synchronous launches), declarations made by the
// kernel body are the kernel's; kernel_end closes that scope.
orError_t kernel_begin(Stream* s, const char* name, bool in_kernel);
void kernel_end();

// Other work enqueued on `s` (host functions, sleeps): joins the host's
// clock and ticks, no memory access.
void launch(Stream* s);

// Copies and memsets: check and record their ranges (only device and pinned
// memory are tracked). `host_sync` says how a blocking copy orders the host:
// 0 not at all, 1 after the stream's earlier work (a pageable H2D copy), 2
// after the copy itself.
orError_t copy(Stream* s, void* dst, const void* src, size_t count,
               orMemcpyKind kind, const char* call);
orError_t memset(Stream* s, void* dst, size_t count, const char* call);
void host_after(Stream* s, int host_sync, uint64_t epoch_before);
// The stream's own clock component now (to order the host "before" a copy).
uint64_t epoch_of(Stream* s);

// Events and synchronisation. sched_mu() held for the first two.
void event_record(EventState* st, Stream* s);
void stream_wait(Stream* s, const EventState* st);
void host_join_stream(Stream* s);
void host_join_event(const EventState* st);
void host_join_device(int device);

// orStreamSetName (Stream::name is guarded by the sanitizer's mutex).
void set_name(Stream* s, const char* name);

// Memory handed back to the runtime (orFree) or unmapped (orFreeHost).
void freed(const void* p, size_t n);
void forget(const void* p, size_t n);

}  // namespace san
}  // namespace openreg
