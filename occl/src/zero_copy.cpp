// Zero copy: large collectives when every rank's device memory can be mapped
// (strict mode). The ranks swap IPC handles of their buffers in one round,
// then read each other's device buffers in place; opened handles are cached
// per peer (occlComm::peer_buffer) and closed with the communicator.
#include "collectives.h"

#include <algorithm>
#include <cstring>

namespace occl {
namespace {

struct IpcBuf {
  orIpcMemHandle_t handle;
  uint64_t off;  // of the buffer inside the exported allocation
};
struct ZcPost {
  IpcBuf in, out;
};

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

}  // namespace

bool use_zero_copy(const occlComm* c, size_t bytes) {
  return c->zero_copy && c->nranks > 1 && bytes > kSmallAllReduce;
}

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

void broadcast_zc(occlComm* c, const OpCtx& ctx, const void* send_dev, const char* in,
                  char* out, size_t count, occlDataType_t t, int root) {
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

}  // namespace occl

using namespace occl;

// ------------------------------------------------------------ peers' buffers
char* occlComm::peer_buffer(int p, const orIpcMemHandle_t& handle, uint64_t off, size_t bytes) {
  auto& cache = ipc_cache[size_t(p)];
  const std::string key(handle.reserved, sizeof(handle.reserved));
  auto it = cache.find(key);
  if (it == cache.end()) {
    constexpr size_t kMaxOpen = 64;  // per peer; the least recently used is closed
    if (cache.size() >= kMaxOpen) {
      auto lru = cache.begin();
      for (auto i = cache.begin(); i != cache.end(); ++i)
        if (i->second.used < lru->second.used) lru = i;
      orIpcCloseMemHandle(lru->second.dev);
      cache.erase(lru);
    }
    IpcEntry e;
    if (orIpcOpenMemHandle(&e.dev, handle, orIpcMemLazyEnablePeerAccess) != orSuccess) {
      orGetLastError();
      throw Error(occlSystemError, format("cannot map rank %d's device buffer: %s", p,
                                          orGetLastErrorMessage()));
    }
    orPointerAttributes a;
    if (orPointerGetAttributes(&a, e.dev) != orSuccess || !a.hostPointer) {
      orGetLastError();
      orIpcCloseMemHandle(e.dev);
      throw Error(occlSystemError, format("rank %d's mapped buffer has no kernel view", p));
    }
    e.kv = static_cast<char*>(a.hostPointer);
    e.size = a.allocationSize;
    it = cache.emplace(key, e).first;
  }
  it->second.used = ++ipc_clock;
  // The offset and size come from the peer's slot: memory another process
  // can write. Checked (without wrapping) before this rank reads or writes
  // through them, so a corrupted slot fails the operation instead of
  // sending this rank outside the mapping.
  const size_t size = it->second.size;
  if (off > size || bytes > size - off)
    throw Error(occlRemoteError,
                format("rank %d published a buffer of %zu bytes at offset %llu of an allocation of "
                       "%zu bytes (a corrupted slot?)", p, bytes, (unsigned long long)off, size));
  return it->second.kv + off;
}

void occlComm::close_ipc() {
  for (auto& cache : ipc_cache) {
    for (auto& [key, e] : cache) orIpcCloseMemHandle(e.dev);
    cache.clear();
  }
}
