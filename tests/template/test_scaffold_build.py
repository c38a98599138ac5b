"""A scaffolded backend builds, passes its own smoke subset and its conformance suite,
and refuses to share a process with this one (docs/scaffold.md). One slow test: it
builds the whole generated tree."""

import os
import pathlib
import re
import subprocess
import sys
import sysconfig

import pytest

from tests._subprocess import make_env
from tests.template.test_scaffold import ROOT, leftovers, scaffold
from tests.target import HW, gates

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

BUILD_TIMEOUT = 1800
# Device-generic test files of this repository run against the scaffolded foo
# (docs/testing.md): one or more per component, about 70 s of tests.
GENERIC_SLICE = ["tests/device/test_devices.py", "tests/device/test_apis.py",
                 "tests/device/test_streams.py", "tests/device/test_memory.py",
                 "tests/device/test_serialization.py", "tests/ops/test_tensor_basics.py",
                 "tests/ops/test_autograd.py", "tests/ops/test_amp.py", "tests/ops/test_rng.py",
                 "tests/model/test_training.py", "tests/profiler/test_profiler.py",
                 "tests/distributed/test_collectives.py", "tests/graphs/test_graphs.py",
                 "tests/distributed/test_graph_capture.py"]


def isolated_venv(path: pathlib.Path, hide=("torch_openreg", "openreg_conformance")):
    """A venv that sees this venv's packages (torch, pytest, the build tools) except
    this backend's: what a machine with only the new backend installed has."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   timeout=300)
    ours = pathlib.Path(sysconfig.get_paths()["purelib"])
    theirs = path / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for entry in ours.iterdir():
        if entry.name.startswith(hide) or entry.name == "__pycache__":
            continue
        (theirs / entry.name).symlink_to(entry)
    bin_dir = pathlib.Path(sys.executable).parent
    for tool in ("cmake", "ninja", "ctest", "ccache"):
        if (bin_dir / tool).exists():
            (path / "bin" / tool).symlink_to(bin_dir / tool)
    pip = path / "bin" / "pip"
    pip.write_text(f'#!/bin/sh\nexec "{path}/bin/python" -m pip "$@"\n')
    pip.chmod(0o755)
    return theirs


def run(cmd, cwd, env, timeout):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return r


@pytest.mark.template
@pytest.mark.slow
class TestScaffoldedBackend:
    hw_classification = HW.ACCELERATOR

    def test_builds_passes_its_smoke_and_conformance(self, tmp_path, capsys):
        tree = tmp_path / "torch-foo"
        r = scaffold("new", "--device", "foo", "--dest", str(tree))
        assert r.returncode == 0, r.stderr
        assert leftovers(tree) == []
        venv = tmp_path / "venv"
        site = isolated_venv(venv)
        # The venv is ready: its dependencies are this venv's (no download).
        (venv / ".deps-stamp").touch()
        env = {k: v for k, v in make_env().items()
               if not k.startswith(("OPENREG_", "PYTEST_", "PYTHONPATH"))}
        # The release of the running torch: foo's build directory is named after it.
        release = gates().fmt(gates().TORCH)
        # ccache's base is the test's folder, not foo's tree: the venv beside the
        # tree is on the include path, and the folder's name changes every run
        # (the Makefile's base, the tree, would leave it absolute: every compile
        # a miss).
        make = ["make", f"VENV={venv}", f"TORCH={release}", f"CCACHE_BASEDIR={tmp_path}"]

        r = run(make + ["build"], tree, env, BUILD_TIMEOUT)
        assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
        assert not list(site.glob("torch_openreg*"))

        r = run(make + ["smoke", "PYTEST_ARGS=-q -p no:cacheprovider"], tree, env, 900)
        tail = (r.stdout + r.stderr)[-4000:]
        assert r.returncode == 0, tail
        assert re.search(r"\d+ passed", r.stdout), tail

        r = run([str(venv / "bin/python"), "-m", "foo_conformance", "--device", "foo",
                 "--dist-backend", "fccl", "--junit", str(tmp_path / "foo.xml")], tmp_path,
                env, 900)
        with capsys.disabled():
            print("\n" + r.stdout[r.stdout.find("conformance of"):])
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        assert "conformance of 'foo'" in r.stdout
        assert re.search(r"\ntotal\s+33\s+0\s+0", r.stdout), r.stdout

        # This repository's own device-generic tests, pointed at foo through
        # tests/target.py (--device), in foo's environment: none of them may
        # need torch_openreg or name openreg; the openreg-only ones are deselected.
        r = run([str(venv / "bin/python"), "-m", "pytest", *GENERIC_SLICE, "--device", "foo",
                 "--dist-backend", "fccl", "-q", "-p", "no:cacheprovider"], ROOT, env, 900)
        tail = (r.stdout + r.stderr)[-4000:]
        with capsys.disabled():
            print("\nthis repository's generic tests against foo: " + r.stdout.strip().splitlines()[-1])
        assert r.returncode == 0, tail
        assert re.search(r"\d+ passed", r.stdout) and "deselected" in r.stdout, tail

        # Both backends in one environment: import torch says what to do.
        ours = pathlib.Path(sysconfig.get_paths()["purelib"])
        for entry in ours.glob("torch_openreg*"):
            (site / entry.name).symlink_to(entry)
        r = run([str(venv / "bin/python"), "-c", "import torch"], tmp_path, env, 300)
        assert r.returncode != 0
        msg = r.stderr
        assert "Only one PrivateUse1 backend can live in a process" in msg, msg[-3000:]
        assert "torch_foo" in msg and "torch_openreg" in msg
        assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in msg
