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

// Kernels that run ATen's CPU code on device memory allocate their outputs
// and workspaces here: the returned DataPtr points at the kernel view of a
// device block and claims device CPU, so CPU code can write it. Turn it into
// a real openreg DataPtr with rehomeKernelViewDataPtr().
c10::DataPtr allocateKernelView(c10::DeviceIndex device, size_t nbytes);
// True if `ptr` came from allocateKernelView (device CPU, our deleter).
bool isKernelViewDataPtr(const c10::DataPtr& ptr);
// Frees a kernel-view allocation by address (Allocator::raw_deallocate
// path); false if `kv` is not one.
bool freeKernelViewPointer(void* kv);
// Converts a DataPtr made by allocateKernelView on `device` into the openreg
// DataPtr of the same block, without copying.
c10::DataPtr rehomeKernelViewDataPtr(c10::DataPtr&& ptr, c10::DeviceIndex device);
// True if the DataPtr is an openreg device allocation made by this allocator.
bool isDeviceDataPtr(const c10::DataPtr& ptr);

}  // namespace torch_openreg
