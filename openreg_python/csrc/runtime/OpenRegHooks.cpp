// PrivateUse1HooksInterface: the entry points ATen's generic code calls for
// a PrivateUse1 backend (device count and switching, generators, pinned
// memory, pointer ownership, storage resizing, lazy initialisation).
#include "OpenRegAllocator.h"
#include "OpenRegFunctions.h"
#include "OpenRegGenerator.h"
#include "OpenRegStream.h"

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/StorageImpl.h>

#include <atomic>

namespace torch_openreg {
namespace {

std::atomic<bool> g_initialized{false};

struct OpenRegHooks final : public at::PrivateUse1HooksInterface {
  // Called once by at::globalContext().lazyInitDevice(PrivateUse1), i.e. by
  // torch.openreg._lazy_init() and the first use of a device.
  void init() const override {
    c10::DeviceIndex n = device_count();
    if (n == 0) {
      int count = 0;
      orError_t err = orGetDeviceCount(&count);
      OPENREG_CHECK(err);  // surfaces a bad OPENREG_* environment
    }
    for (c10::DeviceIndex i = 0; i < n; ++i) getDefaultStream(i);
    g_initialized = true;
  }

  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return g_initialized.load() && device_index >= 0 &&
           device_index < device_count();
  }

  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return maybe_exchange_device(device);
  }

  // [docs:hooks-generator]
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return getDefaultOpenRegGenerator(device_index);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return createOpenRegGenerator(device_index);
  }
  // [docs:hooks-generator:end]

  at::Device getDeviceFromPtr(void* data) const override {
    orPointerAttributes attr{};
    OPENREG_CHECK(orPointerGetAttributes(&attr, data));
    TORCH_CHECK(attr.type == orMemoryTypeDevice, "openreg: pointer ", data,
                " is not openreg device memory");
    return at::Device(at::DeviceType::PrivateUse1,
                      static_cast<c10::DeviceIndex>(attr.device));
  }

  bool isPinnedPtr(const void* data) const override { return is_pinned_pointer(data); }

  at::Allocator* getPinnedMemoryAllocator() const override {
    return at::getHostAllocator(at::kPrivateUse1);
  }

  // storage.resize_() and tensor.resize_() on openreg storages.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    TORCH_CHECK(static_cast<int64_t>(newsize) >= 0, "openreg: cannot resize a storage to ",
                static_cast<int64_t>(newsize), " bytes: the size is negative");
    size_t old = impl->nbytes();
    c10::DeviceIndex device = storage.device().index();
    c10::DataPtr fresh = allocateOn(device, newsize);
    size_t keep = std::min(old, newsize);
    if (keep > 0 && impl->data_ptr().get()) {
      OPENREG_CHECK(orMemcpyAsync(fresh.get(), impl->data_ptr().get(), keep,
                                  orMemcpyDeviceToDevice, currentNativeStream(device)));
    }
    // The old block is freed on the current stream after the copy, which the
    // caching allocator's per-stream reuse keeps ordered.
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

struct Registrar {
  Registrar() { at::RegisterPrivateUse1HooksInterface(new OpenRegHooks()); }
} g_registrar;

}  // namespace
}  // namespace torch_openreg
