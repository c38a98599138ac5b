// The caching allocator's memory history (torch.openreg.memory._record_memory_history):
// a context per live block and a ring buffer of actions per device, and the
// snapshots built from them (torch.openreg.memory._snapshot). Off, the
// history costs one branch per allocation and per free.
#include "OpenRegAllocatorImpl.h"

#include "OpenRegFunctions.h"

#include <c10/util/ApproximateClock.h>

#include <algorithm>

namespace torch_openreg::alloc {

// Append to the device's action history (a ring buffer), if kept.
void CachingAllocator::record(DeviceState& st, TraceEntry::Action action, const void* ptr,
                              size_t size, c10::StreamId stream,
                              std::shared_ptr<c10::GatheredContext> ctx, size_t device_free) {
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

void CachingAllocator::record_history(bool enabled, bool trace, ContextRecorder recorder,
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

MemorySnapshot CachingAllocator::snapshot() {
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

History g_history;

}  // namespace torch_openreg::alloc

namespace torch_openreg {

using namespace alloc;

void recordMemoryHistory(bool enabled, bool record_trace, ContextRecorder recorder,
                         RecordContext when, size_t max_entries, bool clear_history) {
  allocator().record_history(enabled, record_trace, recorder, when, max_entries,
                             clear_history);
}

MemorySnapshot memorySnapshot() { return allocator().snapshot(); }

}  // namespace torch_openreg
