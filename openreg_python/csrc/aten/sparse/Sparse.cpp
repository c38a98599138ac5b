// Sparse openreg tensors: their CPU aliases, their results, and the kernels
// that only read or copy their members (Sparse.h, docs/sparse.md).
#include "Sparse.h"

#include "KernelView.h"

#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/values_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace torch_openreg {
namespace {

bool is_compressed(c10::Layout l) {
  return l == c10::kSparseCsr || l == c10::kSparseCsc || l == c10::kSparseBsr ||
         l == c10::kSparseBsc;
}

at::SparseCsrTensorImpl* compressed_impl(const at::Tensor& t) {
  return static_cast<at::SparseCsrTensorImpl*>(t.unsafeGetTensorImpl());
}

// [docs:sparse-make]
// A sparse tensor of `layout` on `device` (its dispatch keys follow from the
// device: SparseCPU or SparsePrivateUse1, SparseCsrCPU or SparseCsrPrivateUse1)
// over the given members, without copying them.
at::Tensor make_coo(c10::Device device, const at::Tensor& like, int64_t sparse_dim,
                    int64_t dense_dim, bool coalesced, const at::Tensor& indices,
                    const at::Tensor& values) {
  const auto key = device.is_cpu() ? c10::DispatchKey::SparseCPU
                                   : c10::DispatchKey::SparsePrivateUse1;
  // The impl's device is fixed when it is made (its empty placeholder
  // members are allocated on the current device).
  c10::OptionalDeviceGuard guard;
  if (!device.is_cpu()) guard.reset_device(device);
  at::Tensor t = at::detail::make_tensor<at::SparseTensorImpl>(c10::DispatchKeySet(key),
                                                               like.dtype());
  auto* impl = at::sparse::get_sparse_impl(t);
  impl->raw_resize_(sparse_dim, dense_dim, like.sizes());
  impl->set_indices_and_values_unsafe(indices, values);
  impl->set_coalesced(coalesced);
  return t;
}

at::Tensor make_compressed(c10::Device device, const at::Tensor& like,
                           const at::Tensor& compressed, const at::Tensor& plain,
                           const at::Tensor& values) {
  const auto key = device.is_cpu() ? c10::DispatchKey::SparseCsrCPU
                                   : c10::DispatchKey::SparseCsrPrivateUse1;
  at::Tensor t = at::detail::make_tensor<at::SparseCsrTensorImpl>(
      c10::DispatchKeySet(key), device, like.layout(), like.dtype());
  compressed_impl(t)->set_member_tensors(compressed, plain, values, like.sizes());
  return t;
}
// [docs:sparse-make:end]

void check_layout(const at::Tensor& t) {
  TORCH_CHECK_NOT_IMPLEMENTED(t.layout() == c10::kSparse || is_compressed(t.layout()),
                              "openreg does not support ", t.layout(), " tensors");
}

}  // namespace

// [docs:sparse-alias]
at::Tensor sparse_alias(AliasSet& set, const at::Tensor& t, bool write) {
  check_layout(t);
  const c10::Device cpu(c10::DeviceType::CPU);
  if (t.layout() == c10::kSparse) {
    auto* s = at::sparse::get_sparse_impl(t);
    return make_coo(cpu, t, s->sparse_dim(), s->dense_dim(), s->coalesced(),
                    set.alias(s->indices(), write), set.alias(s->values(), write));
  }
  auto* s = compressed_impl(t);
  return make_compressed(cpu, t, set.alias(s->compressed_indices(), write),
                         set.alias(s->plain_indices(), write), set.alias(s->values(), write));
}

at::Tensor sparse_unwrap(AliasSet& set, const at::Tensor& cpu) {
  check_layout(cpu);
  const c10::Device device(c10::DeviceType::PrivateUse1, set.device());
  if (cpu.layout() == c10::kSparse) {
    auto* s = at::sparse::get_sparse_impl(cpu);
    return make_coo(device, cpu, s->sparse_dim(), s->dense_dim(), s->coalesced(),
                    set.unwrap(s->indices()), set.unwrap(s->values()));
  }
  auto* s = compressed_impl(cpu);
  return make_compressed(device, cpu, set.unwrap(s->compressed_indices()),
                         set.unwrap(s->plain_indices()), set.unwrap(s->values()));
}
// [docs:sparse-alias:end]

void sparse_sync_back(AliasSet& set, c10::TensorImpl* openreg, const at::Tensor& cpu) {
  check_layout(cpu);
  if (cpu.layout() == c10::kSparse) {
    auto* s = at::sparse::get_sparse_impl(cpu);
    auto* o = static_cast<at::SparseTensorImpl*>(openreg);
    at::Tensor indices = set.unwrap(s->indices()), values = set.unwrap(s->values());
    o->raw_resize_(s->sparse_dim(), s->dense_dim(), cpu.sizes());
    o->set_indices_and_values_unsafe(indices, values);
    o->set_coalesced(s->coalesced());
    return;
  }
  auto* s = compressed_impl(cpu);
  static_cast<at::SparseCsrTensorImpl*>(openreg)->set_member_tensors(
      set.unwrap(s->compressed_indices()), set.unwrap(s->plain_indices()),
      set.unwrap(s->values()), cpu.sizes());
}

// [docs:sparse-registrations]
// The kernels that only read a sparse tensor's metadata and members, or copy
// members with dense copies, are device-generic in ATen (the SparseMeta and
// SparseCsrMeta keys run them too): registered as they are, they skip the
// fallback's aliases. Everything else runs the CPU's sparse kernel through
// the fallback (Fallback.cpp).
TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  // Between devices too (openreg from CPU and back): member copies.
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_wrapper_));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_compressed_));
}
// [docs:sparse-registrations:end]

}  // namespace torch_openreg
