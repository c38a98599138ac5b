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
//    before torch.OutOfMemoryError is raised with a CUDA-like message.
//
// Vendor: this file is reusable as is; only the orMalloc/orFree/orEvent*
// calls name your runtime.
#include "OpenRegAllocator.h"

#include "OpenRegFunctions.h"
#include "OpenRegStream.h"
#include "../aten/Sanitizer.h"

#include <c10/util/flat_hash_map.h>

#include <deque>
#include <mutex>
#include <set>
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

struct Block {
  c10::DeviceIndex device = 0;
  c10::StreamId stream = 0;  // the allocation stream
  size_t size = 0;
  size_t requested = 0;
  char* ptr = nullptr;
  bool allocated = false;
  bool small = false;
  int event_count = 0;  // outstanding record_stream events
  Block* prev = nullptr;
  Block* next = nullptr;
  ska::flat_hash_set<c10::Stream> stream_uses;

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
  ska::flat_hash_set<Block*> live;  // allocated blocks (pointer identity)
  std::deque<std::pair<orEvent_t, Block*>> events;
  DeviceStats stats;
};

class CachingAllocator final : public c10::DeviceAllocator {
 public:
  // ---------------------------------------------------------------- alloc
  Block* malloc_block(c10::DeviceIndex device, size_t requested) {
    check_device_index(device);
    c10::StreamId stream = getCurrentStream(device).id();
    DeviceState& st = state(device);
    std::unique_lock<std::mutex> lk(st.mu);
    process_events(st);
    size_t size = round_size(requested);
    bool small = size <= kSmallSize;
    Pool& pool = small ? st.small_pool : st.large_pool;

    Block* block = find_free(pool, stream, size);
    if (!block) {
      block = new_segment(st, device, stream, size, small, requested);
    }
    // Take it out of the pool, splitting off a worthwhile remainder.
    pool.erase(block);
    if (block->is_split()) {
      update(st.stats.inactive_split, -1, small);
      update(st.stats.inactive_split_bytes, -int64_t(block->size), small);
    }
    size_t remaining = block->size - size;
    if ((small && remaining >= kMinBlockSize) || (!small && remaining > kSmallSize)) {
      auto* rest = new Block();
      rest->device = device;
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
    st.live.insert(block);
    update(st.stats.allocation, 1, small);
    update(st.stats.allocated_bytes, int64_t(block->size), small);
    update(st.stats.active, 1, small);
    update(st.stats.active_bytes, int64_t(block->size), small);
    update(st.stats.requested_bytes, int64_t(requested), small);
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
    std::lock_guard<std::mutex> g(st.mu);
    TORCH_INTERNAL_ASSERT(block->allocated, "openreg allocator: double free");
    // Stream sanitizer: its history stays, so a reuse racing with the last
    // users is reported as such (the missing record_stream case).
    if (C10_UNLIKELY(sanitizer_on())) orSanitizerMarkFreed(block->ptr, block->size);
    block->allocated = false;
    st.live.erase(block);
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

  static void update(StatArray& a, int64_t delta, bool small) {
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
                     size_t requested) {
    size_t seg = segment_size(size);
    void* ptr = try_device_malloc(device, seg);
    if (!ptr) {
      // Flush the cache and retry once, as CUDA's allocator does.
      st.stats.num_alloc_retries++;
      synchronize_and_free_events(st);
      release_cached(st, device);
      ptr = try_device_malloc(device, seg);
    }
    if (!ptr && seg > size) {
      // A smaller segment may still fit.
      seg = size;
      ptr = try_device_malloc(device, seg);
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
      using c10::CachingAllocator::format_size;
      TORCH_CHECK_WITH(
          OutOfMemoryError, false,
          "openreg out of memory. Tried to allocate ", format_size(requested),
          ". Device openreg:", static_cast<int>(device),
          " has a total capacity of ", format_size(total), " of which ",
          format_size(free), " is free. Of the allocated memory ",
          format_size(allocated), " is allocated by PyTorch, and ",
          format_size(reserved - allocated),
          " is reserved by PyTorch but unallocated. (The capacity is set by "
          "OPENREG_DEVICE_MEMORY.)");
    }
    auto* b = new Block();
    b->device = device;
    b->stream = stream;
    b->size = seg;
    b->small = small;
    b->ptr = static_cast<char*>(ptr);
    (small ? st.small_pool : st.large_pool).insert(b);
    update(st.stats.segment, 1, small);
    update(st.stats.reserved_bytes, int64_t(seg), small);
    st.stats.num_device_alloc++;
    return b;
  }

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
    bool small = block->small;
    Pool& pool = small ? st.small_pool : st.large_pool;
    update(st.stats.active, -1, small);
    update(st.stats.active_bytes, -int64_t(block->size), small);
    for (Block* nb : {block->prev, block->next}) {
      if (!nb || nb->allocated || nb->event_count > 0) continue;
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
      delete nb;
    }
    if (block->is_split()) {
      update(st.stats.inactive_split, 1, small);
      update(st.stats.inactive_split_bytes, int64_t(block->size), small);
    }
    pool.insert(block);
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
      if (--block->event_count == 0) return_to_pool(st, block);
    }
  }

  void synchronize_and_free_events(DeviceState& st) {
    st.stats.num_sync_all_streams++;
    for (auto& [ev, block] : st.events) {
      if (orEventSynchronize(ev) != orSuccess) orGetLastError();
      orEventDestroy(ev);
      if (--block->event_count == 0) return_to_pool(st, block);
    }
    st.events.clear();
  }

  // Give every entirely free segment back to the runtime.
  void release_cached(DeviceState& st, c10::DeviceIndex device) {
    for (Pool* pool : {&st.small_pool, &st.large_pool}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev || b->next) {
          ++it;
          continue;
        }
        it = pool->erase(it);
        if (orFree(b->ptr) != orSuccess) orGetLastError();  // any device
        update(st.stats.segment, -1, b->small);
        update(st.stats.reserved_bytes, -int64_t(b->size), b->small);
        st.stats.num_device_free++;
        delete b;
      }
    }
  }
};

CachingAllocator& allocator() {
  static auto* a = new CachingAllocator();
  return *a;
}

void deleter(void* ctx) {
  if (ctx) allocator().free_block_from_user(static_cast<Block*>(ctx));
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

bool isDeviceDataPtr(const c10::DataPtr& ptr) {
  return ptr.get_deleter() == &deleter &&
         ptr.device().type() == c10::DeviceType::PrivateUse1;
}

}  // namespace torch_openreg
