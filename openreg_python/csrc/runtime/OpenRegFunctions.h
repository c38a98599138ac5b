// Device management for the torch glue. Light header: c10 only.
#pragma once

#include <c10/core/Device.h>
#include <c10/macros/Export.h>

#include "OpenRegException.h"

namespace torch_openreg {

// Never throws: a broken runtime configuration reports zero devices, as
// DeviceGuardImplInterface::deviceCount requires.
c10::DeviceIndex device_count() noexcept;
// Throws a clear error if `index` is not a valid openreg device.
void check_device_index(c10::DeviceIndex index);
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);
c10::DeviceIndex exchange_device(c10::DeviceIndex index);
c10::DeviceIndex maybe_exchange_device(c10::DeviceIndex index);

// Makes `index` the current device for a scope (runtime calls such as
// orMalloc, orMemGetInfo and orDeviceSynchronize act on the current device)
// and restores the previous one on exit, exceptions included.
class DeviceScope {
 public:
  explicit DeviceScope(c10::DeviceIndex index) : prev_(exchange_device(index)) {}
  ~DeviceScope() {
    if (orSetDevice(prev_) != orSuccess) orGetLastError();
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  c10::DeviceIndex prev_;
};

// True if `p` lies in pinned host memory (orMallocHost). Never throws.
bool is_pinned_pointer(const void* p) noexcept;

// Offset from a device address to the kernel view of the same byte. Kernels
// that run ATen's CPU code on device memory use it (see aten/core/KernelView.h).
intptr_t kernel_view_offset(c10::DeviceIndex index);

}  // namespace torch_openreg
