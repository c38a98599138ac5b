"""The conformance suite (openreg_conformance) run against openreg, and its runner's
rules (docs/conformance.md)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

from openreg_conformance import CLASSIFICATIONS
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


def run_conformance(tmp_path, *args, timeout=600):
    junit = tmp_path / "report.xml"
    r = subprocess.run([sys.executable, "-m", "openreg_conformance", "--device", "openreg",
                        "--junit", str(junit), *args], capture_output=True, text=True,
                       cwd=tmp_path, timeout=timeout)
    return r, junit


@pytest.mark.template
class TestConformanceAgainstOpenReg:
    hw_classification = HW.ACCELERATOR

    def test_every_classification_passes(self, tmp_path, capsys):
        r, junit = run_conformance(tmp_path, "--dist-backend", "occl")
        with capsys.disabled():  # the summary table, in CI's log
            print("\n" + r.stdout[r.stdout.index("conformance of"):])
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        cases = list(ET.parse(junit).getroot().iter("testcase"))
        seen = set()
        for case in cases:
            props = {p.get("name"): p.get("value") for p in case.iter("property")}
            assert props["classification"] in CLASSIFICATIONS
            assert props["expectation"]
            seen.add(props["classification"])
        assert seen == set(CLASSIFICATIONS)
        for cls in CLASSIFICATIONS:
            assert f"\n{cls:<15}" in r.stdout

    def test_distributed_skips_without_a_backend_name(self, tmp_path):
        r, junit = run_conformance(tmp_path, "-m", "distributed")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "skipped [distributed] test_collectives_on_the_device: " in r.stdout
        assert "no c10d backend named for the device" in r.stdout

    def test_select_one_classification(self, tmp_path):
        r, junit = run_conformance(tmp_path, "-m", "rng")
        assert r.returncode == 0, r.stdout + r.stderr
        classes = {p.get("value") for p in ET.parse(junit).getroot().iter("property")
                   if p.get("name") == "classification"}
        assert classes == {"rng"}

    def test_a_failure_names_the_expectation(self, tmp_path):
        # A backend that breaks a convention (a plugin removes memory_stats'
        # keys): the runner reports the failing test with the expectation.
        r, junit = run_conformance(tmp_path, "-k", "memory_stats_keys")
        assert r.returncode == 0, r.stdout + r.stderr
        plug = tmp_path / "breakit.py"
        plug.write_text("import torch\n\ndef pytest_sessionstart(session):\n"
                        "    torch.openreg.memory_stats = lambda *a, **k: {}\n")
        env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        r = subprocess.run([sys.executable, "-m", "openreg_conformance", "--device", "openreg",
                            "--junit", str(tmp_path / "b.xml"), "-k", "memory_stats_keys",
                            "-p", "breakit"], capture_output=True, text=True, cwd=tmp_path,
                           env=env, timeout=600)
        assert r.returncode == 1
        assert ("FAILED  [memory] test_memory_stats_keys: PyTorch expectation: memory_stats "
                "keys as torch.cuda") in r.stdout, r.stdout

    def test_every_test_needs_exactly_one_classification(self, tmp_path):
        (tmp_path / "test_x.py").write_text(
            "import pytest\n\n@pytest.mark.rng\n@pytest.mark.ops\n"
            "class TestTwo:\n    def test_a(self):\n        pass\n\n"
            "class TestNone:\n    def test_b(self):\n        pass\n")
        r = subprocess.run([sys.executable, "-m", "pytest", str(tmp_path / "test_x.py"), "-p",
                            "openreg_conformance.plugin", "-c", os.devnull, "--rootdir",
                            str(tmp_path), "--conformance-device", "openreg"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert r.returncode == 4, r.stdout + r.stderr
        assert "exactly one classification" in r.stdout + r.stderr
        assert "TestTwo::test_a" in r.stdout + r.stderr and "TestNone::test_b" in r.stdout + r.stderr

    def test_unknown_device(self, tmp_path):
        r = subprocess.run([sys.executable, "-m", "openreg_conformance", "--device", "nosuchdev",
                            "--junit", str(tmp_path / "n.xml")], capture_output=True, text=True,
                           cwd=tmp_path, timeout=300)
        assert r.returncode != 0
        assert "cannot tell which torch.backends entry point registers 'nosuchdev'" in (
            r.stdout + r.stderr)


PYDEV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pydev", "torch_pydev")


def install_pydev(root) -> dict:
    """tests/template/pydev (a PrivateUse1 backend in Python alone, sharing no code
    with openreg) made importable from ``root`` with its own ``torch.backends``
    entry point, as pip would install it; returns the environment that sees it."""
    shutil.copytree(PYDEV, root / "torch_pydev")
    info = root / "torch_pydev-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-pydev\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_pydev = torch_pydev:_autoload\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(root), os.environ.get("PYTHONPATH")) if p))


@pytest.mark.template
class TestConformanceAgainstAnIndependentBackend:
    hw_classification = HW.ACCELERATOR

    def test_runs_against_pydev_without_loading_openreg(self, tmp_path):
        # pydev is installed next to torch_openreg: the runner must load pydev
        # through its entry point, and openreg never (one PrivateUse1 backend
        # per process), then report pydev's gaps by classification.
        env = install_pydev(tmp_path / "site")
        (tmp_path / "loaded.py").write_text(
            "import json, sys\n\ndef pytest_sessionfinish(session):\n"
            "    import torch\n"
            "    json.dump({'privateuse1': torch._C._get_privateuse1_backend_name(),\n"
            "               'modules': sorted(m for m in sys.modules if m.startswith('torch_'))},\n"
            "              open('loaded.json', 'w'))\n")
        env["PYTHONPATH"] += os.pathsep + str(tmp_path)
        junit = tmp_path / "pydev.xml"
        r = subprocess.run([sys.executable, "-m", "openreg_conformance", "--device", "pydev",
                            "--junit", str(junit), "-p", "loaded"], capture_output=True,
                           text=True, cwd=tmp_path, env=env, timeout=600)
        out = r.stdout + r.stderr
        loaded = json.loads((tmp_path / "loaded.json").read_text())
        assert loaded == {"privateuse1": "pydev", "modules": ["torch_pydev"]}, loaded
        # pydev has no memory statistics, events or generator of its own: the
        # run fails (status 1) and says which expectations, per classification.
        assert r.returncode == 1, out
        rows = {line.split()[0]: [int(v) for v in line.split()[1:]]
                for line in out[out.index("classification"):].splitlines()[1:]
                if line.split() and line.split()[0] in set(CLASSIFICATIONS) | {"total"}}
        assert set(rows) >= {"device", "memory", "ops", "autograd", "total"}, out
        assert rows["device"][1] == 0 and rows["autograd"][1] == 0, out  # what pydev does
        assert rows["memory"][0] == 0 and rows["memory"][1] > 0, out  # what it does not
        assert ("FAILED  [memory] test_memory_stats_keys: PyTorch expectation: memory_stats "
                "keys as torch.cuda") in out
        assert ("FAILED  [streams] test_elapsed_time_needs_timing: PyTorch expectation: An "
                "event's elapsed_time needs enable_timing") in out
        assert "skipped [distributed] test_collectives_on_the_device: no c10d backend" in out
        cases = list(ET.parse(junit).getroot().iter("testcase"))
        assert sum(rows["total"]) == len(cases)
