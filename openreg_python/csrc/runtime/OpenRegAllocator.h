// The caching device allocator (a c10::DeviceAllocator, so that
// torch.accelerator.memory_* and torch.openreg.memory_* work). Light header.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/ArrayRef.h>

#include <memory>
#include <vector>

namespace at {
class TensorBase;
}

namespace torch_openreg {

c10::DeviceAllocator* getDeviceAllocator();

// [docs:empty-strided-on]
// An uninitialised openreg tensor on device `index`: the one maker of the
// empty_strided kernel (kernels/Minimal.cpp) and of torch_openreg._C.
// _empty_strided, the allocation of Inductor's compiled graphs (Module.cpp).
// The allocator allocates on the current device: the current device is
// exchanged only when it is another one.
at::TensorBase empty_strided_on(c10::DeviceIndex index, c10::IntArrayRef sizes,
                                c10::IntArrayRef strides, c10::ScalarType dtype);
// [docs:empty-strided-on:end]

// An openreg DataPtr of `nbytes` on `device`, whatever the current device
// is (Allocator::allocate uses the current one).
c10::DataPtr allocateOn(c10::DeviceIndex device, size_t nbytes);

// True if the DataPtr is an openreg device allocation made by this allocator.
bool isDeviceDataPtr(const c10::DataPtr& ptr);

// The kernel glue's CPU alias of a whole device block (KernelView.cpp),
// cached on the block so that operators do not build one per argument per
// call. cachedCpuAlias returns it borrowed (or null); cacheCpuAlias installs
// `alias`, taking a reference, unless the block already has one. The block
// drops its reference when it is freed. Both ignore DataPtrs that are not
// this allocator's.
c10::StorageImpl* cachedCpuAlias(const c10::DataPtr& ptr);
void cacheCpuAlias(const c10::DataPtr& ptr, c10::StorageImpl* alias);

// ------------------------------------------------- memory debugging
// What torch.openreg.memory._record_memory_history / _snapshot see; the same
// model as CUDACachingAllocator's (segments of blocks, a trace of actions).

// Captures a context (a stack trace) at an allocator action. Called outside
// the allocator's locks (it may take the GIL).
using ContextRecorder = std::shared_ptr<c10::GatheredContext> (*)();

// Which actions keep a context: live blocks only, + alloc trace entries,
// + free trace entries (CUDA's RecordContext).
enum class RecordContext { NEVER = 0, STATE = 1, ALLOC = 2, ALL = 3 };

struct TraceEntry {
  enum Action { ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE, OOM };
  Action action;
  uintptr_t addr = 0;
  size_t size = 0;
  c10::StreamId stream = 0;
  int64_t time_us = 0;
  size_t device_free = 0;  // OOM only
  std::shared_ptr<c10::GatheredContext> context;
};

struct BlockInfo {
  uintptr_t address = 0;
  size_t size = 0;
  size_t requested_size = 0;
  enum State { ACTIVE_ALLOCATED, ACTIVE_AWAITING_FREE, INACTIVE } state = INACTIVE;
  std::shared_ptr<c10::GatheredContext> context;  // where it was allocated
};

struct SegmentInfo {
  c10::DeviceIndex device = 0;
  uintptr_t address = 0;
  size_t total_size = 0;
  c10::StreamId stream = 0;
  bool small = false;
  c10::MempoolId_t pool_id{0, 0};  // a graph pool's id, or (0, 0)
  std::vector<BlockInfo> blocks;  // in address order
};

struct MemorySnapshot {
  std::vector<SegmentInfo> segments;
  std::vector<std::vector<TraceEntry>> device_traces;  // one per device
};

// enabled=false stops recording (and drops contexts of future actions);
// record_trace keeps the action history (enabled="all"), at most
// max_entries per device (a ring buffer); recorder=nullptr records no stacks.
void recordMemoryHistory(bool enabled, bool record_trace, ContextRecorder recorder,
                         RecordContext when, size_t max_entries, bool clear_history);
MemorySnapshot memorySnapshot();

// ------------------------------------------------- graph memory pools
// CUDA's beginAllocateToPool / endAllocateToPool / releasePool: while capture
// `capture_id` runs on `device`, allocations on its streams come from pool
// `id`; a graph holds its pool until releasePool.
void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id,
                         unsigned long long capture_id);
void endAllocateToPool(c10::DeviceIndex device, unsigned long long capture_id);
void releasePool(c10::DeviceIndex device, c10::MempoolId_t id);

// set_per_process_memory_fraction: reserved memory on `device` may not
// exceed fraction * capacity; beyond it allocations raise OutOfMemoryError.
void setMemoryFraction(double fraction, c10::DeviceIndex device);
double getMemoryFraction(c10::DeviceIndex device);

}  // namespace torch_openreg
