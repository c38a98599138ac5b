// ProcessGroupOCCL's collectives: c10d's entry points (all-reduce, broadcast,
// all-gather, reduce-scatter, all-to-all, gather, scatter, send/recv,
// barrier), each checking its tensors, then handing run() the liboccl call.
// Vendor: map each entry point to your library's call, as here.
#include "Conversions.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "runtime/OpenRegFunctions.h"

namespace torch_openreg {
namespace {

// The start of the entry points that take one tensor in place (all-reduce,
// broadcast, reduce, recv): the tensor, checked; a dense buffer liboccl runs
// on (the tensor itself when it is dense); and, if the buffer is a copy, the
// copy back into the tensor when the operation completes (`copy_back`
// false: nothing to copy, as on a reduce's non-root ranks).
struct InPlace {
  at::Tensor t, buf;
  occlDataType_t dt;
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
};

InPlace in_place(std::vector<at::Tensor>& tensors, const char* what, bool copy_back = true) {
  TORCH_CHECK(tensors.size() == 1, "OCCL: one tensor per process");
  InPlace p;
  p.t = tensors[0];
  check_tensor(p.t, what);
  p.dt = occl_type(p.t.scalar_type());
  p.buf = dense(p.t);
  if (copy_back && !p.buf.is_same(p.t)) p.back.emplace_back(p.t, p.buf);
  return p;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  auto [t, buf, dt, back] = in_place(tensors, "allreduce tensor");
  const auto op = occl_op(opts.reduceOp, t.scalar_type());
  return run(c10d::OpType::ALLREDUCE, "allreduce", t.device(), {t}, {buf},
             [&](occlComm_t c, orStream_t s) {
               return occlAllReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt, op, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return coalesce("allreduce_coalesced", tensors.size(), tensors, [&](size_t i) {
    std::vector<at::Tensor> one{tensors[i]};
    return allreduce(one, opts);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::coalesce(
    const char* name, size_t n, std::vector<at::Tensor> outputs,
    const std::function<c10::intrusive_ptr<c10d::Work>(size_t)>& one) {
  TORCH_CHECK(n > 0, "OCCL: ", name, " needs tensors");
  const uint64_t first_seq = seq_ + 1;
  c10::intrusive_ptr<WorkOCCL> last;
  for (size_t i = 0; i < n; ++i) last = c10::static_intrusive_pointer_cast<WorkOCCL>(one(i));
  // One Work for the whole set: it completes with the last operation.
  last->outputs_ = std::move(outputs);
  last->seq_ = first_seq;
  seq_ = first_seq;
  return last;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  auto [t, buf, dt, back] = in_place(tensors, "broadcast tensor");
  const int root = int(opts.rootRank);
  return run(c10d::OpType::BROADCAST, "broadcast", t.device(), {t}, {buf},
             [&](occlComm_t c, orStream_t s) {
               return occlBroadcast(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt, root, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const int root = int(opts.rootRank);
  // Only the root's tensor receives the result.
  auto [t, buf, dt, back] = in_place(tensors, "reduce tensor", getRank() == root);
  const auto op = occl_op(opts.reduceOp, t.scalar_type());
  return run(c10d::OpType::REDUCE, "reduce", t.device(), {t}, {buf},
             [&](occlComm_t c, orStream_t s) {
               return occlReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt, op, root, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::_allgather_base(at::Tensor& output,
                                                                 at::Tensor& input,
                                                                 const c10d::AllgatherOptions&) {
  check_tensor(input, "allgather input");
  check_tensor(output, "allgather output");
  TORCH_CHECK(input.dtype() == output.dtype(), "OCCL: allgather input and output dtypes differ");
  TORCH_CHECK(output.numel() == input.numel() * getSize(),
              "OCCL: allgather output must have world_size * input.numel() elements");
  at::Tensor in = dense(input), out = dense(output);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  if (!out.is_same(output)) back.emplace_back(output, out);
  const auto dt = occl_type(in.scalar_type());
  return run(c10d::OpType::_ALLGATHER_BASE, "allgather_into_tensor", in.device(), {output}, {in, out},
             [&](occlComm_t c, orStream_t s) {
               return occlAllGather(in.data_ptr(), out.data_ptr(), in.numel(), dt, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, "OCCL: one tensor per process");
  at::Tensor in = inputs[0];
  check_tensor(in, "allgather input");
  auto& outs = outputs[0];
  TORCH_CHECK(int(outs.size()) == getSize(), "OCCL: allgather needs world_size outputs");
  for (auto& o : outs) {
    check_tensor(o, "allgather output");
    TORCH_CHECK(o.numel() == in.numel() && o.dtype() == in.dtype(),
                "OCCL: allgather outputs must match the input's size and dtype");
  }
  at::Tensor inc = dense(in);
  at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  for (int p = 0; p < getSize(); ++p)
    back.emplace_back(outs[size_t(p)], flat.narrow(0, p * in.numel(), in.numel()));
  const auto dt = occl_type(in.scalar_type());
  return run(c10d::OpType::ALLGATHER, "allgather", in.device(), outs, {inc, flat},
             [&](occlComm_t c, orStream_t s) {
               return occlAllGather(inc.data_ptr(), flat.data_ptr(), inc.numel(), dt, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "OCCL: as many outputs as inputs");
  return coalesce("allgather_into_tensor_coalesced", inputs.size(), outputs,
                  [&](size_t i) { return _allgather_base(outputs[i], inputs[i], opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "reduce_scatter input");
  check_tensor(output, "reduce_scatter output");
  TORCH_CHECK(input.dtype() == output.dtype(), "OCCL: reduce_scatter input and output dtypes differ");
  TORCH_CHECK(input.numel() == output.numel() * getSize(),
              "OCCL: reduce_scatter input must have world_size * output.numel() elements");
  at::Tensor in = dense(input), out = dense(output);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  if (!out.is_same(output)) back.emplace_back(output, out);
  const auto dt = occl_type(in.scalar_type());
  const auto op = occl_op(opts.reduceOp, in.scalar_type());
  return run(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", in.device(), {output},
             {in, out}, [&](occlComm_t c, orStream_t s) {
               return occlReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), dt, op, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, "OCCL: one tensor per process");
  at::Tensor out = outputs[0];
  check_tensor(out, "reduce_scatter output");
  auto& ins = inputs[0];
  TORCH_CHECK(int(ins.size()) == getSize(), "OCCL: reduce_scatter needs world_size inputs");
  std::vector<at::Tensor> flat_parts;
  for (auto& t : ins) {
    check_tensor(t, "reduce_scatter input");
    TORCH_CHECK(t.numel() == out.numel() && t.dtype() == out.dtype(),
                "OCCL: reduce_scatter inputs must match the output's size and dtype");
    flat_parts.push_back(t.reshape({-1}));
  }
  at::Tensor flat = at::cat(flat_parts);
  return _reduce_scatter_base(out, flat, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "OCCL: as many outputs as inputs");
  return coalesce("reduce_scatter_tensor_coalesced", inputs.size(), outputs,
                  [&](size_t i) { return _reduce_scatter_base(outputs[i], inputs[i], opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions&) {
  check_tensor(input, "alltoall input");
  check_tensor(output, "alltoall output");
  TORCH_CHECK(input.dtype() == output.dtype(), "OCCL: alltoall input and output dtypes differ");
  const int n = getSize();
  auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& split,
                    std::vector<size_t>& cnt, std::vector<size_t>& disp) {
    const int64_t rows = t.dim() ? t.size(0) : 1;
    const int64_t row = rows ? t.numel() / rows : 0;
    cnt.assign(size_t(n), 0);
    disp.assign(size_t(n), 0);
    if (split.empty()) {
      TORCH_CHECK(rows % n == 0, "OCCL: alltoall tensor's first dimension must divide by world size");
      for (int p = 0; p < n; ++p) cnt[size_t(p)] = size_t(rows / n * row);
    } else {
      TORCH_CHECK(int(split.size()) == n, "OCCL: one split size per rank");
      int64_t total = 0;
      for (int p = 0; p < n; ++p) {
        TORCH_CHECK(split[size_t(p)] >= 0, "OCCL: negative split size");
        cnt[size_t(p)] = size_t(split[size_t(p)] * row);
        total += split[size_t(p)];
      }
      TORCH_CHECK(total == rows, "OCCL: split sizes add up to ", total, ", not ", rows);
    }
    for (int p = 1; p < n; ++p) disp[size_t(p)] = disp[size_t(p - 1)] + cnt[size_t(p - 1)];
  };
  std::vector<size_t> sc, sd, rc, rd;
  counts(input, inputSplitSizes, sc, sd);
  counts(output, outputSplitSizes, rc, rd);
  at::Tensor in = dense(input), out = dense(output);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  if (!out.is_same(output)) back.emplace_back(output, out);
  const auto dt = occl_type(in.scalar_type());
  return run(c10d::OpType::ALLTOALL_BASE, "alltoall_base", in.device(), {output}, {in, out},
             [&](occlComm_t c, orStream_t s) {
               return occlAllToAllv(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(), rc.data(),
                                    rd.data(), dt, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions&) {
  const int n = getSize();
  TORCH_CHECK(int(inputs.size()) == n && int(outputs.size()) == n,
              "OCCL: alltoall needs world_size inputs and outputs");
  const size_t nn = static_cast<size_t>(n);
  std::vector<size_t> sc(nn), sd(nn), rc(nn), rd(nn);
  std::vector<at::Tensor> parts;
  size_t acc = 0;
  for (int p = 0; p < n; ++p) {
    check_tensor(inputs[size_t(p)], "alltoall input");
    sc[size_t(p)] = size_t(inputs[size_t(p)].numel());
    sd[size_t(p)] = acc;
    acc += sc[size_t(p)];
    parts.push_back(inputs[size_t(p)].reshape({-1}));
  }
  at::Tensor in = at::cat(parts);
  acc = 0;
  for (int p = 0; p < n; ++p) {
    check_tensor(outputs[size_t(p)], "alltoall output");
    TORCH_CHECK(outputs[size_t(p)].dtype() == in.dtype(), "OCCL: alltoall dtypes differ");
    rc[size_t(p)] = size_t(outputs[size_t(p)].numel());
    rd[size_t(p)] = acc;
    acc += rc[size_t(p)];
  }
  at::Tensor flat = at::empty({int64_t(acc)}, in.options());
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  for (int p = 0; p < n; ++p)
    back.emplace_back(outputs[size_t(p)], flat.narrow(0, int64_t(rd[size_t(p)]), int64_t(rc[size_t(p)])));
  const auto dt = occl_type(in.scalar_type());
  return run(c10d::OpType::ALLTOALL, "alltoall", in.device(), outputs, {in, flat},
             [&](occlComm_t c, orStream_t s) {
               return occlAllToAllv(in.data_ptr(), sc.data(), sd.data(), flat.data_ptr(), rc.data(),
                                    rd.data(), dt, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "OCCL: one tensor per process");
  at::Tensor in = inputs[0];
  check_tensor(in, "gather input");
  const int root = int(opts.rootRank);
  const bool is_root = getRank() == root;
  std::vector<at::Tensor> outs;
  if (is_root) {
    TORCH_CHECK(outputs.size() == 1 && int(outputs[0].size()) == getSize(),
                "OCCL: gather needs world_size outputs on the root");
    outs = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), "OCCL: gather outputs only on the root");
  }
  at::Tensor inc = dense(in);
  at::Tensor flat = is_root ? at::empty({getSize() * in.numel()}, in.options()) : at::Tensor();
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  for (int p = 0; p < int(outs.size()); ++p)
    back.emplace_back(outs[size_t(p)], flat.narrow(0, p * in.numel(), in.numel()));
  const auto dt = occl_type(in.scalar_type());
  std::vector<at::Tensor> ins{inc};
  if (flat.defined()) ins.push_back(flat);
  return run(c10d::OpType::GATHER, "gather", in.device(), outs, ins,
             [&](occlComm_t c, orStream_t s) {
               return occlGather(inc.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr,
                                 inc.numel(), dt, root, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "OCCL: one tensor per process");
  at::Tensor out = outputs[0];
  check_tensor(out, "scatter output");
  const int root = int(opts.rootRank);
  at::Tensor flat;
  if (getRank() == root) {
    TORCH_CHECK(inputs.size() == 1 && int(inputs[0].size()) == getSize(),
                "OCCL: scatter needs world_size inputs on the root");
    std::vector<at::Tensor> parts;
    for (auto& t : inputs[0]) {
      check_tensor(t, "scatter input");
      TORCH_CHECK(t.numel() == out.numel() && t.dtype() == out.dtype(),
                  "OCCL: scatter inputs must match the output's size and dtype");
      parts.push_back(t.reshape({-1}));
    }
    flat = at::cat(parts);
  }
  at::Tensor outc = dense(out);
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  if (!outc.is_same(out)) back.emplace_back(out, outc);
  const auto dt = occl_type(out.scalar_type());
  std::vector<at::Tensor> ins{outc};
  if (flat.defined()) ins.push_back(flat);
  return run(c10d::OpType::SCATTER, "scatter", out.device(), {out}, ins,
             [&](occlComm_t c, orStream_t s) {
               return occlScatter(flat.defined() ? flat.data_ptr() : nullptr, outc.data_ptr(),
                                  outc.numel(), dt, root, c, s);
             }, back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::send(std::vector<at::Tensor>& tensors, int dst,
                                                      int tag) {
  TORCH_CHECK(tensors.size() == 1, "OCCL: one tensor per process");
  at::Tensor t = dense(tensors[0]);
  check_tensor(t, "send tensor");
  const auto dt = occl_type(t.scalar_type());
  return run(c10d::OpType::SEND, "send", t.device(), {}, {t}, [&](occlComm_t c, orStream_t s) {
    return occlSend(t.data_ptr(), t.numel(), dt, dst, tag, c, s);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::recv(std::vector<at::Tensor>& tensors, int src,
                                                      int tag) {
  auto [t, buf, dt, back] = in_place(tensors, "recv tensor");
  auto work = run(c10d::OpType::RECV, "recv", t.device(), {t}, {buf},
                  [&](occlComm_t c, orStream_t s) {
                    return occlRecv(buf.data_ptr(), buf.numel(), dt, src, tag, nullptr, c, s);
                  }, back);
  *work->source_ = src;
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::recvAnysource(std::vector<at::Tensor>& tensors,
                                                               int tag) {
  auto [t, buf, dt, back] = in_place(tensors, "recv tensor");
  auto source = std::make_shared<int>(-1);
  auto work = run(c10d::OpType::RECVANYSOURCE, "recv_anysource", t.device(), {t}, {buf},
                  [&](occlComm_t c, orStream_t s) {
                    return occlRecv(buf.data_ptr(), buf.numel(), dt, -1, tag, source.get(), c, s);
                  }, back);
  work->source_ = source;
  // The watchdog holds the work (and with it `source`) until liboccl wrote it.
  sh_->watch(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::barrier(const c10d::BarrierOptions& opts) {
  at::Device device = device_ ? *device_
                              : at::Device(c10::DeviceType::PrivateUse1, current_device());
  if (!opts.device_ids.empty()) device = at::Device(c10::DeviceType::PrivateUse1, opts.device_ids[0]);
  if (device_) device = *device_;
  return run(c10d::OpType::BARRIER, "barrier", device, {}, {},
             [&](occlComm_t c, orStream_t s) { return occlBarrier(c, s); });
}

}  // namespace torch_openreg
