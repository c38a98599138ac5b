// Kernels openreg provides for ATen DispatchStubs (StubKernels.cpp).
#pragma once

#include <cstdint>

namespace torch_openreg {

// How many times openreg's addcmul_stub kernel ran (tests check it is the one
// running; exposed as torch_openreg._C._addcmul_stub_calls).
int64_t addcmul_stub_calls();

}  // namespace torch_openreg
