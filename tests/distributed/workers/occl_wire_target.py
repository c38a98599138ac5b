"""Rank 0 of a two-rank OCCL world whose rank 1 is a fake peer in the test
process (test_occl_wire.py), speaking OCCL's TCP protocol with whatever bytes
the test chooses. No torch. For each line "<store dir> <op>" read from stdin
it makes a new communicator (OCCL_TRANSPORT=tcp), runs the operation, and
prints one line:

    OK <seconds> <rss MiB> <result...>
    INIT|OP <result name> <seconds> <rss MiB> <message>

<op>: "allreduce" (1000 float32 of value 1.5), "recv" (1000 int32 from
rank 1, tag 7), "barrier". The result of a successful all-reduce is printed
(its distinct values) so the test can check what the fake peer sent.
"""

import os
import re
import sys
import time

import numpy as np

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))
from tests._torch_free import load  # noqa: E402

oc = load("_occl_testing")
rt = load("_runtime")
TIMEOUT_MS = int(os.environ.get("OCCL_TEST_TIMEOUT_MS", "1500"))
N = 1000


def rss_mib():
    """This process's peak resident memory since exec (VmHWM; ru_maxrss would
    include the launching pytest's peak, which Linux carries across exec)."""
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM:")).split()[1]) // 1024


s = rt.stream_create()
buf = rt.malloc(N * 4)
print("READY", rss_mib(), flush=True)
for line in sys.stdin:
    if not line.strip():
        continue
    store_dir, op = line.split()
    t0 = time.monotonic()
    try:
        comm = oc.Comm(oc.FileStore(store_dir, 10.0), 2, 0, device=0, timeout_ms=TIMEOUT_MS)
    except oc.OcclError as e:
        msg = re.sub(r"\s+", " ", str(e))
        print(f"INIT {e.name} {time.monotonic() - t0:.2f} {rss_mib()} {msg}", flush=True)
        continue
    try:
        if op == "allreduce":
            x = np.full(N, 1.5, np.float32)
            rt.memcpy(buf, x.ctypes.data, x.nbytes, rt.HostToDevice)
            comm.allreduce(buf, buf, N, "float32", "sum", stream=s)
        elif op == "recv":
            comm.recv(buf, N, "int32", 1, tag=7, stream=s)
        else:
            comm.barrier(stream=s)
        comm.synchronize(s)
    except oc.OcclError as e:
        msg = re.sub(r"\s+", " ", str(e))
        print(f"OP {e.name} {time.monotonic() - t0:.2f} {rss_mib()} {msg}", flush=True)
        comm.abort()
    else:
        got = np.empty(N, np.float32 if op == "allreduce" else np.int32)
        rt.memcpy(got.ctypes.data, buf, got.nbytes, rt.DeviceToHost)
        print(f"OK {time.monotonic() - t0:.2f} {rss_mib()} {sorted(set(got.tolist()))[:4]}",
              flush=True)
        comm.destroy()
