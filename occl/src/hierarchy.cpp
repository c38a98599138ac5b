// Two levels: the all-reduce of a communicator that mixes shared memory and
// TCP (ranks on several hosts), through the node and leaders' communicators
// that occlCommInitRank builds for it (comm.cpp, build_hierarchy).
#include "collectives.h"

namespace occl {

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

}  // namespace occl
