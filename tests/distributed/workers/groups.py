"""One rank of the sub-group tests: dist.split_group (liboccl's occlCommSplit)
and dist.new_group on the occl backend, small and zero-copy sizes, with every
rank checking its group's sums. Run with 4 ranks."""

import datetime
import os

import torch
import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
assert world == 4
dev = torch.device("openreg", rank % torch.openreg.device_count())
torch.openreg.set_device(dev)
dist.init_process_group("occl", device_id=dev, timeout=datetime.timedelta(seconds=60))


def check_sum(group, members, n):
    t = torch.full((n,), float(rank + 1), device=dev)
    dist.all_reduce(t, group=group)
    want = float(sum(m + 1 for m in members))
    assert torch.equal(t.cpu(), torch.full((n,), want)), (rank, members, t[:4].cpu())


# Two disjoint halves, from the world group.
halves = [[0, 1], [2, 3]]
sub = dist.split_group(split_ranks=halves, timeout=datetime.timedelta(seconds=60))
mine = halves[rank // 2]
assert sub is not None and sub.size() == 2 and sub.rank() == mine.index(rank)
assert dist.get_process_group_ranks(sub) == mine
backend = sub._get_backend(dev)
assert type(backend).__name__ == "ProcessGroupOCCL", type(backend)
check_sum(sub, mine, 1000)
check_sum(sub, mine, 1 << 20)  # zero copy inside the sub-communicator
t = torch.full((8,), float(rank), device=dev)
dist.broadcast(t, src=mine[1], group=sub)  # global rank as the root
assert torch.equal(t.cpu(), torch.full((8,), float(mine[1])))

# A split that leaves rank 3 out: it gets None, the others a group of 3.
three = dist.split_group(split_ranks=[[0, 1, 2]], timeout=datetime.timedelta(seconds=60))
if rank == 3:
    assert three is None
else:
    check_sum(three, [0, 1, 2], 5000)

# Splitting a split: rank pairs of the first half, one rank each.
if rank in (0, 1):
    single = dist.split_group(parent_pg=sub, split_ranks=[[0], [1]])
    t = torch.ones(4, device=dev)
    dist.all_reduce(t, group=single)
    assert torch.equal(t.cpu(), torch.ones(4))

# new_group: made by c10d through the store, every rank calls it.
odd = dist.new_group([1, 3])
if rank in (1, 3):
    check_sum(odd, [1, 3], 3000)

# The world group still works after all of it.
check_sum(None, [0, 1, 2, 3], 100)
dist.barrier()
dist.destroy_process_group()
print("OK", flush=True)
