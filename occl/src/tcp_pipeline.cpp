// The pipelined all-reduce of a communicator whose peers are all reached
// over TCP (tcp.cpp carries its data frames): data moves straight between
// the users' buffers, with a few staging buffers for what arrives.
#include "collectives.h"

#include <algorithm>

namespace occl {
namespace {

// Bytes of each rank's share of a chunk (OCCL_TCP_CHUNK overrides), and how
// many chunks of every peer may be staged at once.
size_t tcp_share_bytes() {
  static const size_t v = env_bytes("OCCL_TCP_CHUNK", size_t(512) << 10);
  return v;
}
constexpr size_t kTcpStages = 8;

}  // namespace

bool use_tcp_pipeline(const occlComm* c, size_t bytes) {
  return c->all_tcp && c->nranks > 1 && bytes > kSmallAllReduce;
}

namespace {

// [docs:occl-allreduce-tcp]
// The state of one pipelined all-reduce: its chunks, its staging, and the
// schedule of each peer's frames. Each peer's frames, and the buffers posted
// for them, follow one schedule: reduce-scatter chunks 0 .. stages-1, then,
// as chunk k is reduced, all-gather chunk k and reduce-scatter chunk
// k + stages (whose staging buffer chunk k has just freed). So a reduced
// share leaves right after its reduction, while it is still in cache, and
// the input is read no further ahead than the staging allows. Frame ids:
// chunk k of the reduce-scatter is k, of the all-gather nchunks + k. Empty
// shares (a chunk with fewer elements than ranks) are neither sent nor posted.
struct TcpPipeline {
  occlComm* c;
  const char* in;
  char* out;
  size_t count;
  occlDataType_t t;
  occlRedOp_t op;
  size_t es = occlTypeSize(t);
  int n = c->nranks, me = c->rank;
  size_t chunk = std::max<size_t>(size_t(n), tcp_share_bytes() / es * size_t(n));
  size_t nchunks = ceil_div(count, chunk);
  size_t stages = std::min(kTcpStages, nchunks);
  // (the largest share there is: a chunk of OCCL_TCP_CHUNK bytes per rank,
  // or the whole message if it is smaller, so that a large setting costs
  // nothing for small all-reduces)
  size_t share_max = ceil_div(std::min(chunk, count), size_t(n)) * es;
  std::vector<uint64_t> base = std::vector<uint64_t>(size_t(n));   // data frames before this op
  std::vector<uint64_t> posts = std::vector<uint64_t>(size_t(n));  // buffers posted per peer
  std::vector<uint64_t> need = std::vector<uint64_t>(size_t(n) * nchunks);  // posts through RS chunk k
  size_t reduced = 0;  // chunks reduced (and their shares sent)
  std::vector<const void*> srcs = std::vector<const void*>(size_t(n));  // of one reduction

  void start() {
    if (c->tcp_stage.size() < size_t(n) * stages * share_max)
      c->tcp_stage.resize(size_t(n) * stages * share_max);
    for (int p = 0; p < n; ++p) base[size_t(p)] = c->peers[size_t(p)].data_got;
    for (size_t k = 0; k < stages; ++k) rs(k);
  }
  char* stage(int p, size_t k) {
    return c->tcp_stage.data() + (size_t(p) * stages + k % stages) * share_max;
  }
  // Byte range of rank p's share of chunk k.
  void share(size_t k, int p, size_t* at, size_t* bytes) const {
    size_t o, l;
    part(std::min(chunk, count - k * chunk), n, p, &o, &l);
    *at = (k * chunk + o) * es;
    *bytes = l * es;
  }
  void rs(size_t k) {  // send every peer its share of chunk k, post ours
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
  }
  void ag_post(size_t k) {  // every peer's reduced share, straight into out
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      size_t at, bytes;
      share(k, p, &at, &bytes);
      if (bytes) {
        c->tcp_post_recv(p, nchunks + k, out + at, bytes);
        ++posts[size_t(p)];
      }
    }
  }
  bool arrived(size_t k) const {  // every peer's share of chunk k
    for (int p = 0; p < n; ++p)
      if (p != me && c->peers[size_t(p)].data_got - base[size_t(p)] < need[size_t(p) * nchunks + k])
        return false;
    return true;
  }
  // Reduces (and sends on) every chunk whose shares have all arrived; true
  // if there was one.
  bool reduce_arrived() {
    bool moved = false;
    while (reduced < nchunks && arrived(reduced)) {
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
    return moved;
  }
  bool done() const {
    if (reduced != nchunks) return false;
    for (int p = 0; p < n; ++p)
      if (p != me && !c->peers[size_t(p)].posts.empty()) return false;
    return true;
  }
  // Nothing moved: checks the peers still awaited, then moves frames.
  void wait(const OpCtx& ctx) {
    int behind = -1;
    for (int p = 0; p < n; ++p)
      if (p != me && !c->peers[size_t(p)].posts.empty()) {
        behind = p;
        c->tcp_check_open(ctx, p);
      }
    c->check_peer(ctx, behind >= 0 ? behind : me, "the same all-reduce (over TCP)");
    c->tcp_pump(ctx, 20);
  }
};

}  // namespace

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
  // One round first: all ranks run this same all-reduce before any data
  // frame is sent (a mismatch fails here, as in every other collective).
  c->post_and_wait(ctx, desc(kAllReduce, t, ++c->coll_seq, count, -1, op.kind, 0));
  TcpPipeline pipe{c, in, out, count, t, op};
  pipe.start();
  for (;;) {
    const bool moved = pipe.reduce_arrived();
    if (pipe.done()) break;
    if (!moved) pipe.wait(ctx);
  }
  c->tcp_flush(ctx);  // the input and output stay in use until our frames have left
}
// [docs:occl-allreduce-tcp:end]

}  // namespace occl
