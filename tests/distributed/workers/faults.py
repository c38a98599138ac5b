"""One rank of the fault tests. Usage: faults.py <kill|hang|mismatch>."""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

case = sys.argv[1]
rank = int(os.environ["RANK"])
timeout = datetime.timedelta(seconds=float(os.environ.get("OCCL_TIMEOUT", "30")))
dist.init_process_group("occl", timeout=timeout)
dev = torch.device("openreg", rank % torch.openreg.device_count())
t = torch.ones(1000, device=dev)
dist.all_reduce(t)  # seq 1: everybody is up
assert t[0].item() == 2

if case == "kill":
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)
elif case == "hang":
    if rank == 1:
        time.sleep(float(os.environ["HANG"]))
        sys.exit(0)
t0 = time.monotonic()
try:
    if case == "mismatch" and rank == 1:
        dist.broadcast(t, src=0)
    else:
        dist.all_reduce(t)  # seq 2
except dist.DistBackendError as e:
    print(f"RAISED {time.monotonic() - t0:.2f} {e}".replace("\n", " "), flush=True)
else:
    print("NO ERROR", flush=True)
    sys.exit(1)
dist.destroy_process_group()
print("CLEAN EXIT", flush=True)
