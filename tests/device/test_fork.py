"""A forked child that touches the device gets CUDA's clear error."""

import multiprocessing as mp

import pytest
import torch

from tests.target import DEVICE, HW


def _child_new_tensor(q):
    try:
        torch.ones(2, device=DEVICE)
        q.put("no error")
    except Exception as e:  # noqa: BLE001
        q.put(f"{type(e).__name__}: {e}")


def _child_existing_tensor(q, t):
    try:
        q.put(str(t.cpu()))
    except Exception as e:  # noqa: BLE001
        q.put(f"{type(e).__name__}: {e}")


def _child_cpu_only(q):
    q.put(str(torch.ones(2).sum().item()))


@pytest.mark.device
class TestForkPoisoning:
    hw_classification = HW.ACCELERATOR

    def run(self, target, *args):
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=target, args=(q, *args))
        p.start()
        out = q.get(timeout=60)
        p.join(timeout=60)
        return out

    @pytest.mark.openreg_only  # openreg's wording of CUDA's message
    def test_new_device_work_in_forked_child(self):
        torch.ones(1, device="openreg")  # initialise in the parent
        out = self.run(_child_new_tensor)
        assert out == (
            "RuntimeError: Cannot re-initialize openreg in forked subprocess. To use openreg "
            "with multiprocessing, you must use the 'spawn' start method"
        )

    @pytest.mark.openreg_only  # the message of openreg's runtime
    def test_inherited_tensor_in_forked_child(self):
        t = torch.ones(2, device="openreg")
        out = self.run(_child_existing_tensor, t)
        assert out.startswith("RuntimeError")
        assert "forked child" in out and "'spawn'" in out

    def test_cpu_work_in_forked_child_is_fine(self):
        torch.ones(1, device=DEVICE)
        assert self.run(_child_cpu_only) == "2.0"
