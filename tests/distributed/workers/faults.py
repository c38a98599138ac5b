"""One rank of the fault tests. Usage: faults.py <kill|hang|mismatch>."""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

# Used only by openreg-only tests (tests/target.py).
openreg_only = True

case = sys.argv[1]
rank = int(os.environ["RANK"])
timeout = datetime.timedelta(seconds=float(os.environ.get("OCCL_TIMEOUT", "30")))
dist.init_process_group("occl", timeout=timeout)
dev = torch.device("openreg", rank % torch.openreg.device_count())


def mappings():
    """(device-memory mappings, OCCL segment mappings) of this process."""
    with open("/proc/self/maps") as f:
        lines = f.read().splitlines()
    return (sum("openreg-device" in line for line in lines),
            sum("occl-segment" in line for line in lines))


t = torch.ones(1000, device=dev)
own_device_maps = mappings()[0]
big = torch.ones(1 << 20, device=dev)
dist.all_reduce(big)  # seq 1: everybody is up (4 MiB: zero copy maps the peer's buffer)
assert big[0].item() == 2

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
device_maps, segment_maps = mappings()
# Nothing of the peers stays mapped: no OCCL segment, no opened device buffer.
print(f"MAPPINGS {device_maps - own_device_maps} {segment_maps}", flush=True)
print("CLEAN EXIT", flush=True)
