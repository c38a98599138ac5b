"""tools/scaffold.py: a new backend under its own names, and updates from upstream
(docs/scaffold.md)."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests._subprocess import REPO, make_env
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

ROOT = pathlib.Path(REPO)
TOOL = ROOT / "tools" / "scaffold.py"
LEFTOVER = re.compile(r"(?i:openreg|occl)|\bor[A-Z]\w*|\bOR_[A-Z]")


def scaffold(*args, cwd=ROOT, timeout=300):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def git(*args, cwd):
    r = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
                       capture_output=True, text=True, cwd=cwd, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def leftovers(tree: pathlib.Path):
    found = []
    for path in tree.rglob("*"):
        rel = path.relative_to(tree)
        if rel.parts[0] == ".git" or path.name == "SCAFFOLDED_FROM.json":
            continue
        if LEFTOVER.search(str(rel)):
            found.append(str(rel))
        if path.is_file() and b"\0" not in path.read_bytes():
            for line in path.read_text(errors="replace").splitlines():
                if LEFTOVER.search(line):
                    found.append(f"{rel}: {line.strip()[:100]}")
    return found


@pytest.fixture(scope="module")
def foo_tree(tmp_path_factory):
    dest = tmp_path_factory.mktemp("scaffold") / "torch-foo"
    r = scaffold("new", "--device", "foo", "--dest", str(dest))
    assert r.returncode == 0, r.stderr
    return dest


@pytest.mark.template
class TestScaffoldNew:
    hw_classification = HW.GENERIC

    @pytest.mark.parametrize("name,why", [
        ("Foo", "not a lower-case identifier"), ("1dev", "not a lower-case identifier"),
        ("my-dev", "not a lower-case identifier"), ("class", "Python keyword"),
        ("json", "standard-library module"), ("cuda", "PyTorch's own device types"),
        ("mtia", "PyTorch's own device types"), ("privateuseone", "PyTorch's own device types"),
        ("meta", "PyTorch's own device types"),
    ])
    def test_refuses_bad_device_names(self, tmp_path, name, why):
        r = scaffold("new", "--device", name, "--dest", str(tmp_path / "x"))
        assert r.returncode == 2 and why in r.stderr, r.stderr
        assert not (tmp_path / "x").exists()

    def test_refuses_bad_option_names(self, tmp_path):
        r = scaffold("new", "--device", "foo", "--ccl-name", "foo", "--dest", str(tmp_path / "x"))
        assert r.returncode == 2 and "--ccl-name: 'foo' is already used" in r.stderr
        r = scaffold("new", "--device", "foo", "--api-prefix", "F_", "--dest", str(tmp_path / "x"))
        assert r.returncode == 2 and "--api-prefix" in r.stderr

    def test_refuses_a_non_empty_destination(self, tmp_path):
        (tmp_path / "keep.txt").write_text("mine")
        r = scaffold("new", "--device", "foo", "--dest", str(tmp_path))
        assert r.returncode == 2 and "is not empty" in r.stderr
        assert (tmp_path / "keep.txt").read_text() == "mine"

    def test_a_git_repository_without_the_old_names(self, foo_tree):
        assert git("status", "--porcelain", cwd=foo_tree) == ""
        assert len(git("log", "--format=%H", cwd=foo_tree).split()) == 1
        assert leftovers(foo_tree) == []
        record = json.loads((foo_tree / "SCAFFOLDED_FROM.json").read_text())
        assert record["from"] == {"device": "openreg", "camel": "OpenReg", "ccl": "occl",
                                  "api_prefix": "or"}
        assert record["to"] == {"device": "foo", "camel": "Foo", "ccl": "fccl",
                                "api_prefix": "fo"}
        assert record["commit"] == git("rev-parse", "HEAD", cwd=ROOT).strip()

    def test_everything_is_renamed(self, foo_tree):
        header = (foo_tree / "foo_runtime/include/foo.h").read_text()
        assert "foMalloc(" in header and "FO_MAX_DEVICES" in header and "foStream_t" in header
        assert (foo_tree / "foo_python/torch_foo/__init__.py").exists()
        assert (foo_tree / "foo_python/foo_conformance/__main__.py").exists()
        pyproject = (foo_tree / "pyproject.toml").read_text()
        assert 'torch_foo = "torch_foo:_autoload"' in pyproject
        assert 'name = "torch_foo"' in pyproject
        assert (foo_tree / "fccl/c10d/ProcessGroupFCCL.cpp").exists()
        assert "FOO_DEVICE_COUNT" in (foo_tree / "tests/_subprocess.py").read_text()
        assert 'rename_privateuse1_backend("foo")' in (
            foo_tree / "foo_python/torch_foo/__init__.py").read_text()
        assert "REGISTER_GRAPH_IMPL(FOO," in (foo_tree / "foo_python/csrc/aten/graph/GraphImpl.cpp").read_text()
        # The relay job (docs/ci.md) tests the new backend under its names.
        relay = (foo_tree / "tools/relay.py").read_text()
        assert '"--device", "foo"' in relay and '"--dist-backend", "fccl"' in relay
        assert "job-name: foo-smoke" in (foo_tree / ".github/workflows/relay.yml").read_text()
        # PyTorch's own test files run against the new backend (docs/pytorch-suite.md):
        # the runner takes the backend's name from the interpreter, its settings and
        # expectations from one file under the new names; transformers' spec too.
        assert (foo_tree / "tools/pytorch_suite.py").exists()
        assert '"FOO_DEVICE_MEMORY": "16G"' in (
            foo_tree / "tools/pytorch_suite_expectations.json").read_text()
        assert 'DEVICE_NAME = "foo"' in (
            foo_tree / "foo_python/torch_foo/transformers_device_spec.py").read_text()
        # The generated tree scaffolds under its own names.
        assert 'SELF = {"device": "foo", "camel": "Foo", "ccl": "fccl"' in (
            foo_tree / "tools/scaffold.py").read_text()

    def test_names_from_options(self, tmp_path):
        dest = tmp_path / "t"
        r = scaffold("new", "--device", "npu_sim", "--ccl-name", "hccl_sim", "--api-prefix",
                     "npu", "--dest", str(dest))
        assert r.returncode == 0, r.stderr
        header = (dest / "npu_sim_runtime/include/npu_sim.h").read_text()
        assert "npuMalloc(" in header and "NPU_MAX_DEVICES" in header
        assert (dest / "hccl_sim/c10d/ProcessGroupHCCL_SIM.cpp").exists()
        assert "class NpuSimGraph" in (dest / "npu_sim_python/csrc/aten/graph/GraphImpl.cpp").read_text()
        assert leftovers(dest) == []


@pytest.fixture
def upstream(tmp_path):
    """A clone of this repository (the upstream a vendor follows) and a tree
    scaffolded from it, with one vendor commit."""
    src = tmp_path / "upstream"
    git("clone", "-q", "--no-hardlinks", str(ROOT), str(src), cwd=tmp_path)
    tree = tmp_path / "torch-foo"
    r = scaffold("new", "--device", "foo", "--dest", str(tree), "--source", str(src))
    assert r.returncode == 0, r.stderr
    readme = tree / "README.md"
    lines = readme.read_text().splitlines(keepends=True)
    lines[0] = "# Foo, by a vendor\n"
    readme.write_text("".join(lines))
    (tree / "docs/api.md").unlink()
    git("commit", "-qam", "vendor changes", cwd=tree)
    return src, tree


def commit_upstream(src, edit, add=None):
    readme = src / "README.md"
    lines = readme.read_text().splitlines(keepends=True)
    edit(lines)
    readme.write_text("".join(lines))
    api = src / "docs/api.md"
    api.write_text(api.read_text() + "\nAn upstream line about openreg.\n")
    if add:
        (src / add).write_text("A new page for openreg users (torch.openreg).\n")
        git("add", add, cwd=src)
    git("commit", "-qam", "upstream change", cwd=src)


@pytest.mark.template
class TestScaffoldUpdate:
    hw_classification = HW.GENERIC

    def test_merges_upstream_changes_into_vendor_changes(self, upstream):
        src, tree = upstream

        def edit(lines):
            lines[-1] = lines[-1].rstrip("\n") + " (upstream edit)\n"
        commit_upstream(src, edit, add="docs/new-page.md")
        head = git("rev-parse", "HEAD", cwd=src).strip()
        r = scaffold("update", "--to", "HEAD", cwd=tree)
        assert r.returncode == 0, r.stdout + r.stderr
        readme = (tree / "README.md").read_text()
        assert readme.startswith("# Foo, by a vendor\n")       # the vendor's line
        assert readme.rstrip().endswith("(upstream edit)")      # upstream's, same file
        assert (tree / "docs/new-page.md").read_text() == "A new page for foo users (torch.foo).\n"
        assert not (tree / "docs/api.md").exists()               # deleted by the vendor
        assert "left deleted): docs/api.md" in r.stdout
        assert json.loads((tree / "SCAFFOLDED_FROM.json").read_text())["commit"] == head

    def test_conflicts_are_marked_and_listed(self, upstream):
        src, tree = upstream
        before = (tree / "SCAFFOLDED_FROM.json").read_text()

        def edit(lines):
            lines[0] = "# Upstream's new title\n"
        commit_upstream(src, edit)
        r = scaffold("update", "--to", "HEAD", cwd=tree)
        assert r.returncode == 1
        assert "conflicts (1)" in r.stderr and "  README.md" in r.stderr
        readme = (tree / "README.md").read_text()
        assert "<<<<<<< yours\n# Foo, by a vendor\n" in readme
        assert "# Upstream's new title\n>>>>>>> upstream" in readme
        assert (tree / "SCAFFOLDED_FROM.json").read_text() == before

    def test_a_change_of_the_torch_window_reaches_the_vendor(self, upstream):
        # Upstream adds a release and drops the oldest (docs/upgrading.md's
        # checklist: the window, a gate); the vendor added a
        # gate of their own. The update brings the window and the gate, keeps
        # the vendor's, and the tree's make targets follow the new window.
        src, tree = upstream
        gates_src = src / "openreg_python/torch_openreg/torch_gates.py"
        gates_foo = tree / "foo_python/torch_foo/torch_gates.py"
        gates_foo.write_text(gates_foo.read_text() + "\n# vendor: a gate of the foo SDK\n")
        git("commit", "-qam", "vendor gate", cwd=tree)

        releases = (src / "torch-releases.txt").read_text()
        window = [v for v in releases.splitlines() if v and not v.startswith("#")]
        newest = "%s.%d.0" % (window[0].rsplit(".", 2)[0], int(window[0].split(".")[1]) + 1)
        new_window = [newest] + window[:-1]
        (src / "torch-releases.txt").write_text(
            releases.replace("\n".join(window), "\n".join(new_window)))
        end = "# [docs:" + "torch-gates:end]"  # split: not a marker of this file
        gates_src.write_text(gates_src.read_text().replace(
            end, f"#: upstream: a gate of torch {newest} (torch_openreg names it)\n{end}"))
        git("commit", "-qam", "upstream: torch window", cwd=src)

        r = scaffold("update", "--to", "HEAD", cwd=tree)
        assert r.returncode == 0, r.stdout + r.stderr
        got = [v for v in (tree / "torch-releases.txt").read_text().splitlines()
               if v and not v.startswith("#")]
        assert got == new_window
        gates = gates_foo.read_text()
        assert f"a gate of torch {newest} (torch_foo names it)" in gates
        assert "# vendor: a gate of the foo SDK" in gates
        # The tree's make targets take the new window: the newest by default, a
        # venv and build directory per release, the dropped release refused.
        r = subprocess.run(["make", "-n", "build"], cwd=tree, capture_output=True, text=True,
                           timeout=60, env=make_env())
        assert f".venv/{newest}/bin/pip" in r.stdout and f"build/torch-{newest}" in r.stdout, r
        r = subprocess.run(["make", "-n", "build", f"TORCH={window[1]}"], cwd=tree,
                           capture_output=True, text=True, timeout=60, env=make_env())
        assert f"build-dir=build/torch-{window[1]}" in r.stdout, r
        r = subprocess.run(["make", "-n", "build", f"TORCH={window[-1]}"], cwd=tree,
                           capture_output=True, text=True, timeout=60, env=make_env())
        assert r.returncode != 0 and "is not a supported release" in r.stderr, r

    def test_update_outside_a_generated_tree(self, tmp_path):
        r = scaffold("update", "--to", "HEAD", cwd=tmp_path)
        assert r.returncode == 2 and "no SCAFFOLDED_FROM.json" in r.stderr
