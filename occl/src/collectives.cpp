// The collectives' public API (occl.h): each call checks its arguments on
// the host, then enqueues a body that picks the algorithm when it runs: two
// levels (hierarchy.cpp), zero copy (zero_copy.cpp), the TCP pipeline
// (tcp_pipeline.cpp) or the copy-in rounds (shm_algorithms.cpp); sends and
// receives go to p2p.cpp. The enqueue path and the checks: enqueue.cpp.
#include "collectives.h"

using namespace occl;

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
        broadcast_zc(c, ctx, send, in, out, count, t, root);
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

occlResult_t occlGroupStart(void) { return group_start(); }

occlResult_t occlGroupEnd(void) { return group_end(); }
