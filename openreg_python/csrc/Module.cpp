// torch_openreg._C: the Python bindings behind torch.openreg.
// Importing it loads libtorch_openreg, whose static initialisers register
// the allocator, guard, hooks, host allocator and kernels with PyTorch.
#include "aten/graph/Graph.h"
#include "aten/core/KernelView.h"
#include "runtime/OpenRegAllocator.h"
#include "runtime/OpenRegFunctions.h"
#include "runtime/OpenRegGenerator.h"
#include "runtime/OpenRegSerialization.h"
#include "runtime/OpenRegStream.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/CachingHostAllocator.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Event.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/python_numbers.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>

namespace py = pybind11;

namespace torch {
// From <torch/csrc/profiler/python/combined_traceback.h> (libtorch_python),
// declared here because that header includes nlohmann/json, which the wheel
// does not ship: symbolized tracebacks as lists of {filename, line, name}.
std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
}  // namespace torch

namespace torch_openreg {
void bind_sanitizer(py::module& m);  // SanitizerBindings.cpp
}  // namespace torch_openreg

namespace {

// Python passes device indices as int64 and c10::DeviceIndex is an int8:
// check the index before narrowing it, or 256 would name device 0 and 128
// device -128 (the fuzzing of the Python surface found set_device(256)
// selecting device 0, tests/device/test_fuzz_python.py).
[[noreturn]] void invalid_index(const std::string& index) {
  TORCH_CHECK(false, "Invalid openreg device index ", index, ": ",
              static_cast<int>(torch_openreg::device_count()),
              " openreg device(s) are available (set OPENREG_DEVICE_COUNT to change that)");
}

c10::DeviceIndex device_index(int64_t index) {
  if (index < 0 || index >= torch_openreg::device_count()) invalid_index(std::to_string(index));
  return static_cast<c10::DeviceIndex>(index);
}

c10::DeviceIndex index_or_current(int64_t index) {
  if (index < 0) return torch_openreg::current_device();
  return device_index(index);
}

py::tuple pack_stream(const c10::Stream& s) {
  return py::make_tuple(s.id(), static_cast<int>(s.device_index()),
                        static_cast<int>(s.device_type()));
}

c10::Stream unpack_stream(int64_t id, int64_t index) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1, device_index(index)),
                     static_cast<c10::StreamId>(id));
}

// ------------------------------------------------------ memory debugging
// Stack traces for the allocator's history: PyTorch's own CapturedTraceback,
// as CUDA's _record_memory_history uses (Python and TorchScript frames, plus
// C++ frames for stacks="all"). The allocator calls these outside its locks.
std::shared_ptr<c10::GatheredContext> gather_python() {
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, /*cpp=*/false);
}
std::shared_ptr<c10::GatheredContext> gather_all() {
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, /*cpp=*/true);
}

void record_memory_history(std::optional<std::string> enabled,
                           std::optional<std::string> context,
                           const std::string& stacks, size_t max_entries,
                           bool clear_history) {
  using torch_openreg::RecordContext;
  TORCH_CHECK(!enabled || *enabled == "state" || *enabled == "all",
              "_record_memory_history: expected enabled to be None, 'state' or 'all', got '",
              *enabled, "'");
  TORCH_CHECK(!context || *context == "state" || *context == "alloc" || *context == "all",
              "_record_memory_history: expected context to be None, 'state', 'alloc' or "
              "'all', got '", *context, "'");
  TORCH_CHECK(stacks == "python" || stacks == "all",
              "_record_memory_history: expected stacks to be 'python' or 'all', got '",
              stacks, "'");
  RecordContext when = !context                ? RecordContext::NEVER
                       : *context == "state"   ? RecordContext::STATE
                       : *context == "alloc"   ? RecordContext::ALLOC
                                               : RecordContext::ALL;
  torch_openreg::ContextRecorder recorder = nullptr;
  if (enabled && context) recorder = stacks == "all" ? &gather_all : &gather_python;
  torch_openreg::recordMemoryHistory(enabled.has_value(), enabled && *enabled == "all",
                                     recorder, when, max_entries, clear_history);
}

// The snapshot as torch.cuda.memory._snapshot() lays it out, so that
// torch/cuda/_memory_viz.py and pytorch.org/memory_viz read it.
py::dict memory_snapshot() {
  torch_openreg::MemorySnapshot snap = torch_openreg::memorySnapshot();
  // Symbolize every context at once (frames are shared between entries).
  std::vector<torch::CapturedTraceback*> tbs;
  ska::flat_hash_map<c10::GatheredContext*, size_t> index;
  auto want = [&](const std::shared_ptr<c10::GatheredContext>& c) {
    if (!c || index.count(c.get())) return;
    if (auto* tb = dynamic_cast<torch::CapturedTraceback*>(c.get())) {
      index[c.get()] = tbs.size();
      tbs.push_back(tb);
    }
  };
  for (auto& seg : snap.segments)
    for (auto& b : seg.blocks) want(b.context);
  for (auto& t : snap.device_traces)
    for (auto& e : t) want(e.context);
  std::vector<py::object> frames = torch::py_symbolize(tbs);
  auto frames_of = [&](const std::shared_ptr<c10::GatheredContext>& c) -> py::object {
    auto it = c ? index.find(c.get()) : index.end();
    return it == index.end() ? py::list() : frames[it->second];
  };

  static const char* kStates[] = {"active_allocated", "active_awaiting_free", "inactive"};
  py::list segments;
  for (auto& seg : snap.segments) {
    py::list blocks;
    size_t allocated = 0, active = 0, requested = 0;
    for (auto& b : seg.blocks) {
      py::dict bd;
      bd["address"] = b.address;
      bd["size"] = b.size;
      bd["requested_size"] = b.requested_size;
      bd["state"] = kStates[b.state];
      bd["frames"] = frames_of(b.context);
      blocks.append(bd);
      if (b.state == torch_openreg::BlockInfo::ACTIVE_ALLOCATED) allocated += b.size;
      if (b.state != torch_openreg::BlockInfo::INACTIVE) {
        active += b.size;
        requested += b.requested_size;
      }
    }
    py::dict sd;
    sd["device"] = static_cast<int>(seg.device);
    sd["address"] = seg.address;
    sd["total_size"] = seg.total_size;
    sd["allocated_size"] = allocated;
    sd["active_size"] = active;
    sd["requested_size"] = requested;
    sd["stream"] = seg.stream;
    sd["segment_type"] = seg.small ? "small" : "large";
    sd["segment_pool_id"] = py::make_tuple(seg.pool_id.first, seg.pool_id.second);
    sd["is_expandable"] = false;
    sd["frames"] = seg.blocks.empty() ? py::list() : frames_of(seg.blocks.front().context);
    sd["blocks"] = blocks;
    segments.append(sd);
  }
  static const char* kActions[] = {"alloc", "free_requested", "free_completed",
                                   "segment_alloc", "segment_free", "oom"};
  py::list traces;
  for (auto& t : snap.device_traces) {
    py::list entries;
    for (auto& e : t) {
      py::dict ed;
      ed["action"] = kActions[e.action];
      ed["addr"] = e.addr;
      ed["size"] = e.size;
      ed["stream"] = e.stream;
      ed["time_us"] = e.time_us;
      ed["frames"] = frames_of(e.context);
      if (e.action == torch_openreg::TraceEntry::OOM) ed["device_free"] = e.device_free;
      entries.append(ed);
    }
    traces.append(entries);
  }
  py::dict result;
  result["segments"] = segments;
  result["device_traces"] = traces;
  return result;
}

// torch.cuda.host_memory_stats_as_nested_dict's layout.
py::dict host_memory_stats() {
  at::HostStats s = at::getHostAllocator(at::kPrivateUse1)->get_stats();
  auto stat = [](const c10::CachingAllocator::Stat& st) {
    py::dict d;
    d["current"] = st.current;
    d["peak"] = st.peak;
    d["allocated"] = st.allocated;
    d["freed"] = st.freed;
    return d;
  };
  auto duration = [](const c10::CachingAllocator::DurationStat& st) {
    py::dict d;
    d["total"] = st.total;
    d["max"] = st.max;
    d["min"] = st.min;
    d["count"] = st.count;
    d["avg"] = st.count == 0 ? 0 : st.total / st.count;
    return d;
  };
  py::dict r;
  r["allocations"] = stat(s.allocations);
  r["allocated_bytes"] = stat(s.allocated_bytes);
  r["active_requests"] = stat(s.active_requests);
  r["active_bytes"] = stat(s.active_bytes);
  r["num_host_alloc"] = s.num_host_alloc;
  r["num_host_free"] = s.num_host_free;
  r["host_alloc_time"] = duration(s.host_alloc_time);
  r["host_free_time"] = duration(s.host_free_time);
  return r;
}

// Lazy initialisation, fork safety, the default generators and their graph
// capture hooks.
void bind_generators(py::module& m) {
  m.def("_init", [] {
    torch::utils::register_fork_handler_for_device_init(at::kPrivateUse1);
    at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1);
  });
  m.def("_is_in_bad_fork", [] {
    return torch::utils::is_device_in_bad_fork(at::kPrivateUse1);
  });
  m.def("_get_default_generator", [](int64_t index) {
    torch::utils::register_fork_handler_for_device_init(at::kPrivateUse1);
    auto idx = index_or_current(index);
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(
        at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::PrivateUse1, idx))));
  });

  // The graph-capture hooks of a generator (docs/rng.md), for a graph
  // implementation and its tests: each takes the generator's lock.
  auto philox_gen = [](py::handle obj) -> at::Generator {
    TORCH_CHECK_TYPE(THPGenerator_Check(obj.ptr()), "expected a torch.Generator, got ",
                     py::str(obj.get_type()).cast<std::string>());
    at::Generator g = reinterpret_cast<THPGenerator*>(obj.ptr())->cdata;
    TORCH_CHECK(g.device().type() == c10::DeviceType::PrivateUse1,
                "expected an openreg generator, got one for ", g.device());
    return g;
  };
  m.def("_generator_capture_prologue", [philox_gen](py::handle obj) {
    at::Generator g = philox_gen(obj);
    std::lock_guard<std::mutex> lock(g.mutex());
    g.get<torch_openreg::OpenRegGeneratorImpl>()->capture_prologue();
  });
  m.def("_generator_capture_epilogue", [philox_gen](py::handle obj) {
    at::Generator g = philox_gen(obj);
    std::lock_guard<std::mutex> lock(g.mutex());
    return g.get<torch_openreg::OpenRegGeneratorImpl>()->capture_epilogue();
  });
  m.def("_generator_replay_prologue", [philox_gen](py::handle obj, uint64_t increment) {
    at::Generator g = philox_gen(obj);
    std::lock_guard<std::mutex> lock(g.mutex());
    g.get<torch_openreg::OpenRegGeneratorImpl>()->replay_prologue(increment);
  });
}

// Devices: count, current device, index checks, synchronize, _sleep.
void bind_devices(py::module& m) {
  m.def("_get_device_count", [] { return static_cast<int>(torch_openreg::device_count()); });
  m.def("_get_device", [] { return static_cast<int>(torch_openreg::current_device()); });
  m.def("_set_device", [](int64_t index) { torch_openreg::set_device(device_index(index)); });
  m.def("_exchange_device", [](int64_t index) {
    if (index < 0) return -1;
    return static_cast<int>(torch_openreg::exchange_device(device_index(index)));
  });
  m.def("_maybe_exchange_device", [](int64_t index) {
    if (index < 0) return -1;
    return static_cast<int>(torch_openreg::maybe_exchange_device(device_index(index)));
  });
  // The one device-index check (torch.openreg's Python API uses it too).
  // Any Python int: one past int64 is as invalid as 99, with the same message.
  m.def("_check_device_index", [](py::int_ index) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow) invalid_index(py::str(index));
    device_index(i);
    return i;
  });
  m.def("_synchronize", [](int64_t index) {
    auto idx = index_or_current(index);
    py::gil_scoped_release nogil;
    torch_openreg::DeviceScope scope(idx);
    OPENREG_CHECK(orDeviceSynchronize());
  });
  // Like torch.cuda._sleep: occupy the current stream for `us` microseconds
  // of "device time" (a host function on the stream), for tests and demos of
  // asynchronous behaviour.
  m.def("_sleep", [](int64_t us) {
    TORCH_CHECK(us >= 0, "_sleep: expected a non-negative duration, got ", us);
    auto idx = torch_openreg::current_device();
    OPENREG_CHECK(orLaunchSleep(torch_openreg::currentNativeStream(idx),
                                static_cast<unsigned long long>(us)));
  });
}

// Streams and events: priorities, current/default/pool streams, ids.
void bind_streams(py::module& m) {
  m.def("_stream_priority_range", [] {
    int least = 0, greatest = 0;
    OPENREG_CHECK(orDeviceGetStreamPriorityRange(&least, &greatest));
    return py::make_tuple(least, greatest);
  });
  m.def("_get_current_stream", [](int64_t index) {
    return pack_stream(torch_openreg::getCurrentStream(index_or_current(index)));
  });
  m.def("_get_default_stream", [](int64_t index) {
    return pack_stream(torch_openreg::getDefaultStream(index_or_current(index)));
  });
  m.def("_get_stream_from_pool", [](int64_t index, int priority) {
    return pack_stream(torch_openreg::getStreamFromPool(index_or_current(index), priority));
  });
  m.def("_set_current_stream", [](int64_t id, int64_t device_index) {
    torch_openreg::exchangeCurrentStream(unpack_stream(id, device_index));
  });
  // The runtime's process-unique stream id (orStreamGetId): the stream's row
  // in profiler traces.
  m.def("_stream_native_id", [](int64_t id, int64_t device_index) {
    unsigned long long native = 0;
    OPENREG_CHECK(orStreamGetId(torch_openreg::nativeStream(unpack_stream(id, device_index)),
                                &native));
    return native;
  });
  m.def("_stream_priority", [](int64_t id, int64_t device_index) {
    return torch_openreg::streamPriority(unpack_stream(id, device_index));
  });

  // torch.Event.elapsed_time insists on the exact torch.Event type; this
  // accepts subclasses (torch.openreg.Event) too.
  m.def("_event_elapsed_time", [](py::handle start, py::handle end) {
    TORCH_CHECK_TYPE(THPEvent_Check(start.ptr()) && THPEvent_Check(end.ptr()),
                     "elapsed_time: expected two torch.Event objects, got ",
                     py::str(start.get_type()).cast<std::string>(), " and ",
                     py::str(end.get_type()).cast<std::string>());
    auto* a = reinterpret_cast<THPEvent*>(start.ptr());
    auto* b = reinterpret_cast<THPEvent*>(end.ptr());
    py::gil_scoped_release nogil;
    return a->event.elapsedTime(b->event);
  });
}

// Graphs: pool handles and the capture status (the graph itself is
// torch.accelerator.Graph, aten/graph/GraphImpl.cpp).
void bind_graphs(py::module& m) {
  m.def("_graph_pool_handle", [] {
    auto id = torch_openreg::graphPoolHandle();
    return py::make_tuple(id.first, id.second);
  });
  m.def("_is_current_stream_capturing", [](int64_t index) {
    return torch_openreg::currentStreamIsCapturing(index_or_current(index));
  });
  m.def("_graph_prepare_stats", [] {
    auto s = torch_openreg::graphPrepareStats();
    py::dict d;
    d["dispatcher"] = s[0];
    d["aliases"] = s[1];
    d["iterator"] = s[2];
    return d;
  });
}

// Memcheck's describer (orMemcheckSetDescriber, docs/memcheck.md): where the
// allocation nearest a fault was allocated and freed, from the memory
// history, most recent call first. Symbolizing Python frames needs the GIL.
std::string stack_lines(const char* what, const py::object& frames) {
  // Python frames first (where the user made the tensor), then C++ ones
  // (stacks="all"), each most recent call first.
  std::string py_lines, cpp_lines;
  size_t n_py = 0, n_cpp = 0;
  for (const auto& f : frames) {
    const std::string file = py::str(f["filename"]).cast<std::string>();
    // C++ frames name a shared object or executable (`libtorch_cpu.so`,
    // `python3.11`); Python frames a source (`train.py`, `<string>`).
    const bool is_py = file.find(".so") == std::string::npos &&
                       (file.find(".py") != std::string::npos || file.front() == '<');
    size_t& n = is_py ? n_py : n_cpp;
    if (++n > 10) continue;
    (is_py ? py_lines : cpp_lines) += "  " + file + ":" + py::str(f["line"]).cast<std::string>() +
                                      " in " + py::str(f["name"]).cast<std::string>() + "\n";
  }
  if (!n_py && !n_cpp) return std::string(what) + ": no frames recorded\n";
  std::string out;
  if (n_py) out += std::string(what) + " (Python, most recent call first):\n" + py_lines;
  if (n_cpp) out += std::string(what) + " (C++, most recent call first):\n" + cpp_lines;
  return out;
}

// The stacks of the allocation at `addr` (GIL held).
std::string allocation_stacks(uintptr_t addr, bool freed) {
  torch_openreg::MemorySnapshot snap = torch_openreg::memorySnapshot();
  std::shared_ptr<c10::GatheredContext> alloc_ctx, free_ctx;
  for (auto& seg : snap.segments)
    for (auto& b : seg.blocks)
      if (b.address == addr && b.context) alloc_ctx = b.context;
  for (auto& trace : snap.device_traces) {
    for (auto& e : trace) {  // oldest first: the last allocation at addr wins
      if (e.addr != addr || !e.context) continue;
      if (e.action == torch_openreg::TraceEntry::ALLOC) alloc_ctx = e.context, free_ctx.reset();
      if (e.action == torch_openreg::TraceEntry::FREE_REQUESTED) free_ctx = e.context;
    }
  }
  auto* alloc_tb = dynamic_cast<torch::CapturedTraceback*>(alloc_ctx.get());
  auto* free_tb = freed ? dynamic_cast<torch::CapturedTraceback*>(free_ctx.get()) : nullptr;
  std::vector<torch::CapturedTraceback*> tbs;
  for (auto* tb : {alloc_tb, free_tb})
    if (tb) tbs.push_back(tb);
  if (tbs.empty())
    return "stacks: none recorded; call torch.openreg.memory._record_memory_history() "
           "first to see where the allocation was made and freed";
  std::vector<py::object> frames = torch::py_symbolize(tbs);
  std::string out;
  size_t i = 0;
  if (alloc_tb) out += stack_lines("allocated at", frames[i++]);
  if (free_tb) out += stack_lines("freed at", frames[i]);
  return out;
}

size_t describe_allocation(const void* ptr, size_t /*size*/, int freed, char* buf, size_t len) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  auto stacks = [addr, freed]() -> std::string {
    try {
      return allocation_stacks(addr, freed != 0);
    } catch (const std::exception& e) {
      return std::string("stacks: could not be read: ") + e.what();
    }
  };
  std::string out;
  if (!Py_IsInitialized()) {
    out = "stacks: not shown (the interpreter is gone)";
  } else if (PyGILState_Check()) {  // a kernel written in Python
    out = stacks();
  } else {
    // The faulting thread released the GIL (as torch's bindings do around
    // an operator) or never had it. Another thread takes it: if a Python
    // thread holds it while waiting for this one, the report goes without.
    struct Job {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      std::string out;
    };
    auto job = std::make_shared<Job>();
    std::thread([job, stacks] {
      py::gil_scoped_acquire gil;
      std::string s = stacks();
      std::lock_guard<std::mutex> g(job->mu);
      job->out = std::move(s);
      job->done = true;
      job->cv.notify_all();
    }).detach();
    std::unique_lock<std::mutex> lk(job->mu);
    if (job->cv.wait_for(lk, std::chrono::seconds(5), [&] { return job->done; }))
      out = job->out;
    else
      out = "stacks: not shown (the GIL stayed taken for 5 s)";
  }
  const size_t n = std::min(out.size(), len ? len - 1 : 0);
  memcpy(buf, out.data(), n);
  if (len) buf[n] = 0;
  return n;
}

// Memory: info, history and snapshots, the fraction, host-memory statistics.
void bind_memory(py::module& m) {
  OPENREG_CHECK(orMemcheckSetDescriber(&describe_allocation));
  m.def("_mem_get_info", [](int64_t index) {
    auto info = torch_openreg::getDeviceAllocator()->getMemoryInfo(index_or_current(index));
    return py::make_tuple(info.first, info.second);
  });

  m.def("_record_memory_history", &record_memory_history, py::arg("enabled"),
        py::arg("context"), py::arg("stacks"), py::arg("max_entries"),
        py::arg("clear_history"));
  m.def("_memory_snapshot", &memory_snapshot);
  m.def("_set_memory_fraction", [](double fraction, int64_t index) {
    torch_openreg::setMemoryFraction(fraction, index_or_current(index));
  });
  m.def("_get_memory_fraction", [](int64_t index) {
    return torch_openreg::getMemoryFraction(index_or_current(index));
  });
  m.def("_host_memory_stats", &host_memory_stats);
  m.def("_reset_peak_host_memory_stats", [] {
    at::getHostAllocator(at::kPrivateUse1)->reset_peak_stats();
  });
  m.def("_reset_accumulated_host_memory_stats", [] {
    at::getHostAllocator(at::kPrivateUse1)->reset_accumulated_stats();
  });
}

// Backend metadata (runtime/OpenRegSerialization.h): the "format" tag that
// torch.save/torch.load carry along; None clears it.
void bind_backend_meta(py::module& m) {
  m.def("_set_backend_meta", [](const at::Tensor& t, std::optional<std::string> format) {
    torch_openreg::set_backend_format(t, format);
  }, py::arg("tensor"), py::arg("format"));
  m.def("_get_backend_meta", [](const at::Tensor& t) {
    return torch_openreg::get_backend_format(t);
  }, py::arg("tensor"));
}

// [docs:fast-empty-strided]
// Inductor's Python wrapper allocates each buffer of a compiled openreg graph
// with this (wrapper.py, make_allocation), as it uses
// torch._C._dynamo.guards._empty_strided_cpu/_cuda for CPU and CUDA graphs:
// torch.empty_strided parses its arguments and goes through the dispatcher,
// about 0.9 us more per buffer, and a compiled training step allocates
// hundreds. The same maker as the empty_strided kernel (empty_strided_on,
// runtime/OpenRegAllocator.h), called directly:
// _empty_strided(size, stride, dtype, device_index).
PyObject* empty_strided_fast(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 4, "_empty_strided(size, stride, dtype, device_index) takes 4 "
                   "arguments, got ", nargs);
  auto ints = [](PyObject* seq, const char* what) {
    TORCH_CHECK_TYPE(PyTuple_Check(seq), "_empty_strided: ", what, " must be a tuple of ints, "
                     "got ", Py_TYPE(seq)->tp_name);
    c10::SmallVector<int64_t, 8> out;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); ++i) {
      PyObject* item = PyTuple_GET_ITEM(seq, i);
      TORCH_CHECK_TYPE(THPUtils_checkLong(item), "_empty_strided: ", what, "[", i,
                       "] must be an int, got ", Py_TYPE(item)->tp_name);
      out.push_back(THPUtils_unpackLong(item));
    }
    return out;
  };
  const auto sizes = ints(args[0], "size");
  const auto strides = ints(args[1], "stride");
  TORCH_CHECK(sizes.size() == strides.size(), "_empty_strided: size has ", sizes.size(),
              " dimensions but stride has ", strides.size());
  TORCH_CHECK_TYPE(THPDtype_Check(args[2]), "_empty_strided: dtype must be a torch.dtype, got ",
                   Py_TYPE(args[2])->tp_name);
  const auto dtype = reinterpret_cast<THPDtype*>(args[2])->scalar_type;
  TORCH_CHECK_TYPE(THPUtils_checkLong(args[3]), "_empty_strided: device_index must be an int");
  return THPVariable_Wrap(at::Tensor(torch_openreg::empty_strided_on(
      device_index(THPUtils_unpackLong(args[3])), sizes, strides, dtype)));
  END_HANDLE_TH_ERRORS
}
// [docs:fast-empty-strided:end]

PyMethodDef kEmptyStrided = {
    "_empty_strided", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&empty_strided_fast)),
    METH_FASTCALL, "_empty_strided(size, stride, dtype, device_index): an uninitialised openreg "
    "tensor, for Inductor's wrapper code"};

#ifdef OPENREG_SANITIZER_SELFTEST
// Planted bugs, compiled into sanitizer builds only (make check-asan-glue):
// a glue run that does not report them is not checking the glue
// (tests/device/test_sanitizer_glue.py runs each in a child process).
void bind_planted_bugs(py::module& m) {
  m.def("_planted_heap_overflow", [] {
    char* volatile p = new char[8];
    p[8] = 1;  // one past the end
    delete[] p;
  });
  m.def("_planted_signed_overflow", [](int x) {
    volatile int big = std::numeric_limits<int>::max();
    return big + x;  // undefined for x > 0
  });
}
#endif

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "OpenReg device bindings (see torch.openreg)";
  torch_openreg::install_cpu_allocator_shim();
  torch_openreg::register_structured_kernels();
  torch_openreg::bind_sanitizer(m);

  bind_generators(m);
  bind_devices(m);
  bind_streams(m);
  bind_graphs(m);
  bind_memory(m);
  bind_backend_meta(m);
  m.add_object("_empty_strided", py::reinterpret_steal<py::object>(
                                     PyCFunction_NewEx(&kEmptyStrided, nullptr, nullptr)));
#ifdef OPENREG_SANITIZER_SELFTEST
  bind_planted_bugs(m);
#endif
}
