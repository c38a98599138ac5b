"""Graph replay against eager on openreg, from one run.

    python benchmarks/graphs.py           # full run
    python benchmarks/graphs.py --quick   # fewer rounds (what the test runs)

It prints:
  * a training step of a small MLP (tiny operators: forward, MSE loss,
    backward and an SGD step), eager on openreg against one replay of the
    captured step: the issue's target is replay at most 0.3x eager. (The
    eager step on the CPU is printed for scale.)
  * the cost per kernel of a replay against a launch: a graph of K in-place
    additions on a 16-element tensor replayed, against the same K additions
    launched eagerly, both divided by K.
  * a forward-only step of tiny operators (the same MLP under no_grad, and
    its loss), eager against replay (and against a replay without prepared
    nodes, OPENREG_GRAPH_PREPARE=0): issue 35's target is replay at most
    0.2x eager. Beside it, where a replay's time goes: the share of its
    nodes' kernels (ATen's CPU kernels: the arithmetic and their own set-up)
    in the graph launch, from the runtime's trace.
  * the cost per replayed node by kind of node (elementwise in place and
    with an output, a reduction, a copy, a matmul, on 8x32 float tensors):
    20 nodes per graph, against the same operators launched eagerly on
    openreg and run on the CPU, and replayed without prepared nodes. Issue 35's target is a replayed tiny
    elementwise node at most 0.5 us; the floor is the arithmetic itself.
  * a compiled training step (the MLP compiled with torch.compile, SGD eager):
    the compiled step called eagerly against one replay of its capture
    (docs/graphs.md, "Compiled code in a graph").
  * a 2-rank DDP training step of the MLP on occl (two processes of this
    script, --ddp-worker): eager DDP against one replay of the captured step,
    bucketed all-reduces included. Issue 43's target: replay at most 0.5x eager.
Each figure is a median over ROUNDS rounds of a median of timed loops, the
variants interleaved round by round. The machines are noisy: read ratios,
not absolute times. Nothing is asserted.
"""

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys

import torch

from _timing import bench  # benchmarks/ is on sys.path when run as a script

DEV = "openreg"


def mlp_step(dev, batch=32, width=64, depth=3):
    """(step function, model, optimizer, static input, static target) on `dev`."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(32, width), torch.nn.ReLU()]
    for _ in range(depth - 1):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, 8))
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
    x = torch.randn(batch, 32, device=dev)
    y = torch.randn(batch, 8, device=dev)
    loss_fn = torch.nn.MSELoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    return step, model, opt, x, y


@contextlib.contextmanager
def prepare(mode):
    """Captures inside prepare nodes as OPENREG_GRAPH_PREPARE=mode says
    (docs/graphs.md: "1", the default, or "0", every node through the
    dispatcher)."""
    old = os.environ.get("OPENREG_GRAPH_PREPARE")
    os.environ["OPENREG_GRAPH_PREPARE"] = mode
    try:
        yield
    finally:
        if old is None:
            del os.environ["OPENREG_GRAPH_PREPARE"]
        else:
            os.environ["OPENREG_GRAPH_PREPARE"] = old


def replay_breakdown(g, n):
    """Where a replay's time goes, from the runtime's trace of n replays
    (the profiler's PrivateUse1 activity): (time of the graph launch, time in
    its nodes' kernels, {node name: kernel time}), per replay. The profiler
    slows both alike; read the shares."""
    from torch.profiler import ProfilerActivity, profile
    g.replay()
    torch.openreg.synchronize()
    with profile(activities=[ProfilerActivity.PrivateUse1]) as prof:
        for _ in range(n):
            g.replay()
        torch.openreg.synchronize()
    launch, by_node = 0.0, {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.PrivateUse1:
            continue
        if e.name == "orGraphLaunch":
            launch += e.device_time
        else:
            by_node[e.name] = by_node.get(e.name, 0.0) + e.device_time
    return launch / n, sum(by_node.values()) / n, {k: v / n for k, v in by_node.items()}


def captured_step(step):
    """The step captured into a graph after a warm-up on a side stream (the
    recipe of PyTorch's CUDA graphs docs)."""
    s = torch.openreg.Stream()
    s.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(s):
        for _ in range(3):
            step()
    torch.openreg.current_stream().wait_stream(s)
    g = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(g):
        step()
    return g


def additions(k):
    t = torch.zeros(16, device=DEV)

    def launch():
        for _ in range(k):
            t.add_(1.0)

    g = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(g):
        launch()
    return launch, g


# Kinds of node: (name, set-up on a device -> the operator call to repeat).
def _kinds():
    def inplace(dev):
        t = torch.ones(8, 32, device=dev)
        return lambda: t.mul_(1.0001)

    def with_output(dev):
        a, b = torch.ones(8, 32, device=dev), torch.ones(8, 32, device=dev)
        return lambda: a * b

    def reduction(dev):
        a = torch.ones(8, 32, device=dev)
        return lambda: a.sum()

    def copy(dev):
        a, b = torch.ones(8, 32, device=dev), torch.empty(8, 32, device=dev)
        return lambda: b.copy_(a)

    def matmul(dev):
        a, b = torch.ones(8, 32, device=dev), torch.ones(32, 8, device=dev)
        return lambda: a @ b

    return [("elementwise in place (mul_)", inplace), ("elementwise, an output (a * b)", with_output),
            ("reduction (sum)", reduction), ("copy (copy_)", copy), ("matmul (a @ b)", matmul)]


def nodes(make, dev, k):
    """(k eager calls, a graph of the same k calls, the same graph without
    prepared nodes) of one kind of node."""
    op = make(dev)

    def launch():
        for _ in range(k):
            op()
    if dev == "cpu":
        return launch, None, None
    launch()  # warm-up (first-call set-up) outside the capture
    torch.openreg.synchronize()
    graphs = []
    for mode in ("1", "0"):
        g = torch.openreg.OpenRegGraph()
        with prepare(mode), torch.openreg.graph(g):
            launch()
        graphs.append(g)
    return launch, graphs[0], graphs[1]


def compiled_step(dev):
    """The MLP step with the model compiled (SGD eager), warmed up (compiled)."""
    _, model, opt, x, y = mlp_step(dev)
    compiled = torch.compile(model)
    loss_fn = torch.nn.MSELoss()

    def step():
        opt.zero_grad(set_to_none=False)
        loss_fn(compiled(x), y).backward()
        opt.step()
    step()
    return step


def ddp_worker(rounds, inner, repeats):
    """One rank of the DDP figure: eager DDP steps against replays of the
    captured step, in lockstep with the other rank (each bench loop runs the
    same collectives on both). Rank 0 prints one JSON line."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ["RANK"])
    dist.init_process_group("occl", device_id=torch.device(DEV, 0))
    loss_fn = torch.nn.MSELoss()

    def make():
        _, model, _, x, y = mlp_step(DEV)
        s = torch.openreg.Stream()
        s.wait_stream(torch.openreg.current_stream())
        with torch.openreg.stream(s):  # DDP built and warmed up on a side stream
            ddp = DDP(model)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.01, foreach=False)

            def step():
                opt.zero_grad(set_to_none=False)
                loss_fn(ddp(x), y).backward()
                opt.step()
            for _ in range(11):
                step()
        torch.openreg.current_stream().wait_stream(s)
        return step

    eager_step = make()
    g = torch.openreg.OpenRegGraph()
    graph_step = make()
    with torch.openreg.graph(g):
        graph_step()
    sync = torch.openreg.synchronize
    eager, replay = [], []
    for _ in range(rounds):
        eager.append(bench(eager_step, sync, inner, repeats))
        replay.append(bench(g.replay, sync, inner, repeats))
    if rank == 0:
        print(json.dumps({"eager": statistics.median(eager), "replay": statistics.median(replay)}),
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


def ddp_figures(rounds, inner, repeats):
    """Runs two ranks of ddp_worker; rank 0's (eager, replay) seconds."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--ddp-worker", str(rounds), str(inner),
             str(repeats)], env=env, stdout=subprocess.PIPE, text=True))
    try:
        outs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        raise SystemExit(f"the DDP ranks failed: {[p.returncode for p in procs]}")
    fig = json.loads(outs[0].strip().splitlines()[-1])
    return fig["eager"], fig["replay"]


def forward_step(dev):
    """The MLP's forward and loss under no_grad: tiny operators only."""
    _, model, _, x, y = mlp_step(dev)
    loss_fn = torch.nn.MSELoss()

    def step():
        with torch.no_grad():
            return loss_fn(model(x), y)
    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ddp-worker", nargs=3, type=int, metavar=("ROUNDS", "INNER", "REPEATS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ddp_worker:
        return ddp_worker(*args.ddp_worker)
    rounds, inner, repeats = (3, 10, 3) if args.quick else (7, 50, 5)
    # First, alone on the machine: the two DDP ranks.
    ddp_e, ddp_r = ddp_figures(rounds, inner, repeats)
    sync = torch.openreg.synchronize

    eager_step = mlp_step(DEV)[0]
    replay_step = captured_step(mlp_step(DEV)[0])
    cpu_step = mlp_step("cpu")[0]
    k = 100
    launch, add_graph = additions(k)

    comp_eager = compiled_step(DEV)
    comp_graph = captured_step(compiled_step(DEV))
    fwd_eager = forward_step(DEV)
    fwd_graph = captured_step(forward_step(DEV))
    with prepare("0"):
        fwd_graph0 = captured_step(forward_step(DEV))
    fwd_cpu = forward_step("cpu")
    kn = 20
    kinds = [(name, nodes(make, DEV, kn), nodes(make, "cpu", kn)[0]) for name, make in _kinds()]
    no_sync = lambda: None  # noqa: E731

    eager, replay, cpu, per_launch, per_replayed = [], [], [], [], []
    f_eager, f_replay, f_replay0, f_cpu = [], [], [], []
    c_eager, c_replay = [], []
    by_kind = {name: ([], [], [], []) for name, _, _ in kinds}  # eager, replayed, dispatcher, cpu
    for _ in range(rounds):
        eager.append(bench(eager_step, sync, inner, repeats))
        replay.append(bench(replay_step.replay, sync, inner, repeats))
        cpu.append(bench(cpu_step, no_sync, inner, repeats))
        per_launch.append(bench(launch, sync, max(1, inner // 5), repeats) / k)
        per_replayed.append(bench(add_graph.replay, sync, max(1, inner // 5), repeats) / k)
        c_eager.append(bench(comp_eager, sync, inner, repeats))
        c_replay.append(bench(comp_graph.replay, sync, inner, repeats))
        f_eager.append(bench(fwd_eager, sync, inner, repeats))
        f_replay.append(bench(fwd_graph.replay, sync, inner, repeats))
        f_replay0.append(bench(fwd_graph0.replay, sync, inner, repeats))
        f_cpu.append(bench(fwd_cpu, no_sync, inner, repeats))
        for name, (eager_k, graph_k, graph0_k), cpu_k in kinds:
            e_, r_, r0_, c_ = by_kind[name]
            e_.append(bench(eager_k, sync, inner, repeats) / kn)
            r_.append(bench(graph_k.replay, sync, inner, repeats) / kn)
            r0_.append(bench(graph0_k.replay, sync, inner, repeats) / kn)
            c_.append(bench(cpu_k, no_sync, inner, repeats) / kn)
    med = statistics.median
    e, r, c = med(eager), med(replay), med(cpu)
    print(f"MLP training step (3x64 hidden, batch 32), medians of {rounds} rounds:")
    print(f"  eager openreg   {e * 1e6:9.1f} us")
    print(f"  replay openreg  {r * 1e6:9.1f} us   replay/eager = {r / e:.2f}x (target <= 0.3x)")
    print(f"  eager cpu       {c * 1e6:9.1f} us   (for scale)")
    ce, cr = med(c_eager), med(c_replay)
    print("the same step with the model compiled (torch.compile, SGD eager):")
    print(f"  compiled        {ce * 1e6:9.1f} us")
    print(f"  replay          {cr * 1e6:9.1f} us   replay/compiled = {cr / ce:.2f}x")
    print("2-rank DDP step of the same MLP on occl (rank 0's figures):")
    print(f"  eager DDP       {ddp_e * 1e6:9.1f} us")
    print(f"  replay          {ddp_r * 1e6:9.1f} us   replay/eager DDP = {ddp_r / ddp_e:.2f}x "
          f"(target <= 0.5x)")
    pl, pr = med(per_launch), med(per_replayed)
    print(f"per kernel (in-place add on 16 elements, {k} per graph):")
    print(f"  eager launch    {pl * 1e6:9.2f} us")
    print(f"  replayed        {pr * 1e6:9.2f} us   replayed/launch = {pr / pl:.2f}x")
    fe, fr, fr0, fc = (med(v) for v in (f_eager, f_replay, f_replay0, f_cpu))
    launch_us, kernels_us, by_node = replay_breakdown(fwd_graph, 20 if args.quick else 200)
    print("forward-only step of tiny operators (the MLP under no_grad, and its loss):")
    print(f"  eager openreg   {fe * 1e6:9.1f} us")
    print(f"  replay openreg  {fr * 1e6:9.1f} us   replay/eager = {fr / fe:.2f}x (target <= 0.2x)")
    print(f"  replay, no prepared nodes {fr0 * 1e6:9.1f} us   replay/eager = {fr0 / fe:.2f}x")
    print(f"  eager cpu       {fc * 1e6:9.1f} us   (for scale)")
    top = ", ".join(f"{k} {v:.1f}" for k, v in sorted(by_node.items(), key=lambda kv: -kv[1]))
    print(f"  where a replay goes (runtime trace, profiled): its nodes' kernels "
          f"{kernels_us / launch_us:.0%} of the launch ({top} us)")
    print(f"per node by kind (8x32 float32, {kn} nodes per graph; target: a replayed tiny "
          f"elementwise node <= 0.50 us; 'dispatcher': replayed without prepared nodes):")
    print(f"  {'kind':<34}{'eager':>10}{'dispatcher':>12}{'replayed':>10}{'cpu':>10}"
          f"{'replayed/eager':>16}")
    for name, _, _ in kinds:
        e_, r_, r0_, c_ = (med(v) for v in by_kind[name])
        print(f"  {name:<34}{e_ * 1e6:>8.2f}us{r0_ * 1e6:>10.2f}us{r_ * 1e6:>8.2f}us"
              f"{c_ * 1e6:>8.2f}us{r_ / e_:>15.2f}x")


if __name__ == "__main__":
    main()
