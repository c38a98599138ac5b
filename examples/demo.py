"""OpenReg demo: the project's main job, in well under a minute.

Trains a small model on the simulated ``openreg`` device and on the CPU from
the same initial weights and data, checks that every loss matches, and prints
device, memory and stream facts. Exits non-zero if the device disagrees with
the CPU.

    make demo        # or: python examples/demo.py
"""

import os
import sys
import time

import torch
import torch.nn as nn

STEPS = 30


def banner(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 66 - len(title)))


def device_facts() -> None:
    banner("devices")
    print(f"torch {torch.__version__}; accelerator: {torch.accelerator.current_accelerator()}")
    for i in range(torch.openreg.device_count()):
        p = torch.openreg.get_device_properties(i)
        print(f"  openreg:{i}  {p.name}  capacity {p.total_memory / 2**30:.1f} GiB  "
              f"strict memory {'on' if p.strict_memory else 'off'}  "
              f"{p.multi_processor_count} workers")


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * 8 * 8, 64), nn.GELU(), nn.Dropout(0.0), nn.Linear(64, 10),
    )


def train(device: str, steps: int = STEPS) -> list:
    model = make_model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(32, 1, 16, 16, generator=data).to(device)
        y = torch.randint(0, 10, (32,), generator=data).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def training() -> bool:
    banner(f"training a small CNN for {STEPS} steps: openreg vs cpu")
    train("cpu", 2), train("openreg", 2)  # warm-up: one-time library set-up
    t0 = time.perf_counter()
    cpu = train("cpu")
    t_cpu = time.perf_counter() - t0
    t0 = time.perf_counter()
    dev = train("openreg")
    t_dev = time.perf_counter() - t0
    for step in (0, STEPS // 2, STEPS - 1):
        print(f"  step {step:3d}: cpu {cpu[step]:.6f}   openreg {dev[step]:.6f}")
    diff = max(abs(a - b) for a, b in zip(cpu, dev))
    ok = diff <= 1e-5
    print(f"  max |loss difference| = {diff:.2e}  -> {'MATCH' if ok else 'MISMATCH'}")
    print(f"  wall time: cpu {t_cpu:.2f}s, openreg {t_dev:.2f}s (ratio {t_dev / t_cpu:.2f})")
    return ok


def memory_facts() -> None:
    banner("memory (caching allocator)")
    torch.openreg.reset_peak_memory_stats()
    x = torch.empty(64 << 20, dtype=torch.uint8, device="openreg")
    print(f"  after a 64 MiB tensor: allocated {torch.openreg.memory_allocated() >> 20} MiB, "
          f"reserved {torch.openreg.memory_reserved() >> 20} MiB")
    del x
    print(f"  after del:             allocated {torch.openreg.memory_allocated() >> 20} MiB, "
          f"reserved {torch.openreg.memory_reserved() >> 20} MiB (cached for reuse)")
    torch.openreg.empty_cache()
    free, total = torch.openreg.mem_get_info()
    print(f"  after empty_cache:     reserved {torch.openreg.memory_reserved() >> 20} MiB; "
          f"device free {free >> 20} of {total >> 20} MiB; peak {torch.openreg.max_memory_allocated() >> 20} MiB")
    try:
        torch.empty(total + 1, dtype=torch.uint8, device="openreg")
    except torch.OutOfMemoryError as e:
        print(f"  out of memory is real: {str(e).split('. Device')[0]}.")


def stream_facts() -> None:
    banner("streams and events")
    s = torch.openreg.Stream()
    start, end = torch.openreg.Event(enable_timing=True), torch.openreg.Event(enable_timing=True)
    host = torch.randn(1 << 20).pin_memory()
    dev = torch.empty(1 << 20, device="openreg")
    with torch.openreg.stream(s):
        start.record()
        torch.openreg._sleep(20_000)            # 20 ms of queued "device work"
        dev.copy_(host, non_blocking=True)      # async copy, queued behind it
        end.record()
        print(f"  right after queuing: stream idle? {s.query()}")
    end.synchronize()
    print(f"  after synchronize:   stream idle? {s.query()}")
    print(f"  events measured {start.elapsed_time(end):.1f} ms of device time")
    print(f"  copy result correct: {torch.equal(dev.cpu(), host)}")


def profile_summary() -> None:
    banner("profile of one training step (torch.profiler, CPU + openreg)")
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    model = make_model().to("openreg")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = torch.randn(32, 1, 16, 16, device="openreg"), torch.randint(0, 10, (32,), device="openreg")

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    step()  # warm-up, unprofiled
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        step()
    events = prof.events()
    device = [e for e in events if e.device_type == DeviceType.PrivateUse1 and not e.is_user_annotation]
    ops = [e for e in prof.key_averages() if e.device_type == DeviceType.CPU and e.self_device_time_total > 0]
    ops.sort(key=lambda e: e.self_device_time_total, reverse=True)
    print(f"  {len(device)} pieces of openreg device work, "
          f"{sum(e.device_time_total for e in device) / 1e3:.2f} ms of device time; "
          "top 5 operators by device time:")
    for e in ops[:5]:
        print(f"    {e.key:<40} {e.self_device_time_total / 1e3:8.3f} ms  ({e.count} call{'s' * (e.count > 1)})")
    print("  (python examples/profile_training.py writes a full trace for Perfetto)")

# ---------------------------------------------------------------- collectives
def _allreduce_rank() -> None:
    # One rank of the 2-rank all-reduce below (run as `demo.py --allreduce-rank`).
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    dist.init_process_group("occl")
    t = torch.full((4,), float(rank + 1), device=f"openreg:{rank}")
    dist.all_reduce(t)
    if rank == 0:
        print(f"  rank 0 after all_reduce: {t.cpu().tolist()}")
    dist.destroy_process_group()


def collective_facts() -> bool:
    """Two processes, one openreg device each, all-reduce over OCCL."""
    import socket
    import subprocess

    banner("2-rank all-reduce over OCCL (torch.distributed backend 'occl')")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, "--allreduce-rank"], text=True,
                              stdout=subprocess.PIPE,
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE="2",
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
             for r in range(2)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=120)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(p.communicate()[0])
    print(outs[0], end="")
    ok = all(p.returncode == 0 for p in procs) and "[3.0, 3.0, 3.0, 3.0]" in outs[0]
    print(f"  1 + 2 on every element: {'correct' if ok else 'WRONG'}")
    return ok

def compiled_model() -> bool:
    # torch.compile: Inductor generates C++ kernels that run as openreg device work.
    banner("torch.compile on openreg")
    model = make_model().eval().to("openreg")
    x = torch.randn(32, 1, 16, 16, device="openreg")
    t0 = time.perf_counter()
    with torch.no_grad():
        out = torch.compile(model)(x)
        ref = model(x)
    diff = (out - ref).abs().max().item()
    print(f"  compiled in {time.perf_counter() - t0:.1f}s; max |compiled - eager| = {diff:.1e} "
          f"-> {'COMPILED MATCH' if diff <= 1e-4 else 'COMPILED MISMATCH'}")
    return diff <= 1e-4


def main() -> int:
    t0 = time.perf_counter()
    device_facts()
    ok = training()
    memory_facts()
    stream_facts()
    profile_summary()
    ok = collective_facts() and ok
    ok = compiled_model() and ok
    banner("done")
    print(f"  {'SUCCESS' if ok else 'FAILURE'} in {time.perf_counter() - t0:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--allreduce-rank"]:
        _allreduce_rank()
        sys.exit(0)
    sys.exit(main())
