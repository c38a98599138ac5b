"""Profile a few training steps on openreg and write a Chrome trace.

    python examples/profile_training.py                     # trace in the temp dir
    python examples/profile_training.py trace.json --steps 6

The trace opens in https://ui.perfetto.dev or chrome://tracing: the CPU
threads (operators, ``record_function`` ranges, the ``orLaunchKernel`` /
``orMemcpyAsync`` runtime calls) above one row per openreg stream (kernels,
copies, ``torch_openreg.profiler.range`` markers), with an arrow from each
launch to the device work it queued. ``python tools/render_trace.py trace.json
trace.png`` draws the same timeline as a picture.

What it shows, step by step:

* ``torch.profiler.schedule``: step 0 is skipped (wait), step 1 runs the
  profiler without keeping anything (warmup, absorbs one-time set-up costs),
  the remaining steps are recorded (active), and the trace is written once by
  ``on_trace_ready``;
* activities CPU and PrivateUse1 (the openreg device), ``profile_memory=True``;
* ``record_function`` ranges on the CPU rows, ``torch_openreg.profiler.range``
  (a range marker, like ``torch.cuda.nvtx.range``) on the device rows;
* a second stream: the next batch is uploaded from pinned memory on a copy
  stream while the current step computes, so the device has two stream rows.
"""

import argparse
import os
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch_openreg.profiler as orprof
from torch.profiler import ProfilerActivity, profile, record_function, schedule

WAIT, WARMUP = 1, 1


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * 8 * 8, 64), nn.GELU(), nn.Linear(64, 10),
    )


def batches(steps: int):
    """Pinned host batches, as a DataLoader with pin_memory=True yields them."""
    data = torch.Generator().manual_seed(1)
    for _ in range(steps):
        yield (torch.randn(32, 1, 16, 16, generator=data).pin_memory(),
               torch.randint(0, 10, (32,), generator=data).pin_memory())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", nargs="?", default=os.path.join(tempfile.gettempdir(), "profile_trace.json"),
                   help="where to write the Chrome trace (default: %(default)s)")
    p.add_argument("--steps", type=int, default=4,
                   help=f"training steps in all: {WAIT} wait + {WARMUP} warmup + the rest recorded "
                        "(default: %(default)s)")
    args = p.parse_args(argv)
    if args.steps < WAIT + WARMUP + 1:
        p.error(f"--steps must be at least {WAIT + WARMUP + 1} (wait + warmup + one recorded step)")
    active = args.steps - WAIT - WARMUP

    device = torch.device("openreg:0")
    model = make_model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    copy_stream = torch.openreg.Stream(device)
    main_stream = torch.openreg.current_stream(device)

    def upload(batch):
        # Queue the host->device copies on the copy stream (asynchronous:
        # pinned memory and non_blocking=True).
        with torch.openreg.stream(copy_stream), record_function("upload batch"):
            return tuple(t.to(device, non_blocking=True) for t in batch)

    written = []

    def on_trace_ready(prof):
        prof.export_chrome_trace(args.trace)
        written.append(args.trace)

    t0 = time.perf_counter()
    source = batches(args.steps)
    next_batch = upload(next(source))
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=active, repeat=1),
        on_trace_ready=on_trace_ready,
        profile_memory=True,
        record_shapes=True,
    ) as prof:
        for step in range(args.steps):
            with orprof.range(f"step {step}"):
                # The batch was uploaded on the copy stream: order the main
                # stream after it, and keep its memory alive for this stream.
                main_stream.wait_stream(copy_stream)
                x, y = next_batch
                x.record_stream(main_stream)
                y.record_stream(main_stream)
                if step + 1 < args.steps:
                    next_batch = upload(next(source))  # overlaps with this step

                with record_function("forward"):
                    loss = nn.functional.cross_entropy(model(x), y)
                with record_function("backward"):
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                with record_function("optimizer step"):
                    opt.step()
                orprof.mark(f"loss {loss.item():.4f}")  # .item() copies device -> host
            prof.step()
    torch.openreg.synchronize()

    if not written:
        print("no trace was written", file=sys.stderr)
        return 1
    print(f"recorded steps {WAIT + WARMUP}..{args.steps - 1} of {args.steps} "
          f"in {time.perf_counter() - t0:.1f}s; last loss {loss.item():.4f}")
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=12,
                                    max_name_column_width=36))
    print(f"Chrome trace: {args.trace}  ({os.path.getsize(args.trace) >> 10} KiB; open it in "
          "https://ui.perfetto.dev or chrome://tracing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
