// The caching allocator's graph pools (CUDA's private pools): while a stream
// captures, the allocations made on it (and on the streams that joined its
// capture) come from the graph's private pool (malloc_block routes them);
// blocks freed there go back to that pool only, so their memory stays
// reserved for replays, and graphs that share a pool id share its blocks.
// The pool's segments are given back once no graph uses it and its blocks
// are free.
#include "OpenRegAllocatorImpl.h"

#include "OpenRegFunctions.h"

namespace torch_openreg::alloc {

// [docs:allocator-graph-pools]
// Captures on `device` whose id is `capture_id` allocate from pool `id`
// (created on first use; a graph that shares it adds a user).
void CachingAllocator::begin_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t id,
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
void CachingAllocator::end_allocate_to_pool(c10::DeviceIndex device,
                                            unsigned long long capture_id) {
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
void CachingAllocator::release_pool(c10::DeviceIndex device, c10::MempoolId_t id) {
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

// Gives a whole free segment of a graph pool back to the runtime (and the
// pool itself once it has no segment left and no user).
void CachingAllocator::release_private_segment(DeviceState& st, Block* b) {
  PrivatePool* pp = b->pool;
  pp->of(b->small).erase(b);
  free_segment(st, b);
  if (--pp->segments == 0 && pp->users == 0) st.private_pools.erase(pp->id);
}

}  // namespace torch_openreg::alloc

namespace torch_openreg {

using namespace alloc;

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

}  // namespace torch_openreg
