// AddressSanitizer builds (make check-asan-glue): the caching allocator
// poisons what is free in its cache, in the kernel view, so that an access
// to a free block (a kernel's overrun into its neighbour inside a segment, a
// copy reading past its tensor) by instrumented code is an ASan report
// (`use-after-poison`). Other builds compile these to nothing.
//
// Stream order decides when, with one rule each way:
//  - a block is unpoisoned at once when it is allocated (an allocation made
//    inside a running kernel, on that kernel's stream, is used by that
//    kernel: it cannot wait for the stream);
//  - a freed block is poisoned when its stream reaches the free (at once if
//    the stream is idle, else by a host function queued on it), since work
//    queued before the free may still use it. When that poison lands it
//    skips the ranges that are live by then (the block reused, or merged
//    and split, before its stream got there) and the memory that is no
//    longer the cache's (a segment given back to the runtime).
// Graph pools and memcheck mode are left alone (the caller checks).
//
// Only openreg.h here: this file is cheap to compile and to copy.
#pragma once

#include <openreg.h>

#include <cstddef>

namespace torch_openreg::alloc::asan {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kOn = true;
// A new segment [kv, kv+n) of the kernel view: the cache's, poisoned whole.
void segment_added(char* kv, size_t n);
// A segment given back to the runtime: no longer the cache's, unpoisoned.
void segment_removed(char* kv, size_t n);
// An allocation of `requested` bytes at kv: live, unpoisoned at once.
void allocated(char* kv, size_t requested);
// A free of the block [kv, kv+n) whose last user is `stream`: poisoned once
// the stream reaches this point (never while the stream captures a graph).
void freed(orStream_t stream, char* kv, size_t n);
#else
constexpr bool kOn = false;
inline void segment_added(char*, size_t) {}
inline void segment_removed(char*, size_t) {}
inline void allocated(char*, size_t) {}
inline void freed(orStream_t, char*, size_t) {}
#endif

}  // namespace torch_openreg::alloc::asan
