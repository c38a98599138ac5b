#pragma once
// Every difference between the supported PyTorch releases on the C++ side, in
// one place (the Python twin: torch_openreg/torch_gates.py; the window:
// torch-releases.txt). Code asks `#if OPENREG_GATE_<NAME>`, never
// TORCH_VERSION_*. Each gate names the PyTorch change and the release that
// brought it; when the oldest supported release has it, the gate and the code
// for the releases before it go (tests/docs/test_torch_gates.py fails on a dead
// gate). Vendor: keep this file; your gates are the same PyTorch changes.
//
// Header-only and light: it may be included anywhere, torch-free code excepted.

#include <torch/headeronly/version.h>

#define OPENREG_TORCH_RELEASE(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
#define OPENREG_TORCH_AT_LEAST(major, minor, patch)                                  \
  (OPENREG_TORCH_RELEASE(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH) >= \
   OPENREG_TORCH_RELEASE(major, minor, patch))

// PyTorch 2.14 puts linalg_matrix_sqrth on CUDA's fp32 autocast list
// (aten/src/ATen/autocast_mode.cpp; CPU's has it too): openreg registers CUDA's
// policy, so it does from 2.14 (csrc/aten/kernels/Autocast.cpp).
#define OPENREG_GATE_AUTOCAST_MATRIX_SQRTH OPENREG_TORCH_AT_LEAST(2, 14, 0)
