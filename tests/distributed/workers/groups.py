"""One rank of the sub-group tests: dist.split_group (on openreg, liboccl's
occlCommSplit) and dist.new_group on the device's c10d backend
(tests.target), small and (OCCL's) zero-copy sizes, with every rank checking
its group's sums. Run with 4 ranks."""

import datetime
import os
import sys

# Started as a script: the repository root, for tests.target.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))

import pytest  # noqa: E402  (the openreg_only marker)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from tests.target import DEVICE, DIST_BACKEND, IS_OPENREG, device_module  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
assert world == 4
dev = torch.device(DEVICE, rank % device_module.device_count())
device_module.set_device(dev)
dist.init_process_group(DIST_BACKEND, device_id=dev, timeout=datetime.timedelta(seconds=60))


@pytest.mark.openreg_only
def check_occl_backend(backend):
    """The split group runs on occl's own process group class."""
    assert type(backend).__name__ == "ProcessGroupOCCL", type(backend)


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
if IS_OPENREG:
    check_occl_backend(backend)
check_sum(sub, mine, 1000)
check_sum(sub, mine, 1 << 20)  # OCCL: zero copy inside the sub-communicator
t = torch.full((8,), float(rank), device=dev)
dist.broadcast(t, src=mine[1], group=sub)  # global rank as the root
assert torch.equal(t.cpu(), torch.full((8,), float(mine[1])))

# A split that leaves rank 3 out: it gets no group (None up to torch 2.14,
# GroupMember.NON_GROUP_MEMBER from 2.15, what new_group gives a non-member),
# the others a group of 3.
three = dist.split_group(split_ranks=[[0, 1, 2]], timeout=datetime.timedelta(seconds=60))
if rank == 3:
    assert three is None or three is dist.GroupMember.NON_GROUP_MEMBER, three
else:
    check_sum(three, [0, 1, 2], 5000)

# new_group: made by c10d through the store, every rank calls it. Before the
# split of a split below: from torch 2.15 every group creation advances a
# counter that names the next new_group, on the ranks that make it only, so a
# new_group after a split that half the ranks made is named differently on
# each half and waits until its timeout, gloo too (docs/upgrading.md).
odd = dist.new_group([1, 3])
if rank in (1, 3):
    check_sum(odd, [1, 3], 3000)

# Splitting a split: rank pairs of the first half, one rank each.
if rank in (0, 1):
    single = dist.split_group(parent_pg=sub, split_ranks=[[0], [1]])
    t = torch.ones(4, device=dev)
    dist.all_reduce(t, group=single)
    assert torch.equal(t.cpu(), torch.ones(4))

# The world group still works after all of it.
check_sum(None, [0, 1, 2, 3], 100)
dist.barrier()
dist.destroy_process_group()
print("OK", flush=True)
