// Memcheck: the runtime's equivalent of `compute-sanitizer --tool memcheck`
// (OPENREG_MEMCHECK=1; docs/memcheck.md).
//
// Model: every allocation gets whole pages of the kernel view to itself and
// one guard page after its end (OPENREG_MEMCHECK_GUARD=start: before its
// start); the allocation is placed so that its last byte is the last byte
// before the guard page (or its first byte the first after it). Everything
// of the kernel view that is not a live allocation's pages is PROT_NONE, so a
// kernel that reads or writes past its buffer, or into memory freed a moment
// ago, faults at once. Freed allocations wait in a quarantine (bounded in
// bytes, OPENREG_MEMCHECK_QUARANTINE) before their pages can be handed out
// again, so that a later use is still a fault.
//
// A kernel runs watched (run_kernel). The fault handler records the first
// invalid access, opens the faulting page and lets the kernel run to its end
// (a jump back out of it would skip the frames of a kernel written in Python,
// which holds the GIL). Then the pages are closed again, the report is built
// outside the signal handler, with the allocation maps' locks, and the
// process stops (abort, like compute-sanitizer), or with
// OPENREG_MEMCHECK_ON_ERROR=raise the kernel fails with orErrorIllegalAddress
// and the report as its message.
#pragma once

#include "internal.h"

namespace openreg {
namespace memcheck {

extern std::atomic<bool> g_on;  // set once, from the configuration
inline bool on() { return g_on.load(std::memory_order_relaxed); }
void configure(const Config& c);

// The arena in memcheck layout: the whole kernel view PROT_NONE.
bool init_arena(Arena& a);

// orMalloc / orFree in memcheck mode (a.mu held by the caller). malloc
// returns the allocation's offset, or SIZE_MAX when the arena is full.
size_t malloc(Arena& a, size_t size);
void free(Arena& a, size_t off);

// Why `n` bytes at device address `p` (arena offset `off`) are not a valid
// range, naming the nearest allocation and whether it was freed (a.mu held).
std::string describe(const Arena& a, int device, size_t off, size_t n);

// Run a kernel item watched (execute's Kernel case).
orError_t run_kernel(const Item& it, int device, unsigned long long stream, std::string* why);

// Initcheck (OPENREG_MEMCHECK=initcheck) of a copy or memset item before it
// runs: reads of never-written device pages are reported (abort, or
// orErrorIllegalAddress with *why), written pages become initialised.
orError_t check_copy(const Item& it, std::string* why);
// orIpcGetMemHandle: a peer may write the allocation through its own mapping,
// which initcheck cannot see: the allocation counts as written (a.mu held).
void exported(Arena& a, size_t off);

// From the signal handler: a fault at `addr`, which is in `device`'s kernel
// view. While a kernel runs (on this thread, or on any for a thread of
// ATen's intra-op pool), records the access, opens the page and returns true:
// the access is retried. Otherwise returns false.
bool on_fault(uintptr_t addr, int device, size_t offset, int write);

// From the signal handler: the kernel that was running when a fault hit an
// address outside every device's memory (a view of a storage resized to 0,
// a pointer of nobody's), for the report before the process stops: its
// name, device and stream, or null when no kernel runs on this thread. A
// thread of ATen's intra-op pool while a kernel runs gets "" (which kernel
// is not known there).
const char* faulting_kernel(int* device, unsigned long long* stream);

}  // namespace memcheck
}  // namespace openreg
