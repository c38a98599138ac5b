// The caching device allocator (a c10::DeviceAllocator, so that
// torch.accelerator.memory_* and torch.openreg.memory_* work). Light header.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>

namespace torch_openreg {

c10::DeviceAllocator* getDeviceAllocator();

// An openreg DataPtr of `nbytes` on `device`, whatever the current device
// is (Allocator::allocate uses the current one).
c10::DataPtr allocateOn(c10::DeviceIndex device, size_t nbytes);

// True if the DataPtr is an openreg device allocation made by this allocator.
bool isDeviceDataPtr(const c10::DataPtr& ptr);

}  // namespace torch_openreg
