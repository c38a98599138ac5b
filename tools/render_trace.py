"""Render a Chrome trace (torch.profiler's export_chrome_trace) as a PNG timeline.

    python tools/render_trace.py trace.json trace.png
    python tools/render_trace.py trace.json.gz out.png --window 5:20 --no-flows

One row per (process, thread) of the trace, in the trace's own sort order:
the CPU threads first (operators nested by depth, ``record_function`` ranges,
runtime calls such as ``orLaunchKernel`` on a thin lane at the bottom), then
one row per device stream (kernels, copies and memsets, with range markers
above them), then, if the trace was recorded with ``profile_memory=True``, one
line per device showing its allocated memory. Events are coloured by their
category (the trace's ``cat``), launch -> device-work arrows (``ac2g`` flows)
are drawn faintly, and the rows are labelled with the trace's process and
thread names. Used to draw docs/images/profiler_trace.png.

Needs matplotlib (``pip install matplotlib``; it is in requirements-dev.txt).
"""

import argparse
import collections
import gzip
import json
import re
import sys

# category -> (legend label, colour, lane kind). Lane kinds: "op" (nested
# CPU work), "runtime" (thin lane under the CPU ops), "device" (the stream's
# work), "range" (annotations above the device work).
CATEGORIES = {
    "user_annotation": ("record_function range", "#f28e2b", "op"),
    "python_function": ("Python function", "#bab0ac", "op"),
    "cpu_op": ("CPU operator", "#4e79a7", "op"),
    "privateuse1_runtime": ("runtime call (launch)", "#e15759", "runtime"),
    "privateuse1_driver": ("driver call", "#ff9d9a", "runtime"),
    "cuda_runtime": ("runtime call (launch)", "#e15759", "runtime"),
    "kernel": ("kernel", "#59a14f", "device"),
    "gpu_memcpy": ("memcpy", "#b07aa1", "device"),
    "gpu_memset": ("memset", "#9c755f", "device"),
    "collective_comm": ("collective", "#ff9da7", "device"),
    "gpu_user_annotation": ("range marker (device)", "#edc948", "range"),
}
OTHER = ("other", "#d3d3d3", "op")
MEMORY_COLOUR = "#76b7b2"
FLOW_COLOUR = "#555555"
PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, as "[memory]" events report it
CPU_DEVICE = 0


def load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    return trace if isinstance(trace, dict) else {"traceEvents": trace}


def is_row_id(v) -> bool:
    # Kineto adds pseudo-processes ("Spans", "Traces", "") for its own
    # markers; real processes and devices have integer ids.
    return isinstance(v, int) and not isinstance(v, bool)


class Row:
    def __init__(self, pid, tid):
        self.pid, self.tid = pid, tid
        self.events = []  # (ts, dur, name, cat)
        self.device = False
        self.lanes = []  # computed layout: list of (kind, depth)


def thread_label(names: list, process: str) -> str:
    # Kineto can name a thread twice (its own name and the process's, e.g.
    # "thread 7 (pt_autograd_0)" and "thread 7 (python)"): keep the specific one.
    for n in names:
        m = re.search(r"\((.*)\)$", n)
        if not m or m.group(1) != process:
            return n
    return names[0] if names else ""


def nest(events: list) -> list:
    """Depth of each (ts, dur, ...) event in its stack of enclosing events."""
    order = sorted(range(len(events)), key=lambda i: (events[i][0], -events[i][1]))
    depth = [0] * len(events)
    ends = []
    for i in order:
        ts, dur = events[i][0], events[i][1]
        while ends and ends[-1] <= ts:
            ends.pop()
        depth[i] = len(ends)
        ends.append(ts + dur)
    return depth


def collect(trace: dict):
    events = trace.get("traceEvents", [])
    proc_name, proc_label, proc_sort, thread_names, thread_sort = {}, {}, {}, collections.defaultdict(list), {}
    rows = {}
    flows = collections.defaultdict(dict)  # flow id -> {"s": (ts, pid, tid), "f": ...}
    memory = collections.defaultdict(list)  # (device type, index) -> [(ts, total allocated)]
    for e in events:
        ph, pid, tid = e.get("ph"), e.get("pid"), e.get("tid")
        args = e.get("args", {})
        if ph == "M":
            name = e.get("name")
            if name == "process_name":
                proc_name[pid] = args.get("name", "")
            elif name == "process_labels":
                proc_label[pid] = args.get("labels", "")
            elif name == "process_sort_index":
                proc_sort[pid] = args.get("sort_index", 0)
            elif name == "thread_name":
                if args.get("name") not in thread_names[(pid, tid)]:
                    thread_names[(pid, tid)].append(args.get("name", ""))
            elif name == "thread_sort_index":
                thread_sort[(pid, tid)] = args.get("sort_index", 0)
        elif ph == "X" and is_row_id(pid) and is_row_id(tid):
            cat = e.get("cat", "")
            row = rows.setdefault((pid, tid), Row(pid, tid))
            row.events.append((float(e["ts"]), float(e.get("dur", 0.0)), e.get("name", ""), cat))
            if CATEGORIES.get(cat, OTHER)[2] in ("device", "range"):
                row.device = True
        elif ph in ("s", "f") and e.get("cat") == "ac2g" and is_row_id(pid):
            flows[e.get("id")][ph] = (float(e["ts"]), pid, tid)
        elif ph == "i" and e.get("name") == "[memory]" and "Total Allocated" in args:
            key = (args.get("Device Type"), args.get("Device Id"))
            memory[key].append((float(e["ts"]), args["Total Allocated"]))
    meta = (proc_name, proc_label, proc_sort, thread_names, thread_sort)
    return rows, flows, memory, meta


def layout(rows: dict, max_depth: int) -> None:
    for row in rows.values():
        kinds = [CATEGORIES.get(cat, OTHER)[2] for _, _, _, cat in row.events]
        depths = [0] * len(row.events)
        row.capped = [False] * len(row.events)
        for kind in ("op", "range"):
            idx = [i for i, k in enumerate(kinds) if k == kind]
            for i, d in zip(idx, nest([row.events[i] for i in idx])):
                depths[i] = min(d, max_depth - 1)
                row.capped[i] = d >= max_depth - 1 and kind == "op"  # deeper ones share the lane
        row.placed = list(zip(kinds, depths))
        lanes = []
        if "range" in kinds:
            lanes += [("range", d) for d in range(1 + max(d for k, d in row.placed if k == "range"))]
        if "op" in kinds:
            lanes += [("op", d) for d in range(1 + max(d for k, d in row.placed if k == "op"))]
        if "device" in kinds:
            lanes.append(("device", 0))
        if "runtime" in kinds:
            lanes.append(("runtime", 0))
        row.lanes = lanes


def render(trace_path: str, png_path: str, window=None, flows_on=True, max_depth=4,
           width=14.0, dpi=110, title=None) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    trace = load(trace_path)
    rows, flows, memory, (proc_name, proc_label, proc_sort, thread_names, thread_sort) = collect(trace)
    if not rows:
        raise SystemExit(f"{trace_path}: no complete ('X') events on process/thread rows")
    layout(rows, max_depth)

    # Time axis: milliseconds from the first event on a row.
    t0 = min(ts for r in rows.values() for ts, *_ in r.events)
    t1 = max(ts + dur for r in rows.values() for ts, dur, *_ in r.events)
    lo, hi = (0.0, (t1 - t0) / 1000.0) if window is None else window
    span = max(hi - lo, 1e-6)
    min_w = span * 0.0006  # keep sub-pixel kernels visible

    def x(ts):
        return (ts - t0) / 1000.0

    # CPU processes first, each with its main thread (tid == pid) on top, then
    # devices by index (a device pid is its index; unnamed devices have no
    # sort index of their own), then threads/streams in the trace's order.
    order = sorted(rows.values(), key=lambda r: (r.device, r.pid if r.device else proc_sort.get(r.pid, r.pid),
                                                 r.tid != r.pid or r.device,
                                                 thread_sort.get((r.pid, r.tid), r.tid), r.tid))
    heights = {"op": 0.55, "range": 0.45, "device": 0.8, "runtime": 0.3}
    mem_rows = sorted(k for k in memory if k[0] != CPU_DEVICE)

    # y positions, top to bottom: each row is a block of lanes plus a gap.
    y, lane_y, row_span = 0.0, {}, []
    for r in order:
        top = y
        for lane in r.lanes:
            lane_y[(r.pid, r.tid, lane)] = y
            y += heights[lane[0]]
        row_span.append((r, top, y))
        y += 0.35
    mem_span = []
    for key in mem_rows:
        mem_span.append((key, y, y + 1.2))
        y += 1.55
    total_h = y

    fig_h = min(2.0 + 0.42 * total_h, 30)
    fig, ax = plt.subplots(figsize=(width, fig_h), dpi=dpi)
    used = {}

    def place(r, kind, depth):
        lanes = [l for l in r.lanes if l[0] == kind]
        lane = (kind, depth) if (kind, depth) in r.lanes else lanes[-1]
        return lane_y[(r.pid, r.tid, lane)], heights[kind]

    for r in order:
        by_style = collections.defaultdict(list)
        for (ts, dur, name, cat), (kind, depth), capped in zip(r.events, r.placed, r.capped):
            if x(ts + dur) < lo or x(ts) > hi:
                continue
            y0, h = place(r, kind, depth)
            label, colour, _ = CATEGORIES.get(cat, OTHER)
            used.setdefault(label, colour)
            if kind == "range" and dur < 1.0:  # an instant marker (torch_openreg.profiler.mark)
                ax.plot([x(ts)], [y0 + h / 2], marker="v", color="#b8860b", markersize=5, zorder=4)
                used.setdefault("mark", "#b8860b")
                continue
            shade = 0.88 ** depth if kind == "op" and cat == "cpu_op" else 1.0
            by_style[(colour, shade, y0, h)].append((x(ts), max(dur / 1000.0, min_w)))
            w_ms = dur / 1000.0
            # Name the event if it is wide enough for its text.
            if not capped and kind in ("range", "op", "device") and w_ms > span * (0.0065 * len(name) + 0.004):
                ax.text(x(ts) + w_ms / 2, y0 + h * 0.52, name, ha="center", va="center",
                        fontsize=6, clip_on=True, color="black" if kind == "range" else "white",
                        zorder=5)
        for (colour, shade, y0, h), spans in by_style.items():
            rgb = [c * shade + (1 - shade) for c in mcolors.to_rgb(colour)]
            ax.broken_barh(spans, (y0 + 0.06 * h, 0.88 * h), facecolors=rgb, edgecolor="none",
                           linewidth=0, zorder=2)

    arrows = 0
    if flows_on:
        runtime_y = {}
        for r in order:
            for lane in r.lanes:
                if lane[0] in ("runtime", "device"):
                    yy, h = lane_y[(r.pid, r.tid, lane)], heights[lane[0]]
                    runtime_y[(r.pid, r.tid)] = yy + h / 2
        for ends in flows.values():
            if "s" in ends and "f" in ends:
                (ts_s, ps, tsid), (ts_f, pf, tfid) = ends["s"], ends["f"]
                if (ps, tsid) in runtime_y and (pf, tfid) in runtime_y and lo <= x(ts_s) <= hi:
                    ax.annotate("", xy=(x(ts_f), runtime_y[(pf, tfid)]),
                                xytext=(x(ts_s), runtime_y[(ps, tsid)]),
                                arrowprops=dict(arrowstyle="-|>", color=FLOW_COLOUR, lw=0.4,
                                                alpha=0.35, mutation_scale=5, shrinkA=0, shrinkB=0),
                                zorder=3)
                    arrows += 1
        if arrows:
            used.setdefault("launch -> device arrow", None)

    for key, top, bottom in mem_span:
        pts = sorted(memory[key])
        xs = [x(t) for t, _ in pts]
        peak = max(v for _, v in pts) or 1
        ys = [bottom - (bottom - top) * v / peak for _, v in pts]
        xs, ys = [lo] + xs + [hi], [ys[0]] + ys + [ys[-1]]
        ax.fill_between(xs, ys, bottom, step="post", color=MEMORY_COLOUR, alpha=0.45, linewidth=0)
        ax.step(xs, ys, where="post", color=MEMORY_COLOUR, linewidth=0.8)
        ax.text(hi, top, f" peak {peak / 2**20:.2f} MiB", fontsize=6, va="top", ha="right")
        used.setdefault("device memory allocated", MEMORY_COLOUR)

    # Row labels and separators. Kineto names one device per session: name
    # the others after it ("openreg:0" named -> "openreg:1").
    named = [proc_name[r.pid] for r in order if r.device and r.pid in proc_name]
    m = re.match(r"^(.*):\d+$", named[0]) if named else None
    device_prefix = m.group(1) if m else "device"
    ticks, labels = [], []
    for r, top, bottom in row_span:
        process = proc_name.get(r.pid, "")
        if r.device:
            head = process or f"{device_prefix}:{r.pid}"
            sub = thread_label(thread_names.get((r.pid, r.tid), []), process) or f"stream {r.tid}"
        else:
            head = f"{process or 'process'} {r.pid} ({proc_label.get(r.pid, 'CPU')})"
            sub = thread_label(thread_names.get((r.pid, r.tid), []), process) or f"thread {r.tid}"
        ticks.append((top + bottom) / 2)
        labels.append(f"{head}\n{sub}")
        ax.axhline(bottom + 0.175, color="#cccccc", linewidth=0.6, zorder=1)
    for (dtype, index), top, bottom in mem_span:
        dev = "openreg" if dtype == PRIVATEUSE1 else f"device type {dtype}"
        ticks.append((top + bottom) / 2)
        labels.append(f"{dev}:{index}\nmemory allocated")
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.set_ylim(total_h, -0.2)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("time (ms, from the first event in the trace)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", color="#eeeeee", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(title or trace.get("traceName", trace_path).split("/")[-1], fontsize=9)

    handles = []
    for label, colour in used.items():
        if label == "mark":
            handles.append(Line2D([], [], marker="v", linestyle="none", color=colour, label="instant mark"))
        elif colour is None:
            handles.append(Line2D([], [], color=FLOW_COLOUR, lw=0.8, alpha=0.6, label=label))
        else:
            handles.append(Patch(facecolor=colour, label=label))
    ncol = min(len(handles), 5)
    legend_h = 0.22 * (1 + (len(handles) - 1) // ncol) / fig_h  # in figure fractions
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, legend_h + 0.01, 1, 1))
    fig.savefig(png_path, dpi=dpi)
    plt.close(fig)
    return {"rows": len(order), "memory_rows": len(mem_span), "arrows": arrows,
            "events": sum(len(r.events) for r in order)}


def parse_window(s: str):
    a, b = s.split(":")
    return float(a), float(b)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", help="Chrome trace JSON (.json or .json.gz)")
    p.add_argument("png", help="output PNG")
    p.add_argument("--window", type=parse_window, metavar="START:END",
                   help="time window to draw, in ms from the first event (default: everything)")
    p.add_argument("--no-flows", action="store_true", help="do not draw launch -> device arrows")
    p.add_argument("--max-depth", type=int, default=4, help="nesting depth of CPU ops drawn (default 4)")
    p.add_argument("--width", type=float, default=14.0, help="figure width in inches (default 14)")
    p.add_argument("--dpi", type=int, default=110)
    p.add_argument("--title", help="figure title (default: the trace's name)")
    args = p.parse_args(argv)
    info = render(args.trace, args.png, window=args.window, flows_on=not args.no_flows,
                  max_depth=args.max_depth, width=args.width, dpi=args.dpi, title=args.title)
    print(f"{args.png}: {info['rows']} rows, {info['memory_rows']} memory rows, "
          f"{info['events']} events, {info['arrows']} arrows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
