// torch_openreg._occl_testing: liboccl exposed to pytest, without torch.
//
// Like openreg_runtime/testing, it tests the library a vendor replaces on its
// own: device buffers come from torch_openreg._runtime (integers), the
// bootstrap store is a directory of files, and every call that fails raises
// OcclError carrying the result's name and liboccl's message.
#include <occl.h>
#include <openreg.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unistd.h>

namespace py = pybind11;

namespace {

PyObject* g_error = nullptr;

const char* result_name(occlResult_t r) {
  switch (r) {
    case occlSuccess: return "occlSuccess";
    case occlInvalidArgument: return "occlInvalidArgument";
    case occlInvalidUsage: return "occlInvalidUsage";
    case occlSystemError: return "occlSystemError";
    case occlRemoteError: return "occlRemoteError";
    case occlTimeout: return "occlTimeout";
    case occlInternalError: return "occlInternalError";
    case occlInProgress: return "occlInProgress";
  }
  return "?";
}

void raise(occlResult_t r, const std::string& msg) {
  py::object exc = py::reinterpret_borrow<py::object>(g_error)(
      std::string(result_name(r)) + ": " + msg, result_name(r));
  PyErr_SetObject(g_error, exc.ptr());
  throw py::error_already_set();
}

void check(occlResult_t r) {
  if (r != occlSuccess) raise(r, occlGetLastError());
}

// A store in a directory: set writes a file atomically (rename), get polls.
class FileStore : public occlStore {
 public:
  FileStore(std::string dir, double timeout_s) : dir_(std::move(dir)), timeout_s_(timeout_s) {}
  void set(const std::string& key, const std::string& value) override {
    const std::string path = file(key), tmp = path + ".tmp." + std::to_string(getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f << value;
    }
    if (rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("rename failed: " + path);
  }
  std::string get(const std::string& key) override {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    for (;;) {
      std::ifstream f(file(key), std::ios::binary);
      if (f) {
        std::stringstream ss;
        ss << f.rdbuf();
        return ss.str();
      }
      if (std::chrono::steady_clock::now() > end)
        throw std::runtime_error("FileStore: timed out waiting for key " + key);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

 private:
  std::string file(std::string key) {
    for (char& ch : key)
      if (ch == '/') ch = '_';
    return dir_ + "/" + key;
  }
  std::string dir_;
  double timeout_s_;
};

// A reduce op or data type by name, or (for the fuzz tests) by its raw
// enum value, valid or not: liboccl must refuse the invalid ones itself.
occlRedOp_t redop(py::handle name, double scalar) {
  if (py::isinstance<py::int_>(name)) return occlRedOp_t{occlRedOpKind_t(name.cast<int>()), scalar};
  static const char* names[] = {"sum", "prod", "min", "max", "avg", "premul_sum",
                                "band", "bor", "bxor"};
  const std::string s = name.cast<std::string>();
  for (int i = 0; i < occlNumOps; ++i)
    if (s == names[i]) return occlRedOp_t{occlRedOpKind_t(i), scalar};
  throw std::invalid_argument("unknown reduce op " + s);
}

occlDataType_t dtype(py::handle name) {
  if (py::isinstance<py::int_>(name)) return occlDataType_t(name.cast<int>());
  static const char* names[] = {"int8", "uint8", "int16", "uint16", "int32", "uint32",
                                "int64", "uint64", "float16", "bfloat16", "float32",
                                "float64", "bool", "complex64", "complex128"};
  const std::string s = name.cast<std::string>();
  for (int i = 0; i < occlNumTypes; ++i)
    if (s == names[i]) return occlDataType_t(i);
  throw std::invalid_argument("unknown dtype " + s);
}

void* V(uintptr_t p) { return reinterpret_cast<void*>(p); }
orStream_t S(uintptr_t p) { return reinterpret_cast<orStream_t>(p); }

struct Comm {
  occlComm_t c = nullptr;
  int source = -1;  // any-source receives report here
  explicit Comm(occlComm_t raw) : c(raw) {}
  Comm(FileStore& store, int nranks, int rank, int device, int64_t timeout_ms) {
    occlConfig_t cfg{device, timeout_ms, "test"};
    occlResult_t r;
    {
      py::gil_scoped_release nogil;
      r = occlCommInitRank(&c, nranks, rank, &store, &cfg);
    }
    check(r);
  }
  ~Comm() {
    if (c) occlCommDestroy(c);
  }
  occlComm_t get() {
    if (!c) throw std::runtime_error("communicator destroyed");
    return c;
  }
};

}  // namespace

// One function, longer than the house's 100 lines on purpose: it is the
// binding table of liboccl's API for the torch-free tests, one entry per
// call of occl.h, read by looking a call up by its name.
PYBIND11_MODULE(_occl_testing, m) {
  m.doc() = "liboccl's API for tests (no torch)";
  py::object base = py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
  py::object error = py::module_::import("builtins").attr("type")(
      "OcclError", py::make_tuple(base),
      py::dict(py::arg("__init__") = py::cpp_function(
                   [](py::object self, std::string msg, std::string name) {
                     py::reinterpret_borrow<py::object>(PyExc_RuntimeError).attr("__init__")(self, msg);
                     self.attr("name") = name;
                   },
                   py::is_method(py::none()))));
  m.attr("OcclError") = error;
  g_error = error.ptr();
  g_error = error.release().ptr();

  m.def("type_size", [](py::handle t) { return occlTypeSize(dtype(t)); });
  // Every entry point that takes a communicator, called with NULL (and
  // otherwise valid arguments): [(name, result, message)].
  m.def("null_comm_calls", []() {
    std::vector<std::tuple<std::string, std::string, std::string>> out;
    auto rec = [&](const char* name, occlResult_t r) {
      out.emplace_back(name, result_name(r), r == occlSuccess ? "" : occlGetLastError());
    };
    const occlRedOp_t sum{occlSum, 1.0};
    size_t counts[1] = {0};
    int n = 0;
    occlResult_t async = occlSuccess;
    occlComm_t out_comm = nullptr;
    occlConfig_t cfg{0, 1000, "null"};
    rec("occlCommCount", occlCommCount(nullptr, &n));
    rec("occlCommUserRank", occlCommUserRank(nullptr, &n));
    rec("occlCommGetAsyncError", occlCommGetAsyncError(nullptr, &async));
    rec("occlCommSplit", occlCommSplit(nullptr, 0, 0, &out_comm, &cfg));
    rec("occlCommDestroy", occlCommDestroy(nullptr));
    rec("occlCommAbort", occlCommAbort(nullptr));
    rec("occlCommQuerySeq", occlCommQuerySeq(nullptr, 1));
    rec("occlCommInitRank", occlCommInitRank(nullptr, 1, 0, nullptr, &cfg));
    rec("occlAllReduce", occlAllReduce(nullptr, nullptr, 0, occlFloat32, sum, nullptr, nullptr));
    rec("occlBroadcast", occlBroadcast(nullptr, nullptr, 0, occlFloat32, 0, nullptr, nullptr));
    rec("occlReduce", occlReduce(nullptr, nullptr, 0, occlFloat32, sum, 0, nullptr, nullptr));
    rec("occlAllGather", occlAllGather(nullptr, nullptr, 0, occlFloat32, nullptr, nullptr));
    rec("occlReduceScatter", occlReduceScatter(nullptr, nullptr, 0, occlFloat32, sum, nullptr, nullptr));
    rec("occlAllToAllv", occlAllToAllv(nullptr, counts, counts, nullptr, counts, counts, occlFloat32,
                                       nullptr, nullptr));
    rec("occlGather", occlGather(nullptr, nullptr, 0, occlFloat32, 0, nullptr, nullptr));
    rec("occlScatter", occlScatter(nullptr, nullptr, 0, occlFloat32, 0, nullptr, nullptr));
    rec("occlBarrier", occlBarrier(nullptr, nullptr));
    rec("occlSend", occlSend(nullptr, 0, occlFloat32, 0, 0, nullptr, nullptr));
    rec("occlRecv", occlRecv(nullptr, 0, occlFloat32, 0, 0, nullptr, nullptr, nullptr));
    return out;
  });

  py::class_<FileStore>(m, "FileStore")
      .def(py::init<std::string, double>(), py::arg("path"), py::arg("timeout") = 30.0)
      .def("set", &FileStore::set)
      .def("get", [](FileStore& s, const std::string& k) { return py::bytes(s.get(k)); });

  py::class_<Comm>(m, "Comm")
      .def(py::init<FileStore&, int, int, int, int64_t>(), py::arg("store"), py::arg("nranks"),
           py::arg("rank"), py::arg("device") = 0, py::arg("timeout_ms") = 30000,
           py::keep_alive<1, 2>())
      .def_property_readonly("rank", [](Comm& c) { int r; check(occlCommUserRank(c.get(), &r)); return r; })
      .def_property_readonly("size", [](Comm& c) { int n; check(occlCommCount(c.get(), &n)); return n; })
      .def_property_readonly("last_seq", [](Comm& c) { return occlCommLastSeq(c.get()); })
      .def_property_readonly("transport", [](Comm& c) { return std::string(occlCommTransport(c.get())); })
      .def("split", [](Comm& c, int color, int key) -> py::object {
        occlComm_t out = nullptr;
        occlResult_t r;
        {
          py::gil_scoped_release nogil;
          r = occlCommSplit(c.get(), color, key, &out, nullptr);
        }
        check(r);
        if (!out) return py::none();
        return py::cast(new Comm(out), py::return_value_policy::take_ownership);
      }, py::arg("color"), py::arg("key"))
      .def_property_readonly("source", [](Comm& c) { return c.source; })
      .def("query", [](Comm& c, uint64_t seq) { return std::string(result_name(occlCommQuerySeq(c.get(), seq))); })
      .def("async_error", [](Comm& c) {
        occlResult_t r;
        check(occlCommGetAsyncError(c.get(), &r));
        return py::make_tuple(std::string(result_name(r)), std::string(occlCommGetErrorMessage(c.get())));
      })
      .def("allreduce", [](Comm& c, uintptr_t s, uintptr_t r, size_t n, py::handle t,
                           py::handle op, double scalar, uintptr_t stream) {
        check(occlAllReduce(V(s), V(r), n, dtype(t), redop(op, scalar), c.get(), S(stream)));
      }, py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("op") = "sum",
         py::arg("scalar") = 1.0, py::arg("stream") = 0)
      .def("reduce", [](Comm& c, uintptr_t s, uintptr_t r, size_t n, py::handle t,
                        py::handle op, int root, uintptr_t stream) {
        check(occlReduce(V(s), V(r), n, dtype(t), redop(op, 1.0), root, c.get(), S(stream)));
      }, py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("op"),
         py::arg("root"), py::arg("stream") = 0)
      .def("broadcast", [](Comm& c, uintptr_t s, uintptr_t r, size_t n, py::handle t,
                           int root, uintptr_t stream) {
        check(occlBroadcast(V(s), V(r), n, dtype(t), root, c.get(), S(stream)));
      }, py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("root"),
         py::arg("stream") = 0)
      .def("allgather", [](Comm& c, uintptr_t s, uintptr_t r, size_t n, py::handle t,
                           uintptr_t stream) {
        check(occlAllGather(V(s), V(r), n, dtype(t), c.get(), S(stream)));
      }, py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("stream") = 0)
      .def("reduce_scatter", [](Comm& c, uintptr_t s, uintptr_t r, size_t n, py::handle t,
                                py::handle op, uintptr_t stream) {
        check(occlReduceScatter(V(s), V(r), n, dtype(t), redop(op, 1.0), c.get(), S(stream)));
      }, py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("op") = "sum",
         py::arg("stream") = 0)
      .def("alltoallv", [](Comm& c, uintptr_t s, std::vector<size_t> sc, std::vector<size_t> sd,
                           uintptr_t r, std::vector<size_t> rc, std::vector<size_t> rd,
                           py::handle t, uintptr_t stream) {
        int n;
        check(occlCommCount(c.get(), &n));
        for (auto* v : {&sc, &sd, &rc, &rd})
          if (v->size() != size_t(n)) throw std::invalid_argument("one count/displacement per rank");
        check(occlAllToAllv(V(s), sc.data(), sd.data(), V(r), rc.data(), rd.data(), dtype(t),
                            c.get(), S(stream)));
      }, py::arg("send"), py::arg("sendcounts"), py::arg("sdispls"), py::arg("recv"),
         py::arg("recvcounts"), py::arg("rdispls"), py::arg("dtype"), py::arg("stream") = 0)
      .def("gather", [](Comm& c, uintptr_t s, uintptr_t r, size_t n, py::handle t, int root,
                        uintptr_t stream) {
        check(occlGather(V(s), V(r), n, dtype(t), root, c.get(), S(stream)));
      }, py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("root"),
         py::arg("stream") = 0)
      .def("scatter", [](Comm& c, uintptr_t s, uintptr_t r, size_t n, py::handle t, int root,
                         uintptr_t stream) {
        check(occlScatter(V(s), V(r), n, dtype(t), root, c.get(), S(stream)));
      }, py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("root"),
         py::arg("stream") = 0)
      .def("barrier", [](Comm& c, uintptr_t stream) { check(occlBarrier(c.get(), S(stream))); },
           py::arg("stream") = 0)
      .def("send", [](Comm& c, uintptr_t s, size_t n, py::handle t, int peer, int64_t tag,
                      uintptr_t stream) {
        check(occlSend(V(s), n, dtype(t), peer, tag, c.get(), S(stream)));
      }, py::arg("send"), py::arg("count"), py::arg("dtype"), py::arg("peer"), py::arg("tag") = 0,
         py::arg("stream") = 0)
      .def("recv", [](Comm& c, uintptr_t r, size_t n, py::handle t, int peer, int64_t tag,
                      uintptr_t stream) {
        check(occlRecv(V(r), n, dtype(t), peer, tag, &c.source, c.get(), S(stream)));
      }, py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("peer"), py::arg("tag") = 0,
         py::arg("stream") = 0)
      .def("group_start", [](Comm&) { check(occlGroupStart()); })
      .def("group_end", [](Comm&) { check(occlGroupEnd()); })
      .def("synchronize", [](Comm& c, uintptr_t stream) {
        // Waits for the stream, then raises the communicator's error, if any.
        orError_t e;
        {
          py::gil_scoped_release nogil;
          e = orStreamSynchronize(S(stream));
        }
        if (e != orSuccess) {
          orGetLastError();
          throw std::runtime_error(orGetLastErrorMessage());
        }
        occlResult_t r;
        check(occlCommGetAsyncError(c.get(), &r));
        if (r != occlSuccess) raise(r, occlCommGetErrorMessage(c.get()));
      }, py::arg("stream") = 0)
      .def("abort", [](Comm& c) {
        if (c.c) {
          py::gil_scoped_release nogil;
          occlCommAbort(c.c);
        }
        c.c = nullptr;
      })
      .def("destroy", [](Comm& c) {
        if (c.c) {
          py::gil_scoped_release nogil;
          occlCommDestroy(c.c);
        }
        c.c = nullptr;
      });
}
