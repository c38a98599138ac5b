// Copies and memsets (cudaMemcpy*, cudaMemset*): validated when called, run
// in stream order, and validated again when they execute (scheduler.cpp).
#include "sanitizer.h"
#include "scheduler.h"

#include <cstring>

namespace openreg {
namespace {

const char* kind_name(orMemcpyKind k) {
  switch (k) {
    case orMemcpyHostToHost: return "HostToHost";
    case orMemcpyHostToDevice: return "HostToDevice";
    case orMemcpyDeviceToHost: return "DeviceToHost";
    case orMemcpyDeviceToDevice: return "DeviceToDevice";
    default: return "Default";
  }
}

// Classify and validate a copy. Returns the device whose stream orders it.
orError_t check_copy(const char* call, void* dst, const void* src,
                     size_t count, orMemcpyKind* kind, int* device) {
  if (count && (!dst || !src))
    return fail(orErrorInvalidValue, "%s: NULL %s pointer", call,
                dst ? "source" : "destination");
  if (*kind < orMemcpyHostToHost || *kind > orMemcpyDefault)
    return fail(orErrorInvalidMemcpyDirection, "%s: invalid copy kind %d", call,
                int(*kind));
  int dd = device_of_pointer(dst);
  int sd = device_of_pointer(src);
  orMemcpyKind actual = dd >= 0 ? (sd >= 0 ? orMemcpyDeviceToDevice
                                            : orMemcpyHostToDevice)
                                : (sd >= 0 ? orMemcpyDeviceToHost
                                           : orMemcpyHostToHost);
  if (*kind != orMemcpyDefault && *kind != actual) {
    return fail(orErrorInvalidMemcpyDirection,
                "%s: kind is %s but dst %p is %s memory and src %p is %s memory",
                call, kind_name(*kind), dst, dd >= 0 ? "device" : "host", src,
                sd >= 0 ? "device" : "host");
  }
  *kind = actual;
  std::string why;
  if (dd >= 0 && count && !kernel_address(dd, dst, count, &why))
    return fail(orErrorInvalidValue, "%s: destination: %s", call, why.c_str());
  if (sd >= 0 && count && !kernel_address(sd, src, count, &why))
    return fail(orErrorInvalidValue, "%s: source: %s", call, why.c_str());
  *device = sd >= 0 ? sd : (dd >= 0 ? dd : current_device_index());
  return orSuccess;
}

// Validate a memset's range. Returns the device that owns it.
orError_t check_memset(const char* call, void* devPtr, size_t count, int* device) {
  *device = device_of_pointer(devPtr);
  if (*device < 0)
    return fail(orErrorInvalidValue, "%s: %p is not a device pointer", call, devPtr);
  std::string why;
  if (count && !kernel_address(*device, devPtr, count, &why))
    return fail(orErrorInvalidValue, "%s: %s", call, why.c_str());
  return orSuccess;
}

Item copy_item(const char* name, void* dst, const void* src, size_t count,
               orMemcpyKind kind) {
  Item it;
  it.type = Item::Memcpy;
  it.name = name;
  it.dst = dst;
  it.src = src;
  it.count = count;
  it.kind = kind;
  return it;
}

Item memset_item(const char* name, void* dst, int value, size_t count) {
  Item it;
  it.type = Item::Memset;
  it.name = name;
  it.dst = dst;
  it.value = value;
  it.count = count;
  return it;
}

// Run a blocking copy or memset on `s` and name `call` in its error.
orError_t run_blocking(const char* call, Stream* s, Item it) {
  std::string why;
  orError_t e = run_synchronously(s, std::move(it), &why);
  if (e != orSuccess) return fail(e, "%s: %s", call, why.c_str());
  return orSuccess;
}

}  // namespace
}  // namespace openreg

using namespace openreg;

extern "C" {

orError_t orMemcpy(void* dst, const void* src, size_t count, orMemcpyKind kind) {
  int device = 0;
  if (orError_t e = check_copy("orMemcpy", dst, src, count, &kind, &device))
    return e;
  if (kind == orMemcpyHostToHost) {
    if (count) memmove(dst, src, count);
    return orSuccess;
  }
  if (orError_t e = capture::check_unsafe("orMemcpy")) return e;
  // Synchronous copies are ordered on the device's default stream.
  Device* dev = get_device(device, "orMemcpy");
  if (!dev) return orPeekAtLastError();
  Stream* s = dev->default_stream;
  // Like cudaMemcpy, it returns when the copy is done, except from pageable
  // memory to the device: then only the stream's earlier work is.
  const int host_sync = kind == orMemcpyHostToDevice && !is_pinned_range(src, count) ? 1 : 2;
  uint64_t before = 0;
  if (san::on()) {
    before = san::epoch_of(s);
    if (orError_t e = san::copy(s, dst, src, count, kind, "orMemcpy")) return e;
  }
  orError_t e = run_blocking("orMemcpy", s, copy_item("orMemcpy", dst, src, count, kind));
  if (san::on()) san::host_after(s, host_sync, before);
  return e;
}

orError_t orMemcpyAsync(void* dst, const void* src, size_t count,
                        orMemcpyKind kind, orStream_t stream) {
  int device = 0;
  if (orError_t e = check_copy("orMemcpyAsync", dst, src, count, &kind, &device))
    return e;
  Stream* s = resolve_stream(stream, "orMemcpyAsync");
  if (!s) return orPeekAtLastError();
  Item it = copy_item("orMemcpyAsync", dst, src, count, kind);
  // Recorded whatever the host memory: a replay copies from and to it then.
  orError_t captured;
  if (capture::recorded(s, it, "orMemcpyAsync", &captured)) return captured;
  const void* host = kind == orMemcpyHostToDevice ? src
                     : kind == orMemcpyDeviceToHost ? static_cast<const void*>(dst)
                                                    : nullptr;
  const bool staged = kind == orMemcpyHostToHost || (host && !is_pinned_range(host, count));
  uint64_t before = 0;
  if (san::on()) {
    before = san::epoch_of(s);
    if (orError_t e = san::copy(s, dst, src, count, kind, "orMemcpyAsync")) return e;
  }
  if (staged) {
    // Pageable host memory: like CUDA, the copy is staged synchronously, so
    // the host buffer may be reused as soon as the call returns.
    orError_t e = run_blocking("orMemcpyAsync", s, std::move(it));
    // As for CUDA: a copy to pageable memory is complete on return; one from
    // pageable memory to the device only orders the stream's earlier work.
    if (san::on()) san::host_after(s, kind == orMemcpyHostToDevice ? 1 : 2, before);
    return e;
  }
  // Pinned host memory: truly asynchronous, executed by a device worker.
  // Device-to-device: may run inline when the stream is idle.
  submit(s, std::move(it), /*inline_ok=*/kind == orMemcpyDeviceToDevice);
  return orSuccess;
}

orError_t orMemset(void* devPtr, int value, size_t count) {
  int d = -1;
  if (orError_t e = check_memset("orMemset", devPtr, count, &d)) return e;
  if (orError_t e = capture::check_unsafe("orMemset")) return e;
  Device* dev = get_device(d, "orMemset");
  if (!dev) return orPeekAtLastError();
  Stream* s = dev->default_stream;
  if (san::on()) {
    if (orError_t e = san::memset(s, devPtr, count, "orMemset")) return e;
  }
  orError_t e = run_blocking("orMemset", s, memset_item("orMemset", devPtr, value, count));
  if (san::on()) san::host_after(s, 2, 0);
  return e;
}

orError_t orMemsetAsync(void* devPtr, int value, size_t count, orStream_t stream) {
  int d = -1;
  if (orError_t e = check_memset("orMemsetAsync", devPtr, count, &d)) return e;
  Stream* s = resolve_stream(stream, "orMemsetAsync");
  if (!s) return orPeekAtLastError();
  Item it = memset_item("orMemsetAsync", devPtr, value, count);
  orError_t captured;
  if (capture::recorded(s, it, "orMemsetAsync", &captured)) return captured;
  if (san::on()) {
    if (orError_t e = san::memset(s, devPtr, count, "orMemsetAsync")) return e;
  }
  submit(s, std::move(it), /*inline_ok=*/true);
  return orSuccess;
}

}  // extern "C"
