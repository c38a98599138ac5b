// Graph capture glue (Graph.cpp): what the Python bindings need.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <ATen/core/stack.h>

namespace c10 {
class OperatorHandle;
}

namespace torch_openreg {

// The boxed kernel that records operators during a capture (registered as
// the CustomRNGKeyId fallback, and for the operators whose composite kernel
// would otherwise run before it: register_structured_kernels).
void capture_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                      torch::jit::Stack* stack);

// torch.openreg.graph_pool_handle(): a fresh pool id graphs can share.
c10::MempoolId_t graphPoolHandle();
// torch.openreg.is_current_stream_capturing().
bool currentStreamIsCapturing(c10::DeviceIndex device);

}  // namespace torch_openreg
