// Private declarations of liboccl. No torch here either.
#pragma once

#include <occl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
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
constexpr size_t kSlotBytes = size_t(4) << 20;       // data bytes per slot
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
  int32_t pad0;
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

struct Peer {
  char* base = nullptr;  // the peer's segment, mapped here
  int pidfd = -1;        // tells when the peer process has exited
  int pid = 0;
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

  // Shared memory: peers[rank] is this rank's own segment.
  std::vector<occl::Peer> peers;
  int memfd = -1;
  size_t seg_bytes = 0;

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
  std::mutex err_mu;
  occlResult_t error = occlSuccess;  // first asynchronous error (sticky)
  uint64_t error_seq = 0;
  std::string error_msg;

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
  // Waits for `pred`, sleeping on `word` (owned by rank `owner`, whose
  // `waiters` counter is incremented while sleeping).
  void wait_for(const occl::OpCtx& ctx, int owner, std::atomic<uint32_t>* word,
                std::atomic<uint32_t>* waiters, const std::function<bool()>& pred,
                const char* what);
  void ring_bell(int peer);
  void check_peer(const occl::OpCtx& ctx, int p, const char* what);
  void unmap_all();
};
