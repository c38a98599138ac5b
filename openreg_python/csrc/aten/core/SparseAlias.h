// Sparse openreg tensors (docs/sparse.md): COO through the SparsePrivateUse1
// key, the compressed layouts (CSR, CSC, BSR, BSC) through SparseCsrPrivateUse1.
//
// A sparse openreg tensor is PyTorch's own SparseTensorImpl (or
// SparseCsrTensorImpl) whose member tensors (indices and values; compressed
// and plain indices and values) are dense openreg tensors. Its kernels are
// the CPU's sparse kernels, run as the dense ones are (KernelView.h): the
// boxed fallback (kernels/Fallback.cpp) gives the CPU kernel a CPU sparse tensor whose members are
// CPU aliases of the device memory, and turns the sparse results back into
// openreg ones whose members are the device memory the kernel wrote.
//
// Vendor: the member tensors are ordinary device tensors, so the allocator,
// stream order and memory statistics are the dense ones'. What a real device
// replaces is the kernels (the fallback's CPU call), as for dense tensors.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_openreg {

class AliasSet;

// A CPU sparse tensor over CPU aliases (from `set`) of `t`'s member tensors,
// with `t`'s sizes, dimensions and coalesced flag. `write`: the kernel may
// write the members (and replace them: see sparse_sync_back).
at::Tensor sparse_alias(AliasSet& set, const at::Tensor& t, bool write);

// The openreg sparse tensor of a CPU sparse result whose members the kernel
// allocated (in device memory, KernelScope) or took from aliases.
at::Tensor sparse_unwrap(AliasSet& set, const at::Tensor& cpu);

// After the kernel: give `openreg` the sizes, dimensions, flag and members
// the kernel gave its alias `cpu` (in-place sparse operators resize their
// tensor and replace its members).
void sparse_sync_back(AliasSet& set, c10::TensorImpl* openreg, const at::Tensor& cpu);

}  // namespace torch_openreg
