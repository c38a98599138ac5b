// Private to liboccl's collectives: what the enqueue path (enqueue.cpp), the
// algorithm families (shm_algorithms.cpp, zero_copy.cpp, tcp_pipeline.cpp,
// hierarchy.cpp, p2p.cpp) and the public API (collectives.cpp) share.
//
// An API call checks its arguments on the host and enqueues an Op on the
// caller's stream; when the Op runs (in stream order, on a runtime worker),
// the call's body picks an algorithm by the communicator's transports and the
// message size. Every algorithm moves data through rounds (rounds.cpp).
#pragma once

#include "internal.h"

#include <functional>
#include <string>
#include <vector>

namespace occl {

// ------------------------------------------------------------ options
// A 0/1 switch from environment variable `name`: unset or empty is `dflt`;
// anything else is an error that names the variable (checked when a
// communicator is created, see check_env_options).
bool env_flag(const char* name, bool dflt);
// A byte count from environment variable `name` (unset or empty: `dflt`),
// from 1 to 1 GiB; anything else is an error that names the variable.
size_t env_bytes(const char* name, size_t dflt);
bool debug_enabled();  // OCCL_DEBUG=1
bool tracing();        // someone is tracing: collectives annotate their launches

// ------------------------------------------------------------ splitting work
// [a, a+len) of part i when n elements are split into `parts` nearly equal parts.
inline void part(size_t n, int parts, int i, size_t* off, size_t* len) {
  const size_t q = n / size_t(parts), r = n % size_t(parts);
  *off = size_t(i) * q + std::min(size_t(i), r);
  *len = q + (size_t(i) < r ? 1 : 0);
}

inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// The descriptor of one round of a collective, compared across ranks.
inline OpDesc desc(uint32_t kind, occlDataType_t t, uint64_t seq, uint64_t count, int root,
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

// Messages up to this size are reduced in one round (every rank reduces the
// whole message: latency-optimal); larger ones are pipelined in chunks.
constexpr size_t kSmallAllReduce = size_t(256) << 10;

// ------------------------------------------------------------ enqueue path (enqueue.cpp)
// [docs:occl-attempt]
// An operation that may be tried on the launching thread first
// (orLaunchMayDefer): `attempt` runs it if that needs no blocking and
// returns true, or does the part that never blocks (posting this rank's
// round) and returns false; `rest` then finishes it on a runtime worker.
struct Attempt {
  std::function<bool(const OpCtx&)> attempt;
  std::function<void(const OpCtx&)> rest;
};
// [docs:occl-attempt:end]

// Enqueues `body` on `stream` as named device work (`name`, "occl:..."),
// with the next sequence number of the communicator.
occlResult_t enqueue(occlComm* c, const char* name, std::string describe, orStream_t stream,
                     std::function<void(const OpCtx&)> body, Attempt try_first = {});

// Unregisters `c` from the graphs that captured its operations (their
// replays then fail, naming it): before the communicator is deleted.
void forget_captures(occlComm* c);

// Host-side argument checks; each throws Error(occlInvalidArgument) naming
// `call` and what was wrong.
void check_stream(occlComm* c, orStream_t stream, const char* call);
void check_buffer_at(occlComm* c, const void* p, size_t off, size_t bytes, const char* what,
                     const char* call);
void check_buffer(occlComm* c, const void* p, size_t bytes, const char* what, const char* call);
size_t checked_bytes(size_t count, size_t es, size_t copies, const char* call);
void check_comm(occlComm* c, const char* call);
void check_root(occlComm* c, int root, const char* call);
size_t type_size_checked(occlDataType_t t, const char* call);

// A collective's message, as "key=value" lines, for OCCL_DEBUG and profilers.
std::string describe(size_t count, occlDataType_t t, const char* extra = "");

// Runs an API call: an Error becomes its result and the thread's last error.
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

// ------------------------------------------------------------ shared memory (shm_algorithms.cpp)
// The copy-in algorithms: every rank copies through its slots, which its
// peers read (a TCP peer reads a mirror of them, see tcp.cpp).
Attempt small_allreduce_attempt(occlComm* c, const char* in, char* out, size_t count,
                                occlDataType_t t, occlRedOp_t op, int root, uint32_t kind);
void allreduce_shm(occlComm* c, const OpCtx& ctx, const char* in, char* out, size_t count,
                   occlDataType_t t, occlRedOp_t op, int root /* -1: all */, uint32_t kind);
void broadcast_shm(occlComm* c, const OpCtx& ctx, const char* in, char* out, size_t count,
                   occlDataType_t t, int root);
void allgather_shm(occlComm* c, const OpCtx& ctx, const char* in, char* out, size_t count,
                   occlDataType_t t);
void reduce_scatter_shm(occlComm* c, const OpCtx& ctx, const char* in, char* out, size_t count,
                        occlDataType_t t, occlRedOp_t op);
void alltoallv_shm(occlComm* c, const OpCtx& ctx, const char* in, const std::vector<size_t>& scount,
                   const std::vector<size_t>& sdispl, char* out, const std::vector<size_t>& rcount,
                   const std::vector<size_t>& rdispl, occlDataType_t t, uint32_t kind, int root);

// ------------------------------------------------------------ zero copy (zero_copy.cpp)
// Large collectives read the peers' device buffers in place (strict mode).
bool use_zero_copy(const occlComm* c, size_t bytes);
void allreduce_zc(occlComm* c, const OpCtx& ctx, const void* send_dev, void* recv_dev,
                  const char* in, char* out, size_t count, occlDataType_t t, occlRedOp_t op);
void broadcast_zc(occlComm* c, const OpCtx& ctx, const void* send_dev, const char* in,
                  char* out, size_t count, occlDataType_t t, int root);
void allgather_zc(occlComm* c, const OpCtx& ctx, const void* send_dev, const char* in, char* out,
                  size_t count, occlDataType_t t);
void reduce_scatter_zc(occlComm* c, const OpCtx& ctx, const void* send_dev, const char* in,
                       char* out, size_t count, occlDataType_t t, occlRedOp_t op);

// ------------------------------------------------------------ TCP pipeline (tcp_pipeline.cpp)
// Large all-reduces when every peer is reached over TCP.
bool use_tcp_pipeline(const occlComm* c, size_t bytes);
void allreduce_tcp(occlComm* c, const OpCtx& ctx, const char* in, char* out, size_t count,
                   occlDataType_t t, occlRedOp_t op);

// ------------------------------------------------------------ two levels (hierarchy.cpp)
// Large all-reduces of a communicator that mixes shared memory and TCP.
bool use_hierarchy(const occlComm* c, size_t bytes, occlDataType_t t);
void allreduce_hier(occlComm* c, const OpCtx& ctx, const char* in, char* out, size_t count,
                    occlDataType_t t, occlRedOp_t op);

// ------------------------------------------------------------ point to point (p2p.cpp)
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
// Launches `op` now, or adds it to this thread's open group.
occlResult_t add_p2p(occlComm* c, orStream_t stream, P2P op, const char* call);
occlResult_t group_start();
occlResult_t group_end();  // launches the group's operations as one

}  // namespace occl
