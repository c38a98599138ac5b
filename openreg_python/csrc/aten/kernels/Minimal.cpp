// The operators every PrivateUse1 backend must provide itself: allocation
// (empty, empty_strided), metadata/view ops, resizing, set_, copies between
// devices and _local_scalar_dense. Everything else goes through the
// zero-copy fallback (Fallback.cpp) or the native kernels of later files.
#include "aten/graph/CaptureHook.h"
#include "aten/random/Dropout.h"
#include "aten/core/KernelView.h"

#include "runtime/OpenRegAllocator.h"
#include "runtime/OpenRegGenerator.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/_empty_affine_quantized_native.h>
#include <ATen/ops/_empty_per_channel_affine_quantized_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_quantized_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/Functions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

namespace torch_openreg {
namespace {

c10::DeviceIndex target_device(std::optional<c10::Device> device) {
  if (device && device->has_index()) {
    check_device_index(device->index());
    return device->index();
  }
  return current_device();
}

void check_dense_layout(std::optional<c10::Layout> layout) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      !layout || *layout == c10::kStrided,
      "openreg supports only strided (dense) tensors; layout ", *layout,
      " is not implemented for the openreg device");
}

// ------------------------------------------------------------ factories
at::Tensor empty_memory_format(c10::IntArrayRef size,
                               std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  check_dense_layout(layout);
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
  DeviceScope scope(target_device(device));  // the allocator uses the current device
  return at::detail::empty_generic(size, getDeviceAllocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_dense_layout(layout);
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
  return empty_strided_on(target_device(device), size, stride, c10::dtype_or_default(dtype));
}

// ------------------------------------------------------------ resizing
void grow_storage(c10::TensorImpl* impl, size_t nbytes) {
  const c10::Storage& storage = impl->unsafe_storage();
  if (!storage) {
    c10::Storage fresh(c10::Storage::use_byte_size_t(), nbytes,
                       allocateOn(impl->device().index(), nbytes), getDeviceAllocator(),
                       /*resizable=*/true);
    impl->set_storage_keep_dtype(std::move(fresh));
  } else if (nbytes > storage.nbytes()) {
    at::detail::getPrivateUse1Hooks().resizePrivateUse1Bytes(storage, nbytes);
  }
}

void resize_impl(c10::TensorImpl* impl, c10::IntArrayRef size,
                 std::optional<c10::IntArrayRef> stride) {
  if (impl->sizes() == size && (!stride || impl->strides() == *stride)) return;
  const auto itemsize = impl->dtype().itemsize();
  const auto offset = impl->storage_offset();
  size_t nbytes = 0;
  if (stride) {
    impl->set_sizes_and_strides(size, *stride);
    nbytes = at::detail::computeStorageNbytes(size, *stride, itemsize, offset);
  } else {
    impl->set_sizes_contiguous(size);
    nbytes = at::detail::computeStorageNbytesContiguous(size, itemsize, offset);
  }
  grow_storage(impl, nbytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  for (auto s : size) {
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s,
                ": ", size);
  }
  auto* impl = self.unsafeGetTensorImpl();
  resize_impl(impl, size, std::nullopt);
  if (memory_format) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "Unsupported memory format", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, source, storage_offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  std::optional<c10::IntArrayRef> stride_opt =
      stride.data() != nullptr ? std::optional<c10::IntArrayRef>(stride) : std::nullopt;
  resize_impl(self.unsafeGetTensorImpl(), size, stride_opt);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       allocateOn(self.device().index(), 0), getDeviceAllocator(), true);
  return set_storage(self, std::move(storage), 0, {0}, {});
}

// ------------------------------------------------------------ copies
bool is_pinned_host(const at::Tensor& t) {
  return is_pinned_pointer(t.storage().data_ptr().get());
}

// Plain byte copy possible: same dtype and shape, both contiguous, no lazy
// conjugate/negative bits to apply.
bool bytewise_copyable(const at::Tensor& dst, const at::Tensor& src) {
  return dst.dtype() == src.dtype() && dst.sizes() == src.sizes() &&
         dst.is_contiguous() && src.is_contiguous() &&
         dst.is_conj() == src.is_conj() && dst.is_neg() == src.is_neg();
}

void record_host_block(const at::Tensor& host, c10::DeviceIndex device) {
  auto* alloc = at::getHostAllocator(at::kPrivateUse1);
  const auto& dp = host.storage().data_ptr();
  alloc->record_event(const_cast<void*>(dp.get()), dp.get_context(),
                      getCurrentStream(device));
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  TORCH_CHECK(self.defined(), "copy_: the destination tensor is undefined");
  TORCH_CHECK(src.defined(), "copy_: the source tensor is undefined");
  if (self.is_same(src) || self.numel() == 0) return self;
  const bool dst_dev = self.device().type() == c10::DeviceType::PrivateUse1;
  const bool src_dev = src.device().type() == c10::DeviceType::PrivateUse1;
  TORCH_CHECK(dst_dev || self.device().type() == c10::DeviceType::CPU,
              "openreg: copy_ from ", src.device(), " to ", self.device(),
              " is not supported");
  TORCH_CHECK(src_dev || src.device().type() == c10::DeviceType::CPU,
              "openreg: copy_ from ", src.device(), " to ", self.device(),
              " is not supported");

  if (dst_dev && src_dev) {
    auto dd = self.device().index(), sd = src.device().index();
    if (dd != sd) {
      // Peer copy: the source's stream must be done before the destination
      // stream reads it (CUDA orders the two streams with events).
      OPENREG_CHECK(orStreamSynchronize(currentNativeStream(sd)));
    }
    AliasSet dst_set(dd), src_set(sd);
    at::Tensor d = dst_set.alias(self, /*write=*/true), s = src_set.alias(src);
    launch_kernel(dd, "aten::copy_", [&] { d.copy_(s); });
    return self;
  }
  // [docs:copy-h2d]
  // host <-> device: ordered on the device's current stream.
  const at::Tensor& host = dst_dev ? src : self;
  const auto device = (dst_dev ? self : src).device().index();
  if (bytewise_copyable(self, src)) {
    // A runtime copy (a memcpy on the trace, with its bytes). From pageable
    // memory the runtime stages it synchronously, as CUDA does; from pinned
    // memory with non_blocking it is truly asynchronous: a device worker
    // performs it later, and the pinned block is not reused before it has.
    const bool pinned = is_pinned_host(host);
    orStream_t stream = currentNativeStream(device);
    OPENREG_CHECK(orMemcpyAsync(self.data_ptr(), src.data_ptr(), self.nbytes(),
                                dst_dev ? orMemcpyHostToDevice : orMemcpyDeviceToHost, stream));
    if (pinned && non_blocking) {
      record_host_block(host, device);
    } else if (pinned) {
      OPENREG_CHECK(orStreamSynchronize(stream));  // a blocking copy returns when done
    }
    return self;
  }
  // Otherwise a kernel copies (and converts dtype/layout) between the host
  // tensor and the device tensor's alias.
  AliasSet set(device);
  at::Tensor d = dst_dev ? set.alias(self, /*write=*/true) : self;
  at::Tensor s = dst_dev ? src : set.alias(src);
  sanitize_host_operand(host, /*write=*/!dst_dev);
  launch_kernel(device, "aten::copy_", [&] { d.copy_(s); });
  if (!dst_dev && sanitizer_on() && !(non_blocking && is_pinned_host(host)))
    sanitize_host_waits(device);  // a blocking D2H copy returns when done
  return self;
  // [docs:copy-h2d:end]
}

at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor d = dst;
  copy_(d, self, non_blocking);
  return dst;
}

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  at::Tensor d = dst;
  copy_(d, self, false);
  return dst;
}

// ------------------------------------------------------------ scalars
c10::Scalar local_scalar_dense(const at::Tensor& self) {
  auto dev = self.device().index();
  AliasSet set(dev);
  at::Tensor a = set.alias(self);
  c10::Scalar out;
  // Runs after the stream's queued work: .item() is a synchronisation point.
  launch_kernel(dev, "aten::_local_scalar_dense", [&] { out = at::_local_scalar_dense(a); });
  sanitize_host_waits(dev);  // as CUDA's .item(): a stream synchronisation
  return out;
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  getDeviceAllocator()->recordStream(self.storage().data_ptr(), stream);
}

// native_dropout's CPU kernel draws from the CPU default generator; on
// openreg the mask must come from the openreg generator, so compose it from
// bernoulli_ (openreg's Philox kernel, Random.cpp): the mask of an n-element
// input is n positions of the device's stream, as any bernoulli draw.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  auto bool_opts = input.options().dtype(at::kBool);
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, bool_opts)};
  }
  double p1m = 1. - p;
  double scale = p1m == 0 ? 0. : 1. / p1m;
  at::Tensor mask = at::empty_like(input, bool_opts);
  mask.bernoulli_(p1m);
  // One pass that reads the bool mask as it is (Dropout.cpp).
  at::Tensor output = dropout_masked_scale(input, mask, scale, "aten::native_dropout",
                                           /*scale_in_place=*/true);
  return {output, mask};
}

}  // namespace

// [docs:shallow-copy-type]
// Module conversion keeps Parameter objects, and so tied weights (gap 31 of
// docs/pytorch-gaps.md). nn.Module._apply, behind module.to("openreg"),
// .cpu(), .half() and to_empty(device=...), swaps `param.data` in place only
// where torch._has_compatible_shallow_copy_type(param, converted) is true;
// otherwise it puts a new Parameter into each module, and an output head
// tied to its embedding becomes a second copy that trains on its own.
// PyTorch answers from TensorImpl::has_compatible_shallow_copy_type, whose
// lists of dense and sparse backends do not name PrivateUse1; the operator
// is CompositeImplicitAutograd, so a backend answers for its own key (the
// header points backends here). This answers as PyTorch does between CPU
// and CUDA, with PrivateUse1 in both lists, and is called whenever one of
// the two tensors is an openreg tensor (PrivateUse1 dispatches first).
// `param.data = t` asks the same question (VariableHooks::set_data).
// Vendor: keep this; only the name of the backend bit is yours.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) {
    return true;  // PyTorch's own answer (the same key set, or two of its listed backends)
  }
  using B = c10::BackendComponent;
  constexpr auto dense_backends =
      c10::DispatchKeySet({B::CPUBit, B::CUDABit, B::MPSBit, B::HIPBit, B::XPUBit, B::HPUBit,
                           B::MTIABit, B::PrivateUse1Bit});
  constexpr auto sparse_backends = c10::DispatchKeySet(
      {B::CPUBit, B::CUDABit, B::MPSBit, B::HIPBit, B::XPUBit, B::PrivateUse1Bit});
  auto both = [&](c10::DispatchKey functionality, c10::DispatchKeySet backends) {
    const auto k = c10::DispatchKeySet(functionality);
    return self.key_set().has_any(k) && self.key_set().has_any(backends) &&
           from.key_set().has_any(k) && from.key_set().has_any(backends);
  };
  return both(c10::DispatchKey::Dense, dense_backends) ||
         both(c10::DispatchKey::Sparse, sparse_backends);
}
// [docs:shallow-copy-type:end]

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  OPENREG_CAPTURABLE_IMPL(m, "resize_", resize_);
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  m.impl("set_", TORCH_FN(set_empty));
  OPENREG_CAPTURABLE_IMPL(m, "copy_", copy_);
  OPENREG_CAPTURABLE_IMPL(m, "_copy_from", _copy_from);
  OPENREG_CAPTURABLE_IMPL(m, "_copy_from_and_resize", _copy_from_and_resize);
  OPENREG_CAPTURABLE_IMPL(m, "aten::_local_scalar_dense", local_scalar_dense);
  m.impl("record_stream", TORCH_FN(record_stream));
  OPENREG_CAPTURABLE_IMPL(m, "native_dropout", native_dropout);
}

// [docs:quantized-views]
// Quantized openreg tensors: metadata-only operators as the CPU registers
// them for QuantizedCPU (views keep the quantizer and the openreg storage;
// set_ is torch.load's path), and the two "empty like this quantized
// tensor" factories, whose device= may name another device (.cpu() and
// .to("openreg:1") go through them). Everything else on them takes the
// quantized fallback (Fallback.cpp), which runs the CPU's quantized kernels
// in place.
// The factories allocate on the current device (new_qtensor takes the
// PrivateUse1 allocator), so they run under a guard for the target device,
// as the dispatcher's generated CUDA wrappers do.
std::optional<at::Device> guard_for(std::optional<at::Device> device) {
  if (device && device->type() == c10::DeviceType::PrivateUse1 && device->has_index()) {
    return device;
  }
  return std::nullopt;
}

at::Tensor empty_affine_quantized(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                  std::optional<at::Layout> layout,
                                  std::optional<at::Device> device,
                                  std::optional<bool> pin_memory, double scale,
                                  int64_t zero_point,
                                  std::optional<at::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard g(guard_for(device));
  return at::native::empty_affine_quantized(size, dtype, layout, device, pin_memory, scale,
                                            zero_point, memory_format);
}

at::Tensor empty_per_channel_affine_quantized(
    at::IntArrayRef size, const at::Tensor& scales, const at::Tensor& zero_points, int64_t axis,
    std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
    std::optional<at::Device> device, std::optional<bool> pin_memory,
    std::optional<at::MemoryFormat> memory_format) {
  // The quantizer's scales and zero points live with the tensor (as on
  // CUDA): move them to the target device first.
  const at::Device target = device.value_or(scales.device());
  at::Tensor s = scales.to(target), z = zero_points.to(target);
  if (target.type() != c10::DeviceType::PrivateUse1) {
    return at::_empty_per_channel_affine_quantized(size, s, z, axis, dtype, layout, target,
                                                   pin_memory, memory_format);
  }
  c10::OptionalDeviceGuard g(guard_for(s.device()));
  return at::native::empty_per_channel_affine_quantized(size, s, z, axis, dtype, layout,
                                                        s.device(), pin_memory, memory_format);
}

at::Tensor empty_quantized(at::IntArrayRef size, const at::Tensor& qtensor,
                           std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                           std::optional<at::Device> device, std::optional<bool> pin_memory,
                           std::optional<at::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard g(guard_for(device.value_or(qtensor.device())));
  return at::native::empty_quantized(size, qtensor, dtype, layout, device, pin_memory,
                                     memory_format);
}

at::Tensor empty_like_quantized(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                                std::optional<at::Layout> layout,
                                std::optional<at::Device> device,
                                std::optional<bool> pin_memory,
                                std::optional<at::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard g(guard_for(device.value_or(self.device())));
  return at::native::empty_like_quantized(self, dtype, layout, device, pin_memory,
                                          memory_format);
}

TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  // ATen's own factories allocate quantized openreg tensors directly
  // (new_qtensor takes PrivateUse1's allocator).
  m.impl("_empty_affine_quantized", TORCH_FN(empty_affine_quantized));
  m.impl("_empty_per_channel_affine_quantized", TORCH_FN(empty_per_channel_affine_quantized));
  m.impl("empty_quantized", TORCH_FN(empty_quantized));
  m.impl("empty_like", TORCH_FN(empty_like_quantized));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_qtensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(at::native::set_storage_quantized_));
}
// [docs:quantized-views:end]

}  // namespace torch_openreg
