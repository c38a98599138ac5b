// Point to point: sends and receives (alone or in a group) over per-pair
// rings in the sender's segment, or as whole-message frames over TCP.
#include "collectives.h"

#include <algorithm>
#include <cstring>

namespace occl {
namespace {

// A message on the ring from `from` to `to` (in `from`'s segment): a 16-byte
// header {tag, bytes}, then the payload padded to 16 bytes, so a header
// never wraps around the ring's end.
struct MsgHeader {
  int64_t tag;
  uint64_t bytes;
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
uint64_t ring_used(const OpCtx& ctx, const RingHeader* r, int from, int to) {
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
  const uint64_t free_bytes = kRingBytes - ring_used(ctx, r, c->rank, s.peer);
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
  const uint64_t head = tail + ring_used(ctx, r, s.peer, c->rank);
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

}  // namespace

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

occlResult_t group_start() {
  ++t_group.depth;
  return occlSuccess;
}

occlResult_t group_end() {
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

}  // namespace occl
