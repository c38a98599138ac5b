"""One rank of liboccl's hostile-input tests (no torch): torch_openreg._runtime
for device buffers, torch_openreg._occl_testing for liboccl, numpy as the
oracle. Usage: occl_fuzz.py <store dir> <case> [args...]

Cases:
  mismatch SEED N   N examples drawn from SEED (the same plan on every rank):
                    a collective or a send/receive ring whose arguments one
                    rank changes (count, dtype, op, root, the collective
                    itself, alltoallv counts, a message's size or tag), or
                    leaves alone. Each example runs on a fresh communicator
                    and ends with a barrier; one line per example:
                    "<k> OK" or "<k> ERR <where> <result> <seconds> <message>".
  corrupt WHAT      rank 1 corrupts a shared-memory control block (its own or
                    rank 0's) and rank 0 runs the operation that reads it; one
                    line per rank: "OK ..." or "ERR <result> <seconds> <message>".
"""

import ctypes
import os
import random
import re
import struct
import sys
import threading
import time

import numpy as np

# Used only by openreg-only tests (tests/target.py).
openreg_only = True

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))
from tests._torch_free import load  # noqa: E402

oc = load("_occl_testing")
rt = load("_runtime")

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store_dir, case = sys.argv[1], sys.argv[2]
TIMEOUT_MS = int(os.environ.get("OCCL_TEST_TIMEOUT_MS", "5000"))
NP = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "int64": np.int64}


def to_dev(a):
    a = np.ascontiguousarray(a)
    p = rt.malloc(max(a.nbytes, 1))
    if a.nbytes:
        rt.memcpy(p, a.ctypes.data, a.nbytes, rt.HostToDevice)
    return p


def from_dev(p, like):
    out = np.empty_like(like)
    if out.nbytes:
        rt.memcpy(out.ctypes.data, p, out.nbytes, rt.DeviceToHost)
    return out


def data(k, r, n, dtype):
    return np.random.default_rng(k * 1000 + r).integers(-4, 5, n).astype(NP[dtype])


def err_line(where, e, t0):
    msg = re.sub(r"\s+", " ", str(e))
    return f"{where} {getattr(e, 'name', type(e).__name__)} {time.monotonic() - t0:.2f} {msg}"


# ---------------------------------------------------------------- mismatch
KINDS = ["allreduce", "reduce", "broadcast", "allgather", "reduce_scatter", "alltoallv",
         "gather", "scatter", "barrier", "sendrecv"]
FIELDS = {"allreduce": ["count", "dtype", "op", "kind"], "reduce": ["count", "dtype", "op", "root"],
          "broadcast": ["count", "dtype", "root", "kind"], "allgather": ["count", "dtype", "kind"],
          "reduce_scatter": ["count", "dtype", "op"], "alltoallv": ["counts", "dtype"],
          "gather": ["count", "root"], "scatter": ["count", "root"], "barrier": ["kind"],
          "sendrecv": ["count", "tag", "dtype"]}


def plan(g, k):
    """Example k: the base call and, unless it is left valid, (rank, field, value)."""
    kind = g.choice(KINDS)
    base = {"kind": kind, "count": g.choice([0, 1, 7, 1000, 70_000, 300_000]),
            "dtype": g.choice(list(NP)), "op": g.choice(["sum", "max", "min", "prod"]),
            "root": g.randrange(world), "tag": g.randrange(4),
            "counts": [[g.choice([0, 3, 5000, 80_000]) for _ in range(world)] for _ in range(world)]}
    if kind == "barrier":
        base["count"] = 0
    if g.random() < 0.2:
        return base, None
    who, field = g.randrange(world), g.choice(FIELDS[kind])
    if field == "count":
        value = g.choice([c for c in (0, 1, 8, 1001, 70_001, 300_001) if c != base["count"]])
    elif field == "dtype":
        value = g.choice([d for d in NP if d != base["dtype"]])
    elif field == "op":
        value = g.choice([o for o in ("sum", "max", "min", "prod") if o != base["op"]])
    elif field == "root":
        value = (base["root"] + 1 + g.randrange(world - 1)) % world
    elif field == "tag":
        value = base["tag"] + 1 + g.randrange(3)
    elif field == "kind":
        value = g.choice([x for x in ("allreduce", "broadcast", "allgather", "barrier")
                          if x != kind])
    else:  # counts: what `who` sends to another rank
        to = (who + 1 + g.randrange(world - 1)) % world
        value = (to, base["counts"][who][to] + 1 + g.randrange(100))
    return base, (who, field, value)


def run_example(comm, s, k, a):
    """Runs call `a` (this rank's arguments); checks the result when `a` is
    everyone's. Returns buffers to free."""
    kind, n, t, root = a["kind"], a["count"], a["dtype"], a["root"]
    mine, bufs = data(k, rank, n, t), []

    def dev(x):
        bufs.append(to_dev(x))
        return bufs[-1]

    if kind == "allreduce":
        d = dev(mine)
        comm.allreduce(d, d, n, t, a["op"], stream=s)
    elif kind == "reduce":
        d = dev(mine)
        comm.reduce(d, d, n, t, a["op"], root=root, stream=s)
    elif kind == "broadcast":
        d = dev(mine)
        comm.broadcast(d, d, n, t, root=root, stream=s)
    elif kind == "allgather":
        src, dst = dev(mine), dev(np.zeros(n * world, NP[t]))
        comm.allgather(src, dst, n, t, stream=s)
    elif kind == "reduce_scatter":
        src, dst = dev(data(k, rank, n * world, t)), dev(np.zeros(n, NP[t]))
        comm.reduce_scatter(src, dst, n, t, a["op"], stream=s)
    elif kind in ("gather", "scatter"):
        big, small = dev(np.zeros(n * world, NP[t])), dev(mine)
        if kind == "gather":
            comm.gather(small, big, n, t, root=root, stream=s)
        else:
            comm.scatter(big, small, n, t, root=root, stream=s)
    elif kind == "alltoallv":
        sc = a["counts"][rank]
        rc = [a["counts"][p][rank] for p in range(world)]
        src, dst = dev(np.zeros(sum(sc), NP[t])), dev(np.zeros(sum(rc), NP[t]))
        comm.alltoallv(src, sc, [int(v) for v in np.cumsum([0] + sc[:-1])], dst, rc,
                       [int(v) for v in np.cumsum([0] + rc[:-1])], t, stream=s)
    elif kind == "barrier":
        comm.barrier(stream=s)
    elif kind == "sendrecv":  # around the ring, one group
        src, dst = dev(mine), dev(np.zeros(a["recv_count"], NP[t]))
        comm.group_start()
        comm.send(src, n, t, (rank + 1) % world, tag=a["tag"], stream=s)
        comm.recv(dst, a["recv_count"], t, (rank - 1) % world, tag=a["recv_tag"], stream=s)
        comm.group_end()
    return bufs


def check_valid(k, a, bufs):
    """The result of a valid example, against numpy."""
    kind, n, t = a["kind"], a["count"], a["dtype"]
    xs = [data(k, r, n, t) for r in range(world)]
    if kind == "allreduce":
        fold = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[a["op"]]
        want = xs[0]
        for x in xs[1:]:
            want = fold(want, x)
        np.testing.assert_array_equal(from_dev(bufs[0], xs[rank]), want.astype(NP[t]))
    elif kind == "broadcast":
        np.testing.assert_array_equal(from_dev(bufs[0], xs[rank]), xs[a["root"]])
    elif kind == "allgather":
        np.testing.assert_array_equal(from_dev(bufs[1], np.zeros(n * world, NP[t])),
                                      np.concatenate(xs))
    elif kind == "sendrecv":
        np.testing.assert_array_equal(from_dev(bufs[1], xs[0]), xs[(rank - 1) % world])


def case_mismatch(seed, count):
    g = random.Random(seed)
    s = rt.stream_create()
    for k in range(count):
        base, change = plan(g, k)
        a = dict(base)
        a["recv_count"], a["recv_tag"] = base["count"], base["tag"]
        if change and change[0] == rank:
            _, field, value = change
            if field == "counts":
                counts = [list(c) for c in base["counts"]]
                counts[rank][value[0]] = value[1]
                a["counts"] = counts
            elif field in ("count", "tag") and base["kind"] == "sendrecv":
                a[field] = value  # what this rank sends; its receive expects the base
            else:
                a[field] = value
        d = os.path.join(store_dir, str(k))
        os.makedirs(d, exist_ok=True)
        comm = oc.Comm(oc.FileStore(d, 30.0), world, rank, device=0, timeout_ms=TIMEOUT_MS)
        t0 = time.monotonic()
        line = f"{k} OK"
        bufs = []
        try:
            bufs = run_example(comm, s, k, a)
            comm.synchronize(s)
        except oc.OcclError as e:
            line = f"{k} ERR op " + err_line("", e, t0).strip()
        else:
            try:
                comm.barrier(stream=s)
                comm.synchronize(s)
            except oc.OcclError as e:
                line = f"{k} ERR barrier " + err_line("", e, t0).strip()
            else:
                if change is None:
                    check_valid(k, a, bufs)
        if " ERR " in line:
            comm.abort()
        else:
            comm.destroy()
        rt.device_synchronize()
        for b in bufs:
            rt.free(b)
        print(line, "|", base["kind"], change, flush=True)


# ---------------------------------------------------------------- corrupt
# The segment layout of occl/src/internal.h, checked against what the mapped
# blocks hold (magic, rank, pid) before anything is written.
CTRL_BYTES = 4096
SLOT_STRIDE = 128 + (16 << 20)
RING_STRIDE = 128 + (1 << 20)
OFF_STEP, OFF_ABORTED, OFF_REASON = 64, 320, 384


def segments():
    """{rank: base address} of the OCCL segments mapped in this process."""
    out = {}
    with open("/proc/self/maps") as f:
        for line in f:
            if "occl-segment" not in line:
                continue
            base = int(line.split("-")[0], 16)
            magic, _nonce, r, n, pid = struct.unpack("<Q16siii", ctypes.string_at(base, 36))
            if magic == 0x4F43434C53484D31 and n == world:
                assert r not in out, f"two segments of rank {r}"
                out[r] = base
    assert sorted(out) == list(range(world)), out
    return out


def poke(addr, fmt, *values):
    b = struct.pack(fmt, *values)
    ctypes.memmove(addr, b, len(b))


def ring(base, to):
    return base + CTRL_BYTES + 2 * SLOT_STRIDE + to * RING_STRIDE


def case_corrupt(what):
    comm = oc.Comm(oc.FileStore(store_dir, 30.0), world, rank, device=0, timeout_ms=TIMEOUT_MS)
    s = rt.stream_create()
    comm.barrier(stream=s)
    comm.synchronize(s)
    seg = segments()
    assert struct.unpack("<i", ctypes.string_at(seg[rank] + 32, 4))[0] == os.getpid()
    assert struct.unpack("<I", ctypes.string_at(seg[rank] + OFF_STEP, 4))[0] >= 2
    n = 600_000  # a message larger than the 1 MiB ring
    x = np.full(n, rank + 1, np.int32)
    d = to_dev(x)
    stop = threading.Event()
    scribblers = []

    def stop_scribbling():
        # Before abort()/destroy() unmap the segment the thread reads: a
        # scribbler still running then faults (rank 1 exited with SIGSEGV
        # in a loaded CI run).
        stop.set()
        for t in scribblers:
            t.join()
    if rank == 1:
        if what in ("abort_reason", "step"):
            pass  # after the barrier below: rank 0 would see it while waiting there
        elif what in ("ring_tail_ahead", "ring_tail_behind"):
            # The tail of rank 0's ring to rank 1 (rank 1 writes it as the
            # reader), moved 2^40 bytes off its head.
            r0 = ring(seg[0], 1)
            head = struct.unpack("<Q", ctypes.string_at(r0, 8))[0]
            poke(r0 + 64, "<Q", (head + (1 << 40) * (1 if what == "ring_tail_ahead" else -1)) % 2**64)
        elif what == "ring_head":
            r1 = ring(seg[1], 0)
            tail = struct.unpack("<Q", ctypes.string_at(r1 + 64, 8))[0]
            poke(r1, "<Q", (tail + (1 << 40)) % 2**64)
        elif what == "zero_copy_offset":
            # Whenever rank 1 has published its buffers for a zero-copy round,
            # overwrite the input's offset inside its allocation.
            def scribble():
                slots = [seg[1] + CTRL_BYTES + p * SLOT_STRIDE + 128 for p in (0, 1)]
                while not stop.is_set():
                    for slot in slots:
                        if ctypes.string_at(slot, 64) != bytes(64):
                            poke(slot + 64, "<Q", 1 << 40)
                    time.sleep(0.0005)

            scribblers.append(threading.Thread(target=scribble, daemon=True))
            scribblers[-1].start()
        else:
            raise SystemExit(f"unknown corruption {what}")
    # The ring and zero-copy corruptions are written before rank 1 posts this
    # barrier, so rank 0 sees them once the barrier completes.
    comm.barrier(stream=s)
    comm.synchronize(s)
    if what in ("abort_reason", "step"):
        # Written after the barrier (an aborted flag seen during it would fail
        # the barrier; the barrier would overwrite the round counter), then
        # announced through a file, so that rank 0's next operation sees it.
        corrupted = os.path.join(store_dir, "rank1-corrupted")
        if rank == 1:
            if what == "abort_reason":
                # A reason without its terminating NUL, and garbage after it up
                # to the end of the control page.
                poke(seg[1] + OFF_REASON, "512s", b"A" * 512)
                poke(seg[1] + OFF_REASON + 512, f"{CTRL_BYTES - OFF_REASON - 512}s",
                     b"B" * (CTRL_BYTES - OFF_REASON - 512))
                poke(seg[1] + OFF_ABORTED, "<I", 1)
            else:  # its round counter jumps 1000 rounds ahead
                step = struct.unpack("<I", ctypes.string_at(seg[1] + OFF_STEP, 4))[0]
                poke(seg[1] + OFF_STEP, "<I", (step + 1000) % 2**32)
            open(corrupted, "w").close()
        else:
            deadline = time.monotonic() + 20
            while not os.path.exists(corrupted):
                if time.monotonic() > deadline:
                    raise SystemExit("rank 1 never wrote its corruption")
                time.sleep(0.01)
    t0 = time.monotonic()
    done = os.path.join(store_dir, "rank0-done")
    try:
        if what in ("abort_reason", "step"):
            # Rank 1 stays out (as a rank that hung or died with its block
            # corrupted would); rank 0's all-reduce reads its block.
            if rank == 1:
                while not os.path.exists(done) and time.monotonic() - t0 < 20:
                    time.sleep(0.01)
                print("OK idle", flush=True)
                comm.abort()
                return
            y = to_dev(np.ones(10, np.float32))
            try:
                comm.allreduce(y, y, 10, "float32", "sum", stream=s)
                comm.synchronize(s)
            finally:
                open(done, "w").close()
        elif what == "zero_copy_offset":
            if rank == 0:
                time.sleep(0.3)  # rank 1's buffers are published (and scribbled on) by then
            m = 3 * (1 << 20)
            y = to_dev(np.ones(m, np.float32))
            comm.allreduce(y, y, m, "float32", "sum", stream=s)
            comm.synchronize(s)
        elif what.startswith("ring_tail"):
            if rank == 0:
                comm.send(d, n, "int32", 1, tag=1, stream=s)
                comm.synchronize(s)
            comm.barrier(stream=s)
            comm.synchronize(s)
        elif what == "ring_head":
            if rank == 0:
                comm.recv(d, n, "int32", 1, tag=1, stream=s)
                comm.synchronize(s)
            comm.barrier(stream=s)
            comm.synchronize(s)
    except oc.OcclError as e:
        stop_scribbling()
        print("ERR", err_line("", e, t0).strip(), flush=True)
        comm.abort()
    else:
        stop_scribbling()
        print("OK", flush=True)
        comm.destroy()


if case == "mismatch":
    case_mismatch(int(sys.argv[3]), int(sys.argv[4]))
elif case == "corrupt":
    case_corrupt(sys.argv[3])
else:
    raise SystemExit(f"unknown case {case}")
