"""torch.save / torch.load with device tensors, modules and optimizers;
map_location; openreg's backend metadata (format tag); loading a checkpoint
in a process with fewer devices."""

import io
import json

import pytest
import torch
import torch.nn as nn

from tests import target
from tests._subprocess import run_python
from tests.target import DEVICE, HW, device


@pytest.mark.openreg_only  # a helper of the openreg-only tests
def set_meta(tensor, fmt):
    """Set openreg's backend metadata (a format tag), through torch_openreg._C."""
    import torch_openreg
    return torch_openreg._C._set_backend_meta(tensor, fmt)


@pytest.mark.openreg_only  # a helper of the openreg-only tests
def get_meta(tensor):
    """openreg's backend metadata (a format tag) of ``tensor``, or None."""
    import torch_openreg
    return torch_openreg._C._get_backend_meta(tensor)


class OnDevice:
    """``torch.device(DEVICE, index)`` in a parametrization, made when the test
    runs: at collection, a device name this process does not know (``--device
    NAME`` for a backend that is not installed) would be an import error."""

    def __init__(self, index):
        self.index = index

    def __repr__(self):
        return f"OnDevice({self.index})"


def resolve(map_location):
    return torch.device(DEVICE, map_location.index) if isinstance(map_location, OnDevice) else map_location


def round_trip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


@pytest.mark.device
@pytest.mark.smoke
class TestSaveLoadQuick:
    hw_classification = HW.ACCELERATOR

    def test_tensor_round_trip_keeps_device_values_and_sharing(self):
        cpu = torch.randn(4, 5)
        x = cpu.to(device(1))
        out = round_trip({"x": x, "row": x[2], "t": x.t()})
        assert out["x"].device == torch.device(DEVICE, 1)
        assert torch.equal(out["x"].cpu(), cpu)
        assert torch.equal(out["row"].cpu(), cpu[2])
        assert torch.equal(out["t"].cpu(), cpu.t())
        assert out["t"].stride() == (1, 5)
        # One storage saved once, still shared after loading.
        assert out["row"].untyped_storage().data_ptr() == out["x"].untyped_storage().data_ptr()
        out["row"].fill_(0)
        assert out["x"].cpu()[2].eq(0).all()

    @pytest.mark.openreg_only  # openreg's backend metadata
    def test_backend_meta_round_trip(self):
        x = torch.randn(3, device=DEVICE)
        set_meta(x, "nc8hw")
        assert get_meta(x) == "nc8hw"
        y = round_trip(x)
        assert get_meta(y) == "nc8hw"
        assert torch.equal(y.cpu(), x.cpu())


@pytest.mark.device
class TestMapLocation:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize(
        "map_location, expected",
        [
            (None, device(1)),
            ("cpu", "cpu"),
            (DEVICE, device(0)),  # the current device
            (device(0), device(0)),
            (device(1), device(1)),
            (OnDevice(0), device(0)),
            (torch.device("cpu"), "cpu"),
            ({device(1): device(0)}, device(0)),
            ({device(1): "cpu"}, "cpu"),
            (lambda storage, loc: storage, "cpu"),                         # callable: keep on CPU
            (lambda storage, loc: getattr(storage, DEVICE)(0), device(0)),  # callable: move itself
            (lambda storage, loc: None, device(1)),                        # None: default placement
        ],
        ids=["none", "cpu", "device", "device0", "device1", "torch-device0", "cpu-device",
             "dict-device", "dict-cpu", "callable-cpu", "callable-device", "callable-none"],
    )
    def test_map_location(self, map_location, expected):
        map_location = resolve(map_location)
        cpu = torch.randn(2, 3)
        out = round_trip({"a": cpu.to(device(1)), "b": torch.arange(4, device=device(1))},
                         map_location=map_location)
        assert out["a"].device == torch.device(expected)
        assert out["b"].device == torch.device(expected)
        assert torch.equal(out["a"].cpu(), cpu)
        assert torch.equal(out["b"].cpu(), torch.arange(4))

    def test_unindexed_location_means_current_device(self):
        x = torch.ones(2, device=device(0))
        with target.device_module.device(1):
            assert round_trip(x, map_location=DEVICE).device == torch.device(DEVICE, 1)

    def test_cpu_checkpoint_to_openreg(self):
        out = round_trip(torch.arange(5.0), map_location=device(1))
        assert out.device == torch.device(DEVICE, 1)
        assert out.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                       torch.int64, torch.int8, torch.uint16, torch.bool,
                                       torch.complex64])
    def test_dtypes(self, dtype):
        cpu = (torch.randn(3, 4) * 10).to(dtype) if dtype != torch.complex64 else torch.randn(3, 4, dtype=dtype)
        out = round_trip(cpu.to(DEVICE))
        assert out.dtype == dtype and out.device.type == DEVICE
        assert torch.equal(out.cpu(), cpu)

    def test_conj_and_neg_bits_survive(self):
        z = torch.randn(3, dtype=torch.complex64)
        out = round_trip({"conj": z.to(DEVICE).conj(), "neg": z.to(DEVICE).conj().imag})
        assert out["conj"].is_conj() and out["neg"].is_neg()
        assert torch.equal(out["conj"].resolve_conj().cpu(), z.conj().resolve_conj())
        assert torch.equal(out["neg"].resolve_neg().cpu(), z.conj().imag.resolve_neg())

    def test_offset_views_and_requires_grad(self):
        base = torch.randn(10, requires_grad=True)
        x = base.detach().to(DEVICE).requires_grad_()
        out = round_trip({"x": x, "tail": x.detach()[3:7]})
        assert out["x"].requires_grad and out["x"].is_leaf
        assert out["tail"].storage_offset() == 3
        assert torch.equal(out["tail"].cpu(), base.detach()[3:7])

    def test_legacy_format_and_mmap(self, tmp_path):
        x = torch.randn(4, device=device(1))
        buf = io.BytesIO()
        torch.save(x, buf, _use_new_zipfile_serialization=False)
        buf.seek(0)
        assert torch.equal(torch.load(buf).cpu(), x.cpu())
        path = tmp_path / "x.pt"
        torch.save(x, path)
        y = torch.load(path, mmap=True)
        assert y.device == x.device and torch.equal(y.cpu(), x.cpu())

    def test_save_waits_for_queued_device_work(self):
        s = target.device_module.Stream()
        x = torch.zeros(1000, device=DEVICE)
        ones = torch.ones(1000).pin_memory()
        with target.device_module.stream(s):
            target.busy(20_000)   # the stream is busy for 20 ms
            x.copy_(ones, non_blocking=True)      # an async copy queued behind it
        # torch.save copies through the current stream, as on CUDA; ordering
        # it after s is the caller's job, and then the copy sees the result.
        target.device_module.current_stream().wait_stream(s)
        assert not s.query()
        assert round_trip(x, map_location="cpu").eq(1).all()


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))


def batches(n):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(6, 5, generator=g), torch.randn(6, 2, generator=g)) for _ in range(n)]


def train(model, opt, data, device):
    for x, y in data:
        opt.zero_grad()
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        opt.step()


@pytest.mark.device
class TestModulesAndOptimizers:
    hw_classification = HW.ACCELERATOR

    def test_state_dict_to_another_device(self):
        model = make_model().to(DEVICE)
        sd = round_trip(model.state_dict())
        assert all(v.device == torch.device(DEVICE, 0) for v in sd.values())
        other = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2)).to(device(1))
        other.load_state_dict(sd)
        assert all(p.device == torch.device(DEVICE, 1) for p in other.parameters())
        x = torch.randn(3, 5)
        torch.testing.assert_close(other(x.to(device(1))).cpu(), model(x.to(DEVICE)).cpu())

    def test_whole_module_pickle(self):
        model = make_model().to(DEVICE)
        loaded = round_trip(model, weights_only=False)
        assert isinstance(loaded[0].weight, nn.Parameter)
        assert loaded[0].weight.device.type == DEVICE
        for p, q in zip(model.parameters(), loaded.parameters()):
            assert torch.equal(p.detach().cpu(), q.detach().cpu())

    @pytest.mark.parametrize("opt_kwargs", [{}, {"capturable": True}, {"fused": True}, {"foreach": True}],
                             ids=["default", "capturable", "fused", "foreach"])
    def test_adam_checkpoint_resumes_exactly(self, opt_kwargs):
        data = batches(5)
        # Uninterrupted, on the CPU: the oracle (capturable is a CUDA-graph
        # feature the CPU refuses; the arithmetic is the same without it).
        ref = make_model()
        ref_kwargs = {k: v for k, v in opt_kwargs.items() if k != "capturable"}
        ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2, **ref_kwargs)
        train(ref, ref_opt, data, "cpu")

        model = make_model().to(DEVICE)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2, **opt_kwargs)
        train(model, opt, data[:3], DEVICE)
        # A dict maps only device 0's storages; a CPU `step` stays on the CPU
        # (map_location=device(1) would move it too).
        ckpt = round_trip({"model": model.state_dict(), "opt": opt.state_dict()},
                          map_location={device(0): device(1)})
        state = ckpt["opt"]["state"][0]
        assert state["exp_avg"].device == torch.device(DEVICE, 1)
        # step is a CPU scalar unless capturable/fused, which keep it on the device.
        on_device = bool(opt_kwargs.get("capturable") or opt_kwargs.get("fused"))
        assert state["step"].device == (torch.device(DEVICE, 1) if on_device
                                         else torch.device("cpu"))
        assert state["step"].item() == 3.0

        resumed = make_model().to(device(1))
        resumed.load_state_dict(ckpt["model"])
        resumed_opt = torch.optim.Adam(resumed.parameters(), lr=1e-2, **opt_kwargs)
        resumed_opt.load_state_dict(ckpt["opt"])
        train(resumed, resumed_opt, data[3:], device(1))
        for p, q in zip(ref.parameters(), resumed.parameters()):
            torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
        assert resumed_opt.state[resumed[0].weight]["step"].item() == 5.0


@pytest.mark.device
@pytest.mark.openreg_only  # openreg's backend metadata (torch_openreg._C) and its messages
class TestBackendMeta:
    hw_classification = HW.ACCELERATOR

    def test_set_get_clear(self):
        x = torch.zeros(4, device=DEVICE)
        assert get_meta(x) is None
        set_meta(x, "blocked_16")
        assert get_meta(x) == "blocked_16"
        assert torch._utils.get_tensor_metadata(x) == {"openreg_format:blocked_16": True}
        set_meta(x, None)
        assert get_meta(x) is None
        assert torch._utils.get_tensor_metadata(x) == {}
        assert get_meta(torch.zeros(2)) is None  # CPU tensors never have one

    def test_which_tensors_carry_it(self):
        x = torch.zeros(4, 4, device=DEVICE)
        set_meta(x, "nc8")
        # Shallow copies share the TensorImpl's extra metadata...
        assert get_meta(x.detach()) == "nc8"
        assert get_meta(x.data) == "nc8"
        # ...new tensors (views, results) do not: the tag describes one tensor.
        assert get_meta(x[1]) is None
        assert get_meta(x.clone()) is None
        assert get_meta(x + 1) is None

    def test_parameters_state_dict_and_checkpoint(self):
        model = make_model().to(DEVICE)
        set_meta(model[0].weight, "nc8")
        assert get_meta(model.state_dict()["0.weight"]) == "nc8"
        sd = round_trip(model.state_dict())
        assert get_meta(sd["0.weight"]) == "nc8"
        assert get_meta(sd["0.bias"]) is None
        whole = round_trip(model, weights_only=False)
        assert get_meta(whole[0].weight) == "nc8"

    @pytest.mark.parametrize("map_location", [None, "openreg:0", "openreg:1", OnDevice(1),
                                              {"openreg:0": "openreg:1"}])
    def test_survives_any_openreg_placement(self, map_location):
        map_location = resolve(map_location)
        x = torch.randn(3, device="openreg:0")
        set_meta(x, "fmt-2.a")
        y = round_trip(x, map_location=map_location)
        assert y.device.type == DEVICE
        assert get_meta(y) == "fmt-2.a"

    def test_dropped_when_loaded_to_cpu(self):
        # A CPU tensor has no backend hooks; the tag is simply not restored.
        x = torch.randn(3, device=DEVICE)
        set_meta(x, "nc8")
        y = round_trip(x, map_location="cpu")
        assert y.device.type == "cpu" and get_meta(y) is None
        assert torch.equal(y, x.cpu())

    def test_bad_arguments(self):
        x = torch.zeros(2, device=DEVICE)
        with pytest.raises(ValueError, match="expected an openreg tensor, got a tensor on cpu"):
            set_meta(torch.zeros(2), "nc8")
        for bad in ["", "has space", "x" * 65, "slash/no"]:
            with pytest.raises(ValueError, match=r"format tag must be 1-64 characters of \[A-Za-z0-9_.-\]"):
                set_meta(x, bad)
        with pytest.raises(TypeError, match="incompatible function arguments"):
            set_meta(x, 3)
        assert get_meta(x) is None

    def test_unknown_metadata_in_checkpoint(self):
        x = torch.zeros(2, device=DEVICE)
        with pytest.raises(RuntimeError, match="openreg: unknown backend metadata 'openreg_layout:z' in the checkpoint"):
            torch._utils.set_tensor_metadata(x, {"openreg_layout:z": True})
        with pytest.raises(RuntimeError, match="the checkpoint gives a tensor two formats"):
            torch._utils.set_tensor_metadata(x, {"openreg_format:a": True, "openreg_format:b": True})
        # Other keys are not ours to judge.
        torch._utils.set_tensor_metadata(x, {"someone_else": True, "openreg_format:ok": True})
        assert get_meta(x) == "ok"


@pytest.mark.device
@pytest.mark.openreg_only  # OPENREG_DEVICE_COUNT, openreg's messages and backend metadata
class TestFewerDevices:
    """A checkpoint saved on openreg:1, loaded where there is no openreg:1."""
    hw_classification = HW.ACCELERATOR

    @pytest.fixture(scope="module")
    @classmethod
    def ckpt(cls, tmp_path_factory):
        path = tmp_path_factory.mktemp("ckpt") / "on_openreg1.pt"
        t = torch.arange(4.0, device="openreg:1")
        set_meta(t, "nc8")
        torch.save({"t": t}, path)
        return str(path)

    LOAD = """
import json, torch, torch_openreg
try:
    out = torch.load({path!r}{kwargs})
    t = out["t"]
    print(json.dumps({{"device": str(t.device), "values": t.cpu().tolist(),
                      "meta": torch_openreg._C._get_backend_meta(t) if t.device.type == "openreg" else None}}))
except Exception as e:
    print(json.dumps({{"error": type(e).__name__, "message": str(e)}}))
"""

    def load(self, ckpt, count, kwargs=""):
        r = run_python(self.LOAD.format(path=ckpt, kwargs=kwargs),
                       env={"OPENREG_DEVICE_COUNT": str(count)}, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    def test_default_load_names_device_count_and_fix(self, ckpt):
        out = self.load(ckpt, 1)
        assert out["error"] == "RuntimeError"
        assert out["message"].startswith("Cannot load a storage onto openreg:1: this process has 1 openreg device(s)")
        assert "Pass map_location to torch.load" in out["message"]
        assert "map_location={'openreg:1': 'openreg:0'}" in out["message"]

    def test_no_devices_suggests_cpu(self, ckpt):
        out = self.load(ckpt, 0)
        assert out["error"] == "RuntimeError"
        assert "this process has 0 openreg device(s)" in out["message"]
        assert "e.g. map_location='cpu'." in out["message"]
        assert "openreg:0" not in out["message"]

    @pytest.mark.parametrize("kwargs, device, meta", [
        (", map_location='openreg:0'", "openreg:0", "nc8"),
        (", map_location={'openreg:1': 'openreg:0'}", "openreg:0", "nc8"),
        (", map_location=torch.device('openreg', 0)", "openreg:0", "nc8"),
        (", map_location='cpu'", "cpu", None),
    ])
    def test_map_location_loads(self, ckpt, kwargs, device, meta):
        out = self.load(ckpt, 1, kwargs)
        assert out == {"device": device, "values": [0.0, 1.0, 2.0, 3.0], "meta": meta}

    def test_cpu_map_location_without_devices(self, ckpt):
        out = self.load(ckpt, 0, ", map_location='cpu'")
        assert out == {"device": "cpu", "values": [0.0, 1.0, 2.0, 3.0], "meta": None}
