// c10::impl::DeviceGuardImplInterface for openreg: how c10 switches devices,
// streams and events without knowing about our runtime. Registered with
// C10_REGISTER_GUARD_IMPL so that c10::DeviceGuard, c10::Stream, c10::Event,
// torch.Stream/torch.Event and the autograd engine all work on openreg.
#include "OpenRegAllocator.h"
#include "OpenRegFunctions.h"
#include "OpenRegStream.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace torch_openreg {

struct OpenRegGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return static_type; }

  // torch.accelerator.set_stream(stream) makes the stream's device current
  // through setDevice(Device(openreg, stream.device_index())) before it
  // checks the stream's type: a CPU stream arrives here as an openreg device
  // without an index. Say that, not "invalid device index -1".
  static void check_current(c10::Device d) {
    TORCH_CHECK(d.type() == static_type, "expected an openreg device, got ", d);
    TORCH_CHECK(d.has_index(), "openreg: cannot make '", d, "' the current device: it has no "
                "device index, as a stream or device of another device type has none on openreg "
                "(for example a CPU stream given to torch.accelerator.set_stream, which takes an "
                "openreg stream)");
  }

  c10::Device exchangeDevice(c10::Device d) const override {
    check_current(d);
    return c10::Device(static_type, exchange_device(d.index()));
  }

  c10::Device getDevice() const override {
    return c10::Device(static_type, current_device());
  }

  void setDevice(c10::Device d) const override {
    check_current(d);
    set_device(d.index());
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    maybe_exchange_device(d.index());
  }

  c10::Stream getStream(c10::Device d) const override {
    return getCurrentStream(d.index());
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    return torch_openreg::getDefaultStream(d.index());
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority) const override {
    int least = 0, greatest = 0;
    orDeviceGetStreamPriorityRange(&least, &greatest);
    return getStreamFromPool(d.index(), isHighPriority ? greatest : least);
  }

  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return torch_openreg::getNewStream(d.index(), priority);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    return exchangeCurrentStream(s);
  }

  void* getStreamNativeHandle(const c10::Stream s) const override {
    return static_cast<void*>(nativeStream(s));
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  // [docs:guard-capability]
  // torch.accelerator.get_device_capability(): the dtypes a tensor can have
  // on the device. The runtime's memory is untyped bytes and openreg's
  // kernels are ATen's CPU kernels, so these are the dtypes whose CPU copy
  // kernel converts, plus the quantized dtypes, whose tensors openreg holds
  // with the CPU's quantized kernels (QuantizedPrivateUse1, docs/operators.md);
  // not the bit-container and sub-byte shells (bits8, int1..int7,
  // uint1..uint7, float4_e2m1fn_x2), which no kernel converts, on the CPU
  // either.
  // Vendor: list what your hardware holds.
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    check_device_index(d.has_index() ? d.index() : current_device());
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
    for (auto i : {c10::kIndex_Byte, c10::kIndex_Char, c10::kIndex_Short, c10::kIndex_Int,
                   c10::kIndex_Long, c10::kIndex_UInt16, c10::kIndex_UInt32,
                   c10::kIndex_UInt64, c10::kIndex_Bool, c10::kIndex_Half,
                   c10::kIndex_BFloat16, c10::kIndex_Float, c10::kIndex_Double,
                   c10::kIndex_ComplexHalf, c10::kIndex_ComplexFloat,
                   c10::kIndex_ComplexDouble, c10::kIndex_Float8_e5m2,
                   c10::kIndex_Float8_e4m3fn, c10::kIndex_Float8_e5m2fnuz,
                   c10::kIndex_Float8_e4m3fnuz, c10::kIndex_Float8_e8m0fnu,
                   c10::kIndex_QInt8, c10::kIndex_QUInt8, c10::kIndex_QInt32,
                   c10::kIndex_QUInt4x2, c10::kIndex_QUInt2x4}) {
      cap.capability_data.capability_bits |= 1ULL << i;
    }
    return cap;
  }
  // [docs:guard-capability:end]

  // ------------------------------------------------------------ events
  void destroyEvent(void* event, const c10::DeviceIndex /*device*/) const noexcept override {
    if (event) orEventDestroy(static_cast<orEvent_t>(event));
  }

  // [docs:guard-record]
  void record(void** event, const c10::Stream& stream,
              const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "Event device index ", static_cast<int>(device_index),
                " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    auto* or_event = static_cast<orEvent_t>(*event);
    if (!or_event) {
      // PYTORCH_DEFAULT disables timing, BACKEND_DEFAULT enables it, as for
      // CUDA (torch.Event(enable_timing=True) asks for BACKEND_DEFAULT).
      unsigned flags = flag == c10::EventFlag::BACKEND_DEFAULT
                           ? orEventDefault
                           : orEventDisableTiming;
      DeviceScope scope(stream.device_index());
      OPENREG_CHECK(orEventCreateWithFlags(&or_event, flags));
      *event = or_event;
    }
    OPENREG_CHECK(orEventRecord(or_event, nativeStream(stream)));
  }
  // [docs:guard-record:end]

  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    OPENREG_CHECK(orStreamWaitEvent(nativeStream(stream),
                                    static_cast<orEvent_t>(event), 0));
  }

  bool queryEvent(void* event) const override {
    if (!event) return true;
    orError_t err = orEventQuery(static_cast<orEvent_t>(event));
    if (err == orErrorNotReady) return false;
    OPENREG_CHECK(err);
    return true;
  }

  void synchronizeEvent(void* event) const override {
    if (!event) return;
    OPENREG_CHECK(orEventSynchronize(static_cast<orEvent_t>(event)));
  }

  double elapsedTime(void* start, void* end,
                     const c10::DeviceIndex /*device*/) const override {
    TORCH_CHECK(start && end,
                "Both events must be recorded before calculating elapsed time.");
    float ms = 0;
    OPENREG_CHECK(orEventElapsedTime(&ms, static_cast<orEvent_t>(start),
                                     static_cast<orEvent_t>(end)));
    return static_cast<double>(ms);
  }

  // ------------------------------------------------------------ streams
  bool queryStream(const c10::Stream& stream) const override {
    orError_t err = orStreamQuery(nativeStream(stream));
    if (err == orErrorNotReady) return false;
    OPENREG_CHECK(err);
    return true;
  }

  bool isStreamCapturing(const c10::Stream& stream) const override {
    orStreamCaptureStatus status = orStreamCaptureStatusNone;
    OPENREG_CHECK(orStreamIsCapturing(nativeStream(stream), &status));
    return status != orStreamCaptureStatusNone;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    OPENREG_CHECK(orStreamSynchronize(nativeStream(stream)));
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    DeviceScope scope(device_index);
    OPENREG_CHECK(orDeviceSynchronize());
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                             const c10::Stream& stream) const override {
    getDeviceAllocator()->recordStream(data_ptr, stream);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, OpenRegGuardImpl);

}  // namespace torch_openreg
