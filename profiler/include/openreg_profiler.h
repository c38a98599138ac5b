// Range markers on the openreg device timeline (the torch.cuda.nvtx of
// openreg), exported with C linkage so that torch_openreg.profiler can call
// them through ctypes without a pybind module of its own.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// Open a range named `name` on the current device and stream; returns the
// thread's depth of open ranges after the push.
int openreg_profiler_range_push(const char* name);
// Close the innermost open range of this thread; returns the depth after
// the pop, or -1 if no range was open.
int openreg_profiler_range_pop(void);
// An instant marker named `name`.
void openreg_profiler_mark(const char* name);

#ifdef __cplusplus
}
#endif
