#include "OpenRegFunctions.h"

#include <array>
#include <cstring>
#include <atomic>
#include <mutex>
#include <string>

namespace torch_openreg {

void throw_runtime_error(orError_t err, const char* call) {
  orGetLastError();  // consume the runtime's sticky copy
  std::string detail = orGetLastErrorMessage();
  if (err == orErrorStreamRace) throw_stream_race(detail);
  // Name the call when the check wraps one (not a variable holding a code);
  // the runtime's own detail names the API function either way.
  std::string where = std::strchr(call, '(') ? std::string(" in ") + call : "";
  std::string msg = std::string("openreg error") + where + ": " +
                    orGetErrorName(err) + " (" + orGetErrorString(err) + ")";
  if (!detail.empty()) msg += ": " + detail;
  if (err == orErrorMemoryAllocation) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
  }
  TORCH_CHECK(false, msg);
}

c10::DeviceIndex device_count() noexcept {
  static const c10::DeviceIndex count = [] {
    int n = 0;
    if (orGetDeviceCount(&n) != orSuccess) {
      orGetLastError();
      return c10::DeviceIndex(0);
    }
    return static_cast<c10::DeviceIndex>(n);
  }();
  return count;
}

void check_device_index(c10::DeviceIndex index) {
  auto n = device_count();
  TORCH_CHECK(index >= 0 && index < n, "Invalid openreg device index ",
              static_cast<int>(index), ": ", static_cast<int>(n),
              " openreg device(s) are available (set OPENREG_DEVICE_COUNT to "
              "change that)");
}

c10::DeviceIndex current_device() {
  int d = 0;
  OPENREG_CHECK(orGetDevice(&d));
  return static_cast<c10::DeviceIndex>(d);
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  OPENREG_CHECK(orSetDevice(index));
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  auto prev = current_device();
  if (index != prev) set_device(index);
  return prev;
}

c10::DeviceIndex maybe_exchange_device(c10::DeviceIndex index) {
  auto prev = current_device();
  if (index != prev && index >= 0 && index < device_count()) {
    orSetDevice(index);
  }
  return prev;
}

bool is_pinned_pointer(const void* p) noexcept {
  orPointerAttributes attr{};
  if (orPointerGetAttributes(&attr, p) != orSuccess) {
    orGetLastError();
    return false;
  }
  return attr.type == orMemoryTypeHost;
}

intptr_t kernel_view_offset(c10::DeviceIndex index) {
  // The offset of a device never changes once it is initialised: cache it.
  static std::array<std::atomic<intptr_t>, OR_MAX_DEVICES> cache{};
  static std::array<std::atomic<bool>, OR_MAX_DEVICES> known{};
  if (C10_LIKELY(index >= 0 && index < OR_MAX_DEVICES &&
                 known[index].load(std::memory_order_acquire)))
    return cache[index].load(std::memory_order_relaxed);
  check_device_index(index);
  intptr_t off = 0;
  OPENREG_CHECK(orDeviceGetKernelViewOffset(index, &off));
  cache[index].store(off, std::memory_order_relaxed);
  known[index].store(true, std::memory_order_release);
  return off;
}

}  // namespace torch_openreg
