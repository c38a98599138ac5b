/*
 * openreg.h -- the public C API of the OpenReg simulated accelerator runtime.
 *
 * This is the "driver" layer of the template. It has no PyTorch dependency and
 * its names mirror the CUDA runtime one-to-one (orMalloc <-> cudaMalloc,
 * orStreamWaitEvent <-> cudaStreamWaitEvent, ...). A vendor copying OpenReg
 * replaces this library with their own driver; everything in openreg_python/
 * talks to the device only through the calls declared here.
 *
 * Simulation model (see docs/runtime.md):
 *  - "Device memory" is mmap'ed host pages owned by the runtime, with a fixed
 *    per-device capacity (OPENREG_DEVICE_MEMORY). In strict mode (default;
 *    OPENREG_STRICT_MEMORY=0 turns it off) the device address range is mapped
 *    PROT_NONE: host code that dereferences a device pointer faults at once.
 *    Kernels reach the same pages through a second, private "kernel view"
 *    mapping (orDeviceGetKernelViewOffset), the simulation's stand-in for the
 *    device's own load/store path.
 *  - Streams are in-order queues executed by per-device worker threads;
 *    different streams are ordered only through events.
 *  - Errors raised by asynchronous work are reported at the next
 *    synchronisation of that stream / device / event.
 */
#ifndef OPENREG_H_
#define OPENREG_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define OR_API __declspec(dllexport)
#else
#define OR_API __attribute__((visibility("default")))
#endif

/* ---------------------------------------------------------------- limits */
/* Fixed limits of the simulation, the one source for the runtime and the
 * glue. (A real driver reports such numbers through device attributes; the
 * glue sizes its per-device tables with OR_MAX_DEVICES.) */
#define OR_MAX_DEVICES 16
#define OR_MALLOC_ALIGNMENT 512 /* every orMalloc result is aligned to this */

/* ---------------------------------------------------------------- errors */
typedef enum orError_t {
  orSuccess = 0,
  orErrorInvalidValue = 1,
  orErrorMemoryAllocation = 2,
  orErrorInitializationError = 3,
  orErrorInvalidDevice = 101,
  orErrorInvalidDevicePointer = 17,
  orErrorInvalidMemcpyDirection = 21,
  orErrorInvalidResourceHandle = 400,
  orErrorNotReady = 600,
  orErrorIllegalAddress = 700,
  orErrorLaunchFailure = 719,
  orErrorNotPermitted = 800,
  orErrorNotSupported = 801,
  /* The stream sanitizer found an access that races with earlier work on
   * another stream (no CUDA equivalent; see orSanitizerSetEnabled). */
  orErrorStreamRace = 900,
  /* Stream capture (orStreamBeginCapture), as CUDA's 900-908 (shifted: 900 is
   * taken above). */
  orErrorStreamCaptureUnsupported = 910, /* illegal while capturing; the capture is invalidated */
  orErrorStreamCaptureInvalidated = 911, /* the capture was invalidated by an earlier error */
  orErrorStreamCaptureUnmatched = 913,   /* end capture on a stream that did not begin it */
  orErrorStreamCaptureUnjoined = 914,    /* a forked stream did not join back before the end */
  orErrorStreamCaptureIsolation = 915,   /* a dependency on work outside the capture */
  orErrorCapturedEvent = 917,            /* query/sync of an event recorded in a capture */
  orErrorStreamCaptureWrongThread = 918, /* end capture from another thread (global, thread-local) */
  orErrorUnknown = 999
} orError_t;

/* Returns the last error of this host thread and resets it to orSuccess. */
OR_API orError_t orGetLastError(void);
/* Returns the last error of this host thread without resetting it. */
OR_API orError_t orPeekAtLastError(void);
OR_API const char* orGetErrorName(orError_t error);
OR_API const char* orGetErrorString(orError_t error);
/* Detail for the last failing call on this thread: names the call, the
 * device/stream and the reason. (No CUDA equivalent: CUDA only has codes.)
 * The pointer is valid until the next runtime call on this thread. */
OR_API const char* orGetLastErrorMessage(void);
/* Called by a kernel function (orKernelFn_t) that is about to return an
 * error: `message` becomes the reason its stream's error gives (at the next
 * synchronisation, or from a synchronous launch), in place of the error
 * code's string alone. A kernel that runs inside a graph replay gives it to
 * the replay's error. Ignored outside a kernel; copied. (No CUDA
 * equivalent: a device-side assert is CUDA's nearest.) */
OR_API orError_t orKernelSetErrorMessage(const char* message);

/* ---------------------------------------------------------------- devices */
typedef struct orDeviceProp {
  char name[64];
  size_t totalGlobalMem;      /* capacity in bytes (OPENREG_DEVICE_MEMORY) */
  int multiProcessorCount;    /* worker threads executing queued work */
  int major;                  /* "compute capability" of the simulation */
  int minor;
  int strictMemory;           /* 1 if device pages are host-inaccessible */
  int streamPriorityLeast;    /* see orDeviceGetStreamPriorityRange */
  int streamPriorityGreatest;
  size_t pageSize;
  /* A stable identity, like cudaDeviceProp::uuid: derived from the host name
   * and the device ordinal (an RFC 9562 version-8 UUID), so every process on
   * one host names a device the same way, and it never changes while the
   * process runs. */
  struct { unsigned char bytes[16]; } uuid;
  int integrated;             /* 1: device memory is host RAM (cudaDeviceProp::integrated) */
  int isMultiGpuBoard;        /* 0: there is no board */
} orDeviceProp;

OR_API orError_t orGetDeviceCount(int* count);
OR_API orError_t orSetDevice(int device);  /* per host thread, like CUDA */
OR_API orError_t orGetDevice(int* device);
OR_API orError_t orGetDeviceProperties(orDeviceProp* prop, int device);
OR_API orError_t orDeviceSynchronize(void);
/* 1 if kernels and copies on `device` can reach `peerDevice`'s memory (every
 * pair of distinct devices can: all arenas live in one address space); 0 for
 * device == peerDevice, as cudaDeviceCanAccessPeer. */
OR_API orError_t orDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice);
/* Lower numbers are higher priority, as in CUDA: least=0, greatest<0. */
OR_API orError_t orDeviceGetStreamPriorityRange(int* leastPriority,
                                                int* greatestPriority);

/* ---------------------------------------------------------------- memory */
/* Enums a caller passes in get a fixed underlying type in C++, so that any
 * int a caller casts to one (a binding, a fuzzer, a bug) is a value the
 * runtime can check and refuse: without it, an out-of-range value of a plain
 * enum is undefined behaviour before any check runs (UBSan's -fsanitize=enum
 * found this in orMemcpy). C keeps the plain enum, whose type is an int. */
#ifdef __cplusplus
#define OR_INT_ENUM : int
#else
#define OR_INT_ENUM
#endif
typedef enum orMemcpyKind OR_INT_ENUM {
  orMemcpyHostToHost = 0,
  orMemcpyHostToDevice = 1,
  orMemcpyDeviceToHost = 2,
  orMemcpyDeviceToDevice = 3,
  orMemcpyDefault = 4 /* infer the direction from the pointers */
} orMemcpyKind;

typedef enum orMemoryType {
  orMemoryTypeUnregistered = 0, /* pageable host memory (or garbage) */
  orMemoryTypeHost = 1,         /* pinned host memory from orMallocHost */
  orMemoryTypeDevice = 2
} orMemoryType;

typedef struct orPointerAttributes {
  orMemoryType type;
  int device;          /* -1 unless type == orMemoryTypeDevice */
  void* devicePointer; /* start of the enclosing allocation, or NULL */
  void* hostPointer;   /* kernel-view address of the pointer (device) or the
                          pointer itself (host) */
  size_t allocationSize; /* size of the enclosing allocation, 0 if unknown */
} orPointerAttributes;

OR_API orError_t orMalloc(void** devPtr, size_t size);
OR_API orError_t orFree(void* devPtr);
OR_API orError_t orMallocHost(void** ptr, size_t size);
OR_API orError_t orFreeHost(void* ptr);
OR_API orError_t orMemGetInfo(size_t* free, size_t* total);
OR_API orError_t orPointerGetAttributes(orPointerAttributes* attributes,
                                        const void* ptr);

/* Stream handle; NULL means the current device's default stream. */
typedef struct orStream_st* orStream_t;
typedef struct orEvent_st* orEvent_t;

OR_API orError_t orMemcpy(void* dst, const void* src, size_t count,
                          orMemcpyKind kind);
OR_API orError_t orMemcpyAsync(void* dst, const void* src, size_t count,
                               orMemcpyKind kind, orStream_t stream);
OR_API orError_t orMemset(void* devPtr, int value, size_t count);
OR_API orError_t orMemsetAsync(void* devPtr, int value, size_t count,
                               orStream_t stream);

/* ---------------------------------------------------------------- IPC */
/* Device memory that another process on the same host can map, as with
 * cudaIpcGetMemHandle / cudaIpcOpenMemHandle. The handle names the whole
 * allocation that contains devPtr (like CUDA, opening it yields the start of
 * that allocation). It is plain bytes: send it to the peer any way you like
 * (a store, a pipe, shared memory).
 *
 * How the simulation does it: in strict mode each device's memory is a
 * memfd; the handle carries the owner's pid, the memfd's descriptor number
 * and inode, and the allocation's offset and size. The peer opens
 * /proc/<pid>/fd/<fd> (the kernel allows that only to processes of the same
 * user), checks the inode (a recycled pid or descriptor is refused) and maps
 * the pages twice, as the runtime maps its own memory: a PROT_NONE range of
 * "device addresses", returned to the caller, and a private kernel view.
 * The opened pointer is device memory of the caller's current device for
 * orMemcpy*, orMemset* and orPointerGetAttributes (whose hostPointer is the
 * kernel-view address kernels use). With OPENREG_STRICT_MEMORY=0 memory is
 * anonymous and orIpcGetMemHandle fails with orErrorNotSupported.
 *
 * The exporter must keep the allocation alive while a peer has it open (as
 * with CUDA); what a peer sees after the owner frees it is undefined.
 * Vendor: replace with your driver's IPC export/import calls. */
#define OR_IPC_HANDLE_SIZE 64
typedef struct orIpcMemHandle_t {
  char reserved[OR_IPC_HANDLE_SIZE];
} orIpcMemHandle_t;
enum { orIpcMemLazyEnablePeerAccess = 0x1 }; /* accepted for CUDA parity; no effect */
OR_API orError_t orIpcGetMemHandle(orIpcMemHandle_t* handle, void* devPtr);
/* Maps a peer's allocation into this process; *devPtr is its start. Every
 * successful open is undone by one orIpcCloseMemHandle. */
OR_API orError_t orIpcOpenMemHandle(void** devPtr, orIpcMemHandle_t handle,
                                    unsigned int flags);
/* Unmaps memory opened with orIpcOpenMemHandle (the pointer it returned). */
OR_API orError_t orIpcCloseMemHandle(void* devPtr);

/* Simulation only (no CUDA equivalent): kernels reach device memory through
 * a private mapping at devPtr + offset. offset is 0 when strict mode is off.
 * Vendor: real hardware kernels take device pointers directly; delete this. */
OR_API orError_t orDeviceGetKernelViewOffset(int device, intptr_t* offset);

/* ---------------------------------------------------------------- streams */
OR_API orError_t orStreamCreate(orStream_t* stream);
OR_API orError_t orStreamCreateWithPriority(orStream_t* stream,
                                            unsigned int flags, int priority);
OR_API orError_t orStreamDestroy(orStream_t stream);
/* orSuccess when all work is done, orErrorNotReady while work is queued or
 * running. */
OR_API orError_t orStreamQuery(orStream_t stream);
OR_API orError_t orStreamSynchronize(orStream_t stream);
OR_API orError_t orStreamWaitEvent(orStream_t stream, orEvent_t event,
                                   unsigned int flags);
OR_API orError_t orStreamGetPriority(orStream_t stream, int* priority);
OR_API orError_t orStreamGetDevice(orStream_t stream, int* device);
/* A process-unique id, for tracing. */
OR_API orError_t orStreamGetId(orStream_t stream, unsigned long long* id);
/* Name a stream for reports (like NVTX's nvtxNameCudaStream); the stream
 * sanitizer uses it. `name` is copied. */
OR_API orError_t orStreamSetName(orStream_t stream, const char* name);

/* ---------------------------------------------------------------- events */
enum { orEventDefault = 0x0, orEventBlockingSync = 0x1,
       orEventDisableTiming = 0x2 };

OR_API orError_t orEventCreate(orEvent_t* event);
OR_API orError_t orEventCreateWithFlags(orEvent_t* event, unsigned int flags);
OR_API orError_t orEventDestroy(orEvent_t event);
OR_API orError_t orEventRecord(orEvent_t event, orStream_t stream);
OR_API orError_t orEventQuery(orEvent_t event);
OR_API orError_t orEventSynchronize(orEvent_t event);
/* Device time in milliseconds between the completion of the work recorded
 * before `start` and the work recorded before `end`. */
OR_API orError_t orEventElapsedTime(float* ms, orEvent_t start, orEvent_t end);

/* ---------------------------------------------------------------- work */
typedef void (*orHostFn_t)(void* userData);
/* Kernel body: runs on the device (here: a runtime thread, or inline on the
 * caller when the stream is idle). A non-zero return is an asynchronous
 * error reported at the next synchronisation. */
typedef orError_t (*orKernelFn_t)(void* args);

/* Like cudaLaunchHostFunc: enqueue a host callback in stream order. It never
 * runs inline: the stream reports not-ready until it has returned. */
OR_API orError_t orLaunchHostFunc(orStream_t stream, orHostFn_t fn,
                                  void* userData);

enum {
  orLaunchDefault = 0x0,
  /* Wait for the stream's earlier work, then run the kernel on the calling
   * thread and return its error directly (nothing is deferred). The stream
   * reports not-ready while it runs. This is how the torch glue runs
   * ATen-on-host kernels without a thread hop.
   * Vendor: real devices have no such mode; launches are asynchronous. */
  orLaunchSynchronous = 0x1,
  /* Never run the kernel inline on the calling thread, even when its stream
   * is idle: for work that may block on other processes (collectives), whose
   * launch must return at once. Real devices never run work inline, so a
   * vendor drops this flag. */
  orLaunchNeverInline = 0x2,
  /* Like orLaunchDefault (inline on the calling thread when the stream is
   * idle, else queued), but the inline run is only an attempt: there, and
   * only there, the kernel may return orErrorNotReady to mean "I would have
   * to block: finish me on a device worker". The runtime then puts the same
   * launch (same fn, same args) back at the head of its stream, which stays
   * busy, and a worker calls the kernel again, and that call must finish
   * (orErrorNotReady from it is an ordinary failure). The kernel tells the
   * two apart by its thread: the attempt runs on the launching thread. For
   * work that usually finishes at once but may wait on other processes: a
   * small collective whose peers are already there completes with no thread
   * hop, one whose peers are late returns to the caller after a short try.
   * Real devices never run work inline, so a vendor drops this flag. */
  orLaunchMayDefer = 0x4,
  /* The backend's own bookkeeping, not the program's work (the ASan
   * allocator's stream-ordered poisoning of freed blocks): runs in stream
   * order as any kernel, but trace subscribers never see it, so a profiler
   * shows only what the program launched. A real driver's internal work is
   * invisible to its profiler in the same way. */
  orLaunchUntraced = 0x8
};
/* Simulation only, like the spin kernel behind torch.cuda._sleep: occupy
 * `stream` for `microseconds` of device time. Never runs inline, so the
 * caller returns at once and the stream reports not-ready meanwhile. */
OR_API orError_t orLaunchSleep(orStream_t stream, unsigned long long microseconds);
/* Launch a kernel in stream order. `name` is recorded by the tracer and must
 * stay valid for the life of the process (use a string literal). */
OR_API orError_t orLaunchKernel(orStream_t stream, orKernelFn_t fn,
                                void* args, const char* name,
                                unsigned int flags);

/* Like orLaunchKernel, but the runtime owns `args`: it calls
 * `deleter(args)` once the kernel has run (or failed to launch), or, when
 * `stream` is capturing, when the graph that recorded the launch is
 * destroyed. A capture records kernels only from this call: orLaunchKernel's
 * `args` belong to the caller and may be gone by the time a graph replays
 * (CUDA copies kernel parameters by value; a host-code kernel's closure
 * cannot be copied as bytes). `deleter` may be NULL. */
typedef void (*orArgsDeleter_t)(void* args);
OR_API orError_t orLaunchKernelOwned(orStream_t stream, orKernelFn_t fn, void* args,
                                     orArgsDeleter_t deleter, const char* name,
                                     unsigned int flags);

/* ---------------------------------------------------------------- graphs */
/* Stream capture and graphs, modelled on CUDA's (cudaStreamBeginCapture,
 * cudaGraphInstantiate, cudaGraphLaunch). While a stream captures, work
 * enqueued on it (kernels from orLaunchKernelOwned, host functions, async
 * copies and memsets) is recorded into a graph instead of running, whatever
 * its launch flags. A stream that waits on an event recorded in a capturing
 * stream joins the capture (fork); the capture's origin must wait on an
 * event recorded in every joined stream after its last work (join) before
 * orStreamEndCapture. Calls that would wait for captured work or observe it
 * fail with orErrorStreamCaptureUnsupported and invalidate the capture:
 * orStreamSynchronize/orStreamQuery of a capturing stream (any mode), and
 * orDeviceSynchronize, orMemcpy and orMemset (blocking) in global mode from
 * any thread, in thread-local mode from the capturing thread; relaxed mode
 * allows those. A replay (orGraphLaunch) runs the recorded work in capture
 * order on the launch stream, as one item of that stream; the tracer reports
 * the launch ("orGraphLaunch") and each node. */
typedef struct orGraph_st* orGraph_t;
typedef struct orGraphExec_st* orGraphExec_t;
typedef enum orStreamCaptureMode OR_INT_ENUM {
  orStreamCaptureModeGlobal = 0,
  orStreamCaptureModeThreadLocal = 1,
  orStreamCaptureModeRelaxed = 2
} orStreamCaptureMode;
typedef enum orStreamCaptureStatus {
  orStreamCaptureStatusNone = 0,
  orStreamCaptureStatusActive = 1,
  orStreamCaptureStatusInvalidated = 2
} orStreamCaptureStatus;
/* The default stream cannot be captured (as CUDA's legacy stream). */
OR_API orError_t orStreamBeginCapture(orStream_t stream, orStreamCaptureMode mode);
/* Ends the capture begun on `stream`; *graph is NULL unless it succeeds. */
OR_API orError_t orStreamEndCapture(orStream_t stream, orGraph_t* graph);
OR_API orError_t orStreamIsCapturing(orStream_t stream, orStreamCaptureStatus* status);
/* As orStreamIsCapturing, and the capture's id (cudaStreamGetCaptureInfo's
 * id_out): unique in the process, the same on every stream that joined the
 * capture, 0 when `stream` is not capturing. `id` may be NULL. */
OR_API orError_t orStreamGetCaptureInfo(orStream_t stream, orStreamCaptureStatus* status,
                                        unsigned long long* id);
OR_API orError_t orGraphInstantiate(orGraphExec_t* exec, orGraph_t graph);
OR_API orError_t orGraphLaunch(orGraphExec_t exec, orStream_t stream);
/* A graph's owned kernel arguments live until the graph and every executable
 * graph made from it are destroyed; a queued launch keeps its graph alive. */
OR_API orError_t orGraphDestroy(orGraph_t graph);
OR_API orError_t orGraphExecDestroy(orGraphExec_t exec);
OR_API orError_t orGraphGetNodeCount(orGraph_t graph, size_t* count);
/* Writes the graph as a Graphviz DOT file: one node per recorded operation
 * (kernel name, copy or memset size), one edge per dependency. */
OR_API orError_t orGraphDebugDotPrint(orGraph_t graph, const char* path);

/* ---------------------------------------------------------------- sanitizer */
/* The stream-race sanitizer (no CUDA runtime equivalent; compute-sanitizer's
 * racecheck and PyTorch's CSAN are the nearest). While enabled, the runtime
 * tracks happens-before between streams and the host with vector clocks:
 * stream order, event record/wait, stream/event/device synchronisation and
 * blocking copies. Every copy and memset declares the memory it touches
 * itself; a kernel's accesses are declared by its launcher with
 * orSanitizerDeclareAccess. orFree ends a range's history (as cudaFree,
 * which synchronises the device). An access whose last conflicting access (a write,
 * or any access for a write) was made on another stream and is not ordered
 * before it fails with orErrorStreamRace *before the work runs*;
 * orGetLastErrorMessage() then names both accesses, both streams and the fix.
 * Off by default; OPENREG_STREAM_SANITIZER=1 turns it on at load. Enabling or
 * disabling forgets all tracked history.
 * Vendor: a real driver has no such mode; keep the glue's declarations only
 * if your runtime (or a tool such as compute-sanitizer) can use them. */
OR_API orError_t orSanitizerSetEnabled(int enabled);
OR_API orError_t orSanitizerGetEnabled(int* enabled);
/* Declare that the next kernel (or graph: orGraphLaunch checks a replay as one
 * kernel) launched from this host thread reads
 * (is_write == 0) or writes [ptr, ptr+bytes) of device or pinned memory;
 * called while a kernel body runs on this thread (an orLaunchSynchronous
 * launch), the access is that kernel's and is checked at once. `label`
 * describes the data for reports (e.g. "float32[64, 128]"), may be NULL and is
 * copied. Returns orErrorStreamRace only in the second case. */
OR_API orError_t orSanitizerDeclareAccess(const void* ptr, size_t bytes,
                                          int is_write, const char* label);
/* The host itself reads or writes [ptr, ptr+bytes) of pinned memory (e.g.
 * the result of an asynchronous device-to-host copy) as `op`. */
OR_API orError_t orSanitizerHostAccess(const void* ptr, size_t bytes,
                                       int is_write, const char* op);
/* A caching allocator freed [ptr, ptr+bytes) for reuse: the accesses made so
 * far stay tracked, and a later access that races with them is reported as a
 * reuse of freed memory (the missing record_stream case). */
OR_API orError_t orSanitizerMarkFreed(const void* ptr, size_t bytes);
/* The caller knows the work before `event` has completed (it waited for or
 * queried the event before reusing [ptr, ptr+bytes)): forget the accesses to
 * that range which the event covers. NULL: forget every access to it. */
OR_API orError_t orSanitizerRelease(const void* ptr, size_t bytes,
                                    orEvent_t event);

/* ---------------------------------------------------------------- memcheck */
/* Memcheck, the simulation's `compute-sanitizer --tool memcheck`
 * (docs/memcheck.md). OPENREG_MEMCHECK=1 at load: every orMalloc gets pages
 * of its own, ending at a guard page (OPENREG_MEMCHECK_GUARD=start: starting
 * after one), so its result is aligned to the largest power of two dividing
 * its size (at most a page) rather than OR_MALLOC_ALIGNMENT; orFree makes
 * the pages unreachable and keeps them out of use for a while (a quarantine
 * of OPENREG_MEMCHECK_QUARANTINE bytes, 256M by default). A kernel that
 * touches memory outside a live allocation is stopped at that access and
 * reported (kind, kernel, stream, the nearest allocation); then the process
 * aborts, or with OPENREG_MEMCHECK_ON_ERROR=raise the kernel fails with
 * orErrorIllegalAddress and the report as the error message. Copies and
 * memsets that touch such memory fail as always, their message naming the
 * allocation. */
OR_API orError_t orMemcheckGetEnabled(int* enabled);
/* Called while a report is built (no runtime lock held, on the faulting
 * kernel's thread) with the allocation nearest the fault: write what is known
 * of it (e.g. the stacks of its allocation and free) as lines into
 * buf[0, len) and return the length written. A caching allocator registers
 * one; NULL unregisters. */
typedef size_t (*orMemcheckDescriber_t)(const void* devPtr, size_t size, int freed,
                                        char* buf, size_t len);
OR_API orError_t orMemcheckSetDescriber(orMemcheckDescriber_t describer);

/* ---------------------------------------------------------------- tracing */
/* Hook points for profilers (CUPTI's activity API plays this role for CUDA).
 * Vendor: your driver reports the same facts about each piece of device work;
 * the Kineto plugin in profiler/ only consumes these records. */
typedef enum orTraceKind {
  orTraceKernel = 0,
  orTraceMemcpy = 1,
  orTraceMemset = 2,
  orTraceHostFunc = 3,
  orTraceGraphLaunch = 4  /* a replay (orGraphLaunch); its nodes follow as their own kinds */
} orTraceKind;

typedef struct orTraceRecord {
  orTraceKind kind;
  const char* name;        /* kernel name or API name ("orMemcpyAsync") */
  int device;
  unsigned long long stream_id;
  unsigned long long correlation_id; /* from orTraceSetCorrelationId */
  uint64_t start_ns;       /* device execution, CLOCK_MONOTONIC */
  uint64_t end_ns;
  size_t bytes;            /* memcpy/memset size, 0 for kernels */
  orMemcpyKind copy_kind;  /* memcpy only */
  uint64_t launch_ns;      /* when the host thread launched it (CLOCK_MONOTONIC) */
  unsigned long long launch_thread; /* the launching host thread (Linux tid) */
  const char* annotation;  /* from orTraceSetLaunchAnnotation, or NULL; valid
                              during the callback only */
} orTraceRecord;

typedef void (*orTraceCallback_t)(const orTraceRecord* record, void* user);
typedef struct orTraceSubscriber_st* orTraceSubscriber_t;
/* Subscribe `callback` to every piece of device work that completes from now
 * on. It is called on whichever thread executed the work, after it finished.
 * Any number of subscribers may listen at once; with none, tracing costs one
 * atomic load per launch. */
OR_API orError_t orTraceSubscribe(orTraceSubscriber_t* subscriber,
                                  orTraceCallback_t callback, void* user);
/* After this returns, the subscriber's callback is not running and will not
 * be called again. */
OR_API orError_t orTraceUnsubscribe(orTraceSubscriber_t subscriber);
/* *active = 1 while anyone subscribes to the trace: producers that build
 * annotations check it first, so that untraced launches cost nothing. */
OR_API orError_t orTraceIsActive(int* active);
/* Attach `annotation` to the next piece of work this host thread launches
 * while someone is tracing (copied; NULL clears it). Format: one "key=value"
 * per line, value in JSON (e.g. "Collective name=\"allreduce\"\nGroup size=2"):
 * profilers show them as the activity's arguments, as NCCL's c10d metadata. */
OR_API orError_t orTraceSetLaunchAnnotation(const char* annotation);
/* Tag work launched from this host thread from now on (0: untagged). */
OR_API orError_t orTraceSetCorrelationId(unsigned long long id);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OPENREG_H_ */
