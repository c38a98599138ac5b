"""One rank: profile an all-reduce over occl and print its device activity as JSON."""

import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

# Only the openreg-only test_collectives_trace.py runs it (occl's activity names).
openreg_only = True

rank = int(os.environ["RANK"])
dist.init_process_group("occl", device_id=torch.device("openreg", rank))
t = torch.ones(1024, device=f"openreg:{rank}")
dist.all_reduce(t)  # warm-up: the communicator's set-up is not profiled
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    dist.all_reduce(t)
    torch.openreg.synchronize()
path = os.path.join(tempfile.mkdtemp(), "trace.json")
prof.export_chrome_trace(path)
with open(path) as f:
    events = json.load(f)["traceEvents"]
dist.destroy_process_group()
kernels = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("occl:")]
sys.stdout.write(json.dumps(kernels) + "\n")
