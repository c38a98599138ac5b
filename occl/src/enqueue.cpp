// The enqueue path of the collectives: the OCCL_* options, the host-side
// argument checks every API call makes, and the Op that runs a call's body
// in stream order on a runtime worker (or first on the launching thread),
// turning its errors into the communicator's.
//
// Vendor: your collectives library has its own algorithms (rings and trees
// over NVLink and the network). What carries over is the shape: validate on
// the host, enqueue on the caller's stream, fail the communicator (not the
// process) when something goes wrong at run time.
#include "collectives.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unordered_map>

namespace occl {

const char* kind_name(uint32_t kind) {
  switch (kind) {
    case kAllReduce: return "allreduce";
    case kBroadcast: return "broadcast";
    case kReduce: return "reduce";
    case kAllGather: return "allgather";
    case kReduceScatter: return "reduce_scatter";
    case kAllToAll: return "alltoall";
    case kGather: return "gather";
    case kScatter: return "scatter";
    case kBarrier: return "barrier";
    case kSplit: return "split";
    case kP2P: return "send/recv";
  }
  return "unknown";
}

// ------------------------------------------------------------ options
// A 0/1 switch from environment variable `name`: unset or empty is `dflt`;
// anything else is an error that names the variable (checked when a
// communicator is created, see check_env_options).
bool env_flag(const char* name, bool dflt) {
  const char* v = getenv(name);
  if (!v || !*v) return dflt;
  if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0) return *v == '1';
  throw Error(occlInvalidArgument, format("%s: expected 0 or 1, got '%s'", name, v));
}

bool debug_enabled() {
  static const bool on = env_flag("OCCL_DEBUG", false);
  return on;
}

// Someone is tracing: collectives then annotate their launches.
bool tracing() {
  int active = 0;
  return orTraceIsActive(&active) == orSuccess && active;
}

// A byte count from environment variable `name` (unset or empty: `dflt`).
// Garbage, zero, negative values and more than 1 GiB (the staging buffers
// are sized from it) are errors that name the variable; atoll took them
// silently for the default, or for a huge allocation.
size_t env_bytes(const char* name, size_t dflt) {
  const char* e = getenv(name);
  if (!e || !*e) return dflt;
  constexpr unsigned long long kMax = 1ull << 30;
  char* end = nullptr;
  errno = 0;
  const unsigned long long k = strtoull(e, &end, 10);
  if (*e == '-' || !isdigit(static_cast<unsigned char>(*e)) || *end || errno || k == 0 || k > kMax)
    throw Error(occlInvalidArgument,
                format("%s: expected a byte count from 1 to %llu, got '%s'", name, kMax, e));
  return size_t(k);
}

// Every OCCL_* variable read lazily (at a collective, on a worker thread,
// then cached) is parsed here too, each time a communicator is created, so
// a malformed one fails occlCommInitRank with a message that names it.
void check_env_options() {
  env_flag("OCCL_DEBUG", false);
  env_bytes("OCCL_ZC_CHUNK", 1);
  env_bytes("OCCL_TCP_CHUNK", 1);
}

// ------------------------------------------------------------ running an operation
namespace {

// [docs:occl-op]
// A queued operation: runs once, in stream order, on a runtime worker; or,
// if it has an Attempt and its stream is idle, first on the launching
// thread, which gives it back to the runtime (orErrorNotReady) if it would
// have to wait for a peer.
struct Op {
  occlComm* comm;
  uint64_t seq;
  const char* name;
  std::string describe;  // for OCCL_DEBUG
  std::function<void(const OpCtx&)> body;
  Attempt try_first;
  std::thread::id launcher;  // the attempt runs on this thread
  bool deferred = false;     // the attempt gave up: `rest` finishes it
  Clock::time_point start;   // of the first call (the timeout counts from it)
};

orError_t run_op(void* p) {
  auto* op = static_cast<Op*>(p);
  occlComm* c = op->comm;
  const bool attempt = op->try_first.attempt && !op->deferred &&
                       std::this_thread::get_id() == op->launcher;
  if (!op->deferred) op->start = Clock::now();
  const auto start = op->start;
  bool ok = true;
  bool broken;
  {
    std::lock_guard<std::mutex> g(c->err_mu);
    broken = c->error != occlSuccess;
  }
  if (!broken) {
    OpCtx ctx{op->name, op->seq, start + std::chrono::milliseconds(c->timeout_ms)};
    try {
      if (attempt) {
        if (!op->try_first.attempt(ctx)) {
          op->deferred = true;
          return orErrorNotReady;  // the runtime calls again, on a worker
        }
      } else if (op->deferred) {
        op->try_first.rest(ctx);
      } else {
        op->body(ctx);
      }
    } catch (const Error& e) {
      c->fail(op->seq, e.result, std::string(op->name) + ": " + e.what());
      ok = false;
    } catch (const std::exception& e) {
      c->fail(op->seq, occlInternalError, std::string(op->name) + ": " + e.what());
      ok = false;
    }
  } else {
    ok = false;
  }
  if (debug_enabled()) {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::string what = op->describe;
    std::replace(what.begin(), what.end(), '\n', ' ');
    fprintf(stderr, "[occl %s rank %d] %s seq %llu %s: %.3f ms%s%s\n", c->name.c_str(), c->rank,
            op->name, (unsigned long long)op->seq, what.c_str(), ms,
            attempt ? " (inline)" : op->deferred ? " (deferred)" : "", ok ? "" : " FAILED");
  }
  // (A graph replay's operation has no sequence number: enqueue.cpp's capture.)
  if (op->seq) c->completed.store(op->seq, std::memory_order_release);
  c->inflight.fetch_sub(1);
  delete op;
  // Errors stay with the communicator (occlCommGetAsyncError), as with NCCL:
  // the stream itself is not poisoned.
  return orSuccess;
}
// [docs:occl-op:end]

}  // namespace

// ------------------------------------------------------------ checks and enqueueing
// The stream a call is enqueued on: a live stream of the communicator's
// device (0: the device's default stream). Refused before the operation takes
// a sequence number: a bad argument must not break the communicator.
void check_stream(occlComm* c, orStream_t stream, const char* call) {
  if (!stream) return;
  int dev = -1;
  if (orStreamGetDevice(stream, &dev) != orSuccess) {
    orGetLastError();
    throw Error(occlInvalidArgument, format("%s: stream: %s", call, orGetLastErrorMessage()));
  }
  if (dev != c->device)
    throw Error(occlInvalidArgument, format("%s: the stream belongs to device openreg:%d, the "
                                            "communicator to openreg:%d", call, dev, c->device));
}

// ------------------------------------------------------------ graph capture
// [docs:occl-capture]
// An operation enqueued on a capturing stream is recorded, not run: the
// graph keeps its closure (buffers by address, counts by value), and each
// replay runs a fresh copy of it in stream order, the attempt first where it
// has one, as the eager call would, so a replay computes what the eager call
// computes, bit for bit. The peers match it by the order collectives run in
// (coll_seq), so every rank must replay its graphs in the same order as the
// others, as with NCCL. A replayed operation takes no sequence number: those
// belong to calls the host enqueued and waits for (occlCommQuerySeq); its
// failure goes to the communicator's error and fails the replay.
//
// The graph refers to the communicator by id: occlCommDestroy and
// occlCommAbort unregister it, and a replay after that fails, naming it.
namespace {

std::mutex g_live_mu;
std::unordered_map<uint64_t, occlComm*>* g_live = new std::unordered_map<uint64_t, occlComm*>();
std::atomic<uint64_t> g_next_id{1};

struct CapturedOp {
  uint64_t comm_id;
  std::string comm_name;
  int rank;
  std::string name;  // "occl:allreduce (graph replay)": what its messages say
  std::string describe;
  std::function<void(const OpCtx&)> body;
  Attempt try_first;
};

orError_t run_captured(void* p) {
  const auto* cap = static_cast<const CapturedOp*>(p);
  occlComm* c = nullptr;
  {
    std::lock_guard<std::mutex> g(g_live_mu);
    auto it = g_live->find(cap->comm_id);
    if (it != g_live->end()) {
      c = it->second;
      // One for run_op, one for the error check below: destroy waits for
      // both, after unregistering.
      c->inflight.fetch_add(2);
    }
  }
  if (!c) {
    // The reason goes into the replay's stream error (what the caller's
    // synchronize raises), and to stderr for the other ranks' logs.
    const std::string why = "[occl rank " + std::to_string(cap->rank) + "] " + cap->name +
                            " on communicator " + cap->comm_name +
                            ", which was destroyed after the capture: the replay fails";
    fprintf(stderr, "%s\n", why.c_str());
    orKernelSetErrorMessage(why.c_str());
    return orErrorLaunchFailure;
  }
  auto* op = new Op{c, 0, cap->name.c_str(), cap->describe, cap->body, cap->try_first,
                    std::this_thread::get_id(), false, {}};
  // An attempt that gives up is finished here, on the replay's thread.
  if (run_op(op) == orErrorNotReady) run_op(op);
  bool failed;
  std::string why;
  {
    std::lock_guard<std::mutex> g(c->err_mu);
    failed = c->error != occlSuccess;
    why = c->error_msg;
  }
  c->inflight.fetch_sub(1);
  if (failed) {
    const std::string msg =
        "[occl rank " + std::to_string(cap->rank) + "] " + cap->name + " failed: " + why;
    fprintf(stderr, "%s\n", msg.c_str());
    orKernelSetErrorMessage(msg.c_str());
    return orErrorLaunchFailure;
  }
  return orSuccess;
}

void delete_captured(void* p) { delete static_cast<CapturedOp*>(p); }

// The capture `stream` belongs to: {status, capture id}.
std::pair<orStreamCaptureStatus, unsigned long long> capture_of(orStream_t stream) {
  orStreamCaptureStatus status = orStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (!stream || orStreamGetCaptureInfo(stream, &status, &id) != orSuccess) {
    orGetLastError();
    return {orStreamCaptureStatusNone, 0};
  }
  return {status, id};
}

// A communicator whose operations a capture is recording may not be used
// outside that capture (by another thread, or on a stream that is not part
// of it) until the capture ends: a replay of the graph and the other use
// would run on the communicator at the same time, each waiting for peers
// that are in the other one. `capture_id` is the calling stream's (0: none).
void check_capture_owner(occlComm* c, unsigned long long capture_id, const char* name) {
  std::lock_guard<std::mutex> g(c->capture_mu);
  if (!c->capture_stream || capture_id == c->capture_seq_id) return;
  const auto [status, id] = capture_of(c->capture_stream);
  if (status == orStreamCaptureStatusNone || id != c->capture_seq_id) {
    c->capture_stream = nullptr;  // that capture is over
    return;
  }
  throw Error(occlInvalidUsage,
              format("%s: communicator %s is being captured into a graph (capture %llu); it "
                     "cannot be used outside that capture (from another thread, or on a stream "
                     "that is not part of the capture) until the capture ends",
                     name, c->name.c_str(), c->capture_seq_id));
}

occlResult_t capture(occlComm* c, const char* name, std::string describe, orStream_t stream,
                     unsigned long long capture_seq_id, std::function<void(const OpCtx&)> body,
                     Attempt try_first) {
  {
    std::lock_guard<std::mutex> g(c->capture_mu);
    c->capture_stream = stream;
    c->capture_seq_id = capture_seq_id;
  }
  uint64_t id = c->capture_id.load();
  if (id == 0) {
    std::lock_guard<std::mutex> g(g_live_mu);
    id = c->capture_id.load();
    if (id == 0) {
      id = g_next_id.fetch_add(1);
      (*g_live)[id] = c;
      c->capture_id.store(id);
    }
  }
  auto* cap = new CapturedOp{id, c->name, c->rank, std::string(name) + " (graph replay)",
                             std::move(describe), std::move(body), std::move(try_first)};
  // The runtime owns the op from here (and deletes it if the launch fails).
  if (orLaunchKernelOwned(stream, run_captured, cap, delete_captured, name,
                          orLaunchNeverInline) != orSuccess) {
    orGetLastError();
    return set_last_error(occlInvalidUsage,
                          format("%s: cannot be captured: %s", name, orGetLastErrorMessage()));
  }
  return occlSuccess;
}

}  // namespace

void forget_captures(occlComm* c) {
  if (c->capture_id.load() == 0) return;
  std::lock_guard<std::mutex> g(g_live_mu);
  g_live->erase(c->capture_id.load());
}
// [docs:occl-capture:end]

occlResult_t enqueue(occlComm* c, const char* name, std::string describe, orStream_t stream,
                     std::function<void(const OpCtx&)> body, Attempt try_first) {
  if (c->aborting.load()) return set_last_error(occlRemoteError, std::string(name) + ": communicator aborted");
  check_stream(c, stream, name);
  const auto [capturing, capture_seq_id] = capture_of(stream);
  check_capture_owner(c, capturing == orStreamCaptureStatusNone ? 0 : capture_seq_id, name);
  if (capturing != orStreamCaptureStatusNone)
    return capture(c, name, std::move(describe), stream, capture_seq_id, std::move(body),
                   std::move(try_first));
  auto* op = new Op{c, 0, name, std::move(describe), std::move(body), std::move(try_first),
                    std::this_thread::get_id(), false, {}};
  op->seq = c->enqueued.fetch_add(1) + 1;
  c->inflight.fetch_add(1);
  if (tracing()) {
    const char* collective = strncmp(name, "occl:", 5) == 0 ? name + 5 : name;
    orTraceSetLaunchAnnotation(
        format("Collective name=\"%s\"\nGroup size=%d\nSeq=%llu\nProcess Group Name=\"%s\"%s%s",
               collective, c->nranks, (unsigned long long)op->seq, c->name.c_str(),
               op->describe.empty() ? "" : "\n", op->describe.c_str())
            .c_str());
  }
  // Work that may block on other processes never runs inline, except as an
  // attempt that gives up instead of blocking.
  const unsigned flags = op->try_first.attempt ? orLaunchMayDefer : orLaunchNeverInline;
  if (orLaunchKernel(stream, run_op, op, name, flags) != orSuccess) {
    orGetLastError();
    c->inflight.fetch_sub(1);
    // The sequence number is spent: mark it done so waiters do not hang.
    c->fail(op->seq, occlSystemError, std::string(name) + ": orLaunchKernel: " + orGetLastErrorMessage());
    c->completed.store(op->seq);
    delete op;
    return set_last_error(occlSystemError, std::string(name) + ": orLaunchKernel failed");
  }
  return occlSuccess;
}

// Host-side checks of a device buffer: `bytes` bytes from `off` bytes past
// `p` (alltoallv's blocks: the offset is the caller's displacement, checked
// before any pointer is formed from it).
void check_buffer_at(occlComm* c, const void* p, size_t off, size_t bytes, const char* what,
                     const char* call) {
  if (bytes == 0) return;
  if (!p) throw Error(occlInvalidArgument, format("%s: %s is NULL", call, what));
  orPointerAttributes a;
  if (orPointerGetAttributes(&a, p) != orSuccess) {
    orGetLastError();
    throw Error(occlInvalidArgument, format("%s: %s: %s", call, what, orGetLastErrorMessage()));
  }
  if (a.type != orMemoryTypeDevice || a.device != c->device)
    throw Error(occlInvalidArgument,
                format("%s: %s (%p) is not memory of device openreg:%d", call, what, p, c->device));
  const char* start = static_cast<const char*>(a.devicePointer);
  // (sizes compared with the room left: p + off + bytes wraps for huge counts.)
  const size_t room = start && static_cast<const char*>(p) >= start
                          ? a.allocationSize - std::min(a.allocationSize,
                                                        size_t(static_cast<const char*>(p) - start))
                          : 0;
  if (!start || off > room || bytes > room - off)
    throw Error(occlInvalidArgument,
                off ? format("%s: %s (%p + %zu, %zu bytes) is not inside one live allocation",
                             call, what, p, off, bytes)
                    : format("%s: %s (%p, %zu bytes) is not inside one live allocation", call,
                             what, p, bytes));
}

void check_buffer(occlComm* c, const void* p, size_t bytes, const char* what, const char* call) {
  check_buffer_at(c, p, 0, bytes, what, call);
}

// count elements of es bytes, times `copies` (nranks for the gathered side):
// the byte count, refused if it does not fit in size_t (it would wrap to a
// small number and pass the buffer checks).
size_t checked_bytes(size_t count, size_t es, size_t copies, const char* call) {
  size_t b = 0;
  if (__builtin_mul_overflow(count, es, &b) || __builtin_mul_overflow(b, copies, &b))
    throw Error(occlInvalidArgument,
                format("%s: count %zu is too large (its byte count overflows)", call, count));
  return b;
}

void check_comm(occlComm* c, const char* call) {
  if (!c) throw Error(occlInvalidArgument, format("%s: comm is NULL", call));
}

void check_root(occlComm* c, int root, const char* call) {
  if (root < 0 || root >= c->nranks)
    throw Error(occlInvalidArgument, format("%s: root %d out of range [0, %d)", call, root, c->nranks));
}

size_t type_size_checked(occlDataType_t t, const char* call) {
  size_t es = occlTypeSize(t);
  if (!es) throw Error(occlInvalidArgument, format("%s: invalid data type %d", call, int(t)));
  return es;
}

// A collective's message, as "key=value" lines: logged with OCCL_DEBUG=1 and
// attached to its launch for profilers (orTraceSetLaunchAnnotation), as the
// c10d metadata of NCCL traces.
std::string describe(size_t count, occlDataType_t t, const char* extra) {
  if (!debug_enabled() && !tracing()) return {};
  return format("In msg nelems=%zu\ndtype=\"%s\"%s", count, type_name(t), extra);
}

}  // namespace occl
