"""One rank of the liboccl-alone tests: no torch, only torch_openreg._runtime
(device buffers) and torch_openreg._occl_testing (liboccl), with numpy as the
oracle. Usage: occl_lib.py <store dir> <case>."""

import ctypes
import os
import sys
import time

import numpy as np

# Used only by openreg-only tests (tests/target.py).
openreg_only = True

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))
from tests._torch_free import load  # noqa: E402

oc = load("_occl_testing")  # without the torch_openreg package (and torch)
rt = load("_runtime")

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store_dir, case = sys.argv[1], sys.argv[2]


def to_dev(a: np.ndarray) -> int:
    a = np.ascontiguousarray(a)
    p = rt.malloc(max(a.nbytes, 1))
    if a.nbytes:
        rt.memcpy(p, a.ctypes.data, a.nbytes, rt.HostToDevice)
    return p


def from_dev(p: int, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    if out.nbytes:
        rt.memcpy(out.ctypes.data, p, out.nbytes, rt.DeviceToHost)
    return out


def data(seed, r, n, dtype):
    g = np.random.default_rng(seed * 100 + r)
    if dtype == np.bool_:
        return g.random(n) < 0.5
    if np.issubdtype(dtype, np.integer):
        lo = 0 if np.issubdtype(dtype, np.unsignedinteger) else -5
        return g.integers(lo, 6, n).astype(dtype)
    return g.standard_normal(n).astype(dtype)


impostors = []
if case == "impostor" and rank == 1:
    # Before rank 1 connects for real, three connections with the wrong
    # identity wait in rank 0's accept queue: another job's token, a rank
    # that does not exist, and a hello meant for another rank.
    import socket
    import struct
    pre = oc.FileStore(store_dir, 30.0)
    token = bytes.fromhex(pre.get("occl/job").decode())
    info = pre.get("occl/rank/0").decode().split()
    addr, port = info[4], int(info[5])
    for tok, who, to in [(bytes(16), 1, 0), (token, 5, 0), (token, 1, 3)]:
        sock = socket.create_connection((addr, port), timeout=20)
        sock.sendall(struct.pack("<Q16siiii", 0x314F4C4C45484F43, tok, who, world, to, 0))
        impostors.append(sock)

store = oc.FileStore(store_dir, 30.0)
comm = oc.Comm(store, world, rank, device=0, timeout_ms=int(os.environ.get("OCCL_TEST_TIMEOUT_MS", "20000")))
assert (comm.rank, comm.size) == (rank, world)
s = rt.stream_create()

if "OCCL_EXPECT_TRANSPORT" in os.environ:
    assert comm.transport == os.environ["OCCL_EXPECT_TRANSPORT"], comm.transport
if case == "ops":
    folds = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
             "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}
    types = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "int64": np.int64,
             "uint8": np.uint8, "int8": np.int8, "bool": np.bool_}
    # Small (one round) and large (pipelined, > the 4 MiB slot) messages.
    for n in (0, 1, 1000, 3 * (1 << 20) + 7):
        for tname, t in types.items():
            ops = ["sum", "prod", "min", "max"] + (["band", "bor", "bxor"] if t in (np.int32, np.int64, np.uint8, np.int8, np.bool_) else [])
            if n > 5000:
                ops = ops[:1]
            for op in ops:
                xs = [data(n + len(op), r, n, t) for r in range(world)]
                want = xs[0]
                for x in xs[1:]:
                    want = (np.logical_or if t == np.bool_ and op in ("sum", "max") else
                            np.logical_and if t == np.bool_ and op in ("prod", "min") else folds[op])(want, x)
                d = to_dev(xs[rank])
                comm.allreduce(d, d, n, tname, op, stream=s)
                comm.synchronize(s)
                got = from_dev(d, xs[rank])
                if t in (np.float32, np.float64):
                    np.testing.assert_allclose(got, want.astype(t), rtol=1e-5, atol=1e-6)
                else:
                    np.testing.assert_array_equal(got, want.astype(t), err_msg=f"{tname} {op} n={n}")
                rt.free(d)
    # avg and premul_sum on floats
    x = data(7, rank, 5000, np.float32)
    xs = [data(7, r, 5000, np.float32) for r in range(world)]
    d = to_dev(x)
    comm.allreduce(d, d, 5000, "float32", "avg", stream=s)
    comm.synchronize(s)
    np.testing.assert_allclose(from_dev(d, x), sum(xs) / world, rtol=1e-5, atol=1e-6)
    comm.allreduce(d, d, 5000, "float32", "premul_sum", 0.5, stream=s)
    comm.synchronize(s)
    np.testing.assert_allclose(from_dev(d, x), 0.5 * world * (sum(xs) / world), rtol=1e-5, atol=1e-6)
    rt.free(d)
    # broadcast / allgather / reduce_scatter / alltoallv / gather / scatter, small and large
    for n in (0, 17, 5 * (1 << 20) // 4 + 3):
        xs = [data(n, r, n, np.float32) for r in range(world)]
        d = to_dev(xs[rank])
        comm.broadcast(d, d, n, "float32", root=world - 1, stream=s)
        comm.synchronize(s)
        np.testing.assert_array_equal(from_dev(d, xs[rank]), xs[world - 1])
        rt.free(d)
        src = to_dev(xs[rank])
        dst = to_dev(np.zeros(n * world, np.float32))
        comm.allgather(src, dst, n, "float32", stream=s)
        comm.synchronize(s)
        np.testing.assert_array_equal(from_dev(dst, np.zeros(n * world, np.float32)), np.concatenate(xs))
        rt.free(src)
        rt.free(dst)
        big = [data(n + 1, r, n * world, np.float32) for r in range(world)]
        src = to_dev(big[rank])
        dst = to_dev(np.zeros(n, np.float32))
        comm.reduce_scatter(src, dst, n, "float32", "sum", stream=s)
        comm.synchronize(s)
        want = sum(b[rank * n:(rank + 1) * n].astype(np.float64) for b in big).astype(np.float32)
        np.testing.assert_allclose(from_dev(dst, np.zeros(n, np.float32)), want, rtol=1e-5, atol=1e-5)
        rt.free(src)
        rt.free(dst)
    # uneven all-to-all: rank r sends (r + 2 * p + 1) * 1000 elements to p
    cnt = lambda src, dst: (src + 2 * dst + 1) * 1000  # noqa: E731
    sc = [cnt(rank, p) for p in range(world)]
    rc = [cnt(p, rank) for p in range(world)]
    sd = list(np.cumsum([0] + sc[:-1]))
    rd = list(np.cumsum([0] + rc[:-1]))
    send = np.concatenate([np.full(sc[p], rank * 100 + p, np.int64) for p in range(world)])
    src, dst = to_dev(send), to_dev(np.zeros(sum(rc), np.int64))
    comm.alltoallv(src, sc, [int(v) for v in sd], dst, rc, [int(v) for v in rd], "int64", stream=s)
    comm.synchronize(s)
    want = np.concatenate([np.full(rc[p], p * 100 + rank, np.int64) for p in range(world)])
    np.testing.assert_array_equal(from_dev(dst, np.zeros(sum(rc), np.int64)), want)
    # send/recv around the ring, larger than the 1 MiB ring buffer, in a group
    n = 700_000
    mine = np.full(n, rank, np.int32)
    src, dst = to_dev(mine), to_dev(np.zeros(n, np.int32))
    comm.group_start()
    comm.send(src, n, "int32", (rank + 1) % world, tag=3, stream=s)
    comm.recv(dst, n, "int32", (rank - 1) % world, tag=3, stream=s)
    comm.group_end()
    comm.synchronize(s)
    np.testing.assert_array_equal(from_dev(dst, mine), np.full(n, (rank - 1) % world, np.int32))
    comm.barrier(stream=s)
    comm.synchronize(s)
    assert comm.query(comm.last_seq) == "occlSuccess"
    print("OK", comm.last_seq)
elif case == "zerocopy":
    # Large messages read the peers' device buffers in place (IPC handles)
    # when zero copy is on, and go through the slots when it is off: the
    # same results either way, in place or not, for every rank's aliasing.
    expect = os.environ.get("OCCL_ZERO_COPY", "1") != "0"
    assert comm.transport == ("shm+ipc" if expect else "shm"), comm.transport
    n = 3 * (1 << 20) + 5
    for tname, t in (("float32", np.float32), ("int64", np.int64), ("float64", np.float64)):
        xs = [data(11, r, n, t) for r in range(world)]
        want = xs[0].astype(np.float64)
        for x in xs[1:]:
            want = want + x
        src, dst = to_dev(xs[rank]), to_dev(np.zeros(n, t))
        for _ in range(2):  # the second time from the cache of opened handles
            comm.allreduce(src, dst, n, tname, "sum", stream=s)
            comm.synchronize(s)
            np.testing.assert_allclose(from_dev(dst, xs[rank]), want.astype(t), rtol=1e-5, atol=1e-5)
        comm.allreduce(src, src, n, tname, "max", stream=s)  # in place
        comm.synchronize(s)
        np.testing.assert_array_equal(from_dev(src, xs[rank]), np.maximum.reduce(xs))
        rt.free(src)
        rt.free(dst)
    # every rank gets bit-identical sums (reduced in rank order, whoever reduces)
    xs = [data(12, r, n, np.float32) for r in range(world)]
    d = to_dev(xs[rank])
    comm.allreduce(d, d, n, "float32", "avg", stream=s)
    comm.synchronize(s)
    got = from_dev(d, xs[rank])
    want = xs[0].copy()
    for x in xs[1:]:
        want = want + x
    np.testing.assert_array_equal(got, want / np.float32(world))
    rt.free(d)
    # broadcast, all-gather (in place too), reduce-scatter
    m = (1 << 20) + 3
    xs = [data(13, r, m, np.float32) for r in range(world)]
    d = to_dev(xs[rank])
    comm.broadcast(d, d, m, "float32", root=world - 1, stream=s)
    comm.synchronize(s)
    np.testing.assert_array_equal(from_dev(d, xs[rank]), xs[world - 1])
    rt.free(d)
    full = np.zeros(m * world, np.float32)
    full[rank * m:(rank + 1) * m] = xs[rank]
    dst = to_dev(full)
    comm.allgather(dst + rank * m * 4, dst, m, "float32", stream=s)
    comm.synchronize(s)
    np.testing.assert_array_equal(from_dev(dst, full), np.concatenate(xs))
    rt.free(dst)
    big = [data(14, r, m * world, np.float32) for r in range(world)]
    src, dst = to_dev(big[rank]), to_dev(np.zeros(m, np.float32))
    comm.reduce_scatter(src, dst, m, "float32", "sum", stream=s)
    comm.synchronize(s)
    want = big[0][rank * m:(rank + 1) * m].copy()
    for b in big[1:]:
        want = want + b[rank * m:(rank + 1) * m]
    np.testing.assert_array_equal(from_dev(dst, np.zeros(m, np.float32)), want)
    rt.free(src)
    rt.free(dst)
    comm.destroy()
    with open("/proc/self/maps") as f:  # the peers' buffers are unmapped
        mapped = [line for line in f if "openreg-device" in line]
    assert len(mapped) == 2, mapped  # this process's own device: addresses + kernel view
    print("OK", "shm+ipc" if expect else "shm")
    sys.exit(0)
elif case == "split":
    # Even and odd ranks form two sub-communicators; the last rank opts out.
    color = -1 if (world > 2 and rank == world - 1) else rank % 2
    sub = comm.split(color, -rank)  # key: reversed order
    if color < 0:
        assert sub is None
    else:
        members = [r for r in range(world) if r % 2 == color and not (world > 2 and r == world - 1)]
        assert sub.size == len(members), (sub.size, members)
        assert sub.rank == sorted(members, reverse=True).index(rank)
        n = 300_000
        x = np.full(n, rank + 1, np.float32)
        d = to_dev(x)
        sub.allreduce(d, d, n, "float32", "sum", stream=s)
        sub.synchronize(s)
        np.testing.assert_array_equal(from_dev(d, x), np.full(n, sum(m + 1 for m in members), np.float32))
        rt.free(d)
        sub.destroy()
    # the parent still works after the split
    d = to_dev(np.ones(10, np.float32))
    comm.allreduce(d, d, 10, "float32", "sum", stream=s)
    comm.synchronize(s)
    np.testing.assert_array_equal(from_dev(d, np.ones(10, np.float32)), np.full(10, world, np.float32))
    print("OK")
elif case == "impostor":
    for sock in impostors:  # each was refused: closed without an answer
        assert sock.recv(64) == b""
        sock.close()
    d = to_dev(np.ones(1000, np.float32))
    comm.allreduce(d, d, 1000, "float32", "sum", stream=s)
    comm.synchronize(s)
    np.testing.assert_array_equal(from_dev(d, np.ones(1000, np.float32)), np.full(1000, world, np.float32))
    print("OK", comm.transport)
elif case == "async":
    # The launch returns at once although the peer joins later: the small
    # all-reduce is tried on this thread (the stream is idle), gives up after
    # a short spin, and a device worker finishes it; the stream reports
    # not-ready meanwhile.
    x = np.ones(10, np.float32)
    d = to_dev(x)
    if rank == 1:
        time.sleep(1.0)
    t0 = time.monotonic()
    comm.allreduce(d, d, 10, "float32", "sum", stream=s)
    launched = time.monotonic() - t0
    if rank == 0:
        assert launched < 0.5, launched
        assert not rt.stream_query(s)
        assert comm.query(comm.last_seq) == "occlInProgress"
    comm.synchronize(s)
    np.testing.assert_array_equal(from_dev(d, x), np.full(10, world, np.float32))
    print("OK")
elif case == "order":
    # Earlier work queued on the stream: the small all-reduce is not tried
    # on this thread (the stream is busy) but queued behind it, and reduces
    # what that work wrote; the launch returns at once.
    d = to_dev(np.zeros(10, np.int32))
    rt.launch_sleep(s, 300_000)
    rt.launch_fill_i32(s, d, 10, rank + 1, False)
    t0 = time.monotonic()
    comm.allreduce(d, d, 10, "int32", "sum", stream=s)
    assert time.monotonic() - t0 < 0.25, time.monotonic() - t0
    assert not rt.stream_query(s)
    comm.synchronize(s)
    np.testing.assert_array_equal(from_dev(d, np.zeros(10, np.int32)),
                                  np.full(10, world * (world + 1) // 2, np.int32))
    print("OK")
elif case == "lockstep":
    # Many small all-reduces and reduces in a row, some with a rank late (so
    # some finish on the launching thread and some on a worker), each
    # checked: rounds, slots and sequence numbers stay in step across both.
    x = np.zeros(3, np.float64)
    d = to_dev(x)
    g = np.random.default_rng(7)  # same draws on every rank
    for i in range(300):
        late = g.integers(0, world + 3)
        if late == rank:
            time.sleep(0.002)
        rt.memcpy(d, np.full(3, float(i + rank)).ctypes.data, 24, rt.HostToDevice)
        if i % 3 == 2:
            comm.reduce(d, d, 3, "float64", "sum", root=i % world, stream=s)
        else:
            comm.allreduce(d, d, 3, "float64", "sum", stream=s)
        comm.synchronize(s)
        if i % 3 != 2 or rank == i % world:
            want = sum(float(i + r) for r in range(world))
            np.testing.assert_array_equal(from_dev(d, x), np.full(3, want))
    print("OK")
elif case == "mismatch":
    d = to_dev(np.ones(10 + rank, np.float32))
    comm.allreduce(d, d, 10 + rank, "float32", "sum", stream=s)
    try:
        comm.synchronize(s)
    except oc.OcclError as e:
        print("ERROR", e.name, e)
    else:
        raise AssertionError("mismatched sizes must fail")
elif case == "dead":
    d = to_dev(np.ones(10, np.float32))
    if rank == 1:
        os._exit(3)
    comm.allreduce(d, d, 10, "float32", "sum", stream=s)
    t0 = time.monotonic()
    try:
        comm.synchronize(s)
    except oc.OcclError as e:
        print("ERROR", e.name, round(time.monotonic() - t0, 2), e)
    else:
        raise AssertionError("a dead peer must fail the collective")
elif case == "bigchunk":
    # OCCL_TCP_CHUNK at its 1 GiB maximum, a 400 KB all-reduce (pipelined over
    # TCP): the staging buffers are sized from the message, not the setting
    # (they took nranks x 1 GiB).
    n = 100_000
    d = to_dev(np.full(n, rank + 1, np.float32))
    comm.allreduce(d, d, n, "float32", "sum", stream=s)
    comm.synchronize(s)
    np.testing.assert_array_equal(from_dev(d, np.zeros(n, np.float32)),
                                  np.full(n, world * (world + 1) // 2, np.float32))
    # VmHWM: this process's peak since exec (ru_maxrss would include the
    # launching process's peak: Linux carries it across fork and exec).
    with open("/proc/self/status") as f:
        hwm_kib = int(next(line for line in f if line.startswith("VmHWM:")).split()[1])
    print("OK", hwm_kib // 1024)
elif case == "capture":
    # An all-reduce (small: it has an attempt) and a large broadcast recorded
    # in a stream capture: nothing runs at capture, each replay runs both on
    # what the buffers hold then; after the communicator is destroyed, a
    # replay fails instead of touching it.
    n, nb = 1000, 3 * (1 << 20) // 4
    d = to_dev(np.zeros(n, np.float32))
    b = to_dev(np.zeros(nb, np.float32))
    rt.stream_begin_capture(s, rt.CaptureModeGlobal)
    comm.allreduce(d, d, n, "float32", "sum", stream=s)
    comm.broadcast(b, b, nb, "float32", root=world - 1, stream=s)
    g = rt.stream_end_capture(s)
    assert rt.graph_node_count(g) == 2
    x = rt.graph_instantiate(g)
    for i in range(3):
        xs = [data(30 + i, r, n, np.float32) for r in range(world)]
        bs = [data(40 + i, r, nb, np.float32) for r in range(world)]
        rt.memcpy(d, xs[rank].ctypes.data, xs[rank].nbytes, rt.HostToDevice)
        rt.memcpy(b, bs[rank].ctypes.data, bs[rank].nbytes, rt.HostToDevice)
        rt.graph_launch(x, s)
        comm.synchronize(s)
        np.testing.assert_allclose(from_dev(d, xs[rank]), sum(xs), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(from_dev(b, bs[rank]), bs[world - 1])
    comm.barrier(stream=s)
    comm.synchronize(s)
    comm.destroy()
    rt.graph_launch(x, s)
    try:
        rt.stream_synchronize(s)
    except rt.OpenRegError as e:  # the replay's failure, at the stream's synchronization
        print("REPLAY FAILED", e)
    else:
        raise AssertionError("a replay on a destroyed communicator did not fail")
    rt.graph_exec_destroy(x)
    rt.graph_destroy(g)
    print("OK")
    sys.exit(0)
elif case == "invalid":
    d = to_dev(np.ones(10, np.float32))
    for call, why in [(lambda: comm.allreduce(d, d, 10, "float32", "band"), "band"),
                      (lambda: comm.allreduce(d, d, 10_000, "float32", "sum"), "allocation"),
                      (lambda: comm.broadcast(d, d, 10, "float32", root=world), "root"),
                      (lambda: comm.allreduce(12345, 12345, 10, "float32", "sum"), "device"),
                      # Byte counts that wrap around size_t once multiplied
                      # used to pass the buffer checks (found by fuzzing).
                      (lambda: comm.allreduce(d, d, 2 ** 62, "float32", "sum"), "too large"),
                      (lambda: comm.allgather(d, d, 2 ** 61, "float64"), "too large"),
                      (lambda: comm.allreduce(d, d, 2 ** 64 - 1, "uint8", "sum"), "allocation")]:
        try:
            call()
        except oc.OcclError as e:
            assert e.name == "occlInvalidArgument" and why in str(e), e
        else:
            raise AssertionError(why)
    comm.barrier(stream=s)  # the communicator still works
    comm.synchronize(s)
    print("OK")
comm.destroy()
