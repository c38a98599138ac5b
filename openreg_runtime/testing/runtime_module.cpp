// torch_openreg._runtime: the runtime's C API exposed to pytest, 1:1.
//
// It links only libopenreg (no torch), so the runtime is tested as the
// standalone "driver" a vendor would replace. Pointers and handles cross
// into Python as integers. Failing calls raise OpenRegError carrying the
// error code, its name and the runtime's detail message.
#include <openreg.h>

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <pybind11/stl.h>
#include <pybind11/eval.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace py = pybind11;

namespace {

PyObject* g_error_type = nullptr;

void check(orError_t err) {
  if (err == orSuccess) return;
  orGetLastError();  // consume it, like a CUDA_CHECK would
  std::string msg = std::string(orGetErrorName(err)) + ": " + orGetLastErrorMessage();
  py::object exc = py::reinterpret_borrow<py::object>(g_error_type)(
      msg, static_cast<int>(err), orGetErrorName(err));
  PyErr_SetObject(g_error_type, exc.ptr());
  throw py::error_already_set();
}

uintptr_t P(const void* p) { return reinterpret_cast<uintptr_t>(p); }
void* V(uintptr_t p) { return reinterpret_cast<void*>(p); }
orStream_t S(uintptr_t p) { return reinterpret_cast<orStream_t>(p); }
orEvent_t E(uintptr_t p) { return reinterpret_cast<orEvent_t>(p); }

// ---- host functions used by the tests -------------------------------------

// A gate: a host function that blocks its stream until released from Python.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<bool> entered{false};
  void release() {
    std::lock_guard<std::mutex> g(mu);
    open = true;
    cv.notify_all();
  }
};
void gate_fn(void* p) {
  auto* g = static_cast<Gate*>(p);
  g->entered = true;
  std::unique_lock<std::mutex> lk(g->mu);
  g->cv.wait(lk, [&] { return g->open; });
}

// An append-only log of integers, to observe execution order.
struct Log {
  std::mutex mu;
  std::vector<long> values;
};
struct LogEntry {
  Log* log;
  long value;
  int sleep_us;
};
void log_fn(void* p) {
  auto* e = static_cast<LogEntry*>(p);
  if (e->sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(e->sleep_us));
  {
    std::lock_guard<std::mutex> g(e->log->mu);
    e->log->values.push_back(e->value);
  }
  delete e;
}

// A "kernel" that fills int32 device memory through the kernel view.
struct FillArgs {
  int32_t* kview;
  size_t n;
  int32_t value;
};
orError_t fill_kernel(void* p) {
  auto* a = static_cast<FillArgs*>(p);
  for (size_t i = 0; i < a->n; ++i) a->kview[i] = a->value;
  delete a;
  return orSuccess;
}
orError_t failing_kernel(void*) { return orErrorLaunchFailure; }

// Fails saying why (orKernelSetErrorMessage); args: the message (owned by
// the caller until the kernel ran).
orError_t failing_kernel_with_reason(void* args) {
  orKernelSetErrorMessage(static_cast<const char*>(args));
  return orErrorLaunchFailure;
}

// x[i] = x[i] * mul + add: an owned-argument kernel (orLaunchKernelOwned)
// whose result depends on how many times, and in which order, it ran.
struct OwnedCounter {
  std::atomic<int> runs{0};
  std::atomic<int> freed{0};
};
struct AxpyArgs {
  int32_t* kview;
  size_t n;
  int32_t mul, add;
  std::shared_ptr<OwnedCounter> counter;
};
orError_t axpy_kernel(void* p) {
  auto* a = static_cast<AxpyArgs*>(p);
  for (size_t i = 0; i < a->n; ++i) a->kview[i] = a->kview[i] * a->mul + a->add;
  if (a->counter) a->counter->runs++;
  return orSuccess;
}
void free_axpy(void* p) {
  auto* a = static_cast<AxpyArgs*>(p);
  if (a->counter) a->counter->freed++;
  delete a;
}

// stress_stream: many host threads launching on one stream. The kernel
// counts with a plain (racy) read-modify-write and detects overlap, so two
// kernels running on one stream at once show up as lost counts or overlaps.
struct StressState {
  std::atomic<int> inside{0};
  std::atomic<long> overlaps{0};
  long count = 0;
};

orError_t stress_kernel(void* p) {
  auto* st = static_cast<StressState*>(p);
  if (st->inside.fetch_add(1) != 0) st->overlaps.fetch_add(1);
  long v = st->count;
  for (volatile int i = 0; i < 50; ++i) {
  }
  st->count = v + 1;
  st->inside.fetch_sub(1);
  return orSuccess;
}

// A kernel that records the thread it ran on, then blocks on a gate.
struct GateKernelArgs {
  std::shared_ptr<Gate> gate;
  std::shared_ptr<std::atomic<unsigned long long>> thread;
};
unsigned long long this_thread_id() {
  return static_cast<unsigned long long>(std::hash<std::thread::id>()(std::this_thread::get_id()));
}
orError_t gate_kernel(void* p) {
  std::unique_ptr<GateKernelArgs> a(static_cast<GateKernelArgs*>(p));
  a->thread->store(this_thread_id());
  gate_fn(a->gate.get());
  return orSuccess;
}

// orLaunchMayDefer: on the launching thread the kernel gives up (if asked
// to); on a worker it waits on the gate, or fails with orErrorNotReady
// (which only an inline attempt may return). Every call records its thread.
struct DeferCalls {
  std::mutex mu;
  std::vector<unsigned long long> threads;
};
struct DeferKernelArgs {
  std::shared_ptr<Gate> gate;
  std::shared_ptr<DeferCalls> calls;
  unsigned long long launcher;
  bool defer;
  bool not_ready_on_worker;
};
orError_t defer_kernel(void* p) {
  auto* a = static_cast<DeferKernelArgs*>(p);
  const unsigned long long me = this_thread_id();
  {
    std::lock_guard<std::mutex> g(a->calls->mu);
    a->calls->threads.push_back(me);
  }
  if (a->defer && me == a->launcher) return orErrorNotReady;  // called again: keep args
  std::unique_ptr<DeferKernelArgs> own(a);
  if (a->not_ready_on_worker) return orErrorNotReady;
  gate_fn(a->gate.get());
  return orSuccess;
}

// Trace capture: each recorder is one subscriber of the runtime's trace.
struct TraceRec {
  int kind;
  std::string name;
  int device;
  unsigned long long stream, corr;
  uint64_t t0, t1, launch;
  unsigned long long launch_thread;
  size_t bytes;
  std::string annotation;
};
struct TraceRecorder {
  std::mutex mu;
  std::vector<TraceRec> records;
  orTraceSubscriber_t sub = nullptr;

  static void on_record(const orTraceRecord* r, void* self) {
    auto* t = static_cast<TraceRecorder*>(self);
    std::lock_guard<std::mutex> g(t->mu);
    t->records.push_back({int(r->kind), r->name ? r->name : "", r->device, r->stream_id,
                          r->correlation_id, r->start_ns, r->end_ns, r->launch_ns,
                          r->launch_thread, r->bytes, r->annotation ? r->annotation : ""});
  }
  void start() {
    if (sub) return;
    {
      std::lock_guard<std::mutex> g(mu);
      records.clear();
    }
    check(orTraceSubscribe(&sub, &TraceRecorder::on_record, this));
  }
  py::list stop() {
    if (sub) {
      orError_t e;
      {
        py::gil_scoped_release nogil;  // waits for running callbacks
        e = orTraceUnsubscribe(sub);
      }
      sub = nullptr;
      check(e);
    }
    std::lock_guard<std::mutex> g(mu);
    py::list out;
    static const char* kinds[] = {"kernel", "memcpy", "memset", "host_func", "graph"};
    for (auto& r : records) {
      py::dict d;
      d["kind"] = kinds[r.kind];
      d["name"] = r.name;
      d["device"] = r.device;
      d["stream"] = r.stream;
      d["correlation"] = r.corr;
      d["start_ns"] = r.t0;
      d["end_ns"] = r.t1;
      d["launch_ns"] = r.launch;
      d["launch_thread"] = r.launch_thread;
      d["bytes"] = r.bytes;
      d["annotation"] = r.annotation;
      out.append(d);
    }
    records.clear();
    return out;
  }
  ~TraceRecorder() {
    if (sub && orTraceUnsubscribe(sub) != orSuccess) orGetLastError();
  }
};
TraceRecorder& default_recorder() {
  static auto* r = new TraceRecorder();
  return *r;
}

}  // namespace

// One function, longer than the house's 100 lines on purpose: it is the
// binding table of the runtime's C API for the torch-free tests, one m.def
// per call of openreg.h, read by looking a call up by its name.
PYBIND11_MODULE(_runtime, m) {
  m.doc() = "OpenReg runtime C API, exposed for tests (no torch dependency)";

  // OpenRegError(message, code, name)
  py::dict ns;
  py::exec(R"(
class OpenRegError(RuntimeError):
    def __init__(self, message, code=0, name=""):
        super().__init__(message)
        self.code = code
        self.name = name
)", ns);
  py::object err_type = ns["OpenRegError"];
  err_type.attr("__module__") = "torch_openreg._runtime";
  m.attr("OpenRegError") = err_type;
  g_error_type = err_type.ptr();
  Py_INCREF(g_error_type);

  m.attr("HostToHost") = int(orMemcpyHostToHost);
  m.attr("HostToDevice") = int(orMemcpyHostToDevice);
  m.attr("DeviceToHost") = int(orMemcpyDeviceToHost);
  m.attr("DeviceToDevice") = int(orMemcpyDeviceToDevice);
  m.attr("Default") = int(orMemcpyDefault);
  m.attr("EventDisableTiming") = int(orEventDisableTiming);
  m.attr("ALIGNMENT") = OR_MALLOC_ALIGNMENT;
  m.attr("MAX_DEVICES") = OR_MAX_DEVICES;

  m.def("error_name", [](int e) { return std::string(orGetErrorName(orError_t(e))); });
  m.def("error_string", [](int e) { return std::string(orGetErrorString(orError_t(e))); });
  m.def("get_last_error", [] { return int(orGetLastError()); });
  m.def("peek_last_error", [] { return int(orPeekAtLastError()); });

  // devices
  m.def("device_count", [] {
    int n = 0;
    check(orGetDeviceCount(&n));
    return n;
  });
  m.def("set_device", [](int d) { check(orSetDevice(d)); });
  m.def("get_device", [] {
    int d = 0;
    check(orGetDevice(&d));
    return d;
  });
  m.def("device_synchronize", [] {
    py::gil_scoped_release nogil;
    orError_t e = orDeviceSynchronize();
    py::gil_scoped_acquire gil;
    check(e);
  });
  m.def("get_device_properties", [](int d) {
    orDeviceProp p;
    check(orGetDeviceProperties(&p, d));
    py::dict r;
    r["name"] = std::string(p.name);
    r["total_memory"] = p.totalGlobalMem;
    r["multi_processor_count"] = p.multiProcessorCount;
    r["major"] = p.major;
    r["minor"] = p.minor;
    r["strict_memory"] = bool(p.strictMemory);
    r["stream_priority_least"] = p.streamPriorityLeast;
    r["stream_priority_greatest"] = p.streamPriorityGreatest;
    r["uuid"] = py::bytes(reinterpret_cast<const char*>(p.uuid.bytes), sizeof(p.uuid.bytes));
    r["is_integrated"] = p.integrated;
    r["is_multi_gpu_board"] = p.isMultiGpuBoard;
    return r;
  });
  m.def("device_can_access_peer", [](int d, int peer) {
    int can = 0;
    check(orDeviceCanAccessPeer(&can, d, peer));
    return bool(can);
  });
  m.def("stream_priority_range", [] {
    int lo, hi;
    check(orDeviceGetStreamPriorityRange(&lo, &hi));
    return py::make_tuple(lo, hi);
  });

  // memory
  m.def("malloc", [](size_t n) {
    void* p = nullptr;
    check(orMalloc(&p, n));
    return P(p);
  });
  m.def("free", [](uintptr_t p) { check(orFree(V(p))); });
  m.def("malloc_host", [](size_t n) {
    void* p = nullptr;
    check(orMallocHost(&p, n));
    return P(p);
  });
  m.def("free_host", [](uintptr_t p) { check(orFreeHost(V(p))); });
  m.def("mem_get_info", [] {
    size_t f = 0, t = 0;
    check(orMemGetInfo(&f, &t));
    return py::make_tuple(f, t);
  });
  m.def("pointer_attributes", [](uintptr_t p) {
    orPointerAttributes a;
    check(orPointerGetAttributes(&a, V(p)));
    py::dict r;
    r["type"] = a.type == orMemoryTypeDevice ? "device"
                : a.type == orMemoryTypeHost ? "host"
                                             : "unregistered";
    r["device"] = a.device;
    r["device_pointer"] = P(a.devicePointer);
    r["host_pointer"] = P(a.hostPointer);
    r["allocation_size"] = a.allocationSize;
    return r;
  });
  m.def("ipc_get_mem_handle", [](uintptr_t p) {
    orIpcMemHandle_t h;
    check(orIpcGetMemHandle(&h, V(p)));
    return py::bytes(h.reserved, sizeof(h.reserved));
  });
  m.def("ipc_open_mem_handle", [](py::bytes b) {
    std::string s = b;
    orIpcMemHandle_t h;
    memset(&h, 0, sizeof(h));
    memcpy(h.reserved, s.data(), std::min(s.size(), sizeof(h.reserved)));
    void* p = nullptr;
    check(orIpcOpenMemHandle(&p, h, orIpcMemLazyEnablePeerAccess));
    return P(p);
  });
  m.def("ipc_close_mem_handle", [](uintptr_t p) { check(orIpcCloseMemHandle(V(p))); });
  m.def("kernel_view_offset", [](int d) {
    intptr_t off = 0;
    check(orDeviceGetKernelViewOffset(d, &off));
    return off;
  });
  m.def("memcpy", [](uintptr_t dst, uintptr_t src, size_t n, int kind) {
    orError_t e;
    {
      py::gil_scoped_release nogil;
      e = orMemcpy(V(dst), V(src), n, orMemcpyKind(kind));
    }
    check(e);
  }, py::arg("dst"), py::arg("src"), py::arg("count"), py::arg("kind") = int(orMemcpyDefault));
  m.def("memcpy_async", [](uintptr_t dst, uintptr_t src, size_t n, int kind, uintptr_t s) {
    orError_t e;
    {
      py::gil_scoped_release nogil;
      e = orMemcpyAsync(V(dst), V(src), n, orMemcpyKind(kind), S(s));
    }
    check(e);
  }, py::arg("dst"), py::arg("src"), py::arg("count"), py::arg("kind") = int(orMemcpyDefault),
     py::arg("stream") = 0);
  m.def("memset", [](uintptr_t p, int v, size_t n) { check(orMemset(V(p), v, n)); });
  m.def("memset_async", [](uintptr_t p, int v, size_t n, uintptr_t s) {
    check(orMemsetAsync(V(p), v, n, S(s)));
  }, py::arg("ptr"), py::arg("value"), py::arg("count"), py::arg("stream") = 0);
  // Host-side peek/poke for pinned/pageable host buffers given as integers.
  m.def("read_host", [](uintptr_t p, size_t n) {
    return py::bytes(static_cast<const char*>(V(p)), n);
  });
  m.def("write_host", [](uintptr_t p, py::bytes b) {
    std::string s = b;
    memcpy(V(p), s.data(), s.size());
  });

  // streams
  m.def("stream_create", [](int priority) {
    orStream_t s = nullptr;
    check(orStreamCreateWithPriority(&s, 0, priority));
    return P(s);
  }, py::arg("priority") = 0);
  m.def("stream_destroy", [](uintptr_t s) {
    orError_t e;
    {
      py::gil_scoped_release nogil;
      e = orStreamDestroy(S(s));
    }
    check(e);
  });
  m.def("stream_query", [](uintptr_t s) {
    orError_t e = orStreamQuery(S(s));
    if (e == orErrorNotReady) return false;
    check(e);
    return true;
  });
  m.def("stream_synchronize", [](uintptr_t s) {
    orError_t e;
    {
      py::gil_scoped_release nogil;
      e = orStreamSynchronize(S(s));
    }
    check(e);
  });
  m.def("stream_wait_event", [](uintptr_t s, uintptr_t e) {
    check(orStreamWaitEvent(S(s), E(e), 0));
  });
  m.def("stream_priority", [](uintptr_t s) {
    int p = 0;
    check(orStreamGetPriority(S(s), &p));
    return p;
  });
  m.def("stream_device", [](uintptr_t s) {
    int d = 0;
    check(orStreamGetDevice(S(s), &d));
    return d;
  });
  m.def("stream_id", [](uintptr_t s) {
    unsigned long long id = 0;
    check(orStreamGetId(S(s), &id));
    return id;
  });

  // events
  m.def("event_create", [](unsigned flags) {
    orEvent_t e = nullptr;
    check(orEventCreateWithFlags(&e, flags));
    return P(e);
  }, py::arg("flags") = 0);
  m.def("event_destroy", [](uintptr_t e) { check(orEventDestroy(E(e))); });
  m.def("event_record", [](uintptr_t e, uintptr_t s) { check(orEventRecord(E(e), S(s))); },
        py::arg("event"), py::arg("stream") = 0);
  m.def("event_query", [](uintptr_t e) {
    orError_t r = orEventQuery(E(e));
    if (r == orErrorNotReady) return false;
    check(r);
    return true;
  });
  m.def("event_synchronize", [](uintptr_t e) {
    orError_t r;
    {
      py::gil_scoped_release nogil;
      r = orEventSynchronize(E(e));
    }
    check(r);
  });
  m.def("event_elapsed_time", [](uintptr_t a, uintptr_t b) {
    float ms = 0;
    check(orEventElapsedTime(&ms, E(a), E(b)));
    return ms;
  });

  // work
  py::class_<Gate, std::shared_ptr<Gate>>(m, "Gate")
      .def(py::init<>())
      .def("release", &Gate::release)
      .def_property_readonly("entered", [](Gate& g) { return g.entered.load(); });
  m.def("launch_gate", [](uintptr_t s, std::shared_ptr<Gate> g) {
    // The Python object keeps the gate alive; tests release before dropping.
    check(orLaunchHostFunc(S(s), gate_fn, g.get()));
  });
  py::class_<Log, std::shared_ptr<Log>>(m, "Log")
      .def(py::init<>())
      .def_property_readonly("values", [](Log& l) {
        std::lock_guard<std::mutex> g(l.mu);
        return l.values;
      });
  m.def("launch_log", [](uintptr_t s, std::shared_ptr<Log> log, long value, int sleep_us) {
    check(orLaunchHostFunc(S(s), log_fn, new LogEntry{log.get(), value, sleep_us}));
  }, py::arg("stream"), py::arg("log"), py::arg("value"), py::arg("sleep_us") = 0);
  m.def("launch_sleep", [](uintptr_t s, long us) {
    check(orLaunchSleep(S(s), static_cast<unsigned long long>(us)));
  });
  m.def("launch_fill_i32", [](uintptr_t s, uintptr_t devptr, size_t n, int32_t value, bool sync) {
    orPointerAttributes a;
    check(orPointerGetAttributes(&a, V(devptr)));
    if (a.type != orMemoryTypeDevice || !a.devicePointer) {
      PyErr_SetString(PyExc_ValueError, "launch_fill_i32: not a live device pointer");
      throw py::error_already_set();
    }
    auto* args = new FillArgs{static_cast<int32_t*>(a.hostPointer), n, value};
    orError_t e;
    {
      py::gil_scoped_release nogil;
      e = orLaunchKernel(S(s), fill_kernel, args, "fill_i32",
                         sync ? orLaunchSynchronous : orLaunchDefault);
    }
    check(e);
  }, py::arg("stream"), py::arg("ptr"), py::arg("n"), py::arg("value"), py::arg("sync") = false);
  m.attr("LaunchDefault") = int(orLaunchDefault);
  m.attr("LaunchSynchronous") = int(orLaunchSynchronous);
  m.attr("LaunchNeverInline") = int(orLaunchNeverInline);
  m.attr("LaunchMayDefer") = int(orLaunchMayDefer);
  m.attr("LaunchUntraced") = int(orLaunchUntraced);
  m.def("this_thread_id", [] { return this_thread_id(); });
  // Launches a kernel that blocks on `gate`; returns a function giving the id
  // of the thread the kernel ran on (0 until it started).
  m.def("launch_gate_kernel", [](uintptr_t s, std::shared_ptr<Gate> g, unsigned flags) {
    auto thread = std::make_shared<std::atomic<unsigned long long>>(0);
    auto* args = new GateKernelArgs{g, thread};
    orError_t e;
    {
      py::gil_scoped_release nogil;
      e = orLaunchKernel(S(s), gate_kernel, args, "gate_kernel", flags);
    }
    check(e);
    return py::cpp_function([thread] { return thread->load(); });
  }, py::arg("stream"), py::arg("gate"), py::arg("flags"));
  // Returns a function giving the ids of the threads the kernel was called on.
  m.def("launch_defer_kernel", [](uintptr_t s, std::shared_ptr<Gate> g, bool defer,
                                  bool not_ready_on_worker, unsigned flags) {
    auto calls = std::make_shared<DeferCalls>();
    auto* args = new DeferKernelArgs{g, calls, this_thread_id(), defer, not_ready_on_worker};
    orError_t e;
    {
      py::gil_scoped_release nogil;
      e = orLaunchKernel(S(s), defer_kernel, args, "defer_kernel", flags);
    }
    if (e != orSuccess) delete args;
    check(e);
    return py::cpp_function([calls] {
      std::lock_guard<std::mutex> g(calls->mu);
      return calls->threads;
    });
  }, py::arg("stream"), py::arg("gate"), py::arg("defer"), py::arg("not_ready_on_worker") = false,
     py::arg("flags") = int(orLaunchMayDefer));
  m.def("launch_failing_kernel", [](uintptr_t s, bool sync, std::optional<std::string> reason) {
    orError_t e;
    {
      py::gil_scoped_release nogil;
      if (reason) {
        // The message lives as long as the kernel needs it: owned by the launch.
        char* text = strdup(reason->c_str());
        e = orLaunchKernelOwned(S(s), failing_kernel_with_reason, text,
                                [](void* p) { free(p); }, "fails_saying_why",
                                sync ? orLaunchSynchronous : orLaunchDefault);
      } else {
        e = orLaunchKernel(S(s), failing_kernel, nullptr, "always_fails",
                           sync ? orLaunchSynchronous : orLaunchDefault);
      }
    }
    check(e);
  }, py::arg("stream"), py::arg("sync") = false, py::arg("reason") = std::nullopt);
  m.def("kernel_set_error_message_outside_a_kernel", [](const char* m) {
    check(orKernelSetErrorMessage(m));
  });
  // `threads` host threads each launch `iters` kernels on stream `s`: mostly
  // synchronous (the lock-free claim), every 7th a default launch (inline or
  // queued for a worker), with stream synchronisations, and thread 0 also
  // records and waits on an event. Returns (count, overlaps, failed calls).
  m.def("stress_stream", [](uintptr_t s, int threads, int iters) {
    StressState st;
    std::atomic<long> failed{0};
    {
      py::gil_scoped_release nogil;
      orEvent_t ev = nullptr;
      if (orEventCreate(&ev) != orSuccess) failed++;
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t) {
        ts.emplace_back([&, t] {
          for (int i = 0; i < iters; ++i) {
            unsigned flags = (i % 7 == 3) ? orLaunchDefault : orLaunchSynchronous;
            if (orLaunchKernel(S(s), stress_kernel, &st, "stress", flags) != orSuccess) failed++;
            if (i % 50 == 49 && orStreamSynchronize(S(s)) != orSuccess) failed++;
            if (t == 0 && ev && i % 10 == 5) {
              if (orEventRecord(ev, S(s)) != orSuccess) failed++;
              if (orEventSynchronize(ev) != orSuccess) failed++;
            }
          }
        });
      }
      for (auto& th : ts) th.join();
      if (orStreamSynchronize(S(s)) != orSuccess) failed++;
      if (ev) orEventDestroy(ev);
    }
    return py::make_tuple(st.count, st.overlaps.load(), failed.load());
  }, py::arg("stream"), py::arg("threads"), py::arg("iters"));

  // tracing
  py::class_<TraceRecorder, std::shared_ptr<TraceRecorder>>(m, "TraceRecorder")
      .def(py::init<>())
      .def("start", &TraceRecorder::start)
      .def("stop", &TraceRecorder::stop);
  // ---- stream capture and graphs
  py::class_<OwnedCounter, std::shared_ptr<OwnedCounter>>(m, "OwnedCounter")
      .def(py::init<>())
      .def_property_readonly("runs", [](OwnedCounter& c) { return c.runs.load(); })
      .def_property_readonly("freed", [](OwnedCounter& c) { return c.freed.load(); });
  m.def("launch_axpy_i32", [](uintptr_t s, uintptr_t devptr, size_t n, int32_t mul, int32_t add,
                              unsigned flags, std::shared_ptr<OwnedCounter> counter) {
    orPointerAttributes a;
    check(orPointerGetAttributes(&a, V(devptr)));
    if (a.type != orMemoryTypeDevice || !a.devicePointer) {
      PyErr_SetString(PyExc_ValueError, "launch_axpy_i32: not a live device pointer");
      throw py::error_already_set();
    }
    auto* args = new AxpyArgs{static_cast<int32_t*>(a.hostPointer), n, mul, add, counter};
    orError_t e;
    {
      py::gil_scoped_release nogil;
      e = orLaunchKernelOwned(S(s), axpy_kernel, args, free_axpy, "axpy_i32", flags);
    }
    check(e);
  }, py::arg("stream"), py::arg("ptr"), py::arg("n"), py::arg("mul"), py::arg("add"),
     py::arg("flags") = int(orLaunchDefault), py::arg("counter") = nullptr);
  m.attr("CaptureModeGlobal") = int(orStreamCaptureModeGlobal);
  m.attr("CaptureModeThreadLocal") = int(orStreamCaptureModeThreadLocal);
  m.attr("CaptureModeRelaxed") = int(orStreamCaptureModeRelaxed);
  m.def("stream_begin_capture", [](uintptr_t s, int mode) {
    check(orStreamBeginCapture(S(s), orStreamCaptureMode(mode)));
  }, py::arg("stream"), py::arg("mode") = int(orStreamCaptureModeGlobal));
  m.def("stream_end_capture", [](uintptr_t s) {
    orGraph_t g = nullptr;
    check(orStreamEndCapture(S(s), &g));
    return P(g);
  });
  m.def("stream_is_capturing", [](uintptr_t s) {
    orStreamCaptureStatus st;
    check(orStreamIsCapturing(S(s), &st));
    return int(st);
  });
  m.def("graph_instantiate", [](uintptr_t g) {
    orGraphExec_t x = nullptr;
    check(orGraphInstantiate(&x, reinterpret_cast<orGraph_t>(g)));
    return P(x);
  });
  m.def("graph_launch", [](uintptr_t x, uintptr_t s) {
    orError_t e;
    {
      py::gil_scoped_release nogil;
      e = orGraphLaunch(reinterpret_cast<orGraphExec_t>(x), S(s));
    }
    check(e);
  });
  m.def("graph_destroy", [](uintptr_t g) { check(orGraphDestroy(reinterpret_cast<orGraph_t>(g))); });
  m.def("graph_exec_destroy", [](uintptr_t x) {
    check(orGraphExecDestroy(reinterpret_cast<orGraphExec_t>(x)));
  });
  m.def("graph_node_count", [](uintptr_t g) {
    size_t n = 0;
    check(orGraphGetNodeCount(reinterpret_cast<orGraph_t>(g), &n));
    return n;
  });
  m.def("graph_debug_dot_print", [](uintptr_t g, const std::string& path) {
    check(orGraphDebugDotPrint(reinterpret_cast<orGraph_t>(g), path.c_str()));
  });

  m.def("trace_start", [] { default_recorder().start(); });
  m.def("trace_stop", [] { return default_recorder().stop(); });
  m.def("trace_is_active", [] {
    int active = 0;
    check(orTraceIsActive(&active));
    return bool(active);
  });
  m.def("set_launch_annotation", [](std::optional<std::string> a) {
    check(orTraceSetLaunchAnnotation(a ? a->c_str() : nullptr));
  });
  m.def("set_correlation_id", [](unsigned long long id) { check(orTraceSetCorrelationId(id)); });

#ifdef OPENREG_SANITIZER_SELFTEST
  // Planted bugs, compiled into sanitizer builds only (make check-asan /
  // check-tsan): a run that does not report them is not checking anything
  // (tests/runtime/test_sanitizer_harness.py runs them in a child process).
  m.def("_planted_heap_overflow", [] {
    char* volatile p = new char[8];
    p[8] = 1;  // one past the end
    delete[] p;
  });
  m.def("_planted_race", [] {
    long counter = 0;  // unsynchronised from two threads
    auto bump = [&counter] {
      for (int i = 0; i < 1000; ++i) counter = counter + 1;
    };
    std::thread a(bump), b(bump);
    a.join();
    b.join();
    return counter;
  });
#endif
}
