"""Devices through the device module (torch.openreg) and torch.accelerator."""

import subprocess
import sys

import pytest
import torch

from tests import target
from tests._subprocess import REPO, run_python
from tests.target import DEVICE, HW, device


@pytest.mark.device
@pytest.mark.smoke
class TestDeviceBasics:
    hw_classification = HW.ACCELERATOR

    def test_backend_is_registered(self):
        assert torch._C._get_privateuse1_backend_name() == DEVICE
        assert target.device_module.is_available()
        assert target.device_module.device_count() == 2
        assert torch.accelerator.current_accelerator() == torch.device(DEVICE)
        assert torch.accelerator.device_count() == 2

    def test_generated_methods(self):
        # The methods named after the device (Tensor.openreg(), .is_openreg, ...).
        t = getattr(torch.ones(3), DEVICE)()
        assert getattr(t, f"is_{DEVICE}") and t.device == torch.device(DEVICE, 0)
        m = getattr(torch.nn.Linear(2, 2), DEVICE)()
        assert next(m.parameters()).device.type == DEVICE
        s = getattr(torch.UntypedStorage(4), DEVICE)()
        assert s.device.type == DEVICE and getattr(s, f"is_{DEVICE}")

    def test_set_device_and_current(self):
        prev = target.device_module.current_device()
        try:
            target.device_module.set_device(1)
            assert target.device_module.current_device() == 1
            assert torch.empty(1, device=DEVICE).device.index == 1
            target.device_module.set_device(-1)  # ignored, as in torch.cuda
            assert target.device_module.current_device() == 1
        finally:
            target.device_module.set_device(prev)

    def test_device_context_manager_restores(self):
        assert target.device_module.current_device() == 0
        with target.device_module.device(1):
            assert target.device_module.current_device() == 1
            with target.device_module.device(device(0)):
                assert target.device_module.current_device() == 0
            assert target.device_module.current_device() == 1
        assert target.device_module.current_device() == 0

    def test_device_of(self):
        t = torch.ones(1, device=device(1))
        with target.device_module.device_of(t):
            assert target.device_module.current_device() == 1
        assert target.device_module.current_device() == 0

    def test_accelerator_device_index(self):
        with torch.accelerator.device_index(1):
            assert torch.accelerator.current_device_index() == 1
        assert torch.accelerator.current_device_index() == 0

    @pytest.mark.openreg_only  # openreg's names, capacity and strict memory
    def test_properties(self):
        p = torch.openreg.get_device_properties(1)
        assert p.name == "OpenReg Simulated Device 1"
        assert p.total_memory == 4 << 30
        assert p.multi_processor_count >= 1
        assert p.strict_memory is True
        assert torch.openreg.get_device_name(0) == "OpenReg Simulated Device 0"
        assert torch.openreg.get_device_capability() == (p.major, p.minor)
        assert "OpenReg Simulated Device 1" in repr(p)

    def test_initialized(self):
        torch.empty(1, device=DEVICE)
        assert target.device_module.is_initialized()

    @pytest.mark.parametrize("form, index", [
        (lambda: target.device_module.synchronize(), 0),
        (lambda: target.device_module.synchronize(1), 1),
        (lambda: target.device_module.synchronize(device(1)), 1),
        (lambda: target.device_module.synchronize(torch.device(DEVICE, 1)), 1),
        (lambda: torch.accelerator.synchronize(), 0),
        (lambda: torch.accelerator.synchronize(1), 1),
    ], ids=["module()", "module(1)", "module('device:1')", "module(device)",
            "accelerator()", "accelerator(1)"])
    def test_synchronize_all_forms(self, form, index):
        # Every form waits for the work queued on every stream of the device it
        # names (here a side stream, busy for 100 ms of device time).
        side = target.device_module.Stream(device=index)
        with target.device_module.stream(side):
            target.busy(100_000)
        assert not side.query()
        form()
        assert side.query()


@pytest.mark.device
@pytest.mark.smoke
class TestInvalidDevices:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("index", [2, 7, 100])
    @pytest.mark.openreg_only  # openreg's message
    def test_set_device_out_of_range(self, index):
        with pytest.raises(RuntimeError, match=f"Invalid openreg device index {index}: 2 openreg"):
            torch.openreg.set_device(index)
        assert torch.openreg.current_device() == 0

    @pytest.mark.openreg_only  # openreg's message
    def test_tensor_on_missing_device(self):
        with pytest.raises(RuntimeError, match="Invalid openreg device index 5"):
            torch.empty(3, device="openreg:5")

    @pytest.mark.openreg_only  # openreg's message
    def test_device_context_out_of_range(self):
        with pytest.raises(RuntimeError, match="Invalid openreg device index 3"):
            with torch.openreg.device(3):
                pass
        assert torch.openreg.current_device() == 0

    @pytest.mark.openreg_only  # openreg's message
    def test_wrong_device_type(self):
        with pytest.raises(ValueError, match="Expected an openreg device, but got: cpu"):
            torch.openreg.get_device_properties("cpu")

    def test_mixing_devices_in_one_op(self):
        a = torch.ones(2, device=device(0))
        b = torch.ones(2, device=device(1))
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            torch.atan2(a, b)

    def test_process_keeps_working(self):
        with pytest.raises(RuntimeError):
            torch.empty(3, device=device(9))
        assert torch.ones(3, device=DEVICE).sum().item() == 3


@pytest.mark.device
@pytest.mark.openreg_only  # openreg's configuration variables
class TestConfiguration:
    hw_classification = HW.ACCELERATOR

    def test_device_count_from_environment(self):
        r = run_python("import torch; print(torch.openreg.device_count(), torch.openreg.get_device_properties(2).total_memory)",
                       env={"OPENREG_DEVICE_COUNT": "3", "OPENREG_DEVICE_MEMORY": "256M"}, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["3", str(256 << 20)]

    def test_invalid_memory_size_is_reported(self):
        r = run_python("import torch; torch.ones(1, device='openreg')",
                       env={"OPENREG_DEVICE_MEMORY": "lots"}, timeout=120)
        assert r.returncode == 1
        assert "OPENREG_DEVICE_MEMORY='lots' is invalid" in r.stderr

    def test_zero_devices(self):
        r = run_python("import torch; print(torch.openreg.is_available(), torch.openreg.device_count())",
                       env={"OPENREG_DEVICE_COUNT": "0"}, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["False", "0"]


@pytest.mark.device
@pytest.mark.openreg_only  # torch_openreg's own command
class TestSmi:
    hw_classification = HW.ACCELERATOR

    def test_python_m_torch_openreg(self):
        r = subprocess.run([sys.executable, "-m", "torch_openreg"], capture_output=True, text=True,
                           timeout=120, cwd=REPO)
        assert r.returncode == 0, r.stderr
        assert "OpenReg Simulated Device 0" in r.stdout
        assert "OpenReg Simulated Device 1" in r.stdout
        assert "/ 4096MiB" in r.stdout


@pytest.mark.device
@pytest.mark.openreg_only  # the torch_openreg package and its autoload entry point
class TestAutoload:
    hw_classification = HW.ACCELERATOR

    def test_import_torch_loads_the_backend(self):
        r = run_python("import sys, torch; print('torch_openreg' in sys.modules, torch.device('openreg:1'))",
                       timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["True", "openreg:1"]

    def test_autoload_can_be_disabled(self):
        code = ("import sys, torch\n"
                "print('torch_openreg' in sys.modules, hasattr(torch, 'openreg'))\n"
                "import torch_openreg\n"
                "print(hasattr(torch, 'openreg'), torch.ones(2, device='openreg').device)")
        r = run_python(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split("\n")[:2] == ["False False", "True openreg:0"]

    def test_import_torch_openreg_first(self):
        r = run_python("import torch_openreg, torch; print(torch.ones(1, device='openreg').device)",
                       timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "openreg:0"
