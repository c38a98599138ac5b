// Caching device allocator, a compact version of CUDACachingAllocator's
// design:
//  - requests are rounded to 512 bytes; <= 1 MiB come from a small pool of
//    2 MiB segments, larger ones from a large pool (20 MiB segments below
//    10 MiB, otherwise the size rounded up to 2 MiB);
//  - free blocks are kept per stream and best-fit reused, split when the
//    remainder is worth keeping, and merged with free neighbours on free;
//  - a block used on other streams (record_stream) is only reused once
//    events recorded on those streams have completed;
//  - on out-of-memory the cache is flushed and the allocation retried once
//    before torch.OutOfMemoryError is raised with a CUDA-like message;
//    set_per_process_memory_fraction caps what a device may reserve;
//  - graph capture (CUDA's private pools): while a stream captures, the
//    allocations made on it (and on the streams that joined its capture)
//    come from the graph's private pool; blocks freed there go back to that
//    pool only, so their memory stays reserved for replays, and graphs that
//    share a pool id share its blocks. The pool's segments are given back
//    once no graph uses it and its blocks are free;
//  - optionally (torch.openreg.memory._record_memory_history) a context per
//    live block and a trace of actions, for memory snapshots. Off, it costs
//    one branch per allocation and per free.
//
// This file: allocation, free, segments, record_stream and the
// c10::DeviceAllocator entry points. The graph pools, the statistics and
// the history live beside it (OpenRegAllocatorImpl.h says which is where).
//
// Vendor: these files are reusable as they are; only the orMalloc/orFree/
// orEvent* calls name your runtime.
#include "OpenRegAllocatorImpl.h"

#include "OpenRegAllocatorAsan.h"
#include "OpenRegFunctions.h"
#include "OpenRegStream.h"
#include "aten/core/Sanitizer.h"

#include <ATen/EmptyTensor.h>

#include <optional>
#include <sstream>

namespace torch_openreg::alloc {

bool memcheck_on() {
  static const bool on = [] {
    int enabled = 0;
    if (orMemcheckGetEnabled(&enabled) != orSuccess) orGetLastError();
    return enabled != 0;
  }();
  return on;
}

namespace {
// ASan builds poison the cache's free memory (OpenRegAllocatorAsan.h):
// not a graph pool's (a replay reuses the addresses of blocks freed during
// its capture), not in memcheck mode (no cache; guard pages do that job).
inline bool asan_poisons(const PrivatePool* pool) {
  return asan::kOn && pool == nullptr && !memcheck_on();
}
inline char* kernel_view(c10::DeviceIndex device, char* ptr) {
  return ptr + kernel_view_offset(device);
}
}  // namespace

// [docs:allocator-hot-path]
// The hot path of eager mode: a small request served by a freed block of
// exactly its size on its stream, kept whole (DeviceState::cached), and such
// a block freed back there. Nothing to search, split or merge, so the work is
// the lock and the statistics; this path is kept short and everything else
// (history, memcheck, graph pools, pending events, the profiler's memory
// reports) is in the general functions it falls back to. The code a tiny
// operator runs matters as much as its instruction count: each function it
// passes through costs instruction-cache misses (docs/performance.md).
Block* CachingAllocator::malloc_block(c10::DeviceIndex device, size_t requested) {
  check_device_index(device);
  if (C10_LIKELY(requested <= DeviceState::kCachedMax && !history_on() && !memcheck_on() &&
                 !c10::memoryProfilingEnabled())) {
    DeviceState& st = state(device);
    if (st.routed.load(std::memory_order_acquire) == 0) {
      const c10::StreamId stream = getCurrentStream(device).id();
      std::lock_guard<std::mutex> lk(st.mu);
      if (st.events.empty() && st.events_deferred_until_no_capture.empty() && st.routes.empty()) {
        if (Block* block = st.take_cached(stream, round_size(requested))) {
          block->allocated = true;
          block->requested = requested;
          if (asan_poisons(nullptr)) asan::allocated(kernel_view(device, block->ptr), requested);
          st.link_live(block);
          for (size_t k : {size_t(StatType::AGGREGATE), size_t(StatType::SMALL_POOL)}) {
            DeviceStats& s = st.stats;
            s.inactive_split[k].decrease(1);
            s.inactive_split_bytes[k].decrease(block->size);
            s.allocation[k].increase(1);
            s.allocated_bytes[k].increase(block->size);
            s.active[k].increase(1);
            s.active_bytes[k].increase(block->size);
            s.requested_bytes[k].increase(requested);
          }
          return block;
        }
      }
    }
  }
  return malloc_block_general(device, requested);
}

void CachingAllocator::free_block_from_user(Block* block) {
  if (C10_LIKELY(block->small && !block->pool && block->size <= DeviceState::kCachedMax &&
                 !history_on() && !memcheck_on() && !sanitizer_on() &&
                 !c10::memoryProfilingEnabled())) {
    DeviceState& st = state(block->device);
    std::lock_guard<std::mutex> g(st.mu);
    if (block->allocated && block->stream_uses.empty() && block->is_split() &&
        st.can_cache(block)) {
      block->allocated = false;
      st.unlink_live(block);
      const size_t requested = block->requested;
      free_completed(st, block, nullptr);
      st.cache_block(block);
      for (size_t k : {size_t(StatType::AGGREGATE), size_t(StatType::SMALL_POOL)}) {
        DeviceStats& s = st.stats;
        s.allocation[k].decrease(1);
        s.allocated_bytes[k].decrease(block->size);
        s.requested_bytes[k].decrease(requested);
        s.active[k].decrease(1);
        s.active_bytes[k].decrease(block->size);
        s.inactive_split[k].increase(1);
        s.inactive_split_bytes[k].increase(block->size);
      }
      return;
    }
  }
  free_block_general(block);
}
// [docs:allocator-hot-path:end]

Block* CachingAllocator::malloc_block_general(c10::DeviceIndex device, size_t requested) {
  const c10::Stream current = getCurrentStream(device);
  c10::StreamId stream = current.id();
  DeviceState& st = state(device);
  std::shared_ptr<c10::GatheredContext> ctx;
  const bool hist = history_on();
  if (C10_UNLIKELY(hist)) ctx = g_history.gather(RecordContext::STATE);
  // [docs:allocator-graph-route]
  // A capturing stream allocates from its capture's pool (if routed).
  unsigned long long capture_id = 0;
  if (C10_UNLIKELY(st.routed.load(std::memory_order_acquire) != 0)) {
    orStreamCaptureStatus status = orStreamCaptureStatusNone;
    OPENREG_CHECK(orStreamGetCaptureInfo(nativeStream(current), &status, &capture_id));
  }
  std::unique_lock<std::mutex> lk(st.mu);
  PrivatePool* private_pool = nullptr;
  if (C10_UNLIKELY(capture_id != 0)) {
    for (auto& [id, pp] : st.routes)
      if (id == capture_id) private_pool = pp;
  }
  // [docs:allocator-graph-route:end]
  process_events(st);
  size_t size = round_size(requested);
  bool small = size <= kSmallSize;
  Pool& pool = private_pool ? private_pool->of(small) : small ? st.small_pool : st.large_pool;

  Block* block = small && !private_pool && !memcheck_on() ? st.take_cached(stream, size) : nullptr;
  if (block) {
    update(st.stats.inactive_split, -1, small);  // cached blocks are split ones
    update(st.stats.inactive_split_bytes, -int64_t(block->size), small);
  } else {
    block = find_free(pool, stream, size);
    if (!block) {
      block = new_segment(st, device, stream, size, small, requested, ctx, private_pool);
    }
    // Take it out of the pool, splitting off a worthwhile remainder.
    pool.erase(block);
    if (block->is_split()) {
      update(st.stats.inactive_split, -1, small);
      update(st.stats.inactive_split_bytes, -int64_t(block->size), small);
    }
  }
  size_t remaining = block->size - size;
  if ((small && remaining >= kMinBlockSize) || (!small && remaining > kSmallSize)) {
    auto* rest = st.new_block();
    rest->device = device;
    rest->pool = block->pool;
    rest->stream = stream;
    rest->small = small;
    rest->ptr = block->ptr + size;
    rest->size = remaining;
    rest->prev = block;
    rest->next = block->next;
    if (rest->next) rest->next->prev = rest;
    block->next = rest;
    block->size = size;
    pool.insert(rest);
    update(st.stats.inactive_split, 1, small);
    update(st.stats.inactive_split_bytes, int64_t(rest->size), small);
  }
  block->allocated = true;
  block->requested = requested;
  if (asan_poisons(block->pool)) asan::allocated(kernel_view(device, block->ptr), requested);
  st.link_live(block);
  update(st.stats.allocation, 1, small);
  update(st.stats.allocated_bytes, int64_t(block->size), small);
  update(st.stats.active, 1, small);
  update(st.stats.active_bytes, int64_t(block->size), small);
  update(st.stats.requested_bytes, int64_t(requested), small);
  if (C10_UNLIKELY(hist)) {
    block->context = ctx;
    record(st, TraceEntry::ALLOC, block->ptr, requested, stream,
           g_history.when >= int(RecordContext::ALLOC) ? ctx : nullptr);
  }
  if (c10::memoryProfilingEnabled()) {
    c10::reportMemoryUsageToProfiler(
        block->ptr, int64_t(block->size),
        size_t(st.stats.allocated_bytes[0].current),
        size_t(st.stats.reserved_bytes[0].current),
        c10::Device(c10::DeviceType::PrivateUse1, device));
  }
  return block;
}

void CachingAllocator::free_block_general(Block* block) {
  DeviceState& st = state(block->device);
  std::shared_ptr<c10::GatheredContext> ctx;
  const bool hist = history_on();
  if (C10_UNLIKELY(hist)) ctx = g_history.gather(RecordContext::ALL);
  std::lock_guard<std::mutex> g(st.mu);
  TORCH_INTERNAL_ASSERT(block->allocated, "openreg allocator: double free");
  // Stream sanitizer: its history stays, so a reuse racing with the last
  // users is reported as such (the missing record_stream case).
  if (C10_UNLIKELY(sanitizer_on())) orSanitizerMarkFreed(block->ptr, block->size);
  block->allocated = false;
  st.unlink_live(block);
  if (C10_UNLIKELY(hist)) {
    record(st, TraceEntry::FREE_REQUESTED, block->ptr, block->requested, block->stream, ctx);
  }
  bool small = block->small;
  update(st.stats.allocation, -1, small);
  update(st.stats.allocated_bytes, -int64_t(block->size), small);
  update(st.stats.requested_bytes, -int64_t(block->requested), small);
  if (c10::memoryProfilingEnabled()) {
    c10::reportMemoryUsageToProfiler(
        block->ptr, -int64_t(block->size),
        size_t(st.stats.allocated_bytes[0].current),
        size_t(st.stats.reserved_bytes[0].current),
        c10::Device(c10::DeviceType::PrivateUse1, block->device));
  }
  // Memcheck: the block goes back to the runtime (and becomes unreachable)
  // only after the work queued on its own stream too.
  const bool memcheck = C10_UNLIKELY(memcheck_on()) && !block->pool;
  if (memcheck) block->stream_uses.insert(c10::Stream(
      c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, block->device),
      block->stream));
  if (!block->stream_uses.empty()) {
    // Not reusable until the other streams are done with it.
    if (C10_UNLIKELY(!st.routes.empty())) {
      st.events_deferred_until_no_capture.push_back(block);
      return;
    }
    insert_events(st, block);
    if (memcheck) process_events(st);  // at once if the streams are idle
    return;
  }
  free_completed(st, block, std::move(ctx));
  if (!block->pool && block->is_split() && st.cache_block(block)) {
    update(st.stats.active, -1, small);
    update(st.stats.active_bytes, -int64_t(block->size), small);
    update(st.stats.inactive_split, 1, small);
    update(st.stats.inactive_split_bytes, int64_t(block->size), small);
    return;
  }
  return_to_pool(st, block);
}

c10::DataPtr CachingAllocator::allocate_on(c10::DeviceIndex device, size_t nbytes) {
  // A negative size converted to size_t (torch.UntypedStorage(-3), a size
  // computed wrong): refused, as the CPU allocator refuses it; rounding it
  // up to the block size would wrap to a small block claiming 2^64 bytes.
  TORCH_CHECK(static_cast<int64_t>(nbytes) >= 0, "openreg: cannot allocate ",
              static_cast<int64_t>(nbytes), " bytes on openreg:", static_cast<int>(device),
              ": the size is negative");
  if (nbytes == 0) {
    return {nullptr, nullptr, &deleter,
            c10::Device(c10::DeviceType::PrivateUse1, device)};
  }
  Block* b = malloc_block(device, nbytes);
  return {b->ptr, b, &deleter, c10::Device(c10::DeviceType::PrivateUse1, device)};
}

void CachingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count == 0) return;
  auto device = current_device();
  orStream_t s = currentNativeStream(device);
  OPENREG_CHECK(orMemcpyAsync(dest, src, count, orMemcpyDeviceToDevice, s));
  OPENREG_CHECK(orStreamSynchronize(s));
}

void CachingAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    DeviceState& st = state(d);
    std::lock_guard<std::mutex> g(st.mu);
    synchronize_and_free_events(st);
    release_cached(st, d);
  }
}

void CachingAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  // The free creates an event on this stream later, in the deleter, where an
  // error can only terminate the process: a stream of another device type
  // or an unknown stream id is refused here, as CUDA's recordStream refuses
  // a stream that is not a CUDA stream.
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: expected an openreg stream, got a stream on ", stream.device());
  (void)nativeStream(stream);  // "openreg: unknown stream id ..."
  if (!ptr.get() || ptr.get_deleter() != &deleter) return;
  auto* block = static_cast<Block*>(ptr.get_context());
  if (!block) return;
  DeviceState& st = state(block->device);
  std::lock_guard<std::mutex> g(st.mu);
  if (stream.id() == block->stream && stream.device_index() == block->device) return;
  block->stream_uses.insert(stream);
}

Block* CachingAllocator::find_free(Pool& pool, c10::StreamId stream, size_t size) {
  Block key;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  return *it;
}

Block* CachingAllocator::new_segment(DeviceState& st, c10::DeviceIndex device,
                                     c10::StreamId stream, size_t size, bool small,
                                     size_t requested,
                                     const std::shared_ptr<c10::GatheredContext>& ctx,
                                     PrivatePool* private_pool) {
  size_t seg = segment_size(size);
  void* ptr = try_segment_malloc(st, device, seg);
  if (!ptr) {
    // Flush the cache and retry once, as CUDA's allocator does.
    st.stats.num_alloc_retries++;
    synchronize_and_free_events(st);
    release_cached(st, device);
    ptr = try_segment_malloc(st, device, seg);
  }
  if (!ptr && seg > size) {
    // A smaller segment may still fit.
    seg = size;
    ptr = try_segment_malloc(st, device, seg);
  }
  if (!ptr) {
    st.stats.num_ooms++;
    size_t free = 0, total = 0;
    {
      DeviceScope scope(device);
      if (orMemGetInfo(&free, &total) != orSuccess) orGetLastError();
    }
    auto allocated = size_t(st.stats.allocated_bytes[0].current);
    auto reserved = size_t(st.stats.reserved_bytes[0].current);
    c10::reportOutOfMemoryToProfiler(
        int64_t(size), allocated, reserved,
        c10::Device(c10::DeviceType::PrivateUse1, device));
    if (C10_UNLIKELY(history_on())) {
      record(st, TraceEntry::OOM, nullptr, requested, stream, ctx, free);
    }
    using c10::CachingAllocator::format_size;
    // [docs:allocator-fraction-oom]
    std::string limit;
    if (st.limited) {
      std::ostringstream os;
      os << " This process may reserve at most " << format_size(st.limit)
         << " of it (set_per_process_memory_fraction(" << st.fraction
         << ") on openreg:" << static_cast<int>(device) << ").";
      limit = os.str();
    }
    TORCH_CHECK_WITH(
        OutOfMemoryError, false,
        "openreg out of memory. Tried to allocate ", format_size(requested),
        ". Device openreg:", static_cast<int>(device),
        " has a total capacity of ", format_size(total), " of which ",
        format_size(free), " is free.", limit, " Of the allocated memory ",
        format_size(allocated), " is allocated by PyTorch, and ",
        format_size(reserved - allocated),
        " is reserved by PyTorch but unallocated. (The capacity is set by "
        "OPENREG_DEVICE_MEMORY.)");
    // [docs:allocator-fraction-oom:end]
  }
  if (asan_poisons(private_pool)) asan::segment_added(kernel_view(device, static_cast<char*>(ptr)), seg);
  auto* b = new Block();
  b->device = device;
  b->pool = private_pool;
  b->stream = stream;
  b->size = seg;
  b->small = small;
  b->ptr = static_cast<char*>(ptr);
  st.pool_of(b).insert(b);
  if (private_pool) private_pool->segments++;
  update(st.stats.segment, 1, small);
  update(st.stats.reserved_bytes, int64_t(seg), small);
  st.stats.num_device_alloc++;
  if (C10_UNLIKELY(history_on())) {
    record(st, TraceEntry::SEGMENT_ALLOC, b->ptr, seg, stream,
           g_history.when >= int(RecordContext::ALLOC) ? ctx : nullptr);
  }
  return b;
}

// orMalloc, unless the segment would take the device past the process's
// memory fraction.
void* CachingAllocator::try_segment_malloc(DeviceState& st, c10::DeviceIndex device, size_t n) {
  if (st.limited && size_t(st.stats.reserved_bytes[0].current) + n > st.limit) {
    return nullptr;
  }
  return try_device_malloc(device, n);
}

void* CachingAllocator::try_device_malloc(c10::DeviceIndex device, size_t n) {
  DeviceScope scope(device);
  void* p = nullptr;
  orError_t err = orMalloc(&p, n);
  if (err == orErrorMemoryAllocation) {
    orGetLastError();
    return nullptr;
  }
  OPENREG_CHECK(err);
  return p;
}

// The block is free for reuse now (the end of a free, as CUDA's
// free_completed): note it in the history and drop its context.
void CachingAllocator::free_completed(DeviceState& st, Block* block,
                                      std::shared_ptr<c10::GatheredContext> ctx) {
  if (C10_UNLIKELY(history_on())) {
    record(st, TraceEntry::FREE_COMPLETED, block->ptr, block->requested,
           block->stream, std::move(ctx));
  }
  block->context.reset();
  block->requested = 0;
  if (asan_poisons(block->pool)) {
    asan::freed(nativeStream(c10::Stream(c10::Stream::UNSAFE,
                                         c10::Device(c10::DeviceType::PrivateUse1, block->device),
                                         block->stream)),
                kernel_view(block->device, block->ptr), block->size);
  }
}

// Merge with free neighbours and put back in the pool.
void CachingAllocator::return_to_pool(DeviceState& st, Block* block) {
  update(st.stats.active, -1, block->small);
  update(st.stats.active_bytes, -int64_t(block->size), block->small);
  if (C10_UNLIKELY(memcheck_on()) && !block->pool) return free_segment(st, block);
  merge_into_pool(st, block);
}

// Put the cached blocks back into the pool, merged with their neighbours.
void CachingAllocator::flush_cached(DeviceState& st) {
  for (size_t i = 0; i < st.cached.size(); ++i) {
    while (Block* b = st.cached[i]) {
      st.cached[i] = b->next_cached;
      b->next_cached = nullptr;
      b->cached = false;
      update(st.stats.inactive_split, -1, b->small);
      update(st.stats.inactive_split_bytes, -int64_t(b->size), b->small);
      merge_into_pool(st, b);
    }
    st.cached_count[i] = 0;
  }
}

void CachingAllocator::merge_into_pool(DeviceState& st, Block* block) {
  bool small = block->small;
  Pool& pool = st.pool_of(block);
  for (Block* nb : {block->prev, block->next}) {
    if (!nb || nb->allocated || nb->event_count > 0 || nb->cached) continue;
    // nb is free and in the pool (as an inactive split block).
    pool.erase(nb);
    update(st.stats.inactive_split, -1, small);
    update(st.stats.inactive_split_bytes, -int64_t(nb->size), small);
    if (nb == block->prev) {
      block->ptr = nb->ptr;
      block->prev = nb->prev;
      if (block->prev) block->prev->next = block;
    } else {
      block->next = nb->next;
      if (block->next) block->next->prev = block;
    }
    block->size += nb->size;
    st.delete_block(nb);
  }
  if (block->is_split()) {
    update(st.stats.inactive_split, 1, small);
    update(st.stats.inactive_split_bytes, int64_t(block->size), small);
  }
  pool.insert(block);
  // A whole free segment of a pool no graph holds any more goes back.
  if (C10_UNLIKELY(block->pool != nullptr) && block->pool->users == 0 && !block->is_split())
    release_private_segment(st, block);
}

void CachingAllocator::free_segment(DeviceState& st, Block* b) {
  if (C10_UNLIKELY(history_on())) {
    record(st, TraceEntry::SEGMENT_FREE, b->ptr, b->size, b->stream, nullptr);
  }
  if (asan_poisons(b->pool)) asan::segment_removed(kernel_view(b->device, b->ptr), b->size);
  if (orFree(b->ptr) != orSuccess) orGetLastError();  // any device
  update(st.stats.segment, -1, b->small);
  update(st.stats.reserved_bytes, -int64_t(b->size), b->small);
  st.stats.num_device_free++;
  delete b;
}

void CachingAllocator::insert_events(DeviceState& st, Block* block) {
  for (const c10::Stream& s : block->stream_uses) {
    orEvent_t ev = nullptr;
    OPENREG_CHECK(orEventCreateWithFlags(&ev, orEventDisableTiming));
    OPENREG_CHECK(orEventRecord(ev, nativeStream(s)));
    block->event_count++;
    st.events.emplace_back(ev, block);
  }
  block->stream_uses.clear();
}

void CachingAllocator::process_events(DeviceState& st) {
  // While a capture routes here, events recorded in it may be pending:
  // nothing is queried (CUDA's allocator waits for the capture to end too).
  if (C10_UNLIKELY(!st.routes.empty())) return;
  if (C10_UNLIKELY(!st.events_deferred_until_no_capture.empty())) {
    for (Block* b : st.events_deferred_until_no_capture) insert_events(st, b);
    st.events_deferred_until_no_capture.clear();
  }
  while (!st.events.empty()) {
    auto [ev, block] = st.events.front();
    orError_t r = orEventQuery(ev);
    if (r == orErrorNotReady) break;
    if (r != orSuccess) orGetLastError();
    // The block is reused only because this event completed: what it
    // covers is ordered before the reuse (the record_stream contract).
    if (C10_UNLIKELY(sanitizer_on())) orSanitizerRelease(block->ptr, block->size, ev);
    orEventDestroy(ev);
    st.events.pop_front();
    if (--block->event_count == 0) {
      free_completed(st, block, nullptr);
      return_to_pool(st, block);
    }
  }
}

void CachingAllocator::synchronize_and_free_events(DeviceState& st) {
  st.stats.num_sync_all_streams++;
  if (st.routes.empty() && !st.events_deferred_until_no_capture.empty()) {
    for (Block* b : st.events_deferred_until_no_capture) insert_events(st, b);
    st.events_deferred_until_no_capture.clear();
  }
  for (auto& [ev, block] : st.events) {
    if (orEventSynchronize(ev) != orSuccess) orGetLastError();
    orEventDestroy(ev);
    if (--block->event_count == 0) {
      free_completed(st, block, nullptr);
      return_to_pool(st, block);
    }
  }
  st.events.clear();
}

// Give every entirely free segment back to the runtime.
void CachingAllocator::release_cached(DeviceState& st, c10::DeviceIndex device) {
  flush_cached(st);
  for (Pool* pool : {&st.small_pool, &st.large_pool}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev || b->next) {
        ++it;
        continue;
      }
      it = pool->erase(it);
      free_segment(st, b);
    }
  }
}

CachingAllocator& allocator() {
  static auto* a = new CachingAllocator();
  return *a;
}

void deleter(void* ctx) {
  if (!ctx) return;
  auto* block = static_cast<Block*>(ctx);
  // (Load first: most blocks never got an alias, and an exchange is a
  // locked instruction.)
  if (block->cpu_alias.load(std::memory_order_relaxed) != nullptr) {
    if (c10::StorageImpl* alias = block->cpu_alias.exchange(nullptr, std::memory_order_acq_rel))
      c10::intrusive_ptr<c10::StorageImpl>::reclaim(alias);  // drops our reference
  }
  allocator().free_block_from_user(block);
}

// Registering here makes at::empty(..., device=openreg) and every
// c10::GetAllocator(PrivateUse1) user find us.
struct Registrar {
  Registrar() { c10::SetAllocator(c10::DeviceType::PrivateUse1, &allocator()); }
} g_registrar;

}  // namespace torch_openreg::alloc

namespace torch_openreg {

using namespace alloc;

c10::DeviceAllocator* getDeviceAllocator() { return &allocator(); }

c10::DataPtr allocateOn(c10::DeviceIndex device, size_t nbytes) {
  return allocator().allocate_on(device, nbytes);
}

c10::StorageImpl* cachedCpuAlias(const c10::DataPtr& ptr) {
  if (ptr.get_deleter() != &deleter || !ptr.get_context()) return nullptr;
  return static_cast<Block*>(ptr.get_context())->cpu_alias.load(std::memory_order_acquire);
}

void cacheCpuAlias(const c10::DataPtr& ptr, c10::StorageImpl* alias) {
  if (ptr.get_deleter() != &deleter || !ptr.get_context()) return;
  auto* block = static_cast<Block*>(ptr.get_context());
  c10::StorageImpl* expected = nullptr;
  c10::raw::intrusive_ptr::incref(alias);
  if (!block->cpu_alias.compare_exchange_strong(expected, alias, std::memory_order_acq_rel)) {
    c10::raw::intrusive_ptr::decref(alias);  // another thread cached one first
  }
}

bool isDeviceDataPtr(const c10::DataPtr& ptr) {
  return ptr.get_deleter() == &deleter &&
         ptr.device().type() == c10::DeviceType::PrivateUse1;
}

at::TensorBase empty_strided_on(c10::DeviceIndex index, c10::IntArrayRef sizes,
                                c10::IntArrayRef strides, c10::ScalarType dtype) {
  std::optional<DeviceScope> scope;
  if (index != current_device()) scope.emplace(index);
  return at::detail::empty_strided_generic(sizes, strides, getDeviceAllocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           dtype);
}

}  // namespace torch_openreg
