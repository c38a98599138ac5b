// Graph capture glue (Graph.cpp): what the Python bindings need.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <ATen/core/stack.h>

#include <array>
#include <cstdint>

namespace c10 {
class OperatorHandle;
struct OperatorName;
}

namespace torch_openreg {

// torch.openreg.graph_pool_handle(): a fresh pool id graphs can share.
c10::MempoolId_t graphPoolHandle();
// torch.openreg.is_current_stream_capturing().
bool currentStreamIsCapturing(c10::DeviceIndex device);
// Nodes captured so far in the process, by how a replay runs them:
// {through the dispatcher, CPU kernel on prepared aliases, prepared
// iterator} (GraphPrepared.cpp).
std::array<uint64_t, 3> graphPrepareStats();
// Declares an operator whose openreg kernel is ATen's CPU kernel run on
// aliases of device memory (Native.cpp's registrations, and those
// register_structured_kernels routes to the fallback): a graph node of it
// calls the CPU kernel on aliases made at capture. `schema_name`: "add.Tensor".
void note_cpu_kernel_op(const char* schema_name);
void note_cpu_kernel_op(const c10::OperatorName& name);

}  // namespace torch_openreg
