"""PyTorch's OpInfo database run on openreg, with the CPU as oracle.

For every OpInfo entry of ``torch.testing._internal.common_methods_invocations.op_db``
and every group it supports on the CPU, each ``sample_inputs("cpu", dtype)`` is
run on the CPU and, copied to openreg, on openreg (see ``opinfo_harness.py``
for what "same" means). The groups:

* ``float32``: the function, the in-place variant, the function on
  non-contiguous copies and with ``out=`` tensors, and ``error_inputs``;
* ``int64`` (else ``int32``) and ``bfloat16`` (else ``float16``): the function;
* ``backward``: float32 gradients;
* ``device1``: float32 function and gradients with the samples on openreg:1
  while openreg:0 is current.
Skips and their reasons live in ``opinfo_skips.py``.

One test per (op, group), e.g. ``test_op[nn.functional.conv2d-bfloat16]``;
``test_zz_summary`` prints ``OPINFO SUMMARY: ...`` and fails below a 99% pass
rate. To look at one failure:

    .venv/bin/python -m tests.ops.opinfo_harness nn.functional.conv2d --groups lowp -v
"""

import faulthandler

import pytest
import torch

from tests import target
from tests.target import DEVICE, HW

from . import opinfo_harness as H
from .opinfo_skips import RANDOM, RANDOM_SAMPLES, SAMPLE_SKIPS, SKIPS, VALUES_UNCHECKED

# A hung operator kills the run after this long with every thread's stack
# (instead of hanging CI): no group takes more than a few seconds.
WATCHDOG_SECONDS = 600
MIN_PASS_RATE = 99.0
MAX_REPORTED = 12

CASES = H.cases()
# The key of a test: "<op id>-<group label>", e.g. "add-float32", "sum-int64",
# "mm-bfloat16", "mul-backward" (the labels of opinfo_skips.py).
CASE_IDS = [f"{o}-{H.group_label(H.OPS[o], g)}" for o, g in CASES]

# The float32 forward smoke subset: representative operators (elementwise,
# reductions, linear algebra, convolution, views, indexing, random, factories).
SMOKE_OPS = [
    "add", "mul", "div.no_rounding_mode", "exp", "clamp", "where", "sum", "mean",
    "amax", "cumsum", "matmul", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.relu", "softmax", "nn.functional.cross_entropy", "view", "transpose",
    "cat", "index_select", "index_put", "scatter_add", "sort", "nonzero",
    "nn.functional.dropout", "arange",
]

STATS = {"ops": set(), "samples": 0, "passed": 0, "failed": 0, "skipped": 0,
         "float32 ran": set()}


def _report(op_name, group, failures, total):
    lines = [f"{len(failures)} of {total} samples of {op_name} ({group}) differ from the CPU:"]
    for r in failures[:MAX_REPORTED]:
        lines.append(f"  [{r.index}] {r.variant}: {r.sample}")
        lines.extend("      " + m for m in r.message.splitlines())
    if len(failures) > MAX_REPORTED:
        lines.append(f"  ... and {len(failures) - MAX_REPORTED} more")
    lines.append(f"repro: .venv/bin/python -m tests.ops.opinfo_harness {op_name} --groups {group} -v")
    return "\n".join(lines)


def _run(op_name, group, record):
    op = H.OPS[op_name]
    if group == H.DEVICE1 and target.device_module.device_count() < 2:
        # (openreg: OPENREG_DEVICE_COUNT >= 2)
        pytest.skip(f"the device1 group needs two {DEVICE} devices")
    reason = H.lookup(SKIPS, op, group)
    if reason is not None:
        if record:
            n = H.count_samples(op, group)
            STATS["ops"].add(op_name)
            STATS["samples"] += n
            STATS["skipped"] += n
        pytest.skip(reason)
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    try:
        results = H.run_group(op, group, values=H.lookup(VALUES_UNCHECKED, op, group) is None,
                              random=H.lookup(RANDOM, op, group) is not None,
                              sample_skip=H.lookup(SAMPLE_SKIPS, op, group),
                              random_sample=H.lookup(RANDOM_SAMPLES, op, group))
    finally:
        faulthandler.cancel_dump_traceback_later()
    failures = [r for r in results if r.status == "fail"]
    skipped = [r for r in results if r.status == "skip"]
    if record:
        if group == H.FLOAT:  # every variant ran (the layout variants are float32's)
            STATS["float32 ran"].add(op_name)
        STATS["ops"].add(op_name)
        STATS["samples"] += len(results)
        STATS["passed"] += len(results) - len(failures) - len(skipped)
        STATS["failed"] += len(failures)
        STATS["skipped"] += len(skipped)
    if failures:
        pytest.fail(_report(op_name, group, failures, len(results)), pytrace=False)


def summary_line():
    done = STATS["passed"] + STATS["failed"]
    rate = 100.0 * STATS["passed"] / done if done else 0.0
    return (f"OPINFO SUMMARY: ops={len(STATS['ops'])} samples={STATS['samples']} "
            f"passed={STATS['passed']} failed={STATS['failed']} skipped={STATS['skipped']} "
            f"pass_rate={rate:.2f}%"), rate


@pytest.mark.ops
@pytest.mark.smoke
class TestOpInfoSkipTable:
    hw_classification = HW.ACCELERATOR

    def test_skip_keys_name_existing_groups(self):
        """A key must name an OpInfo entry and, if it has a third element,
        one of that entry's groups (so renamed ops or dtypes do not leave
        stale entries behind)."""
        labels = {}
        for o, g in CASES:
            op = H.OPS[o]
            labels.setdefault((op.name, op.variant_test_name), set()).add(H.group_label(op, g))
        for table in (SKIPS, VALUES_UNCHECKED, RANDOM):
            for key, reason in table.items():
                assert key[:2] in labels, f"{key}: no such OpInfo entry"
                assert len(key) == 2 or key[2] in labels[key[:2]], \
                    f"{key}: the entry's groups are {sorted(labels[key[:2]])}"
                assert isinstance(reason, str) and len(reason) > 20, f"{key}: give a specific reason"
        for key, (predicate, reason) in list(SAMPLE_SKIPS.items()) + list(RANDOM_SAMPLES.items()):
            assert key[:2] in labels, f"{key}: no such OpInfo entry"
            assert callable(predicate) and len(reason) > 20, f"{key}: give a predicate and a reason"


@pytest.mark.ops
@pytest.mark.smoke
class TestOpInfoSmoke:
    """float32 forward of a few representative operators (under a minute)."""
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("op_name", SMOKE_OPS)
    def test_forward_float32(self, op_name):
        _run(op_name, H.FLOAT, record=False)


@pytest.mark.ops
@pytest.mark.slow
class TestOpInfo:
    """The full sweep: every OpInfo entry and group."""
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize(("op_name", "group"), CASES, ids=CASE_IDS)
    def test_op(self, op_name, group):
        _run(op_name, group, record=True)


@pytest.mark.ops
@pytest.mark.slow
class TestOpInfoSummary:
    """Runs after the sweep (pytest keeps the order of definition)."""
    hw_classification = HW.ACCELERATOR

    def test_zz_summary(self, capsys):
        line, rate = summary_line()
        with capsys.disabled():
            print("\n" + line, flush=True)
            # Where openreg follows the meta function and the CPU does not.
            differ = sorted(H.CPU_STRIDES_DIFFER.items())
            print(f"OPINFO STRIDES: the CPU's strides differ from the meta function's on "
                  f"{len(differ)} ops ({DEVICE} follows the meta function)", flush=True)
            for op_name, example in differ:
                print(f"  {op_name}: {example}", flush=True)
            # Where openreg does not yet (opinfo_skips.STRIDE_DIFFERENCES).
            seen = sorted(H.STRIDE_DIFFERENCES_SEEN.items())
            print(f"OPINFO STRIDES: {DEVICE}'s results differ from the meta function's on "
                  f"{len(seen)} listed ops (opinfo_skips.STRIDE_DIFFERENCES)", flush=True)
            for op_name, example in seen:
                print(f"  {op_name}: {example}", flush=True)
        if STATS["passed"] + STATS["failed"] == 0:
            pytest.skip("no OpInfo sample ran in this session (the sweep was deselected)")
        assert rate >= MIN_PASS_RATE, f"pass rate below {MIN_PASS_RATE}%: {line}"
        fixed = sorted((H.STRIDE_COMPARED & STATS["float32 ran"])
                       - H.STRIDE_DIFFERENCES_SEEN.keys())
        assert not fixed, (f"these ops now give the meta function's sizes and strides: delete "
                           f"their entries in opinfo_skips.STRIDE_DIFFERENCES: {fixed}")
