// Private declarations of liboccl. No torch here either.
#pragma once

#include <occl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace occl {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Thrown inside liboccl, turned into an occlResult_t at the API boundary.
struct Error : std::runtime_error {
  occlResult_t result;
  Error(occlResult_t r, const std::string& msg) : std::runtime_error(msg), result(r) {}
};

occlResult_t set_last_error(occlResult_t r, const std::string& msg);

const char* type_name(occlDataType_t t);
const char* op_name(occlRedOpKind_t k);
// Checks that `op` is defined for `dtype` (throws occlInvalidArgument).
void check_reduction(occlDataType_t dtype, occlRedOp_t op);
// dst[i] = op(srcs[0][i], ..., srcs[n-1][i]) for i < count, then the
// post-processing of avg (divide by `nranks`). dst may alias srcs[0].
void reduce(void* dst, const void* const* srcs, int nsrcs, size_t count,
            occlDataType_t dtype, occlRedOp_t op, int nranks);

// ------------------------------------------------------------ shared memory
// Each rank owns one segment (a memfd), mapped by every rank of the
// communicator on the same host:
//   Ctrl | slot 0 | slot 1 | ring to rank 0 | ring to rank 1 | ...
// Slots carry the collectives' data, one round at a time (double-buffered);
// rings carry point-to-point messages from the owner to each peer.
constexpr uint64_t kMagic = 0x4f43434c53484d31ull;  // "OCCLSHM1"
// A slot has room for 16 MiB; a communicator uses 2 MiB of it per round
// over shared memory (a round's data stays in cache) and all of it when some
// pair talks over TCP (fewer, larger rounds: each round costs a network
// round trip). Untouched pages of the memfd cost nothing.
constexpr size_t kSlotBytes = size_t(16) << 20;      // capacity of a slot
constexpr size_t kShmSlotBytes = size_t(2) << 20;    // used per round over shared memory
constexpr size_t kRingBytes = size_t(1) << 20;       // bytes per p2p ring

struct alignas(64) Padded32 {
  std::atomic<uint32_t> v{0};
  char pad[60];
};

// What a rank says about the round it posts: compared across ranks, so that
// mismatched collectives fail instead of exchanging garbage.
struct OpDesc {
  uint32_t kind = 0;  // OpKind
  uint32_t dtype = 0;
  uint64_t seq = 0;   // collective sequence number on this communicator
  uint64_t count = 0;
  int32_t root = -1;
  uint32_t redop = 0;
  uint32_t round = 0;
  uint32_t pad = 0;
  bool operator==(const OpDesc& o) const {
    return kind == o.kind && dtype == o.dtype && seq == o.seq && count == o.count &&
           root == o.root && redop == o.redop && round == o.round;
  }
};

struct Ctrl {
  uint64_t magic;
  uint8_t nonce[16];
  int32_t rank;
  int32_t nranks;
  int32_t pid;
  int32_t zero_copy;  // 1: this rank can export and map device memory (IPC)
  Padded32 step;      // rounds posted (futex word)
  Padded32 waiters;   // ranks sleeping on `step`
  Padded32 doorbell;  // bumped when a peer changed a ring involving this rank
  Padded32 bell_waiters;
  Padded32 aborted;   // 1: this rank gave up; peers fail instead of waiting
  char abort_reason[512];
};

struct alignas(64) SlotHeader {
  OpDesc desc;
  uint64_t meta[6];  // per-op data (alltoall: this rank's max block size)
};
constexpr size_t kSlotStride = sizeof(SlotHeader) + kSlotBytes;

struct RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // bytes written by the owner
  alignas(64) std::atomic<uint64_t> tail;  // bytes consumed by the peer
};
constexpr size_t kRingStride = sizeof(RingHeader) + kRingBytes;

inline size_t ctrl_bytes() { return (sizeof(Ctrl) + 4095) / 4096 * 4096; }
inline size_t segment_bytes(int nranks) {
  return ctrl_bytes() + 2 * kSlotStride + size_t(nranks) * kRingStride;
}

// A frame received over TCP, waiting for the receive that consumes it.
struct TcpMessage {
  int64_t tag;
  std::unique_ptr<char[]> data;  // not zero-filled: it is overwritten at once
  size_t bytes;
};

// A frame waiting to leave: a small header block of its own, then parts
// that point into memory that stays valid until the frame is sent (this
// rank's slots, or a send's buffer: the operation waits for its frames).
struct OutFrame {
  std::vector<char> own;
  std::vector<std::pair<const char*, size_t>> parts;
  size_t total = 0, sent = 0;
};

struct Peer {
  char* base = nullptr;  // the peer's segment, mapped here (TCP: a private mirror)
  int pidfd = -1;        // tells when the peer process has exited
  int pid = 0;
  // TCP transport (a peer on another host, or OCCL_TRANSPORT=tcp): rounds
  // and messages travel as frames over one socket; `base` is then a private
  // mirror of the peer's segment, filled from its round frames, so the
  // algorithms read a TCP peer's slots exactly like a shared-memory peer's.
  bool tcp = false;
  int sock = -1;
  std::string addr;                    // where it listens ("host port")
  uint32_t tcp_step = 0;               // rounds received from it
  std::deque<OutFrame> outq;           // frames to send, front partly sent
  std::vector<char> in_hdr;            // the frame being received
  std::unique_ptr<char[]> in_body;
  size_t in_cap = 0;
  size_t in_got = 0;
  // Byte ranges of this rank's two slots written since the last round that
  // this peer reads (TCP only: a round frame carries exactly these).
  size_t dirty_lo[2] = {SIZE_MAX, SIZE_MAX}, dirty_hi[2] = {0, 0};
  void mark(int par, size_t off, size_t len) {
    if (!len) return;
    dirty_lo[par] = std::min(dirty_lo[par], off);
    dirty_hi[par] = std::max(dirty_hi[par], off + len);
  }
  std::deque<TcpMessage> inbox;        // point-to-point messages received
  // Data frames (the pipelined TCP all-reduce): each lands straight in the
  // buffer posted for it, in order. A frame that arrives before its buffer
  // is posted stays in the socket (flow control).
  struct DataPost {
    uint64_t id;
    char* dst;
    size_t len;
  };
  std::deque<DataPost> posts;
  uint64_t data_got = 0;               // data frames received
  bool closed = false;                 // it closed the connection (after its last frame)
  Ctrl* ctrl() const { return reinterpret_cast<Ctrl*>(base); }
  SlotHeader* slot_header(int parity) const {
    return reinterpret_cast<SlotHeader*>(base + ctrl_bytes() + size_t(parity) * kSlotStride);
  }
  char* slot(int parity) const {
    return reinterpret_cast<char*>(slot_header(parity)) + sizeof(SlotHeader);
  }
  RingHeader* ring(int to) const {
    return reinterpret_cast<RingHeader*>(base + ctrl_bytes() + 2 * kSlotStride +
                                         size_t(to) * kRingStride);
  }
  char* ring_data(int to) const {
    return reinterpret_cast<char*>(ring(to)) + sizeof(RingHeader);
  }
};

using Clock = std::chrono::steady_clock;

enum OpKind : uint32_t {
  kAllReduce = 1, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll,
  kGather, kScatter, kBarrier, kSplit, kP2P
};
const char* kind_name(uint32_t kind);  // "allreduce", ...

bool tcp_forced();  // OCCL_TRANSPORT=tcp
void check_env_options();  // throws Error naming a malformed OCCL_* variable

// Operation context: who is waiting for what, for error messages.
struct OpCtx {
  const char* name;
  uint64_t seq;
  Clock::time_point deadline;
};

}  // namespace occl

struct occlComm {
  int rank = 0;
  int nranks = 1;
  int device = 0;
  int64_t timeout_ms = 0;
  std::string name;
  std::string store_prefix;
  intptr_t kview_offset = 0;  // device address -> address kernels use
  size_t device_bytes = 0;    // the device's capacity (bounds a TCP message)

  // Shared memory: peers[rank] is this rank's own segment.
  std::vector<occl::Peer> peers;
  int memfd = -1;
  size_t seg_bytes = 0;

  // Zero copy: every rank's device memory is exportable (strict mode), so
  // large collectives read the peers' buffers in place through runtime IPC
  // handles instead of copying them through the slots. Opened handles are
  // cached per peer (keyed by the handle's bytes: same owner, memfd and
  // allocation range means the same pages) and closed when the
  // communicator is destroyed or aborted.
  bool zero_copy = false;
  bool any_tcp = false;   // some peer is reached over TCP
  size_t slot_bytes = occl::kShmSlotBytes;  // used per round (same on every rank)
  int listen_fd = -1;     // TCP: open during bootstrap only
  uint8_t job_token[16] = {};  // TCP peers must present it (and their rank)
  // This rank's slot `par` from `off`, marking [off, off+len) as written
  // for every TCP peer (or for rank `only`, the one peer that reads it).
  char* wslot(int par, size_t off, size_t len, int only = -1) {
    if (any_tcp) {
      for (int p = 0; p < nranks; ++p)
        if (peers[size_t(p)].tcp && (only < 0 || p == only)) peers[size_t(p)].mark(par, off, len);
    }
    return self().slot(par) + off;
  }
  // TCP (tcp.cpp): exchange this round with every TCP peer; move frames
  // (reading, writing) for up to timeout_ms; queue a point-to-point frame.
  void tcp_round(const occl::OpCtx& ctx, uint32_t target);
  void tcp_pump(const occl::OpCtx& ctx, int timeout_ms);
  void tcp_flush(const occl::OpCtx& ctx);
  void tcp_send_message(int p, int64_t tag, const char* data, size_t bytes);
  // Data frames: queue `bytes` from `data` (which must stay valid until
  // tcp_flush) for peer p, and post where peer p's next data frame goes.
  void tcp_send_data(int p, uint64_t id, const char* data, size_t bytes);
  void tcp_post_recv(int p, uint64_t id, char* dst, size_t bytes);
  bool all_tcp = false;   // every peer is reached over TCP
  std::vector<char> tcp_stage;  // staging of the pipelined TCP all-reduce
  // Throws if TCP peer p is gone (so nothing more will come from it).
  void tcp_check_open(const occl::OpCtx& ctx, int p);
  struct IpcEntry {
    void* dev = nullptr;  // as returned by orIpcOpenMemHandle
    char* kv = nullptr;   // its kernel view
    size_t size = 0;      // of the allocation
    uint64_t used = 0;    // LRU stamp
  };
  std::vector<std::map<std::string, IpcEntry>> ipc_cache;  // per peer
  uint64_t ipc_clock = 0;
  // The kernel-view address of `off` bytes into the allocation named by
  // `handle`, exported by rank `p` (opened on first use), where `bytes`
  // bytes must lie inside the allocation.
  char* peer_buffer(int p, const orIpcMemHandle_t& handle, uint64_t off, size_t bytes);
  void close_ipc();

  // Collective engine state, touched only by the (single, stream-ordered)
  // running operation.
  uint32_t step = 0;       // rounds this rank has posted
  uint64_t coll_seq = 0;   // collectives run (compared across ranks)
  std::vector<uint64_t> sent_bytes, recv_bytes;  // per peer, p2p stream positions

  // Host-side bookkeeping.
  std::atomic<uint64_t> enqueued{0};   // sequence numbers handed out
  std::atomic<uint64_t> completed{0};  // highest finished sequence number
  std::atomic<int> inflight{0};
  std::atomic<bool> aborting{false};
  // Nonzero once a graph captured an operation of this communicator: the id
  // the graph's nodes find it by (enqueue.cpp, forget_captures).
  std::atomic<uint64_t> capture_id{0};
  // The capture that last recorded an operation of this communicator (its
  // stream and the runtime's capture id): while it is active, an operation
  // outside it is refused (enqueue.cpp, check_capture_owner).
  std::mutex capture_mu;
  orStream_t capture_stream = nullptr;
  unsigned long long capture_seq_id = 0;
  std::mutex err_mu;
  occlResult_t error = occlSuccess;  // first asynchronous error (sticky)
  uint64_t error_seq = 0;
  std::string error_msg;

  // Two levels for a communicator that mixes shared memory and TCP (ranks on
  // several hosts): `local` holds this rank's node (the ranks it reaches
  // through shared memory), `leaders` the first rank of every node (null on
  // the others). Made at init by two splits; large all-reduces reduce onto
  // the node's leader, all-reduce among the leaders over TCP, and broadcast
  // back (allreduce_hier). Owned by this communicator.
  occlComm* local = nullptr;
  occlComm* leaders = nullptr;
  // Made by occlCommSplit: rank i here is rank parent_ranks[i] of the parent
  // (for messages from the two levels, which name their own ranks).
  std::vector<int> parent_ranks;

  ~occlComm();
  char* kv(const void* dev) const {
    return dev ? const_cast<char*>(static_cast<const char*>(dev)) + kview_offset : nullptr;
  }
  occl::Peer& self() { return peers[size_t(rank)]; }
  void fail(uint64_t seq, occlResult_t r, const std::string& msg);

  // One round of the collective engine: write into this rank's slot
  // (`parity()`), post(), then read the peers' slots of the same parity.
  int parity() const { return int(step & 1u); }
  void post_and_wait(const occl::OpCtx& ctx, const occl::OpDesc& desc);
  // post_and_wait in parts: post() returns the round posted; wait_round
  // waits for every peer's (`spun`: skip the spin, the attempt before it
  // waited already) and checks their descriptors; try_wait_round waits at
  // most 50 us and gives up (false) instead of waiting on, as the inline
  // attempt of a launch must; check_round is the check.
  uint32_t post(const occl::OpCtx& ctx, const occl::OpDesc& desc);
  void wait_round(const occl::OpCtx& ctx, uint32_t target, const occl::OpDesc& desc,
                  bool spun = false);
  bool try_wait_round(const occl::OpCtx& ctx, uint32_t target, const occl::OpDesc& desc);
  bool has_posted(int peer, uint32_t target) const;
  int late_peer(uint32_t target) const;  // first shm peer not at `target`, or -1
  void check_round(const occl::OpCtx& ctx, uint32_t target, const occl::OpDesc& desc);
  // Pauses a waiter spins for before it yields (about 50 us): a peer on
  // another core answers within that; a longer spin would steal the core
  // of a peer when there are more ranks than cores.
  static constexpr int kSpins = 2000;
  // Waits for `pred`, sleeping on `word` (owned by rank `owner`, whose
  // `waiters` counter is incremented while sleeping). `spun`: skip the spin.
  void wait_for(const occl::OpCtx& ctx, int owner, std::atomic<uint32_t>* word,
                std::atomic<uint32_t>* waiters, const std::function<bool()>& pred,
                const char* what, bool spun = false);
  void ring_bell(int peer);
  void check_peer(const occl::OpCtx& ctx, int p, const char* what);
  void unmap_all();
};

namespace occl {
// tcp.cpp: bootstrap of the TCP transport.
std::string tcp_listen(occlComm* c);  // "addr port"
void tcp_connect_all(occlComm* c, Clock::time_point deadline);
}  // namespace occl
