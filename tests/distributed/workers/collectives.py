"""One rank of the c10d correctness tests: every operation of the device's
c10d backend (tests.target: ``occl`` on openreg) on device tensors against a
CPU oracle. Every rank builds every rank's input from a shared seed, so each
can compute the expected result. Hypothesis (derandomized, so all ranks draw
the same examples) picks shapes and values. The parts marked openreg_only
check OCCL itself and run on openreg only."""

import datetime
import os
import sys
import time

# Started as a script: the repository root, for tests.target.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))

import pytest  # noqa: E402  (the openreg_only marker)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.target import DEVICE, DIST_BACKEND, IS_OPENREG, device_module  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group(DIST_BACKEND, timeout=datetime.timedelta(seconds=60))
dev = torch.device(DEVICE, rank % device_module.device_count())
device_module.set_device(dev)
R = dist.ReduceOp

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
COMPLEX = [torch.complex64, torch.complex128]
ALL = FLOATS + INTS + [torch.bool] + COMPLEX


def ops_for(dtype):
    if dtype in FLOATS:
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG, "premul"]
    if dtype in INTS:
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG, R.BAND, R.BOR, R.BXOR]
    if dtype == torch.bool:
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]
    return [R.SUM, R.AVG, "premul"]  # c10d itself refuses PRODUCT on complex


def make(seed, r, shape, dtype):
    g = torch.Generator().manual_seed(seed * 97 + r)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    if dtype in INTS:
        lo = 0 if dtype == torch.uint8 else -5
        return torch.randint(lo, 6, shape, generator=g).to(dtype)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype) if dtype not in COMPLEX \
        else torch.randn(shape, generator=g, dtype=dtype)


def oracle(xs, op, dtype):
    acc_t = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    xs = [x.to(acc_t) for x in xs]
    if op == "premul":
        out = xs[0] * 0.5
        for x in xs[1:]:
            out = out + x * 0.5
        return out.to(dtype)
    out = xs[0]
    for x in xs[1:]:
        if dtype == torch.bool:
            out = {R.SUM: out | x, R.MAX: out | x, R.BOR: out | x, R.PRODUCT: out & x,
                   R.MIN: out & x, R.BAND: out & x, R.BXOR: out ^ x}[op]
        else:
            out = {R.SUM: lambda: out + x, R.AVG: lambda: out + x, R.PRODUCT: lambda: out * x,
                   R.MIN: lambda: torch.minimum(out, x), R.MAX: lambda: torch.maximum(out, x),
                   R.BAND: lambda: out & x, R.BOR: lambda: out | x, R.BXOR: lambda: out ^ x}[op]()
    if op == R.AVG:
        out = torch.div(out, world, rounding_mode="trunc") if dtype in INTS else out / world
    return out.to(dtype)


def check(got, want):
    got = got.cpu()
    if want.dtype.is_floating_point or want.is_complex():
        torch.testing.assert_close(got, want, equal_nan=True)
    else:
        assert torch.equal(got, want), (got, want)


shapes = st.lists(st.integers(0, 6), min_size=1, max_size=3).map(tuple)
SETTINGS = settings(derandomize=True, max_examples=int(os.environ.get("EXAMPLES", "6")),
                    deadline=None, database=None, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 1000))
def test_allreduce(shape, seed):
    for dtype in ALL:
        for op in ops_for(dtype):
            xs = [make(seed, r, shape, dtype) for r in range(world)]
            t = xs[rank].to(dev)
            rop = dist._make_nccl_premul_sum(0.5) if op == "premul" else op
            dist.all_reduce(t, op=rop)
            check(t, oracle(xs, op, dtype))


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 1000), root=st.integers(0, world - 1))
def test_rooted_and_gathering(shape, seed, root):
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64):
        xs = [make(seed, r, shape, dtype) for r in range(world)]
        # broadcast
        t = xs[rank].to(dev)
        dist.broadcast(t, src=root)
        check(t, xs[root])
        # reduce
        t = xs[rank].to(dev)
        op = R.MAX if dtype == torch.bool else R.SUM
        if dtype.is_complex:
            op = R.SUM
        dist.reduce(t, dst=root, op=op)
        if rank == root:
            check(t, oracle(xs, op, dtype))
        # all_gather (list) and all_gather_into_tensor
        outs = [torch.empty(shape, dtype=dtype, device=dev) for _ in range(world)]
        dist.all_gather(outs, xs[rank].to(dev))
        for r in range(world):
            check(outs[r], xs[r])
        flat = torch.empty((world * xs[0].numel(),), dtype=dtype, device=dev)
        dist.all_gather_into_tensor(flat, xs[rank].to(dev).reshape(-1))
        check(flat, torch.cat([x.reshape(-1) for x in xs]))
        # gather and scatter
        gl = [torch.empty(shape, dtype=dtype, device=dev) for _ in range(world)] if rank == root else None
        dist.gather(xs[rank].to(dev), gl, dst=root)
        if rank == root:
            for r in range(world):
                check(gl[r], xs[r])
        sl = [make(seed + 1, r, shape, dtype).to(dev) for r in range(world)] if rank == root else None
        out = torch.empty(shape, dtype=dtype, device=dev)
        dist.scatter(out, sl, src=root)
        check(out, make(seed + 1, rank, shape, dtype))
        # reduce_scatter (list) and reduce_scatter_tensor
        if dtype != torch.bool:
            ins = [[make(seed + 2 + q, r, shape, dtype) for q in range(world)] for r in range(world)]
            out = torch.empty(shape, dtype=dtype, device=dev)
            dist.reduce_scatter(out, [x.to(dev) for x in ins[rank]], op=R.SUM)
            check(out, oracle([ins[r][rank] for r in range(world)], R.SUM, dtype))
            inp = torch.cat([x.reshape(-1) for x in ins[rank]]).to(dev)
            out = torch.empty((xs[0].numel(),), dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(out, inp, op=R.SUM)
            check(out, oracle([ins[r][rank].reshape(-1) for r in range(world)], R.SUM, dtype))


@SETTINGS
@given(seed=st.integers(0, 1000), splits=st.lists(st.lists(st.integers(0, 5), min_size=4, max_size=4),
                                                  min_size=4, max_size=4), cols=st.integers(1, 3))
def test_all_to_all_uneven(seed, splits, cols):
    # splits[src][dst] rows go from src to dst
    send = [splits[rank][p] for p in range(world)]
    recv = [splits[p][rank] for p in range(world)]
    inputs = [make(seed, r, (sum(splits[r][:world]), cols), torch.float32) for r in range(world)]
    out = torch.empty((sum(recv), cols), device=dev)
    dist.all_to_all_single(out, inputs[rank].to(dev), recv, send)
    want = []
    for p in range(world):
        start = sum(splits[p][:rank])
        want.append(inputs[p][start:start + splits[p][rank]])
    check(out, torch.cat(want))
    # list form
    outs = [torch.empty((splits[p][rank], cols), device=dev) for p in range(world)]
    ins = list(inputs[rank].to(dev).split(send))
    dist.all_to_all(outs, ins)
    for p in range(world):
        check(outs[p], want[p])


def test_noncontiguous_large_p2p_coalesced_objects():
    # non-contiguous tensors
    base = make(3, rank, (64, 33), torch.float32)
    t = base.to(dev).t()
    assert not t.is_contiguous()
    dist.all_reduce(t)
    check(t, sum(make(3, r, (64, 33), torch.float32) for r in range(world)).t())
    # large messages: the pipelined all-reduce, multi-round broadcast/gathers
    n = 3 * (1 << 20) + 5
    xs = [make(4, r, (n,), torch.float32) for r in range(world)]
    t = xs[rank].to(dev)
    dist.all_reduce(t)
    torch.testing.assert_close(t.cpu(), oracle(xs, R.SUM, torch.float32))
    flat = torch.empty(world * n, device=dev)
    dist.all_gather_into_tensor(flat, xs[rank].to(dev))
    check(flat, torch.cat(xs))
    out = torch.empty(n // world, device=dev)
    dist.reduce_scatter_tensor(out, xs[rank].to(dev)[: (n // world) * world])
    torch.testing.assert_close(out.cpu(), sum(x[: (n // world) * world] for x in xs)[rank * (n // world):(rank + 1) * (n // world)])
    # send/recv around the ring (batched: both directions at once), and isend/irecv
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    s = torch.full((300_000,), float(rank), device=dev)
    r = torch.empty(300_000, device=dev)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, s, nxt), dist.P2POp(dist.irecv, r, prv)])
    for q in reqs:
        q.wait()
    check(r, torch.full((300_000,), float(prv)))
    if rank == 0:
        dist.send(torch.arange(5, device=dev), dst=1, tag=7)
    elif rank == 1:
        got = torch.empty(5, dtype=torch.long, device=dev)
        dist.recv(got, src=0, tag=7)
        check(got, torch.arange(5))
        got = torch.empty(3, device=dev)
        src = dist.recv(got)  # any source
        assert src == 0, src
        check(got, torch.ones(3))
    if rank == 0:
        dist.send(torch.ones(3, device=dev), dst=1)
    # coalesced all-reduce (one Work), async work and futures
    ts = [torch.full((k + 1,), float(rank + k), device=dev) for k in range(4)]
    dist.all_reduce_coalesced(ts)
    for k in range(4):
        check(ts[k], torch.full((k + 1,), float(sum(r + k for r in range(world)))))
    t = torch.ones(10, device=dev)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    work.wait()
    assert work.is_completed() and work.is_success() and work.exception() is None
    (res,) = fut.wait()
    check(res, torch.full((10,), float(world)))
    # object collectives
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(world)]
    lst = [f"hello from {rank}"]
    dist.broadcast_object_list(lst, src=0)
    assert lst == ["hello from 0"]
    dist.barrier()


@pytest.mark.openreg_only
def busy_stream():
    """300 ms of work on openreg's current stream (its private _sleep)."""
    torch.openreg._sleep(300_000)


@pytest.mark.openreg_only
def check_transport():
    """How this rank reached its peers (OCCL's transport attribute)."""
    transport = dist.group.WORLD._get_backend(dev).transport
    assert transport == os.environ["OCCL_EXPECT_TRANSPORT"], transport


def test_small_allreduce_stream_order():
    # On openreg, a small all-reduce is tried on the calling thread only when
    # OCCL's stream is idle, which it is not while the caller's stream still
    # has work: here a 300 ms sleep and an asynchronous copy into the tensor
    # behind it (elsewhere, the copy alone). The launch returns at once, the
    # all-reduce reduces what the copy wrote, and work on the current stream
    # after Work.wait() sees it.
    src = torch.full((4,), float(rank + 1)).pin_memory()
    t = torch.zeros(4, device=dev)
    if IS_OPENREG:
        busy_stream()
    t.copy_(src, non_blocking=True)
    t0 = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    assert time.monotonic() - t0 < 0.25, time.monotonic() - t0
    work.wait()
    want = float(sum(r + 1 for r in range(world)))
    check(t * 2, torch.full((4,), 2 * want))
    # In lock step (the fast path on every rank that finds its peers there)
    # and with a rank late (the others' attempts give up and a worker
    # finishes), results and order hold; sync and async launches mixed.
    for i in range(100):
        if i % 10 == rank:
            time.sleep(0.002)
        t = torch.full((1,), float(i + rank), device=dev)
        if i % 2:
            dist.all_reduce(t)
        else:
            dist.all_reduce(t, async_op=True).wait()
        t += 1  # eager work after the collective on the current stream
        check(t, torch.full((1,), float(sum(i + r for r in range(world)) + 1)))


def test_large_allreduce_every_dtype():
    # Above 256 KiB OCCL's all-reduce takes its pipelined paths (zero copy,
    # the slots, or over TCP the direct pipeline): every dtype and op, in place
    # and out of place (non-contiguous), with a size that is no multiple of
    # the chunk or of the number of ranks. With OCCL_TCP_CHUNK set (bytes of
    # a rank's share of a chunk) the size is a whole number of chunks plus
    # one element, so the last chunk leaves some ranks an empty share.
    share = int(os.environ.get("OCCL_TCP_CHUNK", "0"))
    for i, dtype in enumerate(ALL):
        es = torch.empty((), dtype=dtype).element_size()
        if share:
            chunk = world * (share // es)
            n = (max(1, (300_000 // es) // chunk) + 1) * chunk + 1
        else:
            n = 300_007 // es + 2 * 131_071 // es
        for op in ops_for(dtype):
            xs = [make(11 + i, r, (n,), dtype) for r in range(world)]
            rop = dist._make_nccl_premul_sum(0.5) if op == "premul" else op
            t = xs[rank].to(dev)
            dist.all_reduce(t, op=rop)
            check(t, oracle(xs, op, dtype))
        # non-contiguous (the glue reduces a dense copy and copies it back)
        xs = [make(5 + i, r, (2, n), dtype) for r in range(world)]
        t = xs[rank].to(dev)[:, : n - 1]
        assert not t.is_contiguous()
        dist.all_reduce(t)
        check(t, oracle([x[:, : n - 1] for x in xs], R.SUM, dtype))


only = os.environ.get("ONLY")
for fn in [test_allreduce, test_rooted_and_gathering, test_all_to_all_uneven,
           test_noncontiguous_large_p2p_coalesced_objects, test_small_allreduce_stream_order,
           test_large_allreduce_every_dtype]:
    if only and fn.__name__ != only:
        continue
    if fn is test_all_to_all_uneven and world > 4:
        continue
    fn()
    print("passed", fn.__name__, flush=True)
if "OCCL_EXPECT_TRANSPORT" in os.environ:  # set by openreg-only tests
    check_transport()
dist.destroy_process_group()
print("OK")
