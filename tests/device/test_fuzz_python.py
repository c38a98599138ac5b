"""Fuzzing the Python surface: ``torch.openreg.*`` with wrong types and
out-of-range values.

Every public callable of ``torch.openreg`` and its submodules (devices,
memory, random, streams and events, amp, the stream sanitizer), the methods
of ``Stream`` and ``Event``, the context managers (entered and left), the
package's other helpers (``torch_openreg.ops.rms_norm``, the profiler's
ranges) and ``torch.load``'s ``map_location`` for an openreg checkpoint are
called with arguments drawn from a pool of wrong types and out-of-range
values: None, strings, floats (nan, inf), huge and negative ints (-1, 128,
256, 2**63), devices of other types and indices ("cpu", "cuda", "openreg:99"),
tensors on the wrong device or of the wrong dtype, forged streams, lists and
plain objects. Each parameter of the callable's signature gets a value from
the pool (or its default), sometimes with one argument too many.

Each call must either succeed or raise TypeError, ValueError, RuntimeError
(OpenRegError, torch.OutOfMemoryError and NotImplementedError are
RuntimeErrors) or IndexError, with a non-empty message; anything else
(AttributeError, AssertionError, OverflowError, SystemError, a crash or a
hang) is a bug. After every call the harness checks that a context manager
restored the current device and stream, and puts back what a successful call
may legitimately change (current device and stream, memory fraction, stream
sanitizer, memory history); after every group, that the device still works
(an operation on each device matches the CPU), no memory leaked and the
accounting is sane.

The fuzzer runs in child processes (one per group of targets) so that a
segfault or a hang fails the test with the offending call (the child writes
each call to a trace file before making it) instead of killing pytest.
Hypothesis is derandomized (a fixed seed) with no example database, so CI
runs the same calls every time. ``OPENREG_TEST_FUZZ_EXAMPLES`` changes the
number of examples per target (default ``EXAMPLES``).

The out-of-range cases whose messages must name what was wrong are checked
by hand in ``TestNamedErrors`` below.
"""

import inspect
import io
import json
import math
import os
import sys
import tempfile

import pytest
import torch

from tests._subprocess import run_python
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

EXAMPLES = int(os.environ.get("OPENREG_TEST_FUZZ_EXAMPLES", "40"))
ALLOWED = (TypeError, ValueError, RuntimeError, IndexError)


# ---------------------------------------------------------------- the pool
def value_pool():
    """Wrong types and out-of-range values (and a few valid ones, so that a
    call can get past its first argument's check)."""
    o = torch.openreg
    forged = o.Stream(stream_id=12345, device_index=0,
                      device_type=int(torch._C._autograd.DeviceType.PrivateUse1))
    return [
        None, True, False, "", "x", "openreg", "openreg:0", "openreg:1", "openreg:99",
        "openreg:-1", "openreg:256", "cpu", "cuda", "cuda:0", "meta", "all", "state",
        0, 1, 2, -1, -2, 127, 128, 255, 256, 2 ** 31, 2 ** 62, 2 ** 63 - 1, 2 ** 63, -2 ** 63,
        2 ** 64, 0.0, 0.5, 1.5, -0.5, 2.0, math.nan, math.inf, -math.inf,
        torch.device("cpu"), torch.device("openreg", 1), torch.device("openreg", 99),
        torch.device("meta"), b"\x00" * 16, [], [0], (0, 1), {}, {"a": 1}, object(),
        torch.float16, torch.int64,
        torch.zeros(3), torch.zeros(16, dtype=torch.uint8), torch.ones(3, dtype=torch.uint8),
        torch.full((16,), 255, dtype=torch.uint8), torch.zeros(0),
        torch.zeros(3, device="openreg"), torch.zeros(16, dtype=torch.uint8, device="openreg"),
        torch.zeros(4, dtype=torch.int32, device="openreg:1"),
        torch.zeros(2, 3, device="openreg"), torch.zeros(3, device="meta"),
        o.default_stream(0), o.Stream(device=1), torch.Stream(device="cpu"), forged,
        o.Event(), o.Event(enable_timing=True), torch.Generator(),
        o.default_stream, lambda *a: None,
    ]


def valid_arguments():
    """A valid value for each parameter name that some target requires."""
    o = torch.openreg
    return {
        "device": 0, "peer": 1, "new_state": o.get_rng_state(0), "fraction": 0.5, "seed": 0,
        "x": torch.ones(2, 3, device="openreg"), "weight": torch.ones(3, device="openreg"),
        "msg": "fuzz", "map_location": "cpu", "stream": o.default_stream(0),
        "event": o.Event(), "end_event": o.Event(enable_timing=True),
        "obj": torch.ones(1, device="openreg"), "new_states": o.get_rng_state_all(),
    }


# ---------------------------------------------------------------- targets
def _module_functions(mod, prefix):
    names = getattr(mod, "__all__", None) or [
        n for n in dir(mod) if not n.startswith("_")
        and getattr(getattr(mod, n), "__module__", "").startswith("torch_openreg")]
    out = {}
    for n in names:
        f = getattr(mod, n)
        if callable(f) and not (inspect.isclass(f) and issubclass(f, BaseException)):
            out[f"{prefix}.{n}"] = f
    return out


def targets():
    """name -> callable. Context managers are entered and left; methods are
    bound to a fresh Stream or Event per call."""
    import torch_openreg
    import torch_openreg.distributed
    import torch_openreg.ops
    import torch_openreg.profiler
    import torch_openreg.testing
    from torch_openreg.openreg import amp, memory, random, sanitizer, streams

    o = torch.openreg
    t = {}
    t.update(_module_functions(o, "torch.openreg"))
    for mod, prefix in ((memory, "torch.openreg.memory"), (random, "torch.openreg.random"),
                        (streams, "torch.openreg.streams"), (amp, "torch.openreg.amp"),
                        (sanitizer, "torch.openreg.sanitizer"), (torch_openreg.ops, "torch_openreg.ops"),
                        (torch_openreg.profiler, "torch_openreg.profiler"),
                        (torch_openreg.testing, "torch_openreg.testing"),
                        (torch_openreg.distributed, "torch_openreg.distributed")):
        for name, f in _module_functions(mod, prefix).items():
            if f not in t.values():
                t[name] = f
    # Private but as used as torch.cuda's (the memory visualiser's entry points).
    t["torch.openreg.memory._record_memory_history"] = memory._record_memory_history
    t["torch.openreg.memory._snapshot"] = memory._snapshot
    # Methods: each call binds a new object, so no state carries over. Their
    # parameters (torch.Event's are C functions without a signature).
    P = inspect.Parameter
    methods = {
        "Stream": (lambda: o.Stream(), {"query": [], "synchronize": [], "wait_event": ["event"],
                                        "wait_stream": ["stream"], "record_event": ["event=None"]}),
        "Event": (lambda: o.Event(enable_timing=True),
                  {"record": ["stream=None"], "wait": ["stream=None"], "query": [],
                   "synchronize": [], "elapsed_time": ["end_event"]}),
    }
    for cls, (make, ms) in methods.items():
        for m, ps in ms.items():
            def method(*a, _make=make, _m=m, **k):
                return getattr(_make(), _m)(*a, **k)
            method.__signature__ = inspect.Signature([
                P(p.split("=")[0], P.POSITIONAL_OR_KEYWORD,
                  default=None if "=" in p else P.empty) for p in ps])
            t[f"{cls}().{m}"] = method

    def load(map_location):
        buf = io.BytesIO()
        torch.save(torch.arange(4.0, device="openreg"), buf)
        buf.seek(0)
        return torch.load(buf, map_location=map_location)

    t["torch.load(map_location=...)"] = load

    # A custom op has no Python signature; its schema's parameters.
    def rms_norm(x, weight, eps=1e-6):
        return torch_openreg.ops.rms_norm(x, weight, eps)

    t["torch_openreg.ops.rms_norm"] = rms_norm
    for name in list(t):
        assert name.startswith(("torch", "Stream", "Event")), name
    return t


# Calling these returns a context manager; its checks run when it is entered,
# so the harness enters and leaves it.
CONTEXT_MANAGERS = {"torch.openreg.device", "torch.openreg.device_of", "torch.openreg.stream",
                    "torch.openreg.StreamContext", "torch_openreg.profiler.range",
                    "torch_openreg.testing.recorded_kernels"}

GROUPS = {
    "devices": lambda n: n.split(".")[-1] in {
        "current_device", "device", "device_count", "device_of", "get_device_capability",
        "get_device_name", "get_device_properties", "init", "is_available", "is_initialized",
        "set_device", "synchronize", "can_device_access_peer", "is_bf16_supported",
        "get_amp_supported_dtype"} and n.startswith("torch.openreg."),
    "memory": lambda n: n.startswith("torch.openreg.memory") or n.split(".")[-1] in {
        "empty_cache", "max_memory_allocated", "max_memory_reserved", "mem_get_info",
        "memory_allocated", "memory_reserved", "memory_stats", "reset_accumulated_memory_stats",
        "reset_peak_memory_stats", "get_per_process_memory_fraction", "host_memory_stats",
        "host_memory_stats_as_nested_dict", "memory_snapshot", "memory_stats_as_nested_dict",
        "memory_summary", "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats",
        "set_per_process_memory_fraction"},
    "random": lambda n: "rng_state" in n or n.split(".")[-1] in {
        "initial_seed", "manual_seed", "manual_seed_all", "seed", "seed_all"},
    "streams": lambda n: n.startswith(("Stream", "Event")) or n.split(".")[-1] in {
        "Stream", "Event", "StreamContext", "current_stream", "default_stream", "set_stream",
        "stream"},
    "other": lambda n: True,  # sanitizer, ops, profiler, testing, distributed, torch.load
}


def group_of(name):
    for g, pred in GROUPS.items():
        if pred(name):
            return g
    raise AssertionError(name)


# ---------------------------------------------------------------- the child
def _state():
    o = torch.openreg
    return (o.current_device(),
            tuple(o.current_stream(i).stream_id for i in range(o.device_count())))


def _restore(base_state):
    """Put back what a successful call may legitimately change."""
    import torch_openreg.profiler
    from torch_openreg.openreg import memory

    o = torch.openreg

    for i in range(o.device_count()):
        o.set_stream(o.default_stream(i))
        memory.set_per_process_memory_fraction(1.0, i)
    o.set_device(base_state[0])
    o.set_stream_sanitizer(False)
    memory._record_memory_history(None)
    while torch_openreg.profiler.range_pop() >= 0:
        pass


def _call(name, fn, args, kwargs):
    """One call: success or an allowed exception with a message."""
    try:
        r = fn(*args, **kwargs)
        if name in CONTEXT_MANAGERS:
            with r:
                pass
    except ALLOWED as e:
        assert str(e).strip(), f"{name}: {type(e).__name__} without a message"
    except Exception as e:  # noqa: BLE001  (the bug this test looks for)
        raise AssertionError(f"{name}: {type(e).__name__}: {e}") from e


def _describe(v):
    if isinstance(v, torch.Tensor):
        return f"tensor({tuple(v.shape)}, {v.dtype}, {v.device})"
    if isinstance(v, torch.Stream):
        return f"Stream({v.device}, id={v.stream_id})"
    if isinstance(v, torch.Event):
        return "Event()"
    r = repr(v)
    return r if len(r) < 60 else r[:57] + "..."


def _fuzz_target(name, fn, params, pool, examples, counts, trace, base_state):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    values = st.sampled_from(pool)

    def one(args, kwargs):
        call = (f"{name}({', '.join(map(_describe, args))}"
                f"{', ' if args and kwargs else ''}"
                f"{', '.join(f'{k}={_describe(v)}' for k, v in kwargs.items())})")
        trace.write(call + "\n")
        before = _state()
        try:
            try:
                _call(name, fn, args, kwargs)
            except AssertionError as e:
                raise AssertionError(f"{call}: {e}") from None
            if name in CONTEXT_MANAGERS:
                assert _state() == before, (
                    f"{call}: current device/streams {before} became {_state()}")
        finally:
            _restore(base_state)

    # Every value of the pool in every parameter, by name, the parameters
    # before it that have no default given valid values: each wrong value
    # alone reaches its own check.
    valid = valid_arguments()
    for i, p in enumerate(params):
        for v in pool:
            kwargs = {q.name: valid.get(q.name) for q in params[:i] if q.default is q.empty}
            kwargs[p.name] = v
            one([], kwargs)
            counts[name + " (single)"] = counts.get(name + " (single)", 0) + 1

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(data=st.data())
    def fuzz(data):
        counts[name] += 1
        args, kwargs, keywords = [], {}, False
        for p in params:
            if p.default is not p.empty and data.draw(st.booleans()):
                keywords = True  # keep the default; what follows goes by name
                continue
            v = data.draw(values)
            if keywords or p.kind == p.KEYWORD_ONLY:
                kwargs[p.name] = v
            else:
                args.append(v)
        if not kwargs and data.draw(st.integers(0, 9)) == 0:
            args.append(data.draw(values))  # one argument too many
        one(args, kwargs)

    fuzz()


def child_main(group, examples, trace_path):
    """Fuzz the targets of ``group``; print one JSON line with the number of
    examples run per target. Run in a child (see ``_run_group``)."""
    o = torch.openreg
    o.init()
    pool = value_pool()
    trace = open(trace_path, "w", buffering=1)
    # Everything a target created and left alive is freed before the leak check.
    torch.openreg.synchronize()
    base_state = _state()
    base_allocated = [o.memory_allocated(i) for i in range(o.device_count())]
    counts, failures = {}, []
    for name, fn in sorted(targets().items()):
        if group_of(name) != group:
            continue
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            params = []
        params = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                  p.KEYWORD_ONLY)]
        counts[name] = 0
        try:
            _fuzz_target(name, fn, params, pool, examples, counts, trace, base_state)
        except Exception as e:  # noqa: BLE001  (reported below, after the other targets)
            subs = getattr(e, "exceptions", None) or [e]
            failures += [f"{name}: {type(x).__name__}: {x}" for x in subs]
    if failures:
        print("FAILURES\n" + "\n".join(failures), flush=True)
        sys.exit(1)
    trace.write("CHECK state\n")
    _check_intact(base_state, base_allocated)
    trace.write("DONE\n")
    print("COUNTS " + json.dumps(counts), flush=True)


def _check_intact(base_state, base_allocated):
    """The device still works after the fuzzing: state, memory, results."""
    import gc

    o = torch.openreg
    assert _state() == base_state, f"state {base_state} became {_state()}"
    gc.collect()
    o.synchronize()
    for i in range(o.device_count()):
        x = torch.arange(12.0).reshape(3, 4)
        y = (x.to(f"openreg:{i}") @ x.T.to(f"openreg:{i}")).softmax(-1)
        torch.testing.assert_close(y.cpu(), (x @ x.T).softmax(-1))
        del y
        free, total = o.mem_get_info(i)
        assert 0 <= free <= total, (free, total)
        assert o.memory_allocated(i) == base_allocated[i], (
            f"openreg:{i}: {o.memory_allocated(i) - base_allocated[i]} bytes leaked by the fuzzing")
        assert o.get_per_process_memory_fraction(i) == 1.0
    assert not o.is_stream_sanitizer_enabled()


def _run_group(group, examples):
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace")
        code = (f"import torch\nfrom tests.device.test_fuzz_python import child_main\n"
                f"child_main({group!r}, {examples}, {trace!r})\n")
        try:
            proc = run_python(code, timeout=180, clean_openreg_env=True)
        except Exception:
            raise AssertionError(f"fuzzing {group} hung; last call: {_last(trace)}") from None
        if proc.returncode != 0:
            raise AssertionError(
                f"fuzzing {group}: the child exited with {proc.returncode}; last call: "
                f"{_last(trace)}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-6000:]}")
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("COUNTS ")][-1]
        return json.loads(line[len("COUNTS "):])


def _last(trace):
    try:
        with open(trace) as f:
            lines = f.read().splitlines()
        return lines[-1] if lines else "(none)"
    except OSError:
        return "(no trace)"


@pytest.mark.device
class TestFuzzPythonSurface:
    hw_classification = HW.ACCELERATOR

    def test_every_public_callable_is_a_target(self):
        names = set(targets())
        o = torch.openreg
        for n in o.__all__:
            f = getattr(o, n)
            if callable(f) and not (inspect.isclass(f) and issubclass(f, BaseException)):
                assert f"torch.openreg.{n}" in names, n
        # Every group has targets, and each target is in exactly one.
        groups = {group_of(n) for n in names}
        assert groups == set(GROUPS), groups

    @pytest.mark.parametrize("group", list(GROUPS))
    def test_fuzz(self, group):
        counts = _run_group(group, EXAMPLES)
        assert counts, f"no targets in {group}"
        for name, n in counts.items():
            # Hypothesis may stop early only when it has run out of distinct inputs.
            assert n >= min(EXAMPLES, 5), f"{name}: only {n} examples"
        print(f"{group}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))


@pytest.mark.device
class TestNamedErrors:
    """Out-of-range and wrong-type arguments picked by hand: the exception
    type, and a message that names what was wrong. Each of the first ones
    failed before the fix named in its docstring."""
    hw_classification = HW.ACCELERATOR

    def setup_method(self):
        torch.openreg.set_device(0)

    def test_device_index_past_int8_is_refused(self):
        """set_device(256) selected device 0 and set_device(128) named device
        -128: indices were narrowed to c10::DeviceIndex (int8) before the check
        (Module.cpp, device_index)."""
        o = torch.openreg
        o.set_device(1)
        for index in (256, 257, 128, 2 ** 62, 2 ** 63, 2 ** 80):
            with pytest.raises(RuntimeError, match=f"Invalid openreg device index {index}: "):
                o.set_device(index)
            assert o.current_device() == 1
        for call in (o.synchronize, o.current_stream, o.default_stream, o.mem_get_info,
                     o.memory_stats, o.get_rng_state, o.get_device_properties,
                     lambda i: o.Stream(device=i), lambda i: o.device(i).__enter__(),
                     lambda i: o.can_device_access_peer(0, i)):
            with pytest.raises(RuntimeError, match="Invalid openreg device index 256: 2 openreg"):
                call(256)
        assert o.current_device() == 1

    def test_bindings_check_the_full_index(self):
        """The same narrowing in the bindings themselves (torch_openreg._C)."""
        from torch_openreg import _C

        for call in (_C._set_device, _C._exchange_device, _C._get_current_stream,
                     _C._get_default_stream, _C._mem_get_info, _C._synchronize,
                     _C._get_memory_fraction, _C._get_default_generator,
                     lambda i: _C._stream_priority(0, i)):
            with pytest.raises(RuntimeError, match="Invalid openreg device index 256"):
                call(256)
        assert torch.openreg.current_device() == 0

    def test_device_string_past_int8(self):
        """torch.device("openreg:256") is openreg:0 (torch wraps the index):
        the index as written is checked."""
        with pytest.raises(RuntimeError, match="Invalid openreg device index 256"):
            torch.openreg.set_device("openreg:256")
        with pytest.raises(RuntimeError, match="Invalid openreg device index 300"):
            torch.openreg.synchronize("openreg:300")
        torch.openreg.set_device("openreg:1")
        assert torch.openreg.current_device() == 1

    def test_wrong_types_are_type_errors(self):
        """These raised AttributeError from deep inside ('NoneType' object has
        no attribute 'wait')."""
        import torch_openreg.ops

        o = torch.openreg
        s = o.Stream()
        cases = [
            (lambda: o.device_of(None), "device_of: expected a torch.Tensor, got NoneType"),
            (lambda: o.set_stream("x"), "set_stream: expected stream to be a torch.Stream, got str"),
            (lambda: o.stream(3), "expected stream to be a torch.Stream, got int"),
            (lambda: o.StreamContext(o.Event()), "expected stream to be a torch.Stream, got Event"),
            (lambda: s.wait_event(None), "wait_event: expected event to be a torch.Event, got NoneType"),
            (lambda: s.record_event("e"), "record_event: expected event to be a torch.Event, got str"),
            (lambda: s.wait_stream(0), "wait_stream: expected stream to be a torch.Stream, got int"),
            (lambda: o.Event(enable_timing=True).elapsed_time("x"),
             "elapsed_time: expected two torch.Event objects, got .* and <class 'str'>"),
            (lambda: o.memory._record_memory_history(max_entries=1.5),
             "max_entries must be an int, got float"),
            (lambda: torch_openreg.ops.rms_norm(torch.ones(2, 3, device="openreg"), None),
             "openreg::rms_norm: weight must be a Tensor, got NoneType"),
        ]
        for call, message in cases:
            with pytest.raises(TypeError, match=message):
                call()
        assert o.current_stream() == o.default_stream()

    def test_infinite_seed(self):
        """int(inf) raised OverflowError."""
        for f in (torch.openreg.manual_seed, torch.openreg.manual_seed_all):
            with pytest.raises(ValueError, match=f"{f.__name__}: seed must be a finite number, got inf"):
                f(math.inf)
        with pytest.raises(ValueError, match="cannot convert float NaN"):
            torch.openreg.manual_seed(math.nan)

    def test_nan_memory_fraction(self):
        """nan passed the Python range check (nan < 0 and nan > 1 are both
        false) and was refused only by the C++ check, as a RuntimeError."""
        for bad in (math.nan, -0.5, 1.5, math.inf):
            with pytest.raises(ValueError, match=f"Invalid fraction value: {bad}. Allowed range: 0~1"):
                torch.openreg.set_per_process_memory_fraction(bad)
        with pytest.raises(TypeError, match="fraction argument, must be `float`"):
            torch.openreg.set_per_process_memory_fraction(1)
        assert torch.openreg.get_per_process_memory_fraction() == 1.0

    def test_negative_history_entries(self):
        with pytest.raises(ValueError, match="max_entries must be >= 0, got -1"):
            torch.openreg.memory._record_memory_history(max_entries=-1)
        with pytest.raises(RuntimeError, match="expected stacks to be 'python' or 'all', got 'x'"):
            torch.openreg.memory._record_memory_history(stacks="x")
        torch.openreg.memory._record_memory_history(None)

    def test_other_devices_and_values(self):
        """Already clear before the fuzzing; kept so they stay so."""
        o = torch.openreg
        with pytest.raises(ValueError, match="Expected an openreg device, but got: cpu"):
            o.set_device("cpu")
        with pytest.raises(ValueError, match="Expected an openreg device, but got: cuda:0"):
            o.memory_allocated(torch.device("cuda", 0))
        with pytest.raises(TypeError, match="Expected a torch.device, str, int or None, got float"):
            o.synchronize(0.5)
        with pytest.raises(RuntimeError, match="RNG state is wrong size: .* got 3"):
            o.set_rng_state(torch.zeros(3, dtype=torch.uint8))
        with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
            o.set_rng_state(torch.zeros(16))
        with pytest.raises(TypeError, match="argument 'priority' must be int, not str"):
            o.Stream(priority="high")
        with pytest.raises(NotImplementedError, match="cannot be shared between processes"):
            o.Event(interprocess=True)
        forged = o.Stream(stream_id=12345, device_index=0,
                          device_type=int(torch._C._autograd.DeviceType.PrivateUse1))
        with pytest.raises(RuntimeError, match="unknown stream id 12345 on device openreg:0"):
            o.set_stream(forged)
        with pytest.raises(RuntimeError, match="Cannot load a storage onto openreg:7"):
            buf = io.BytesIO()
            torch.save(torch.ones(2, device="openreg"), buf)
            buf.seek(0)
            torch.load(buf, map_location="openreg:7")
        assert o.current_stream() == o.default_stream()
