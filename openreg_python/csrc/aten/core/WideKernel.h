// The width a kernel runs at on autograd's device threads. Light header
// (c10 only): the compiled kernels' launch path (inductor_backend) uses it.
#pragma once

#include <c10/macros/Macros.h>

#include <cstdint>
#include <limits>

namespace torch_openreg {

// A kernel's work, for the width it runs at on autograd's device threads
// (KernelViewAllocation.cpp, [docs:device-thread-width]): the elements of its
// tensor arguments, times kMatmulWeight for the matmul family, whose
// arithmetic grows faster than its operands.
constexpr int64_t kMatmulWeight = 8;
// The work from which a kernel on a device thread opens an OpenMP pool of the
// process's width for itself (and releases it when it ends): 2^20 elements
// (4 MiB of float32), or a matmul of 2^17 (a 256x256 square times another).
constexpr int64_t kWideKernelWork = int64_t(1) << 20;
// A compiled kernel's work: Inductor has decided its parallel regions.
constexpr int64_t kCompiledKernelWork = std::numeric_limits<int64_t>::max();

// While alive, a kernel of `work` (above) that runs on an autograd device
// thread runs at the process's OpenMP width when the work is worth it;
// elsewhere, and for smaller work, it does nothing.
struct WideKernel {
  explicit WideKernel(int64_t work) {
    if (C10_UNLIKELY(work >= kWideKernelWork)) on_ = widen();
  }
  ~WideKernel() {
    if (C10_UNLIKELY(on_)) narrow();
  }
  WideKernel(const WideKernel&) = delete;
  WideKernel& operator=(const WideKernel&) = delete;

 private:
  static bool widen();
  static void narrow();
  bool on_ = false;
};

}  // namespace torch_openreg
