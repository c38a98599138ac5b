// Rounds: a rank posts a round and waits for its peers to post it too,
// without busy-waiting (futexes on the shared segments, doorbells for the
// rings); it notices a peer that died or aborted, times out, and fails the
// communicator so that its peers stop waiting for it.
#include "internal.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <thread>

namespace occl {
namespace {

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  // Not FUTEX_PRIVATE_FLAG: the word lives in memory shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

void wake(std::atomic<uint32_t>* word, std::atomic<uint32_t>* waiters) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (waiters->load(std::memory_order_relaxed) != 0) futex(word, FUTEX_WAKE, INT_MAX, nullptr);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

bool pid_exited(int pidfd) {
  if (pidfd < 0) return false;
  pollfd p{pidfd, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}
}  // namespace
}  // namespace occl

using namespace occl;

void occlComm::check_peer(const OpCtx& ctx, int p, const char* what) {
  Peer& peer = peers[size_t(p)];
  if (peer.ctrl()->aborted.v.load(std::memory_order_acquire)) {
    throw Error(occlRemoteError,
                format("%s (seq %llu): rank %d aborted while this rank (%d) was waiting for %s: %.*s",
                       ctx.name, (unsigned long long)ctx.seq, p, rank, what,
                       // bounded: the peer's block may not hold a terminated string
                       int(strnlen(peer.ctrl()->abort_reason, sizeof(Ctrl::abort_reason) - 1)),
                       peer.ctrl()->abort_reason));
  }
  if (pid_exited(peer.pidfd)) {
    throw Error(occlRemoteError,
                format("%s (seq %llu): rank %d (pid %d) died while this rank (%d) was waiting for %s",
                       ctx.name, (unsigned long long)ctx.seq, p, peer.pid, rank, what));
  }
  if (aborting.load(std::memory_order_relaxed)) {
    throw Error(occlRemoteError, format("%s (seq %llu): the communicator was aborted", ctx.name,
                                        (unsigned long long)ctx.seq));
  }
  if (Clock::now() >= ctx.deadline) {
    throw Error(occlTimeout,
                format("%s (seq %llu) timed out after %lld ms: rank %d is waiting for rank %d (%s)",
                       ctx.name, (unsigned long long)ctx.seq, (long long)timeout_ms, rank, p, what));
  }
}

// [docs:occl-wait]
// Spin briefly (a peer on another core answers within microseconds), then
// yield, then sleep on a futex. With more ranks than cores a spinning rank
// would steal the very core its peer needs, so the spin is short.
void occlComm::wait_for(const OpCtx& ctx, int owner, std::atomic<uint32_t>* word,
                        std::atomic<uint32_t>* waiters, const std::function<bool()>& pred,
                        const char* what, bool spun) {
  for (int i = 0; i < (spun ? 0 : kSpins); ++i) {
    if (pred()) return;
    cpu_relax();
  }
  for (int i = 0; i < 20; ++i) {
    if (pred()) return;
    sched_yield();
  }
  for (;;) {
    waiters->fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = word->load(std::memory_order_seq_cst);
    if (pred()) {
      waiters->fetch_sub(1, std::memory_order_relaxed);
      return;
    }
    timespec ts{0, 20 * 1000 * 1000};  // re-check liveness and the deadline
    futex(word, FUTEX_WAIT, seen, &ts);
    waiters->fetch_sub(1, std::memory_order_relaxed);
    if (pred()) return;
    check_peer(ctx, owner, what);
  }
}
// [docs:occl-wait:end]

void occlComm::ring_bell(int p) {
  Ctrl* c = peers[size_t(p)].ctrl();
  c->doorbell.v.fetch_add(1, std::memory_order_seq_cst);
  wake(&c->doorbell.v, &c->bell_waiters.v);
}

// [docs:occl-round]
// One round: this rank has written its slot (and its descriptor); it posts
// the round and waits until every peer has posted it too, then checks that
// everybody is running the same operation. Slots are double-buffered by the
// round's parity: a rank writes the slot of round i+2 only after seeing all
// peers post round i+1, which they do only after reading round i.
void occlComm::post_and_wait(const OpCtx& ctx, const OpDesc& desc) {
  const uint32_t target = post(ctx, desc);
  wait_round(ctx, target, desc);
}

uint32_t occlComm::post(const OpCtx& ctx, const OpDesc& desc) {
  Ctrl* me = self().ctrl();
  *self().slot_header(parity()) = SlotHeader{desc, {}};
  const uint32_t target = ++step;
  me->step.v.store(target, std::memory_order_release);
  wake(&me->step.v, &me->waiters.v);
  if (any_tcp) tcp_round(ctx, target);
  return target;
}

void occlComm::wait_round(const OpCtx& ctx, uint32_t target, const OpDesc& desc, bool spun) {
  for (int p = 0; p < nranks; ++p) {
    if (p == rank || peers[size_t(p)].tcp) continue;
    Ctrl* c = peers[size_t(p)].ctrl();
    wait_for(ctx, p, &c->step.v, &c->waiters.v, [&] { return has_posted(p, target); },
             "the same collective", spun);
  }
  check_round(ctx, target, desc);
}

void occlComm::check_round(const OpCtx& ctx, uint32_t target, const OpDesc& desc) {
  const int par = int((target - 1) & 1u);
  for (int p = 0; p < nranks; ++p) {
    const OpDesc& d = peers[size_t(p)].slot_header(par)->desc;
    if (!(d == desc)) {
      throw Error(occlInvalidUsage,
                  format("mismatched collectives: rank %d called %s (seq %llu, count %llu, %s, "
                         "root %d, op %s) but rank %d called %s (seq %llu, count %llu, %s, root %d, "
                         "op %s)",
                         rank, ctx.name, (unsigned long long)desc.seq,
                         (unsigned long long)desc.count, type_name(occlDataType_t(desc.dtype)),
                         desc.root, op_name(occlRedOpKind_t(desc.redop)), p,
                         kind_name(d.kind), (unsigned long long)d.seq,
                         (unsigned long long)d.count, type_name(occlDataType_t(d.dtype)), d.root,
                         op_name(occlRedOpKind_t(d.redop))));
    }
  }
}
// [docs:occl-round:end]

// [docs:occl-try-round]
// Whether peer `p` has posted round `target` (no waiting).
bool occlComm::has_posted(int p, uint32_t target) const {
  return int32_t(peers[size_t(p)].ctrl()->step.v.load(std::memory_order_acquire) - target) >= 0;
}

// The first shared-memory peer that has not posted round `target`, or -1.
int occlComm::late_peer(uint32_t target) const {
  for (int p = 0; p < nranks; ++p) {
    if (p == rank || peers[size_t(p)].tcp) continue;
    if (!has_posted(p, target)) return p;
  }
  return -1;
}

// The inline attempt of a launch (orLaunchMayDefer): wait for the peers'
// round for at most 50 us, about as long as wait_for spins (a peer on another
// core, in lock step, arrives within that); false means "not yet", and the
// caller hands the rest of the operation to a runtime worker, whose
// wait_round starts at the yields. Only a microsecond of it is spinning:
// then it yields between polls, so that a peer sharing this core (more ranks
// than free cores) runs meanwhile and the two take turns on it, and after
// 15 us it sleeps on the late peer's futex, so that on a busy machine the
// core goes to whoever needs it and the peer's post wakes this rank at once.
bool occlComm::try_wait_round(const OpCtx& ctx, uint32_t target, const OpDesc& desc) {
  for (int i = 0; i < kSpins / 40; ++i) {
    if (late_peer(target) < 0) {
      check_round(ctx, target, desc);
      return true;
    }
    cpu_relax();
  }
  const auto start = Clock::now();
  const auto yield_until = start + std::chrono::microseconds(15);
  const auto until = start + std::chrono::microseconds(50);
  do {
    if (late_peer(target) < 0) {
      check_round(ctx, target, desc);
      return true;
    }
    sched_yield();
  } while (Clock::now() < yield_until);
  for (;;) {
    const int late = late_peer(target);
    if (late < 0) {
      check_round(ctx, target, desc);
      return true;
    }
    const auto now = Clock::now();
    if (now >= until) return false;
    Ctrl* c = peers[size_t(late)].ctrl();
    c->waiters.v.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = c->step.v.load(std::memory_order_seq_cst);
    if (int32_t(seen - target) < 0) {
      timespec ts{0, long(std::chrono::duration_cast<std::chrono::nanoseconds>(until - now).count())};
      futex(&c->step.v, FUTEX_WAIT, seen, &ts);
    }
    c->waiters.v.fetch_sub(1, std::memory_order_relaxed);
  }
}
// [docs:occl-try-round:end]

void occlComm::fail(uint64_t seq, occlResult_t r, const std::string& msg) {
  {
    std::lock_guard<std::mutex> g(err_mu);
    if (error == occlSuccess) {
      error = r;
      error_seq = seq;
      error_msg = msg;
    }
  }
  // Tell the peers, so they fail now instead of at their timeout (TCP
  // peers see their connection close).
  for (Peer& p : peers)
    if (p.tcp && p.sock >= 0) shutdown(p.sock, SHUT_RDWR);
  Ctrl* me = peers.empty() || !self().base ? nullptr : self().ctrl();
  if (me && !me->aborted.v.load()) {
    snprintf(me->abort_reason, sizeof(me->abort_reason), "%s", msg.c_str());
    me->aborted.v.store(1, std::memory_order_seq_cst);
    for (int p = 0; p < nranks; ++p) {
      if (p == rank || !peers[size_t(p)].base || peers[size_t(p)].tcp) continue;
      Ctrl* c = peers[size_t(p)].ctrl();
      wake(&me->step.v, &me->waiters.v);
      c->doorbell.v.fetch_add(1);
      futex(&c->doorbell.v, FUTEX_WAKE, INT_MAX, nullptr);
      futex(&me->doorbell.v, FUTEX_WAKE, INT_MAX, nullptr);
    }
  }
  // The node's and the leaders' communicators carry this one's operations:
  // their peers must not wait for a rank that has given up.
  if (local) local->fail(seq, r, msg);
  if (leaders) leaders->fail(seq, r, msg);
}
