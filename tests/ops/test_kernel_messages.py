"""The hand-written kernels' errors against the CPU's.

Most operators run the CPU's own kernels on device memory (the fallback,
CpuKernel.h), so their checks and messages are the CPU's by construction. A
hand-written kernel (csrc/aten: Native.cpp, Random.cpp, StubKernels.cpp,
Minimal.cpp, Dropout.cpp) writes or reaches its checks itself, and a user who
moves code from the CPU expects the same exception with the same words.
PyTorch's own test files check them that way (``torch.mode``'s dtype message
was found by test_sort_and_select.py; docs/pytorch-suite.md).

Each case runs on the CPU and on the device with the same arguments:

* ``out=`` of the wrong dtype and of the wrong shape: the same exception type
  and message, or the same result (dtype, shape, values where deterministic)
  with the same warnings;
* ``out=`` on the CPU next to device inputs (the CPU has no second device, so
  the reference is CUDA's rule): a RuntimeError in one of ATen's placement
  messages naming both devices, and the out tensor untouched;
* bad arguments of the functional and in-place forms: the CPU's exception and
  message.

Messages are compared with the device's name in place of ``cpu`` (a kernel
named ``normal_kernel_cpu`` on the CPU is ``normal_kernel_<device>`` on the
device, as CUDA's is ``normal_kernel_cuda``).
"""

import re
import warnings

import pytest
import torch

from tests.target import DEVICE, HW


def _dev():
    return torch.device(DEVICE, 0)


def _norm(text: str, device: str) -> str:
    """``text`` with the device's name (and index) written as ``cpu``."""
    text = text.replace(f"{device}:0", "cpu")
    # A word of its own or of a snake_case name: 'normal_kernel_<device>'.
    return re.sub(rf"(?<![A-Za-z0-9]){re.escape(device)}(?![A-Za-z0-9])", "cpu", text)


def _outcome(fn, device):
    """(exception type, message) or ('ok', result summary), and the warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = fn(device)
        except Exception as e:  # noqa: BLE001 - the exception is what is compared
            got = (type(e).__name__, _norm(str(e).split("\n")[0], DEVICE))
        else:
            rs = r if isinstance(r, tuple) else (r,)
            got = ("ok", [(x.dtype, tuple(x.shape)) for x in rs])
    warned = sorted({(w.category.__name__, _norm(str(w.message).split("\n")[0], DEVICE))
                     for w in caught})
    return got, warned, r if got[0] == "ok" else None


# ------------------------------------------------------------- out= cases ----

def _u8(d):
    return torch.tensor([[3, 1, 1, 2], [0, 4, 4, 4], [2, 2, 5, 5]], dtype=torch.uint8, device=d)


def _f(d, *shape, lo=0.1):
    g = torch.Generator().manual_seed(sum(shape))
    return (torch.rand(*shape, generator=g) + lo).to(d)


# name -> (call(device, out), good out dtype(s), a wrong dtype, deterministic)
OUT_OPS = {
    "mode.values": (lambda d, out: torch.mode(_u8(d), -1, True, out=out),
                    (torch.uint8, torch.long), (torch.int8, torch.long), True),
    "mode.values (indices dtype)": (lambda d, out: torch.mode(_u8(d), 0, False, out=out),
                                    (torch.uint8, torch.long), (torch.uint8, torch.int32), True),
    "addcmul.out": (lambda d, out: torch.addcmul(_f(d, 3, 4), _f(d, 3, 4), _f(d, 4), value=2,
                                                 out=out),
                    torch.float32, torch.int32, True),
    "normal.Tensor_float_out": (lambda d, out: torch.normal(_f(d, 3, 4), 1.0, out=out),
                                torch.float32, torch.int32, False),
    "normal.float_Tensor_out": (lambda d, out: torch.normal(0.0, _f(d, 3, 4), out=out),
                                torch.float32, torch.int32, False),
    "normal.Tensor_Tensor_out": (lambda d, out: torch.normal(_f(d, 3, 4), _f(d, 3, 4), out=out),
                                 torch.float32, torch.int32, False),
    "bernoulli.out": (lambda d, out: torch.bernoulli(_f(d, 3, 4, lo=0) * 0.9, out=out),
                      torch.float32, torch.int32, False),
    "multinomial.out": (lambda d, out: torch.multinomial(_f(d, 3, 4), 2, out=out),
                        torch.long, torch.float32, False),
    "randperm.generator_out": (lambda d, out: torch.randperm(6, out=out, device=d),
                               torch.long, torch.float32, False),
}


def _out(dtypes, device, n=0):
    if isinstance(dtypes, tuple):
        return tuple(torch.empty(n, 2, dtype=t, device=device).fill_(7) if n else
                     torch.empty(0, dtype=t, device=device) for t in dtypes)
    return torch.empty(n, 2, dtype=dtypes, device=device).fill_(7) if n else \
        torch.empty(0, dtype=dtypes, device=device)


def _compare(cpu, dev, deterministic):
    (c_got, c_warn, c_res), (d_got, d_warn, d_res) = cpu, dev
    assert d_got == c_got
    assert d_warn == c_warn
    if deterministic and c_res is not None:
        for a, b in zip(c_res if isinstance(c_res, tuple) else (c_res,),
                        d_res if isinstance(d_res, tuple) else (d_res,)):
            torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0)


# ATen's placement messages (c10/core/DeviceGuard checks, TensorIterator,
# mode_out, randperm_out, the structured out= wrapper), with the devices named.
PLACEMENT = [
    r"Expected all tensors to be on the same device, but found at least two devices, "
    r"(?P<a>\S+) and (?P<b>\S+)!",
    r"Expected all tensors to be on the same device, but got \w+ is on (?P<a>\S+), different "
    r"from other tensors on (?P<b>\S+) \(when checking argument in method [\w:.]+\)",
    r"expected device '(?P<a>[^']+)' but got '(?P<b>[^']+)' for \w+ output",
    r"device type (?P<a>\S+) does not match device type of out parameter \((?P<b>\S+)\)",
    r"Expected out tensor to have device (?P<a>\S+), but got (?P<b>\S+) instead",
]


@pytest.mark.ops
class TestOutArguments:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("name", list(OUT_OPS))
    def test_wrong_dtype(self, name):
        call, _, bad, det = OUT_OPS[name]
        cpu = _outcome(lambda d: call(d, _out(bad, d)), "cpu")
        dev = _outcome(lambda d: call(d, _out(bad, d)), _dev())
        _compare(cpu, dev, det)

    @pytest.mark.parametrize("name", list(OUT_OPS))
    def test_wrong_shape(self, name):
        call, good, _, det = OUT_OPS[name]
        cpu = _outcome(lambda d: call(d, _out(good, d, n=5)), "cpu")
        dev = _outcome(lambda d: call(d, _out(good, d, n=5)), _dev())
        _compare(cpu, dev, det)

    @pytest.mark.parametrize("name", list(OUT_OPS))
    def test_wrong_device(self, name):
        call, good, _, _ = OUT_OPS[name]
        out = _out(good, "cpu", n=2)
        before = [t.clone() for t in (out if isinstance(out, tuple) else (out,))]
        with pytest.raises(RuntimeError) as e:
            call(_dev(), out)
        msg = str(e.value).split("\n")[0]
        m = next((m for m in (re.search(p, msg) for p in PLACEMENT) if m), None)
        assert m is not None, f"not one of ATen's placement messages: {msg}"
        assert {m.group("a"), m.group("b")} in ({str(_dev()), "cpu"}, {DEVICE, "cpu"}), msg
        for t, b in zip(out if isinstance(out, tuple) else (out,), before):
            assert torch.equal(t, b), "the out= tensor was written before the error"


# ------------------------------------------------------ bad-argument cases ----

BAD_ARGS = {
    # Random.cpp: ATen's distribution templates' checks, the device's kernels.
    "uniform_ from > to": lambda d: torch.empty(3, device=d).uniform_(2, 1),
    "uniform_ out of half's range": lambda d: torch.empty(3, dtype=torch.half,
                                                          device=d).uniform_(-1e10, 0),
    "normal_ std < 0": lambda d: torch.empty(3, device=d).normal_(0, -1),
    "normal_ of an int tensor": lambda d: torch.empty(3, dtype=torch.int32, device=d).normal_(),
    "normal std tensor < 0": lambda d: torch.normal(torch.zeros(3, device=d),
                                                    -torch.ones(3, device=d)),
    "normal mean tensor, std < 0": lambda d: torch.normal(torch.zeros(3, device=d), -1.0),
    "log_normal_ std <= 0": lambda d: torch.empty(3, device=d).log_normal_(0, 0),
    "log_normal_ of an int tensor": lambda d: torch.empty(3, dtype=torch.long,
                                                          device=d).log_normal_(),
    "exponential_ lambda < 0": lambda d: torch.empty(3, device=d).exponential_(-1),
    "exponential_ of an int tensor": lambda d: torch.empty(3, dtype=torch.long,
                                                           device=d).exponential_(),
    "geometric_ p = 0": lambda d: torch.empty(3, device=d).geometric_(0),
    "geometric_ p > 1": lambda d: torch.empty(3, device=d).geometric_(1.5),
    "cauchy_ of an int tensor": lambda d: torch.empty(3, dtype=torch.long, device=d).cauchy_(),
    "random_ from >= to": lambda d: torch.empty(3, device=d).random_(5, 5),
    "random_ to beyond int8": lambda d: torch.empty(3, dtype=torch.int8, device=d).random_(0, 1000),
    "random_ from below uint8": lambda d: torch.empty(3, dtype=torch.uint8,
                                                      device=d).random_(-5, 3),
    "bernoulli_ p > 1": lambda d: torch.empty(3, device=d).bernoulli_(1.5),
    "bernoulli_ p tensor > 1": lambda d: torch.empty(3, device=d).bernoulli_(
        torch.full((3,), 1.5, device=d)),
    "bernoulli p < 0": lambda d: torch.bernoulli(torch.full((3,), -0.5, device=d)),
    "multinomial negative entry": lambda d: torch.multinomial(
        torch.tensor([0.5, -0.1, 0.6], device=d), 2, True),
    "multinomial inf entry": lambda d: torch.multinomial(
        torch.tensor([0.5, float("inf"), 0.6], device=d), 2, True),
    "multinomial zero sum": lambda d: torch.multinomial(torch.zeros(3, device=d), 2, True),
    "multinomial too many without replacement": lambda d: torch.multinomial(
        torch.ones(3, device=d), 4, False),
    "multinomial of ints": lambda d: torch.multinomial(torch.ones(3, dtype=torch.long, device=d), 2),
    "multinomial 3-d": lambda d: torch.multinomial(torch.ones(2, 2, 2, device=d), 1),
    "multinomial n = 0 categories": lambda d: torch.multinomial(torch.ones(2, 0, device=d), 1),
    "randperm n < 0": lambda d: torch.randperm(-1, device=d),
    "randperm n beyond half": lambda d: torch.randperm(4096, dtype=torch.half, device=d),
    # Minimal.cpp: the factories.
    "empty negative size": lambda d: torch.empty(2, -1, device=d),
    "empty preserve format": lambda d: torch.empty(2, 2, device=d,
                                                   memory_format=torch.preserve_format),
    "empty_strided negative size": lambda d: torch.empty_strided((2, -3), (1, 1), device=d),
    "empty channels_last 3-d": lambda d: torch.empty(2, 2, 2, device=d,
                                                     memory_format=torch.channels_last),
    # StubKernels.cpp (addcmul: ATen's structured meta function).
    "addcmul_ broadcast into self": lambda d: torch.ones(3, 1, device=d).addcmul_(
        torch.ones(3, 4, device=d), torch.ones(3, 4, device=d)),
    "addcmul shapes": lambda d: torch.addcmul(torch.ones(3, device=d), torch.ones(2, device=d),
                                              torch.ones(3, device=d)),
    "addcmul bool value on floats": lambda d: torch.addcmul(
        torch.ones(3, dtype=torch.bool, device=d), torch.ones(3, dtype=torch.bool, device=d),
        torch.ones(3, dtype=torch.bool, device=d), value=2),
    # Native.cpp: mode's other checks (ATen's mode_out on the device memory).
    "mode dim out of range": lambda d: torch.mode(_u8(d), 5, out=(
        torch.empty(0, dtype=torch.uint8, device=d), torch.empty(0, dtype=torch.long, device=d))),
    "mode of an empty dim": lambda d: torch.mode(torch.empty(2, 0, device=d), 1, out=(
        torch.empty(0, device=d), torch.empty(0, dtype=torch.long, device=d))),
    "addr_ 0-d self": lambda d: torch.tensor(1.0, device=d).addr_(torch.ones(2, device=d),
                                                                  torch.ones(3, device=d)),
    # Dropout.cpp and Minimal.cpp's native_dropout.
    "native_dropout p > 1": lambda d: torch.native_dropout(torch.ones(3, device=d), 1.5, True),
    "native_dropout_backward mask dtype": lambda d: torch.ops.aten.native_dropout_backward(
        torch.ones(3, device=d), torch.ones(3, device=d), 2.0),
}


@pytest.mark.ops
class TestBadArguments:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("name", list(BAD_ARGS))
    def test_as_on_cpu(self, name):
        call = BAD_ARGS[name]
        cpu = _outcome(call, "cpu")
        dev = _outcome(call, _dev())
        assert dev[0] == cpu[0]
        assert dev[1] == cpu[1]
