// Private to the caching allocator's files: its blocks, pools and per-device
// state, and the CachingAllocator class, whose members are defined by job:
//   OpenRegAllocator.cpp         allocation, free, segments, record_stream, the c10 API
//   OpenRegAllocatorPools.cpp    graph capture's private pools
//   OpenRegAllocatorStats.cpp    statistics, memory info, the memory fraction
//   OpenRegAllocatorHistory.cpp  memory history and snapshots
//   OpenRegAllocatorAsan.{h,cpp}  ASan builds: free memory poisoned in stream order
// OpenRegAllocator.h is the public side (what the rest of the glue calls).
#pragma once

#include "OpenRegAllocator.h"
#include "OpenRegFunctions.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/flat_hash_map.h>

#include <openreg.h>

#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace torch_openreg::alloc {

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

// OPENREG_MEMCHECK (docs/memcheck.md): no caching. Each allocation is a
// segment of exactly the requested size, so the runtime can place it at a
// guard page, and a freed one goes back to the runtime once the work queued
// before its free has run (as PYTORCH_NO_CUDA_MEMORY_CACHING=1 on CUDA, but
// in stream order). Graph pools keep their blocks: a replay reuses them.
bool memcheck_on();

inline size_t round_size(size_t n) {
  if (C10_UNLIKELY(memcheck_on())) return n;
  if (n < kMinBlockSize) return kMinBlockSize;
  return (n + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

inline size_t segment_size(size_t n) {
  if (C10_UNLIKELY(memcheck_on())) return n;
  if (n <= kSmallSize) return kSmallBuffer;
  if (n < kMinLargeAlloc) return kLargeBuffer;
  return (n + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

// The DataPtr deleter of every block (OpenRegAllocator.cpp).
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
  // Freed blocks whose other streams' events wait until no capture routes
  // on this device: an event recorded in a capture cannot be queried (the
  // query would invalidate it), as CUDA's allocator defers them too.
  std::vector<Block*> events_deferred_until_no_capture;
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

  bool can_cache(const Block* b) const {
    return b->small && b->size <= kCachedMax &&
           cached_count[b->size / kMinBlockSize] < kCachedPerSize;
  }
  bool cache_block(Block* b) {
    size_t i = b->size / kMinBlockSize;
    if (!can_cache(b)) return false;
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
extern History g_history;  // OpenRegAllocatorHistory.cpp

inline bool history_on() {
  return g_history.on.load(std::memory_order_relaxed);
}

class CachingAllocator final : public c10::DeviceAllocator {
 public:
  // c10::DeviceAllocator (OpenRegAllocator.cpp; the statistics: OpenRegAllocatorStats.cpp)
  c10::DataPtr allocate(size_t nbytes) override {
    return allocate_on(current_device(), nbytes);
  }
  c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes);
  c10::DeleterFnPtr raw_deleter() const override { return &deleter; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;
  DeviceState& state(c10::DeviceIndex device) {
    // (Made out of line, so that this lookup of every allocation and free
    // inlines.)
    static DeviceState* const states = make_states();
    return states[device];
  }
  C10_NOINLINE static DeviceState* make_states() { return new DeviceState[OR_MAX_DEVICES]; }

  // allocation and free (OpenRegAllocator.cpp): the hot path, and the
  // general functions it falls back to
  Block* malloc_block(c10::DeviceIndex device, size_t requested);
  void free_block_from_user(Block* block);
  C10_NOINLINE Block* malloc_block_general(c10::DeviceIndex device, size_t requested);
  C10_NOINLINE void free_block_general(Block* block);

  // graph pools (OpenRegAllocatorPools.cpp)
  void begin_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t id,
                              unsigned long long capture_id);
  void end_allocate_to_pool(c10::DeviceIndex device, unsigned long long capture_id);
  void release_pool(c10::DeviceIndex device, c10::MempoolId_t id);

  // history and snapshots (OpenRegAllocatorHistory.cpp)
  void record_history(bool enabled, bool trace, ContextRecorder recorder,
                      RecordContext when, size_t max_entries, bool clear);
  MemorySnapshot snapshot();

  // memory fraction (OpenRegAllocatorStats.cpp)
  void set_memory_fraction(double fraction, c10::DeviceIndex device);
  double get_memory_fraction(c10::DeviceIndex device);

 private:
  // statistics (inline: the hot path updates them)
  C10_ALWAYS_INLINE static void update(StatArray& a, int64_t delta, bool small) {
    auto apply = [&](Stat& s) {
      if (delta >= 0) s.increase(size_t(delta));
      else s.decrease(size_t(-delta));
    };
    apply(a[size_t(StatType::AGGREGATE)]);
    apply(a[size_t(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)]);
  }
  static std::vector<StatArray*> stat_arrays(DeviceStats& s);

  // segments and pools (OpenRegAllocator.cpp)
  static Block* find_free(Pool& pool, c10::StreamId stream, size_t size);
  Block* new_segment(DeviceState& st, c10::DeviceIndex device,
                     c10::StreamId stream, size_t size, bool small,
                     size_t requested,
                     const std::shared_ptr<c10::GatheredContext>& ctx,
                     PrivatePool* private_pool);
  static void* try_segment_malloc(DeviceState& st, c10::DeviceIndex device, size_t n);
  static void* try_device_malloc(c10::DeviceIndex device, size_t n);
  static void free_completed(DeviceState& st, Block* block,
                             std::shared_ptr<c10::GatheredContext> ctx);
  void return_to_pool(DeviceState& st, Block* block);
  void flush_cached(DeviceState& st);
  void merge_into_pool(DeviceState& st, Block* block);
  void free_segment(DeviceState& st, Block* b);
  void process_events(DeviceState& st);
  void synchronize_and_free_events(DeviceState& st);
  void insert_events(DeviceState& st, Block* block);
  void release_cached(DeviceState& st, c10::DeviceIndex device);

  // graph pools (OpenRegAllocatorPools.cpp)
  void release_private_segment(DeviceState& st, Block* b);

  // history (OpenRegAllocatorHistory.cpp)
  static void record(DeviceState& st, TraceEntry::Action action, const void* ptr,
                     size_t size, c10::StreamId stream,
                     std::shared_ptr<c10::GatheredContext> ctx, size_t device_free = 0);
};

// The process's allocator (never destroyed: tensors may outlive static destructors).
CachingAllocator& allocator();

}  // namespace torch_openreg::alloc
