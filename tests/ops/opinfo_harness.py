"""Run PyTorch's OpInfo database on openreg and compare every sample with the CPU.

Used by ``tests/ops/test_opinfo.py``; also a triage tool for whoever fixes a
failure (``python -m tests.ops.opinfo_harness --help``):

    python -m tests.ops.opinfo_harness add nn.functional.conv2d -v   # some ops, print failures
    python -m tests.ops.opinfo_harness --all --isolate               # every op, crash-safe
    OPINFO_EXACT=1 python -m tests.ops.opinfo_harness --all          # bit-for-bit comparison

What one *sample* is: one ``SampleInput`` of ``op.sample_inputs("cpu", dtype)``
run once through one variant on the CPU and once, copied to openreg with its
exact strides and storage, on openreg. The variants (``variants_of``): the
function for every group; for float32 also the in-place variant, the function
on ``SampleInput.noncontiguous()`` copies, on channels_last copies (every 4-d
and 5-d tensor, weights too) and on transposed copies (column-major in the
last two dimensions), the function with empty ``out=`` tensors, and
``op.error_inputs``; the gradients for "backward"; the function and the
gradients on openreg:1 (openreg:0 current) for "device1". A sample passes when

* both sides raise exceptions of the same type, or
* neither raises, and the outputs have the same structure; each output tensor
  is on the inputs' openreg device, with the CPU's dtype and shape, the strides
  its meta function promises (a forward call: the same call on FakeTensor
  copies of the openreg arguments, as torch.compile sees it, compared as
  Inductor's assert_size_stride does; the CPU's strides where the fake call
  cannot tell), and the CPU's values (``torch.testing.assert_close``: the op's own
  tolerance overrides where it has some, exact for integers); an output
  aliases an input on openreg exactly when it does on the CPU (views stay
  views, fresh results stay fresh); and the arguments have the same values
  afterwards (in-place mutation, out=).

Samples that do not touch openreg (no tensor or device argument, e.g.
``torch.arange(3)``) or have nothing to differentiate are not counted.

Backward samples (float32, ``requires_grad=True``) backpropagate
``sum(out * w)`` over the floating outputs, with the same fixed random ``w``
on both devices, and compare the gradients of every input that requires grad.

Random operators (the RANDOM table of opinfo_skips.py) cannot give the CPU's
values: openreg's generator is Philox, the CPU's a Mersenne Twister. For them
everything but the values is compared with the CPU (exceptions, structure,
device, dtype, shape, strides, aliasing), and the values are checked for
reproducibility instead: a second openreg call from the same seed, on fresh
copies of the sample, gives bit-for-bit the same outputs, arguments and
gradients. Their distributions are tested in tests/ops/test_rng.py.

The CPU's own kernels run on openreg (see openreg_python/csrc/aten/kernels/Fallback.cpp),
so for a deterministic operator the results are expected bit-for-bit equal
(``OPINFO_EXACT=1`` checks that: the only operators that differ at all are
those of the BUG and NOT THE BACKEND entries of opinfo_skips.py, whose float32
results also differ within tolerance; linalg.lstsq, whose default driver
PyTorch picks by device type; and mish's backward, which like the composite
BUG entries has both a CPU and a CompositeImplicitAutograd kernel and so runs
the latter on openreg; all within the float32 tolerance).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import sys
import traceback
import types
import unittest
import warnings

import torch

from tests import target
from tests.target import DEVICE
from tests.ops.opinfo_skips import LAYOUT_SKIPS, STRIDE_DIFFERENCES

# The device samples are copied to: <device>:0 (the current device), or
# <device>:1 for the "device1" variant. Set by on_device, inside which
# run_group runs every sample (not at import: collecting the suite for a
# device type that is not registered must not fail).
TARGET = None
SEED = 0
# Fixed seed of the backward weights (a generator of their own, so the global
# CPU generator state that random ops consume is not disturbed).
WEIGHT_SEED = 1234
# OPINFO_EXACT=1 compares bit-for-bit (triage: which ops take another code
# path on openreg than on the CPU).
EXACT = os.environ.get("OPINFO_EXACT") == "1"


def _import_op_db():
    # torch.testing._internal.common_utils imports ``expecttest`` (a test-only
    # dependency of PyTorch that this project does not install) for its
    # TestCase base class; we never use that class, so a stand-in suffices.
    try:
        import expecttest  # noqa: F401
    except ImportError:
        stub = types.ModuleType("expecttest")
        stub.TestCase = unittest.TestCase
        stub.ACCEPT = False
        sys.modules["expecttest"] = stub
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


op_db = _import_op_db()


def op_id(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


OPS = {op_id(op): op for op in op_db}

# ---------------------------------------------------------------------------
# Groups: what dtype, forward or backward.
# ---------------------------------------------------------------------------

FLOAT, INT, LOWP, BACKWARD = "float32", "int", "lowp", "backward"
# float32 forward (function variant) and gradients again, with the samples on
# openreg:1 while openreg:0 is the current device: every result must be on
# the device of its inputs.
DEVICE1 = "device1"
# float32 forward on sparse inputs: OpInfo's sparse samples of every layout
# the op supports (supports_sparse, supports_sparse_csr, ..._csc, ..._bsr,
# ..._bsc), moved to the device with .to() (docs/sparse.md).
SPARSE = "sparse"
GROUPS = (FLOAT, INT, LOWP, BACKWARD, DEVICE1, SPARSE)
SPARSE_LAYOUTS = {"supports_sparse": torch.sparse_coo, "supports_sparse_csr": torch.sparse_csr,
                  "supports_sparse_csc": torch.sparse_csc, "supports_sparse_bsr": torch.sparse_bsr,
                  "supports_sparse_bsc": torch.sparse_bsc}


def sparse_layouts(op):
    """The sparse layouts op declares support for."""
    return [lay for attr, lay in SPARSE_LAYOUTS.items() if getattr(op, attr, False)]


def group_dtype(op, group):
    """The dtype a group runs op with on the CPU, or None if op has none."""
    supported = op.supported_dtypes("cpu")
    if group == FLOAT:
        return torch.float32 if torch.float32 in supported else None
    if group == INT:
        for dt in (torch.int64, torch.int32):
            if dt in supported:
                return dt
        return None
    if group == LOWP:
        for dt in (torch.bfloat16, torch.float16):
            if dt in supported:
                return dt
        return None
    if group == BACKWARD:
        if not op.supports_autograd:
            return None
        return torch.float32 if torch.float32 in op.supported_backward_dtypes("cpu") else None
    if group == DEVICE1:
        return group_dtype(op, FLOAT)
    if group == SPARSE:
        return group_dtype(op, FLOAT) if sparse_layouts(op) else None
    raise ValueError(group)


def group_label(op, group) -> str:
    """The skip-table key component of a group: a dtype name, "backward" or
    "device1"."""
    if group in (BACKWARD, DEVICE1, SPARSE):
        return group
    return str(group_dtype(op, group)).replace("torch.", "")


def cases():
    """Every (op id, group) the sweep runs, in op_db order."""
    out = []
    for op in op_db:
        for g in GROUPS:
            if group_dtype(op, g) is not None:
                out.append((op_id(op), g))
    return out


# ---------------------------------------------------------------------------
# Tolerances.
# ---------------------------------------------------------------------------


def op_tolerance(op, dtype):
    """(rtol, atol) from the op's toleranceOverride decorators for CPU (or any
    device), the loosest one if there are several; None if it has none."""
    from torch.testing._internal.common_device_type import toleranceOverride

    best = None
    for dec in op.decorators:
        if getattr(dec, "device_type", None) not in (None, "cpu"):
            continue
        dtypes = getattr(dec, "dtypes", None)
        if dtypes is not None and dtype not in dtypes:
            continue
        for d in getattr(dec, "decorators", [dec]):
            if isinstance(d, toleranceOverride) and dtype in d.d:
                t = d.d[dtype]
                best = (t.rtol, t.atol) if best is None else (max(best[0], t.rtol), max(best[1], t.atol))
    return best


# ---------------------------------------------------------------------------
# Moving samples.
# ---------------------------------------------------------------------------


def _map(obj, fn, memo):
    """Apply fn to every tensor in obj (lists, tuples, dicts), mapping CPU
    device names to openreg on the way; the same tensor object maps to the same
    result."""
    if isinstance(obj, torch.Tensor):
        key = id(obj)
        if key not in memo:
            memo[key] = (obj, fn(obj))  # keep obj alive so id() stays unique
        return memo[key][1]
    if isinstance(obj, torch.Size):
        return obj
    if isinstance(obj, list):
        return [_map(o, fn, memo) for o in obj]
    if isinstance(obj, tuple):
        items = [_map(o, fn, memo) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, dict):
        return {k: _map(v, fn, memo) for k, v in obj.items()}
    return obj


def _map_device(obj, to_dev):
    if not to_dev:
        return obj
    if isinstance(obj, torch.device) and obj.type == "cpu":
        return TARGET
    if isinstance(obj, str) and obj == "cpu":
        return str(TARGET)
    if isinstance(obj, list):
        return [_map_device(o, to_dev) for o in obj]
    if isinstance(obj, tuple) and not isinstance(obj, torch.Size) and not hasattr(obj, "_fields"):
        return tuple(_map_device(o, to_dev) for o in obj)
    if isinstance(obj, dict):
        return {k: _map_device(v, to_dev) for k, v in obj.items()}
    return obj


def replicate(t: torch.Tensor, device) -> torch.Tensor:
    """A fresh leaf on device with t's values, exact sizes, strides, storage
    offset and whole storage (``.to`` would make a non-dense tensor contiguous
    and drop the rest of a partial view's storage, which ops such as
    ``as_strided`` see)."""
    if t.device.type != "cpu":
        return t  # e.g. a "meta" tensor in an error input: stays what it is
    if t.layout in SPARSE_LAYOUTS.values():
        # A sparse sample: its members copied as they are (uncoalesced stays so).
        with torch.no_grad():
            d = t.detach().to(device, copy=True)
        return d.requires_grad_(True) if t.requires_grad else d
    if t.layout != torch.strided:
        raise Unsupported(f"{t.layout} input")
    with torch.no_grad():
        src = t.detach()
        if src.is_conj() or src.is_neg():
            src = src.resolve_conj().resolve_neg()
        raw = torch.empty(0, dtype=torch.uint8).set_(src.untyped_storage())
        raw_d = raw.to(device, copy=True)
        d = torch.empty(0, dtype=t.dtype, device=device).set_(
            raw_d.untyped_storage(), src.storage_offset(), src.size(), src.stride())
    if t.requires_grad:
        d.requires_grad_(True)
    return d


def to_openreg(t):
    return replicate(t, TARGET)


def to_cpu_copy(t):
    return replicate(t, "cpu")


class Unsupported(Exception):
    """A sample this sweep cannot move to openreg (e.g. a sparse tensor)."""


# Tensor arguments that the op requires on the CPU whatever the device of its
# input (OpInfo's sample functions create them on the CPU even when asked for
# another device, as PyTorch's own device tests expect): (op name, position in
# sample.args) -> why.
KEEP_ON_CPU = {
    ("tensor_split", 0): "tensor_indices_or_sections must be a CPU tensor (as on CUDA)",
}


@dataclasses.dataclass
class Prepared:
    input: object
    args: tuple
    kwargs: dict
    tensors: list  # every tensor argument that was copied, in a fixed order
    moved: bool  # some tensor or device argument now names openreg


def prepare(op, sample, fn, to_dev):
    """Copy the sample's arguments with fn (to_openreg or to_cpu_copy)."""
    memo = {}
    args = list(sample.args)
    kept = {}
    for i, a in enumerate(args):
        if to_dev and (op.name, i) in KEEP_ON_CPU:
            kept[i] = a
    inp = _map(_map_device(sample.input, to_dev), fn, memo)
    args = [a if i in kept else _map(_map_device(a, to_dev), fn, memo) for i, a in enumerate(args)]
    kwargs = _map(_map_device(dict(sample.kwargs), to_dev), fn, memo)
    tensors = [v[1] for v in memo.values()]
    moved = any(t.device.type == DEVICE for t in tensors) or (to_dev and _names_device(
        (_map_device(sample.input, True), args, _map_device(dict(sample.kwargs), True))))
    return Prepared(inp, tuple(args), kwargs, tensors, moved)


def _names_device(obj):
    if isinstance(obj, torch.device):
        return obj.type == DEVICE
    if isinstance(obj, str):
        return obj.startswith(DEVICE)
    if isinstance(obj, (list, tuple)):
        return any(_names_device(o) for o in obj)
    if isinstance(obj, dict):
        return any(_names_device(o) for o in obj.values())
    return False


# ---------------------------------------------------------------------------
# Comparing.
# ---------------------------------------------------------------------------


class Mismatch(AssertionError):
    pass


@dataclasses.dataclass
class Policy:
    """How one group's outputs are compared."""

    tol: tuple = None  # (rtol, atol) from the op's toleranceOverride, or None
    values: bool = True  # False: outputs are uninitialised memory; metadata only
    random: bool = False  # values come from the generator: reproducibility, not the CPU's
    exact: bool = EXACT  # bit-for-bit (OPINFO_EXACT=1, for triage)
    strides: bool = True  # False: the strides were checked against the meta function's


def _flatten(out, path="out"):
    """[(path, leaf)] of an op's result: tensors and plain values."""
    if isinstance(out, torch.Tensor):
        return [(path, out)]
    if isinstance(out, (list, tuple)) and not isinstance(out, torch.Size):
        res = [(path + ".len", len(out))]
        for i, o in enumerate(out):
            res += _flatten(o, f"{path}[{i}]")
        return res
    if isinstance(out, dict):
        res = [(path + ".keys", sorted(map(str, out)))]
        for k in sorted(out, key=str):
            res += _flatten(out[k], f"{path}[{k!r}]")
        return res
    return [(path, out)]


def _storage_ptr(t):
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - e.g. tensors without storage
        return 0


def _aliases(t, inputs):
    """Indices of the inputs whose storage t shares."""
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
        return set()
    p = _storage_ptr(t)
    if not p:
        return set()
    return {i for i, x in enumerate(inputs) if x.layout == torch.strided and _storage_ptr(x) == p}


def _close(dev, cpu, pol, what):
    kw = {}
    if pol.exact:
        kw = dict(rtol=0, atol=0)
    elif pol.tol is not None and (cpu.dtype.is_floating_point or cpu.dtype.is_complex):
        from torch.testing._comparison import default_tolerances

        rtol, atol = default_tolerances(cpu.dtype)
        kw = dict(rtol=max(rtol, pol.tol[0]), atol=max(atol, pol.tol[1]))
    try:
        torch.testing.assert_close(dev.detach().cpu(), cpu.detach(), equal_nan=True,
                                   check_device=False, check_dtype=True,
                                   check_stride=False, **kw)
    except AssertionError as e:
        msg = " ".join(str(e).split())
        raise Mismatch(f"{what}: values differ: {msg}") from None


def compare_tensor(dev, cpu, pol, what, strides=True, values=True):
    if not isinstance(dev, torch.Tensor):
        raise Mismatch(f"{what}: CPU returned a tensor, {DEVICE} a {type(dev).__name__}")
    want = TARGET if cpu.device.type == "cpu" else cpu.device
    if dev.device != want:
        raise Mismatch(f"{what}: result on {dev.device}, expected a tensor on {want}")
    if dev.dtype != cpu.dtype:
        raise Mismatch(f"{what}: dtype {dev.dtype} != CPU {cpu.dtype}")
    if dev.shape != cpu.shape:
        raise Mismatch(f"{what}: shape {tuple(dev.shape)} != CPU {tuple(cpu.shape)}")
    if cpu.layout != torch.strided or dev.layout != torch.strided:
        if dev.layout != cpu.layout:
            raise Mismatch(f"{what}: layout {dev.layout} != CPU {cpu.layout}")
        if cpu.layout in SPARSE_LAYOUTS.values():
            if dev._nnz() != cpu._nnz():
                raise Mismatch(f"{what}: {dev._nnz()} specified elements != CPU {cpu._nnz()}")
            if cpu.layout == torch.sparse_coo and dev.is_coalesced() != cpu.is_coalesced():
                raise Mismatch(f"{what}: coalesced {dev.is_coalesced()} != CPU {cpu.is_coalesced()}")
            if values:
                _close(dev.to_dense(), cpu.to_dense(), pol, what)
        return
    if strides and cpu.numel() > 1 and dev.stride() != cpu.stride():
        raise Mismatch(f"{what}: strides {dev.stride()} != CPU {cpu.stride()}")
    if dev.is_conj() != cpu.is_conj() or dev.is_neg() != cpu.is_neg():
        raise Mismatch(f"{what}: conj/neg bits differ")
    if values:
        _close(dev, cpu, pol, what)


def compare_aliasing(dev_out, cpu_out, dev_inputs, cpu_inputs):
    """An output shares an input's storage on openreg exactly when it does on
    the CPU (views stay views, fresh results stay fresh)."""
    for (path, dv), (_, cv) in zip(_flatten(dev_out), _flatten(cpu_out)):
        if not isinstance(cv, torch.Tensor):
            continue
        ca, da = _aliases(cv, cpu_inputs), _aliases(dv, dev_inputs)
        if ca != da:
            if ca and not da:
                raise Mismatch(f"{path}: a view of input(s) {sorted(ca)} on the CPU, "
                               f"a fresh tensor on {DEVICE}")
            raise Mismatch(f"{path}: aliases input(s) {sorted(da)} on {DEVICE}, "
                           f"{sorted(ca)} on the CPU")


def compare_outputs(dev_out, cpu_out, pol, not_cpu=frozenset()):
    """not_cpu: paths of outputs the device lays out as the meta function
    promises in another shape than the CPU's (compare_promised_strides)."""
    d, c = _flatten(dev_out), _flatten(cpu_out)
    if [p for p, _ in d] != [p for p, _ in c]:
        raise Mismatch(f"output structure differs: {[p for p, _ in d]} != CPU {[p for p, _ in c]}")
    for (path, dv), (_, cv) in zip(d, c):
        if path in not_cpu:
            continue
        if isinstance(cv, torch.Tensor):
            compare_tensor(dv, cv, pol, path, strides=pol.strides, values=pol.values)
        elif isinstance(dv, torch.Tensor):
            raise Mismatch(f"{path}: {DEVICE} returned a tensor, CPU a {type(cv).__name__}")
        elif isinstance(cv, float) and isinstance(dv, float) and cv != cv and dv != dv:
            pass  # both NaN
        elif type(dv) is not type(cv) or (dv != cv and pol.values):
            raise Mismatch(f"{path}: {dv!r} != CPU {cv!r}")


# ---------------------------------------------------------------------------
# Strides: what the meta function promises.
# ---------------------------------------------------------------------------

#: op name -> one example of an output whose CPU strides differ from what the
#: op's meta function promises (openreg follows the meta function, as a real
#: device's kernels do: torch.compile plans with the meta strides, and
#: Inductor asserts them on the outputs of the kernels it calls).
CPU_STRIDES_DIFFER: dict = {}
#: op name -> one example of a listed difference (opinfo_skips.STRIDE_DIFFERENCES)
#: seen in this session, and the ops of that table whose results were compared.
STRIDE_DIFFERENCES_SEEN: dict = {}
STRIDE_COMPARED: set = set()


def fake_outputs(fn, p: Prepared):
    """fn's outputs on FakeTensor copies of p's device tensors: the sizes and
    strides that torch.compile expects of the device's kernels (the meta
    functions, and FakeTensor's device-aware rules such as convolution's).
    None where the fake run cannot tell (data-dependent output shapes, or an
    op without a meta function that FakeTensor will not run)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    # FakeTensor logs every meta function that raises (error inputs do).
    log = logging.getLogger("torch._subclasses.fake_tensor")
    level, log.level = log.level, logging.CRITICAL
    try:
        inp, args, kwargs = _map((p.input, p.args, p.kwargs), mode.from_tensor, {})
        with mode:
            return fn(inp, *args, **kwargs)
    except Exception:  # noqa: BLE001 - no promise to compare with
        return None
    finally:
        log.setLevel(level)


def significant_strides_differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    """As Inductor's assert_size_stride compares: strides of dimensions of size 1
    (and of empty tensors) do not count."""
    if a.numel() == 0:
        return False
    return any(n > 1 and sa != sb for n, sa, sb in zip(a.shape, a.stride(), b.stride()))


def compare_promised_strides(op, dev_out, cpu_out, promised):
    """Every strided output has its meta function's sizes and strides. Returns
    None (nothing checked) without a promise of the same structure, else the
    paths of the outputs whose CPU shape differs from the promise (the device
    follows the promise there: no CPU oracle for their values)."""
    if promised is None:
        return None
    d, c, f = _flatten(dev_out), _flatten(cpu_out), _flatten(promised)
    if [q for q, _ in d] != [q for q, _ in f]:
        return None
    name = op_id(op)
    cpu_shape_differs = set()
    for (path, dv), (_, cv), (_, fv) in zip(d, c, f):
        if not (isinstance(dv, torch.Tensor) and isinstance(fv, torch.Tensor)):
            continue
        if dv.layout != torch.strided or fv.layout != torch.strided:
            return None
        problem = None
        if dv.shape != fv.shape:
            problem = f"{path}: shape {tuple(dv.shape)} != its meta function's {tuple(fv.shape)}"
        elif significant_strides_differ(dv, fv):
            problem = (f"{path}: strides {dv.stride()} != its meta function's "
                       f"{fv.stride()} (shape {tuple(dv.shape)})")
        if name in STRIDE_DIFFERENCES:
            STRIDE_COMPARED.add(name)
            if problem is not None:  # a known difference: recorded, not failed
                STRIDE_DIFFERENCES_SEEN.setdefault(name, problem)
                return None
        elif problem is not None:
            raise Mismatch(problem)
        if not isinstance(cv, torch.Tensor):
            continue
        if cv.shape != fv.shape:
            # batch norm's eval-mode statistics: (C,) off the CPU, (0,) on it
            cpu_shape_differs.add(path)
            CPU_STRIDES_DIFFER.setdefault(
                name, f"{path}: CPU shape {tuple(cv.shape)}, meta {tuple(fv.shape)}")
            if dv.dtype != fv.dtype:
                raise Mismatch(f"{path}: dtype {dv.dtype} != its meta function's {fv.dtype}")
        elif significant_strides_differ(cv, fv):
            CPU_STRIDES_DIFFER.setdefault(
                name, f"{path}: CPU {cv.stride()}, meta {fv.stride()} "
                           f"(shape {tuple(cv.shape)})")
    return cpu_shape_differs


def relayout(sample, how):
    """The sample with its tensors in another layout, same values:
    "channels_last" (every 4-d and 5-d tensor, weights too) or "transposed"
    (every tensor of 2 or more dimensions column-major in its last two)."""
    changed = []

    def f(t):
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
            return t
        if how == "channels_last" and t.dim() in (4, 5):
            fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
            r = t.contiguous(memory_format=fmt)
        elif how == "transposed" and t.dim() >= 2:
            r = t.mT.contiguous().mT
        else:
            return t
        if significant_strides_differ(r, t):
            changed.append(t)
        return r.requires_grad_(t.requires_grad)  # a leaf: made under no_grad

    out = sample.transform(f)
    if not changed:
        raise NotApplicable(f"no tensor of this sample changes in the {how} layout")
    return out


# ---------------------------------------------------------------------------
# Running.
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    index: int
    variant: str  # "function" / "inplace" / "backward"
    status: str  # "pass" / "fail"
    message: str = ""
    sample: str = ""


class NotApplicable(Exception):
    """The sample does not exercise openreg (no tensor or device argument to
    move, or nothing to differentiate): not counted."""


def describe(sample) -> str:
    def d(o):
        if isinstance(o, torch.Tensor):
            if o.layout != torch.strided:
                extra = f" {o.layout}"
            else:
                extra = "" if o.is_contiguous() else f" stride={o.stride()}"
            return f"T{tuple(o.shape)}:{str(o.dtype).replace('torch.', '')}{extra}"
        if isinstance(o, (list, tuple)) and not isinstance(o, torch.Size):
            inner = ", ".join(d(x) for x in o)
            return f"[{inner}]" if isinstance(o, list) else f"({inner})"
        if isinstance(o, dict):
            return "{" + ", ".join(f"{k}={d(v)}" for k, v in o.items()) + "}"
        return repr(o)

    s = d(sample.input)
    if sample.args:
        s += ", " + ", ".join(d(a) for a in sample.args)
    if sample.kwargs:
        s += ", " + ", ".join(f"{k}={d(v)}" for k, v in sample.kwargs.items())
    return s


@contextlib.contextmanager
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _seed():
    # Same seed for the CPU and device generators. Not torch.manual_seed: it
    # also queues a lazy seeding of CUDA and XPU, which formats the Python
    # stack on each call (4 ms under pytest, against 12 us for these two; the
    # sweep seeds before every sample).
    torch.random.default_generator.manual_seed(SEED)
    target.device_module.manual_seed(SEED)


def _call(fn, p: Prepared):
    _seed()
    try:
        return fn(p.input, *p.args, **p.kwargs), None
    except Exception as e:  # noqa: BLE001 - any exception is a result to compare
        return None, e


def _first(e, n=300):
    s = str(e).strip().splitlines()
    s = s[0] if s else ""
    return s[:n]


def _check_exceptions(cpu_exc, dev_exc, what):
    """True if both raised (same type), False if neither; raises Mismatch otherwise."""
    if cpu_exc is None and dev_exc is None:
        return False
    if cpu_exc is not None and dev_exc is not None:
        if type(cpu_exc) is not type(dev_exc):
            raise Mismatch(f"{what}: CPU raised {type(cpu_exc).__name__}: {_first(cpu_exc)}; "
                           f"{DEVICE} raised {type(dev_exc).__name__}: {_first(dev_exc)}")
        return True
    if dev_exc is not None:
        raise Mismatch(f"{what}: {DEVICE} raised {type(dev_exc).__name__}: {_first(dev_exc)} "
                       f"(the CPU did not)")
    raise Mismatch(f"{what}: CPU raised {type(cpu_exc).__name__}: {_first(cpu_exc)} "
                   f"({DEVICE} did not)")


def _prepare_both(op, sample):
    # openreg first: the CPU call may write its arguments.
    dev = prepare(op, sample, to_openreg, True)
    if not dev.moved:
        raise NotApplicable(f"no {DEVICE} argument")
    cpu = prepare(op, sample, to_cpu_copy, False)
    return dev, cpu


def run_forward(op, sample, fn, pol):
    """Compare one forward call of fn (a variant of op) on sample."""
    dev, cpu = _prepare_both(op, sample)
    with torch.no_grad():
        promised = fake_outputs(fn, dev)  # first: an in-place variant writes its input
        cpu_out, cpu_exc = _call(fn, cpu)
        dev_out, dev_exc = _call(fn, dev)
    if _check_exceptions(cpu_exc, dev_exc, "forward"):
        return
    compare_aliasing(dev_out, cpu_out, dev.tensors, cpu.tensors)
    not_cpu = compare_promised_strides(op, dev_out, cpu_out, promised)
    processed = sample.output_process_fn_grad(dev_out)
    compare_outputs(processed, sample.output_process_fn_grad(cpu_out),
                    dataclasses.replace(pol, strides=not_cpu is None),
                    not_cpu=not_cpu if not_cpu and processed is dev_out else frozenset())
    # The arguments afterwards (in-place variants, ops that write an argument).
    for i, (dt, ct) in enumerate(zip(dev.tensors, cpu.tensors)):
        compare_tensor(dt, ct, pol, f"argument {i} after the call", strides=False,
                       values=not pol.random)
    if pol.random:
        _check_reproducible(op, sample, fn, {}, sample.output_process_fn_grad(dev_out), dev.tensors)


_EXACT = Policy(exact=True)


def _check_reproducible(op, sample, fn, extra_kwargs, out, args):
    """A random op called again from the same seed, on fresh openreg copies
    of the sample, gives the same outputs and arguments, bit for bit."""
    again = prepare(op, sample, to_openreg, True)
    again.kwargs = dict(again.kwargs, **{k: v() for k, v in extra_kwargs.items()})
    with torch.no_grad():
        out2, exc = _call(fn, again)
    if exc is not None:
        raise Mismatch(f"reproducibility: the second call raised {type(exc).__name__}: {_first(exc)}")
    try:
        compare_outputs(sample.output_process_fn_grad(out2), out, _EXACT)
        for i, (a, b) in enumerate(zip(again.tensors, args)):
            compare_tensor(a, b, _EXACT, f"argument {i} after the call", strides=False)
    except Mismatch as e:
        raise Mismatch(f"not reproducible from the same seed: {e}") from None


def _out_like(ref, device):
    """Empty out= tensors (resized by the op) for a result like ref."""
    if isinstance(ref, torch.Tensor):
        return torch.empty(0, dtype=ref.dtype, device=device)
    if isinstance(ref, (tuple, list)) and ref and all(isinstance(r, torch.Tensor) for r in ref):
        return tuple(torch.empty(0, dtype=r.dtype, device=device) for r in ref)
    raise NotApplicable("result is not a tensor or a tuple of tensors")


def _same_objects(ret, out):
    if isinstance(out, tuple):
        return isinstance(ret, (tuple, list)) and len(ret) == len(out) and \
            tuple(r is o for r, o in zip(ret, out))
    return ret is out


def run_out(op, sample, pol):
    """The function variant with out= tensors (empty, so the op resizes them)."""
    probe = prepare(op, sample, to_cpu_copy, False)
    with torch.no_grad():
        ref, exc = _call(op.op, probe)
    if exc is not None:
        raise NotApplicable("the function variant raises")
    dev, cpu = _prepare_both(op, sample)
    cpu_o, dev_o = _out_like(ref, "cpu"), _out_like(ref, TARGET)
    cpu.kwargs = dict(cpu.kwargs, out=cpu_o)
    dev.kwargs = dict(dev.kwargs, out=dev_o)
    with torch.no_grad():
        cpu_ret, cpu_exc = _call(op.op, cpu)
        dev_ret, dev_exc = _call(op.op, dev)
    if _check_exceptions(cpu_exc, dev_exc, "out="):
        return
    if _same_objects(dev_ret, dev_o) != _same_objects(cpu_ret, cpu_o):
        raise Mismatch("out=: the result is the out= tensor on one device only")
    compare_outputs(dev_o, cpu_o, pol)
    compare_outputs(dev_ret, cpu_ret, pol)
    for i, (dt, ct) in enumerate(zip(dev.tensors, cpu.tensors)):
        compare_tensor(dt, ct, pol, f"argument {i} after the call", strides=False,
                       values=not pol.random)
    if pol.random:
        _check_reproducible(op, sample, op.op, {"out": lambda: _out_like(ref, TARGET)}, dev_o,
                            dev.tensors)


def error_samples(op):
    """op.error_inputs("cpu") as SampleInputs (dtype-independent)."""
    if op.error_inputs_func is None:
        return []
    torch.manual_seed(SEED)
    try:
        return [e.sample_input for e in op.error_inputs("cpu")]
    except Exception:  # noqa: BLE001 - some error_inputs functions need a GPU
        return []


def _weights(outs):
    g = torch.Generator().manual_seed(WEIGHT_SEED)
    return [torch.randn(tuple(o.shape) + (2,) if o.is_complex() else o.shape,
                        generator=g, dtype=o.real.dtype if o.is_complex() else o.dtype)
            for o in outs]


def _loss(outs, weights):
    total = None
    for o, w in zip(outs, weights):
        if o.is_complex():
            o = torch.view_as_real(o.resolve_conj())
        term = (o * w).sum()
        total = term if total is None else total + term
    return total


def _grad_outputs(out):
    return [v for _, v in _flatten(out)
            if isinstance(v, torch.Tensor) and v.requires_grad
            and (v.is_floating_point() or v.is_complex())]


def run_backward(op, sample, pol):
    """Compare the gradients of sum(out * w) over the floating outputs."""
    dev, cpu = _prepare_both(op, sample)
    cpu_leaves = [t for t in cpu.tensors if t.requires_grad]
    dev_leaves = [t for t in dev.tensors if t.requires_grad]
    if not cpu_leaves:
        raise NotApplicable("no input requires grad")
    cpu_out, cpu_exc = _call(op.op, cpu)
    dev_out, dev_exc = _call(op.op, dev)
    if _check_exceptions(cpu_exc, dev_exc, "forward"):
        return
    cpu_out = sample.output_process_fn_grad(cpu_out)
    dev_out = sample.output_process_fn_grad(dev_out)
    # The layout is the forward group's check (against the meta function);
    # an output whose shape the meta function gives otherwise than the CPU
    # (batch norm's eval statistics) is compared with that promise.
    not_cpu = frozenset()
    if any(isinstance(dv, torch.Tensor) and isinstance(cv, torch.Tensor) and dv.shape != cv.shape
           for (_, dv), (_, cv) in zip(_flatten(dev_out), _flatten(cpu_out))):
        with torch.no_grad():
            promised = fake_outputs(lambda *a, **k: sample.output_process_fn_grad(op.op(*a, **k)),
                                    dev)
        not_cpu = compare_promised_strides(op, dev_out, cpu_out, promised) or frozenset()
    compare_outputs(dev_out, cpu_out, dataclasses.replace(pol, strides=False), not_cpu=not_cpu)
    cpu_g, dev_g = _grad_outputs(cpu_out), _grad_outputs(dev_out)
    if len(cpu_g) != len(dev_g):
        raise Mismatch(f"{len(dev_g)} differentiable outputs on {DEVICE}, {len(cpu_g)} on the CPU")
    if not cpu_g:
        raise NotApplicable("no differentiable output")
    w = _weights(cpu_g)
    wd = [x.to(TARGET) for x in w]

    def grads(outs, ws, leaves):
        _seed()
        try:
            return torch.autograd.grad(_loss(outs, ws), leaves, allow_unused=True), None
        except Exception as e:  # noqa: BLE001
            return None, e

    cg, ce = grads(cpu_g, w, cpu_leaves)
    dg, de = grads(dev_g, wd, dev_leaves)
    if _check_exceptions(ce, de, "backward"):
        return
    for i, (a, b) in enumerate(zip(dg, cg)):
        if (a is None) != (b is None):
            raise Mismatch(f"grad of input {i}: {'None' if a is None else 'a tensor'} on {DEVICE}, "
                           f"{'None' if b is None else 'a tensor'} on the CPU")
        if a is not None:
            compare_tensor(a, b, pol, f"grad of input {i}", strides=False, values=not pol.random)
    if pol.random:
        # The same forward and backward again from the same seed.
        again = prepare(op, sample, to_openreg, True)
        out2, exc = _call(op.op, again)
        if exc is not None:
            raise Mismatch(f"reproducibility: the second forward raised {type(exc).__name__}")
        g2, e2 = grads(_grad_outputs(sample.output_process_fn_grad(out2)), wd,
                       [t for t in again.tensors if t.requires_grad])
        if e2 is not None:
            raise Mismatch(f"reproducibility: the second backward raised {type(e2).__name__}")
        for i, (a, b) in enumerate(zip(g2, dg)):
            if a is not None:
                compare_tensor(a, b, _EXACT, f"grad of input {i} (second run, same seed)",
                               strides=False)


def samples_of(op, group):
    torch.manual_seed(SEED)
    return list(op.sample_inputs("cpu", group_dtype(op, group), requires_grad=group == BACKWARD))


def sparse_samples(op, vname):
    """OpInfo's float32 samples of the layout a sparse variant names. Empty
    where the op's sparse sample function raises on the CPU (OpInfo declares
    the layout, its samples are not written yet): nothing to compare."""
    layout = getattr(torch, "sparse_" + vname[len("sparse_"):])
    torch.manual_seed(SEED)
    try:
        return list(op.sample_inputs_sparse(layout, "cpu", torch.float32))
    except Exception:  # noqa: BLE001
        return []


def variants_of(op, group):
    """[(variant name, callable, group whose samples it runs on)]. float32 also
    runs the in-place variant, the function on non-contiguous copies of the
    samples (SampleInput.noncontiguous) and the function with out= tensors."""
    if group == BACKWARD:
        return [("backward", op.op, BACKWARD)]
    if group == SPARSE:
        return [(f"sparse_{str(lay).replace('torch.sparse_', '')}", op.op, SPARSE)
                for lay in sparse_layouts(op)]
    if group == DEVICE1:
        v = [("function", op.op, FLOAT)]
        if group_dtype(op, BACKWARD) is not None:
            v.append(("backward", op.op, BACKWARD))
        return v
    v = [("function", op.op, group)]
    if group == FLOAT:
        if op.inplace_variant is not None:
            v.append(("inplace", op.inplace_variant, group))
        v.append(("noncontiguous", op.op, group))
        v.append(("channels_last", op.op, group))
        v.append(("transposed", op.op, group))
        if op.supports_out:
            v.append(("out", op.op, group))
    return v


def _run_one(op, vname, fn, sample, pol):
    if vname in ("noncontiguous", "channels_last", "transposed") and any(
            t.layout != torch.strided for t in _tensors_of(sample)):
        raise NotApplicable("a sparse sample has no strides to change")
    if vname == "backward":
        run_backward(op, sample, pol)
    elif vname == "noncontiguous":
        nc = sample.noncontiguous()
        if all(not isinstance(t, torch.Tensor) or t.is_contiguous() for t in _tensors_of(nc)):
            raise NotApplicable("no tensor can be made non-contiguous")
        run_forward(op, nc, fn, pol)
    elif vname in ("channels_last", "transposed"):
        if (op_id(op), vname) in LAYOUT_SKIPS:
            raise NotApplicable(LAYOUT_SKIPS[op_id(op), vname])
        run_forward(op, relayout(sample, vname), fn, pol)
    elif vname == "out":
        run_out(op, sample, pol)
    elif vname.startswith("sparse_"):
        run_forward(op, sample, fn, dataclasses.replace(pol, strides=False))
    else:
        run_forward(op, sample, fn, pol)


def _tensors_of(sample):
    memo = {}
    _map((sample.input, tuple(sample.args), dict(sample.kwargs)), lambda t: t, memo)
    return [v[0] for v in memo.values()]


@contextlib.contextmanager
def on_device(index):
    """Copy samples to openreg:<index> (the current device stays openreg:0)."""
    global TARGET
    prev, TARGET = TARGET, torch.device(DEVICE, index)
    try:
        yield
    finally:
        TARGET = prev


def _work(op, group, limit=None):
    """[(sample index, sample, variant name, callable)] of a group."""
    cache = {}
    work = []
    for vname, fn, sgroup in variants_of(op, group):
        if sgroup == SPARSE:
            work += [(i, s, vname, fn) for i, s in enumerate(sparse_samples(op, vname)[:limit])]
            continue
        if sgroup not in cache:
            cache[sgroup] = samples_of(op, sgroup)[:limit]
        work += [(i, s, vname, fn) for i, s in enumerate(cache[sgroup])]
    if group == FLOAT:
        # Inputs the op must reject: openreg must raise what the CPU raises.
        work += [(i, s, "error_input", op.op) for i, s in enumerate(error_samples(op))]
    return work


# A group runs on a thread of its own, whose stack is a few frames deep.
# PyTorch's sample iterator (common_utils.TrackedInputIter) looks for a
# unittest test method with inspect.stack() twice per sample_inputs() call,
# and torch.manual_seed (before every sample, and in OpInfo's
# wrapper_set_seed) queues a lazy seeding of CUDA, XPU and MTIA that formats
# the caller's stack each time: under pytest's ~60 frames that was 80% of the
# sweep's time. The thread changes nothing else the group sees: it starts
# with the defaults the harness assumes (device 0 current, its default
# stream, grad mode on, no autocast) and runs one group at a time.
_GROUP_THREAD = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                      thread_name_prefix="opinfo-group")


def _on_short_stack(fn, *args, **kwargs):
    """fn(*args, **kwargs) on the group thread; its result, or its exception raised here."""
    return _GROUP_THREAD.submit(fn, *args, **kwargs).result()


def run_group(op, group, **kwargs):
    """Run every sample of (op, group); returns a list of Result (samples that
    do not exercise openreg are left out). Keywords: `values` (compare values,
    default True), `random` (a random op: reproducibility instead of values),
    `limit` (samples per group), `sample_skip`, an optional
    (predicate(sample) -> bool, reason) from opinfo_skips.SAMPLE_SKIPS: matching
    samples are reported with status "skip" instead of being run, and
    `random_sample`, the same for samples of a random op (RANDOM_SAMPLES)."""
    return _on_short_stack(_run_group, op, group, **kwargs)


def _run_group(op, group, *, values=True, random=False, limit=None, sample_skip=None,
               random_sample=None):
    pol = Policy(tol=op_tolerance(op, group_dtype(op, group)), values=values and not random,
                 random=random)
    random_pol = dataclasses.replace(pol, values=False, random=True)
    results = []
    with quiet(), on_device(1 if group == DEVICE1 else 0):
        try:
            work = _work(op, group, limit)
        except Exception as e:  # noqa: BLE001
            return [Result(-1, "samples", "fail",
                           f"sample_inputs raised {type(e).__name__}: {_first(e)}")]
        for i, sample, vname, fn in work:
            r = Result(i, vname, "pass", sample=describe(sample))
            if sample_skip is not None and vname != "error_input" and sample_skip[0](sample):
                r.status, r.message = "skip", sample_skip[1]
                results.append(r)
                continue
            p = pol
            if random_sample is not None and vname != "error_input" and random_sample[0](sample):
                p = random_pol
            try:
                _run_one(op, vname, fn, sample, p)
            except NotApplicable:
                continue
            except Mismatch as e:
                r.status, r.message = "fail", f"{vname}: {e}"
            except Unsupported as e:
                r.status, r.message = "fail", f"{vname}: cannot move the sample to {DEVICE}: {e}"
            except Exception as e:  # noqa: BLE001 - a harness-level error is a failure too
                tb = traceback.format_exc(limit=-3)
                r.status, r.message = "fail", f"{vname}: {type(e).__name__}: {_first(e)}\n{tb}"
            results.append(r)
    return results


def count_samples(op, group):
    """How many samples (x variants) a skipped group has, without running them."""
    def count():
        with quiet():
            return max(len(_work(op, group)), 1)
    try:
        return _on_short_stack(count)
    except Exception:  # noqa: BLE001
        return 1


# ---------------------------------------------------------------------------
# Skips.
# ---------------------------------------------------------------------------


def lookup(table, op, group):
    """The entry of (op, group) in a skip table, or None. Keys, most specific
    first: (name, variant, label) and (name, variant), where variant is "" for
    the default variant and label a dtype name ("float32", "int64",
    "bfloat16", ...) or "backward"."""
    label = group_label(op, group)
    for key in ((op.name, op.variant_test_name, label), (op.name, op.variant_test_name)):
        if key in table:
            return table[key]
    return None


# ---------------------------------------------------------------------------
# Triage command line.
# ---------------------------------------------------------------------------


def _main(argv=None):
    import argparse
    import json
    import os
    import subprocess
    import time

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops", nargs="*", help="op ids (name or name.variant)")
    ap.add_argument("--all", action="store_true", help="every op in op_db")
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--no-skips", action="store_true", help="ignore opinfo_skips.py")
    ap.add_argument("--isolate", action="store_true",
                    help="run in a child process that is restarted after a crash")
    ap.add_argument("--jsonl", help="write one JSON line per (op, group) here")
    ap.add_argument("--timeout", type=float, default=300, help="per (op, group), with --isolate")
    ap.add_argument("-v", action="store_true", help="print every failing sample")
    args = ap.parse_args(argv)

    groups = args.groups.split(",")
    todo = [(o, g) for o, g in cases() if (args.all or o in args.ops) and g in groups]
    if not args.no_skips:
        from tests.ops.opinfo_skips import SKIPS
        todo = [(o, g) for o, g in todo if lookup(SKIPS, OPS[o], g) is None]

    if args.isolate:
        # The child appends one line per case and prints "START <case>" before
        # each; a child that dies mid-case has crashed (or hung) on that case.
        out = args.jsonl or "/tmp/opinfo-triage.jsonl"
        done = set()
        if os.path.exists(out):
            for line in open(out):
                r = json.loads(line)
                done.add((r["op"], r["group"]))
        remaining = [c for c in todo if c not in done]
        import queue
        import threading

        while remaining:
            spec = "\n".join(f"{o}\t{g}" for o, g in remaining)
            proc = subprocess.Popen([sys.executable, "-m", "tests.ops.opinfo_harness", "--child", out],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            proc.stdin.write(spec)
            proc.stdin.close()
            lines = queue.Queue()

            def pump(stream=proc.stdout, q=lines):
                for line in stream:
                    q.put(line)
                q.put(None)

            threading.Thread(target=pump, daemon=True).start()
            current, deadline = None, None
            while True:
                try:
                    line = lines.get(timeout=5)
                except queue.Empty:
                    if deadline and time.time() > deadline:
                        proc.kill()
                        break
                    continue
                if line is None:
                    break
                if line.startswith("START "):
                    current = tuple(line[6:].rstrip("\n").split("\t"))
                    deadline = time.time() + args.timeout
                elif line.startswith("DONE"):
                    remaining.remove(current)
                    current, deadline = None, None
            rc = proc.wait()
            if current is not None:
                kind = "hang" if rc == -9 else f"crash (exit {rc})"
                with open(out, "a") as f:
                    f.write(json.dumps({"op": current[0], "group": current[1], "crash": kind,
                                        "results": []}) + "\n")
                print(f"!! {current[0]} {current[1]}: {kind}", flush=True)
                remaining.remove(current)
            elif rc != 0 and remaining:
                print(f"child exited {rc} between cases", flush=True)
        return 0

    for o, g in todo:
        t0 = time.time()
        res = run_group(OPS[o], g, values=_values(o, g), random=_random(o, g),
                        random_sample=_random_sample(o, g))
        fails = [r for r in res if r.status == "fail"]
        print(f"{o:40s} {g:9s} {len(res):4d} samples {len(fails):3d} failed  {time.time() - t0:6.2f}s",
              flush=True)
        for r in fails[: (None if args.v else 3)]:
            print(f"    [{r.index}] {r.sample}\n        {r.message.splitlines()[0][:400]}")
    return 0


def _values(o, g):
    from tests.ops.opinfo_skips import VALUES_UNCHECKED

    return lookup(VALUES_UNCHECKED, OPS[o], g) is None


def _random(o, g):
    from tests.ops.opinfo_skips import RANDOM

    return lookup(RANDOM, OPS[o], g) is not None


def _random_sample(o, g):
    from tests.ops.opinfo_skips import RANDOM_SAMPLES

    return lookup(RANDOM_SAMPLES, OPS[o], g)


def _child(out):
    import json
    import time

    for line in sys.stdin.read().splitlines():
        o, g = line.split("\t")
        print(f"START {o}\t{g}", flush=True)
        t0 = time.time()
        res = run_group(OPS[o], g, values=_values(o, g), random=_random(o, g),
                        random_sample=_random_sample(o, g))
        rec = {"op": o, "group": g, "seconds": round(time.time() - t0, 3),
               "results": [dataclasses.asdict(r) for r in res]}
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print("DONE", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
        sys.exit(0)
    sys.exit(_main())
