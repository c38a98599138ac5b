"""One rank of the model suite's data-parallel run (test_parallel.py, under
torchrun): GPT-2 (tests/models/zoo.py, its head tied to its embedding)
trains for STEPS AdamW steps on 2 ranks, each on its own batch, four ways:
DDP and FSDP2 (fully_shard of every block and the root) on the device under
test over its c10d backend (openreg: occl), and the same two on the CPU over
gloo, from one process group ("cpu:gloo,<device>:<backend>"). Rank 0 checks
that the device's losses and final parameters match the CPU's (tolerances:
tests/models/test_models.py) and prints OK."""

import copy
import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from tests.models import zoo  # noqa: E402
from tests.target import DEVICE, DIST_BACKEND, device_module  # noqa: E402

NAME, STEPS, LR = "gpt2", 3, 1e-3

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device(DEVICE, int(os.environ["LOCAL_RANK"]))
device_module.set_device(dev)
dist.init_process_group(f"cpu:gloo,{DEVICE}:{DIST_BACKEND}",
                        timeout=datetime.timedelta(seconds=120))
base = zoo.build(NAME)


def run(model, device, wrap):
    """Losses (averaged over the ranks) and the full parameters afterwards."""
    assert model.lm_head.weight is model.transformer.wte.weight  # tied after .to()
    fn = wrap(model)
    opt = torch.optim.AdamW(fn.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        loss = zoo.loss(fn, zoo.batch(NAME, seed=100 * step + rank + 1, device=device))
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        losses.append(avg.item())
    params = {}
    for n, p in model.named_parameters():
        t = p.detach()
        if hasattr(t, "full_tensor"):  # FSDP2: a DTensor shard
            t = t.full_tensor()
        params[n] = t.cpu()
    return losses, params


def fsdp(device_type):
    def wrap(model):
        mesh = init_device_mesh(device_type, (world,))
        for block in model.transformer.h:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    return wrap


results = {
    "ddp": (run(copy.deepcopy(base).to(dev), dev, DDP),
            run(copy.deepcopy(base), "cpu", DDP)),
    "fsdp2": (run(copy.deepcopy(base).to(dev), dev, fsdp(DEVICE)),
              run(copy.deepcopy(base), "cpu", fsdp("cpu"))),
}
if rank == 0:
    for how, ((ld, pd), (lc, pc)) in results.items():
        torch.testing.assert_close(ld, lc, rtol=1e-4, atol=1e-6, msg=lambda m: f"{how}: {m}")
        assert pd.keys() == pc.keys(), how
        for n in pc:
            torch.testing.assert_close(pd[n], pc[n], rtol=0, atol=2 * STEPS * LR,
                                       msg=lambda m, n=n: f"{how}: parameter {n}: {m}")
        print(f"{how}: losses {[round(x, 6) for x in ld]} on {DEVICE}, "
              f"{[round(x, 6) for x in lc]} on the CPU")
dist.barrier()
dist.destroy_process_group()
if rank == 0:
    print("OK")
