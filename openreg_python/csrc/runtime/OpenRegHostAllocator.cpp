// Pinned host memory: ATen's CachingHostAllocatorImpl with openreg's runtime
// underneath. Registered for PrivateUse1 so that tensor.pin_memory(),
// is_pinned() and torch.accelerator.empty_host_cache() work, and so that an
// async copy can keep a pinned block alive until the copy has run.
#include "OpenRegFunctions.h"
#include "OpenRegStream.h"
#include "aten/core/Sanitizer.h"

#include <ATen/core/CachingHostAllocator.h>

namespace torch_openreg {
namespace {

// Movable owner of a runtime event (the impl stores events by value).
struct HostEvent {
  orEvent_t ev = nullptr;
  HostEvent() = default;
  HostEvent(HostEvent&& o) noexcept : ev(o.ev) { o.ev = nullptr; }
  HostEvent& operator=(HostEvent&& o) noexcept {
    std::swap(ev, o.ev);
    return *this;
  }
  HostEvent(const HostEvent&) = delete;
  ~HostEvent() {
    if (ev) orEventDestroy(ev);
  }
};

struct OpenRegHostAllocatorImpl
    : public at::CachingHostAllocatorImpl<c10::Stream, HostEvent> {
  using Base = at::CachingHostAllocatorImpl<c10::Stream, HostEvent>;

 public:
  std::pair<void*, void*> allocate(size_t size) override {
    auto r = Base::allocate(size);
    // Stream sanitizer: a block is handed out only once the events of the
    // copies that used it have completed, so its past accesses are over.
    if (C10_UNLIKELY(sanitizer_on()) && r.first) {
      auto* block = static_cast<at::HostBlock<c10::Stream>*>(r.second);
      OPENREG_CHECK(orSanitizerRelease(r.first, block->size_, nullptr));
    }
    return r;
  }

 private:
  void allocate_host_memory(size_t size, void** ptr) override {
    OPENREG_CHECK(orMallocHost(ptr, size));
  }

  void free_block(at::HostBlock<c10::Stream>* block) override {
    OPENREG_CHECK(orFreeHost(block->ptr_));
  }

  void record_stream(std::optional<std::vector<HostEvent>>& events,
                     c10::Stream stream) override {
    HostEvent e;
    OPENREG_CHECK(orEventCreateWithFlags(&e.ev, orEventDisableTiming));
    OPENREG_CHECK(orEventRecord(e.ev, nativeStream(stream)));
    events->push_back(std::move(e));
  }

  bool query_event(HostEvent& event) override {
    orError_t err = orEventQuery(event.ev);
    if (err == orErrorNotReady) return false;
    OPENREG_CHECK(err);
    return true;
  }

  c10::Stream get_current_stream() const override {
    return getCurrentStream(current_device());
  }

  bool stream_is_capturing(c10::Stream stream) const override {
    orStreamCaptureStatus status = orStreamCaptureStatusNone;
    OPENREG_CHECK(orStreamIsCapturing(nativeStream(stream), &status));
    return status != orStreamCaptureStatusNone;
  }
};

DECLARE_HOST_ALLOCATOR(OpenRegHostAllocator, OpenRegHostAllocatorImpl,
                       openreg_host_deleter, openreg_host_allocator)

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &openreg_host_allocator)

}  // namespace
}  // namespace torch_openreg
