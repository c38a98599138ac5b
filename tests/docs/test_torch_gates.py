"""The supported torch releases and the version gates (docs/upgrading.md).

The window is declared once (torch-releases.txt); every difference between its
releases is a gate in torch_openreg/torch_gates.py or csrc/TorchGates.h that
names the PyTorch change and dies when the oldest release has it; the gap table
of docs/pytorch-gaps.md has a column per release that agrees with the gates.
"""

import importlib.metadata
import importlib.util
import pathlib
import re

import pytest

from tests._subprocess import REPO
from tests.target import HW, gates

# openreg's own tree and docs (tests/target.py)
pytestmark = pytest.mark.openreg_only

ROOT = pathlib.Path(REPO)
CPP_GATES = ROOT / "openreg_python" / "csrc" / "TorchGates.h"


def cpp_gates():
    """``OPENREG_GATE_<NAME>`` definitions: name -> (major, minor, patch)."""
    text = CPP_GATES.read_text()
    return {m.group(1): (int(m.group(2)), int(m.group(3)), int(m.group(4)))
            for m in re.finditer(r"#define OPENREG_GATE_(\w+) OPENREG_TORCH_AT_LEAST\((\d+), "
                                 r"(\d+), (\d+)\)", text)}


def gap_table():
    """docs/pytorch-gaps.md's table: gap number -> {release column: cell}."""
    text = (ROOT / "docs" / "pytorch-gaps.md").read_text()
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not cells[0].isdigit():
            continue
        rows[int(cells[0])] = dict(zip(header, cells))
    return header, rows


@pytest.mark.docs
class TestTorchWindow:
    hw_classification = HW.GENERIC

    def test_three_releases_newest_first(self):
        g = gates()
        assert len(g.WINDOW) == 3 and list(g.WINDOW) == sorted(g.WINDOW, reverse=True)
        assert len({rel[:2] for rel in g.WINDOW}) == 3, "one patch release per minor release"

    def test_the_running_torch_is_in_the_window(self):
        g = gates()
        assert g.TORCH in g.WINDOW, (g.TORCH, g.WINDOW)

    def test_no_other_file_pins_torch(self):
        # torch-releases.txt is the one place: pyproject.toml's torch
        # requirement comes from it (tools/torch_pin.py), as does the venv's.
        for path in ("requirements-dev.txt", "pyproject.toml", "Makefile"):
            assert not re.search(r"\btorch\s*(==|>=|<=|~=|!=|<|>)\s*\d", (ROOT / path).read_text()), path
        pyproject = (ROOT / "pyproject.toml").read_text()
        assert re.search(r'^dynamic = \["dependencies"\]', pyproject, re.M)
        assert re.search(r'^\[\[tool\.dynamic-metadata\]\]\nprovider = \{ path = "tools", '
                         r'module = "torch_pin" \}\nfield = "dependencies"$', pyproject, re.M)

    def test_the_installed_package_requires_the_torch_it_was_built_against(self):
        g = gates()
        requires = importlib.metadata.requires("torch_openreg")
        assert f"torch=={g.fmt(g.TORCH)}" in requires, requires


def torch_pin():
    """tools/torch_pin.py, loaded by path (it is a build-time module, not a package)."""
    spec = importlib.util.spec_from_file_location("torch_pin", ROOT / "tools" / "torch_pin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.docs
class TestTorchPin:
    """The build's torch requirement, torch==<release>, from the window."""

    hw_classification = HW.GENERIC

    def test_the_window_is_read_from_torch_releases(self):
        pin, g = torch_pin(), gates()
        assert pin.window() == [g.fmt(r) for r in g.WINDOW]

    def test_an_isolated_build_requires_the_newest_or_the_named_release(self):
        pin = torch_pin()
        window = pin.window()
        assert pin.requested({}, window) == window[0]
        assert pin.requested({"TORCH": window[-1]}, window) == window[-1]
        assert pin.get_requires_for_dynamic_metadata({}) == [f"torch=={pin.requested()}"]

    def test_a_release_outside_the_window_is_refused_by_name(self):
        pin = torch_pin()
        window = pin.window()
        with pytest.raises(pin.TorchReleaseError,
                           match=r"TORCH is torch 2\.9\.1, which torch_openreg does not support: "
                                 r"the supported releases are " + re.escape(", ".join(window))):
            pin.requested({"TORCH": "2.9.1"}, window)
        with pytest.raises(pin.TorchReleaseError, match=r"the installed torch is torch 2\.99\.0\+cpu"):
            pin.installed(window, version="2.99.0+cpu")

    def test_the_relay_builds_against_the_torch_under_test(self):
        # tools/relay.py tests a PyTorch outside the window (a nightly): with
        # OPENREG_TORCH_UNLISTED=1 the wheel requires exactly that torch.
        pin = torch_pin()
        window = pin.window()
        nightly = "2.99.0.dev20261201+cpu"
        assert pin.installed(window, version=nightly,
                             environ={pin.UNLISTED_VAR: "1"}) == "2.99.0.dev20261201"
        with pytest.raises(pin.TorchReleaseError, match="does not support"):
            pin.installed(window, version=nightly, environ={pin.UNLISTED_VAR: "0"})

    def test_a_local_version_label_is_not_part_of_the_release(self):
        pin = torch_pin()
        window = pin.window()
        assert pin.installed(window, version=window[-1] + "+cpu") == window[-1]

    def test_an_sdist_names_the_requested_release_and_says_wheels_differ(self, monkeypatch):
        # An sdist is built without torch: it cannot ask the installed one.
        pin = torch_pin()
        other = next(r for r in pin.window() if r != pin.installed())
        monkeypatch.setenv("TORCH", other)
        pin.build_state("sdist")
        assert pin.dynamic_metadata({}, {}) == {"dependencies": [f"torch=={other}"]}
        assert pin.dynamic_wheel({}) == {"dependencies": True}
        pin.build_state("wheel")
        assert pin.dynamic_metadata({}, {}) == {"dependencies": [f"torch=={pin.installed()}"]}

    def test_a_range_in_the_window_file_is_refused(self, tmp_path):
        pin = torch_pin()
        bad = tmp_path / "torch-releases.txt"
        bad.write_text("# newest first\n2.15.0\n>=2.13\n")
        with pytest.raises(pin.TorchReleaseError, match=r"'>=2.13' is not an exact release"):
            pin.window(bad)


@pytest.mark.docs
class TestTorchGates:
    hw_classification = HW.GENERIC

    def test_python_gates_are_live(self):
        g = gates()
        assert g.GATES, "torch_gates.GATES is empty"
        for name, gate in g.GATES.items():
            assert gate.change, name
            # A gate whose change the oldest release has is dead: delete it
            # and the code for the releases before it.
            assert g.OLDEST < gate.since <= g.WINDOW[0], (name, gate.since, g.OLDEST)

    def test_cpp_gates_are_live(self):
        g = gates()
        found = cpp_gates()
        text = CPP_GATES.read_text()
        for name, since in found.items():
            assert g.OLDEST < since <= g.WINDOW[0], (name, since, g.OLDEST)
            # Each names its PyTorch change in the comment right above it.
            block = text[:text.index(f"#define OPENREG_GATE_{name} ")].rsplit("\n\n", 1)[-1]
            assert "PyTorch" in block or "pytorch" in block, (name, block)

    def test_no_version_checks_outside_the_gates(self):
        # Every difference between releases is asked of the gates, never of
        # torch.__version__ or TORCH_VERSION_* directly.
        allowed = {"openreg_python/torch_openreg/torch_gates.py",
                   "openreg_python/csrc/TorchGates.h"}
        py = re.compile(r"__version__\s*[<>=!]=?|[<>=!]=?\s*torch\.__version__|TorchVersion\(|"
                        r"packaging\.version|torch\.version\.__version__\s*[<>=]")
        cpp = re.compile(r"\bTORCH_VERSION_(MAJOR|MINOR|PATCH)\b")
        offenders = []
        for folder in ("openreg_python", "inductor_backend", "occl", "profiler", "openreg_runtime",
                       "tools", "tests", "benchmarks", "examples"):
            for path in (ROOT / folder).rglob("*"):
                rel = str(path.relative_to(ROOT))
                if rel in allowed or not path.is_file() or "__pycache__" in rel:
                    continue
                if path.suffix == ".py" and rel != "tests/docs/test_torch_gates.py":
                    pattern = py
                elif path.suffix in (".h", ".cpp", ".hpp", ".cc"):
                    pattern = cpp
                else:
                    continue
                for i, line in enumerate(path.read_text().splitlines(), 1):
                    if pattern.search(line):
                        offenders.append(f"{rel}:{i}: {line.strip()}")
        assert not offenders, "version checks outside the gates:\n" + "\n".join(offenders)

    def test_gap_table_has_a_column_per_release(self):
        g = gates()
        header, rows = gap_table()
        columns = [g.fmt(rel) for rel in sorted(g.WINDOW)]
        assert all(c in header for c in columns), (header, columns)
        assert rows, "no gap rows"
        for number, row in rows.items():
            for rel in sorted(g.WINDOW):
                want = "gap" if g.has_gap(number, rel) else "fixed"
                assert row[g.fmt(rel)].startswith(want), (number, g.fmt(rel), row[g.fmt(rel)], want)
        for number in list(g.GAPS_FIXED_IN) + list(g.GAPS_NEW_IN):
            assert number in rows, f"gap {number} of torch_gates is not in the table"

    def test_each_gap_entry_says_which_releases_have_it(self):
        g = gates()
        text = (ROOT / "docs" / "pytorch-gaps.md").read_text()
        for number in g.GAPS_FIXED_IN:
            entry = re.search(rf"^### {number}\. .*?(?=^### |\Z)", text, re.M | re.S)
            assert entry, number
            fixed = g.fmt(g.GAPS_FIXED_IN[number])
            assert f"fixed in {fixed}" in entry.group(0), (number, fixed)
