"""Docs cannot drift from code: snippets match marked source regions, and every
Python example in docs/ (and examples/) runs."""

import pathlib
import re
import subprocess
import sys

import pytest
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import docs_snippets  # noqa: E402

DOCS = sorted((ROOT / "docs").glob("*.md"))
PY_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.docs
@pytest.mark.smoke
class TestSnippets:
    hw_classification = HW.GENERIC

    def test_docs_exist(self):
        names = {d.name for d in DOCS}
        assert {"runtime.md", "device.md"} <= names

    @pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
    def test_snippets_match_sources(self, doc):
        problems = docs_snippets.process(doc, write=False)
        assert not problems, "\n".join(problems) + "\n(run: python tools/docs_snippets.py)"

    def test_marker_scan_covers_every_component(self):
        # Markers are found in every source file of the repository (any
        # top-level folder, C/C++, Python and CMake), not only in openreg_*.
        files = set(docs_snippets.source_files())
        assert {"openreg_runtime/src/memory.cpp", "openreg_runtime/include/openreg.h",
                "openreg_python/csrc/aten/core/KernelView.h",
                "openreg_python/torch_openreg/openreg/amp.py",
                "benchmarks/eager.py", "examples/demo.py", "CMakeLists.txt",
                "openreg_runtime/CMakeLists.txt"} <= files
        assert not [f for f in files if f.split("/")[0] in {".venv", "build", ".git"}]

    def test_every_marker_region_is_well_formed(self):
        regions = docs_snippets.marked_regions()
        assert regions
        for path, name in regions:
            docs_snippets.region(path, name)  # raises if unterminated or duplicated

    def test_every_marker_region_is_used_by_a_doc(self):
        unused = docs_snippets.unused_regions(DOCS)
        assert not unused, (
            "marked regions that no page of docs/ includes (add them with "
            "'<!-- snippet: PATH#NAME -->' and tools/docs_snippets.py, or drop the marker):\n"
            + "\n".join(unused))


@pytest.mark.docs
class TestExamplesRun:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
    def test_python_blocks_run(self, doc):
        blocks = PY_BLOCK.findall(doc.read_text())
        if not blocks:
            pytest.skip(f"{doc.name} has no Python examples")
        code = "\n\n".join(blocks)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300, cwd=ROOT)
        assert r.returncode == 0, f"{doc.name} examples failed:\n{r.stdout}\n{r.stderr}"


@pytest.mark.docs
class TestReadme:
    hw_classification = HW.ACCELERATOR

    def test_readme_opens_with_the_two_commands(self):
        text = (ROOT / "README.md").read_text()
        first_block = re.search(r"```\n(.*?)```", text, re.S).group(1)
        commands = [l.split("#")[0].strip() for l in first_block.splitlines() if l.strip()]
        assert commands == ["make demo", "make test"]
        ci = (ROOT / ".ci" / "run").read_text()
        assert "make test" in ci

    def test_relative_links_resolve_inside_the_repo(self):
        # The README and docs/ ship with the repository: a link must not point
        # outside it (e.g. to ../shared/) or to a file that does not exist.
        bad = []
        for page in [ROOT / "README.md", *DOCS]:
            text = page.read_text()
            targets = re.findall(r"\]\(([^)\s]+)\)", text)       # [text](target)
            targets += re.findall(r"`(\.\./[^`\s]+)`", text)        # `../path` mentions
            for target in targets:
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue  # a URL or an anchor on the same page
                path = (page.parent / target.split("#")[0]).resolve()
                if ROOT not in path.parents or not path.exists():
                    bad.append(f"{page.relative_to(ROOT)}: {target}")
        assert not bad, "\n".join(bad)

    def test_readme_python_example_runs(self):
        blocks = PY_BLOCK.findall((ROOT / "README.md").read_text())
        assert blocks
        r = subprocess.run([sys.executable, "-c", "\n".join(blocks)], capture_output=True,
                           text=True, timeout=120, cwd=ROOT)
        assert r.returncode == 0, r.stderr


def route_pages():
    """The pages of the integration guide, in docs/index.md's order."""
    text = (ROOT / "docs" / "index.md").read_text()
    block = re.search(r"```\{toctree\}\n:caption: The integration guide\n(.*?)```", text, re.S)
    return [l.strip() for l in block.group(1).splitlines() if l.strip() and not l.startswith(":")]


ROUTE_PARTS = ["What PyTorch expects", "Our code", "What to replace for real hardware",
               "Pitfalls"]


@pytest.mark.docs
class TestRoute:
    """Every page of the guide has the same four parts and says which files it covers."""
    hw_classification = HW.GENERIC

    def test_the_route_is_long(self):
        assert {"runtime", "device", "memory", "streams", "operators", "testing",
                "performance"} <= set(route_pages())

    @pytest.mark.parametrize("page", route_pages())
    def test_four_parts(self, page):
        text = re.sub(r"```.*?```", "", (ROOT / "docs" / f"{page}.md").read_text(), flags=re.S)
        assert re.findall(r"^## (.*)$", text, re.M) == ROUTE_PARTS

    @pytest.mark.parametrize("page", route_pages())
    def test_opens_with_the_files_it_covers(self, page):
        paras = (ROOT / "docs" / f"{page}.md").read_text().split("\n\n")
        assert paras[1].startswith("Files: "), f"{page}.md: the paragraph after the title"
        missing = []
        for path in re.findall(r"`([^`\s]*/[^`\s]*)`", paras[1]):
            m = re.fullmatch(r"(.*)\{(.*)\}(.*)", path)      # OpenRegStream.{h,cpp}
            for p in ([m.group(1) + x + m.group(3) for x in m.group(2).split(",")] if m else [path]):
                if not (ROOT / p).exists():
                    missing.append(p)
        assert not missing, f"{page}.md names files that do not exist: {missing}"
