"""One rank of the network-fault tests (test_multinode.py), started directly on
a node of the virtual cluster (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT set by the test). Runs STEPS all-reduces of SIZE_MB MiB
(averaging ones, so every result is exactly one), printing "STEP <i>
<seconds>" after each; on an error prints "ERR <type> <seconds since the
step began> <message>", destroys its group and exits 0 (a clean exit after a
failure); "DONE" when every step passed."""

import datetime
import os
import re
import time

import torch
import torch.distributed as dist

# Used only by openreg-only tests (tests/target.py).
openreg_only = True

rank = int(os.environ["RANK"])
timeout = float(os.environ.get("FAULT_TIMEOUT_S", "10"))
steps = int(os.environ.get("STEPS", "1000"))
n = int(os.environ.get("SIZE_MB", "64")) * (1 << 20) // 4

dist.init_process_group("occl", timeout=datetime.timedelta(seconds=timeout))
dev = torch.device("openreg", int(os.environ["LOCAL_RANK"]))
torch.openreg.set_device(dev)
x = torch.ones(n, device=dev)
for i in range(steps):
    t0 = time.monotonic()
    try:
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        ok = bool((x == 1).all())
    except Exception as e:  # noqa: BLE001 (reported, then the group is torn down)
        msg = re.sub(r"\s+", " ", str(e))[:600]
        print(f"ERR {type(e).__name__} {time.monotonic() - t0:.2f} {msg}", flush=True)
        t1 = time.monotonic()
        dist.destroy_process_group()
        print(f"EXIT {time.monotonic() - t1:.2f}", flush=True)
        raise SystemExit(0)
    assert ok, f"step {i}: wrong result"
    if i == 0:  # the communicator exists once a collective ran
        print("TRANSPORT", dist.group.WORLD._get_backend(dev).transport, flush=True)
    print(f"STEP {i} {time.monotonic() - t0:.2f}", flush=True)
dist.destroy_process_group()
print("DONE", flush=True)
