// c10::Stream <-> runtime stream mapping, per-thread current streams and the
// stream pools, modelled on c10/cuda/CUDAStream. Light header: c10 only.
//
// StreamId layout: the id is an index into a per-device table of runtime
// streams. 0 is the device's default stream (created at first use), pool
// streams and streams made by getNewStream() follow.
#pragma once

#include <c10/core/Stream.h>

#include <openreg.h>

namespace torch_openreg {

c10::Stream getDefaultStream(c10::DeviceIndex device);
c10::Stream getCurrentStream(c10::DeviceIndex device);
// Sets the current stream of the stream's device (for this thread) and
// returns the previous one.
c10::Stream exchangeCurrentStream(c10::Stream stream);
// Round-robin over a lazily created pool (32 streams per priority level), as
// torch.cuda does for getStreamFromPool.
c10::Stream getStreamFromPool(c10::DeviceIndex device, int priority);
// A fresh runtime stream (torch.Stream(...), torch.openreg.Stream(...)).
c10::Stream getNewStream(c10::DeviceIndex device, int priority);

// The runtime handle behind a c10::Stream; throws for unknown ids.
orStream_t nativeStream(const c10::Stream& stream);
int streamPriority(const c10::Stream& stream);
// The c10::Stream of a runtime handle of `device` (the reverse of
// nativeStream); throws for a handle torch did not make.
c10::Stream streamFromNative(c10::DeviceIndex device, orStream_t handle);

// The current stream's runtime handle for `device`: the hot path for kernels.
orStream_t currentNativeStream(c10::DeviceIndex device);

}  // namespace torch_openreg
