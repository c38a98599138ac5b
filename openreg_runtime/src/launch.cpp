// Launching device work: kernels and host functions (cudaLaunchKernel,
// cudaLaunchHostFunc).
#include "sanitizer.h"
#include "scheduler.h"

#include <chrono>

using namespace openreg;

namespace {
void sleep_host_fn(void* us) {
  std::this_thread::sleep_for(
      std::chrono::microseconds(reinterpret_cast<uintptr_t>(us)));
}
}  // namespace

extern "C" {

orError_t orLaunchHostFunc(orStream_t stream, orHostFn_t fn, void* userData) {
  if (!fn) return fail(orErrorInvalidValue, "orLaunchHostFunc: fn is NULL");
  Stream* s = resolve_stream(stream, "orLaunchHostFunc");
  if (!s) return orPeekAtLastError();
  Item it;
  it.type = Item::HostFunc;
  it.name = "orLaunchHostFunc";
  it.hfn = fn;
  it.args = userData;
  orError_t e;
  if (capture::recorded(s, it, "orLaunchHostFunc", &e)) return e;
  if (san::on()) san::launch(s);
  submit(s, std::move(it), /*inline_ok=*/false);
  return orSuccess;
}

orError_t orLaunchSleep(orStream_t stream, unsigned long long microseconds) {
  Stream* s = resolve_stream(stream, "orLaunchSleep");
  if (!s) return orPeekAtLastError();
  Item it;
  it.type = Item::HostFunc;
  it.name = "orLaunchSleep";
  it.hfn = sleep_host_fn;
  it.args = reinterpret_cast<void*>(uintptr_t(microseconds));
  orError_t e;
  if (capture::recorded(s, it, "orLaunchSleep", &e)) return e;
  if (san::on()) san::launch(s);
  submit(s, std::move(it), /*inline_ok=*/false);
  return orSuccess;
}

}  // extern "C"

namespace {

// orLaunchKernel and orLaunchKernelOwned. `owned`, for the second, holds
// `args`: they go with the last copy of the item (or with this call, if it
// fails).
orError_t launch_kernel(orStream_t stream, orKernelFn_t fn, void* args,
                        std::shared_ptr<void> owned, bool args_owned, const char* name,
                        unsigned int flags, const char* call) {
  if (!fn) return fail(orErrorInvalidValue, "%s: fn is NULL", call);
  if (flags & ~unsigned(orLaunchSynchronous | orLaunchNeverInline | orLaunchMayDefer |
                        orLaunchUntraced))
    return fail(orErrorInvalidValue, "%s: unknown flags 0x%x", call, flags);
  if ((flags & orLaunchMayDefer) && (flags & (orLaunchSynchronous | orLaunchNeverInline)))
    return fail(orErrorInvalidValue,
                "%s: orLaunchMayDefer does not combine with orLaunchSynchronous "
                "or orLaunchNeverInline (flags 0x%x)", call, flags);
  Item it;
  it.type = Item::Kernel;
  it.name = name ? name : "kernel";
  it.kfn = fn;
  it.args = args;
  it.owned = std::move(owned);
  it.args_owned = args_owned;
  it.may_defer = flags & orLaunchMayDefer;
  it.untraced = flags & orLaunchUntraced;
  if (capture::any()) {  // the hot path resolves no stream otherwise
    Stream* s = resolve_stream(stream, call);
    if (!s) return orPeekAtLastError();
    orError_t e;
    if (capture::recorded(s, it, call, &e)) return e;
  }
  const bool sync = flags & orLaunchSynchronous;
  // The sanitizer checks the accesses declared for this launch before the
  // kernel runs: a racing kernel fails here and never runs.
  const bool sanitize = san::on();
  if (sync && !sanitize) {
    std::string why;
    bool launched;
    orError_t e = launch_synchronously(stream, it, call, &launched, &why);
    if (!launched) return e;
    if (e != orSuccess) return fail(e, "%s: %s", call, why.c_str());
    return orSuccess;
  }
  Stream* s = resolve_stream(stream, call);
  if (!s) return orPeekAtLastError();
  if (sanitize) {
    if (orError_t e = san::kernel_begin(s, it.name, /*in_kernel=*/sync)) return e;
  }
  if (sync) {
    std::string why;
    orError_t e = run_synchronously(s, std::move(it), &why);
    if (sanitize) san::kernel_end();
    if (e != orSuccess) return fail(e, "%s: %s", call, why.c_str());
    return orSuccess;
  }
  submit(s, std::move(it), /*inline_ok=*/!(flags & orLaunchNeverInline));
  return orSuccess;
}

}  // namespace

extern "C" {

orError_t orLaunchKernel(orStream_t stream, orKernelFn_t fn, void* args,
                         const char* name, unsigned int flags) {
  // The hot path of every eager operator, before the general path's
  // arguments are built: no Item either (launch_inline). (Valid flags only:
  // a null fn or bad flags fail below, as before.)
  if ((flags & ~unsigned(orLaunchUntraced)) == orLaunchSynchronous && fn &&
      !capture::any() && !san::on()) {
    std::string why;
    orError_t e;
    if (launch_inline(stream, fn, args, name ? name : "kernel", &e, &why)) {
      if (e != orSuccess) return fail(e, "%s: %s", "orLaunchKernel", why.c_str());
      return orSuccess;
    }
  }
  return launch_kernel(stream, fn, args, nullptr, /*args_owned=*/false, name, flags,
                       "orLaunchKernel");
}

orError_t orLaunchKernelOwned(orStream_t stream, orKernelFn_t fn, void* args,
                              orArgsDeleter_t deleter, const char* name, unsigned int flags) {
  // Owned from here on, errors included.
  std::shared_ptr<void> owned(args, [deleter](void* p) {
    if (deleter) deleter(p);
  });
  return launch_kernel(stream, fn, args, std::move(owned), /*args_owned=*/true, name, flags,
                       "orLaunchKernelOwned");
}

}  // extern "C"
