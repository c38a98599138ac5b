// Per-tensor backend metadata for openreg, and its serialization.
//
// c10 lets a backend hang an object derived from c10::BackendMeta on any of
// its tensors (TensorImpl::set_backend_meta). Real backends use it for
// information the strided metadata cannot express, typically a private
// memory layout ("this tensor's bytes are in the NC1HWC0 tiling"). openreg
// carries one such fact, a "format" tag. torch.save/torch.load round-trip it
// through the tensor metadata dict (see OpenRegSerialization.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>

#include <optional>
#include <string>

namespace torch_openreg {

// [docs:backend-meta-struct]
// Immutable once attached: a new tag means a new object. That is what lets
// the inherited clone() (which returns the same object) share it between a
// tensor and its shallow copies (detach(), .data, state_dict() entries).
// Vendor: put your layout descriptor here (format id, tile sizes, ...).
struct OpenRegBackendMeta final : c10::BackendMeta {
  explicit OpenRegBackendMeta(std::string format) : format(std::move(format)) {}
  const std::string format;
};
// [docs:backend-meta-struct:end]

// Attach (or, with nullopt, remove) the format tag of an openreg tensor.
// Tags are 1-64 characters of [A-Za-z0-9_.-]; anything else is a ValueError.
void set_backend_format(const at::Tensor& t, const std::optional<std::string>& format);

// The tensor's format tag, if it has one.
std::optional<std::string> get_backend_format(const at::Tensor& t);

}  // namespace torch_openreg
