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
// Vendor: this file is reusable as is; only the orMalloc/orFree/orEvent*
// calls name your runtime.
#include "OpenRegAllocator.h"

#include "OpenRegFunctions.h"
#include "OpenRegStream.h"
#include "../aten/Sanitizer.h"

#include <c10/util/ApproximateClock.h>
#include <c10/util/flat_hash_map.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

namespace torch_openreg {

namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

// Split blocks must keep orMalloc's alignment.
constexpr size_t kMinBlockSize = OR_MALLOC_ALIGNMENT;
constexpr size_t kSmallSize = 1 << 20;       // largest "small" request
constexpr size_t kSmallBuffer = 2 << 20;     // small-pool segment size
constexpr size_t kLargeBuffer = 20 << 20;    // large-pool segment size
constexpr size_t kMinLargeAlloc = 10 << 20;  // above this, exact segments
constexpr size_t kRoundLarge = 2 << 20;

struct PrivatePool;

struct Block {
  c10::DeviceIndex device = 0;
  PrivatePool* pool = nullptr;  // a graph's private pool, or null (the device's)
  c10::StreamId stream = 0;  // the allocation stream
  size_t size = 0;
  size_t requested = 0;
  char* ptr = nullptr;
  bool allocated = false;
  bool small = false;
  int event_count = 0;  // outstanding record_stream events
  Block* prev = nullptr;
  Block* next = nullptr;
  bool cached = false;          // in DeviceState::cached (freed, kept whole)
  Block* next_cached = nullptr;
  // In DeviceState's list of allocated blocks while allocated.
  Block* live_prev = nullptr;
  Block* live_next = nullptr;
  ska::flat_hash_set<c10::Stream> stream_uses;
  std::shared_ptr<c10::GatheredContext> context;  // history only
  // The CPU alias of this block while it is allocated (cacheCpuAlias): one
  // owned reference, dropped by deleter() before the block is freed.
  std::atomic<c10::StorageImpl*> cpu_alias{nullptr};

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};
using Pool = std::set<Block*, BlockLess>;

// A graph memory pool (CUDA's PrivatePool): blocks that only allocations
// routed to it use. `users` counts the graphs (and captures) that hold it;
// at 0 its free segments are given back and, once it has none, it goes.
struct PrivatePool {
  c10::MempoolId_t id;
  Pool small, large;
  int users = 0;
  size_t segments = 0;
  Pool& of(bool small_block) { return small_block ? small : large; }
};

size_t round_size(size_t n) {
  if (n < kMinBlockSize) return kMinBlockSize;
  return (n + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t segment_size(size_t n) {
  if (n <= kSmallSize) return kSmallBuffer;
  if (n < kMinLargeAlloc) return kLargeBuffer;
  return (n + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

void deleter(void* ctx);

struct DeviceState {
  std::mutex mu;
  Pool small_pool, large_pool;
  // Allocated blocks, an intrusive list (snapshots walk it): a hash set
  // cost an insert and an erase per tensor.
  Block* live = nullptr;
  void link_live(Block* b) {
    b->live_prev = nullptr;
    b->live_next = live;
    if (live) live->live_prev = b;
    live = b;
  }
  void unlink_live(Block* b) {
    if (b->live_prev) b->live_prev->live_next = b->live_next;
    else live = b->live_next;
    if (b->live_next) b->live_next->live_prev = b->live_prev;
    b->live_prev = b->live_next = nullptr;
  }
  std::deque<std::pair<orEvent_t, Block*>> events;
  DeviceStats stats;
  // set_per_process_memory_fraction: reserved bytes may not exceed `limit`.
  bool limited = false;
  double fraction = 1.0;
  size_t limit = 0;
  // _record_memory_history("all"): a ring buffer of actions.
  std::vector<TraceEntry> trace;
  size_t trace_next = 0;
  // Block objects of merged-away splits, for the next split: every small
  // allocation splits a block and every free merges one back, and a heap
  // allocation each way cost as much as the rest of the bookkeeping.
  std::vector<Block*> spare;

  // Graph pools by id, and the captures whose allocations go to one:
  // (capture id, pool). `routed` is what malloc_block reads without the
  // lock: nonzero while any capture routes on this device.
  std::map<c10::MempoolId_t, std::unique_ptr<PrivatePool>> private_pools;
  std::vector<std::pair<unsigned long long, PrivatePool*>> routes;
  std::atomic<int> routed{0};
  Pool& pool_of(Block* b) {
    return b->pool ? b->pool->of(b->small) : (b->small ? small_pool : large_pool);
  }

  // Freed small blocks, kept whole (not merged into the pool) for the next
  // request of exactly their size on their stream: the hot path of eager
  // mode frees and reallocates the same few sizes, and splitting a block
  // out of the pool and merging it back each time cost more than the
  // operator's own work. LIFO lists per size class, a few blocks each;
  // flushed into the pool (merged) by release_cached.
  static constexpr size_t kCachedMax = 64 << 10;
  static constexpr int kCachedPerSize = 8;
  std::array<Block*, kCachedMax / kMinBlockSize + 1> cached{};
  std::array<int, kCachedMax / kMinBlockSize + 1> cached_count{};

  bool cache_block(Block* b) {
    size_t i = b->size / kMinBlockSize;
    if (!b->small || b->size > kCachedMax || cached_count[i] >= kCachedPerSize) return false;
    b->cached = true;
    b->next_cached = cached[i];
    cached[i] = b;
    cached_count[i]++;
    return true;
  }
  Block* take_cached(c10::StreamId stream, size_t size) {
    if (size > kCachedMax) return nullptr;
    size_t i = size / kMinBlockSize;
    for (Block** link = &cached[i]; *link; link = &(*link)->next_cached) {
      Block* b = *link;
      if (b->stream != stream) continue;
      *link = b->next_cached;
      b->next_cached = nullptr;
      b->cached = false;
      cached_count[i]--;
      return b;
    }
    return nullptr;
  }

  Block* new_block() {
    if (spare.empty()) return new Block();
    Block* b = spare.back();
    spare.pop_back();
    return b;
  }
  void delete_block(Block* b) {
    if (spare.size() >= 256) {
      delete b;
      return;
    }
    b->device = 0;
    b->stream = 0;
    b->size = b->requested = 0;
    b->ptr = nullptr;
    b->allocated = b->small = false;
    b->event_count = 0;
    b->prev = b->next = nullptr;
    b->cached = false;
    b->next_cached = nullptr;
    b->stream_uses.clear();
    b->context.reset();
    spare.push_back(b);
  }
};

// The history settings; `on` is the one flag the hot path reads.
struct History {
  std::atomic<bool> on{false};
  std::atomic<bool> trace{false};
  std::atomic<ContextRecorder> recorder{nullptr};
  std::atomic<int> when{0};
  std::atomic<size_t> max_entries{0};

  // Called without the allocator's locks: a recorder may take the GIL.
  std::shared_ptr<c10::GatheredContext> gather(RecordContext level) const {
    ContextRecorder r = recorder.load(std::memory_order_relaxed);
    if (!r || when.load(std::memory_order_relaxed) < int(level)) return nullptr;
    return r();
  }
};
History g_history;

inline bool history_on() {
  return g_history.on.load(std::memory_order_relaxed);
}

class CachingAllocator final : public c10::DeviceAllocator {
 public:
  // ---------------------------------------------------------------- alloc
  Block* malloc_block(c10::DeviceIndex device, size_t requested) {
    check_device_index(device);
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

    Block* block = small && !private_pool ? st.take_cached(stream, size) : nullptr;
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

  void free_block_from_user(Block* block) {
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
    if (!block->stream_uses.empty()) {
      // Not reusable until the other streams are done with it.
      for (const c10::Stream& s : block->stream_uses) {
        orEvent_t ev = nullptr;
        OPENREG_CHECK(orEventCreateWithFlags(&ev, orEventDisableTiming));
        OPENREG_CHECK(orEventRecord(ev, nativeStream(s)));
        block->event_count++;
        st.events.emplace_back(ev, block);
      }
      block->stream_uses.clear();
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

  // ---------------------------------------------------------------- c10 API
  c10::DataPtr allocate(size_t nbytes) override {
    return allocate_on(current_device(), nbytes);
  }

  c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes) {
    if (nbytes == 0) {
      return {nullptr, nullptr, &deleter,
              c10::Device(c10::DeviceType::PrivateUse1, device)};
    }
    Block* b = malloc_block(device, nbytes);
    return {b->ptr, b, &deleter, c10::Device(c10::DeviceType::PrivateUse1, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &deleter; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count == 0) return;
    auto device = current_device();
    orStream_t s = currentNativeStream(device);
    OPENREG_CHECK(orMemcpyAsync(dest, src, count, orMemcpyDeviceToDevice, s));
    OPENREG_CHECK(orStreamSynchronize(s));
  }

  bool initialized() override { return true; }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      DeviceState& st = state(d);
      std::lock_guard<std::mutex> g(st.mu);
      synchronize_and_free_events(st);
      release_cached(st, d);
    }
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (!ptr.get() || ptr.get_deleter() != &deleter) return;
    auto* block = static_cast<Block*>(ptr.get_context());
    if (!block) return;
    DeviceState& st = state(block->device);
    std::lock_guard<std::mutex> g(st.mu);
    if (stream.id() == block->stream && stream.device_index() == block->device) return;
    block->stream_uses.insert(stream);
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device_index(device);
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> g(st.mu);
    return st.stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device_index(device);
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> g(st.mu);
    for (StatArray* a : stat_arrays(st.stats)) {
      for (Stat& s : *a) s.reset_accumulated();
    }
    st.stats.num_alloc_retries = 0;
    st.stats.num_ooms = 0;
    st.stats.num_device_alloc = 0;
    st.stats.num_device_free = 0;
    st.stats.num_sync_all_streams = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device_index(device);
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> g(st.mu);
    for (StatArray* a : stat_arrays(st.stats)) {
      for (Stat& s : *a) s.reset_peak();
    }
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device_index(device);
    DeviceScope scope(device);
    size_t free = 0, total = 0;
    OPENREG_CHECK(orMemGetInfo(&free, &total));
    return {free, total};
  }

  DeviceState& state(c10::DeviceIndex device) {
    static DeviceState* states = new DeviceState[OR_MAX_DEVICES];
    return states[device];
  }

 private:
  static std::vector<StatArray*> stat_arrays(DeviceStats& s) {
    return {&s.allocation, &s.segment, &s.active, &s.inactive_split,
            &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
            &s.inactive_split_bytes, &s.requested_bytes};
  }

  C10_ALWAYS_INLINE static void update(StatArray& a, int64_t delta, bool small) {
    auto apply = [&](Stat& s) {
      if (delta >= 0) s.increase(size_t(delta));
      else s.decrease(size_t(-delta));
    };
    apply(a[size_t(StatType::AGGREGATE)]);
    apply(a[size_t(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)]);
  }

  static Block* find_free(Pool& pool, c10::StreamId stream, size_t size) {
    Block key;
    key.stream = stream;
    key.size = size;
    key.ptr = nullptr;
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    return *it;
  }

  Block* new_segment(DeviceState& st, c10::DeviceIndex device,
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
  static void* try_segment_malloc(DeviceState& st, c10::DeviceIndex device, size_t n) {
    if (st.limited && size_t(st.stats.reserved_bytes[0].current) + n > st.limit) {
      return nullptr;
    }
    return try_device_malloc(device, n);
  }

  // The block is free for reuse now (the end of a free, as CUDA's
  // free_completed): note it in the history and drop its context.
  static void free_completed(DeviceState& st, Block* block,
                             std::shared_ptr<c10::GatheredContext> ctx) {
    if (C10_UNLIKELY(history_on())) {
      record(st, TraceEntry::FREE_COMPLETED, block->ptr, block->requested,
             block->stream, std::move(ctx));
    }
    block->context.reset();
    block->requested = 0;
  }

  // Append to the device's action history (a ring buffer), if kept.
  static void record(DeviceState& st, TraceEntry::Action action, const void* ptr,
                     size_t size, c10::StreamId stream,
                     std::shared_ptr<c10::GatheredContext> ctx, size_t device_free = 0) {
    if (!g_history.trace.load(std::memory_order_relaxed)) return;
    size_t max_entries = g_history.max_entries.load(std::memory_order_relaxed);
    if (max_entries == 0) return;
    TraceEntry e;
    e.action = action;
    e.addr = reinterpret_cast<uintptr_t>(ptr);
    e.size = size;
    e.stream = stream;
    e.time_us = c10::getTime() / 1000;
    e.device_free = device_free;
    e.context = std::move(ctx);
    if (st.trace.size() < max_entries) {
      st.trace.push_back(std::move(e));
    } else {
      st.trace[st.trace_next % st.trace.size()] = std::move(e);
      st.trace_next = (st.trace_next + 1) % st.trace.size();
    }
  }

 public:
  // ---------------------------------------------------------------- graph pools
  // [docs:allocator-graph-pools]
  // Captures on `device` whose id is `capture_id` allocate from pool `id`
  // (created on first use; a graph that shares it adds a user).
  void begin_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t id,
                              unsigned long long capture_id) {
    check_device_index(device);
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> g(st.mu);
    auto& pp = st.private_pools[id];
    if (!pp) {
      pp = std::make_unique<PrivatePool>();
      pp->id = id;
    }
    pp->users++;
    st.routes.emplace_back(capture_id, pp.get());
    st.routed.fetch_add(1, std::memory_order_release);
  }

  // The capture is over: its allocations go back to the device's pools.
  // The graph keeps its pool (releasePool gives it up).
  void end_allocate_to_pool(c10::DeviceIndex device, unsigned long long capture_id) {
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> g(st.mu);
    for (auto it = st.routes.begin(); it != st.routes.end(); ++it) {
      if (it->first != capture_id) continue;
      st.routes.erase(it);
      st.routed.fetch_sub(1, std::memory_order_release);
      return;
    }
  }

  // A graph gives its pool up (reset, destruction, failed capture). With no
  // user left, the pool's free segments go back to the runtime at once and
  // the others as their last blocks are freed.
  void release_pool(c10::DeviceIndex device, c10::MempoolId_t id) {
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> g(st.mu);
    auto it = st.private_pools.find(id);
    if (it == st.private_pools.end()) return;
    PrivatePool* pp = it->second.get();
    TORCH_INTERNAL_ASSERT(pp->users > 0, "openreg allocator: graph pool released too often");
    if (--pp->users > 0) return;
    std::vector<Block*> whole;
    for (Pool* pool : {&pp->small, &pp->large})
      for (Block* b : *pool)
        if (!b->is_split()) whole.push_back(b);
    if (whole.empty() && pp->segments == 0) {
      st.private_pools.erase(it);
      return;
    }
    for (Block* b : whole) release_private_segment(st, b);  // may erase the pool
  }

  // [docs:allocator-graph-pools:end]

  // ---------------------------------------------------------------- history
  void record_history(bool enabled, bool trace, ContextRecorder recorder,
                      RecordContext when, size_t max_entries, bool clear) {
    g_history.on = false;
    g_history.trace = enabled && trace;
    g_history.recorder = enabled ? recorder : nullptr;
    g_history.when = int(enabled ? when : RecordContext::NEVER);
    g_history.max_entries = max_entries;
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      DeviceState& st = state(d);
      std::lock_guard<std::mutex> g(st.mu);
      if (clear || !enabled) {
        st.trace.clear();
      } else {
        // Oldest first (so the buffer can grow again), the newest max_entries.
        std::rotate(st.trace.begin(), st.trace.begin() + st.trace_next, st.trace.end());
        if (st.trace.size() > max_entries)
          st.trace.erase(st.trace.begin(), st.trace.end() - max_entries);
      }
      st.trace_next = 0;
    }
    g_history.on = enabled;
  }

  MemorySnapshot snapshot() {
    MemorySnapshot snap;
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      DeviceState& st = state(d);
      std::lock_guard<std::mutex> g(st.mu);
      // Every block is live, in a pool, or awaiting record_stream events.
      std::vector<Block*> heads;
      auto add = [&](Block* b) {
        if (!b->prev) heads.push_back(b);
      };
      for (Block* b = st.live; b; b = b->live_next) add(b);
      for (Block* b : st.small_pool) add(b);
      for (Block* b : st.large_pool) add(b);
      for (auto& [id, pp] : st.private_pools) {
        for (Block* b : pp->small) add(b);
        for (Block* b : pp->large) add(b);
      }
      for (auto& e : st.events) add(e.second);
      for (Block* b : st.cached)
        for (; b; b = b->next_cached) add(b);
      std::sort(heads.begin(), heads.end(), [](Block* a, Block* b) { return a->ptr < b->ptr; });
      heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
      for (Block* h : heads) {
        SegmentInfo seg;
        seg.device = d;
        seg.address = reinterpret_cast<uintptr_t>(h->ptr);
        seg.stream = h->stream;
        seg.small = h->small;
        if (h->pool) seg.pool_id = h->pool->id;
        for (Block* b = h; b; b = b->next) {
          BlockInfo bi;
          bi.address = reinterpret_cast<uintptr_t>(b->ptr);
          bi.size = b->size;
          bi.requested_size = b->allocated || b->event_count > 0 ? b->requested : 0;
          bi.state = b->allocated ? BlockInfo::ACTIVE_ALLOCATED
                     : b->event_count > 0 ? BlockInfo::ACTIVE_AWAITING_FREE
                                          : BlockInfo::INACTIVE;
          bi.context = b->context;
          seg.total_size += b->size;
          seg.blocks.push_back(std::move(bi));
        }
        snap.segments.push_back(std::move(seg));
      }
      std::vector<TraceEntry> trace(st.trace.begin() + st.trace_next, st.trace.end());
      trace.insert(trace.end(), st.trace.begin(), st.trace.begin() + st.trace_next);
      snap.device_traces.push_back(std::move(trace));
    }
    return snap;
  }

  // ---------------------------------------------------------------- fraction
  void set_memory_fraction(double fraction, c10::DeviceIndex device) {
    check_device_index(device);
    TORCH_CHECK(fraction >= 0 && fraction <= 1, "Invalid fraction value: ", fraction,
                ". Allowed range: 0~1");
    size_t free = 0, total = 0;
    {
      DeviceScope scope(device);
      OPENREG_CHECK(orMemGetInfo(&free, &total));
    }
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> g(st.mu);
    st.limited = true;
    st.fraction = fraction;
    st.limit = static_cast<size_t>(fraction * double(total));
  }

  double get_memory_fraction(c10::DeviceIndex device) {
    check_device_index(device);
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> g(st.mu);
    return st.fraction;
  }

 private:
  static void* try_device_malloc(c10::DeviceIndex device, size_t n) {
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

  // Merge with free neighbours and put back in the pool.
  void return_to_pool(DeviceState& st, Block* block) {
    update(st.stats.active, -1, block->small);
    update(st.stats.active_bytes, -int64_t(block->size), block->small);
    merge_into_pool(st, block);
  }

  // Put the cached blocks back into the pool, merged with their neighbours.
  void flush_cached(DeviceState& st) {
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

  void merge_into_pool(DeviceState& st, Block* block) {
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

  // Gives a whole free segment of a graph pool back to the runtime (and the
  // pool itself once it has no segment left and no user).
  void release_private_segment(DeviceState& st, Block* b) {
    PrivatePool* pp = b->pool;
    pp->of(b->small).erase(b);
    free_segment(st, b);
    if (--pp->segments == 0 && pp->users == 0) st.private_pools.erase(pp->id);
  }

  void free_segment(DeviceState& st, Block* b) {
    if (C10_UNLIKELY(history_on())) {
      record(st, TraceEntry::SEGMENT_FREE, b->ptr, b->size, b->stream, nullptr);
    }
    if (orFree(b->ptr) != orSuccess) orGetLastError();  // any device
    update(st.stats.segment, -1, b->small);
    update(st.stats.reserved_bytes, -int64_t(b->size), b->small);
    st.stats.num_device_free++;
    delete b;
  }

  void process_events(DeviceState& st) {
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

  void synchronize_and_free_events(DeviceState& st) {
    st.stats.num_sync_all_streams++;
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
  void release_cached(DeviceState& st, c10::DeviceIndex device) {
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
};

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

}  // namespace

c10::DeviceAllocator* getDeviceAllocator() { return &allocator(); }

c10::DataPtr allocateOn(c10::DeviceIndex device, size_t nbytes) {
  return allocator().allocate_on(device, nbytes);
}

void recordMemoryHistory(bool enabled, bool record_trace, ContextRecorder recorder,
                         RecordContext when, size_t max_entries, bool clear_history) {
  allocator().record_history(enabled, record_trace, recorder, when, max_entries,
                             clear_history);
}

MemorySnapshot memorySnapshot() { return allocator().snapshot(); }

void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id,
                         unsigned long long capture_id) {
  allocator().begin_allocate_to_pool(device, id, capture_id);
}
void endAllocateToPool(c10::DeviceIndex device, unsigned long long capture_id) {
  allocator().end_allocate_to_pool(device, capture_id);
}
void releasePool(c10::DeviceIndex device, c10::MempoolId_t id) {
  allocator().release_pool(device, id);
}

void setMemoryFraction(double fraction, c10::DeviceIndex device) {
  allocator().set_memory_fraction(fraction, device);
}

double getMemoryFraction(c10::DeviceIndex device) {
  return allocator().get_memory_fraction(device);
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

}  // namespace torch_openreg
