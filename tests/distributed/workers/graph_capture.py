"""One rank of the graph-capture tests of the device's c10d backend
(tests/distributed/test_graph_capture.py): collectives and a DDP training step
captured in a graph (torch.accelerator.Graph) and replayed, against the same
calls made eagerly on the same ranks. Run with 2 ranks; argv[1] is the case."""

import datetime
import os
import sys

# Started as a script: the repository root, for tests.target.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from tests.target import DEVICE, DIST_BACKEND, device_module  # noqa: E402

case = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
assert world == 2
dev = torch.device(DEVICE, rank % device_module.device_count())
device_module.set_device(dev)
timeout = float(os.environ.get("CAPTURE_PG_TIMEOUT", "60"))
dist.init_process_group(DIST_BACKEND, device_id=dev,
                        timeout=datetime.timedelta(seconds=timeout))


def warm_up(fn, n):
    """fn() n times on a side stream (the CUDA graphs recipe)."""
    s = device_module.Stream()
    s.wait_stream(device_module.current_stream())
    with device_module.stream(s):
        for _ in range(n):
            fn()
    device_module.current_stream().wait_stream(s)


def collectives(x, outs):
    """Every collective of the issue on static buffers; results in outs."""
    a, g, rs, b, p2p = outs
    a.copy_(x)
    dist.all_reduce(a)
    dist.all_gather_into_tensor(g, x)
    dist.reduce_scatter_tensor(rs, torch.cat([x, x * 2]))
    b.copy_(x)
    dist.broadcast(b, src=1)
    peer = 1 - rank
    ops = [dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, p2p, peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()


def new_outs(n):
    z = lambda k: torch.zeros(k, device=dev)  # noqa: E731
    return [z(n), z(n * world), z(n), z(n), z(n)]


def check_collectives():
    n = 64
    static_x = torch.zeros(n, device=dev)
    outs = new_outs(n)
    warm_up(lambda: collectives(static_x, outs), 2)
    g = torch.accelerator.Graph()
    with device_module.graph(g):
        collectives(static_x, outs)
    gen = torch.Generator().manual_seed(10 + rank)
    for step in range(3):
        x = torch.randn(n, generator=gen)
        static_x.copy_(x)
        g.replay()
        want = new_outs(n)
        collectives(x.to(dev), want)
        for i, (got, w) in enumerate(zip(outs, want)):
            assert torch.equal(got.cpu(), w.cpu()), (rank, step, i)
    print(f"rank {rank}: collectives replayed as eager")


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 4)).to(dev)


def check_ddp():
    gen = torch.Generator().manual_seed(20 + rank)
    data = [(torch.randn(16, 32, generator=gen), torch.randn(16, 4, generator=gen))
            for _ in range(5)]

    def step(model, opt, x, y):
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    # Eager DDP: the oracle.
    ref = DDP(mlp())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    ref_losses = [step(ref, ref_opt, x.to(dev), y.to(dev)).detach().cpu() for x, y in data]

    # DDP constructed on a side stream and warmed up there for 11 iterations
    # (DDP rebuilds its buckets and samples its timings early), as the CUDA
    # graphs notes say for DDP.
    static_x = torch.zeros(16, 32, device=dev)
    static_y = torch.zeros(16, 4, device=dev)
    s = device_module.Stream()
    s.wait_stream(device_module.current_stream())
    with device_module.stream(s):
        model = DDP(mlp())
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        initial = [p.detach().clone() for p in model.parameters()]
        for _ in range(11):
            step(model, opt, static_x, static_y)
    device_module.current_stream().wait_stream(s)
    with torch.no_grad():
        for p, p0 in zip(model.parameters(), initial):
            p.copy_(p0)
    g = torch.accelerator.Graph()
    with device_module.graph(g):
        static_loss = step(model, opt, static_x, static_y)
    losses = []
    for x, y in data:
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        losses.append(static_loss.detach().cpu())
    for i, (got, want) in enumerate(zip(losses, ref_losses)):
        assert torch.equal(got, want), (rank, i, got, want)
    for got, want in zip(model.parameters(), ref.parameters()):
        assert torch.equal(got.detach().cpu(), want.detach().cpu()), rank
    print(f"rank {rank}: DDP step replayed as eager")


def check_fsdp2():
    """An FSDP2 (fully_shard) training step captured and replayed: the same
    losses and shards as the eager step, bit for bit. FSDP2 gathers the
    parameters before each forward and backward, reduce-scatters the
    gradients, on streams of its own, and frees what it gathered: warmed up on
    a side stream, the capture records all of it, the graph's memory pool
    keeping its buffers."""
    from torch.distributed.fsdp import fully_shard

    gen = torch.Generator().manual_seed(30 + rank)
    data = [(torch.randn(16, 32, generator=gen), torch.randn(16, 4, generator=gen))
            for _ in range(5)]

    def sharded():
        m = mlp()
        for layer in m:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        return fully_shard(m)

    def step(model, opt, x, y):
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    ref = sharded()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    ref_losses = [step(ref, ref_opt, x.to(dev), y.to(dev)).detach().cpu() for x, y in data]

    static_x = torch.zeros(16, 32, device=dev)
    static_y = torch.zeros(16, 4, device=dev)
    s = device_module.Stream()
    s.wait_stream(device_module.current_stream())
    with device_module.stream(s):
        model = sharded()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        initial = [p.detach().clone() for p in model.parameters()]
        for _ in range(3):
            step(model, opt, static_x, static_y)
    device_module.current_stream().wait_stream(s)
    with torch.no_grad():
        for p, p0 in zip(model.parameters(), initial):
            p.copy_(p0)
    g = torch.accelerator.Graph()
    with device_module.graph(g):
        static_loss = step(model, opt, static_x, static_y)
    losses = []
    for x, y in data:
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        losses.append(static_loss.detach().cpu())
    for i, (got, want) in enumerate(zip(losses, ref_losses)):
        assert torch.equal(got, want), (rank, i, got, want)
    for got, want in zip(model.parameters(), ref.parameters()):
        assert torch.equal(got.to_local().detach().cpu(), want.to_local().detach().cpu())
    print(f"rank {rank}: FSDP2 step replayed as eager", flush=True)


def capture_all_reduce():
    t = torch.ones(8, device=dev)
    warm_up(lambda: dist.all_reduce(t.clone()), 1)
    g = torch.accelerator.Graph()
    with device_module.graph(g):
        dist.all_reduce(t)
    return g, t


def check_peer_does_not_replay():
    g, t = capture_all_reduce()
    store = dist.distributed_c10d._get_default_store()
    if rank == 1:  # alive, but never replays: rank 0 times out waiting for it
        store.wait(["rank0-done"], datetime.timedelta(seconds=120))
        store.set("rank1-bye", "1")
        os._exit(0)
    if rank == 0:
        g.replay()  # rank 1 never replays: the all-reduce times out
        try:
            device_module.synchronize()
        except RuntimeError as e:
            print(f"rank {rank}: replay failed: {e}")
        else:
            raise AssertionError("the replay without a peer did not fail")
        # The communicator is broken now: the next collective says why.
        try:
            dist.all_reduce(torch.ones(2, device=dev))
            device_module.synchronize()
        except RuntimeError as e:
            print(f"rank {rank}: next collective: {e}")
        else:
            raise AssertionError("the broken communicator ran a collective")
        store.set("rank0-done", "1")
        store.wait(["rank1-bye"], datetime.timedelta(seconds=60))  # (rank 0 hosts the store)
        os._exit(0)  # the group cannot be shut down cleanly with a broken communicator


def check_destroyed_group():
    g, t = capture_all_reduce()
    dist.destroy_process_group()
    g.replay()
    try:
        device_module.synchronize()
    except RuntimeError as e:
        print(f"rank {rank}: replay failed: {e}")
    else:
        raise AssertionError("a replay on a destroyed group did not fail")
    del g
    sys.exit(0)


def check_other_thread():
    # While this thread captures the group's collectives, another thread's
    # collective on the group is refused (it would be recorded into this
    # capture, or run beside its replays); the capture goes on.
    import threading

    t = torch.ones(8, device=dev)
    warm_up(lambda: dist.all_reduce(t.clone()), 1)
    errors = []

    def other():
        device_module.set_device(dev)
        try:
            dist.all_reduce(torch.ones(4, device=dev))
        except RuntimeError as e:
            errors.append(str(e))

    g = torch.accelerator.Graph()
    with device_module.graph(g):
        dist.all_reduce(t)
        th = threading.Thread(target=other)
        th.start()
        th.join(timeout=60)
        assert not th.is_alive()
        t.mul_(2)
    assert len(errors) == 1 and "captured into a graph" in errors[0], errors
    print(f"rank {rank}: other thread refused: {errors[0]}")
    for _ in range(2):
        t.fill_(1)
        g.replay()
        assert torch.equal(t.cpu(), torch.full((8,), 4.0)), t.cpu()
    dist.barrier()
    print(f"rank {rank}: capture replayed")


{"collectives": check_collectives, "other_thread": check_other_thread, "ddp": check_ddp,
 "peer_does_not_replay": check_peer_does_not_replay,
 "destroyed_group": check_destroyed_group, "fsdp2": check_fsdp2}[case]()
dist.destroy_process_group()
