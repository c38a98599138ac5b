"""Quantized tensors on openreg (the QuantizedPrivateUse1 key): creation,
accessors, views, copies between devices, serialization, fake quantization and
a PT2E-quantized model, each compared bit for bit with the CPU (int_repr
equal), and the errors of operators that have no quantized kernel."""

import io
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.target import DEVICE, HW

BYTE_QDTYPES = [torch.qint8, torch.quint8, torch.qint32]
SUB_BYTE = [torch.quint4x2, torch.quint2x4]
QDTYPES = BYTE_QDTYPES + SUB_BYTE

pytestmark = pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions.*deprecated")


def qrange(dtype):
    return {torch.qint8: (-128, 127), torch.quint8: (0, 255), torch.qint32: (-2 ** 31, 2 ** 31 - 1),
            torch.quint4x2: (0, 15), torch.quint2x4: (0, 3)}[dtype]


def same_q(dev, cpu):
    """A quantized openreg tensor equals a quantized CPU one bit for bit."""
    assert dev.device.type == DEVICE and dev.is_quantized, dev
    assert dev.dtype == cpu.dtype and dev.shape == cpu.shape and dev.qscheme() == cpu.qscheme()
    assert torch.equal(dev.int_repr().cpu(), cpu.int_repr())
    if cpu.qscheme() == torch.per_tensor_affine:
        assert (dev.q_scale(), dev.q_zero_point()) == (cpu.q_scale(), cpu.q_zero_point())
    else:
        assert dev.q_per_channel_axis() == cpu.q_per_channel_axis()
        assert dev.q_per_channel_scales().device == dev.device
        assert torch.equal(dev.q_per_channel_scales().cpu(), cpu.q_per_channel_scales())
        assert torch.equal(dev.q_per_channel_zero_points().cpu(), cpu.q_per_channel_zero_points())
    assert torch.equal(dev.dequantize().cpu(), cpu.dequantize())


def both(fn):
    """(openreg result, CPU result), or the two exceptions' types and messages."""
    out = []
    for d in (DEVICE, "cpu"):
        try:
            out.append(fn(d))
        except Exception as e:  # noqa: BLE001 - compared below
            out.append(e)
    return out


shapes = st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple)


@pytest.mark.ops
@pytest.mark.smoke
class TestCreation:
    hw_classification = HW.ACCELERATOR

    @settings(max_examples=60, deadline=None)
    @given(shape=shapes, dtype=st.sampled_from(QDTYPES), scale=st.floats(1e-3, 10.0),
           zp_at=st.sampled_from(["low", "high", "mid"]), seed=st.integers(0, 2 ** 31),
           spread=st.sampled_from([1.0, 1e3]))
    def test_quantize_per_tensor(self, shape, dtype, scale, zp_at, seed, spread):
        lo, hi = qrange(dtype)
        zp = {"low": lo, "high": hi, "mid": (lo + hi) // 2}[zp_at]
        if dtype == torch.qint32:
            zp = max(-2 ** 20, min(2 ** 20, zp))
        # spread = 1e3 saturates at the dtype's limits.
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * spread
        same_q(torch.quantize_per_tensor(x.to(DEVICE), scale, zp, dtype),
               torch.quantize_per_tensor(x, scale, zp, dtype))

    def test_quantize_per_tensor_with_tensor_qparams(self):
        x = torch.randn(4, 5)
        s, z = torch.tensor(0.05), torch.tensor(3)
        same_q(torch.quantize_per_tensor(x.to(DEVICE), s.to(DEVICE), z.to(DEVICE), torch.quint8),
               torch.quantize_per_tensor(x, s, z, torch.quint8))

    @settings(max_examples=40, deadline=None)
    @given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
           dtype=st.sampled_from(BYTE_QDTYPES), data=st.data(), seed=st.integers(0, 2 ** 31))
    def test_quantize_per_channel(self, shape, dtype, data, seed):
        axis = data.draw(st.integers(0, len(shape) - 1))
        n = shape[axis]
        g = torch.Generator().manual_seed(seed)
        lo, hi = qrange(dtype)
        scales = torch.rand(n, generator=g, dtype=torch.float64) + 0.01
        zps = torch.randint(max(lo, -1000), min(hi, 1000) + 1, (n,), generator=g)
        zps[0] = max(lo, -2 ** 20)  # a zero point at the end of the range
        x = torch.randn(shape, generator=g) * 300
        same_q(torch.quantize_per_channel(x.to(DEVICE), scales.to(DEVICE), zps.to(DEVICE),
                                          axis, dtype),
               torch.quantize_per_channel(x, scales, zps, axis, dtype))

    def test_per_channel_float_qparams(self):
        x = torch.randn(3, 8)
        scales, zps = torch.rand(3) + 0.1, torch.randn(3)
        dev = torch.quantize_per_channel(x.to(DEVICE), scales.to(DEVICE), zps.to(DEVICE),
                                         0, torch.quint8)
        cpu = torch.quantize_per_channel(x, scales, zps, 0, torch.quint8)
        assert dev.qscheme() == torch.per_channel_affine_float_qparams
        same_q(dev, cpu)

    def test_per_channel_scales_on_another_device_are_refused(self):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            torch.quantize_per_channel(torch.randn(2, 3, device=DEVICE), torch.ones(3),
                                       torch.zeros(3, dtype=torch.long), 1, torch.qint8)

    @pytest.mark.parametrize("dtype", BYTE_QDTYPES, ids=str)
    def test_make_quantized_tensors(self, dtype):
        lo, hi = qrange(dtype)
        ints = torch.randint(lo, hi + 1, (4, 3), dtype={torch.qint8: torch.int8, torch.quint8: torch.uint8,
                                                          torch.qint32: torch.int32}[dtype])
        same_q(torch._make_per_tensor_quantized_tensor(ints.to(DEVICE), 0.5, 2),
               torch._make_per_tensor_quantized_tensor(ints, 0.5, 2))
        scales, zps = torch.tensor([0.1, 0.2, 0.3], dtype=torch.double), torch.tensor([0, 1, 2])
        same_q(torch._make_per_channel_quantized_tensor(ints.to(DEVICE), scales.to(DEVICE), zps.to(DEVICE), 1),
               torch._make_per_channel_quantized_tensor(ints, scales, zps, 1))

    @pytest.mark.parametrize("dtype", SUB_BYTE, ids=str)
    def test_sub_byte_dtypes_fail_where_the_cpu_fails(self, dtype):
        # Per-channel quantization and integer reinterpretation are not
        # implemented for the packed dtypes on the CPU: the same errors here.
        x, v = torch.randn(2, 3), torch.randn(4)
        for fn in [lambda d: torch.quantize_per_channel(x.to(d), torch.ones(3).to(d),
                                                        torch.zeros(3, dtype=torch.long).to(d), 1, dtype),
                   lambda d: torch.quantize_per_tensor(v.to(d), 0.1, 0, dtype).t()]:
            dev, cpu = both(fn)
            if isinstance(cpu, Exception):
                assert type(dev) is type(cpu) and str(cpu).split("\n")[0] in str(dev), (dev, cpu)
            else:
                same_q(dev, cpu)

    @pytest.mark.parametrize("dtype", QDTYPES, ids=str)
    def test_empty_factories(self, dtype):
        q = torch.quantize_per_tensor(torch.randn(2, 3).to(DEVICE), 0.2, 1, dtype)
        # (torch.empty_quantized is a Python factory: its device defaults to
        # the default device, as on CUDA, not to the quantized tensor's.)
        for e in (torch.empty_quantized([4, 5], q, device=DEVICE), torch.empty_like(q),
                  torch._empty_affine_quantized((2, 2), scale=0.3, zero_point=1, dtype=dtype, device=DEVICE)):
            assert e.device == torch.device(DEVICE, 0) and e.is_quantized and e.dtype == dtype
        e = torch.empty(3, dtype=dtype, device=f"{DEVICE}:1")
        assert e.device == torch.device(DEVICE, 1) and e.dtype == dtype
        assert torch.empty_like(q, device="cpu").device.type == "cpu"
        pc = torch.quantize_per_channel(torch.randn(2, 3).to(DEVICE), torch.ones(3, device=DEVICE),
                                        torch.zeros(3, dtype=torch.long, device=DEVICE), 1, torch.qint8)
        e = torch.empty_quantized([2, 3], pc, device=DEVICE)
        assert e.device.type == DEVICE and e.q_per_channel_scales().device.type == DEVICE

    def test_on_the_second_device(self):
        x = torch.randn(3, 4)
        q = torch.quantize_per_tensor(x.to(f"{DEVICE}:1"), 0.1, 3, torch.qint8)
        assert q.device == torch.device(DEVICE, 1)
        for r in (q.int_repr(), q.dequantize(), q.clone(), q.t().contiguous(), torch.empty_like(q)):
            assert r.device == torch.device(DEVICE, 1)
        same_q(q, torch.quantize_per_tensor(x, 0.1, 3, torch.qint8))


@pytest.mark.ops
class TestPlumbing:
    hw_classification = HW.ACCELERATOR

    def pair(self, dtype=torch.qint8, shape=(4, 6)):
        x = torch.randn(shape) * 3
        return (torch.quantize_per_tensor(x.to(DEVICE), 0.05, 2, dtype),
                torch.quantize_per_tensor(x, 0.05, 2, dtype))

    @pytest.mark.parametrize("name, fn", [
        ("view", lambda q: q.view(3, 8)),
        ("reshape", lambda q: q.reshape(2, 12)),
        ("permute", lambda q: q.permute(1, 0)),
        ("transpose+contiguous", lambda q: q.t().contiguous()),
        ("clone", lambda q: q.clone()),
        ("slice", lambda q: q[1:3, ::2]),
        ("select", lambda q: q[2]),
        ("index_select", lambda q: q.index_select(1, torch.tensor([5, 0, 2], device=q.device))),
        ("index", lambda q: q[torch.tensor([3, 1], device=q.device)]),
        ("unsqueeze", lambda q: q.unsqueeze(0)),
        ("flatten", lambda q: q.flatten()),
        ("cat", lambda q: torch.cat([q, q], 0)),
        ("relu", lambda q: torch.relu(q)),
        ("masked_fill", lambda q: q.masked_fill(torch.eye(4, 6, dtype=torch.bool, device=q.device), 1.0)),
    ])
    def test_against_the_cpu(self, name, fn):
        dev, cpu = self.pair()
        same_q(fn(dev), fn(cpu))

    def test_views_share_storage(self):
        dev, _ = self.pair()
        v = dev.view(24)
        assert v.untyped_storage().data_ptr() == dev.untyped_storage().data_ptr()
        assert dev.t().is_quantized and dev.t().device == dev.device

    @pytest.mark.parametrize("dtype", QDTYPES, ids=str)
    def test_copies_between_devices(self, dtype):
        x = torch.randn(8) * 2
        cpu = torch.quantize_per_tensor(x, 0.1, 1, dtype)
        dev = cpu.to(DEVICE)
        same_q(dev, cpu)
        back = dev.cpu()
        assert back.device.type == "cpu" and torch.equal(back.int_repr(), cpu.int_repr())
        same_q(dev.to(f"{DEVICE}:1"), cpu)
        assert dev.to(f"{DEVICE}:1").device == torch.device(DEVICE, 1)
        # copy_ into an existing quantized openreg tensor takes the source's quantizer.
        other = torch.quantize_per_tensor(torch.zeros(8), 0.7, 0, dtype).to(DEVICE)
        other.copy_(cpu)
        same_q(other, cpu)

    def test_per_channel_copies_move_their_scales(self):
        x = torch.randn(3, 5)
        cpu = torch.quantize_per_channel(x, torch.tensor([0.1, 0.2, 0.3], dtype=torch.double),
                                         torch.tensor([0, 1, 2]), 0, torch.quint8)
        dev = cpu.to(DEVICE)
        same_q(dev, cpu)
        back = dev.cpu()
        assert back.q_per_channel_scales().device.type == "cpu"
        assert torch.equal(back.int_repr(), cpu.int_repr())
        on1 = dev.to(f"{DEVICE}:1")
        assert on1.q_per_channel_scales().device == torch.device(DEVICE, 1)
        same_q(on1, cpu)

    def test_copy_from_float_quantizes(self):
        x = torch.randn(6)
        dev = torch.quantize_per_tensor(torch.zeros(6), 0.1, 4, torch.qint8).to(DEVICE)
        dev.copy_(x.to(DEVICE))
        same_q(dev, torch.quantize_per_tensor(x, 0.1, 4, torch.qint8))

    def test_equal(self):
        dev, cpu = self.pair()
        assert torch.equal(dev, dev.clone())
        assert not torch.equal(dev, torch.quantize_per_tensor(dev.dequantize(), 0.5, 2, torch.qint8))

    def test_serialization(self, tmp_path):
        dev, cpu = self.pair(torch.quint8)
        pc_cpu = torch.quantize_per_channel(torch.randn(2, 3), torch.tensor([0.1, 0.2, 0.3], dtype=torch.double),
                                            torch.tensor([0, 1, 2]), 1, torch.qint8)
        pc = pc_cpu.to(DEVICE)
        path = tmp_path / "q.pt"
        torch.save({"t": dev, "pc": pc}, path)
        loaded = torch.load(path)
        same_q(loaded["t"], cpu)
        same_q(loaded["pc"], pc_cpu)
        on_cpu = torch.load(path, map_location="cpu")
        assert on_cpu["t"].device.type == "cpu" and torch.equal(on_cpu["t"].int_repr(), cpu.int_repr())
        on1 = torch.load(path, map_location=f"{DEVICE}:1")
        assert on1["t"].device == torch.device(DEVICE, 1)
        same_q(on1["t"], cpu)
        buf = io.BytesIO()
        torch.save(cpu, buf)
        buf.seek(0)
        same_q(torch.load(buf, map_location=DEVICE), cpu)


@pytest.mark.ops
class TestFakeQuantAndPT2E:
    hw_classification = HW.ACCELERATOR

    def test_fake_quantize_operators(self):
        x = torch.randn(4, 6) * 4
        s, z = torch.tensor([0.1]), torch.tensor([3], dtype=torch.int32)
        ch_scales = torch.rand(6, generator=torch.Generator().manual_seed(0)).add(0.05)
        cases = [
            lambda d: torch.fake_quantize_per_tensor_affine(x.to(d), 0.1, 3, -128, 127),
            lambda d: torch.fake_quantize_per_tensor_affine(x.to(d), s.to(d), z.to(d), 0, 255),
            lambda d: torch.fake_quantize_per_channel_affine(
                x.to(d), ch_scales.to(d), torch.zeros(6, dtype=torch.int32).to(d), 1, -128, 127),
            lambda d: torch._fake_quantize_learnable_per_tensor_affine(x.to(d), s.to(d), s.to(d), 0, 255, 1.0),
        ]
        for fn in cases:
            dev, cpu = both(fn)
            assert dev.device.type == DEVICE and torch.equal(dev.cpu(), cpu)

    def test_quantized_decomposed_operators(self):
        import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers the ops

        qd = torch.ops.quantized_decomposed
        x = torch.randn(5, 4) * 3
        dev, cpu = both(lambda d: qd.quantize_per_tensor(x.to(d), 0.05, 3, -128, 127, torch.int8))
        assert torch.equal(dev.cpu(), cpu)
        dq_dev = qd.dequantize_per_tensor(dev, 0.05, 3, -128, 127, torch.int8)
        assert torch.equal(dq_dev.cpu(), qd.dequantize_per_tensor(cpu, 0.05, 3, -128, 127, torch.int8))
        sc, zp = torch.rand(4, dtype=torch.double) + 0.01, torch.zeros(4, dtype=torch.long)
        dev, cpu = both(lambda d: qd.quantize_per_channel(x.to(d), sc.to(d), zp.to(d), 1, -128, 127, torch.int8))
        assert torch.equal(dev.cpu(), cpu)

    @pytest.mark.parametrize("per_channel", [False, True])
    def test_pt2e_model_matches_the_cpu(self, per_channel):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
            from torchao.testing.pt2e._xnnpack_quantizer import (XNNPACKQuantizer,
                                                                  get_symmetric_quantization_config)

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 4, 3)
                self.fc = torch.nn.Linear(4 * 6 * 6, 5)

            def forward(self, x):
                return self.fc(torch.relu(self.conv(x)).flatten(1))

        def quantized_run(device):
            torch.manual_seed(0)
            model = Net().eval().to(device)
            x = torch.randn(2, 3, 8, 8).to(device)
            exported = torch.export.export(model, (x,)).module()
            quantizer = XNNPACKQuantizer().set_global(
                get_symmetric_quantization_config(is_per_channel=per_channel))
            prepared = prepare_pt2e(exported, quantizer)
            g = torch.Generator().manual_seed(1)
            for _ in range(4):  # calibrate
                prepared(torch.randn(2, 3, 8, 8, generator=g).to(device))
            converted = convert_pt2e(prepared)
            ops = {str(n.target) for n in converted.graph.nodes if n.op == "call_function"}
            return converted(x), ops

        dev, ops = quantized_run(DEVICE)
        cpu, _ = quantized_run("cpu")
        assert dev.device.type == DEVICE
        assert "quantized_decomposed.quantize_per_tensor.default" in ops
        if per_channel:
            assert "quantized_decomposed.dequantize_per_channel.default" in ops
        torch.testing.assert_close(dev.cpu(), cpu, rtol=0, atol=0)


@pytest.mark.ops
class TestErrorsAndCapability:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("name, fn, op", [
        ("add", lambda q: q + q, "aten::add.out"),
        ("exp", lambda q: q.exp(), "aten::exp.out"),
        ("sum", lambda q: q.sum(), "aten::sum.IntList_out"),
        ("zero_", lambda q: q.zero_(), "aten::zero_"),
    ])
    def test_unsupported_operators_name_the_operator_and_the_key(self, name, fn, op):
        q = torch.quantize_per_tensor(torch.randn(3, 3).to(DEVICE), 0.1, 0, torch.qint8)
        before = q.int_repr().cpu()
        with pytest.raises(NotImplementedError, match=rf"Could not run '{op}' with arguments from the "
                                                      r"'QuantizedPrivateUse1' backend"):
            fn(q)
        # The CPU refuses the same operator (for its QuantizedCPU key), and
        # the tensor is untouched.
        with pytest.raises(NotImplementedError, match=rf"Could not run '{op}' with arguments from the 'QuantizedCPU'"):
            fn(torch.quantize_per_tensor(torch.randn(3, 3), 0.1, 0, torch.qint8))
        assert torch.equal(q.int_repr().cpu(), before)

    def test_errors_match_the_cpu_on_bad_arguments(self):
        for fn in [
            lambda d: torch.quantize_per_tensor(torch.randn(3).to(d), 0.1, 0, torch.float32),
            lambda d: torch.quantize_per_tensor(torch.randn(3).to(d).double(), 0.1, 0, torch.qint8).int_repr(),
            lambda d: torch.quantize_per_channel(torch.randn(2, 3).to(d), torch.ones(2).to(d),
                                                 torch.zeros(2, dtype=torch.long).to(d), 1, torch.qint8),
            lambda d: torch.quantize_per_tensor(torch.randn(3).to(d), 0.1, 0, torch.quint4x2).cpu().copy_(
                torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.qint8)),
        ]:
            dev, cpu = both(fn)
            if isinstance(cpu, Exception):
                assert type(dev) is type(cpu), (dev, cpu)
            else:
                assert not isinstance(dev, Exception), dev

    def test_capability_lists_the_quantized_dtypes(self):
        dtypes = torch.accelerator.get_device_capability(DEVICE)["supported_dtypes"]
        assert set(QDTYPES) <= dtypes
        for dt in QDTYPES:  # each one really is supported
            q = torch.quantize_per_tensor(torch.randn(4).to(DEVICE), 0.5, 1, dt)
            assert q.dtype == dt and q.device.type == DEVICE
