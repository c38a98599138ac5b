"""One rank of the soak (test_multinode.py): ITERATIONS mixed collectives on
4 ranks over 2 nodes. Every rank draws the same plan from a shared seed: the
operation (all-reduce with four ops, broadcast, all-gather, reduce-scatter,
all-to-all, send/receive pairs, barrier), the size (4 B to 64 MiB, large ones
rarely), the group (the world, the two nodes, two cross-node pairs), blocking
or async_op with the waits made later and out of order, and compute on the
same stream before and after. Every result is checked. Resources (resident
memory, open descriptors, threads, /dev/shm entries made since the first
sample and left behind) are sampled after the first tenth of the run and at
its end; the last line is "RESOURCES <json>"."""

import ctypes
import datetime
import gc
import json
import os
import random
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))
from tests._subprocess import shm_entries, shm_left_behind  # noqa: E402

# Used only by openreg-only tests (tests/target.py).
openreg_only = True

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
assert world == 4
iterations = int(os.environ.get("ITERATIONS", "300"))
dev = torch.device("openreg", int(os.environ["LOCAL_RANK"]))
torch.openreg.set_device(dev)
dist.init_process_group("occl", device_id=dev, timeout=datetime.timedelta(seconds=120))
R = dist.ReduceOp
GROUPS = {"world": (list(range(4)), None)}
for name, members in (("node0", [0, 1]), ("node1", [2, 3]), ("pairA", [0, 2]), ("pairB", [1, 3])):
    g = dist.new_group(members)  # every rank makes every group, in one order
    GROUPS[name] = (members, g)
SIZES = [1, 7, 256, 4096, 65_536, 1 << 20, 4 << 20, 16 << 20]  # float32 elements
WEIGHTS = [20, 20, 20, 15, 10, 8, 5, 2]


class _MallInfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                 "uordblks", "fordblks", "keepcost")]


def _mallinfo2():
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    return libc.mallinfo2()


def resources():
    # Device memory is host pages here (shared memory, RssShmem): the
    # caching allocator's reserve is measured on its own, after returning
    # the cache, and the host heap (RssAnon) apart from it.
    torch.openreg.synchronize()
    torch.openreg.empty_cache()
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    mi = _mallinfo2()
    return {"rss_mib": int(status["VmRSS"].split()[0]) // 1024,
            "anon_mib": int(status["RssAnon"].split()[0]) // 1024,
            "shmem_mib": int(status["RssShmem"].split()[0]) // 1024,
            "heap_in_use_mib": (mi.uordblks + mi.hblkhd) // (1 << 20),
            "py_objects": len(gc.get_objects()),
            "heap_free_mib": mi.fordblks // (1 << 20),
            "device_allocated": torch.openreg.memory_allocated(dev),
            "device_reserved": torch.openreg.memory_reserved(dev),
            "fds": len(os.listdir("/proc/self/fd")),
            "threads": int(status["Threads"]),
            "shm": len(shm_left_behind(SHM_BEFORE)) if SHM_BEFORE is not None else 0}


# The /dev/shm entries at the first sample: an entry made after it counts at
# a later sample if no live process holds it or this rank does
# (tests/_subprocess.py: the suite's other worker, and anything else on the
# machine, make and remove entries of their own meanwhile).
SHM_BEFORE = None


def value(r, i, n):
    """Rank r's input of iteration i: small integers, exact in float32 sums."""
    return (torch.arange(n, device=dev, dtype=torch.float32) % 13) + float((r * 7 + i) % 11)


def drain(pending, when):
    """Waits for every pending operation, checks it, and drops this rank's
    buffers of the last iteration, so that a sample sees no live buffer."""
    for work, chk, _ in reversed(pending):
        work.wait()
        if chk is not None:
            assert chk(), f"an async operation waited {when} is wrong"
    for name in ("x", "out", "want", "ins", "full", "work", "check", "chk", "due", "reqs", "q"):
        globals().pop(name, None)
    return []


pending = []  # (work, check, due iteration) of async operations, waited later
samples = {}
plan = random.Random(1234)
for i in range(iterations):
    if i in (iterations // 10, iterations // 2):  # from warm-up on: caches and threads in place
        pending = drain(pending, f"at iteration {i}")
        samples["first_tenth" if i == iterations // 10 else "half"] = resources()
        if SHM_BEFORE is None:
            SHM_BEFORE = shm_entries()
    kind = plan.choice(["allreduce", "allreduce", "broadcast", "allgather", "reduce_scatter",
                        "alltoall", "sendrecv", "barrier"])
    gname = plan.choice(list(GROUPS))
    members, group = GROUPS[gname]
    n = plan.choices(SIZES, WEIGHTS)[0]
    op = plan.choice([R.SUM, R.MAX, R.MIN, R.AVG])
    root = plan.choice(members)
    asynchronous = plan.random() < 0.4
    late = plan.randrange(1, 4)  # an async op is waited for this many iterations later
    if rank not in members:
        continue
    k = len(members)
    me = members.index(rank)
    x = value(rank, i, n) * 1.0  # compute on the stream before the collective
    if kind == "allreduce":
        ins = [value(r, i, n) for r in members]
        want = {R.SUM: sum(ins), R.AVG: sum(ins) / k, R.MAX: torch.stack(ins).amax(0),
                R.MIN: torch.stack(ins).amin(0)}[op]
        work = dist.all_reduce(x, op=op, group=group, async_op=asynchronous)
        check = (lambda x=x, want=want: torch.equal(x, want))
    elif kind == "broadcast":
        want = value(root, i, n)
        work = dist.broadcast(x, src=root, group=group, async_op=asynchronous)
        check = (lambda x=x, want=want: torch.equal(x, want))
    elif kind == "allgather":
        out = torch.empty(n * k, device=dev)
        want = torch.cat([value(r, i, n) for r in members])
        work = dist.all_gather_into_tensor(out, x, group=group, async_op=asynchronous)
        check = (lambda out=out, want=want: torch.equal(out, want))
    elif kind == "reduce_scatter":
        n = max(1, n // k)
        full = [torch.cat([value(r, i + j, n) for j in range(k)]) for r in members]
        out = torch.empty(n, device=dev)
        want = sum(f[me * n:(me + 1) * n] for f in full)
        work = dist.reduce_scatter_tensor(out, full[me] * 1.0, group=group,
                                          async_op=asynchronous)
        check = (lambda out=out, want=want: torch.equal(out, want))
    elif kind == "alltoall":
        n = max(1, n // k)
        ins = {r: torch.cat([value(r, i + j, n) for j in range(k)]) for r in members}
        out = torch.empty(n * k, device=dev)
        want = torch.cat([ins[r][me * n:(me + 1) * n] for r in members])
        work = dist.all_to_all_single(out, ins[rank] * 1.0, group=group, async_op=asynchronous)
        check = (lambda out=out, want=want: torch.equal(out, want))
    elif kind == "sendrecv":  # a ring inside the group, as one batch
        to, frm = members[(me + 1) % k], members[(me - 1) % k]
        out = torch.empty(n, device=dev)
        want = value(frm, i, n)
        if k == 1:
            continue
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, to, group),
                                       dist.P2POp(dist.irecv, out, frm, group)])
        work = reqs[-1]
        if not asynchronous:
            for q in reqs:
                q.wait()
            work = None
        else:
            pending.extend((q, None, i + late) for q in reqs[:-1])
        check = (lambda out=out, want=want: torch.equal(out, want))
    else:
        work = dist.barrier(group=group, async_op=asynchronous)
        check = None
    if asynchronous and work is not None:
        pending.append((work, check, i + late))
    elif check is not None:
        assert check(), f"iteration {i}: {kind} on {gname} ({n} elements) is wrong"
    # Waits out of order: everything due now, newest first.
    due = [p for p in pending if p[2] <= i]
    pending = [p for p in pending if p[2] > i]
    for work, chk, _ in reversed(due):
        work.wait()
        if chk is not None:
            assert chk(), f"an async operation waited at iteration {i} is wrong"
pending = drain(pending, "at the end")
dist.barrier()
samples["end"] = resources()
dist.destroy_process_group()
print("RESOURCES", json.dumps(samples), flush=True)
print("OK", flush=True)
