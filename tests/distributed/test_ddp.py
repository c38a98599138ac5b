"""DDP on the device under test with its c10d backend (tests.target). On
openreg with occl, the repository's example under torchrun: parameters after
N steps equal a single-process full-batch run and DDP with gloo on the CPU
(examples/ddp_train.py makes the comparison). On any device: DDP's logging
data has the device's forward, backward and communication times."""

import pytest

from tests.target import HW

from ._launch import needs_dist_backend, torchrun

pytestmark = needs_dist_backend


# The example is openreg's (it names openreg and occl itself).
@pytest.mark.distributed
@pytest.mark.openreg_only
class TestDDP:
    hw_classification = HW.ACCELERATOR

    def test_ddp_example_under_torchrun(self):
        rc, out, err = torchrun("examples/ddp_train.py", 2, timeout=300)
        assert rc == 0, err[-4000:]
        assert "match the single-process run" in out, out


DDP_TIMINGS = r"""
import json, os, warnings
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from tests.target import DEVICE, DIST_BACKEND
dist.init_process_group(DIST_BACKEND, rank=0, world_size=1)
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ddp = DDP(m.to(DEVICE))
    ddp._set_ddp_runtime_logging_sample_rate(1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for _ in range(4):
        ddp(torch.randn(32, 64, device=DEVICE)).sum().backward()
        opt.step()
        opt.zero_grad()
    data = ddp._get_ddp_logging_data()
print(json.dumps({"warnings": [str(w.message) for w in caught],
                  "times": {k: v for k, v in data.items() if k.endswith("_time")}}))
dist.destroy_process_group()
"""


@pytest.mark.distributed
class TestDDPTimer:
    hw_classification = HW.ACCELERATOR

    def test_logging_data_has_device_times(self):
        # c10d's TimerRegistry has a timer for the device (openreg's:
        # occl/c10d/ReducerTimer.cpp): DDP fills in forward, backward and
        # communication times as on CUDA, and does not warn that time stats
        # are CPU and CUDA only.
        import json

        from tests._subprocess import run_python

        from ._launch import free_port

        r = run_python(DDP_TIMINGS, timeout=120,
                       env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
        assert r.returncode == 0, r.stderr[-3000:]
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert not [w for w in out["warnings"] if "Time stats" in w], out["warnings"]
        times = out["times"]
        for key in ("avg_forward_compute_time", "avg_backward_compute_time",
                    "avg_backward_comm_time", "forward_compute_time", "backward_compute_time",
                    "backward_comm_time"):
            assert 0 < times[key] < 10 * 10**9, (key, times)  # nanoseconds
