"""OCCL vs gloo, in the style of nccl-tests: time and bus bandwidth of
collectives between ranks on this machine, both backends in one run.

    python benchmarks/collectives.py            # 2 and 4 ranks, full sizes
    python benchmarks/collectives.py --quick    # a smoke run (tests/benchmarks)
    python benchmarks/collectives.py --latency --ranks 2 --repeat 5   # only the 4 B all-reduce
    python benchmarks/collectives.py --variants zero-copy,copy-in,tcp --repeat 3 \
        --plot docs/images/collectives.png        # every transport, medians of 3 runs, the plot

Each rank times every operation (medians over iterations, after warm-up) with
occl on openreg tensors and gloo on CPU tensors; rank 0 prints a table and
the occl/gloo ratios. Bus bandwidth follows nccl-tests: all-reduce moves
2(n-1)/n of the buffer per rank, all-gather and reduce-scatter (n-1)/n.

The machine's own limit is measured in the same run: one core's memcpy
bandwidth (64 MiB, libc's memmove, median of 9, taken before and after each
configuration's ranks run, with nothing else of this benchmark running). The
"of memcpy" column is occl's bus bandwidth as a fraction of it (issue 35's
target: 0.8 at 16 MiB and above on 2 ranks). A rank that moves the bus
bandwidth's bytes copies them at most once each (zero copy reads the peer's
buffer and writes its own), so one core's memcpy is the bound per rank.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

MiB = 1 << 20


def cases(quick, latency=False):
    if latency:
        return [("allreduce", 4)]
    if quick:
        return [("allreduce", 4), ("allreduce", MiB), ("allgather", MiB), ("reduce_scatter", MiB)]
    return ([("allreduce", 4)] + [("allreduce", s * MiB) for s in (1, 16, 64, 256)]
            + [("allgather", 16 * MiB), ("reduce_scatter", 16 * MiB)])


def worker(quick, latency=False):
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("cpu:gloo,openreg:occl")
    dev = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(dev)
    results = []
    for op, size in cases(quick, latency):
        for backend, device in (("occl", dev), ("gloo", torch.device("cpu"))):
            n = max(1, size // 4)
            if op == "allreduce":
                buf = torch.ones(n, device=device)
                run = lambda: dist.all_reduce(buf)  # noqa: E731
                factor = 2 * (world - 1) / world
            elif op == "allgather":
                inp = torch.ones(n // world, device=device)
                out = torch.empty(n // world * world, device=device)
                run = lambda: dist.all_gather_into_tensor(out, inp)  # noqa: E731
                factor = (world - 1) / world
            else:
                inp = torch.ones(n // world * world, device=device)
                out = torch.empty(n // world, device=device)
                run = lambda: dist.reduce_scatter_tensor(out, inp)  # noqa: E731
                factor = (world - 1) / world
            iters = 3 if quick else (200 if size <= 4096 else max(3, min(20, (512 * MiB) // size)))
            for _ in range(2 if quick else 5):
                run()
            times = []
            for _ in range(iters):
                t0 = time.perf_counter()
                run()
                if backend == "occl":
                    torch.openreg.synchronize()
                times.append(time.perf_counter() - t0)
            # The slowest rank's median is the collective's time.
            t = torch.tensor([statistics.median(times)], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            sec = t.item()
            results.append({"op": op, "bytes": size, "backend": backend, "us": sec * 1e6,
                            "algbw": size / sec / 1e9, "busbw": size / sec / 1e9 * factor})
    if rank == 0:
        print(json.dumps(results))
    dist.destroy_process_group()


# How occl reaches its peers in each run: zero copy (the default in strict
# mode), copy-in through the shared-memory slots, and TCP over loopback.
VARIANTS = {
    "zero-copy": {},
    "copy-in": {"OCCL_ZERO_COPY": "0"},
    "tcp": {"OCCL_TRANSPORT": "tcp"},
}


def launch(nranks, quick, timeout, extra_env=None, latency=False, nodes=1):
    """One run of nranks ranks: on this host, or split evenly over `nodes`
    network namespaces with their own hostnames (tests/distributed/_netns.py),
    so that ranks on different nodes talk over the veth link: occl over TCP
    between nodes and shared memory within one, gloo over TCP everywhere."""
    cluster = None
    if nodes > 1:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from tests.distributed import _netns
        reason = _netns.skip_reason()
        if reason:
            raise SystemExit(f"--nodes {nodes}: {reason}")
        cluster = _netns.Cluster(nodes).__enter__()
        master = cluster.addr(0)
    else:
        master = "127.0.0.1"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    per_node = nranks // nodes
    try:
        for r in range(nranks):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(nranks), MASTER_ADDR=master,
                       MASTER_PORT=str(port), LOCAL_RANK=str(r % per_node),
                       **(extra_env or {}))
            argv = [sys.executable, os.path.abspath(__file__), "--worker"] + \
                (["--quick"] if quick else []) + (["--latency"] if latency else [])
            if cluster:
                env["GLOO_SOCKET_IFNAME"] = "eth0"  # the node's link, as on a real cluster
                procs.append(cluster.spawn(r // per_node, argv, env=env, stderr=None))
            else:
                procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if cluster:
            cluster.close()
    for p in procs:
        if p.returncode:
            raise SystemExit(f"a rank failed ({p.returncode})")
    return json.loads(outs[0].strip().splitlines()[-1])


def memcpy_bandwidth(nbytes=64 * MiB, repeat=9):
    """One core's memcpy bandwidth in GB/s (bytes copied per second): the
    median of `repeat` copies of `nbytes` between buffers already touched."""
    import ctypes
    src, dst = bytearray(b"\1" * nbytes), bytearray(nbytes)
    s = (ctypes.c_char * nbytes).from_buffer(src)
    d = (ctypes.c_char * nbytes).from_buffer(dst)
    ctypes.memmove(d, s, nbytes)  # fault every page in first
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        ctypes.memmove(d, s, nbytes)
        times.append(time.perf_counter() - t0)
    del s, d
    return nbytes / statistics.median(times) / 1e9


def _copy_on_a_core(nbytes, repeat, start, results):
    start.wait()
    results.put(memcpy_bandwidth(nbytes, repeat))


def memcpy_bandwidth_cores(ncores, nbytes=64 * MiB, repeat=9):
    """Each core's memcpy bandwidth in GB/s while `ncores` processes copy at
    once (as the ranks of a collective do): their median."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    start, results = ctx.Barrier(ncores), ctx.Queue()
    procs = [ctx.Process(target=_copy_on_a_core, args=(nbytes, repeat, start, results))
             for _ in range(ncores)]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return statistics.median(got)


def median_rows(runs):
    """Per (op, size, backend): the median time and bus bandwidth over runs
    (a busy machine's runs differ far more than a run's iterations)."""
    out = []
    for row in runs[0]:
        same = [next(r for r in run if (r["op"], r["bytes"], r["backend"]) ==
                     (row["op"], row["bytes"], row["backend"])) for run in runs]
        out.append(dict(row, **{k: statistics.median(r[k] for r in same)
                                for k in ("us", "algbw", "busbw")}))
    return out


def fmt_size(b):
    return f"{b // MiB} MiB" if b >= MiB else f"{b} B"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--latency", action="store_true",
                    help="only the 4 B all-reduce (the latency case; quick to repeat)")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--plot", default=None, help="write a PNG of bus bandwidth against size")
    ap.add_argument("--variants", default="zero-copy",
                    help="occl transports to measure, comma-separated: " + ",".join(VARIANTS))
    ap.add_argument("--nodes", type=int, default=1,
                    help="split the ranks over this many virtual nodes (network namespaces; "
                         "needs root): 2 with --ranks 4 is 2 nodes x 2 ranks")
    ap.add_argument("--json", default=None, help="write every measurement here")
    ap.add_argument("--repeat", type=int, default=1,
                    help="launch each configuration this many times and report the medians "
                         "(of times and bandwidths, per backend)")
    args = ap.parse_args()
    if args.worker:
        return worker(args.quick, args.latency)
    all_rows = {}
    variants = args.variants.split(",")
    for n in map(int, args.ranks.split(",")):
        for variant in variants:
            runs, memcpy = [], []
            for _ in range(args.repeat):
                memcpy.append(memcpy_bandwidth())
                runs.append(launch(n, args.quick, timeout=120 if args.quick else 1200,
                                   extra_env=VARIANTS[variant], latency=args.latency,
                                   nodes=args.nodes))
                memcpy.append(memcpy_bandwidth())
            rows = median_rows(runs)
            bound = statistics.median(memcpy)
            together = memcpy_bandwidth_cores(min(n, os.cpu_count() or 1))
            for r in rows:
                r["memcpy"] = bound
            all_rows[(n, variant)] = rows
            where = f" over {args.nodes} nodes" if args.nodes > 1 else ""
            print(f"\n{n} ranks{where}, occl {variant}{' (quick)' if args.quick else ''}; "
                  f"one core's memcpy: {bound:.2f} GB/s; with {min(n, os.cpu_count() or 1)} "
                  f"copying at once: {together:.2f} GB/s each ({together / bound:.2f} of one alone)")
            if n == 2:
                # The bounds that the ranks' memory traffic sets on 2 ranks, as
                # fractions of one core's memcpy alone: each core copies at its
                # bandwidth while both copy, and an operation whose rank must
                # move as much as a memcpy of k bytes per byte of bus traffic
                # reaches 1/k of it. all-gather out of place copies its own
                # half too (a memcpy of S for S/2 on the bus): 0.5.
                # reduce-scatter reads both inputs of its share and writes it
                # (1.5 memcpy per byte): 0.67. all-reduce reduces its half
                # (reads S, writes S/2) and gathers the other (S/2 each way):
                # 1.25 per byte, 0.8; its 2 MiB chunks are read back while
                # still in the cache, so it can pass this bound.
                print("bounds from the ranks' memory traffic, of memcpy: "
                      + ", ".join(f"{op} {f * together / bound:.2f}" for op, f in
                                  (("allgather", 0.5), ("reduce_scatter", 2 / 3),
                                   ("allreduce", 0.8))))
            print(f"{'op':<15}{'size':>9}{'occl us':>11}{'gloo us':>11}{'occl busbw':>12}"
                  f"{'gloo busbw':>12}{'ratio':>8}{'of memcpy':>11}")
            by = {(r["op"], r["bytes"], r["backend"]): r for r in rows}
            for op, size in cases(args.quick, args.latency):
                o, g = by[(op, size, "occl")], by[(op, size, "gloo")]
                # latency-bound: ratio of times (gloo/occl); else bus bandwidth (occl/gloo)
                ratio = g["us"] / o["us"]
                frac = f"{o['busbw'] / bound:>11.2f}" if size >= MiB else f"{'':>11}"
                print(f"{op:<15}{fmt_size(size):>9}{o['us']:>11.1f}{g['us']:>11.1f}"
                      f"{o['busbw']:>10.2f}GB{g['busbw']:>10.2f}GB{ratio:>7.2f}x{frac}",
                      flush=True)
    print("\nratio = gloo time / occl time (above 1: occl is faster); gloo is measured in the "
          "same run as each occl variant. of memcpy = occl's bus bandwidth / one core's "
          "memcpy bandwidth alone (the issue's yardstick; with every rank copying at once each "
          "gets less, and the traffic of the algorithm sets the bound it can reach)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{n} {v}": rows for (n, v), rows in all_rows.items()}, f, indent=1)
    if args.plot:
        plot(all_rows, args.plot)


def plot(all_rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ranks = sorted({n for n, _ in all_rows})
    fig, axes = plt.subplots(1, len(ranks), figsize=(5.5 * len(ranks), 4), squeeze=False)
    styles = {"zero-copy": "-o", "copy-in": "-^", "tcp": "-v"}
    for ax, n in zip(axes[0], ranks):
        gloo = []
        for (m, variant), rows in sorted(all_rows.items()):
            if m != n:
                continue
            pts = sorted((r["bytes"], r["busbw"]) for r in rows
                         if r["backend"] == "occl" and r["op"] == "allreduce" and r["bytes"] >= MiB)
            ax.plot([p[0] / MiB for p in pts], [p[1] for p in pts], styles.get(variant, "-o"),
                    label=f"occl {variant}")
            gloo += [(r["bytes"], r["busbw"]) for r in rows
                     if r["backend"] == "gloo" and r["op"] == "allreduce" and r["bytes"] >= MiB]
        sizes = sorted({b for b, _ in gloo})
        # gloo was measured once per occl run: plot the median of its runs
        med = [statistics.median([bw for b, bw in gloo if b == s]) for s in sizes]
        ax.plot([s / MiB for s in sizes], med, "--s", color="gray", label="gloo (CPU tensors)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("all-reduce size (MiB)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(f"all-reduce, {n} ranks on one host")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
