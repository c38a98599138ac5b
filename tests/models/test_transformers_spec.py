"""transformers' own test utilities on openreg through the device spec the
package ships (torch_openreg/transformers_device_spec.py, docs/pytorch-suite.md,
"Hugging Face's tests"): transformers.testing_utils, imported with
TRANSFORMERS_TEST_DEVICE_SPEC, TRANSFORMERS_TEST_DEVICE and
TRANSFORMERS_TEST_BACKEND set as a user sets them, seeds, counts, measures,
empties and synchronises the device through its backend_* functions."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests._subprocess import REPO, child_env
from tests.target import HW

# The spec is openreg's own file (tests/target.py).
pytestmark = pytest.mark.openreg_only

CHILD = textwrap.dedent("""
    import json
    import torch
    from transformers import testing_utils as tu

    d = tu.torch_device
    out = {"device": d, "count": tu.backend_device_count(d),
           "device_count": torch.openreg.device_count()}
    tu.backend_manual_seed(d, 7)
    a = torch.randn(8, device=d).cpu()
    tu.backend_manual_seed(d, 7)
    b = torch.randn(8, device=d).cpu()
    out["seeded"] = torch.equal(a, b)
    tu.backend_reset_peak_memory_stats(d)
    before = tu.backend_memory_allocated(d)
    x = torch.empty(1 << 20, device=d)
    out["allocated"] = tu.backend_memory_allocated(d) - before
    out["peak"] = tu.backend_max_memory_allocated(d) - before
    del x
    tu.backend_empty_cache(d)
    out["reserved_after_empty_cache"] = torch.openreg.memory_reserved()
    torch.openreg._sleep(20000)
    tu.backend_synchronize(d)
    out["idle_after_synchronize"] = torch.openreg.current_stream().query()
    out["accelerator_module"] = tu.backend_torch_accelerator_module(d) is torch.openreg

    @tu.require_torch_accelerator
    def needs_an_accelerator():
        return "ran"

    out["accelerator_test"] = needs_an_accelerator()
    import transformers_device_spec as spec
    out["filled"] = spec.FILLED
    print("RESULT " + json.dumps(out))
""")


@pytest.mark.models
class TestTransformersDeviceSpec:
    hw_classification = HW.ACCELERATOR

    def test_testing_utils_through_the_spec(self, tmp_path):
        pytest.importorskip("transformers")
        path = subprocess.run([sys.executable, "-m", "torch_openreg.transformers_device_spec"],
                              capture_output=True, text=True, timeout=300, check=True,
                              cwd=tmp_path).stdout.strip()
        assert path.endswith("transformers_device_spec.py") and os.path.isfile(path)
        # transformers imports the spec by its bare name: a file of the cwd.
        os.symlink(path, tmp_path / "transformers_device_spec.py")
        env = child_env({"TRANSFORMERS_TEST_DEVICE_SPEC": "transformers_device_spec.py",
                         "TRANSFORMERS_TEST_DEVICE": "openreg",
                         "TRANSFORMERS_TEST_BACKEND": "torch_openreg",
                         "PYTHONPATH": REPO})
        r = subprocess.run([sys.executable, "-c", CHILD], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        out = json.loads(r.stdout.split("RESULT ", 1)[1])
        assert out["device"] == "openreg"
        assert out["count"] == out["device_count"] >= 1
        assert out["seeded"]
        assert out["allocated"] == 4 << 20 and out["peak"] >= 4 << 20
        assert out["reserved_after_empty_cache"] == 0
        assert out["idle_after_synchronize"]
        assert out["accelerator_module"] and out["accelerator_test"] == "ran"
        # transformers (5.25.0) reads only the seed, cache and count functions
        # from a spec: the spec fills the memory and synchronisation tables
        # itself. A transformers that reads them leaves nothing to fill, and
        # this fails: then the workaround and its docs entry go.
        assert out["filled"] == ["BACKEND_MEMORY_ALLOCATED", "BACKEND_MAX_MEMORY_ALLOCATED",
                                 "BACKEND_RESET_PEAK_MEMORY_STATS",
                                 "BACKEND_RESET_MAX_MEMORY_ALLOCATED", "BACKEND_SYNCHRONIZE",
                                 "BACKEND_TORCH_ACCELERATOR_MODULE"]

    def test_a_spec_path_with_a_directory_is_refused(self, tmp_path):
        """The transformers gap the symlink works around: testing_utils imports
        ``path[:path.index('.py')]`` as a module name, so a path with a
        directory in it is not found (docs/pytorch-suite.md). When this test
        fails, transformers takes paths: the docs' symlink step can go."""
        pytest.importorskip("transformers")
        import torch_openreg.transformers_device_spec as spec

        env = child_env({"TRANSFORMERS_TEST_DEVICE_SPEC": spec.__file__,
                         "TRANSFORMERS_TEST_DEVICE": "openreg"})
        r = subprocess.run([sys.executable, "-c", "import transformers.testing_utils"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode != 0
        # the path up to '.py', taken as a dotted module name
        assert "ModuleNotFoundError: No module named '/" in r.stderr
