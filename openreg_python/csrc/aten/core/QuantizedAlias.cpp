// Quantized aliases: a quantized openreg tensor's CPU alias is a quantized
// CPU tensor over the same bytes (KernelView.h); the quantizers, storages and
// host copies that takes.
#include "KernelView.h"

#include <ATen/quantized/QTensorImpl.h>
#include <ATen/quantized/Quantizer.h>

#include <functional>

namespace torch_openreg {

// [docs:quantized-alias]
// Quantized tensors (the QuantizedPrivateUse1 key). A quantized openreg
// tensor's alias is a quantized CPU tensor (QTensorImpl, QuantizedCPU) over
// the same bytes, with the same quantizer; a per-channel quantizer's scales
// and zero points are openreg tensors, so the alias gets a quantizer over
// their aliases. A quantized CPU result becomes a quantized openreg tensor
// the same way back. The CPU's quantized kernels then run on device memory
// like every other kernel, and nothing is copied.
at::QuantizerPtr map_quantizer(const at::QuantizerPtr& q,
                               const std::function<at::Tensor(const at::Tensor&)>& map) {
  // (By type, not qscheme(): an UnknownQuantizer, which empty_strided of a
  // quantized dtype makes, asserts when asked.)
  if (auto* fq = dynamic_cast<at::PerChannelAffineFloatQParamsQuantizer*>(q.get())) {
    at::Tensor s = map(fq->scales()), z = map(fq->zero_points());
    if (s.is_same(fq->scales()) && z.is_same(fq->zero_points())) return q;
    return c10::make_intrusive<at::PerChannelAffineFloatQParamsQuantizer>(q->scalar_type(), s, z,
                                                                           fq->axis());
  }
  if (auto* pc = dynamic_cast<at::PerChannelAffineQuantizer*>(q.get())) {
    at::Tensor s = map(pc->scales()), z = map(pc->zero_points());
    if (s.is_same(pc->scales()) && z.is_same(pc->zero_points())) return q;
    return c10::make_intrusive<at::PerChannelAffineQuantizer>(q->scalar_type(), s, z, pc->axis());
  }
  return q;  // per-tensor (a scale and a zero point) or unknown: no device state
}

// A quantized tensor with `like`'s geometry over `storage`: key
// QuantizedPrivateUse1 (an openreg tensor) or QuantizedCPU (an alias, a host
// copy).
at::Tensor make_qtensor(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like,
                        at::QuantizerPtr quantizer) {
  auto t = at::detail::make_tensor<at::QTensorImpl>(
      std::move(storage), c10::DispatchKeySet(key), like.dtype(), std::move(quantizer));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                 like.storage_offset());
  return t;
}

at::Tensor storage_bytes(const c10::Storage& st) {
  const int64_t n = static_cast<int64_t>(st.nbytes());
  if (st.device().type() == c10::DeviceType::PrivateUse1) {
    return make_openreg_tensor(st, caffe2::TypeMeta::Make<uint8_t>(), {n}, {1}, 0);
  }
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(st), c10::DispatchKeySet(c10::DispatchKey::CPU),
      caffe2::TypeMeta::Make<uint8_t>());
  t.unsafeGetTensorImpl()->set_sizes_contiguous({n});
  return t;
}

at::QuantizerPtr quantizer_on(const at::QuantizerPtr& q, c10::Device device) {
  return map_quantizer(q, [device](const at::Tensor& x) { return x.to(device); });
}

at::Tensor quantized_to_cpu(const at::Tensor& src) {
  // The whole storage's bytes (sub-byte dtypes pack several values into a
  // byte, so elements and bytes do not line up), and the quantizer with its
  // scales on the host.
  at::Tensor bytes = storage_bytes(src.storage()).cpu();
  return make_qtensor(bytes.storage(), c10::DispatchKey::QuantizedCPU, src,
                      quantizer_on(at::get_qtensorimpl(src)->quantizer(), at::kCPU));
}
// [docs:quantized-alias:end]

}  // namespace torch_openreg
