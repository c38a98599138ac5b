"""Data-parallel training on openreg with the ``occl`` backend.

    torchrun --nproc-per-node=2 examples/ddp_train.py

Each rank trains on its shard of every batch with DistributedDataParallel on
its openreg device; OCCL averages the gradients. The same run is repeated with
gloo on the CPU, and every rank checks both against a single-process run on
the full batches: after the last step, parameters must agree.
"""

import copy

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS, BATCH_PER_RANK = 5, 8


def main() -> None:
    # openreg tensors go through occl, CPU tensors through gloo.
    dist.init_process_group("cpu:gloo,openreg:occl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(device)

    torch.manual_seed(0)  # same initial weights on every rank
    reference = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    on_openreg = DDP(copy.deepcopy(reference).to(device))
    on_cpu = DDP(copy.deepcopy(reference))  # gloo
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (reference, on_openreg, on_cpu)]

    data = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        x = torch.randn(BATCH_PER_RANK * world, 16, generator=data)
        y = torch.randn(BATCH_PER_RANK * world, 1, generator=data)
        shard = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK)
        losses = []
        for model, opt, xs, ys in [(reference, opts[0], x, y),
                                   (on_openreg, opts[1], x[shard].to(device), y[shard].to(device)),
                                   (on_cpu, opts[2], x[shard], y[shard])]:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xs), ys)
            loss.backward()  # DDP all-reduces (averages) the gradients here
            opt.step()
            losses.append(loss.item())
        if rank == 0:
            print(f"step {step}: full-batch loss {losses[0]:.5f}, rank-0 shard loss {losses[1]:.5f}")

    for p_ref, p_or, p_cpu in zip(reference.parameters(), on_openreg.module.parameters(),
                                  on_cpu.module.parameters()):
        torch.testing.assert_close(p_or.detach().cpu(), p_ref.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(p_cpu.detach(), p_ref.detach(), rtol=1e-5, atol=1e-6)
    if rank == 0:
        print("DDP on openreg (occl) and on the CPU (gloo) match the single-process run")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
