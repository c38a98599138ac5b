"""DTensor random operators on the device under test (test_dtensor_random.py;
tests.target names the device and its c10d backend: openreg and occl).

``spmd`` (one process per rank, 4 ranks over the c10d backend, rank r on
device r % device_count() as in workers/groups.py): every rank seeds with the same
seed; DTensor's OffsetBasedRNGTracker draws rank r's shard from offset
b + start(r) of the Philox stream and then moves every rank's offset to
b + numel rounded up to 4. Each check compares every rank's shard with the
stream itself, drawn on a plain device tensor from the same (seed, offset),
and the ranks with each other (all-gathers over the backend), and prints
``CHECK <name> ok ...`` or ``CHECK <name> FAIL stream: ... ;; layout: ...``
(see ``run`` below for the two groups).

``local`` (one process): uniform_ on a sharded DTensor in LocalTensor mode
(4 simulated ranks on PyTorch's fake process group, as PyTorch's own
``*WithLocalTensor`` DTensor tests run), and the device module's
``set_rng_state`` under FakeTensorMode, which LocalTensor mode relies on. Prints one
``RESULT <name> ...`` line per step.
"""
import datetime
import os
import sys
import traceback

# Started as a script: the repository root, for tests.target.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.tensor._random as dtrandom  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.tensor import DeviceMesh, Replicate, Shard  # noqa: E402

from tests.target import DEVICE, DIST_BACKEND, device_module  # noqa: E402

SEED = 1234


def offset_of(state: torch.Tensor) -> int:
    return int(state[8:].view(torch.int64).item())


def with_offset(state: torch.Tensor, offset: int) -> torch.Tensor:
    s = state.clone()
    s[8:] = torch.tensor([offset], dtype=torch.int64).view(torch.uint8)
    return s


def round4(n: int) -> int:
    return (n + 3) // 4 * 4


def stream(dev, state, start, n, fill):
    """Elements start .. start+n-1 of the Philox stream of ``state``'s seed,
    as ``fill`` draws them on a plain device tensor of n elements (element
    i is stream position start+i); the generator is left as it was."""
    saved = device_module.get_rng_state()
    device_module.set_rng_state(with_offset(state, start))
    t = fill(torch.empty(n, device=dev)).cpu()
    device_module.set_rng_state(saved)
    return t


def uniform(t):
    return torch.nn.init.uniform_(t, a=-1.0, b=1.0)


def normal(t):
    return torch.nn.init.normal_(t, mean=0.5, std=2.0)


def dropout(t):
    return F.dropout(t.fill_(1.0), p=0.5, training=True)


def sane_uniform(x):
    if not (x.min() >= -1 and x.max() <= 1 and x.unique().numel() == x.numel()):
        return f"uniform(-1, 1) values out of range or repeated: {x.flatten()[:6].tolist()}"


def sane_normal(x):
    if not (abs(x.mean() - 0.5) < 0.8 and 1.2 < x.std() < 2.8):
        return f"normal(0.5, 2) mean {x.mean():.3f} std {x.std():.3f}"


def sane_dropout(x):
    kept = (x != 0).float().mean().item()
    if not (set(x.unique().tolist()) == {0.0, 2.0} and 0.25 < kept < 0.75):
        return f"dropout(p=0.5) of ones: values {x.unique().tolist()}, kept {kept:.2f}"


# ---------------------------------------------------------------- spmd ----

def spmd():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    assert world == 4, world
    dev = torch.device(DEVICE, rank % device_module.device_count())
    device_module.set_device(dev)
    dist.init_process_group(DIST_BACKEND, device_id=dev, timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(SEED)

    mesh = DeviceMesh(DEVICE, [0, 1, 2, 3])
    mesh2 = DeviceMesh(DEVICE, [[0, 1], [2, 3]])
    coord2 = mesh2.get_coordinate()
    assert tuple(coord2) == (rank // 2, rank % 2), coord2

    def gather(t):
        """Every rank's tensor (same shape everywhere), on the CPU, by rank."""
        t = t.contiguous().to(dev)
        out = torch.empty((world,) + tuple(t.shape), dtype=t.dtype, device=dev)
        dist.all_gather_single(out, t)
        return list(out.cpu().unbind(0))

    def states():
        return [offset_of(s.view(torch.uint8)) for s in
                gather(device_module.get_rng_state().view(torch.int64))]

    def run(name, make, op, fill, start_of, *, same_shards=None, full_is_stream=False,
            sane=None):
        """Run ``op`` on the DTensor ``make()`` and print what differs from
        DTensor's promise, in two groups:

        stream: rank r's shard is the Philox stream from the offset DTensor's
          tracker chose for it (b + its start increment, from
          _compute_rng_offsets), element by element; every rank starts at the
          same b and ends at b + round4(numel).
          ``sane(full)`` names what is wrong with the values themselves.
        layout: that start increment is ``start_of(r)`` (shard index times
          shard numel); ranks hold equal shards iff ``same_shards`` gives
          them the same index; full_tensor() is the op's draw on a plain
          tensor of the full shape from b if ``full_is_stream``.
        """
        try:
            before = device_module.get_rng_state()
            b = offset_of(before)
            dt = make()
            out = op(dt)
            out = dt if out is None else out
            tstart = int(dtrandom._rng_tracker._compute_rng_offsets(out._spec)[0])
            local = out.to_local().cpu()
            full = out.full_tensor().cpu()  # all-gather over the backend
            locals_ = gather(local)
            starts = gather(torch.tensor([b, tstart]))
            after = states()
            numel = full.numel()

            stream_p, layout_p = [], []
            if len({int(s[0]) for s in starts}) != 1:
                stream_p.append(f"offsets before the op differ: {[int(s[0]) for s in starts]}")
            got_at = stream(dev, before, b + tstart, local.numel(), fill).view(local.shape)
            if not torch.equal(local, got_at):
                stream_p.append(
                    f"rank {rank} shard != stream[{b + tstart}:+{local.numel()}] (the tracker's "
                    f"offset): got {local.flatten()[:4].tolist()} want {got_at.flatten()[:4].tolist()}")
            want_after = b + round4(numel)
            if after != [want_after] * world:
                stream_p.append(f"offsets after the op {after}, want {want_after} on every rank")
            if device_module.get_rng_state()[:8].view(torch.int64).item() != SEED:
                stream_p.append("seed changed")
            if sane is not None and (why := sane(full)):
                stream_p.append(why)

            tstarts = [int(s[1]) for s in starts]
            want_starts = [start_of(r) for r in range(world)]
            if tstarts != want_starts:
                layout_p.append(f"tracker start increments by rank {tstarts}, want {want_starts} "
                                f"(local numel {local.numel()}, numel {numel})")
            if full_is_stream:
                ref = stream(dev, before, b, numel, fill).view(full.shape)
                if not torch.equal(full, ref):
                    rows = sorted({i for i, _ in (full != ref).nonzero().tolist()})
                    layout_p.append(f"full_tensor() != the op on a plain {tuple(full.shape)} tensor "
                                    f"from offset {b}: rows {rows} differ")
            shards = same_shards or {r: r for r in range(world)}
            for p in range(world):
                for q in range(p + 1, world):
                    eq = torch.equal(locals_[p], locals_[q])
                    if eq != (shards[p] == shards[q]):
                        layout_p.append(f"ranks {p} and {q}: shards equal={eq}, expected "
                                        f"{shards[p] == shards[q]}")
            if stream_p or layout_p:
                print(f"CHECK {name} FAIL stream: {' | '.join(stream_p) or 'ok'} ;; "
                      f"layout: {' | '.join(layout_p) or 'ok'}", flush=True)
            else:
                print(f"CHECK {name} ok b={b} start={tstart} after={want_after} "
                      f"shard[:3]={local.flatten()[:3].tolist()}", flush=True)
        except Exception as e:  # the same on every rank: no collective is left waiting
            print(f"CHECK {name} FAIL {type(e).__name__}: {e}".replace("\n", " "), flush=True)
            traceback.print_exc()

    import torch.distributed.tensor as dtensor

    def empty(shape, m, placements):
        return lambda: dtensor.empty(*shape, device_mesh=m, placements=placements)

    def ones(shape, m, placements):
        return lambda: dtensor.ones(*shape, device_mesh=m, placements=placements)

    # 1-D mesh: shards of 24 and 20 elements (multiples of 4): rank r's
    # shard is stream[b + numel_local * r ...], so the whole is the stream.
    run("uniform_shard0", empty((16, 6), mesh, [Shard(0)]), uniform, uniform,
        lambda r: 24 * r, full_is_stream=True, sane=sane_uniform)
    run("normal_shard0", empty((8, 10), mesh, [Shard(0)]), normal, normal,
        lambda r: 20 * r, full_is_stream=True, sane=sane_normal)
    run("uniform_replicate", empty((6, 6), mesh, [Replicate()]), uniform, uniform,
        lambda r: 0, same_shards={r: 0 for r in range(4)}, full_is_stream=True,
        sane=sane_uniform)
    run("dropout_shard0", ones((16, 8), mesh, [Shard(0)]), dropout, dropout,
        lambda r: 32 * r, full_is_stream=True, sane=sane_dropout)
    run("dropout_replicate", ones((8, 8), mesh, [Replicate()]), dropout, dropout,
        lambda r: 0, same_shards={r: 0 for r in range(4)}, full_is_stream=True,
        sane=sane_dropout)
    # Shard(1): shard r is still stream[b + 16 r ...] in its own row-major
    # order (so the gathered tensor is not the plain tensor's draw).
    run("uniform_shard1", empty((4, 16), mesh, [Shard(1)]), uniform, uniform,
        lambda r: 16 * r, sane=sane_uniform)
    # Shards of 3 elements: DTensor starts shard r at 3 r rounded up to 4.
    run("uniform_shard0_numel3", empty((4, 3), mesh, [Shard(0)]), uniform, uniform,
        lambda r: round4(3 * r), sane=sane_uniform)

    # 2-D 2x2 mesh, an (8, 8) tensor: shard index of each rank, as in
    # PyTorch's test_deterministic_uniform_2d.
    cases = [
        ([Shard(0), Shard(1)], {0: 0, 1: 1, 2: 2, 3: 3}, 16, False),
        ([Shard(1), Shard(0)], {0: 0, 1: 2, 2: 1, 3: 3}, 16, False),
        ([Shard(0), Replicate()], {0: 0, 1: 0, 2: 1, 3: 1}, 32, True),
        ([Replicate(), Shard(0)], {0: 0, 1: 1, 2: 0, 3: 1}, 32, True),
        ([Shard(0), Shard(0)], {0: 0, 1: 1, 2: 2, 3: 3}, 16, True),
        ([Replicate(), Replicate()], {0: 0, 1: 0, 2: 0, 3: 0}, 64, True),
    ]
    for placements, idx, local_numel, contiguous in cases:
        name = "mesh2d_" + "_".join(
            f"S{p.dim}" if isinstance(p, Shard) else "R" for p in placements)
        run(name, empty((8, 8), mesh2, placements), uniform, uniform,
            lambda r, idx=idx, n=local_numel: idx[r] * n, same_shards=idx,
            full_is_stream=contiguous, sane=sane_uniform)

    dist.destroy_process_group()
    print("OK", flush=True)


# --------------------------------------------------------------- local ----

def innermost(exc):
    """file:line:function of the deepest frame of ``exc`` in torch.distributed
    or the device module's package (torch_openreg for openreg), not counting
    the modes' __torch_dispatch__ (nor the dispatcher and FakeTensor machinery
    under them)."""
    torch_dir = os.path.dirname(torch.__file__)
    site = os.path.dirname(torch_dir)
    package = device_module.__name__.split(".")[0]
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename.startswith(os.path.join(torch_dir, "distributed"))
              or package in f.filename]
    frames = [f for f in frames if f.name != "__torch_dispatch__"]
    f = (frames or traceback.extract_tb(exc.__traceback__))[-1]
    base = torch_dir if f.filename.startswith(torch_dir) else site
    return f"{os.path.relpath(f.filename, base)}:{f.lineno}:{f.name}"


def local():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dev = torch.device(DEVICE, 0)

    # 1. set_rng_state under FakeTensorMode (LocalTensor mode calls it there
    # while DTensor propagates shardings).
    torch.manual_seed(SEED)
    state = with_offset(device_module.get_rng_state(), 8)
    try:
        with FakeTensorMode():
            device_module.set_rng_state(state)
        got = offset_of(device_module.get_rng_state())
        print(f"RESULT fake_mode_set_rng_state {'ok' if got == 8 else f'FAIL offset {got}'}",
              flush=True)
    except Exception as e:
        print(f"RESULT fake_mode_set_rng_state FAIL at {innermost(e)} {type(e).__name__}: "
              f"{str(e).splitlines()[0]}", flush=True)

    # 2. DTensor uniform_ on Shard(0) under LocalTensorMode(4). PyTorch's
    # fake backend registers cpu/cuda/hpu/xpu only, so it is named for
    # the device explicitly.
    W = 4
    dist.init_process_group(f"cpu:fake,{DEVICE}:fake", rank=0, world_size=W, store=FakeStore())
    mesh = DeviceMesh(DEVICE, list(range(W)))

    def attempt(tag):
        from torch.distributed.tensor import distribute_tensor

        dtrandom._rng_tracker = None
        torch.manual_seed(SEED)
        before = device_module.get_rng_state()
        try:
            with LocalTensorMode(frozenset(range(W))):
                dt = distribute_tensor(torch.zeros(16, 6, device=dev), mesh, [Shard(0)])
                torch.nn.init.uniform_(dt, a=-1.0, b=1.0)
                lt = dt.to_local()
                assert isinstance(lt, LocalTensor), type(lt)
                shards = {r: t.cpu() for r, t in lt._local_tensors.items()}
            problems = []
            for r in range(W):
                want = stream(dev, before, 24 * r, 24, uniform).view(4, 6)
                if not torch.equal(shards[r], want):
                    problems.append(f"rank {r} shard {shards[r].flatten()[:4].tolist()} != "
                                    f"stream[{24 * r}:] {want.flatten()[:4].tolist()}")
            if any(torch.equal(shards[p], shards[q]) for p in range(W) for q in range(p + 1, W)):
                problems.append("two ranks hold the same shard")
            full = torch.cat([shards[r] for r in range(W)])
            ref = stream(dev, before, 0, 96, uniform).view(16, 6)
            if not torch.equal(full, ref):
                problems.append("shards concatenated != the plain (16, 6) draw")
            result = "ok" if not problems else "FAIL " + " | ".join(problems)
        except Exception as e:
            msg = str(e).splitlines()[0] if str(e) else ""
            result = f"RAISED at {innermost(e)} {type(e).__name__}: {msg}"
            traceback.print_exc()
        print(f"RESULT {tag} {result}", flush=True)
        return result

    result = attempt("local_uniform_shard0")
    if ":_device AssertionError: Torch not compiled with CUDA enabled" in result:
        # PyTorch's _LocalOffsetBasedRNGTracker._device calls
        # torch.cuda.current_device() whatever the device: what fails next
        # once that returns an index.
        torch.cuda.current_device = lambda: 0
        attempt("local_uniform_shard0_cuda_index_stubbed")
    dist.destroy_process_group()
    print("OK", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "spmd"
    {"spmd": spmd, "local": local}[mode]()
