// The copy-in algorithms: every rank copies its data into its own slots,
// posts a round, and reads its peers' slots (a TCP peer's are a mirror, kept
// by tcp.cpp). All-reduce (and reduce) pipelined in chunks, broadcast,
// all-gather, reduce-scatter, and the pairwise all-to-all that gather and
// scatter are special cases of.
#include "collectives.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace occl {

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

}  // namespace occl
