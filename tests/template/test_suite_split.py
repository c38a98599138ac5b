"""The suite's split (tests/target.py): device-generic tests never write the
device's name, openreg-only ones are marked so.

A module, class or function is openreg-only when it carries the
``openreg_only`` marker (``pytestmark`` for a test module, a decorator for a
class or function); a helper module or a worker script that only
openreg-only tests use says so with ``openreg_only = True``. Everywhere else, the check rejects what ties a test to
openreg: a string naming it (``"openreg"``, ``"openreg:1"``,
``"OPENREG_DEVICE_COUNT"``, in any case, docstrings excepted), the module
``torch.openreg`` (``device_module`` is the generic spelling), and imports of
the ``torch_openreg`` package. This covers helper modules and the scripts
that torchrun starts too: they are generic unless marked.
"""

import ast
import pathlib
import re
import subprocess
import sys

import pytest

from tests._subprocess import REPO
from tests.target import HW

# It names openreg to find it.
pytestmark = pytest.mark.openreg_only

TESTS = pathlib.Path(REPO) / "tests"
NAME = "openreg"
MARK = "openreg_only"
# The one place the name is written, and the suite's set-up: the options
# (conftest.py) and child interpreters, which drop openreg's configuration
# variables on request (_subprocess.py).
EXEMPT = {"target.py", "conftest.py", "_subprocess.py"}


def _marked(node) -> bool:
    return any(MARK in ast.unparse(d) for d in getattr(node, "decorator_list", ()))


def _module_marked(tree) -> bool:
    for n in tree.body:
        if not isinstance(n, ast.Assign):
            continue
        names = {getattr(t, "id", None) for t in n.targets}
        if "pytestmark" in names and MARK in ast.unparse(n.value):
            return True
        if MARK in names and ast.unparse(n.value) == "True":
            return True
    return False


def _docstrings(tree):
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def ties_to_openreg(source: str):
    """(line, what) for each place outside openreg-only code that names openreg."""
    tree = ast.parse(source)
    if _module_marked(tree):
        return []
    docstrings = _docstrings(tree)
    found = []

    def visit(node):
        if _marked(node):
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if NAME in node.value.lower() and id(node) not in docstrings:
                found.append((node.lineno, f"the string {node.value[:60]!r}"))
        elif isinstance(node, ast.Attribute) and node.attr == NAME:
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if any(f"torch_{NAME}" in n or f"{NAME}_" in n for n in names):
                found.append((node.lineno, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _files():
    return sorted(p for p in TESTS.rglob("*.py") if p.name not in EXEMPT or p.parent != TESTS)


@pytest.mark.template
class TestSuiteSplit:
    hw_classification = HW.GENERIC

    def test_device_generic_tests_do_not_name_the_device(self):
        offenders = []
        for path in _files():
            for line, what in ties_to_openreg(path.read_text()):
                offenders.append(f"{path.relative_to(REPO)}:{line}: {what}")
        assert not offenders, (
            "device-generic test code names openreg (use tests.target's DEVICE, device(i), "
            "device_module, DIST_BACKEND, or mark the test openreg_only):\n" + "\n".join(offenders)
        )

    def test_the_check_finds_each_kind_of_tie(self):
        source = (
            "import torch\n"
            "from torch_openreg.testing import recorded_kernels\n"
            "class TestA:\n"
            "    '''openreg in a docstring is fine'''\n"
            "    def test(self):\n"
            "        torch.ones(1, device='openreg:1')\n"
            "        torch.openreg.synchronize()\n"
            "        env = {'OPENREG_DEVICE_COUNT': '2'}\n"
            "@pytest.mark.openreg_only\n"
            "class TestB:\n"
            "    def test(self):\n"
            "        torch.openreg.synchronize()\n"
        )
        lines = [line for line, _ in ties_to_openreg(source)]
        assert lines == [2, 6, 7, 8]
        assert ties_to_openreg("import pytest\npytestmark = [pytest.mark.openreg_only]\n"
                               "x = 'openreg'\n") == []
        assert ties_to_openreg("openreg_only = True\nx = 'openreg'\n") == []

    def test_openreg_only_tests_are_deselected_for_another_device(self):
        from tests._subprocess import run_python
        r = run_python(
            "import sys, pytest\n"
            "sys.exit(pytest.main(['tests/template/test_suite_split.py', '--device', 'nosuchdev',"
            " '--collect-only', '-q', '-p', 'no:cacheprovider']))\n",
            timeout=120)
        assert re.search(r"\b7 deselected", r.stdout), r.stdout + r.stderr

    def test_exactly_one_component_marker_per_test(self, tmp_path):
        # This suite's own rule (tests/conftest.py), applied to a file with a
        # class that has two components and one that has none.
        (tmp_path / "test_x.py").write_text(
            "import pytest\n\n@pytest.mark.device\n@pytest.mark.ops\n"
            "class TestTwo:\n    def test_a(self):\n        pass\n\n"
            "class TestNone:\n    def test_b(self):\n        pass\n\n"
            "@pytest.mark.ops\nclass TestOne:\n    def test_c(self):\n        pass\n")
        r = subprocess.run(
            [sys.executable, "-m", "pytest", str(tmp_path / "test_x.py"), "-p", "tests.conftest",
             "-c", str(pathlib.Path(REPO) / "pyproject.toml"), "--rootdir", str(tmp_path),
             "-p", "no:cacheprovider", "--collect-only", "-q"],
            capture_output=True, text=True, cwd=REPO, timeout=120)
        out = r.stdout + r.stderr
        assert r.returncode == 4, out
        assert "tests without a component marker: test_x.py::TestNone::test_b" in out, out
        assert "tests with more than one component marker: test_x.py::TestTwo::test_a " \
               "(device, ops)" in out, out
        error = next(line for line in out.splitlines() if "component marker" in line)
        assert "TestOne" not in error


@pytest.mark.template
class TestHardwareClassification:
    """PyTorch's hardware classification (torch.testing's HardwareClassification,
    2.14 on; the version gates' twin on 2.13) on every test class, and
    ``--hw-classification`` selecting as PyTorch's runner does."""

    hw_classification = HW.GENERIC

    def _collect(self, tmp_path, *args):
        return subprocess.run(
            [sys.executable, "-m", "pytest", *args, "-p", "tests.conftest",
             "-c", str(pathlib.Path(REPO) / "pyproject.toml"), "--rootdir", str(tmp_path),
             "-p", "no:cacheprovider", "--collect-only", "-q"],
            capture_output=True, text=True, cwd=REPO, timeout=120)

    def test_every_class_declares_one(self, tmp_path):
        (tmp_path / "test_x.py").write_text(
            "import pytest\nfrom tests.target import HW\n\n"
            "@pytest.mark.ops\nclass TestNone:\n    def test_a(self):\n        pass\n\n"
            "@pytest.mark.ops\nclass TestWrong:\n    hw_classification = 'accelerator'\n\n"
            "    def test_b(self):\n        pass\n\n"
            "@pytest.mark.ops\nclass TestRight:\n    hw_classification = HW.ACCELERATOR\n\n"
            "    def test_c(self):\n        pass\n")
        r = self._collect(tmp_path, str(tmp_path / "test_x.py"))
        out = r.stdout + r.stderr
        assert r.returncode == 4, out
        error = next(line for line in out.splitlines() if "hardware classification" in line)
        assert "test_x.TestNone" in error and "test_x.TestWrong" in error, error
        assert "TestRight" not in error

    def test_selection_through_torchs_filter(self, tmp_path):
        (tmp_path / "test_y.py").write_text(
            "import pytest\nfrom tests.target import HW\n\n"
            "@pytest.mark.ops\nclass TestAcc:\n    hw_classification = HW.ACCELERATOR\n\n"
            "    def test_a(self):\n        pass\n\n    def test_b(self):\n        pass\n\n"
            "@pytest.mark.docs\nclass TestGen:\n    hw_classification = HW.GENERIC\n\n"
            "    def test_c(self):\n        pass\n")
        r = self._collect(tmp_path, str(tmp_path / "test_y.py"), "--hw-classification",
                          "accelerator")
        out = r.stdout + r.stderr
        assert r.returncode == 0, out
        # The summary line is torch's own (filter_by_hw_classification), or its twin.
        assert "HW classification mode active (['ACCELERATOR']): total=3, passed=2," in out, out
        assert "test_y.py::TestAcc::test_a" in out and "TestGen" not in out.split("deselected")[0]
        assert "1 deselected" in out
        r = self._collect(tmp_path, str(tmp_path / "test_y.py"), "--hw-classification", "NPU")
        assert r.returncode == 4 and "--hw-classification: unknown NPU" in r.stdout + r.stderr

    def test_the_suite_is_classified(self):
        # Collection itself enforces it (tests/conftest.py): the whole suite
        # collects, and GENERIC selects the classes that use no device.
        from tests._subprocess import run_python
        r = run_python(
            "import sys, pytest\n"
            "sys.exit(pytest.main(['tests', '--hw-classification', 'GENERIC', '--collect-only',"
            " '-q', '-p', 'no:cacheprovider']))\n", timeout=300)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out[-3000:]
        classes = {line.split("::")[1] for line in r.stdout.splitlines() if "::" in line}
        assert classes == {"TestSnippets", "TestRoute", "TestBuild", "TestDocstrings",
                           "TestInBrowser", "TestScaffoldNew", "TestScaffoldUpdate",
                           "TestSuiteSplit", "TestHardwareClassification", "TestTorchWindow",
                           "TestTorchPin", "TestTorchGates", "TestTriage", "TestReport",
                           "TestWorkflow", "TestRerun", "TestRun", "TestResolve",
                           "TestLeftBehindCheck", "TestCiReport", "TestTwins",
                           "TestExpectations", "TestGlueLayout"}, classes
