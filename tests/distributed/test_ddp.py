"""DDP on openreg with occl, launched by torchrun: parameters after N steps
equal a single-process full-batch run and DDP with gloo on the CPU
(examples/ddp_train.py makes the comparison)."""

import pytest

from ._launch import torchrun


@pytest.mark.distributed
class TestDDP:
    def test_ddp_example_under_torchrun(self):
        rc, out, err = torchrun("examples/ddp_train.py", 2, timeout=300)
        assert rc == 0, err[-4000:]
        assert "match the single-process run" in out, out
