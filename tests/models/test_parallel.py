"""GPT-2 (tests/models/zoo.py) under DDP and FSDP2 on 2 ranks of the device's
c10d backend under torchrun, against the same on the CPU over gloo
(workers/parallel_lm.py makes the comparison)."""

import os

import pytest

from tests.distributed._launch import needs_dist_backend, torchrun
from tests.target import HW

pytest.importorskip("transformers", reason="the model suite needs transformers "
                                           "(requirements-dev.txt)")
pytestmark = needs_dist_backend
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "parallel_lm.py")


@pytest.mark.models
class TestDataParallel:
    hw_classification = HW.ACCELERATOR

    def test_gpt2_ddp_and_fsdp2_match_gloo_on_the_cpu(self):
        rc, out, err = torchrun(WORKER, 2, timeout=400)
        assert rc == 0, f"{out}\n{err[-4000:]}"
        assert out.strip().endswith("OK"), out
        assert "ddp: losses" in out and "fsdp2: losses" in out, out
