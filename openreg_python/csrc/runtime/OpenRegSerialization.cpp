// openreg's backend metadata (OpenRegSerialization.h) in torch.save/load.
//
// torch.save stores, with every tensor, the dict returned by
// torch._C._get_tensor_metadata(t), and torch.load passes it back to
// torch._C._set_tensor_metadata(new_tensor, dict). Both end in
// torch::jit::getTensorMetadata / setTensorMetadata, which handle the conj
// and neg bits and then call the two functions a backend registered for its
// device type with torch::jit::TensorBackendMetaRegistry. The dict maps
// strings to *bools*, so a value like our format tag travels in the key:
// "openreg_format:<tag>" -> true.
//
// Vendor: register your own pair the same way. If your format changes what
// the bytes mean (a tiled layout), the tag alone is not enough for a loader
// without your device (map_location="cpu" drops it: CPU tensors have no
// backend hooks); convert such tensors to the plain layout before saving.
#include "OpenRegSerialization.h"

#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <unordered_map>

namespace torch_openreg {
namespace {

constexpr const char* kFormatKey = "openreg_format:";
constexpr const char* kOurPrefix = "openreg_";
constexpr size_t kMaxFormatLength = 64;

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

void check_format(const std::string& format) {
  const bool ok = !format.empty() && format.size() <= kMaxFormatLength &&
                  std::all_of(format.begin(), format.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                           c == '.' || c == '-';
                  });
  TORCH_CHECK_VALUE(ok, "openreg backend format tag must be 1-", kMaxFormatLength,
                    " characters of [A-Za-z0-9_.-], got '", format, "'");
}

void check_openreg(const at::Tensor& t, const char* what) {
  TORCH_CHECK_VALUE(t.defined(), what, ": expected an openreg tensor, got an undefined tensor");
  TORCH_CHECK_VALUE(t.device().type() == c10::DeviceType::PrivateUse1, what,
                    ": expected an openreg tensor, got a tensor on ", t.device());
}

// [docs:backend-meta-serialization]
// torch.save: add our entries to the tensor's metadata dict.
void serialize_backend_meta(const at::Tensor& t,
                            std::unordered_map<std::string, bool>& metadata) {
  if (auto format = get_backend_format(t)) {
    metadata[std::string(kFormatKey) + *format] = true;
  }
}

// torch.load: the tensor has been rebuilt on an openreg device; restore
// what serialize_backend_meta wrote. Keys that are not ours (conj/neg were
// consumed already) are left alone.
void deserialize_backend_meta(const at::Tensor& t,
                              std::unordered_map<std::string, bool>& metadata) {
  std::optional<std::string> format;
  for (const auto& [key, value] : metadata) {
    if (!starts_with(key, kOurPrefix)) continue;
    TORCH_CHECK(starts_with(key, kFormatKey),
                "openreg: unknown backend metadata '", key, "' in the checkpoint "
                "(saved by a newer torch_openreg?)");
    if (!value) continue;
    TORCH_CHECK(!format, "openreg: the checkpoint gives a tensor two formats, '",
                *format, "' and '", key.substr(std::strlen(kFormatKey)), "'");
    format = key.substr(std::strlen(kFormatKey));
  }
  if (format) set_backend_format(t, format);
}

// Registered when libtorch_openreg is loaded. torch allows one pair per
// device type (and only for PrivateUse1).
const bool registered = [] {
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1,
                                        &serialize_backend_meta,
                                        &deserialize_backend_meta);
  return true;
}();
// [docs:backend-meta-serialization:end]

}  // namespace

void set_backend_format(const at::Tensor& t, const std::optional<std::string>& format) {
  check_openreg(t, "set_backend_format");
  c10::intrusive_ptr<c10::BackendMeta> meta;
  if (format) {
    check_format(*format);
    meta = c10::make_intrusive<OpenRegBackendMeta>(*format);
  }
  t.unsafeGetTensorImpl()->set_backend_meta(std::move(meta));
}

std::optional<std::string> get_backend_format(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return std::nullopt;
  // Another library may have attached a BackendMeta of its own type.
  auto* meta = dynamic_cast<OpenRegBackendMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
  if (!meta) return std::nullopt;
  return meta->format;
}

}  // namespace torch_openreg
