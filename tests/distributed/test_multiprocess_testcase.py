"""The device's c10d backend (tests.target: occl on openreg) through
PyTorch's own MultiProcessTestCase harness."""

import datetime

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import MultiProcessTestCase

from tests.target import DEVICE, DIST_BACKEND, HW

from ._launch import needs_dist_backend

pytestmark = needs_dist_backend


@pytest.mark.distributed
class TestOcclMultiProcess(MultiProcessTestCase):
    hw_classification = HW.ACCELERATOR

    @property
    def world_size(self):
        return 2

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def test_allreduce_broadcast_barrier(self):
        store = dist.FileStore(self.file_name, self.world_size)
        dist.init_process_group(DIST_BACKEND, store=store, rank=self.rank, world_size=self.world_size,
                                timeout=datetime.timedelta(seconds=60))
        dev = torch.device(DEVICE, self.rank)
        t = torch.arange(6, dtype=torch.float32, device=dev) * (self.rank + 1)
        dist.all_reduce(t)
        self.assertEqual(t.cpu(), torch.arange(6, dtype=torch.float32) * 3)
        b = torch.full((3,), float(self.rank), device=dev)
        dist.broadcast(b, src=1)
        self.assertEqual(b.cpu(), torch.ones(3))
        dist.barrier()
        dist.destroy_process_group()
