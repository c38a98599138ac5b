// The collectives: argument checks, enqueueing as named device work, and the
// shared-memory algorithms that run when the work executes.
//
// Vendor: your collectives library has its own algorithms (rings and trees
// over NVLink and the network). What carries over is the shape: validate on
// the host, enqueue on the caller's stream, fail the communicator (not the
// process) when something goes wrong at run time.
#include "internal.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

using namespace occl;

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

}  // namespace occl

namespace {

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

// [a, a+len) of part i when n elements are split into `parts` nearly equal parts.
inline void part(size_t n, int parts, int i, size_t* off, size_t* len) {
  const size_t q = n / size_t(parts), r = n % size_t(parts);
  *off = size_t(i) * q + std::min(size_t(i), r);
  *len = q + (size_t(i) < r ? 1 : 0);
}

inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// [docs:occl-op]
// An operation that may be tried on the launching thread first
// (orLaunchMayDefer): `attempt` runs it if that needs no blocking and
// returns true, or does the part that never blocks (posting this rank's
// round) and returns false; `rest` then finishes it on a runtime worker.
struct Attempt {
  std::function<bool(const OpCtx&)> attempt;
  std::function<void(const OpCtx&)> rest;
};

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
  c->completed.store(op->seq, std::memory_order_release);
  c->inflight.fetch_sub(1);
  delete op;
  // Errors stay with the communicator (occlCommGetAsyncError), as with NCCL:
  // the stream itself is not poisoned.
  return orSuccess;
}
// [docs:occl-op:end]

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

occlResult_t enqueue(occlComm* c, const char* name, std::string describe, orStream_t stream,
                     std::function<void(const OpCtx&)> body, Attempt try_first = {}) {
  if (c->aborting.load()) return set_last_error(occlRemoteError, std::string(name) + ": communicator aborted");
  check_stream(c, stream, name);
  auto* op = new Op{c, 0, name, std::move(describe), std::move(body), std::move(try_first),
                    std::this_thread::get_id()};
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

OpDesc desc(uint32_t kind, occlDataType_t t, uint64_t seq, uint64_t count, int root,
            occlRedOpKind_t op, uint32_t round) {
  OpDesc d;
  d.kind = kind;
  d.dtype = uint32_t(t);
  d.seq = seq;
  d.count = count;
  d.root = root;
  d.redop = uint32_t(op);
  d.round = round;
  return d;
}

template <typename F>
occlResult_t guarded(const char* call, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    return set_last_error(e.result, e.what());
  } catch (const std::exception& e) {
    return set_last_error(occlInternalError, format("%s: %s", call, e.what()));
  }
}

// A collective's message, as "key=value" lines: logged with OCCL_DEBUG=1 and
// attached to its launch for profilers (orTraceSetLaunchAnnotation), as the
// c10d metadata of NCCL traces.
std::string describe(size_t count, occlDataType_t t, const char* extra = "") {
  if (!debug_enabled() && !tracing()) return {};
  return format("In msg nelems=%zu\ndtype=\"%s\"%s", count, type_name(t), extra);
}

// ------------------------------------------------------------ algorithms
// Messages up to this size are reduced in one round (every rank reduces the
// whole message: latency-optimal); larger ones are pipelined in chunks.
constexpr size_t kSmallAllReduce = size_t(256) << 10;

// [docs:occl-small-allreduce]
// The small all-reduce (and reduce) in its two halves: post this rank's
// data and round (never blocks over shared memory), and, once every peer
// has posted the round, reduce everyone's slots.
struct SmallAllReduce {
  occlComm* c;
  const char* in;
  char* out;
  size_t count;
  occlDataType_t t;
  occlRedOp_t op;
  int root;  // -1: all
  uint32_t kind;
  OpDesc d;
  uint32_t target = 0;  // the round posted

  void post(const OpCtx& ctx) {
    const size_t bytes = count * occlTypeSize(t);
    d = desc(kind, t, ++c->coll_seq, count, root, op.kind, 0);
    if (count) memcpy(c->wslot(c->parity(), 0, bytes), in, bytes);
    target = c->post(ctx, d);
  }
  void reduce_posted() {
    if (root >= 0 && root != c->rank) return;
    const int n = c->nranks, par = int((target - 1) & 1u);
    std::vector<const void*> srcs(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) srcs[size_t(p)] = c->peers[size_t(p)].slot(par);
    reduce(out, srcs.data(), n, count, t, op, n);
  }
};

// Small all-reduces (and reduces) over shared memory only are tried on the
// launching thread when OCCL's stream is idle (orLaunchMayDefer): if the
// peers have posted already, or do within the attempt (try_wait_round), the
// operation completes there, with no hop to a runtime worker and back (two
// thread wake-ups, most of a 4-byte all-reduce's time on two cores); if
// not, this rank's round is posted and a worker waits for the rest.
Attempt small_allreduce_attempt(occlComm* c, const char* in, char* out, size_t count,
                                occlDataType_t t, occlRedOp_t op, int root, uint32_t kind) {
  if (c->any_tcp || count * occlTypeSize(t) > kSmallAllReduce) return {};
  auto st = std::make_shared<SmallAllReduce>(SmallAllReduce{c, in, out, count, t, op, root, kind, {}});
  return {[st](const OpCtx& ctx) {
            st->post(ctx);
            if (!st->c->try_wait_round(ctx, st->target, st->d)) return false;
            st->reduce_posted();
            return true;
          },
          [st](const OpCtx& ctx) {
            st->c->wait_round(ctx, st->target, st->d, /*spun=*/true);
            st->reduce_posted();
          }};
}
// [docs:occl-small-allreduce:end]

// [docs:occl-allreduce]
// All-reduce over shared memory. Small messages: one round, every rank
// reduces everything. Large messages: a pipelined reduce-scatter +
// all-gather. In round k each rank copies the other ranks' shares of chunk k
// of its input into its slot, reduces its own 1/n share of chunk k from its
// input and the other ranks' slots (into the next slot's share area) and
// copies all ranks' reduced shares of chunk k-1 into its output, so copy-in,
// reduction and copy-out of neighbouring chunks overlap.
void allreduce_shm(occlComm* c, const OpCtx& ctx, const char* in, char* out, size_t count,
                   occlDataType_t t, occlRedOp_t op, int root /* -1: all */, uint32_t kind) {
  const size_t es = occlTypeSize(t);
  const int n = c->nranks;
  if (count * es <= kSmallAllReduce) {
    SmallAllReduce small{c, in, out, count, t, op, root, kind, {}};
    small.post(ctx);
    c->wait_round(ctx, small.target, small.d);
    small.reduce_posted();
    return;
  }
  const uint64_t seq = ++c->coll_seq;
  std::vector<const void*> srcs(static_cast<size_t>(n));
  const bool want = root < 0 || root == c->rank;
  const size_t chunk = c->slot_bytes / 2 / es;  // elements per round
  const size_t share_off = chunk * es;       // share area after the input area
  const size_t nchunks = ceil_div(count, chunk);
  auto chunk_len = [&](size_t k) { return std::min(chunk, count - k * chunk); };
  for (size_t k = 0; k <= nchunks; ++k) {
    const int par = c->parity();
    if (k < nchunks) {
      // Rank p reads only its share of this chunk from our slot (TCP peers
      // are sent only that); our own share is reduced straight from `in`.
      for (int p = 0; p < n; ++p) {
        if (p == c->rank) continue;
        size_t o, l;
        part(chunk_len(k), n, p, &o, &l);
        memcpy(c->wslot(par, o * es, l * es, p), in + (k * chunk + o) * es, l * es);
      }
    }
    c->post_and_wait(ctx, desc(kind, t, seq, count, root, op.kind, uint32_t(k)));
    if (k >= 1 && want) {  // gather the reduced shares of chunk k-1
      const size_t len = chunk_len(k - 1);
      for (int p = 0; p < n; ++p) {
        size_t o, l;
        part(len, n, p, &o, &l);
        memcpy(out + ((k - 1) * chunk + o) * es, c->peers[size_t(p)].slot(par) + share_off + o * es,
               l * es);
      }
    }
    if (k < nchunks) {  // reduce this rank's share of chunk k
      size_t o, l;
      part(chunk_len(k), n, c->rank, &o, &l);
      for (int p = 0; p < n; ++p)
        srcs[size_t(p)] = p == c->rank ? in + (k * chunk + o) * es : c->peers[size_t(p)].slot(par) + o * es;
      reduce(c->wslot(par ^ 1, share_off + o * es, l * es), srcs.data(), n, l, t, op, n);
    }
  }
}
// [docs:occl-allreduce:end]


// ------------------------------------------------------------ zero copy
// Large collectives when every rank's device memory can be mapped (strict
// mode): the ranks swap IPC handles of their buffers in one round, and then
// read each other's device buffers in place (opened once, cached).
struct IpcBuf {
  orIpcMemHandle_t handle;
  uint64_t off;  // of the buffer inside the exported allocation
};
struct ZcPost {
  IpcBuf in, out;
};

bool use_zero_copy(const occlComm* c, size_t bytes) {
  return c->zero_copy && c->nranks > 1 && bytes > kSmallAllReduce;
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

// Bytes per chunk of a zero-copy collective (OCCL_ZC_CHUNK overrides).
size_t zc_chunk_bytes() {
  static const size_t v = env_bytes("OCCL_ZC_CHUNK", size_t(2) << 20);
  return v;
}

void export_buffer(const void* dev, IpcBuf* b) {
  memset(b, 0, sizeof(*b));
  if (!dev) return;
  orPointerAttributes a;
  if (orIpcGetMemHandle(&b->handle, const_cast<void*>(dev)) != orSuccess ||
      orPointerGetAttributes(&a, dev) != orSuccess || !a.devicePointer) {
    orGetLastError();
    throw Error(occlSystemError, format("cannot export device buffer %p: %s", dev,
                                        orGetLastErrorMessage()));
  }
  b->off = uint64_t(static_cast<const char*>(dev) - static_cast<const char*>(a.devicePointer));
}

// Round 0 of a zero-copy collective: publish this rank's buffers, wait for
// everyone's, map theirs. pin/pout[p] are kernel-view addresses of rank p's
// input and output (this rank's own: in/out).
void exchange_buffers(occlComm* c, const OpCtx& ctx, const OpDesc& d, const void* send_dev,
                      const void* recv_dev, const char* in, char* out,
                      std::vector<const char*>& pin, std::vector<char*>& pout,
                      size_t in_bytes, size_t out_bytes) {
  const int par = c->parity();
  auto* mine = reinterpret_cast<ZcPost*>(c->self().slot(par));
  export_buffer(send_dev, &mine->in);
  export_buffer(recv_dev, &mine->out);
  c->post_and_wait(ctx, d);
  pin.assign(size_t(c->nranks), nullptr);
  pout.assign(size_t(c->nranks), nullptr);
  for (int p = 0; p < c->nranks; ++p) {
    if (p == c->rank) {
      pin[size_t(p)] = in;
      pout[size_t(p)] = out;
      continue;
    }
    ZcPost theirs;
    memcpy(&theirs, c->peers[size_t(p)].slot(par), sizeof(theirs));
    const IpcBuf none{};
    if (memcmp(&theirs.in, &none, sizeof(none)) != 0)
      pin[size_t(p)] = c->peer_buffer(p, theirs.in.handle, theirs.in.off, in_bytes);
    if (memcmp(&theirs.out, &none, sizeof(none)) != 0)
      pout[size_t(p)] = c->peer_buffer(p, theirs.out.handle, theirs.out.off, out_bytes);
  }
}

bool use_tcp_pipeline(const occlComm* c, size_t bytes) {
  return c->all_tcp && c->nranks > 1 && bytes > kSmallAllReduce;
}

// Bytes of each rank's share of a chunk (OCCL_TCP_CHUNK overrides), and how
// many chunks of every peer may be staged at once.
size_t tcp_share_bytes() {
  static const size_t v = env_bytes("OCCL_TCP_CHUNK", size_t(512) << 10);
  return v;
}
constexpr size_t kTcpStages = 8;

// [docs:occl-allreduce-tcp]
// All-reduce when every peer is reached over TCP: a pipelined reduce-scatter
// + all-gather that moves data straight between the users' buffers. Each
// rank sends every peer that peer's share of every chunk straight from its
// input (no copy into a slot), receives its own share of each chunk from
// every peer into a small ring of staging buffers, reduces chunk k as soon
// as all of it has arrived (while later chunks are still on the wire), and
// sends its reduced share of chunk k to every peer, which receives it
// straight into its output. A staging buffer is handed back to the socket
// only once its chunk is reduced; until then the peer's next frames wait in
// the kernel's socket buffers (flow control). Every share is reduced from
// the ranks' inputs in rank order, as the shared-memory paths do.
void allreduce_tcp(occlComm* c, const OpCtx& ctx, const char* in, char* out, size_t count,
                   occlDataType_t t, occlRedOp_t op) {
  const size_t es = occlTypeSize(t);
  const int n = c->nranks, me = c->rank;
  const uint64_t seq = ++c->coll_seq;
  // One round first: all ranks run this same all-reduce before any data
  // frame is sent (a mismatch fails here, as in every other collective).
  c->post_and_wait(ctx, desc(kAllReduce, t, seq, count, -1, op.kind, 0));
  const size_t chunk = std::max<size_t>(size_t(n), tcp_share_bytes() / es * size_t(n));
  const size_t nchunks = ceil_div(count, chunk);
  const size_t stages = std::min(kTcpStages, nchunks);
  // (the largest share there is: a chunk of OCCL_TCP_CHUNK bytes per rank,
  // or the whole message if it is smaller, so that a large setting costs
  // nothing for small all-reduces)
  const size_t share_max = ceil_div(std::min(chunk, count), size_t(n)) * es;
  if (c->tcp_stage.size() < size_t(n) * stages * share_max)
    c->tcp_stage.resize(size_t(n) * stages * share_max);
  auto stage = [&](int p, size_t k) {
    return c->tcp_stage.data() + (size_t(p) * stages + k % stages) * share_max;
  };
  // Byte range of rank p's share of chunk k.
  auto share = [&](size_t k, int p, size_t* at, size_t* bytes) {
    size_t o, l;
    part(std::min(chunk, count - k * chunk), n, p, &o, &l);
    *at = (k * chunk + o) * es;
    *bytes = l * es;
  };
  // Each peer's frames, and the buffers posted for them, follow one
  // schedule: reduce-scatter chunks 0 .. stages-1, then, as chunk k is
  // reduced, all-gather chunk k and reduce-scatter chunk k + stages (whose
  // staging buffer chunk k has just freed). So a reduced share leaves right
  // after its reduction, while it is still in cache, and the input is read
  // no further ahead than the staging allows. Frame ids: chunk k of the
  // reduce-scatter is k, of the all-gather nchunks + k. Empty shares (a
  // chunk with fewer elements than ranks) are neither sent nor posted.
  std::vector<uint64_t> base(static_cast<size_t>(n)), posts(static_cast<size_t>(n), 0);
  std::vector<uint64_t> need(static_cast<size_t>(n) * nchunks, 0);  // posts through RS chunk k
  for (int p = 0; p < n; ++p) base[size_t(p)] = c->peers[size_t(p)].data_got;
  auto rs = [&](size_t k) {  // send every peer its share of chunk k, post ours
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      size_t at, bytes;
      share(k, p, &at, &bytes);
      if (bytes) c->tcp_send_data(p, k, in + at, bytes);
      share(k, me, &at, &bytes);
      if (bytes) {
        c->tcp_post_recv(p, k, stage(p, k), bytes);
        ++posts[size_t(p)];
      }
      need[size_t(p) * nchunks + k] = posts[size_t(p)];
    }
  };
  auto ag_post = [&](size_t k) {  // every peer's reduced share, straight into out
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      size_t at, bytes;
      share(k, p, &at, &bytes);
      if (bytes) {
        c->tcp_post_recv(p, nchunks + k, out + at, bytes);
        ++posts[size_t(p)];
      }
    }
  };
  for (size_t k = 0; k < stages; ++k) rs(k);
  std::vector<const void*> srcs(static_cast<size_t>(n));
  size_t reduced = 0;
  auto arrived = [&](int p) { return c->peers[size_t(p)].data_got - base[size_t(p)]; };
  for (;;) {
    bool moved = false;
    while (reduced < nchunks) {
      bool ready = true;
      for (int p = 0; p < n && ready; ++p)
        ready = p == me || arrived(p) >= need[size_t(p) * nchunks + reduced];
      if (!ready) break;
      const size_t k = reduced;
      size_t at, bytes;
      share(k, me, &at, &bytes);
      for (int p = 0; p < n; ++p) srcs[size_t(p)] = p == me ? in + at : stage(p, k);
      if (bytes) reduce(out + at, srcs.data(), n, bytes / es, t, op, n);  // out may alias in
      for (int p = 0; p < n; ++p)
        if (p != me && bytes) c->tcp_send_data(p, nchunks + k, out + at, bytes);
      ag_post(k);
      ++reduced;
      if (k + stages < nchunks) rs(k + stages);
      moved = true;
    }
    bool done = reduced == nchunks;
    for (int p = 0; p < n && done; ++p) done = p == me || c->peers[size_t(p)].posts.empty();
    if (done) break;
    if (moved) continue;
    int behind = -1;
    for (int p = 0; p < n; ++p)
      if (p != me && !c->peers[size_t(p)].posts.empty()) {
        behind = p;
        c->tcp_check_open(ctx, p);
      }
    c->check_peer(ctx, behind >= 0 ? behind : me, "the same all-reduce (over TCP)");
    c->tcp_pump(ctx, 20);
  }
  c->tcp_flush(ctx);  // the input and output stay in use until our frames have left
}
// [docs:occl-allreduce-tcp:end]

// [docs:occl-allreduce-zc]
// Zero-copy all-reduce: after the handle round, in round k each rank reduces
// its 1/n share of chunk k straight from every rank's input buffer into its
// own output, and copies the other ranks' reduced shares of chunk k-1 from
// their output buffers into its own. The last round tells everyone that all
// reads of their buffers are done, so they may return (and reuse them).
// No copy-in, no staging: each byte is read once to reduce and once to
// gather. In place (in == out) is safe: a rank writes only its own share of
// its buffer while the peers read the other shares. Sources are reduced in
// rank order, so every share is computed as the copy-in path computes it.
void allreduce_zc(occlComm* c, const OpCtx& ctx, const void* send_dev, void* recv_dev,
                  const char* in, char* out, size_t count, occlDataType_t t, occlRedOp_t op) {
  const size_t es = occlTypeSize(t);
  const int n = c->nranks, me = c->rank;
  const uint64_t seq = ++c->coll_seq;
  std::vector<const char*> pin;
  std::vector<char*> pout;
  exchange_buffers(c, ctx, desc(kAllReduce, t, seq, count, -1, op.kind, 0), send_dev, recv_dev,
                   in, out, pin, pout, count * es, count * es);
  const size_t chunk = std::max<size_t>(1, zc_chunk_bytes() / es);
  const size_t nchunks = ceil_div(count, chunk);
  auto chunk_len = [&](size_t k) { return std::min(chunk, count - k * chunk); };
  std::vector<const void*> srcs(size_t(n), nullptr);
  for (size_t k = 0; k <= nchunks; ++k) {
    if (k < nchunks) {
      size_t o, l;
      part(chunk_len(k), n, me, &o, &l);
      const size_t at = (k * chunk + o) * es;
      for (int p = 0; p < n; ++p) srcs[size_t(p)] = pin[size_t(p)] + at;
      reduce(out + at, srcs.data(), n, l, t, op, n);  // out may alias srcs[me]
    }
    if (k >= 1) {
      const size_t len = chunk_len(k - 1);
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        size_t o, l;
        part(len, n, p, &o, &l);
        const size_t at = ((k - 1) * chunk + o) * es;
        memcpy(out + at, pout[size_t(p)] + at, l * es);
      }
    }
    c->post_and_wait(ctx, desc(kAllReduce, t, seq, count, -1, op.kind, uint32_t(k + 1)));
  }
}
// [docs:occl-allreduce-zc:end]

void broadcast_zc(occlComm* c, const OpCtx& ctx, const void* send_dev, void* recv_dev,
                  const char* in, char* out, size_t count, occlDataType_t t, int root) {
  const size_t bytes = count * occlTypeSize(t);
  const uint64_t seq = ++c->coll_seq;
  std::vector<const char*> pin;
  std::vector<char*> pout;
  exchange_buffers(c, ctx, desc(kBroadcast, t, seq, count, root, occlSum, 0),
                   c->rank == root ? send_dev : nullptr, nullptr, in, out, pin, pout, bytes, 0);
  if (c->rank == root) {
    if (in != out) memmove(out, in, bytes);
  } else {
    memcpy(out, pin[size_t(root)], bytes);
  }
  c->post_and_wait(ctx, desc(kBroadcast, t, seq, count, root, occlSum, 1));
}

void allgather_zc(occlComm* c, const OpCtx& ctx, const void* send_dev, const char* in, char* out,
                  size_t count, occlDataType_t t) {
  const size_t bytes = count * occlTypeSize(t);
  const uint64_t seq = ++c->coll_seq;
  std::vector<const char*> pin;
  std::vector<char*> pout;
  exchange_buffers(c, ctx, desc(kAllGather, t, seq, count, -1, occlSum, 0), send_dev, nullptr,
                   in, out, pin, pout, bytes, 0);
  for (int p = 0; p < c->nranks; ++p) {
    char* dst = out + size_t(p) * bytes;
    if (pin[size_t(p)] != dst) memmove(dst, pin[size_t(p)], bytes);
  }
  c->post_and_wait(ctx, desc(kAllGather, t, seq, count, -1, occlSum, 1));
}

void reduce_scatter_zc(occlComm* c, const OpCtx& ctx, const void* send_dev, const char* in,
                       char* out, size_t count, occlDataType_t t, occlRedOp_t op) {
  const size_t es = occlTypeSize(t);
  const int n = c->nranks, me = c->rank;
  const uint64_t seq = ++c->coll_seq;
  std::vector<const char*> pin;
  std::vector<char*> pout;
  exchange_buffers(c, ctx, desc(kReduceScatter, t, seq, count, -1, op.kind, 0), send_dev,
                   nullptr, in, out, pin, pout, size_t(n) * count * es, 0);
  const size_t at = size_t(me) * count * es;
  std::vector<const void*> srcs(size_t(n), nullptr);
  for (int p = 0; p < n; ++p) srcs[size_t(p)] = pin[size_t(p)] + at;
  reduce(out, srcs.data(), n, count, t, op, n);  // out may alias srcs[me]
  c->post_and_wait(ctx, desc(kReduceScatter, t, seq, count, -1, op.kind, 1));
}

void broadcast_shm(occlComm* c, const OpCtx& ctx, const char* in, char* out, size_t count,
                   occlDataType_t t, int root) {
  const size_t es = occlTypeSize(t), bytes = count * es;
  const uint64_t seq = ++c->coll_seq;
  const bool is_root = c->rank == root;
  if (is_root && in != out && bytes) memmove(out, in, bytes);
  const size_t rounds = std::max<size_t>(1, ceil_div(bytes, c->slot_bytes));
  for (size_t k = 0; k < rounds; ++k) {
    const int par = c->parity();
    const size_t off = k * c->slot_bytes, len = std::min(c->slot_bytes, bytes - std::min(bytes, off));
    if (is_root && len) memcpy(c->wslot(par, 0, len), in + off, len);
    c->post_and_wait(ctx, desc(kBroadcast, t, seq, count, root, occlSum, uint32_t(k)));
    if (!is_root && len) memcpy(out + off, c->peers[size_t(root)].slot(par), len);
  }
}

void allgather_shm(occlComm* c, const OpCtx& ctx, const char* in, char* out, size_t count,
                   occlDataType_t t) {
  const size_t es = occlTypeSize(t), bytes = count * es;
  const uint64_t seq = ++c->coll_seq;
  const size_t rounds = std::max<size_t>(1, ceil_div(bytes, c->slot_bytes));
  for (size_t k = 0; k < rounds; ++k) {
    const int par = c->parity();
    const size_t off = k * c->slot_bytes, len = std::min(c->slot_bytes, bytes - std::min(bytes, off));
    if (len) memcpy(c->wslot(par, 0, len), in + off, len);
    c->post_and_wait(ctx, desc(kAllGather, t, seq, count, -1, occlSum, uint32_t(k)));
    if (!len) continue;
    for (int p = 0; p < c->nranks; ++p)
      memcpy(out + size_t(p) * bytes + off, c->peers[size_t(p)].slot(par), len);
  }
}

void reduce_scatter_shm(occlComm* c, const OpCtx& ctx, const char* in, char* out, size_t count,
                        occlDataType_t t, occlRedOp_t op) {
  const size_t es = occlTypeSize(t);
  const int n = c->nranks;
  const uint64_t seq = ++c->coll_seq;
  const size_t block = c->slot_bytes / size_t(n) / es;  // elements per rank per round
  const size_t rounds = std::max<size_t>(1, ceil_div(count, block));
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (size_t k = 0; k < rounds; ++k) {
    const int par = c->parity();
    const size_t off = k * block, len = std::min(block, count - std::min(count, off));
    for (int p = 0; p < n && len; ++p)
      memcpy(c->wslot(par, size_t(p) * block * es, len * es, p), in + (size_t(p) * count + off) * es,
             len * es);
    c->post_and_wait(ctx, desc(kReduceScatter, t, seq, count, -1, op.kind, uint32_t(k)));
    if (!len) continue;
    for (int p = 0; p < n; ++p)
      srcs[size_t(p)] = c->peers[size_t(p)].slot(par) + size_t(c->rank) * block * es;
    reduce(out + off * es, srcs.data(), n, len, t, op, n);
  }
}

// Pairwise exchange with uneven sizes; gather and scatter are special cases.
// Round 0 exchanges the send sizes (and checks them against the receive
// sizes), then every round moves up to slot_bytes/n bytes of each pair.
void alltoallv_shm(occlComm* c, const OpCtx& ctx, const char* in, const std::vector<size_t>& scount,
                   const std::vector<size_t>& sdispl, char* out, const std::vector<size_t>& rcount,
                   const std::vector<size_t>& rdispl, occlDataType_t t, uint32_t kind, int root) {
  const size_t es = occlTypeSize(t);
  const int n = c->nranks;
  const uint64_t seq = ++c->coll_seq;
  int par = c->parity();
  uint64_t* mine = reinterpret_cast<uint64_t*>(c->wslot(par, 0, size_t(n) * sizeof(uint64_t)));
  for (int p = 0; p < n; ++p) mine[p] = scount[size_t(p)];
  c->post_and_wait(ctx, desc(kind, t, seq, 0, root, occlSum, 0));
  size_t biggest = 0;
  std::vector<size_t> from(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    const uint64_t* theirs = reinterpret_cast<const uint64_t*>(c->peers[size_t(p)].slot(par));
    for (int q = 0; q < n; ++q) biggest = std::max<size_t>(biggest, theirs[q]);
    from[size_t(p)] = theirs[c->rank];
    if (from[size_t(p)] != rcount[size_t(p)])
      throw Error(occlInvalidUsage,
                  format("%s (seq %llu): rank %d sends %zu elements to rank %d, which expects %zu",
                         ctx.name, (unsigned long long)ctx.seq, p, from[size_t(p)], c->rank,
                         rcount[size_t(p)]));
  }
  const size_t region = c->slot_bytes / size_t(n);
  const size_t rounds = ceil_div(biggest * es, region);
  for (size_t k = 0; k < rounds; ++k) {
    par = c->parity();
    const size_t off = k * region;
    for (int p = 0; p < n; ++p) {
      const size_t b = scount[size_t(p)] * es;
      if (off < b)
        memcpy(c->wslot(par, size_t(p) * region, std::min(region, b - off), p),
               in + sdispl[size_t(p)] * es + off, std::min(region, b - off));
    }
    c->post_and_wait(ctx, desc(kind, t, seq, 0, root, occlSum, uint32_t(k + 1)));
    for (int p = 0; p < n; ++p) {
      const size_t b = from[size_t(p)] * es;
      if (off < b)
        memcpy(out + rdispl[size_t(p)] * es + off,
               c->peers[size_t(p)].slot(par) + size_t(c->rank) * region, std::min(region, b - off));
    }
  }
}

// ------------------------------------------------------------ point to point
// A message on the ring from `from` to `to` (in `from`'s segment): a 16-byte
// header {tag, bytes}, then the payload padded to 16 bytes, so a header
// never wraps around the ring's end.
struct MsgHeader {
  int64_t tag;
  uint64_t bytes;
};

struct P2P {
  bool send;
  int peer;  // -1: any source (receive)
  int64_t tag;
  char* buf;  // kernel view
  size_t bytes;
  int* source;
  size_t done = 0;
  bool header = false;  // header written / read
  bool finished = false;
};

inline size_t pad16(size_t n) { return (n + 15) & ~size_t(15); }

void ring_write(char* data, uint64_t pos, const char* src, size_t n) {
  const size_t at = pos % kRingBytes, first = std::min(n, kRingBytes - at);
  memcpy(data + at, src, first);
  if (n > first) memcpy(data, src + first, n - first);
}
void ring_read(char* dst, const char* data, uint64_t pos, size_t n) {
  const size_t at = pos % kRingBytes, first = std::min(n, kRingBytes - at);
  memcpy(dst, data + at, first);
  if (n > first) memcpy(dst + first, data, n - first);
}

// A ring's counters live in shared memory that the peer (another process)
// writes: more bytes in use than the ring holds means a corrupted block, and
// trusting it would make the copies run past the ring's end.
uint64_t ring_used(occlComm* c, const OpCtx& ctx, const RingHeader* r, int from, int to) {
  const uint64_t used = r->head.load(std::memory_order_acquire) - r->tail.load(std::memory_order_acquire);
  if (used > kRingBytes)
    throw Error(occlRemoteError,
                format("%s (seq %llu): the ring from rank %d to rank %d claims %llu bytes in use "
                       "(it holds %zu): its shared control block is corrupted",
                       ctx.name, (unsigned long long)ctx.seq, from, to, (unsigned long long)used,
                       kRingBytes));
  return used;
}

// Over TCP a send queues the whole message as one frame (sent by the pump,
// and flushed before the operation ends); a receive takes the next message
// from the peer's inbox.
bool progress_send_tcp(occlComm* c, P2P& s) {
  c->tcp_send_message(s.peer, s.tag, s.buf, s.bytes);
  s.finished = true;
  return true;
}

bool take_tcp_message(occlComm* c, const OpCtx& ctx, P2P& s) {
  auto& inbox = c->peers[size_t(s.peer)].inbox;
  if (inbox.empty()) return false;
  TcpMessage& m = inbox.front();
  if (m.tag != s.tag || m.bytes != s.bytes)
    throw Error(occlInvalidUsage,
                format("%s (seq %llu): rank %d expects %zu bytes with tag %lld from rank %d, whose "
                       "next message has %zu bytes with tag %lld",
                       ctx.name, (unsigned long long)ctx.seq, c->rank, s.bytes, (long long)s.tag,
                       s.peer, m.bytes, (long long)m.tag));
  if (s.bytes) memcpy(s.buf, m.data.get(), s.bytes);
  inbox.pop_front();
  s.finished = true;
  return true;
}

// One step of a send; true if it moved anything.
bool progress_send(occlComm* c, const OpCtx& ctx, P2P& s) {
  if (c->peers[size_t(s.peer)].tcp) return progress_send_tcp(c, s);
  RingHeader* r = c->self().ring(s.peer);
  char* data = c->self().ring_data(s.peer);
  const uint64_t head = r->head.load(std::memory_order_relaxed);
  const uint64_t free_bytes = kRingBytes - ring_used(c, ctx, r, c->rank, s.peer);
  uint64_t h = head;
  if (!s.header) {
    if (free_bytes < sizeof(MsgHeader)) return false;
    MsgHeader m{s.tag, s.bytes};
    ring_write(data, h, reinterpret_cast<const char*>(&m), sizeof(m));
    h += sizeof(m);
    s.header = true;
  }
  const size_t padded = pad16(s.bytes);
  const size_t room = free_bytes - (h - head);
  const size_t n = std::min(room, padded - s.done);
  if (n) {
    const size_t real = s.done < s.bytes ? std::min(n, s.bytes - s.done) : 0;
    if (real) ring_write(data, h, s.buf + s.done, real);
    s.done += n;
    h += n;
  }
  if (h == head) return false;
  r->head.store(h, std::memory_order_release);
  if (s.done == padded) s.finished = true;
  c->ring_bell(s.peer);
  return true;
}

bool progress_recv(occlComm* c, const OpCtx& ctx, P2P& s) {
  if (s.peer < 0) {  // any source: the first peer whose next message has our tag
    for (int p = 0; p < c->nranks && s.peer < 0; ++p) {
      if (p == c->rank) continue;
      if (c->peers[size_t(p)].tcp) {
        const auto& inbox = c->peers[size_t(p)].inbox;
        if (!inbox.empty() && inbox.front().tag == s.tag) s.peer = p;
        continue;
      }
      RingHeader* r = c->peers[size_t(p)].ring(c->rank);
      const uint64_t tail = r->tail.load(std::memory_order_relaxed);
      if (r->head.load(std::memory_order_acquire) - tail < sizeof(MsgHeader)) continue;
      MsgHeader m;
      ring_read(reinterpret_cast<char*>(&m), c->peers[size_t(p)].ring_data(c->rank), tail, sizeof(m));
      if (m.tag == s.tag) s.peer = p;
    }
    if (s.peer < 0) return false;
    if (s.source) *s.source = s.peer;
  }
  if (c->peers[size_t(s.peer)].tcp) return take_tcp_message(c, ctx, s);
  RingHeader* r = c->peers[size_t(s.peer)].ring(c->rank);
  const char* data = c->peers[size_t(s.peer)].ring_data(c->rank);
  const uint64_t tail = r->tail.load(std::memory_order_relaxed);
  uint64_t t = tail;
  const uint64_t head = tail + ring_used(c, ctx, r, s.peer, c->rank);
  if (!s.header) {
    if (head - t < sizeof(MsgHeader)) return false;
    MsgHeader m;
    ring_read(reinterpret_cast<char*>(&m), data, t, sizeof(m));
    if (m.tag != s.tag || m.bytes != s.bytes)
      throw Error(occlInvalidUsage,
                  format("%s (seq %llu): rank %d expects %zu bytes with tag %lld from rank %d, whose "
                         "next message has %llu bytes with tag %lld",
                         ctx.name, (unsigned long long)ctx.seq, c->rank, s.bytes, (long long)s.tag,
                         s.peer, (unsigned long long)m.bytes, (long long)m.tag));
    t += sizeof(m);
    s.header = true;
  }
  const size_t padded = pad16(s.bytes);
  const size_t n = std::min<size_t>(head - t, padded - s.done);
  if (n) {
    const size_t real = s.done < s.bytes ? std::min(n, s.bytes - s.done) : 0;
    if (real) ring_read(s.buf + s.done, data, t, real);
    s.done += n;
    t += n;
  }
  if (t == tail) return false;
  r->tail.store(t, std::memory_order_release);
  if (s.done == padded) s.finished = true;
  c->ring_bell(s.peer);
  return true;
}

// [docs:occl-p2p]
// Progress every send and receive of a group together; sleep on this rank's
// doorbell (rung by a peer whenever it writes to or drains a ring of ours)
// when nothing can move. Within a pair, messages keep their order.
void run_p2p(occlComm* c, const OpCtx& ctx, std::vector<P2P>& ops) {
  Ctrl* me = c->self().ctrl();
  for (;;) {
    const uint32_t bell = me->doorbell.v.load(std::memory_order_acquire);
    bool moved = false, all = true;
    std::vector<char> busy_send(size_t(c->nranks), 0), busy_recv(size_t(c->nranks), 0);
    for (P2P& s : ops) {
      if (s.finished) continue;
      all = false;
      const int p = s.peer;
      if (p >= 0 && (s.send ? busy_send : busy_recv)[size_t(p)]) continue;  // keep order
      moved |= s.send ? progress_send(c, ctx, s) : progress_recv(c, ctx, s);
      if (!s.finished && s.peer >= 0) (s.send ? busy_send : busy_recv)[size_t(s.peer)] = 1;
    }
    if (all) {
      if (c->any_tcp) c->tcp_flush(ctx);  // the last frames leave before the op ends
      return;
    }
    if (moved) continue;
    if (c->any_tcp) {
      // TCP peers have no doorbell: wait on their sockets (briefly, so the
      // shared-memory peers' rings are looked at again soon).
      bool tcp_waited = false;
      for (P2P& s : ops)
        tcp_waited = tcp_waited || (!s.finished && (s.peer < 0 || c->peers[size_t(s.peer)].tcp));
      (void)tcp_waited;
      c->tcp_pump(ctx, 2);
      for (P2P& s : ops) {
        if (s.finished) continue;
        if (s.peer >= 0 && !s.send && c->peers[size_t(s.peer)].tcp &&
            c->peers[size_t(s.peer)].inbox.empty())
          c->tcp_check_open(ctx, s.peer);
        c->check_peer(ctx, s.peer >= 0 ? s.peer : c->rank, "a matching send/recv");
        break;
      }
      continue;
    }
    int waiting_for = -1;
    for (P2P& s : ops)
      if (!s.finished) { waiting_for = s.peer; break; }
    auto changed = [&] { return me->doorbell.v.load(std::memory_order_acquire) != bell; };
    if (waiting_for >= 0) {
      c->wait_for(ctx, waiting_for, &me->doorbell.v, &me->bell_waiters.v, changed,
                  "a matching send/recv");
    } else {  // any source: any peer may be the one
      for (int p = 0; p < c->nranks; ++p)
        if (p != c->rank) c->check_peer(ctx, p, "a matching send");
      c->wait_for(ctx, c->rank == 0 ? (c->nranks > 1 ? 1 : 0) : 0, &me->doorbell.v,
                  &me->bell_waiters.v, changed, "a matching send");
    }
  }
}
// [docs:occl-p2p:end]

struct Group {
  int depth = 0;
  occlComm* comm = nullptr;
  orStream_t stream = nullptr;
  std::vector<P2P> ops;
};
thread_local Group t_group;

occlResult_t launch_p2p(occlComm* c, orStream_t stream, std::vector<P2P> ops) {
  const char* name = ops.size() == 1 ? (ops[0].send ? "occl:send" : "occl:recv") : "occl:sendrecv";
  std::string d;
  if (debug_enabled()) d = format("%zu ops, %zu bytes first", ops.size(), ops.empty() ? 0 : ops[0].bytes);
  return enqueue(c, name, d, stream, [c, ops](const OpCtx& ctx) mutable { run_p2p(c, ctx, ops); });
}

occlResult_t add_p2p(occlComm* c, orStream_t stream, P2P op, const char* call) {
  if (t_group.depth > 0) {
    check_stream(c, stream, call);  // at the call, not at occlGroupEnd (enqueue checks the rest)
    if (t_group.comm && (t_group.comm != c || t_group.stream != stream))
      throw Error(occlInvalidUsage, format("%s: one group may use one communicator and stream", call));
    t_group.comm = c;
    t_group.stream = stream;
    t_group.ops.push_back(op);
    return occlSuccess;
  }
  return launch_p2p(c, stream, {op});
}

}  // namespace

namespace occl {
// Every OCCL_* variable read lazily (at a collective, on a worker thread,
// then cached) is parsed here too, each time a communicator is created, so
// a malformed one fails occlCommInitRank with a message that names it.
void check_env_options() {
  env_flag("OCCL_DEBUG", false);
  env_bytes("OCCL_ZC_CHUNK", 1);
  env_bytes("OCCL_TCP_CHUNK", 1);
}
}  // namespace occl

namespace {
// [docs:occl-allreduce-hier]
// All-reduce in two levels (a communicator that mixes shared memory and TCP,
// see build_hierarchy): reduce onto the node's leader through shared memory,
// all-reduce among the leaders over TCP (the pipelined algorithm: every byte
// crosses the network once per leader instead of once per rank pair), and
// broadcast the result back through shared memory. Avg sums at both levels
// and divides once at the end; a pre-multiplied sum scales at the first
// level only. One round of the whole communicator first, so that a
// mismatched collective still fails at once on every rank.
//
// Floating-point sums are then associated by node ((x0 + x1) + (x2 + x3))
// rather than in rank order, as NCCL's ring and tree also do: results still
// agree on every rank, and differ from the one-level paths by rounding.
// Half-precision types keep the one-level paths, where each level's partial
// sum would be rounded to 16 bits.
bool use_hierarchy(const occlComm* c, size_t bytes, occlDataType_t t) {
  return c->local != nullptr && bytes > kSmallAllReduce && t != occlFloat16 &&
         t != occlBFloat16;
}

// Runs one step on a level; its errors name that level's ranks, so they are
// re-thrown saying which ranks of the communicator those are.
template <typename Step>
void on_level(const occlComm* level, const char* what, Step&& step) {
  try {
    step();
  } catch (const Error& e) {
    std::string map;
    for (size_t i = 0; i < level->parent_ranks.size(); ++i)
      map += format("%sits rank %zu is rank %d here", i ? ", " : "", i, level->parent_ranks[i]);
    throw Error(e.result, format("%s [ranks as numbered in the %s level: %s]", e.what(), what,
                                 map.c_str()));
  }
}

void allreduce_hier(occlComm* c, const OpCtx& ctx, const char* in, char* out, size_t count,
                    occlDataType_t t, occlRedOp_t op) {
  const size_t es = occlTypeSize(t);
  c->post_and_wait(ctx, desc(kAllReduce, t, ++c->coll_seq, count, -1, op.kind, 0));
  occlRedOp_t first = op, second = op;
  if (op.kind == occlAvg) first.kind = second.kind = occlSum;
  if (op.kind == occlPreMulSum) second = occlRedOp_t{occlSum, 1.0};
  occlComm* node = c->local;
  if (node->nranks > 1) {
    on_level(node, "node", [&] { allreduce_shm(node, ctx, in, out, count, t, first, 0, kReduce); });
  } else {
    const void* src = in;
    reduce(out, &src, 1, count, t, first, 1);  // a copy (scaled, for a pre-multiplied sum)
  }
  if (occlComm* leaders = c->leaders) {
    on_level(leaders, "leaders'", [&] {
      if (use_tcp_pipeline(leaders, count * es))
        allreduce_tcp(leaders, ctx, out, out, count, t, second);
      else
        allreduce_shm(leaders, ctx, out, out, count, t, second, -1, kAllReduce);
    });
    if (op.kind == occlAvg) {
      const void* src = out;
      reduce(out, &src, 1, count, t, op, c->nranks);
    }
  }
  if (node->nranks > 1)
    on_level(node, "node", [&] { broadcast_shm(node, ctx, out, out, count, t, 0); });
}

// [docs:occl-allreduce-hier:end]
}  // namespace

size_t occlTypeSize(occlDataType_t t) {
  static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8, 1, 8, 16};
  return unsigned(t) < occlNumTypes ? sizes[t] : 0;
}

// ------------------------------------------------------------ API
occlResult_t occlAllReduce(const void* send, void* recv, size_t count, occlDataType_t t,
                           occlRedOp_t op, occlComm_t c, orStream_t stream) {
  return guarded("occlAllReduce", [&] {
    check_comm(c, "occlAllReduce");
    const size_t es = type_size_checked(t, "occlAllReduce");
    checked_bytes(count, es, 1, "occlAllReduce");
    check_reduction(t, op);
    check_buffer(c, send, count * es, "sendbuff", "occlAllReduce");
    check_buffer(c, recv, count * es, "recvbuff", "occlAllReduce");
    const char* in = c->kv(send);
    char* out = c->kv(recv);
    return enqueue(c, "occl:allreduce", describe(count, t), stream, [=](const OpCtx& ctx) {
      if (use_hierarchy(c, count * es, t))
        allreduce_hier(c, ctx, in, out, count, t, op);
      else if (use_zero_copy(c, count * es))
        allreduce_zc(c, ctx, send, recv, in, out, count, t, op);
      else if (use_tcp_pipeline(c, count * es))
        allreduce_tcp(c, ctx, in, out, count, t, op);
      else
        allreduce_shm(c, ctx, in, out, count, t, op, -1, kAllReduce);
    }, small_allreduce_attempt(c, in, out, count, t, op, -1, kAllReduce));
  });
}

occlResult_t occlReduce(const void* send, void* recv, size_t count, occlDataType_t t,
                        occlRedOp_t op, int root, occlComm_t c, orStream_t stream) {
  return guarded("occlReduce", [&] {
    check_comm(c, "occlReduce");
    const size_t es = type_size_checked(t, "occlReduce");
    checked_bytes(count, es, 1, "occlReduce");
    check_reduction(t, op);
    check_root(c, root, "occlReduce");
    check_buffer(c, send, count * es, "sendbuff", "occlReduce");
    if (c->rank == root) check_buffer(c, recv, count * es, "recvbuff", "occlReduce");
    const char* in = c->kv(send);
    char* out = c->kv(recv);
    return enqueue(c, "occl:reduce", describe(count, t), stream, [=](const OpCtx& ctx) {
      allreduce_shm(c, ctx, in, out, count, t, op, root, kReduce);
    }, small_allreduce_attempt(c, in, out, count, t, op, root, kReduce));
  });
}

occlResult_t occlBroadcast(const void* send, void* recv, size_t count, occlDataType_t t, int root,
                           occlComm_t c, orStream_t stream) {
  return guarded("occlBroadcast", [&] {
    check_comm(c, "occlBroadcast");
    const size_t es = type_size_checked(t, "occlBroadcast");
    checked_bytes(count, es, 1, "occlBroadcast");
    check_root(c, root, "occlBroadcast");
    if (c->rank == root) check_buffer(c, send, count * es, "sendbuff", "occlBroadcast");
    check_buffer(c, recv, count * es, "recvbuff", "occlBroadcast");
    const char* in = c->kv(send);
    char* out = c->kv(recv);
    return enqueue(c, "occl:broadcast", describe(count, t), stream, [=](const OpCtx& ctx) {
      if (use_zero_copy(c, count * es))
        broadcast_zc(c, ctx, send, recv, in, out, count, t, root);
      else
        broadcast_shm(c, ctx, in, out, count, t, root);
    });
  });
}

occlResult_t occlAllGather(const void* send, void* recv, size_t count, occlDataType_t t,
                           occlComm_t c, orStream_t stream) {
  return guarded("occlAllGather", [&] {
    check_comm(c, "occlAllGather");
    const size_t es = type_size_checked(t, "occlAllGather");
    checked_bytes(count, es, size_t(c->nranks), "occlAllGather");
    check_buffer(c, send, count * es, "sendbuff", "occlAllGather");
    check_buffer(c, recv, count * es * size_t(c->nranks), "recvbuff", "occlAllGather");
    const char* in = c->kv(send);
    char* out = c->kv(recv);
    return enqueue(c, "occl:allgather", describe(count, t), stream, [=](const OpCtx& ctx) {
      if (use_zero_copy(c, count * es))
        allgather_zc(c, ctx, send, in, out, count, t);
      else
        allgather_shm(c, ctx, in, out, count, t);
    });
  });
}

occlResult_t occlReduceScatter(const void* send, void* recv, size_t count, occlDataType_t t,
                               occlRedOp_t op, occlComm_t c, orStream_t stream) {
  return guarded("occlReduceScatter", [&] {
    check_comm(c, "occlReduceScatter");
    const size_t es = type_size_checked(t, "occlReduceScatter");
    checked_bytes(count, es, size_t(c->nranks), "occlReduceScatter");
    check_reduction(t, op);
    check_buffer(c, send, count * es * size_t(c->nranks), "sendbuff", "occlReduceScatter");
    check_buffer(c, recv, count * es, "recvbuff", "occlReduceScatter");
    const char* in = c->kv(send);
    char* out = c->kv(recv);
    return enqueue(c, "occl:reduce_scatter", describe(count, t), stream, [=](const OpCtx& ctx) {
      if (use_zero_copy(c, count * es))
        reduce_scatter_zc(c, ctx, send, in, out, count, t, op);
      else
        reduce_scatter_shm(c, ctx, in, out, count, t, op);
    });
  });
}

namespace {
occlResult_t alltoallv_impl(const char* call, const char* name, uint32_t kind, int root,
                            const void* send, std::vector<size_t> sc, std::vector<size_t> sd,
                            void* recv, std::vector<size_t> rc, std::vector<size_t> rd,
                            occlDataType_t t, occlComm_t c, orStream_t stream) {
  const size_t es = type_size_checked(t, call);
  for (int p = 0; p < c->nranks; ++p) {
    const size_t P = size_t(p);
    if (sc[P]) check_buffer_at(c, send, checked_bytes(sd[P], es, 1, call),
                               checked_bytes(sc[P], es, 1, call), "sendbuff block", call);
    if (rc[P]) check_buffer_at(c, recv, checked_bytes(rd[P], es, 1, call),
                               checked_bytes(rc[P], es, 1, call), "recvbuff block", call);
  }
  const char* in = c->kv(send);
  char* out = c->kv(recv);
  return enqueue(c, name, describe(0, t), stream, [=](const OpCtx& ctx) {
    alltoallv_shm(c, ctx, in, sc, sd, out, rc, rd, t, kind, root);
  });
}
}  // namespace

occlResult_t occlAllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls,
                           void* recv, const size_t* recvcounts, const size_t* rdispls,
                           occlDataType_t t, occlComm_t c, orStream_t stream) {
  return guarded("occlAllToAllv", [&] {
    check_comm(c, "occlAllToAllv");
    if (!sendcounts || !sdispls || !recvcounts || !rdispls)
      throw Error(occlInvalidArgument, "occlAllToAllv: NULL counts or displacements");
    const size_t n = size_t(c->nranks);
    return alltoallv_impl("occlAllToAllv", "occl:alltoall", kAllToAll, -1, send,
                          {sendcounts, sendcounts + n}, {sdispls, sdispls + n}, recv,
                          {recvcounts, recvcounts + n}, {rdispls, rdispls + n}, t, c, stream);
  });
}

occlResult_t occlGather(const void* send, void* recv, size_t count, occlDataType_t t, int root,
                        occlComm_t c, orStream_t stream) {
  return guarded("occlGather", [&] {
    check_comm(c, "occlGather");
    check_root(c, root, "occlGather");
    const size_t n = size_t(c->nranks);
    // The root's side holds n * count elements: refused if that overflows
    // (the displacements p * count below would wrap).
    checked_bytes(count, type_size_checked(t, "occlGather"), n, "occlGather");
    std::vector<size_t> sc(n, 0), sd(n, 0), rc(n, 0), rd(n, 0);
    sc[size_t(root)] = count;
    for (size_t p = 0; p < n; ++p) {
      rc[p] = c->rank == root ? count : 0;
      rd[p] = c->rank == root ? p * count : 0;
    }
    return alltoallv_impl("occlGather", "occl:gather", kGather, root, send, sc, sd,
                          c->rank == root ? recv : const_cast<void*>(send), rc, rd, t, c, stream);
  });
}

occlResult_t occlScatter(const void* send, void* recv, size_t count, occlDataType_t t, int root,
                         occlComm_t c, orStream_t stream) {
  return guarded("occlScatter", [&] {
    check_comm(c, "occlScatter");
    check_root(c, root, "occlScatter");
    const size_t n = size_t(c->nranks);
    // The root's side holds n * count elements: refused if that overflows
    // (the displacements p * count below would wrap).
    checked_bytes(count, type_size_checked(t, "occlScatter"), n, "occlScatter");
    std::vector<size_t> sc(n, 0), sd(n, 0), rc(n, 0), rd(n, 0);
    rc[size_t(root)] = count;
    for (size_t p = 0; p < n; ++p) {
      sc[p] = c->rank == root ? count : 0;
      sd[p] = c->rank == root ? p * count : 0;
    }
    return alltoallv_impl("occlScatter", "occl:scatter", kScatter, root,
                          c->rank == root ? send : recv, sc, sd, recv, rc, rd, t, c, stream);
  });
}

occlResult_t occlBarrier(occlComm_t c, orStream_t stream) {
  return guarded("occlBarrier", [&] {
    check_comm(c, "occlBarrier");
    return enqueue(c, "occl:barrier", "", stream, [=](const OpCtx& ctx) {
      const uint64_t seq = ++c->coll_seq;
      c->post_and_wait(ctx, desc(kBarrier, occlUint8, seq, 0, -1, occlSum, 0));
    });
  });
}

occlResult_t occlSend(const void* send, size_t count, occlDataType_t t, int peer, int64_t tag,
                      occlComm_t c, orStream_t stream) {
  return guarded("occlSend", [&] {
    check_comm(c, "occlSend");
    const size_t es = type_size_checked(t, "occlSend");
    checked_bytes(count, es, 1, "occlSend");
    if (peer < 0 || peer >= c->nranks || peer == c->rank)
      throw Error(occlInvalidArgument, format("occlSend: invalid peer %d", peer));
    check_buffer(c, send, count * es, "sendbuff", "occlSend");
    P2P op{true, peer, tag, c->kv(send), count * es, nullptr};
    return add_p2p(c, stream, op, "occlSend");
  });
}

occlResult_t occlRecv(void* recv, size_t count, occlDataType_t t, int peer, int64_t tag,
                      int* source, occlComm_t c, orStream_t stream) {
  return guarded("occlRecv", [&] {
    check_comm(c, "occlRecv");
    const size_t es = type_size_checked(t, "occlRecv");
    checked_bytes(count, es, 1, "occlRecv");
    if (peer < -1 || peer >= c->nranks || peer == c->rank)
      throw Error(occlInvalidArgument, format("occlRecv: invalid peer %d", peer));
    check_buffer(c, recv, count * es, "recvbuff", "occlRecv");
    if (source && peer >= 0) *source = peer;
    P2P op{false, peer, tag, c->kv(recv), count * es, source};
    return add_p2p(c, stream, op, "occlRecv");
  });
}

occlResult_t occlGroupStart(void) {
  ++t_group.depth;
  return occlSuccess;
}

occlResult_t occlGroupEnd(void) {
  if (t_group.depth == 0) return set_last_error(occlInvalidUsage, "occlGroupEnd without occlGroupStart");
  if (--t_group.depth > 0) return occlSuccess;
  std::vector<P2P> ops;
  ops.swap(t_group.ops);
  occlComm* c = t_group.comm;
  orStream_t s = t_group.stream;
  t_group.comm = nullptr;
  t_group.stream = nullptr;
  if (ops.empty()) return occlSuccess;
  return guarded("occlGroupEnd", [&] { return launch_p2p(c, s, std::move(ops)); });
}
