// A C++ operator with a planted bug, for tests/device/test_memcheck.py: it
// is written as the custom-operator examples are (openreg_python/csrc/aten/
// custom_ops/CustomOpBiasGelu.cpp: TORCH_LIBRARY, a PrivateUse1 kernel launched through
// run_on_device_of) and writes one element past its output.
#include "aten/custom_ops/CustomOps.h"

#include <ATen/ops/empty_like.h>
#include <torch/library.h>

namespace {

at::Tensor fill_past_end(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "planted::fill_past_end takes float32");
  return torch_openreg::run_on_device_of(x, "planted::fill_past_end", [](std::vector<at::Tensor> t) {
    at::Tensor out = at::empty_like(t[0], at::MemoryFormat::Contiguous);
    float* p = out.mutable_data_ptr<float>();
    for (int64_t i = 0; i <= out.numel(); ++i) p[i] = 1.0f;  // the bug: <= numel
    return out;
  }, {x});
}

}  // namespace

TORCH_LIBRARY(planted, m) {
  m.def("fill_past_end(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(planted, PrivateUse1, m) {
  m.impl("fill_past_end", fill_past_end);
}
