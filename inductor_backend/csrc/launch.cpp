// libopenreg_inductor.so: the launch path of compiled kernels (see
// openreg_inductor.h). Light includes only (c10 + the runtime): no ATen.
#include "openreg_inductor.h"

#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_set>

#include "aten/core/WideKernel.h"
#include "runtime/OpenRegFunctions.h"
#include "runtime/OpenRegStream.h"

#include <c10/util/Exception.h>

namespace {

struct Ctx {
  orInductorKernelFn fn;
  void* arg;
  std::string error;  // a C++ exception thrown by the kernel body
};

// [docs:launch-compiled]
orError_t run_body(void* p) {
  auto* c = static_cast<Ctx*>(p);
  try {
    // On autograd's device thread, at the process's width: Inductor decided
    // which of its loops run in parallel (WideKernel.h).
    torch_openreg::WideKernel wide(torch_openreg::kCompiledKernelWork);
    c->fn(c->arg);
  } catch (const std::exception& e) {
    c->error = e.what();
    return orErrorLaunchFailure;
  } catch (...) {
    c->error = "unknown C++ exception";
    return orErrorLaunchFailure;
  }
  return orSuccess;
}

}  // namespace

extern "C" int orInductorLaunch(int device, const char* name, orInductorKernelFn fn,
                                void* arg, char* err, size_t errlen) {
  Ctx ctx{fn, arg, {}};
  orError_t rc = orSuccess;
  try {
    // Synchronous launch: the simulated device runs host code, on this
    // thread, after the stream's earlier work (as the eager kernels do).
    rc = orLaunchKernel(torch_openreg::currentNativeStream(device), run_body, &ctx,
                        name, orLaunchSynchronous);
  } catch (const std::exception& e) {  // e.g. an invalid device index
    ctx.error = e.what();
    rc = orErrorInvalidValue;
  }
  if (rc == orSuccess) return 0;
  if (ctx.error.empty()) ctx.error = orGetErrorString(rc);
  orGetLastError();  // reported here, not again at the next call
  std::snprintf(err, errlen, "openreg:%d: compiled kernel %s failed: %s", device, name,
                ctx.error.c_str());
  return 1;
}
// [docs:launch-compiled:end]

namespace {

// A launch whose arguments the runtime keeps (a graph may replay it).
struct Owned {
  orInductorKernelFn fn;
  void* arg;
  void (*release)(void*);
  const char* name;
};

orError_t run_owned(void* p) {
  auto* c = static_cast<Owned*>(p);
  std::string error;
  try {
    torch_openreg::WideKernel wide(torch_openreg::kCompiledKernelWork);
    c->fn(c->arg);
    return orSuccess;
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown C++ exception";
  }
  // A replay's failure, like a failing CUDA kernel's, is reported by the next
  // synchronization; the reason goes to the warning handler.
  TORCH_WARN("openreg: compiled kernel ", c->name, " failed: ", error);
  return orErrorLaunchFailure;
}

void delete_owned(void* p) {
  auto* c = static_cast<Owned*>(p);
  if (c->release) c->release(c->arg);
  delete c;
}

}  // namespace

// [docs:launch-compiled-owned]
extern "C" int orInductorLaunchOwned(int device, const char* name, orInductorKernelFn fn,
                                     void* arg, void (*release)(void*), char* err,
                                     size_t errlen) {
  orStream_t stream = nullptr;
  try {
    stream = torch_openreg::currentNativeStream(device);
  } catch (const std::exception& e) {  // e.g. an invalid device index
    if (release) release(arg);
    std::snprintf(err, errlen, "openreg:%d: compiled kernel %s: %s", device, name, e.what());
    return 1;
  }
  // The runtime deletes the Owned (and releases arg) whatever happens.
  const orError_t rc = orLaunchKernelOwned(stream, run_owned, new Owned{fn, arg, release, name},
                                           delete_owned, name, orLaunchSynchronous);
  if (rc == orSuccess) return 0;
  std::string why = orGetErrorString(rc);
  if (const char* msg = orGetLastErrorMessage(); msg && *msg) why = msg;
  orGetLastError();
  std::snprintf(err, errlen, "openreg:%d: compiled kernel %s failed: %s", device, name,
                why.c_str());
  return 1;
}
// [docs:launch-compiled-owned:end]

extern "C" int orInductorIsCapturing(int device) {
  try {
    orStreamCaptureStatus status = orStreamCaptureStatusNone;
    if (orStreamIsCapturing(torch_openreg::currentNativeStream(device), &status) != orSuccess)
      return 0;
    return status != orStreamCaptureStatusNone ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

extern "C" const char* orInductorInternName(const char* name) {
  static std::mutex mu;
  static auto* names = new std::unordered_set<std::string>();  // never freed
  std::lock_guard<std::mutex> g(mu);
  return names->emplace(name).first->c_str();
}

extern "C" intptr_t orInductorKernelViewOffset(int device) {
  try {
    return torch_openreg::kernel_view_offset(static_cast<c10::DeviceIndex>(device));
  } catch (...) {
    return 0;
  }
}

extern "C" void* orInductorCurrentStream(int device) {
  return torch_openreg::currentNativeStream(static_cast<c10::DeviceIndex>(device));
}

extern "C" int orInductorCurrentDevice(char* err, size_t errlen) {
  try {
    return static_cast<int>(torch_openreg::current_device());
  } catch (const std::exception& e) {
    std::snprintf(err, errlen, "openreg: no current device: %s", e.what());
    return -1;
  }
}
