// The caching allocator's statistics (CUDA's DeviceStats, read by
// torch.accelerator.memory_stats and torch.openreg.memory_*), the device's
// memory info, and set_per_process_memory_fraction's cap on what a device
// may reserve (new_segment enforces it).
#include "OpenRegAllocatorImpl.h"

#include "OpenRegFunctions.h"

namespace torch_openreg::alloc {

DeviceStats CachingAllocator::getDeviceStats(c10::DeviceIndex device) {
  check_device_index(device);
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> g(st.mu);
  return st.stats;
}

void CachingAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
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

void CachingAllocator::resetPeakStats(c10::DeviceIndex device) {
  check_device_index(device);
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> g(st.mu);
  for (StatArray* a : stat_arrays(st.stats)) {
    for (Stat& s : *a) s.reset_peak();
  }
}

std::pair<size_t, size_t> CachingAllocator::getMemoryInfo(c10::DeviceIndex device) {
  check_device_index(device);
  DeviceScope scope(device);
  size_t free = 0, total = 0;
  OPENREG_CHECK(orMemGetInfo(&free, &total));
  return {free, total};
}

std::vector<StatArray*> CachingAllocator::stat_arrays(DeviceStats& s) {
  return {&s.allocation, &s.segment, &s.active, &s.inactive_split,
          &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
          &s.inactive_split_bytes, &s.requested_bytes};
}

void CachingAllocator::set_memory_fraction(double fraction, c10::DeviceIndex device) {
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

double CachingAllocator::get_memory_fraction(c10::DeviceIndex device) {
  check_device_index(device);
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> g(st.mu);
  return st.fraction;
}

}  // namespace torch_openreg::alloc

namespace torch_openreg {

using namespace alloc;

void setMemoryFraction(double fraction, c10::DeviceIndex device) {
  allocator().set_memory_fraction(fraction, device);
}

double getMemoryFraction(c10::DeviceIndex device) {
  return allocator().get_memory_fraction(device);
}

}  // namespace torch_openreg
