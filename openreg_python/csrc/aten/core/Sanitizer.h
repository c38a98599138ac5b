// The torch glue's half of the stream-race sanitizer (the runtime's half,
// happens-before tracking, is in openreg_runtime/src/sanitizer.cpp).
//
// The runtime sees every copy, memset, event and synchronisation, but not
// which memory a kernel touches: the glue declares it, per launch, from the
// arguments each kernel is given (AliasSet::alias records them, with
// write=true for arguments the schema marks as written, Tensor(a!), in-place
// self and out=) and from the outputs a kernel allocates (a write by that
// kernel). launch_kernel hands the declarations to the runtime just before
// the launch, which checks them before the kernel runs.
//
// Off by default (OPENREG_STREAM_SANITIZER=1 or
// torch.openreg.set_stream_sanitizer(True)); then the only cost is one load
// of sanitizer_on() per launch and per AliasSet.
//
// Vendor: keep the declarations if your driver or tools can check them;
// drop the file otherwise.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <string>

namespace torch_openreg {

extern std::atomic<bool> g_sanitizer_on;
inline bool sanitizer_on() { return g_sanitizer_on.load(std::memory_order_relaxed); }

// Turns the sanitizer on or off (forgetting its history), in the runtime and
// here.
void set_sanitizer(bool on);

// "float32[64, 128]": how reports name the data.
std::string sanitizer_label(const at::Tensor& t);
// The bytes a tensor's elements span: [*begin, *begin + *bytes).
bool tensor_footprint(const at::Tensor& t, const void** begin, size_t* bytes);

// A declared access of the kernel about to be launched.
struct SanitizerAccess {
  const void* ptr;
  size_t bytes;
  bool write;
  std::string label;
};

// Hands the accesses of every live AliasSet of this thread to the runtime,
// for the launch that follows (KernelView.h's launch_kernel).
void sanitize_launch();
// A host tensor that a kernel copies from or into: declared if it is pinned
// (only pinned memory is reached asynchronously).
void sanitize_host_operand(const at::Tensor& host, bool write);
// The host has waited for `device`'s current stream (a blocking D2H copy or
// .item() returned): on CUDA this is a stream synchronisation.
void sanitize_host_waits(c10::DeviceIndex device);
// A kernel on this thread allocated [ptr, ptr+bytes) on the device: it is
// about to write it. Throws StreamRaceError if that races.
void sanitize_fresh_allocation(const void* ptr, size_t bytes);

// Throws the exception Python sees as torch_openreg.StreamRaceError (a
// RuntimeError) once the Python module has registered it, else c10::Error.
[[noreturn]] void throw_stream_race(const std::string& report);
using StreamRaceThrower = void (*)(const std::string& report);
void set_stream_race_thrower(StreamRaceThrower fn);

}  // namespace torch_openreg
